//! Avro schemas: parsing, the normalized text that decides schema identity, and the Avro
//! specification's schema-resolution rules ("can a reader with schema R read data written with
//! schema W?"), which every compatibility level is built from.
//!
//! Identity: two registrations are the same schema when their normalized texts are equal. The
//! normalized text is apache-avro's JSON serialization of the parsed schema: whitespace, key order
//! and namespace spelling no longer matter, but defaults, aliases, docs and logical types are kept
//! (Parsing Canonical Form would drop defaults, and adding a default must make a new version).
//!
//! Properties of primitive types (`{"type": "int", "connect.name": "io.debezium.time.Date"}`),
//! which apache-avro drops, are put back into the normalized text (`with_primitive_props`), as
//! Confluent's registry keeps them: Kafka Connect's converters read their semantic types from
//! them, and so do tables ([`AvroSchema::semantic`]).
//!
//! Resolution ([`can_read`]) is our own checker, not `apache_avro::schema_compatibility`: that one
//! ignores aliases and enum defaults and panics on some inputs. Logical types are compared by
//! their underlying Avro type, as Confluent's (Java) checker does.

use std::collections::{HashMap, HashSet};

use apache_avro::schema::{FixedSchema, Name, RecordSchema, Schema};

pub use crate::avro_spec::{kind, Kind};
use crate::error::{Error, Result};

/// A parsed Avro schema with its normalized text and the schemas it references.
#[derive(Debug, Clone)]
pub struct AvroSchema {
    pub schema: Schema,
    pub normalized: String,
    /// The named types of the schema's references (Confluent `references`), which its `Ref`s
    /// may name. Empty without references.
    pub refs: Vec<Schema>,
    /// Whether a record type contains itself, directly or through references: such schemas are
    /// not decoded (see `framing`). Derived once here, not per record.
    pub recursive: bool,
    /// The schema with Kafka Connect's and Debezium's semantic types (`connect.name` on a
    /// primitive type: `io.debezium.time.Date`, `MicroTimestamp`, ...) read as the Avro
    /// logical types of the same meaning ([`CONNECT_LOGICAL_TYPES`]); None when it has none.
    /// Tables read values through it ([`AvroSchema::table_schema`]), so a Debezium date is a
    /// date column; the binary encoding is the same.
    pub semantic: Option<Box<Schema>>,
}

/// Parses `text`; invalid JSON or an invalid Avro schema is [`Error::InvalidSchema`].
pub fn parse(text: &str) -> Result<AvroSchema> {
    parse_with_refs(text, &[])
}

/// Parses `text` whose named types may come from `refs`: the texts of its referenced schemas
/// (references of references included), each a named type.
pub fn parse_with_refs(text: &str, refs: &[String]) -> Result<AvroSchema> {
    // apache-avro parses the schema with its defaults hidden; they are checked by the
    // specification's rules instead (`avro_spec`).
    let hidden = crate::avro_spec::hide_defaults(text)?;
    let (mut schema, mut refs) = if refs.is_empty() {
        let schema =
            Schema::parse_str(&hidden).map_err(|e| Error::InvalidSchema(with_sources(&e)))?;
        (schema, Vec::new())
    } else {
        let hidden_refs = refs
            .iter()
            .map(|r| crate::avro_spec::hide_defaults(r))
            .collect::<Result<Vec<_>>>()?;
        Schema::parse_str_with_list(&hidden, &hidden_refs).map_err(|e| {
            Error::InvalidSchema(format!(
                "{} (with {} referenced schemas)",
                with_sources(&e),
                refs.len()
            ))
        })?
    };
    crate::avro_spec::restore_defaults(&mut schema)?;
    for r in &mut refs {
        crate::avro_spec::restore_defaults(r)?;
    }
    crate::avro_spec::check_defaults(&schema, &names(&schema, &refs))?;
    let normalized = serde_json::to_string(&schema)
        .map_err(|e| Error::InvalidSchema(format!("cannot serialize the parsed schema: {e}")))?;
    let original: Option<serde_json::Value> = serde_json::from_str(text).ok();
    let normalized = original
        .as_ref()
        .and_then(|o| with_primitive_props(o, &normalized))
        .unwrap_or(normalized);
    // The semantic view: Connect's and Debezium's types as Avro logical types. Only without
    // references (their texts' properties are not walked here); the rewritten text has its
    // logical types, so parsing it finds nothing more to rewrite.
    let semantic = match serde_json::from_str::<serde_json::Value>(&normalized) {
        Ok(mut tree) if refs.is_empty() => {
            if with_connect_logical_types(&mut tree) {
                Some(Box::new(parse(&tree.to_string())?.schema))
            } else {
                None
            }
        }
        _ => None,
    };
    let recursive = {
        let names = names(&schema, &refs);
        is_recursive(&schema, &names, &mut Vec::new())
    };
    Ok(AvroSchema {
        schema,
        normalized,
        refs,
        recursive,
        semantic,
    })
}

