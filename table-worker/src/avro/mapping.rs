//! Avro schema → Iceberg schema.
//!
//! The rules are fixed conventions that the decoder ([`super::AvroDecoder`]) and schema
//! evolution depend on; change them only together:
//!
//! - The top-level schema is a record; its fields are the table's columns, named as in Avro.
//! - `boolean`, `int`, `long`, `float`, `double`, `string`, `bytes` → `boolean`, `int`, `long`,
//!   `float`, `double`, `string`, `binary`; record → struct; enum → string; array → list; map →
//!   `map<string, V>`; fixed(n) → fixed\[n\]. `null` alone has no mapping.
//! - A field, list element or map value is required unless its type is a union containing
//!   `null`. `["null", T]` (either order) is an optional `T`. A union with two or more non-null
//!   branches is an optional struct with one optional field per non-null branch, named by
//!   [`super::names::branch_names`]; a row sets the branch it holds and leaves the others null.
//! - Logical types: date → date; time-millis, time-micros → time (micros); timestamp-millis,
//!   timestamp-micros → timestamptz; local-timestamp-millis, local-timestamp-micros → timestamp;
//!   timestamp-nanos → timestamptz and local-timestamp-nanos → timestamp, both in microseconds:
//!   the decoder truncates nanoseconds to the microsecond at or before the instant (floor, as
//!   Iceberg's `DateTimeUtil.nanosToMicros`); decimal(p, s) on bytes or fixed → decimal(p, s),
//!   refused above 38 digits; uuid → uuid; duration → fixed\[12\]; big-decimal → string.
//! - Refused: recursive types, records with no fields and fixed(0) (Parquet cannot store an
//!   empty group or a zero-length fixed), nesting deeper than [`super::names::MAX_DEPTH`].
//! - Field ids are provisional, assigned depth-first (pre-order) from 1: a field, then the
//!   types nested in it; a list's element and a map's key and value take the ids after their
//!   field's. Another module re-maps them onto a table's stable ids by name path.

use std::sync::Arc;

use apache_avro::schema::{Namespace, RecordSchema, Schema, UnionSchema};
use iceberg::spec::{
    ListType, MapType, NestedField, NestedFieldRef, PrimitiveType, StructType, Type,
};

use super::names::{branch_names, join, Expansion, Names};
use crate::error::Error;

/// Maps the Avro `schema` (whose `Ref`s may name types defined in `refs`) to an Iceberg schema
/// with provisional field ids. Fails with [`Error::Schema`] if the top level is not a record or
/// any part of the schema has no mapping.
pub fn avro_to_iceberg(schema: &Schema, refs: &[Schema]) -> Result<iceberg::spec::Schema, Error> {
    let names = Names::new(schema, refs);
    let (top, namespace) = names.resolve(schema, &None)?;
    let Schema::Record(record) = top else {
        return Err(Error::Schema(format!(
            "a table topic's value schema must be an Avro record (its fields become the table's columns), not {}",
            kind(top)
        )));
    };
    let mut mapper = Mapper {
        names: &names,
        expansion: Expansion::new(),
        next_id: 1,
    };
    let fields = mapper.record(record, &namespace, "")?;
    Ok(iceberg::spec::Schema::builder()
        .with_fields(fields)
        .build()?)
}

struct Mapper<'n, 'a> {
    names: &'n Names<'a>,
    expansion: Expansion,
    next_id: i32,
}

