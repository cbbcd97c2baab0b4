//! Table schemas and their evolution: reconciling the schema a record was written with (mapped
//! to Iceberg with provisional field ids by the `avro`, `protobuf` or `json` module) with the
//! table's current schema.
//!
//! Invariants:
//! - Field ids are assigned once and never change: a column keeps its id across every
//!   evolution, matched by name at each nesting level; new columns take ids above the table's
//!   highest id.
//! - Only changes Iceberg allows without rewriting data are proposed: add an optional column
//!   (at any level), widen int→long, float→double, decimal precision, and make a required
//!   column optional. Anything else (a type change, a decimal scale change, a struct becoming a
//!   list...) is refused with an error naming the column; the job makes dead letters of that
//!   schema's records rather than corrupt the table or stall it.
//! - Columns the table has but the record's schema lacks stay (new rows hold null there), so a
//!   producer dropping a field never loses history.
//! - Every table has the `_kafka` metadata column (docs/architecture.md, "Schemas and columns"); a payload field of that name
//!   is refused.

use std::sync::Arc;

use iceberg::spec::{
    ListType, MapType, NestedField, NestedFieldRef, PrimitiveType, Schema, StructType, Type,
};

use crate::error::{Error, Result};

/// Name of the Kafka metadata column every table carries.
pub(crate) const KAFKA_COLUMN: &str = "_kafka";

/// One proposed change to a table's schema, for the coordinator to commit.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// A new optional column at `path` (its last element is the column's name).
    AddColumn { path: Vec<String>, field_type: Type },
    /// A column's primitive type widened.
    Widen {
        path: Vec<String>,
        from: PrimitiveType,
        to: PrimitiveType,
    },
    /// A required column becomes optional.
    MakeOptional { path: Vec<String> },
}

/// The outcome of reconciling a record's schema with a table's.
#[derive(Debug, Clone)]
pub struct Evolution {
    /// The table's schema after the changes (the same schema when there are none).
    pub schema: Schema,
    pub changes: Vec<Change>,
}

/// The `_kafka` column's type with ids from `next`: partition, offset, timestamp, key,
/// schema_id.
fn kafka_type(next: &mut i32) -> Type {
    let mut id = || {
        *next += 1;
        *next
    };
    Type::Struct(StructType::new(vec![
        Arc::new(NestedField::required(
            id(),
            "partition",
            Type::Primitive(PrimitiveType::Int),
        )),
        Arc::new(NestedField::required(
            id(),
            "offset",
            Type::Primitive(PrimitiveType::Long),
        )),
        Arc::new(NestedField::required(
            id(),
            "timestamp",
            Type::Primitive(PrimitiveType::Timestamptz),
        )),
        Arc::new(NestedField::optional(
            id(),
            "key",
            Type::Primitive(PrimitiveType::Binary),
        )),
        Arc::new(NestedField::optional(
            id(),
            "schema_id",
            Type::Primitive(PrimitiveType::Int),
        )),
    ]))
}

/// Reconciles `incoming` (a record's schema, value columns only, any ids) with `table` (None:
/// the table does not exist yet). Returns the table schema to write with and the changes it
/// needs, or an error when the record's schema cannot be written to the table.
pub fn reconcile(table: Option<&Schema>, incoming: &Schema) -> Result<Evolution> {
    reconcile_above(table, incoming, 0)
}

