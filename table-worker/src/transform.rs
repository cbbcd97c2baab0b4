//! `table.topic.transform.value.type`: how a record's decoded value becomes the table's
//! columns.
//!
//! - `none`: the value record's fields are the columns, nested records stay structs.
//! - `flatten`: nested record fields become top-level columns named `parent_child`, like Kafka
//!   Connect's `Flatten` with `_` as the delimiter. Structs inside lists and maps stay
//!   structs. A child of an optional struct is optional, and is null wherever its parent is.
//! - `flatten_debezium`: the value is a Debezium change event (`before`, `after`, `op`, ...).
//!   The row is `after`, or `before` for a delete (`op` = `d`), flattened as above, plus an
//!   `_op` column holding the operation (`c`, `r`, `u`, `d`). A column the row record
//!   requires (a `NOT NULL` column of the source table, its key among them) stays required,
//!   although `before` and `after` are optional: every event that reaches the table has its
//!   row, so the key can be the table's identifier fields. An event without its row (a
//!   truncate, `op` = `t`, when the connector does not skip them) changes no row: it is left
//!   out ([`flatten_columns`]'s mask) and logged.
//!
//! The decoders always decode into a nested target built from the table's own (flattened)
//! columns ([`nested_target`]), so the leaf types and field ids are the table's. The nested
//! columns are then flattened into the table's order ([`flatten_columns`]).

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{make_array, Array, ArrayRef, AsArray, BooleanArray, StringArray};
use arrow::buffer::NullBuffer;
use arrow::datatypes::{DataType, Field, Fields, Schema as ArrowSchema, SchemaRef};
use iceberg::spec::{NestedField, NestedFieldRef, PrimitiveType, Schema, Type};

use crate::error::{Error, Result};

/// The value transform of a table topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ValueTransform {
    #[default]
    None,
    Flatten,
    FlattenDebezium,
}

/// The Debezium operation column `flatten_debezium` adds.
pub(crate) const OP_COLUMN: &str = "_op";

impl ValueTransform {
    /// From the topic config's spelling.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "none" | "" => Ok(ValueTransform::None),
            "flatten" => Ok(ValueTransform::Flatten),
            "flatten_debezium" => Ok(ValueTransform::FlattenDebezium),
            other => Err(Error::Schema(format!(
                "unknown table.topic.transform.value.type {other:?} (none, flatten or flatten_debezium)"
            ))),
        }
    }

    /// The table schema of a record schema (provisional ids, renumbered by `evolve`).
    pub fn table_schema(self, value: &Schema) -> Result<Schema> {
        match self {
            ValueTransform::None => Ok(value.clone()),
            ValueTransform::Flatten => {
                let mut out = Vec::new();
                flatten_fields(value.as_struct().fields(), "", false, &mut out);
                build(out)
            }
            ValueTransform::FlattenDebezium => {
                let row = debezium_row(value)?;
                let mut out = Vec::new();
                flatten_fields(row, "", false, &mut out);
                out.push(Arc::new(NestedField::optional(
                    0,
                    OP_COLUMN,
                    Type::Primitive(PrimitiveType::String),
                )));
                build(out)
            }
        }
    }
}

fn build(fields: Vec<NestedFieldRef>) -> Result<Schema> {
    // Provisional ids: unique, in order.
    let mut next = 0;
    let fields = fields
        .into_iter()
        .map(|f| {
            next += 1;
            let mut f = (*f).clone();
            f.id = next;
            Arc::new(f)
        })
        .collect::<Vec<_>>();
    let mut names = std::collections::HashSet::new();
    for f in &fields {
        if !names.insert(f.name.clone()) {
            return Err(Error::Schema(format!(
                "flattening gives two columns named {:?}",
                f.name
            )));
        }
    }
    // Nested ids inside lists and maps may repeat the provisional top-level ones; the table's
    // ids are assigned by `evolve`, so only the names matter here. Renumber to be safe.
    let mut next = 0;
    let fields: Vec<NestedFieldRef> = fields
        .iter()
        .map(|f| Arc::new(renumber(f, &mut next)))
        .collect();
    Ok(Schema::builder().with_fields(fields).build()?)
}

fn renumber(f: &NestedField, next: &mut i32) -> NestedField {
    *next += 1;
    let id = *next;
    let ty = match &*f.field_type {
        Type::Primitive(_) => (*f.field_type).clone(),
        Type::Struct(s) => Type::Struct(iceberg::spec::StructType::new(
            s.fields()
                .iter()
                .map(|c| Arc::new(renumber(c, next)))
                .collect(),
        )),
        Type::List(l) => {
            let e = renumber(&l.element_field, next);
            Type::List(iceberg::spec::ListType::new(Arc::new(e)))
        }
        Type::Map(m) => {
            let k = renumber(&m.key_field, next);
            let v = renumber(&m.value_field, next);
            Type::Map(iceberg::spec::MapType::new(Arc::new(k), Arc::new(v)))
        }
    };
    let mut out = NestedField::new(id, &f.name, ty, f.required);
    out.doc = f.doc.clone();
    out
}

