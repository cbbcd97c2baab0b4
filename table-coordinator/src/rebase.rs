//! A round's schema rebased onto the table's current schema at commit time.
//!
//! The worker converts with the schema it last saw, and other engines change the table in the
//! meantime: Spark's or pyiceberg's `ADD COLUMN`, a rename, a widened type, a dropped column.
//! Committing the round's schema as it is would revert those changes. Instead the commit
//! takes the table's current schema and adds what the round changed:
//! - columns the round added (ids the table has never had) go in, at the end of their struct;
//! - a type the round widened (int → long, float → double, a larger decimal precision) and a
//!   column the round made optional are applied;
//! - everything else is the table's: its columns the round lacks, its names (a rename keeps
//!   the id, and files are read by id), its wider types, its docs and defaults.
//!
//! Invariants:
//! - The result never drops, renames or narrows anything of the current schema, so another
//!   engine's change is never reverted.
//! - Field ids mean one thing: a column the round added must have an id above the table's
//!   `last-column-id` (ids are never reused), and no current column may share its name.
//!   Otherwise, and when one id has two incompatible types, the round's files cannot be
//!   described by the table's schema: [`rebase`] refuses, and the coordinator converts the
//!   round again from the table as it is now.

use std::sync::Arc;

use iceberg::spec::{ListType, MapType, NestedField, PrimitiveType, Schema, StructType, Type};

/// The schema to commit `round`'s files under, given the table's `current` schema and
/// `last-column-id`: None when `current` already describes them (nothing to change), or the
/// fields of the evolved schema. Errors name why the files do not fit the table.
///
/// `base_column_id` is the `last-column-id` of the table the worker's ids build on: ids above
/// it are the worker's own. One of those that the table holds under another name was given
/// out by another engine meanwhile, and the round's files would fill its column.
pub(crate) fn rebase(
    current: &Schema,
    round: &Schema,
    last_column_id: i32,
    base_column_id: i32,
) -> Result<Option<StructType>, String> {
    let mut changed = false;
    let ids = Ids {
        last: last_column_id,
        base: base_column_id,
    };
    let merged = merge_struct(current.as_struct(), round.as_struct(), ids, &mut changed)?;
    Ok(changed.then_some(merged))
}

/// The table's `last-column-id`, and the one the round's ids build on.
#[derive(Debug, Clone, Copy)]
struct Ids {
    last: i32,
    base: i32,
}

fn merge_struct(
    current: &StructType,
    round: &StructType,
    ids: Ids,
    changed: &mut bool,
) -> Result<StructType, String> {
    let mut fields = Vec::with_capacity(current.fields().len());
    for c in current.fields() {
        match round.fields().iter().find(|r| r.id == c.id) {
            Some(r) => fields.push(Arc::new(merge_field(c, r, ids, changed)?)),
            // Another engine's column, or one the round's records do not have: kept.
            None => fields.push(c.clone()),
        }
    }
    for r in round.fields() {
        if current.fields().iter().any(|c| c.id == r.id) {
            continue;
        }
        let lowest = lowest_id(r);
        if lowest <= ids.last {
            return Err(format!(
                "the round's column {} uses field id {lowest}, which the table already gave out (its last column id is {})",
                r.name, ids.last
            ));
        }
        if let Some(c) = current.fields().iter().find(|c| c.name == r.name) {
            return Err(format!(
                "the round adds a column {} (id {}), but the table has a column of that name (id {})",
                r.name, r.id, c.id
            ));
        }
        *changed = true;
        fields.push(r.clone());
    }
    Ok(StructType::new(fields))
}

fn merge_field(
    current: &NestedField,
    round: &NestedField,
    ids: Ids,
    changed: &mut bool,
) -> Result<NestedField, String> {
    if current.name != round.name && round.id > ids.base {
        return Err(format!(
            "field id {} is the round's new column {}, but the table's column {}: another engine gave the id out meanwhile",
            round.id, round.name, current.name
        ));
    }
    let ty = merge_type(
        &current.name,
        &current.field_type,
        &round.field_type,
        ids,
        changed,
    )?;
    let mut f = current.clone();
    f.field_type = Box::new(ty);
    if current.required && !round.required {
        f.required = false;
        *changed = true;
    }
    Ok(f)
}

fn merge_type(
    name: &str,
    current: &Type,
    round: &Type,
    ids: Ids,
    changed: &mut bool,
) -> Result<Type, String> {
    let clash =
        || format!("column {name} is {current} in the table and {round} in the round's files");
    match (current, round) {
        (Type::Primitive(c), Type::Primitive(r)) => {
            if c == r || promotes(r, c) {
                Ok(current.clone())
            } else if promotes(c, r) {
                *changed = true;
                Ok(round.clone())
            } else {
                Err(clash())
            }
        }
        (Type::Struct(c), Type::Struct(r)) => Ok(Type::Struct(merge_struct(c, r, ids, changed)?)),
        (Type::List(c), Type::List(r)) if c.element_field.id == r.element_field.id => {
            Ok(Type::List(ListType {
                element_field: Arc::new(merge_field(
                    &c.element_field,
                    &r.element_field,
                    ids,
                    changed,
                )?),
            }))
        }
        (Type::Map(c), Type::Map(r))
            if c.key_field.id == r.key_field.id && c.value_field.id == r.value_field.id =>
        {
            Ok(Type::Map(MapType {
                key_field: Arc::new(merge_field(&c.key_field, &r.key_field, ids, changed)?),
                value_field: Arc::new(merge_field(&c.value_field, &r.value_field, ids, changed)?),
            }))
        }
        _ => Err(clash()),
    }
}