/// [`reconcile`], with new columns numbered above `last_column_id` too: the table metadata's
/// `last-column-id`, which stays above the ids of columns another engine dropped (Iceberg
/// never reuses a field id).
pub(crate) fn reconcile_above(
    table: Option<&Schema>,
    incoming: &Schema,
    last_column_id: i32,
) -> Result<Evolution> {
    if incoming.as_struct().field_by_name(KAFKA_COLUMN).is_some() {
        return Err(Error::Schema(format!(
            "the record schema has a field named {KAFKA_COLUMN}, which is reserved for Kafka metadata"
        )));
    }
    let Some(table) = table else {
        // A new table: the `_kafka` column last, and ids as Iceberg gives them to a table it
        // creates, so that creating the table keeps them (see [`fresh_ids`]).
        let mut fields: Vec<NestedFieldRef> = incoming.as_struct().fields().to_vec();
        let mut provisional = 0;
        let kafka = kafka_type(&mut provisional);
        fields.push(Arc::new(NestedField::required(0, KAFKA_COLUMN, kafka)));
        let schema = Schema::builder()
            .with_schema_id(0)
            .with_fields(fresh_ids(&fields))
            .build()?;
        return Ok(Evolution {
            schema,
            changes: Vec::new(),
        });
    };
    let mut r = Reconciler {
        next_id: table.highest_field_id().max(last_column_id),
        changes: Vec::new(),
    };
    let fields = r.merge_struct(&[], table.as_struct(), incoming.as_struct(), true)?;
    if r.changes.is_empty() {
        return Ok(Evolution {
            schema: table.clone(),
            changes: Vec::new(),
        });
    }
    let schema = Schema::builder()
        .with_schema_id(table.schema_id() + 1)
        .with_identifier_field_ids(table.identifier_field_ids())
        .with_fields(fields)
        .build()?;
    Ok(Evolution {
        schema,
        changes: r.changes,
    })
}

/// `fields` (a table's top-level columns) with ids from 1 in the order Iceberg gives them to
/// a table it creates, which renumbers whatever schema it is given: within each struct, its
/// fields first, then what is nested in each of them in turn (a list's element, a map's key
/// then its value, each followed by what is nested in it). A schema numbered so is kept as
/// it is by the catalog's create, so the files of a table's first round fit the table.
pub fn fresh_ids(fields: &[NestedFieldRef]) -> Vec<NestedFieldRef> {
    let mut next = 0;
    fresh_struct(fields, &mut next)
}

fn fresh_struct(fields: &[NestedFieldRef], next: &mut i32) -> Vec<NestedFieldRef> {
    let ids: Vec<i32> = fields
        .iter()
        .map(|_| {
            *next += 1;
            *next
        })
        .collect();
    fields
        .iter()
        .zip(ids)
        .map(|(f, id)| {
            let mut field =
                NestedField::new(id, &f.name, fresh_type(&f.field_type, next), f.required);
            field.doc = f.doc.clone();
            field.initial_default = f.initial_default.clone();
            field.write_default = f.write_default.clone();
            Arc::new(field)
        })
        .collect()
}

fn fresh_type(ty: &Type, next: &mut i32) -> Type {
    match ty {
        Type::Primitive(_) => ty.clone(),
        Type::Struct(s) => Type::Struct(StructType::new(fresh_struct(s.fields(), next))),
        Type::List(l) => {
            *next += 1;
            let id = *next;
            let element = fresh_type(&l.element_field.field_type, next);
            Type::List(ListType::new(Arc::new(NestedField::list_element(
                id,
                element,
                l.element_field.required,
            ))))
        }
        Type::Map(m) => {
            *next += 1;
            let kid = *next;
            let key = fresh_type(&m.key_field.field_type, next);
            *next += 1;
            let vid = *next;
            let value = fresh_type(&m.value_field.field_type, next);
            Type::Map(MapType::new(
                Arc::new(NestedField::map_key_element(kid, key)),
                Arc::new(NestedField::map_value_element(
                    vid,
                    value,
                    m.value_field.required,
                )),
            ))
        }
    }
}

/// `field` with fresh ids from `next` for it and everything nested in it.
pub(crate) fn renumber(field: &NestedField, next: &mut i32) -> NestedField {
    *next += 1;
    let id = *next;
    let ty = renumber_type(&field.field_type, next);
    let mut f = NestedField::new(id, &field.name, ty, field.required);
    f.doc = field.doc.clone();
    f
}