/// Struct fields replaced by their children (recursively), named `parent_child`.
fn flatten_fields(
    fields: &[NestedFieldRef],
    prefix: &str,
    optional: bool,
    out: &mut Vec<NestedFieldRef>,
) {
    for f in fields {
        let name = format!("{prefix}{}", f.name);
        match &*f.field_type {
            Type::Struct(s) => flatten_fields(
                s.fields(),
                &format!("{name}_"),
                optional || !f.required,
                out,
            ),
            _ => {
                let mut c = (**f).clone();
                c.name = name;
                c.required = f.required && !optional;
                out.push(Arc::new(c));
            }
        }
    }
}

/// The row struct of a Debezium envelope: `after`'s fields (or `before`'s).
fn debezium_row(value: &Schema) -> Result<&[NestedFieldRef]> {
    for side in ["after", "before"] {
        if let Some(f) = value.as_struct().field_by_name(side) {
            if let Type::Struct(s) = &*f.field_type {
                return Ok(s.fields());
            }
        }
    }
    Err(Error::Schema(
        "flatten_debezium needs a Debezium envelope: a value with an `after` or `before` record"
            .into(),
    ))
}

/// The nested Arrow target a decoder fills for a writer whose record schema is `writer`: its
/// structure, with each leaf taken from the table's value column of the flattened name (type
/// and field id included). Leaves the table lacks are refused.
pub(crate) fn nested_target(
    transform: ValueTransform,
    table_values: &ArrowSchema,
    writer: &Schema,
) -> Result<SchemaRef> {
    let by_name: HashMap<&str, &Arc<Field>> = table_values
        .fields()
        .iter()
        .map(|f| (f.name().as_str(), f))
        .collect();
    fn walk(
        fields: &[NestedFieldRef],
        prefix: &str,
        by_name: &HashMap<&str, &Arc<Field>>,
    ) -> Result<Vec<Field>> {
        let mut out = Vec::new();
        for f in fields {
            let name = format!("{prefix}{}", f.name);
            match &*f.field_type {
                Type::Struct(s) => {
                    let children = walk(s.fields(), &format!("{name}_"), by_name)?;
                    if !children.is_empty() {
                        out.push(Field::new(&f.name, DataType::Struct(children.into()), true));
                    }
                }
                _ => match by_name.get(name.as_str()) {
                    Some(t) => out.push(t.as_ref().clone().with_name(&f.name)),
                    None => {
                        return Err(Error::Schema(format!(
                            "column {name} of the record is not in the table"
                        )))
                    }
                },
            }
        }
        Ok(out)
    }
    let fields = match transform {
        ValueTransform::None => return Ok(Arc::new(table_values.clone())),
        ValueTransform::Flatten => walk(writer.as_struct().fields(), "", &by_name)?,
        ValueTransform::FlattenDebezium => {
            let row = walk(debezium_row(writer)?, "", &by_name)?;
            let row_type = DataType::Struct(Fields::from(row));
            vec![
                Field::new("before", row_type.clone(), true),
                Field::new("after", row_type, true),
                Field::new("op", DataType::Utf8, true),
            ]
        }
    };
    Ok(Arc::new(ArrowSchema::new(fields)))
}