impl AvroSchema {
    /// The schema as tables read it: [`AvroSchema::semantic`] when the schema carries Kafka
    /// Connect's or Debezium's semantic types, the parsed schema otherwise.
    pub fn table_schema(&self) -> &Schema {
        self.semantic.as_deref().unwrap_or(&self.schema)
    }
}

/// Kafka Connect's and Debezium's semantic types (a `connect.name` on a primitive type, as
/// Confluent's `AvroConverter` writes them) that mean what an Avro logical type means: the
/// name, the primitive type that carries it, and the logical type. Debezium's `Timestamp`
/// kinds carry no time zone (a wall-clock time); Connect's `Timestamp` is an instant.
const CONNECT_LOGICAL_TYPES: &[(&str, &str, &str)] = &[
    ("io.debezium.time.Date", "int", "date"),
    ("org.apache.kafka.connect.data.Date", "int", "date"),
    ("io.debezium.time.Time", "int", "time-millis"),
    ("org.apache.kafka.connect.data.Time", "int", "time-millis"),
    ("io.debezium.time.MicroTime", "long", "time-micros"),
    (
        "io.debezium.time.Timestamp",
        "long",
        "local-timestamp-millis",
    ),
    (
        "io.debezium.time.MicroTimestamp",
        "long",
        "local-timestamp-micros",
    ),
    (
        "io.debezium.time.NanoTimestamp",
        "long",
        "local-timestamp-nanos",
    ),
    (
        "org.apache.kafka.connect.data.Timestamp",
        "long",
        "timestamp-millis",
    ),
    ("io.debezium.data.Uuid", "string", "uuid"),
];

/// Debezium's semantic types carried as text that tables read as another type: Avro has no
/// logical type for them on a `string`, so the semantic view marks the record field that holds
/// one with [`SEMANTIC_FIELD_PROPERTY`] (apache-avro keeps a field's properties), naming it.
pub const TEXT_SEMANTIC_TYPES: &[&str] = &["io.debezium.time.ZonedTimestamp"];

/// The record-field property of the semantic view that names the [`TEXT_SEMANTIC_TYPES`]
/// entry its (possibly optional) string value carries.
pub const SEMANTIC_FIELD_PROPERTY: &str = "inlet.connect.name";

/// The [`TEXT_SEMANTIC_TYPES`] entry a field's type is: a `string` with that `connect.name`,
/// alone or as a branch of a union.
fn text_semantic_type(field_type: &serde_json::Value) -> Option<&'static str> {
    use serde_json::Value;
    let of = |t: &Value| match (t.get("type"), t.get("connect.name")) {
        (Some(Value::String(kind)), Some(Value::String(name))) if kind == "string" => {
            TEXT_SEMANTIC_TYPES.iter().find(|n| **n == name).copied()
        }
        _ => None,
    };
    match field_type {
        Value::Array(branches) => branches.iter().find_map(of),
        t => of(t),
    }
}

/// Adds the logical type of every semantic type of [`CONNECT_LOGICAL_TYPES`] that has none,
/// and marks the record fields of [`TEXT_SEMANTIC_TYPES`]; whether it changed anything.
fn with_connect_logical_types(tree: &mut serde_json::Value) -> bool {
    use serde_json::Value;
    match tree {
        Value::Array(items) => {
            let mut any = false;
            for item in items {
                any |= with_connect_logical_types(item);
            }
            any
        }
        Value::Object(map) => {
            let found = match (map.get("type"), map.get("connect.name")) {
                (Some(Value::String(kind)), Some(Value::String(name)))
                    if !map.contains_key("logicalType") =>
                {
                    CONNECT_LOGICAL_TYPES
                        .iter()
                        .find(|(n, k, _)| n == name && k == kind)
                        .map(|(_, _, logical)| *logical)
                }
                _ => None,
            };
            if let Some(logical) = found {
                map.insert("logicalType".into(), Value::String(logical.into()));
                return true;
            }
            let mut any = false;
            // A record field (a name and a type that is not a type's own name) of a text type.
            if map.contains_key("name") && !map.contains_key(SEMANTIC_FIELD_PROPERTY) {
                if let Some(name) = map
                    .get("type")
                    .filter(|t| t.is_object() || t.is_array())
                    .and_then(text_semantic_type)
                {
                    map.insert(SEMANTIC_FIELD_PROPERTY.into(), Value::String(name.into()));
                    any = true;
                }
            }
            for value in map.values_mut() {
                any |= with_connect_logical_types(value);
            }
            any
        }
        _ => false,
    }
}

/// Primitive type names: apache-avro parses `{"type": "int", ...}` into a bare `int` and drops
/// every other property of it, which Confluent's registry (Java's Avro) keeps.
const PRIMITIVES: &[&str] = &[
    "null", "boolean", "int", "long", "float", "double", "bytes", "string",
];