fn renumber_type(ty: &Type, next: &mut i32) -> Type {
    match ty {
        Type::Primitive(_) => ty.clone(),
        Type::Struct(s) => Type::Struct(StructType::new(
            s.fields()
                .iter()
                .map(|f| Arc::new(renumber(f, next)))
                .collect(),
        )),
        Type::List(l) => {
            *next += 1;
            let id = *next;
            let element = renumber_type(&l.element_field.field_type, next);
            Type::List(ListType::new(Arc::new(NestedField::list_element(
                id,
                element,
                l.element_field.required,
            ))))
        }
        Type::Map(m) => {
            *next += 2;
            let (kid, vid) = (*next - 1, *next);
            let key = renumber_type(&m.key_field.field_type, next);
            let value = renumber_type(&m.value_field.field_type, next);
            Type::Map(MapType::new(
                Arc::new(NestedField::map_key_element(kid, key)),
                Arc::new(NestedField::map_value_element(
                    vid,
                    value,
                    m.value_field.required,
                )),
            ))
        }
    }
}

struct Reconciler {
    next_id: i32,
    changes: Vec<Change>,
}

fn path_of(parent: &[String], name: &str) -> Vec<String> {
    let mut p = parent.to_vec();
    p.push(name.to_string());
    p
}

fn show(path: &[String]) -> String {
    path.join(".")
}

impl Reconciler {
    /// The table struct's fields merged with the incoming struct's (by name).
    fn merge_struct(
        &mut self,
        parent: &[String],
        table: &StructType,
        incoming: &StructType,
        top: bool,
    ) -> Result<Vec<NestedFieldRef>> {
        let mut out = Vec::with_capacity(table.fields().len());
        for tf in table.fields() {
            let path = path_of(parent, &tf.name);
            match incoming.field_by_name(&tf.name) {
                Some(inf) => out.push(Arc::new(self.merge_field(&path, tf, inf)?)),
                None if top && tf.name == KAFKA_COLUMN => out.push(tf.clone()),
                None if tf.required => {
                    // The record's schema dropped a required column: new rows hold null.
                    self.changes.push(Change::MakeOptional { path });
                    let mut f = (**tf).clone();
                    f.required = false;
                    out.push(Arc::new(f));
                }
                None => out.push(tf.clone()),
            }
        }
        for inf in incoming.fields() {
            if table.field_by_name(&inf.name).is_none() {
                let path = path_of(parent, &inf.name);
                let mut f = renumber(inf, &mut self.next_id);
                // Rows already in the table have no value here.
                f.required = false;
                self.changes.push(Change::AddColumn {
                    path,
                    field_type: (*f.field_type).clone(),
                });
                out.push(Arc::new(f));
            }
        }
        Ok(out)
    }

    fn merge_field(
        &mut self,
        path: &[String],
        table: &NestedField,
        incoming: &NestedField,
    ) -> Result<NestedField> {
        let ty = self.merge_type(path, &table.field_type, &incoming.field_type)?;
        let mut required = table.required;
        if table.required && !incoming.required {
            self.changes.push(Change::MakeOptional {
                path: path.to_vec(),
            });
            required = false;
        }
        let mut f = NestedField::new(table.id, &table.name, ty, required);
        f.doc = table.doc.clone();
        f.initial_default = table.initial_default.clone();
        f.write_default = table.write_default.clone();
        Ok(f)
    }

