//! `inlet schema list|get|diff`: the registry's subjects, one version's schema, and what
//! changed between two versions field by field (added, removed, retyped, a new default), with
//! the subject's compatibility level and whether the registry finds the newer version able to
//! read data of the older.
//!
//! The diff flattens each version to field paths (`address.zip`) with a type description per
//! schema type: an Avro record's fields (unions, arrays and maps described by their items, a
//! record inside one walked as well), a JSON Schema's `properties` (and which are required), a
//! Protobuf file's messages with their field numbers. Field paths are compared by name: a
//! rename shows as one removed and one added field.

use std::collections::BTreeMap;

use apache_avro::schema::Schema as Avro;
use inlet_schema_registry::ParsedSchema;
use prost_reflect::{Kind, MessageDescriptor};
use serde_json::Value;

use crate::registry::Registry;
use crate::topic::print_table;
use crate::{Failure, Result};

#[derive(clap::Args, Debug, Clone)]
pub struct RegistryArgs {
    /// The Schema Registry.
    #[arg(long, env = "INLET_REGISTRY", default_value = "http://127.0.0.1:8081")]
    pub registry: String,
    /// USER:PASSWORD for a registry that wants them (Confluent's basic.auth.user.info).
    #[arg(
        long = "basic-auth",
        env = "INLET_REGISTRY_BASIC_AUTH",
        value_name = "USER:PASSWORD"
    )]
    pub basic_auth: Option<String>,
}

impl RegistryArgs {
    fn open(&self) -> Result<Registry> {
        Registry::new(&self.registry, self.basic_auth.as_deref())
    }
}

