//! The fast path of a table scan: data files that need nothing from Iceberg's reader, read by
//! DataFusion's own Parquet reader (row group and page pruning, strings decoded straight into
//! the table's Arrow type, one reader per file with no per-batch schema rewrite).
//!
//! Iceberg matches a data file's columns to the table's by field id; DataFusion's reader
//! matches them by name and fills a missing column with nulls. The two agree when no column of
//! any schema in the table's history was renamed, or dropped and re-added under its old name,
//! so [`names_match_ids`] checks that, from the table metadata alone (no file is opened). A file
//! goes through this path only when that holds for the columns the query reads and
//! [`is_plain`] holds for the file. Every other file (deletes to apply, a table with an evolved
//! name, a name mapping for files without field ids, a remote object store) is read by
//! Iceberg's Arrow reader, as before.

use iceberg::scan::FileScanTask;
use iceberg::spec::{
    DataFileFormat, NestedField, PrimitiveType, Schema, TableMetadata, Type,
    DEFAULT_SCHEMA_NAME_MAPPING,
};

/// The URL prefix of files on the local disk, the object store DataFusion registers itself.
const LOCAL: &str = "file://";

/// Whether every file of the table, whichever schema of its history wrote it, yields the
/// Iceberg answer for the top-level columns `field_ids` of `read` when its columns are matched
/// by name: for each such column and each schema of the table, a column with the same id has
/// the same name and a type that reads as the column's (the same, or an Iceberg promotion);
/// and where no column has the id, none has the name either, and the column may be null.
pub(crate) fn names_match_ids(metadata: &TableMetadata, read: &Schema, field_ids: &[i32]) -> bool {
    if metadata
        .properties()
        .contains_key(DEFAULT_SCHEMA_NAME_MAPPING)
    {
        // Files without field ids are matched through the mapping: Iceberg's reader's job.
        return false;
    }
    field_ids.iter().all(|id| {
        let Some(field) = read.as_struct().field_by_id(*id) else {
            return false;
        };
        supported(&field.field_type)
            && metadata
                .schemas_iter()
                .all(|s| same_column(field, s.as_struct().field_by_id(*id), s))
    })
}

/// Whether `field` (read now) and `then` (the field with its id in `schema`, if any) name and
/// type the same data.
fn same_column(
    field: &NestedField,
    then: Option<&iceberg::spec::NestedFieldRef>,
    schema: &Schema,
) -> bool {
    match then {
        Some(then) => then.name == field.name && reads_as(&then.field_type, &field.field_type),
        None => {
            schema.as_struct().field_by_name(&field.name).is_none()
                && !field.required
                && field.initial_default.is_none()
        }
    }
}

/// Types DataFusion's reader turns into Iceberg's Arrow type the way Iceberg's reader does:
/// primitives other than UUID and fixed, and structs of them.
fn supported(t: &Type) -> bool {
    match t {
        Type::Primitive(PrimitiveType::Uuid | PrimitiveType::Fixed(_)) => false,
        Type::Primitive(_) => true,
        Type::Struct(s) => s.fields().iter().all(|f| supported(&f.field_type)),
        Type::List(_) | Type::Map(_) => false,
    }
}

/// Whether data written as `written` reads as `read`: the same type, or one of Iceberg's
/// promotions (int to long, float to double, a wider decimal). Structs must not have changed.
fn reads_as(written: &Type, read: &Type) -> bool {
    use PrimitiveType as P;
    match (written, read) {
        (Type::Primitive(w), Type::Primitive(r)) => {
            w == r
                || matches!((w, r), (P::Int, P::Long) | (P::Float, P::Double))
                || matches!(
                    (w, r),
                    (P::Decimal { precision: p1, scale: s1 }, P::Decimal { precision: p2, scale: s2 })
                        if s1 == s2 && p1 <= p2
                )
        }
        (w, r) => w == r,
    }
}

/// The file's path in DataFusion's local file system object store, when `task` is a whole
/// Parquet file on the local disk with no deletes to apply.
pub(crate) fn is_plain(task: &FileScanTask) -> Option<&str> {
    if !task.deletes.is_empty()
        || task.data_file_format != DataFileFormat::Parquet
        || task.start != 0
        || task.length != task.file_size_in_bytes
    {
        return None;
    }
    task.data_file_path.strip_prefix(LOCAL)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema(id: i32, fields: Vec<NestedField>) -> Schema {
        Schema::builder()
            .with_schema_id(id)
            .with_fields(fields.into_iter().map(Into::into).collect::<Vec<_>>())
            .build()
            .expect("schema")
    }

    fn long(id: i32, name: &str) -> NestedField {
        NestedField::optional(id, name, Type::Primitive(PrimitiveType::Long))
    }

    #[test]
    fn same_column_follows_the_history() {
        let now = schema(1, vec![long(1, "a"), long(2, "b")]);
        let a = now.as_struct().field_by_id(1).expect("a").clone();
        let b = now.as_struct().field_by_id(2).expect("b").clone();
        // `b` added later: old files lack it and read null.
        let old = schema(0, vec![long(1, "a")]);
        assert!(same_column(&b, old.as_struct().field_by_id(2), &old));
        // `a` renamed from `x`: matching by name would miss it.
        let renamed = schema(0, vec![long(1, "x")]);
        assert!(!same_column(
            &a,
            renamed.as_struct().field_by_id(1),
            &renamed
        ));
        // `b` dropped and re-added: old files hold another column named `b`.
        let reused = schema(0, vec![long(1, "a"), long(3, "b")]);
        assert!(!same_column(&b, reused.as_struct().field_by_id(2), &reused));
        // int promoted to long.
        let int = schema(
            0,
            vec![NestedField::optional(
                1,
                "a",
                Type::Primitive(PrimitiveType::Int),
            )],
        );
        assert!(same_column(&a, int.as_struct().field_by_id(1), &int));
        // A required column cannot be missing.
        let required = NestedField::required(2, "b", Type::Primitive(PrimitiveType::Long));
        assert!(!same_column(
            &required,
            old.as_struct().field_by_id(2),
            &old
        ));
    }
}