/// The normalized text with the properties of primitive types that `original` gives and
/// apache-avro dropped (`connect.name`, `connect.version`, `connect.parameters`: Kafka
/// Connect's and Debezium's semantic types), put back where they stood; None when there are
/// none (the text stays apache-avro's, byte for byte). The two trees have the same shape:
/// records' fields in order, unions' branches in order, arrays' items and maps' values.
fn with_primitive_props(original: &serde_json::Value, normalized: &str) -> Option<String> {
    let mut tree: serde_json::Value = serde_json::from_str(normalized).ok()?;
    let mut changed = false;
    restore_props(original, &mut tree, &mut changed);
    changed.then(|| tree.to_string())
}

fn restore_props(
    original: &serde_json::Value,
    normalized: &mut serde_json::Value,
    changed: &mut bool,
) {
    use serde_json::Value;
    match (original, normalized) {
        (Value::Array(o), Value::Array(n)) if o.len() == n.len() => {
            for (o, n) in o.iter().zip(n.iter_mut()) {
                restore_props(o, n, changed);
            }
        }
        (Value::Object(o), n) => {
            let Some(Value::String(kind)) = o.get("type") else {
                // `{"type": {...}}` or `{"type": [...]}`: the nested type is the schema.
                if let (Some(inner), false) = (o.get("type"), n.is_string()) {
                    if let Some(n_inner) = n.as_object_mut().and_then(|m| m.get_mut("type")) {
                        restore_props(inner, n_inner, changed);
                    }
                }
                return;
            };
            if PRIMITIVES.contains(&kind.as_str()) {
                let extra: Vec<(&String, &Value)> = o
                    .iter()
                    .filter(|(k, _)| k.as_str() != "type")
                    .filter(|(k, _)| n.as_object().is_none_or(|m| !m.contains_key(k.as_str())))
                    // apache-avro keeps the logical types it knows; one it does not know is
                    // kept here, as Java's Avro keeps it.
                    .collect();
                if extra.is_empty() {
                    return;
                }
                if let Value::String(name) = n {
                    *n = serde_json::json!({ "type": name.clone() });
                }
                if let Some(m) = n.as_object_mut() {
                    for (k, v) in extra {
                        m.insert(k.clone(), v.clone());
                    }
                    *changed = true;
                }
                return;
            }
            let Some(n) = n.as_object_mut() else { return };
            match kind.as_str() {
                "record" | "error" => {
                    let (Some(Value::Array(of)), Some(Value::Array(nf))) =
                        (o.get("fields"), n.get_mut("fields"))
                    else {
                        return;
                    };
                    for (of, nf) in of.iter().zip(nf.iter_mut()) {
                        if let (Some(ot), Some(nt)) = (of.get("type"), nf.get_mut("type")) {
                            restore_props(ot, nt, changed);
                        }
                    }
                }
                "array" => {
                    if let (Some(o), Some(n)) = (o.get("items"), n.get_mut("items")) {
                        restore_props(o, n, changed);
                    }
                }
                "map" => {
                    if let (Some(o), Some(n)) = (o.get("values"), n.get_mut("values")) {
                        restore_props(o, n, changed);
                    }
                }
                _ => {}
            }
        }
        _ => {}
    }
}

/// Whether a record type refers to itself (directly, or through other types and references).
fn is_recursive(
    schema: &Schema,
    names: &HashMap<String, &Schema>,
    enclosing: &mut Vec<Name>,
) -> bool {
    match schema {
        Schema::Ref { name } => {
            if enclosing.contains(name) {
                return true;
            }
            match names.get(&full(name)) {
                // A named type defined elsewhere in the tree (or in a reference) is walked
                // as if inline; the enclosing stack bounds the walk.
                Some(target) if !matches!(target, Schema::Ref { .. }) => {
                    is_recursive(target, names, enclosing)
                }
                _ => false,
            }
        }
        Schema::Record(r) => {
            if enclosing.contains(&r.name) {
                return true;
            }
            enclosing.push(r.name.clone());
            let found = r
                .fields
                .iter()
                .any(|f| is_recursive(&f.schema, names, enclosing));
            enclosing.pop();
            found
        }
        Schema::Array(a) => is_recursive(&a.items, names, enclosing),
        Schema::Map(m) => is_recursive(&m.types, names, enclosing),
        Schema::Union(u) => u
            .variants()
            .iter()
            .any(|v| is_recursive(v, names, enclosing)),
        _ => false,
    }
}

/// An error's message followed by those of its sources (apache-avro's own messages often leave
/// out the detail a user needs, such as where the JSON is broken).
fn with_sources(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        source = s.source();
    }
    msg
}