/// Whether Iceberg reads a `from` column as `to` (the type promotions of the table spec).
fn promotes(from: &PrimitiveType, to: &PrimitiveType) -> bool {
    match (from, to) {
        (PrimitiveType::Int, PrimitiveType::Long) => true,
        (PrimitiveType::Float, PrimitiveType::Double) => true,
        (
            PrimitiveType::Decimal {
                precision: p1,
                scale: s1,
            },
            PrimitiveType::Decimal {
                precision: p2,
                scale: s2,
            },
        ) => s1 == s2 && p1 < p2,
        _ => false,
    }
}

/// The lowest field id in `field` and everything nested in it.
fn lowest_id(field: &NestedField) -> i32 {
    let nested = match field.field_type.as_ref() {
        Type::Primitive(_) => None,
        Type::Struct(s) => s.fields().iter().map(|f| lowest_id(f)).min(),
        Type::List(l) => Some(lowest_id(&l.element_field)),
        Type::Map(m) => Some(lowest_id(&m.key_field).min(lowest_id(&m.value_field))),
    };
    nested.map_or(field.id, |n| n.min(field.id))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opt(id: i32, name: &str, t: PrimitiveType) -> Arc<NestedField> {
        Arc::new(NestedField::optional(id, name, Type::Primitive(t)))
    }

    fn req(id: i32, name: &str, t: PrimitiveType) -> Arc<NestedField> {
        Arc::new(NestedField::required(id, name, Type::Primitive(t)))
    }

    fn schema(fields: Vec<Arc<NestedField>>) -> Schema {
        Schema::builder()
            .with_fields(fields)
            .build()
            .expect("schema")
    }

    fn names(s: &StructType) -> Vec<(i32, String)> {
        s.fields().iter().map(|f| (f.id, f.name.clone())).collect()
    }

    #[test]
    fn another_engines_changes_are_kept_and_nothing_is_committed_for_them() {
        let round = schema(vec![
            req(1, "id", PrimitiveType::Int),
            opt(2, "name", PrimitiveType::String),
        ]);
        // Spark added `note`, renamed `name` to `full_name` and widened `id`.
        let current = schema(vec![
            req(1, "id", PrimitiveType::Long),
            opt(2, "full_name", PrimitiveType::String),
            opt(3, "note", PrimitiveType::String),
        ]);
        assert_eq!(rebase(&current, &round, 3, 2).expect("fits"), None);
    }

    #[test]
    fn the_rounds_additions_go_onto_the_current_schema() {
        let round = schema(vec![
            req(1, "id", PrimitiveType::Long),
            opt(2, "name", PrimitiveType::String),
            opt(4, "email", PrimitiveType::String),
        ]);
        let current = schema(vec![
            req(1, "id", PrimitiveType::Long),
            req(2, "name", PrimitiveType::String),
            opt(3, "note", PrimitiveType::String),
        ]);
        let merged = rebase(&current, &round, 3, 2)
            .expect("fits")
            .expect("changed");
        assert_eq!(
            names(&merged),
            vec![
                (1, "id".to_string()),
                (2, "name".to_string()),
                (3, "note".to_string()),
                (4, "email".to_string())
            ]
        );
        assert!(!merged.fields()[1].required, "the round relaxed name");
    }

    #[test]
    fn widening_by_the_round_is_applied_inside_structs() {
        let inner = |t| {
            Arc::new(NestedField::optional(
                1,
                "s",
                Type::Struct(StructType::new(vec![req(2, "n", t)])),
            ))
        };
        let merged = rebase(
            &schema(vec![inner(PrimitiveType::Int)]),
            &schema(vec![inner(PrimitiveType::Long)]),
            2,
            2,
        )
        .expect("fits")
        .expect("changed");
        let Type::Struct(s) = merged.fields()[0].field_type.as_ref() else {
            panic!("{merged:?}")
        };
        assert_eq!(
            *s.fields()[0].field_type,
            Type::Primitive(PrimitiveType::Long)
        );
    }

    #[test]
    fn ids_the_table_gave_out_and_clashing_names_and_types_are_refused() {
        let current = schema(vec![
            req(1, "id", PrimitiveType::Long),
            opt(3, "note", PrimitiveType::String),
        ]);
        // Id 2 was a column another engine dropped: the table's last column id is 3.
        let reused = schema(vec![
            req(1, "id", PrimitiveType::Long),
            opt(2, "email", PrimitiveType::String),
        ]);
        let e = rebase(&current, &reused, 3, 1).expect_err("a reused id");
        assert!(e.contains("field id 2"), "{e}");
        let named = schema(vec![
            req(1, "id", PrimitiveType::Long),
            opt(4, "note", PrimitiveType::String),
        ]);
        let e = rebase(&current, &named, 3, 3).expect_err("a name taken");
        assert!(e.contains("column of that name"), "{e}");
        let typed = schema(vec![req(1, "id", PrimitiveType::String)]);
        let e = rebase(&current, &typed, 3, 3).expect_err("two types");
        assert!(e.contains("column id is long in the table"), "{e}");
        // The worker, registered at last column id 2, added id 3 as `email`; another engine
        // gave id 3 to `note` meanwhile.
        let collided = schema(vec![
            req(1, "id", PrimitiveType::Long),
            opt(3, "email", PrimitiveType::String),
        ]);
        let e = rebase(&current, &collided, 3, 2).expect_err("one id, two columns");
        assert!(e.contains("another engine gave the id out"), "{e}");
        // Below the base, another name for one id is a rename: the table's name stays.
        let renamed = schema(vec![req(1, "key", PrimitiveType::Long)]);
        assert_eq!(rebase(&current, &renamed, 3, 3).expect("a rename"), None);
    }
}