    fn merge_type(&mut self, path: &[String], table: &Type, incoming: &Type) -> Result<Type> {
        let refuse = || {
            Error::Schema(format!(
                "column {} would change from {table} to {incoming}, which an Iceberg table cannot evolve to; the table keeps its schema",
                show(path)
            ))
        };
        match (table, incoming) {
            (Type::Primitive(t), Type::Primitive(i)) => match widened(t, i) {
                Some(w) if w == *t => Ok(table.clone()),
                Some(w) => {
                    self.changes.push(Change::Widen {
                        path: path.to_vec(),
                        from: t.clone(),
                        to: w.clone(),
                    });
                    Ok(Type::Primitive(w))
                }
                None => Err(refuse()),
            },
            (Type::Struct(t), Type::Struct(i)) => Ok(Type::Struct(StructType::new(
                self.merge_struct(path, t, i, false)?,
            ))),
            (Type::List(t), Type::List(i)) => {
                let epath = path_of(path, "element");
                let ety = self.merge_type(
                    &epath,
                    &t.element_field.field_type,
                    &i.element_field.field_type,
                )?;
                let mut required = t.element_field.required;
                if required && !i.element_field.required {
                    self.changes.push(Change::MakeOptional { path: epath });
                    required = false;
                }
                Ok(Type::List(ListType::new(Arc::new(
                    NestedField::list_element(t.element_field.id, ety, required),
                ))))
            }
            (Type::Map(t), Type::Map(i)) => {
                if t.key_field.field_type != i.key_field.field_type {
                    return Err(refuse());
                }
                let vpath = path_of(path, "value");
                let vty =
                    self.merge_type(&vpath, &t.value_field.field_type, &i.value_field.field_type)?;
                let mut required = t.value_field.required;
                if required && !i.value_field.required {
                    self.changes.push(Change::MakeOptional { path: vpath });
                    required = false;
                }
                Ok(Type::Map(MapType::new(
                    t.key_field.clone(),
                    Arc::new(NestedField::map_value_element(
                        t.value_field.id,
                        vty,
                        required,
                    )),
                )))
            }
            _ => Err(refuse()),
        }
    }
}