/// The decoded nested `columns` (of `nested`) as the table's value columns, in its order.
/// Table columns the writer does not have are null. With `flatten_debezium`, also the rows
/// to keep when some event has no row (None: all of them); the others' columns hold nulls
/// even where the table requires a value, so the caller must drop them.
pub(crate) fn flatten_columns(
    transform: ValueTransform,
    nested: &SchemaRef,
    columns: Vec<ArrayRef>,
    table_values: &SchemaRef,
) -> Result<(Vec<ArrayRef>, Option<BooleanArray>)> {
    if transform == ValueTransform::None {
        return Ok((columns, None));
    }
    let rows = columns.first().map_or(0, |c| c.len());
    let mut keep = None;
    let mut flat: HashMap<String, ArrayRef> = HashMap::new();
    match transform {
        ValueTransform::FlattenDebezium => {
            let (before, after, op) = (
                columns
                    .first()
                    .ok_or_else(|| Error::Schema("no before".into()))?,
                columns
                    .get(1)
                    .ok_or_else(|| Error::Schema("no after".into()))?,
                columns
                    .get(2)
                    .ok_or_else(|| Error::Schema("no op".into()))?,
            );
            let op = op
                .as_any()
                .downcast_ref::<StringArray>()
                .ok_or_else(|| Error::Schema("op is not a string".into()))?;
            // Deletes carry the row in `before`; everything else in `after`.
            let is_delete = BooleanArray::from_iter(op.iter().map(|o| Some(o == Some("d"))));
            let row = arrow::compute::kernels::zip::zip(&is_delete, before, after)?;
            let DataType::Struct(row_fields) = row.data_type().clone() else {
                return Err(Error::Schema("the Debezium row is not a struct".into()));
            };
            if row.null_count() > 0 {
                keep = Some(BooleanArray::from_iter(
                    (0..row.len()).map(|i| Some(row.is_valid(i))),
                ));
            }
            let row = row.as_struct();
            for (f, c) in row_fields.iter().zip(row.columns()) {
                collect(f, c.clone(), row.nulls(), "", &mut flat)?;
            }
            flat.insert(OP_COLUMN.to_string(), Arc::new(op.clone()));
        }
        _ => {
            for (f, c) in nested.fields().iter().zip(columns) {
                collect(f, c, None, "", &mut flat)?;
            }
        }
    }
    let columns = table_values
        .fields()
        .iter()
        .map(|f| {
            flat.remove(f.name())
                .unwrap_or_else(|| arrow::array::new_null_array(f.data_type(), rows))
        })
        .collect();
    Ok((columns, keep))
}