impl<'a> Mapper<'_, 'a> {
    fn id(&mut self) -> i32 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// The fields of `record`, whose path is `path`.
    fn record(
        &mut self,
        record: &'a RecordSchema,
        namespace: &Namespace,
        path: &str,
    ) -> Result<Vec<NestedFieldRef>, Error> {
        let shown = if path.is_empty() {
            &record.name.name
        } else {
            path
        };
        if record.fields.is_empty() {
            return Err(Error::Schema(format!(
                "record `{shown}` has no fields: Parquet cannot store an empty struct"
            )));
        }
        self.expansion
            .open_record(record.name.fully_qualified_name(namespace), shown)?;
        let mut fields = Vec::with_capacity(record.fields.len());
        for field in &record.fields {
            let field_path = join(path, &field.name);
            let id = self.id();
            let (ty, required) = self.ty(&field.schema, namespace, &field_path)?;
            fields.push(Arc::new(NestedField::new(id, &field.name, ty, required)));
        }
        self.expansion.close_record();
        Ok(fields)
    }

    /// The Iceberg type of `schema` at `path`, and whether a value of it is required.
    fn ty(
        &mut self,
        schema: &'a Schema,
        namespace: &Namespace,
        path: &str,
    ) -> Result<(Type, bool), Error> {
        self.expansion.enter(path)?;
        let result = self.ty_inner(schema, namespace, path);
        self.expansion.leave();
        result
    }

    fn ty_inner(
        &mut self,
        schema: &'a Schema,
        namespace: &Namespace,
        path: &str,
    ) -> Result<(Type, bool), Error> {
        let (schema, namespace) = self.names.resolve(schema, namespace)?;
        let primitive = |p| Ok((Type::Primitive(p), true));
        match schema {
            Schema::Null => Err(Error::Schema(format!(
                "`{path}` has type null, which has no Iceberg mapping (use a union with null for an optional field)"
            ))),
            Schema::Boolean => primitive(PrimitiveType::Boolean),
            Schema::Int => primitive(PrimitiveType::Int),
            Schema::Long => primitive(PrimitiveType::Long),
            Schema::Float => primitive(PrimitiveType::Float),
            Schema::Double => primitive(PrimitiveType::Double),
            Schema::String | Schema::Enum(_) | Schema::BigDecimal => {
                primitive(PrimitiveType::String)
            }
            Schema::Bytes => primitive(PrimitiveType::Binary),
            Schema::Fixed(f) => {
                if f.size == 0 {
                    return Err(Error::Schema(format!(
                        "`{path}` is a fixed of size 0, which Parquet cannot store"
                    )));
                }
                let size = u64::try_from(f.size)
                    .map_err(|_| Error::Schema(format!("`{path}`: fixed size too large")))?;
                primitive(PrimitiveType::Fixed(size))
            }
            Schema::Duration => primitive(PrimitiveType::Fixed(12)),
            Schema::Uuid => primitive(PrimitiveType::Uuid),
            Schema::Date => primitive(PrimitiveType::Date),
            Schema::TimeMillis | Schema::TimeMicros => primitive(PrimitiveType::Time),
            Schema::TimestampMillis | Schema::TimestampMicros | Schema::TimestampNanos => {
                primitive(PrimitiveType::Timestamptz)
            }
            Schema::LocalTimestampMillis
            | Schema::LocalTimestampMicros
            | Schema::LocalTimestampNanos => primitive(PrimitiveType::Timestamp),
            Schema::Decimal(d) => {
                if d.precision > 38 {
                    return Err(Error::Schema(format!(
                        "`{path}` is a decimal of precision {}; Iceberg decimals hold at most 38 digits",
                        d.precision
                    )));
                }
                let ty = u32::try_from(d.precision)
                    .ok()
                    .zip(u32::try_from(d.scale).ok())
                    .and_then(|(p, s)| Type::decimal(p, s).ok())
                    .ok_or_else(|| {
                        Error::Schema(format!(
                            "`{path}`: decimal({}, {}) has no Iceberg mapping",
                            d.precision, d.scale
                        ))
                    })?;
                Ok((ty, true))
            }
            Schema::Record(r) => {
                let fields = self.record(r, &namespace, path)?;
                Ok((Type::Struct(StructType::new(fields)), true))
            }
            Schema::Array(a) => {
                let id = self.id();
                let (element, required) = self.ty(&a.items, &namespace, &join(path, "element"))?;
                let field = NestedField::list_element(id, element, required);
                Ok((Type::List(ListType::new(Arc::new(field))), true))
            }
            Schema::Map(m) => {
                let key_id = self.id();
                let value_id = self.id();
                let (value, required) = self.ty(&m.types, &namespace, &join(path, "value"))?;
                let key = NestedField::map_key_element(key_id, Type::Primitive(PrimitiveType::String));
                let value = NestedField::map_value_element(value_id, value, required);
                Ok((Type::Map(MapType::new(Arc::new(key), Arc::new(value))), true))
            }
            Schema::Union(u) => self.union(u, &namespace, path),
            Schema::Ref { .. } => Err(Error::Schema(format!(
                "`{path}`: a reference names another reference"
            ))),
        }
    }

    fn union(
        &mut self,
        union: &'a UnionSchema,
        namespace: &Namespace,
        path: &str,
    ) -> Result<(Type, bool), Error> {
        let mut non_null = Vec::new();
        let mut nullable = false;
        for branch in union.variants() {
            let (resolved, _) = self.names.resolve(branch, namespace)?;
            if matches!(resolved, Schema::Null) {
                nullable = true;
            } else {
                non_null.push(branch);
            }
        }
        match non_null.as_slice() {
            [] => Err(Error::Schema(format!(
                "`{path}` is a union of only null, which has no Iceberg mapping"
            ))),
            [only] => {
                let (ty, _) = self.ty(only, namespace, path)?;
                Ok((ty, !nullable))
            }
            _ => {
                let branch_names = branch_names(self.names, union, namespace)?;
                let mut fields = Vec::with_capacity(non_null.len());
                for (branch, name) in union.variants().iter().zip(&branch_names) {
                    let (resolved, _) = self.names.resolve(branch, namespace)?;
                    if matches!(resolved, Schema::Null) {
                        continue;
                    }
                    let id = self.id();
                    let (ty, _) = self.ty(branch, namespace, &join(path, name))?;
                    fields.push(Arc::new(NestedField::optional(id, name, ty)));
                }
                Ok((Type::Struct(StructType::new(fields)), false))
            }
        }
    }
}