/// Named types of a schema and its references by full name, to resolve `Schema::Ref`.
pub fn names<'a>(schema: &'a Schema, refs: &'a [Schema]) -> HashMap<String, &'a Schema> {
    fn walk<'a>(s: &'a Schema, out: &mut HashMap<String, &'a Schema>) {
        match s {
            Schema::Record(r) => {
                // A name seen before is a recursive reference: walked already.
                let first_visit = out.insert(r.name.fullname(None), s).is_none();
                if first_visit {
                    for f in &r.fields {
                        walk(&f.schema, out);
                    }
                }
            }
            Schema::Enum(e) => {
                out.insert(e.name.fullname(None), s);
            }
            Schema::Fixed(f) => {
                out.insert(f.name.fullname(None), s);
            }
            Schema::Array(a) => walk(&a.items, out),
            Schema::Map(m) => walk(&m.types, out),
            Schema::Union(u) => u.variants().iter().for_each(|v| walk(v, out)),
            Schema::Decimal(d) => walk(&d.inner, out),
            _ => {}
        }
    }
    let mut out = HashMap::new();
    for r in refs {
        walk(r, &mut out);
    }
    walk(schema, &mut out);
    out
}

struct Checker<'a> {
    writer_names: HashMap<String, &'a Schema>,
    reader_names: HashMap<String, &'a Schema>,
    /// (writer, reader) named-type pairs being checked: recursive types are assumed compatible
    /// on re-entry, their fields being checked on the first visit.
    in_progress: HashSet<(String, String)>,
    errors: Vec<String>,
}

/// Checks that data written with `writer` can be read with `reader` (Avro specification,
/// "Schema Resolution"). Returns the reasons it cannot, empty when it can.
pub fn can_read(writer: &Schema, reader: &Schema) -> Vec<String> {
    can_read_with_refs(writer, &[], reader, &[])
}

/// [`can_read`] for parsed schemas, whose references name types too.
pub fn can_read_parsed(writer: &AvroSchema, reader: &AvroSchema) -> Vec<String> {
    can_read_with_refs(&writer.schema, &writer.refs, &reader.schema, &reader.refs)
}

fn can_read_with_refs(
    writer: &Schema,
    writer_refs: &[Schema],
    reader: &Schema,
    reader_refs: &[Schema],
) -> Vec<String> {
    let mut c = Checker {
        writer_names: names(writer, writer_refs),
        reader_names: names(reader, reader_refs),
        in_progress: HashSet::new(),
        errors: Vec::new(),
    };
    c.check(writer, reader, "/");
    c.errors
}

fn full(name: &Name) -> String {
    name.fullname(None)
}

/// Whether a reader named `reader` (with `aliases`) accepts a writer named `writer`. Like the
/// Java implementation, the unqualified names also match, since many producers only change the
/// namespace.
fn name_matches(writer: &Name, reader: &Name, aliases: Option<Vec<String>>) -> bool {
    if full(writer) == full(reader) || writer.name == reader.name {
        return true;
    }
    aliases
        .unwrap_or_default()
        .iter()
        .any(|a| *a == full(writer) || *a == writer.name)
}

fn alias_names(aliases: &apache_avro::schema::Aliases, ns: &Option<String>) -> Option<Vec<String>> {
    aliases.as_ref().map(|v| {
        v.iter()
            .map(|a| match a.namespace().or_else(|| ns.clone()) {
                Some(n) if !n.is_empty() => format!("{n}.{}", a.name()),
                _ => a.name(),
            })
            .collect()
    })
}