/// The type a column of type `table` must have to hold values of type `incoming`: `table`
/// itself when it already can, a promotion Iceberg allows, or None.
fn widened(table: &PrimitiveType, incoming: &PrimitiveType) -> Option<PrimitiveType> {
    use PrimitiveType as P;
    match (table, incoming) {
        (t, i) if t == i => Some(t.clone()),
        (P::Long, P::Int) | (P::Double, P::Float) => Some(table.clone()),
        (P::Int, P::Long) => Some(P::Long),
        (P::Float, P::Double) => Some(P::Double),
        (
            P::Decimal {
                precision: tp,
                scale: ts,
            },
            P::Decimal {
                precision: ip,
                scale: is,
            },
        ) if ts == is => Some(P::Decimal {
            precision: (*tp).max(*ip),
            scale: *ts,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opt(id: i32, name: &str, t: PrimitiveType) -> NestedFieldRef {
        Arc::new(NestedField::optional(id, name, Type::Primitive(t)))
    }

    fn req(id: i32, name: &str, t: PrimitiveType) -> NestedFieldRef {
        Arc::new(NestedField::required(id, name, Type::Primitive(t)))
    }

    fn schema(fields: Vec<NestedFieldRef>) -> Schema {
        Schema::builder()
            .with_fields(fields)
            .build()
            .expect("schema")
    }

    fn new_table(fields: Vec<NestedFieldRef>) -> Schema {
        reconcile(None, &schema(fields)).expect("new table").schema
    }

    #[test]
    fn a_new_table_gets_ids_from_one_top_level_first_and_the_kafka_column() {
        let s = new_table(vec![
            req(7, "id", PrimitiveType::Long),
            Arc::new(NestedField::optional(
                9,
                "tags",
                Type::List(ListType::new(Arc::new(NestedField::list_element(
                    10,
                    Type::Primitive(PrimitiveType::String),
                    true,
                )))),
            )),
        ]);
        let names: Vec<_> = s
            .as_struct()
            .fields()
            .iter()
            .map(|f| (f.id, f.name.clone()))
            .collect();
        // Top-level columns first, then what is nested in each, as a catalog's create numbers
        // them: the list's element is 4, `_kafka`'s fields 5 to 9.
        assert_eq!(
            names,
            vec![(1, "id".into()), (2, "tags".into()), (3, "_kafka".into())]
        );
        assert_eq!(s.field_by_name("tags.element").map(|f| f.id), Some(4));
        assert_eq!(s.field_by_name("_kafka.partition").map(|f| f.id), Some(5));
        assert_eq!(s.highest_field_id(), 9);
        let kafka = s.field_by_name("_kafka.offset").expect("offset");
        assert_eq!(*kafka.field_type, Type::Primitive(PrimitiveType::Long));
    }

    #[test]
    fn unchanged_schemas_propose_nothing_and_keep_ids() {
        let table = new_table(vec![req(1, "id", PrimitiveType::Long)]);
        // The same record schema with other provisional ids.
        let e = reconcile(
            Some(&table),
            &schema(vec![req(42, "id", PrimitiveType::Long)]),
        )
        .expect("reconcile");
        assert!(e.changes.is_empty());
        assert_eq!(e.schema, table);
        // A narrower incoming type fits the wider column: nothing to change.
        let table = new_table(vec![req(1, "n", PrimitiveType::Long)]);
        let e = reconcile(Some(&table), &schema(vec![req(1, "n", PrimitiveType::Int)]))
            .expect("int into long");
        assert!(e.changes.is_empty());
    }

    #[test]
    fn added_columns_get_fresh_ids_and_are_optional() {
        let table = new_table(vec![req(1, "id", PrimitiveType::Long)]);
        let top = table.highest_field_id();
        let incoming = schema(vec![
            req(1, "id", PrimitiveType::Long),
            req(2, "address", PrimitiveType::String),
        ]);
        let e = reconcile(Some(&table), &incoming).expect("reconcile");
        assert_eq!(
            e.changes,
            vec![Change::AddColumn {
                path: vec!["address".into()],
                field_type: Type::Primitive(PrimitiveType::String)
            }]
        );
        let added = e.schema.field_by_name("address").expect("added");
        assert_eq!((added.id, added.required), (top + 1, false));
        assert_eq!(e.schema.field_by_name("id").expect("id").id, 1);
        assert_eq!(e.schema.schema_id(), table.schema_id() + 1);
        assert!(e.schema.field_by_name("_kafka").is_some(), "kept");
    }

    #[test]
    fn nested_fields_are_added_inside_their_struct() {
        let inner = |fields| Type::Struct(StructType::new(fields));
        let table = new_table(vec![Arc::new(NestedField::optional(
            1,
            "home",
            inner(vec![opt(2, "city", PrimitiveType::String)]),
        ))]);
        let city_id = table.field_by_name("home.city").expect("city").id;
        let e = reconcile(
            Some(&table),
            &schema(vec![Arc::new(NestedField::optional(
                1,
                "home",
                inner(vec![
                    opt(2, "city", PrimitiveType::String),
                    opt(3, "zip", PrimitiveType::String),
                ]),
            ))]),
        )
        .expect("reconcile");
        assert_eq!(
            e.changes,
            vec![Change::AddColumn {
                path: vec!["home".into(), "zip".into()],
                field_type: Type::Primitive(PrimitiveType::String)
            }]
        );
        assert_eq!(
            e.schema.field_by_name("home.city").expect("city").id,
            city_id
        );
        assert!(e.schema.field_by_name("home.zip").expect("zip").id > table.highest_field_id());
    }

    #[test]
    fn widening_and_relaxing() {
        let table = new_table(vec![
            req(1, "n", PrimitiveType::Int),
            req(2, "x", PrimitiveType::Float),
            req(
                3,
                "d",
                PrimitiveType::Decimal {
                    precision: 9,
                    scale: 2,
                },
            ),
            req(4, "gone", PrimitiveType::String),
            req(5, "maybe", PrimitiveType::String),
        ]);
        let e = reconcile(
            Some(&table),
            &schema(vec![
                req(1, "n", PrimitiveType::Long),
                req(2, "x", PrimitiveType::Double),
                req(
                    3,
                    "d",
                    PrimitiveType::Decimal {
                        precision: 18,
                        scale: 2,
                    },
                ),
                opt(5, "maybe", PrimitiveType::String),
            ]),
        )
        .expect("reconcile");
        let p = |s: &str| vec![s.to_string()];
        assert_eq!(
            e.changes,
            vec![
                Change::Widen {
                    path: p("n"),
                    from: PrimitiveType::Int,
                    to: PrimitiveType::Long
                },
                Change::Widen {
                    path: p("x"),
                    from: PrimitiveType::Float,
                    to: PrimitiveType::Double
                },
                Change::Widen {
                    path: p("d"),
                    from: PrimitiveType::Decimal {
                        precision: 9,
                        scale: 2
                    },
                    to: PrimitiveType::Decimal {
                        precision: 18,
                        scale: 2
                    }
                },
                Change::MakeOptional { path: p("gone") },
                Change::MakeOptional { path: p("maybe") },
            ]
        );
        for name in ["n", "x", "d", "gone", "maybe"] {
            let t = table.field_by_name(name).expect("table").id;
            assert_eq!(
                e.schema.field_by_name(name).expect("evolved").id,
                t,
                "{name}"
            );
        }
    }

    #[test]
    fn incompatible_changes_are_refused_with_the_column_named() {
        let table = new_table(vec![
            req(1, "id", PrimitiveType::Long),
            req(
                2,
                "d",
                PrimitiveType::Decimal {
                    precision: 9,
                    scale: 2,
                },
            ),
        ]);
        for (incoming, column) in [
            (schema(vec![req(1, "id", PrimitiveType::String)]), "id"),
            (
                schema(vec![req(
                    2,
                    "d",
                    PrimitiveType::Decimal {
                        precision: 9,
                        scale: 3,
                    },
                )]),
                "d",
            ),
            (
                schema(vec![Arc::new(NestedField::required(
                    1,
                    "id",
                    Type::Struct(StructType::new(vec![])),
                ))]),
                "id",
            ),
        ] {
            let err = reconcile(Some(&table), &incoming).expect_err("refused");
            assert!(
                err.to_string().contains(&format!("column {column} ")),
                "{err}"
            );
        }
        let err = reconcile(None, &schema(vec![req(1, "_kafka", PrimitiveType::Long)]))
            .expect_err("reserved");
        assert!(err.to_string().contains("reserved"), "{err}");
    }

    #[test]
    fn lists_and_maps_keep_their_element_ids() {
        let list = |id, t| {
            Type::List(ListType::new(Arc::new(NestedField::list_element(
                id,
                Type::Primitive(t),
                true,
            ))))
        };
        let map = |k, v, t| {
            Type::Map(MapType::required(
                k,
                Type::Primitive(PrimitiveType::String),
                v,
                Type::Primitive(t),
            ))
        };
        let table = new_table(vec![
            Arc::new(NestedField::optional(1, "l", list(2, PrimitiveType::Int))),
            Arc::new(NestedField::optional(
                3,
                "m",
                map(4, 5, PrimitiveType::Float),
            )),
        ]);
        let e = reconcile(
            Some(&table),
            &schema(vec![
                Arc::new(NestedField::optional(
                    10,
                    "l",
                    list(11, PrimitiveType::Long),
                )),
                Arc::new(NestedField::optional(
                    12,
                    "m",
                    map(13, 14, PrimitiveType::Double),
                )),
            ]),
        )
        .expect("reconcile");
        assert_eq!(e.changes.len(), 2, "{:?}", e.changes);
        let ids = |s: &Schema| {
            let l = s.field_by_name("l.element").expect("element").id;
            let m = s.field_by_name("m.value").expect("value").id;
            (l, m)
        };
        assert_eq!(ids(&e.schema), ids(&table));
    }
}