/// A short description of a schema's kind for messages.
pub(crate) fn kind(schema: &Schema) -> String {
    match schema {
        Schema::Record(r) => format!("record `{}`", r.name.fullname(None)),
        Schema::Enum(e) => format!("enum `{}`", e.name.fullname(None)),
        Schema::Fixed(f) => format!("fixed `{}` (size {})", f.name.fullname(None), f.size),
        Schema::Ref { name } => format!("type `{}`", name.fullname(None)),
        Schema::Union(_) => "a union".to_string(),
        Schema::Array(_) => "an array".to_string(),
        Schema::Map(_) => "a map".to_string(),
        Schema::Decimal(d) => format!("decimal({}, {})", d.precision, d.scale),
        Schema::BigDecimal => "big-decimal".to_string(),
        Schema::Uuid => "uuid".to_string(),
        Schema::Date => "date".to_string(),
        Schema::TimeMillis => "time-millis".to_string(),
        Schema::TimeMicros => "time-micros".to_string(),
        Schema::TimestampMillis => "timestamp-millis".to_string(),
        Schema::TimestampMicros => "timestamp-micros".to_string(),
        Schema::TimestampNanos => "timestamp-nanos".to_string(),
        Schema::LocalTimestampMillis => "local-timestamp-millis".to_string(),
        Schema::LocalTimestampMicros => "local-timestamp-micros".to_string(),
        Schema::LocalTimestampNanos => "local-timestamp-nanos".to_string(),
        Schema::Duration => "duration".to_string(),
        Schema::Null => "null".to_string(),
        Schema::Boolean => "boolean".to_string(),
        Schema::Int => "int".to_string(),
        Schema::Long => "long".to_string(),
        Schema::Float => "float".to_string(),
        Schema::Double => "double".to_string(),
        Schema::Bytes => "bytes".to_string(),
        Schema::String => "string".to_string(),
    }
}
