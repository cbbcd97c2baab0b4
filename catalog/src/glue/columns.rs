//! The columns of a Glue table: the current Iceberg schema in Hive type names, as Iceberg's
//! Java `GlueCatalog` writes them, so the Glue console and Lake Formation show them. Engines
//! read the schema from the Iceberg metadata, not from here.

use iceberg::spec::{PrimitiveType, TableMetadata, Type};
use serde_json::{json, Map, Value};

/// A Glue `StorageDescriptor`: `current`'s fields with the table's location and its current
/// schema's columns.
pub(super) fn storage_descriptor(current: &Map<String, Value>, metadata: &TableMetadata) -> Value {
    let mut descriptor = current.clone();
    descriptor.insert("Location".into(), json!(metadata.location()));
    let columns: Vec<Value> = metadata
        .current_schema()
        .as_struct()
        .fields()
        .iter()
        .map(|field| {
            let mut column = json!({
                "Name": field.name,
                "Type": hive_type(&field.field_type),
                "Parameters": {
                    "iceberg.field.id": field.id.to_string(),
                    "iceberg.field.optional": (!field.required).to_string(),
                    "iceberg.field.current": "true",
                },
            });
            if let Some(doc) = &field.doc {
                column["Comment"] = json!(doc);
            }
            column
        })
        .collect();
    descriptor.insert("Columns".into(), Value::Array(columns));
    Value::Object(descriptor)
}

/// The Hive type name Glue shows for an Iceberg type (the mapping of Iceberg's Java
/// `GlueCatalog`: times are strings, UUIDs strings, fixed binary).
fn hive_type(ty: &Type) -> String {
    match ty {
        Type::Primitive(p) => match p {
            PrimitiveType::Boolean => "boolean".into(),
            PrimitiveType::Int => "int".into(),
            PrimitiveType::Long => "bigint".into(),
            PrimitiveType::Float => "float".into(),
            PrimitiveType::Double => "double".into(),
            PrimitiveType::Decimal { precision, scale } => format!("decimal({precision},{scale})"),
            PrimitiveType::Date => "date".into(),
            PrimitiveType::Time | PrimitiveType::String | PrimitiveType::Uuid => "string".into(),
            PrimitiveType::Timestamp
            | PrimitiveType::Timestamptz
            | PrimitiveType::TimestampNs
            | PrimitiveType::TimestamptzNs => "timestamp".into(),
            PrimitiveType::Fixed(_) | PrimitiveType::Binary => "binary".into(),
        },
        Type::Struct(s) => format!(
            "struct<{}>",
            s.fields()
                .iter()
                .map(|f| format!("{}:{}", f.name, hive_type(&f.field_type)))
                .collect::<Vec<_>>()
                .join(",")
        ),
        Type::List(l) => format!("array<{}>", hive_type(&l.element_field.field_type)),
        Type::Map(m) => format!(
            "map<{},{}>",
            hive_type(&m.key_field.field_type),
            hive_type(&m.value_field.field_type)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::spec::{ListType, MapType, NestedField, StructType};
    use std::sync::Arc;

    #[test]
    fn columns_use_hive_type_names() {
        let nested = Type::Struct(StructType::new(vec![
            Arc::new(NestedField::required(
                3,
                "lat",
                Type::Primitive(PrimitiveType::Double),
            )),
            Arc::new(NestedField::optional(
                4,
                "tags",
                Type::List(ListType::new(Arc::new(NestedField::list_element(
                    5,
                    Type::Primitive(PrimitiveType::String),
                    true,
                )))),
            )),
        ]));
        assert_eq!(hive_type(&nested), "struct<lat:double,tags:array<string>>");
        let map = Type::Map(MapType::new(
            Arc::new(NestedField::map_key_element(
                6,
                Type::Primitive(PrimitiveType::String),
            )),
            Arc::new(NestedField::map_value_element(
                7,
                Type::Primitive(PrimitiveType::Decimal {
                    precision: 10,
                    scale: 2,
                }),
                false,
            )),
        ));
        assert_eq!(hive_type(&map), "map<string,decimal(10,2)>");
        assert_eq!(
            hive_type(&Type::Primitive(PrimitiveType::Timestamptz)),
            "timestamp"
        );
        assert_eq!(hive_type(&Type::Primitive(PrimitiveType::Long)), "bigint");
    }
}