#[derive(clap::Subcommand, Debug)]
pub enum SchemaCommand {
    /// Every subject with its latest version, schema id, type and compatibility level.
    ///
    /// Example: inlet schema list --format json
    List {
        /// table or json.
        #[arg(long, default_value = "table")]
        format: String,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// One version of a subject's schema (its text; --format json: the registry's answer).
    ///
    /// Examples:
    ///   inlet schema get orders-value
    ///   inlet schema get orders-value --version 2
    #[command(verbatim_doc_comment)]
    Get {
        subject: String,
        /// A version number, or latest.
        #[arg(long, default_value = "latest")]
        version: String,
        /// text or json.
        #[arg(long, default_value = "text")]
        format: String,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// What changed between two versions of a subject, field by field (default: the one
    /// before the latest, and the latest).
    ///
    /// Examples:
    ///   inlet schema diff orders-value
    ///   inlet schema diff orders-value 1 3
    #[command(verbatim_doc_comment)]
    Diff {
        subject: String,
        /// The older version.
        from: Option<String>,
        /// The newer version (default: latest).
        to: Option<String>,
        #[command(flatten)]
        registry: RegistryArgs,
    },
}

pub async fn run(command: SchemaCommand) -> Result<()> {
    match command {
        SchemaCommand::List { format, registry } => list(&registry.open()?, &format).await,
        SchemaCommand::Get {
            subject,
            version,
            format,
            registry,
        } => {
            let v = registry.open()?.version(&subject, &version).await?;
            match format.as_str() {
                "json" => println!("{v}"),
                "text" => {
                    let text = v["schema"].as_str().unwrap_or_default();
                    // JSON schemas pretty-printed; Protobuf as it is.
                    match serde_json::from_str::<Value>(text) {
                        Ok(json) => println!(
                            "{}",
                            serde_json::to_string_pretty(&json).unwrap_or_else(|_| text.into())
                        ),
                        Err(_) => println!("{}", text.trim_end()),
                    }
                    eprintln!(
                        "{subject} version {} (id {}, {})",
                        v["version"],
                        v["id"],
                        v["schemaType"].as_str().unwrap_or("AVRO")
                    );
                }
                other => {
                    return Err(Failure::usage(format!(
                        "--format {other:?}: expected text or json"
                    )))
                }
            }
            Ok(())
        }
        SchemaCommand::Diff {
            subject,
            from,
            to,
            registry,
        } => diff(&registry.open()?, &subject, from, to).await,
    }
}

async fn list(registry: &Registry, format: &str) -> Result<()> {
    let mut rows = Vec::new();
    for subject in registry.subjects().await? {
        let v = registry.version(&subject, "latest").await?;
        let level = registry.compatibility(&subject).await?;
        rows.push(serde_json::json!({
            "subject": subject,
            "version": v["version"],
            "id": v["id"],
            "type": v["schemaType"].as_str().unwrap_or("AVRO"),
            "compatibility": level,
        }));
    }
    match format {
        "json" => println!("{}", Value::Array(rows)),
        "table" => print_table(
            &["SUBJECT", "VERSION", "ID", "TYPE", "COMPATIBILITY"],
            rows.iter()
                .map(|r| {
                    ["subject", "version", "id", "type", "compatibility"]
                        .iter()
                        .map(|k| match &r[*k] {
                            Value::String(s) => s.clone(),
                            other => other.to_string(),
                        })
                        .collect()
                })
                .collect(),
        ),
        other => {
            return Err(Failure::usage(format!(
                "--format {other:?}: expected table or json"
            )))
        }
    }
    Ok(())
}

async fn diff(
    registry: &Registry,
    subject: &str,
    from: Option<String>,
    to: Option<String>,
) -> Result<()> {
    let (from, to) = match (from, to) {
        (Some(f), Some(t)) => (f, t),
        (Some(f), None) => (f, "latest".to_string()),
        (None, _) => {
            let versions = registry.versions(subject).await?;
            match versions[..] {
                [.., a, b] => (a.to_string(), b.to_string()),
                _ => {
                    return Err(Failure::usage(format!(
                        "{subject} has {} version(s): name the two to compare",
                        versions.len()
                    )))
                }
            }
        }
    };
    let old = registry.version(subject, &from).await?;
    let new = registry.version(subject, &to).await?;
    let old_fields = fields(&registry.parse(&old).await?);
    let new_fields = fields(&registry.parse(&new).await?);
    let level = registry.compatibility(subject).await?;
    println!(
        "{subject}: version {} (id {}) → version {} (id {}), compatibility {level}",
        old["version"], old["id"], new["version"], new["id"]
    );
    let lines = changes(&old_fields, &new_fields);
    if lines.is_empty() {
        println!("no field changes");
    }
    for line in lines {
        println!("{line}");
    }
    Ok(())
}

/// The lines of a diff: `+ path: type`, `- path: type`, `~ path: old → new`, by path.
pub fn changes(old: &BTreeMap<String, String>, new: &BTreeMap<String, String>) -> Vec<String> {
    let mut paths: Vec<&String> = old.keys().chain(new.keys()).collect();
    paths.sort();
    paths.dedup();
    paths
        .into_iter()
        .filter_map(|p| match (old.get(p), new.get(p)) {
            (None, Some(n)) => Some(format!("+ {p}: {n}")),
            (Some(o), None) => Some(format!("- {p}: {o}")),
            (Some(o), Some(n)) if o != n => Some(format!("~ {p}: {o} → {n}")),
            _ => None,
        })
        .collect()
}

/// A schema's fields as paths with a type description.
pub fn fields(schema: &ParsedSchema) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    match schema {
        ParsedSchema::Avro(a) => {
            let names = inlet_schema_registry::avro::names(&a.schema, &a.refs);
            avro_fields(&names, &a.schema, "", &mut out, 0);
        }
        ParsedSchema::Json(j) => json_fields(&j.value, "", &mut out, 0),
        ParsedSchema::Protobuf(p) => {
            for m in p.file.messages() {
                proto_fields(&m, m.name(), &mut out, 0);
            }
        }
    }
    out
}

/// Deeper nesting is not walked (a recursive type would never end).
const MAX_DEPTH: usize = 16;

type Names<'a> = std::collections::HashMap<String, &'a Avro>;

/// An Avro type in a few words.
fn avro_type(s: &Avro) -> String {
    match s {
        Avro::Union(u) => format!(
            "[{}]",
            u.variants()
                .iter()
                .map(avro_type)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Avro::Array(a) => format!("array<{}>", avro_type(&a.items)),
        Avro::Map(m) => format!("map<{}>", avro_type(&m.types)),
        Avro::Record(r) => r.name.fullname(None),
        Avro::Enum(e) => format!(
            "enum {} {{{}}}",
            e.name.fullname(None),
            e.symbols.join(", ")
        ),
        Avro::Fixed(f) => format!("fixed {}({})", f.name.fullname(None), f.size),
        Avro::Ref { name } => name.fullname(None),
        Avro::Decimal(d) => format!("decimal({}, {})", d.precision, d.scale),
        Avro::Date => "date".into(),
        Avro::TimeMillis => "time-millis".into(),
        Avro::TimeMicros => "time-micros".into(),
        Avro::TimestampMillis => "timestamp-millis".into(),
        Avro::TimestampMicros => "timestamp-micros".into(),
        Avro::TimestampNanos => "timestamp-nanos".into(),
        Avro::LocalTimestampMillis => "local-timestamp-millis".into(),
        Avro::LocalTimestampMicros => "local-timestamp-micros".into(),
        Avro::LocalTimestampNanos => "local-timestamp-nanos".into(),
        Avro::Uuid => "uuid".into(),
        Avro::Duration => "duration".into(),
        Avro::BigDecimal => "big-decimal".into(),
        other => format!("{:?}", apache_avro::schema::SchemaKind::from(other)).to_lowercase(),
    }
}

fn avro_fields(
    names: &Names<'_>,
    s: &Avro,
    prefix: &str,
    out: &mut BTreeMap<String, String>,
    depth: usize,
) {
    if depth > MAX_DEPTH {
        return;
    }
    let s = match s {
        Avro::Ref { name } => names.get(&name.fullname(None)).copied().unwrap_or(s),
        s => s,
    };
    match s {
        Avro::Record(r) => {
            for f in &r.fields {
                let path = if prefix.is_empty() {
                    f.name.clone()
                } else {
                    format!("{prefix}.{}", f.name)
                };
                let mut desc = avro_type(&f.schema);
                if let Some(d) = &f.default {
                    desc.push_str(&format!(" (default {d})"));
                }
                out.insert(path.clone(), desc);
                avro_fields(names, &f.schema, &path, out, depth + 1);
            }
        }
        Avro::Union(u) => u
            .variants()
            .iter()
            .for_each(|v| avro_fields(names, v, prefix, out, depth + 1)),
        Avro::Array(a) => avro_fields(names, &a.items, &format!("{prefix}[]"), out, depth + 1),
        Avro::Map(m) => avro_fields(names, &m.types, &format!("{prefix}{{}}"), out, depth + 1),
        _ => {}
    }
}

fn json_fields(v: &Value, prefix: &str, out: &mut BTreeMap<String, String>, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    let required: Vec<&str> = v["required"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if let Some(props) = v["properties"].as_object() {
        for (name, p) in props {
            let path = if prefix.is_empty() {
                name.clone()
            } else {
                format!("{prefix}.{name}")
            };
            let kind = match &p["type"] {
                Value::String(t) => t.clone(),
                Value::Array(ts) => ts
                    .iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join("|"),
                _ if p.get("$ref").is_some() => {
                    format!("$ref {}", p["$ref"].as_str().unwrap_or("?"))
                }
                _ => "any".into(),
            };
            let mut desc = kind;
            if required.contains(&name.as_str()) {
                desc.push_str(", required");
            }
            if let Some(d) = p.get("default") {
                desc.push_str(&format!(" (default {d})"));
            }
            out.insert(path.clone(), desc);
            json_fields(p, &path, out, depth + 1);
            if let Some(items) = p.get("items") {
                json_fields(items, &format!("{path}[]"), out, depth + 1);
            }
        }
    }
}

fn proto_fields(
    m: &MessageDescriptor,
    prefix: &str,
    out: &mut BTreeMap<String, String>,
    depth: usize,
) {
    if depth > MAX_DEPTH {
        return;
    }
    for f in m.fields() {
        let path = format!("{prefix}.{}", f.name());
        let kind = match f.kind() {
            Kind::Message(inner) => inner.full_name().to_string(),
            Kind::Enum(e) => format!("enum {}", e.full_name()),
            other => format!("{other:?}").to_lowercase(),
        };
        let label = if f.is_map() {
            "map "
        } else if f.is_list() {
            "repeated "
        } else {
            ""
        };
        out.insert(path.clone(), format!("{label}{kind} = {}", f.number()));
        if let Kind::Message(inner) = f.kind() {
            if !f.is_map() {
                proto_fields(&inner, &path, out, depth + 1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use inlet_schema_registry::SchemaType;

    fn parsed(kind: SchemaType, text: &str) -> ParsedSchema {
        ParsedSchema::parse(kind, text, &[]).unwrap()
    }

    #[test]
    fn an_avro_diff_names_added_removed_and_retyped_fields_with_their_paths() {
        let v1 = parsed(
            SchemaType::Avro,
            r#"{"type": "record", "name": "O", "fields": [
                {"name": "id", "type": "int"}, {"name": "note", "type": "string"},
                {"name": "addr", "type": ["null", {"type": "record", "name": "A",
                    "fields": [{"name": "zip", "type": "int"}]}], "default": null}]}"#,
        );
        let v2 = parsed(
            SchemaType::Avro,
            r#"{"type": "record", "name": "O", "fields": [
                {"name": "id", "type": "long"},
                {"name": "email", "type": ["null", "string"], "default": null},
                {"name": "addr", "type": ["null", {"type": "record", "name": "A",
                    "fields": [{"name": "zip", "type": "int"}, {"name": "city", "type": "string", "default": ""}]}], "default": null}]}"#,
        );
        assert_eq!(
            changes(&fields(&v1), &fields(&v2)),
            [
                "+ addr.city: string (default \"\")",
                "+ email: [null, string] (default null)",
                "~ id: int → long",
                "- note: string",
            ]
        );
        assert!(changes(&fields(&v2), &fields(&v2)).is_empty());
    }

    #[test]
    fn json_schema_and_protobuf_diffs_read_their_own_structure() {
        let j1 = parsed(
            SchemaType::Json,
            r#"{"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}"#,
        );
        let j2 = parsed(
            SchemaType::Json,
            r#"{"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}}"#,
        );
        assert_eq!(
            changes(&fields(&j1), &fields(&j2)),
            ["~ a: string, required → string", "+ b: integer"]
        );
        let p1 = parsed(
            SchemaType::Protobuf,
            "syntax = \"proto3\"; message M { string a = 1; }",
        );
        let p2 = parsed(
            SchemaType::Protobuf,
            "syntax = \"proto3\"; message M { int64 a = 1; repeated string tags = 2; }",
        );
        assert_eq!(
            changes(&fields(&p1), &fields(&p2)),
            [
                "~ M.a: string = 1 → int64 = 1",
                "+ M.tags: repeated string = 2"
            ]
        );
    }
}