/// Adds `column` (named `prefix + field`) to `flat`, descending into structs; `parent` nulls
/// are merged into every child.
fn collect(
    field: &Field,
    column: ArrayRef,
    parent: Option<&NullBuffer>,
    prefix: &str,
    flat: &mut HashMap<String, ArrayRef>,
) -> Result<()> {
    let name = format!("{prefix}{}", field.name());
    let nulls = NullBuffer::union(parent, column.nulls());
    match field.data_type() {
        DataType::Struct(children) => {
            let s = column.as_struct();
            for (f, c) in children.iter().zip(s.columns()) {
                collect(f, c.clone(), nulls.as_ref(), &format!("{name}_"), flat)?;
            }
        }
        _ => {
            let data = column.to_data().into_builder().nulls(nulls).build()?;
            flat.insert(name, make_array(data));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StructArray};
    use iceberg::spec::StructType;

    fn nested_schema() -> Schema {
        Schema::builder()
            .with_fields(vec![
                Arc::new(NestedField::required(
                    1,
                    "id",
                    Type::Primitive(PrimitiveType::Long),
                )),
                Arc::new(NestedField::optional(
                    2,
                    "address",
                    Type::Struct(StructType::new(vec![
                        Arc::new(NestedField::required(
                            3,
                            "city",
                            Type::Primitive(PrimitiveType::String),
                        )),
                        Arc::new(NestedField::optional(
                            4,
                            "geo",
                            Type::Struct(StructType::new(vec![Arc::new(NestedField::required(
                                5,
                                "lat",
                                Type::Primitive(PrimitiveType::Double),
                            ))])),
                        )),
                    ])),
                )),
            ])
            .build()
            .expect("schema")
    }

    #[test]
    fn flatten_names_children_and_makes_them_optional_under_optional_parents() {
        let flat = ValueTransform::Flatten
            .table_schema(&nested_schema())
            .expect("flatten");
        let cols: Vec<_> = flat
            .as_struct()
            .fields()
            .iter()
            .map(|f| (f.name.clone(), f.required))
            .collect();
        assert_eq!(
            cols,
            vec![
                ("id".into(), true),
                ("address_city".into(), false),
                ("address_geo_lat".into(), false)
            ]
        );
        assert!(ValueTransform::parse("sideways").is_err());
    }

    #[test]
    fn flattened_columns_carry_parent_nulls() {
        let writer = nested_schema();
        let table = crate::evolve::reconcile(
            None,
            &ValueTransform::Flatten.table_schema(&writer).expect("flat"),
        )
        .expect("table")
        .schema;
        let arrow_table = iceberg::arrow::schema_to_arrow_schema(&table).expect("arrow");
        let values: SchemaRef = Arc::new(ArrowSchema::new(
            arrow_table
                .fields()
                .iter()
                .filter(|f| f.name() != "_kafka")
                .cloned()
                .collect::<Vec<_>>(),
        ));
        let target = nested_target(ValueTransform::Flatten, &values, &writer).expect("target");
        // Two rows: the second has no address.
        let DataType::Struct(addr_fields) = target.field(1).data_type().clone() else {
            panic!("struct")
        };
        let DataType::Struct(geo_fields) = addr_fields[1].data_type().clone() else {
            panic!("struct")
        };
        let geo = StructArray::new(
            geo_fields,
            vec![Arc::new(arrow::array::Float64Array::from(vec![1.5, 0.0]))],
            None,
        );
        let address = StructArray::new(
            addr_fields,
            vec![Arc::new(StringArray::from(vec!["oslo", ""])), Arc::new(geo)],
            Some(NullBuffer::from(vec![true, false])),
        );
        let columns: Vec<ArrayRef> =
            vec![Arc::new(Int64Array::from(vec![1, 2])), Arc::new(address)];
        let (out, keep) =
            flatten_columns(ValueTransform::Flatten, &target, columns, &values).expect("flatten");
        assert!(keep.is_none(), "flatten keeps every row");
        assert_eq!(out.len(), 3);
        let city = out[1].as_string::<i32>();
        assert_eq!((city.value(0), city.is_null(1)), ("oslo", true));
        assert!(out[2].is_null(1) && !out[2].is_null(0));
        for (a, f) in out.iter().zip(values.fields()) {
            assert_eq!(a.data_type(), f.data_type(), "{}", f.name());
        }
    }

    #[test]
    fn debezium_rows_come_from_after_or_before() {
        let row = |first: i32| {
            StructType::new(vec![
                Arc::new(NestedField::required(
                    first,
                    "id",
                    Type::Primitive(PrimitiveType::Long),
                )),
                Arc::new(NestedField::optional(
                    first + 1,
                    "name",
                    Type::Primitive(PrimitiveType::String),
                )),
            ])
        };
        let envelope = Schema::builder()
            .with_fields(vec![
                Arc::new(NestedField::optional(1, "before", Type::Struct(row(10)))),
                Arc::new(NestedField::optional(2, "after", Type::Struct(row(20)))),
                Arc::new(NestedField::required(
                    3,
                    "op",
                    Type::Primitive(PrimitiveType::String),
                )),
                Arc::new(NestedField::optional(
                    4,
                    "ts_ms",
                    Type::Primitive(PrimitiveType::Long),
                )),
            ])
            .build()
            .expect("envelope");
        let table_value = ValueTransform::FlattenDebezium
            .table_schema(&envelope)
            .expect("table");
        let names: Vec<_> = table_value
            .as_struct()
            .fields()
            .iter()
            .map(|f| f.name.clone())
            .collect();
        assert_eq!(names, vec!["id", "name", "_op"]);
        // The row's required column (the key) stays required, for identifier fields.
        let required: Vec<_> = table_value
            .as_struct()
            .fields()
            .iter()
            .map(|f| f.required)
            .collect();
        assert_eq!(required, vec![true, false, false]);
        let table = crate::evolve::reconcile(None, &table_value)
            .expect("t")
            .schema;
        let arrow_table = iceberg::arrow::schema_to_arrow_schema(&table).expect("arrow");
        let values: SchemaRef = Arc::new(ArrowSchema::new(
            arrow_table
                .fields()
                .iter()
                .filter(|f| f.name() != "_kafka")
                .cloned()
                .collect::<Vec<_>>(),
        ));
        let target =
            nested_target(ValueTransform::FlattenDebezium, &values, &envelope).expect("target");
        let DataType::Struct(row_fields) = target.field(0).data_type().clone() else {
            panic!("struct")
        };
        let side = |ids: Vec<i64>, names: Vec<&str>, valid: Vec<bool>| -> ArrayRef {
            Arc::new(StructArray::new(
                row_fields.clone(),
                vec![
                    Arc::new(Int64Array::from(ids)),
                    Arc::new(StringArray::from(names)),
                ],
                Some(NullBuffer::from(valid)),
            ))
        };
        // A create, a delete, and a truncate (no row on either side).
        let columns = vec![
            side(
                vec![0, 7, 0],
                vec!["", "gone", ""],
                vec![false, true, false],
            ),
            side(vec![5, 0, 0], vec!["new", "", ""], vec![true, false, false]),
            Arc::new(StringArray::from(vec!["c", "d", "t"])) as ArrayRef,
        ];
        let (out, keep) =
            flatten_columns(ValueTransform::FlattenDebezium, &target, columns, &values)
                .expect("rows");
        let ids = out[0].as_primitive::<arrow::datatypes::Int64Type>();
        assert_eq!((ids.value(0), ids.value(1)), (5, 7));
        assert_eq!(out[1].as_string::<i32>().value(1), "gone");
        assert_eq!(out[2].as_string::<i32>().value(1), "d");
        // The truncate is left out: the table requires its id.
        let keep = keep.expect("a row to leave out");
        assert_eq!(
            keep.iter().collect::<Vec<_>>(),
            vec![Some(true), Some(true), Some(false)]
        );
        let kept = arrow::compute::filter(&out[0], &keep).expect("filter");
        assert_eq!(kept.null_count(), 0);
    }
}