impl<'a> Checker<'a> {
    fn resolve_w(&self, s: &'a Schema) -> &'a Schema {
        match s {
            Schema::Ref { name } => self.writer_names.get(&full(name)).copied().unwrap_or(s),
            _ => s,
        }
    }
    fn resolve_r(&self, s: &'a Schema) -> &'a Schema {
        match s {
            Schema::Ref { name } => self.reader_names.get(&full(name)).copied().unwrap_or(s),
            _ => s,
        }
    }

    /// Whether `writer` can be read as `reader` without recording errors (for union branches).
    fn quietly(&mut self, writer: &'a Schema, reader: &'a Schema) -> bool {
        let saved = std::mem::take(&mut self.errors);
        self.check(writer, reader, "");
        let ok = self.errors.is_empty();
        self.errors = saved;
        ok
    }

    fn fail(&mut self, path: &str, msg: String) {
        self.errors.push(format!("{msg} at {path}"));
    }

    fn check(&mut self, writer: &'a Schema, reader: &'a Schema, path: &str) {
        let writer = self.resolve_w(writer);
        let reader = self.resolve_r(reader);
        let (Some(wk), Some(rk)) = (kind(writer), kind(reader)) else {
            self.fail(path, "unresolvable named type reference".into());
            return;
        };
        if let Schema::Union(wu) = writer {
            // Every branch the writer may have used must be readable.
            for (i, branch) in wu.variants().iter().enumerate() {
                self.check(branch, reader, &format!("{path}{i}/"));
            }
            return;
        }
        if let Schema::Union(ru) = reader {
            // The first reader branch that matches is used; some branch must.
            if !ru.variants().iter().any(|b| self.quietly(writer, b)) {
                self.fail(
                    path,
                    format!("reader union lacks a branch for the writer's type {wk:?}"),
                );
            }
            return;
        }
        match (wk, rk) {
            (a, b)
                if a == b
                    && matches!(
                        a,
                        Kind::Null
                            | Kind::Boolean
                            | Kind::Int
                            | Kind::Long
                            | Kind::Float
                            | Kind::Double
                            | Kind::Bytes
                            | Kind::String
                    ) => {}
            (Kind::Int, Kind::Long | Kind::Float | Kind::Double)
            | (Kind::Long, Kind::Float | Kind::Double)
            | (Kind::Float, Kind::Double)
            | (Kind::String, Kind::Bytes)
            | (Kind::Bytes, Kind::String) => {}
            (Kind::Array, Kind::Array) => {
                if let (Schema::Array(w), Schema::Array(r)) = (writer, reader) {
                    self.check(&w.items, &r.items, &format!("{path}items/"));
                }
            }
            (Kind::Map, Kind::Map) => {
                if let (Schema::Map(w), Schema::Map(r)) = (writer, reader) {
                    self.check(&w.types, &r.types, &format!("{path}values/"));
                }
            }
            (Kind::Record, Kind::Record) => {
                if let (Schema::Record(w), Schema::Record(r)) = (writer, reader) {
                    self.record(w, r, path);
                }
            }
            (Kind::Enum, Kind::Enum) => {
                if let (Schema::Enum(w), Schema::Enum(r)) = (writer, reader) {
                    let aliases = alias_names(&r.aliases, &r.name.namespace);
                    if !name_matches(&w.name, &r.name, aliases) {
                        self.fail(
                            path,
                            format!(
                                "enum name {} does not match {}",
                                full(&r.name),
                                full(&w.name)
                            ),
                        );
                        return;
                    }
                    let missing: Vec<&String> = w
                        .symbols
                        .iter()
                        .filter(|s| !r.symbols.contains(s))
                        .collect();
                    if !missing.is_empty() && r.default.is_none() {
                        self.fail(
                            path,
                            format!(
                                "reader enum {} lacks symbols {missing:?} and has no default",
                                full(&r.name)
                            ),
                        );
                    }
                }
            }
            (Kind::Fixed, Kind::Fixed) => {
                fn size(s: &Schema) -> Option<(usize, Option<&FixedSchema>)> {
                    match s {
                        Schema::Fixed(f) => Some((f.size, Some(f))),
                        Schema::Duration => Some((12, None)),
                        Schema::Decimal(d) => match d.inner.as_ref() {
                            Schema::Fixed(f) => Some((f.size, Some(f))),
                            _ => None,
                        },
                        _ => None,
                    }
                }
                if let (Some((ws, wf)), Some((rs, rf))) = (size(writer), size(reader)) {
                    if let (Some(wf), Some(rf)) = (wf, rf) {
                        let aliases = alias_names(&rf.aliases, &rf.name.namespace);
                        if !name_matches(&wf.name, &rf.name, aliases) {
                            self.fail(
                                path,
                                format!(
                                    "fixed name {} does not match {}",
                                    full(&rf.name),
                                    full(&wf.name)
                                ),
                            );
                            return;
                        }
                    }
                    if ws != rs {
                        self.fail(
                            path,
                            format!("fixed size {rs} does not match the writer's {ws}"),
                        );
                    }
                }
            }
            (w, r) => self.fail(
                path,
                format!("reader type {r:?} cannot read writer type {w:?}"),
            ),
        }
    }

    fn record(&mut self, w: &'a RecordSchema, r: &'a RecordSchema, path: &str) {
        let aliases = alias_names(&r.aliases, &r.name.namespace);
        if !name_matches(&w.name, &r.name, aliases) {
            self.fail(
                path,
                format!(
                    "record name {} does not match {}",
                    full(&r.name),
                    full(&w.name)
                ),
            );
            return;
        }
        if !self.in_progress.insert((full(&w.name), full(&r.name))) {
            return;
        }
        for rf in &r.fields {
            let found = w.fields.iter().find(|wf| {
                wf.name == rf.name || rf.aliases.as_ref().is_some_and(|a| a.contains(&wf.name))
            });
            let fpath = format!("{path}fields/{}/", rf.name);
            match found {
                Some(wf) => self.check(&wf.schema, &rf.schema, &fpath),
                None if rf.default.is_some() => {}
                None => self.fail(
                    &fpath,
                    format!(
                        "reader field {:?} is missing from the writer and has no default",
                        rf.name
                    ),
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Schema {
        parse(s).unwrap_or_else(|e| panic!("{s}: {e}")).schema
    }

    fn rec(fields: &str) -> String {
        format!(r#"{{"type":"record","name":"r","namespace":"n","fields":[{fields}]}}"#)
    }

    /// (case, writer, reader, compatible).
    fn cases() -> Vec<(&'static str, String, String, bool)> {
        let s = |x: &str| x.to_string();
        vec![
            ("int=int", s(r#""int""#), s(r#""int""#), true),
            ("null=null", s(r#""null""#), s(r#""null""#), true),
            (
                "boolean=boolean",
                s(r#""boolean""#),
                s(r#""boolean""#),
                true,
            ),
            ("int->long", s(r#""int""#), s(r#""long""#), true),
            ("int->float", s(r#""int""#), s(r#""float""#), true),
            ("int->double", s(r#""int""#), s(r#""double""#), true),
            ("long->float", s(r#""long""#), s(r#""float""#), true),
            ("long->double", s(r#""long""#), s(r#""double""#), true),
            ("float->double", s(r#""float""#), s(r#""double""#), true),
            ("long-/->int", s(r#""long""#), s(r#""int""#), false),
            ("double-/->float", s(r#""double""#), s(r#""float""#), false),
            ("float-/->long", s(r#""float""#), s(r#""long""#), false),
            ("string->bytes", s(r#""string""#), s(r#""bytes""#), true),
            ("bytes->string", s(r#""bytes""#), s(r#""string""#), true),
            ("string-/->int", s(r#""string""#), s(r#""int""#), false),
            ("boolean-/->int", s(r#""boolean""#), s(r#""int""#), false),
            ("null-/->string", s(r#""null""#), s(r#""string""#), false),
            (
                "array int->array long",
                s(r#"{"type":"array","items":"int"}"#),
                s(r#"{"type":"array","items":"long"}"#),
                true,
            ),
            (
                "array long-/->array int",
                s(r#"{"type":"array","items":"long"}"#),
                s(r#"{"type":"array","items":"int"}"#),
                false,
            ),
            (
                "map int->map double",
                s(r#"{"type":"map","values":"int"}"#),
                s(r#"{"type":"map","values":"double"}"#),
                true,
            ),
            (
                "map string-/->map int",
                s(r#"{"type":"map","values":"string"}"#),
                s(r#"{"type":"map","values":"int"}"#),
                false,
            ),
            (
                "array-/->map",
                s(r#"{"type":"array","items":"int"}"#),
                s(r#"{"type":"map","values":"int"}"#),
                false,
            ),
            (
                "int->union[null,int]",
                s(r#""int""#),
                s(r#"["null","int"]"#),
                true,
            ),
            (
                "int->union[null,long] by promotion",
                s(r#""int""#),
                s(r#"["null","long"]"#),
                true,
            ),
            (
                "string-/->union[null,int]",
                s(r#""string""#),
                s(r#"["null","int"]"#),
                false,
            ),
            (
                "union[null,int]-/->int",
                s(r#"["null","int"]"#),
                s(r#""int""#),
                false,
            ),
            (
                "union[int,long]->long",
                s(r#"["int","long"]"#),
                s(r#""long""#),
                true,
            ),
            (
                "union[null,int]->union[null,int,string]",
                s(r#"["null","int"]"#),
                s(r#"["null","int","string"]"#),
                true,
            ),
            (
                "union[null,int,string]-/->union[null,int]",
                s(r#"["null","int","string"]"#),
                s(r#"["null","int"]"#),
                false,
            ),
            (
                "same record",
                rec(r#"{"name":"a","type":"int"}"#),
                rec(r#"{"name":"a","type":"int"}"#),
                true,
            ),
            (
                "reader adds field with default",
                rec(r#"{"name":"a","type":"int"}"#),
                rec(r#"{"name":"a","type":"int"},{"name":"b","type":"string","default":"x"}"#),
                true,
            ),
            (
                "reader adds field without default",
                rec(r#"{"name":"a","type":"int"}"#),
                rec(r#"{"name":"a","type":"int"},{"name":"b","type":"string"}"#),
                false,
            ),
            (
                "reader adds nullable field with null default",
                rec(r#"{"name":"a","type":"int"}"#),
                rec(
                    r#"{"name":"a","type":"int"},{"name":"b","type":["null","string"],"default":null}"#,
                ),
                true,
            ),
            (
                "reader drops a field",
                rec(r#"{"name":"a","type":"int"},{"name":"b","type":"int"}"#),
                rec(r#"{"name":"a","type":"int"}"#),
                true,
            ),
            (
                "field promoted int->long",
                rec(r#"{"name":"a","type":"int"}"#),
                rec(r#"{"name":"a","type":"long"}"#),
                true,
            ),
            (
                "field narrowed long->int",
                rec(r#"{"name":"a","type":"long"}"#),
                rec(r#"{"name":"a","type":"int"}"#),
                false,
            ),
            (
                "field renamed with alias",
                rec(r#"{"name":"a","type":"int"}"#),
                rec(r#"{"name":"b","aliases":["a"],"type":"int"}"#),
                true,
            ),
            (
                "field renamed without alias or default",
                rec(r#"{"name":"a","type":"int"}"#),
                rec(r#"{"name":"b","type":"int"}"#),
                false,
            ),
            (
                "record name differs",
                s(r#"{"type":"record","name":"x","fields":[]}"#),
                s(r#"{"type":"record","name":"y","fields":[]}"#),
                false,
            ),
            (
                "record renamed with alias",
                s(r#"{"type":"record","name":"x","namespace":"n","fields":[]}"#),
                s(r#"{"type":"record","name":"y","namespace":"n","aliases":["x"],"fields":[]}"#),
                true,
            ),
            (
                "enum same",
                s(r#"{"type":"enum","name":"e","symbols":["A","B"]}"#),
                s(r#"{"type":"enum","name":"e","symbols":["A","B"]}"#),
                true,
            ),
            (
                "enum reader adds symbol",
                s(r#"{"type":"enum","name":"e","symbols":["A"]}"#),
                s(r#"{"type":"enum","name":"e","symbols":["A","B"]}"#),
                true,
            ),
            (
                "enum reader lacks symbol",
                s(r#"{"type":"enum","name":"e","symbols":["A","B"]}"#),
                s(r#"{"type":"enum","name":"e","symbols":["A"]}"#),
                false,
            ),
            (
                "enum reader lacks symbol but has default",
                s(r#"{"type":"enum","name":"e","symbols":["A","B"]}"#),
                s(r#"{"type":"enum","name":"e","symbols":["A"],"default":"A"}"#),
                true,
            ),
            (
                "enum name differs",
                s(r#"{"type":"enum","name":"e","symbols":["A"]}"#),
                s(r#"{"type":"enum","name":"f","symbols":["A"]}"#),
                false,
            ),
            (
                "fixed same",
                s(r#"{"type":"fixed","name":"f","size":4}"#),
                s(r#"{"type":"fixed","name":"f","size":4}"#),
                true,
            ),
            (
                "fixed size differs",
                s(r#"{"type":"fixed","name":"f","size":4}"#),
                s(r#"{"type":"fixed","name":"f","size":8}"#),
                false,
            ),
            (
                "fixed name differs",
                s(r#"{"type":"fixed","name":"f","size":4}"#),
                s(r#"{"type":"fixed","name":"g","size":4}"#),
                false,
            ),
            (
                "fixed-/->bytes",
                s(r#"{"type":"fixed","name":"f","size":4}"#),
                s(r#""bytes""#),
                false,
            ),
            (
                "date (int) -> long",
                s(r#"{"type":"int","logicalType":"date"}"#),
                s(r#""long""#),
                true,
            ),
            (
                "timestamp-millis = long",
                s(r#"{"type":"long","logicalType":"timestamp-millis"}"#),
                s(r#""long""#),
                true,
            ),
            (
                "uuid (string) -> string",
                s(r#"{"type":"string","logicalType":"uuid"}"#),
                s(r#""string""#),
                true,
            ),
            (
                "nested record field promoted",
                rec(
                    r#"{"name":"in","type":{"type":"record","name":"i","fields":[{"name":"x","type":"int"}]}}"#,
                ),
                rec(
                    r#"{"name":"in","type":{"type":"record","name":"i","fields":[{"name":"x","type":"double"}]}}"#,
                ),
                true,
            ),
            (
                "nested record gains required field",
                rec(
                    r#"{"name":"in","type":{"type":"record","name":"i","fields":[{"name":"x","type":"int"}]}}"#,
                ),
                rec(
                    r#"{"name":"in","type":{"type":"record","name":"i","fields":[{"name":"x","type":"int"},{"name":"y","type":"int"}]}}"#,
                ),
                false,
            ),
            (
                "recursive list same",
                s(
                    r#"{"type":"record","name":"node","fields":[{"name":"v","type":"int"},{"name":"next","type":["null","node"]}]}"#,
                ),
                s(
                    r#"{"type":"record","name":"node","fields":[{"name":"v","type":"int"},{"name":"next","type":["null","node"]}]}"#,
                ),
                true,
            ),
            (
                "recursive list promoted",
                s(
                    r#"{"type":"record","name":"node","fields":[{"name":"v","type":"int"},{"name":"next","type":["null","node"]}]}"#,
                ),
                s(
                    r#"{"type":"record","name":"node","fields":[{"name":"v","type":"long"},{"name":"next","type":["null","node"]}]}"#,
                ),
                true,
            ),
            (
                "record in union with new defaulted field",
                s(r#"["null",{"type":"record","name":"r","fields":[{"name":"a","type":"int"}]}]"#),
                s(
                    r#"["null",{"type":"record","name":"r","fields":[{"name":"a","type":"int"},{"name":"b","type":"int","default":0}]}]"#,
                ),
                true,
            ),
            (
                "named ref reused",
                rec(
                    r#"{"name":"a","type":{"type":"fixed","name":"f","size":2}},{"name":"b","type":"f"}"#,
                ),
                rec(
                    r#"{"name":"a","type":{"type":"fixed","name":"f","size":2}},{"name":"b","type":"f"}"#,
                ),
                true,
            ),
            (
                "union branch removed from field",
                rec(r#"{"name":"a","type":["null","string","int"]}"#),
                rec(r#"{"name":"a","type":["null","string"]}"#),
                false,
            ),
            (
                "field made nullable",
                rec(r#"{"name":"a","type":"string"}"#),
                rec(r#"{"name":"a","type":["null","string"],"default":null}"#),
                true,
            ),
            (
                "field made non-nullable",
                rec(r#"{"name":"a","type":["null","string"],"default":null}"#),
                rec(r#"{"name":"a","type":"string"}"#),
                false,
            ),
        ]
    }

    #[test]
    fn avro_resolution_rules() {
        let cases = cases();
        assert!(cases.len() >= 40, "{} cases", cases.len());
        let mut failures = Vec::new();
        for (name, w, r, expected) in cases {
            let errors = can_read(&p(&w), &p(&r));
            if errors.is_empty() != expected {
                failures.push(format!("{name}: expected {expected}, errors {errors:?}"));
            }
        }
        assert!(failures.is_empty(), "{failures:#?}");
    }

    #[test]
    fn normalization_ignores_whitespace_and_key_order_but_keeps_defaults() {
        let a =
            parse(r#"{"type":"record","name":"r","fields":[{"name":"a","type":"int"}]}"#).unwrap();
        let b = parse(" { \"fields\" : [ {\"type\":\"int\", \"name\":\"a\"} ], \"name\":\"r\", \"type\":\"record\" } ").unwrap();
        assert_eq!(a.normalized, b.normalized);
        let c = parse(
            r#"{"type":"record","name":"r","fields":[{"name":"a","type":"int","default":1}]}"#,
        )
        .unwrap();
        assert_ne!(a.normalized, c.normalized);
        assert_eq!(parse(&a.normalized).unwrap().normalized, a.normalized);
    }

    /// Properties of primitive types (Kafka Connect's `connect.name`) stay in the text, as
    /// Confluent's registry keeps them, and count for identity; a schema without any keeps
    /// apache-avro's text byte for byte.
    #[test]
    fn properties_of_primitive_types_are_kept() {
        let text = r#"{"type":"record","name":"V","fields":[
            {"name":"d","type":{"type":"int","connect.version":1,"connect.name":"io.debezium.time.Date"}},
            {"name":"o","type":["null",{"type":"long","connect.name":"io.debezium.time.MicroTimestamp"}],"default":null},
            {"name":"l","type":{"type":"array","items":{"type":"string","x-note":"kept"}}}]}"#;
        let a = parse(text).unwrap();
        let tree: serde_json::Value = serde_json::from_str(&a.normalized).unwrap();
        let fields = &tree["fields"];
        assert_eq!(fields[0]["type"]["connect.name"], "io.debezium.time.Date");
        assert_eq!(fields[0]["type"]["connect.version"], 1);
        assert_eq!(
            fields[1]["type"][1]["connect.name"],
            "io.debezium.time.MicroTimestamp"
        );
        assert_eq!(fields[2]["type"]["items"]["x-note"], "kept");
        // Idempotent, and a different schema from the same without the properties.
        assert_eq!(parse(&a.normalized).unwrap().normalized, a.normalized);
        let plain = parse(
            r#"{"type":"record","name":"V","fields":[{"name":"d","type":"int"},
            {"name":"o","type":["null","long"],"default":null},
            {"name":"l","type":{"type":"array","items":"string"}}]}"#,
        )
        .unwrap();
        assert_ne!(plain.normalized, a.normalized);
        assert_eq!(
            plain.normalized,
            serde_json::to_string(&plain.schema).unwrap()
        );
        assert!(plain.semantic.is_none());
        // The semantic view reads the Debezium types as logical types.
        let Some(Schema::Record(r)) = a.semantic.as_deref() else {
            panic!("a semantic view: {:?}", a.semantic)
        };
        assert!(
            matches!(r.fields[0].schema, Schema::Date),
            "{:?}",
            r.fields[0].schema
        );
        assert!(
            matches!(&r.fields[1].schema, Schema::Union(u) if matches!(u.variants()[1], Schema::LocalTimestampMicros)),
            "{:?}",
            r.fields[1].schema
        );
    }

    #[test]
    fn invalid_schemas_are_rejected() {
        for bad in [
            "",
            "{",
            r#"{"type":"nope"}"#,
            r#"{"type":"record","fields":[]}"#,
            r#"{"type":"enum","name":"e","symbols":["A","A"]}"#,
        ] {
            assert!(matches!(parse(bad), Err(Error::InvalidSchema(_))), "{bad}");
        }
    }
}
