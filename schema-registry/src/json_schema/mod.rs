//! JSON Schema support: parsing a registered schema (with its schema references), the canonical
//! text that decides its identity, Confluent's JSON Schema compatibility rules, and decoding
//! (validating) a framed JSON payload.
//!
//! Invariants:
//! - A [`JsonSchema`] only exists for text that is JSON (an object or a boolean), is valid against
//!   the meta-schema of its draft (from `$schema`; draft 7 when absent or unknown, as Confluent
//!   does) and whose every `$ref` resolves. `$ref`s to other schemas resolve only from the
//!   references given to [`parse`]: nothing is fetched from the network or the file system.
//! - [`JsonSchema::canonical`] is the schema's JSON with object keys sorted and no whitespace:
//!   two registrations that differ only in whitespace or key order are the same schema.
//! - [`can_read`] follows Confluent's `SchemaDiff` (io.confluent.kafka.schemaregistry.json.diff):
//!   the writer's schema is the "original", the reader's the "update", and every difference found
//!   must be one of Confluent's compatible change types. It terminates on recursive schemas and
//!   on reference cycles (see [`compat`]).
//! - [`decode_payload`] never panics: non-UTF-8, non-JSON, too deeply nested (serde_json's
//!   recursion limit of 128) and schema-invalid payloads are errors naming the failing path.

mod compat;

use std::sync::Arc;

use jsonschema::{Draft, Retrieve, Uri};
use serde_json::Value;

use crate::error::{Error, Result};

/// How many validation errors [`decode_payload`] reports at most.
const MAX_REPORTED_ERRORS: usize = 3;
/// Longest message of one validation error (the validator quotes the offending value).
const MAX_ERROR_CHARS: usize = 200;

/// A parsed JSON Schema with its compiled validator.
#[derive(Debug, Clone)]
pub struct JsonSchema {
    pub value: Value,
    /// Canonical text (object keys sorted, no whitespace): decides schema identity and is what
    /// the REST API serves.
    pub canonical: String,
    /// The compiled validator (not `Clone`-cheap, hence shared).
    validator: Arc<jsonschema::Validator>,
    /// The parsed references (name, schema), for following `$ref`s when comparing schemas.
    references: Arc<[(String, Value)]>,
    /// Estimated memory, computed once at parse time.
    bytes: usize,
}

impl JsonSchema {
    /// Estimated memory in bytes (for a byte-budgeted cache).
    pub fn estimated_bytes(&self) -> usize {
        self.bytes
    }
}

/// Parses and compiles a JSON Schema.
///
/// `text`: the schema as registered. `refs`: reference name (what `$ref` uses, e.g.
/// "address.json" or "https://example.com/address.schema.json") → the referenced schema's text,
/// flattened (references of references included).
pub fn parse(text: &str, refs: &[(String, String)]) -> Result<JsonSchema> {
    let value: Value = serde_json::from_str(text)
        .map_err(|e| Error::InvalidSchema(format!("the schema is not valid JSON: {e}")))?;
    if !value.is_object() && !value.is_boolean() {
        return Err(Error::InvalidSchema(
            "a JSON Schema must be a JSON object or a boolean".to_string(),
        ));
    }
    let mut references = Vec::with_capacity(refs.len());
    for (name, ref_text) in refs {
        let ref_value: Value = serde_json::from_str(ref_text).map_err(|e| {
            Error::InvalidSchema(format!(
                "the schema reference \"{name}\" is not valid JSON: {e}"
            ))
        })?;
        references.push((name.clone(), ref_value));
    }
    let references: Arc<[(String, Value)]> = references.into();
    let validator = compile(&value, &references)?;
    let canonical = canonical_text(&value);
    let bytes = estimate(&value, &canonical, &references);
    Ok(JsonSchema {
        value,
        canonical,
        validator: Arc::new(validator),
        references,
        bytes,
    })
}

/// Compiles `value` with `references` as the only source of external `$ref`s.
///
/// Each reference is a resource under its name (resolved against the default base URI, as a
/// relative `$ref` in a schema without `$id` is) and, when the root schema has an `$id`, also
/// under the name resolved against that `$id`. Anything else a `$ref` names goes to
/// [`ReferenceRetriever`], which only answers from the same references.
fn compile(value: &Value, references: &Arc<[(String, Value)]>) -> Result<jsonschema::Validator> {
    let root_id = value.get("$id").and_then(Value::as_str);
    let mut resources: Vec<(String, &Value)> = Vec::new();
    for (name, ref_value) in references.iter() {
        resources.push((name.clone(), ref_value));
        if let Some(resolved) = root_id.and_then(|id| resolve_against(id, name)) {
            if resolved != *name {
                resources.push((resolved, ref_value));
            }
        }
    }
    let registry = jsonschema::Registry::new()
        .retriever(ReferenceRetriever(references.clone()))
        .extend(resources.iter().map(|(uri, v)| (uri.as_str(), *v)))
        .and_then(|builder| builder.prepare())
        .map_err(|e| Error::InvalidSchema(referencing_message(&e)))?;

    jsonschema::options()
        .with_draft(draft_of(value))
        .with_registry(&registry)
        .with_retriever(ReferenceRetriever(references.clone()))
        .build(value)
        .map_err(|e| Error::InvalidSchema(build_message(&e)))
}

/// Reasons a consumer using `reader` cannot read data written with `writer`, per Confluent's
/// JSON Schema compatibility rules; empty when compatible. BACKWARD for new schema N over old O
/// is `can_read(N, O)`; FORWARD is `can_read(O, N)`. (Confluent: SchemaDiff.compare(original =
/// writer, update = reader); every difference must be a compatible one.)
pub fn can_read(reader: &JsonSchema, writer: &JsonSchema) -> Vec<String> {
    compat::incompatibilities(reader, writer)
}

/// Decodes a Confluent JSON payload (bytes after the 5-byte magic+id header): UTF-8 JSON text,
/// validated against the schema. Errors are short human-readable strings naming the failing path
/// (e.g. "/age: \"x\" is not of type \"integer\"").
pub fn decode_payload(schema: &JsonSchema, payload: &[u8]) -> std::result::Result<Value, String> {
    let text = std::str::from_utf8(payload).map_err(|e| format!("payload is not UTF-8: {e}"))?;
    // serde_json refuses nesting deeper than 128 levels, so neither parsing nor validating
    // recurses without bound.
    let value: Value =
        serde_json::from_str(text).map_err(|e| format!("payload is not valid JSON: {e}"))?;
    let mut errors = schema.validator.iter_errors(&value);
    let mut messages = Vec::new();
    let mut more = false;
    for error in errors.by_ref() {
        if messages.len() == MAX_REPORTED_ERRORS {
            more = true;
            break;
        }
        messages.push(format!(
            "{}: {}",
            display_path(error.instance_path().as_str()),
            truncate(&error.to_string())
        ));
    }
    drop(errors);
    if messages.is_empty() {
        return Ok(value);
    }
    let mut out = messages.join("; ");
    if more {
        out.push_str("; and more");
    }
    Err(out)
}

/// The draft a schema is compiled with: its `$schema`, or draft 7 (Confluent's default) when it
/// has none or names a meta-schema we do not know.
fn draft_of(value: &Value) -> Draft {
    match Draft::Draft7.detect(value) {
        Draft::Unknown => Draft::Draft7,
        draft => draft,
    }
}

/// `name` resolved against the absolute URI `base`; `None` when either does not parse or
/// `name` is already absolute.
fn resolve_against(base: &str, name: &str) -> Option<String> {
    if name.contains("://") || name.starts_with("urn:") {
        return None;
    }
    let base = jsonschema::uri::from_str(base).ok()?;
    let resolved = jsonschema::uri::resolve_against(&base.borrow(), name).ok()?;
    Some(resolved.as_str().to_string())
}

/// Answers the `$ref`s the registry did not already hold, from the given references only: by
/// exact name, or by a name that is the last segments of the requested URI (a relative `$ref`
/// under a nested `$id`). Never touches the network or the file system.
struct ReferenceRetriever(Arc<[(String, Value)]>);

impl Retrieve for ReferenceRetriever {
    fn retrieve(
        &self,
        uri: &Uri<String>,
    ) -> std::result::Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        let wanted = uri.as_str().trim_end_matches('#');
        let found = self.0.iter().find(|(name, _)| {
            let name = name.trim_start_matches("./");
            wanted == name || wanted.ends_with(&format!("/{name}"))
        });
        match found {
            Some((_, value)) => Ok(value.clone()),
            None => Err("it is not one of the schema references".into()),
        }
    }
}

/// A user-facing message for a failure to compile the schema.
fn build_message(e: &jsonschema::ValidationError<'_>) -> String {
    if let jsonschema::error::ValidationErrorKind::Referencing(r) = e.kind() {
        return referencing_message(r);
    }
    let mut message = e.to_string();
    // "not valid under any of the schemas listed in 'anyOf'" alone does not say what to fix:
    // add what the meta-schema's first alternative expected.
    if let jsonschema::error::ValidationErrorKind::AnyOf { context }
    | jsonschema::error::ValidationErrorKind::OneOfNotValid { context } = e.kind()
    {
        if let Some(first) = context.iter().flatten().next() {
            message.push_str(&format!(" (e.g. {first})"));
        }
    }
    let path = e.instance_path().as_str();
    if path.is_empty() {
        format!("not a valid JSON Schema: {}", truncate(&message))
    } else {
        format!("not a valid JSON Schema at {path}: {}", truncate(&message))
    }
}

fn referencing_message(e: &jsonschema::ReferencingError) -> String {
    match e {
        jsonschema::ReferencingError::Unretrievable { uri, .. } => format!(
            "the $ref \"{uri}\" cannot be resolved: a schema that another schema refers to must \
             be given as a schema reference (\"references\": [{{\"name\": \"{uri}\", \
             \"subject\": ..., \"version\": ...}}]) whose name is what the $ref says"
        ),
        jsonschema::ReferencingError::PointerToNowhere { pointer } => format!(
            "the $ref pointer \"{pointer}\" does not point to anything in the schema it names"
        ),
        other => format!("a $ref cannot be resolved: {other}"),
    }
}

/// A JSON pointer for messages: the root, which is the empty pointer, is shown as "(root)".
fn display_path(pointer: &str) -> &str {
    if pointer.is_empty() {
        "(root)"
    } else {
        pointer
    }
}

fn truncate(message: &str) -> String {
    if message.chars().count() <= MAX_ERROR_CHARS {
        return message.to_string();
    }
    let mut out: String = message.chars().take(MAX_ERROR_CHARS).collect();
    out.push('…');
    out
}

/// The canonical text: object keys sorted (by their UTF-8 bytes), no whitespace, strings and
/// numbers as serde_json writes them.
fn canonical_text(value: &Value) -> String {
    fn write(value: &Value, out: &mut String) {
        match value {
            Value::Object(map) => {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
                out.push('{');
                for (i, (key, v)) in entries.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(key.clone()).to_string());
                    out.push(':');
                    write(v, out);
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(v, out);
                }
                out.push(']');
            }
            scalar => out.push_str(&scalar.to_string()),
        }
    }
    let mut out = String::new();
    write(value, &mut out);
    out
}

/// Estimated memory of a parsed schema: its tree, its canonical text, the references' trees and
/// the compiled validator (several times the text: it holds a node per keyword).
fn estimate(value: &Value, canonical: &str, references: &[(String, Value)]) -> usize {
    fn tree(value: &Value) -> usize {
        let node = std::mem::size_of::<Value>();
        node + match value {
            Value::String(s) => s.len(),
            Value::Array(items) => items.iter().map(tree).sum(),
            Value::Object(map) => map
                .iter()
                .map(|(k, v)| k.len() + std::mem::size_of::<String>() + 16 + tree(v))
                .sum(),
            _ => 0,
        }
    }
    let refs: usize = references
        .iter()
        .map(|(name, v)| name.len() + tree(v))
        .sum();
    std::mem::size_of::<JsonSchema>() + tree(value) + canonical.len() * 9 + refs * 2 + 1024
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn refs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(n, t)| (n.to_string(), t.to_string()))
            .collect()
    }

    fn invalid(text: &str, references: &[(String, String)]) -> String {
        match parse(text, references) {
            Err(Error::InvalidSchema(msg)) => msg,
            Err(other) => panic!("{text}: expected InvalidSchema, got {other:?}"),
            Ok(_) => panic!("{text}: expected InvalidSchema, got a schema"),
        }
    }

    #[test]
    fn canonical_ignores_whitespace_and_key_order() {
        let a = parse(
            r#"{"type": "object", "properties": {"b": {"type": "string"}, "a": {"type": "integer"}}}"#,
            &[],
        )
        .unwrap();
        let b = parse(
            "{\n  \"properties\":{\"a\":{\"type\":\"integer\"},\n \"b\":{\"type\":\"string\"}},\"type\":\"object\"}",
            &[],
        )
        .unwrap();
        assert_eq!(a.canonical, b.canonical);
        assert_eq!(
            a.canonical,
            r#"{"properties":{"a":{"type":"integer"},"b":{"type":"string"}},"type":"object"}"#
        );
        let c = parse(r#"{"type":"object","title":"x"}"#, &[]).unwrap();
        assert_ne!(a.canonical, c.canonical);
        assert_eq!(parse("true", &[]).unwrap().canonical, "true");
        // Escapes are serde_json's.
        let d = parse(r#"{"description":"a\"b\u00e9\n"}"#, &[]).unwrap();
        assert_eq!(d.canonical, "{\"description\":\"a\\\"bé\\n\"}");
        assert!(a.estimated_bytes() > a.canonical.len());
    }

    #[test]
    fn invalid_schemas_are_refused() {
        assert!(invalid("{not json", &[]).contains("not valid JSON"));
        assert!(invalid("42", &[]).contains("object or a boolean"));
        assert!(invalid(r#""string""#, &[]).contains("object or a boolean"));
        assert!(invalid("[]", &[]).contains("object or a boolean"));
        assert!(invalid(r#"{"type": 5}"#, &[]).contains("/type"));
        assert!(invalid(r#"{"type": "strin"}"#, &[]).contains("/type"));
        assert!(invalid(r#"{"minLength": -1}"#, &[]).contains("/minLength"));
        assert!(invalid(r#"{"properties": {"a": {"required": "x"}}}"#, &[]).contains("required"));
        // A draft-2020-12 schema is checked against its own meta-schema.
        invalid(
            r#"{"$schema":"https://json-schema.org/draft/2020-12/schema","prefixItems":{}}"#,
            &[],
        );
        assert!(
            invalid(r##"{"$ref": "#/definitions/missing"}"##, &[]).contains("/definitions/missing")
        );
        // Valid ones of several drafts.
        for ok in [
            "true",
            "false",
            "{}",
            r#"{"$schema":"http://json-schema.org/draft-04/schema#","type":"integer","maximum":3,"exclusiveMaximum":true}"#,
            r#"{"$schema":"http://json-schema.org/draft-06/schema#","exclusiveMaximum":3}"#,
            r##"{"$schema":"https://json-schema.org/draft/2019-09/schema","$defs":{"a":{"type":"string"}},"$ref":"#/$defs/a"}"##,
            r#"{"$schema":"https://json-schema.org/draft/2020-12/schema","prefixItems":[{"type":"string"}],"items":false}"#,
            r#"{"$schema":"http://example.com/custom-meta","type":"string"}"#,
        ] {
            parse(ok, &[]).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
    }

    #[test]
    fn references_resolve_only_from_the_given_ones() {
        let address =
            r#"{"type":"object","properties":{"street":{"type":"string"}},"required":["street"]}"#;
        let person = r#"{"type":"object","properties":{"address":{"$ref":"address.json"}}}"#;
        let s = parse(person, &refs(&[("address.json", address)])).unwrap();
        assert!(decode_payload(&s, br#"{"address":{"street":"Main"}}"#).is_ok());
        let err = decode_payload(&s, br#"{"address":{"street":5}}"#).unwrap_err();
        assert!(err.contains("/address/street"), "{err}");

        // Missing: an InvalidSchema naming the ref and saying how to give it.
        let msg = invalid(person, &[]);
        assert!(msg.contains("address.json"), "{msg}");
        assert!(msg.contains("schema reference"), "{msg}");
        // A remote URL is never fetched.
        let msg = invalid(r#"{"$ref":"https://example.com/nowhere.json"}"#, &[]);
        assert!(msg.contains("https://example.com/nowhere.json"), "{msg}");

        // By absolute URL name, by the referenced schema's own $id, relative to the root's $id,
        // with a pointer into the referenced schema, and references of references.
        let by_url = parse(
            r#"{"$ref":"https://example.com/address.schema.json"}"#,
            &refs(&[("https://example.com/address.schema.json", address)]),
        )
        .unwrap();
        assert!(decode_payload(&by_url, br#"{}"#).is_err());
        let with_id = r#"{"$id":"https://example.com/address.schema.json","type":"string"}"#;
        let by_id = parse(
            r#"{"$ref":"https://example.com/address.schema.json"}"#,
            &refs(&[("address.json", with_id)]),
        )
        .unwrap();
        assert!(decode_payload(&by_id, br#""x""#).is_ok());
        let relative = parse(
            r#"{"$id":"https://example.com/schemas/person.json","properties":{"a":{"$ref":"address.json"}}}"#,
            &refs(&[("address.json", address)]),
        )
        .unwrap();
        assert!(decode_payload(&relative, br#"{"a":{}}"#).is_err());
        let pointer = parse(
            r#"{"properties":{"s":{"$ref":"address.json#/properties/street"}}}"#,
            &refs(&[("address.json", address)]),
        )
        .unwrap();
        assert!(decode_payload(&pointer, br#"{"s":1}"#).is_err());
        let chained = parse(
            r#"{"$ref":"b.json"}"#,
            &refs(&[
                ("b.json", r#"{"$ref":"c.json"}"#),
                ("c.json", r#"{"type":"integer"}"#),
            ]),
        )
        .unwrap();
        assert!(decode_payload(&chained, b"1").is_ok());
        assert!(decode_payload(&chained, b"1.5").is_err());
        // A reference that is not JSON is refused by name.
        assert!(invalid(person, &refs(&[("address.json", "{")])).contains("address.json"));
    }

    #[test]
    fn decode_payload_validates_and_names_paths() {
        let s = parse(
            r#"{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},
                "tags":{"type":"array","items":{"type":"string","maxLength":3}}},
                "required":["name"],"additionalProperties":false}"#,
            &[],
        )
        .unwrap();
        let v = decode_payload(&s, br#"{"name":"a","age":3,"tags":["x"]}"#).unwrap();
        assert_eq!(v["age"], 3);

        let err = decode_payload(&s, br#"{"name":"a","age":"x"}"#).unwrap_err();
        assert_eq!(err, r#"/age: "x" is not of type "integer""#);
        let err = decode_payload(&s, br#"{"name":"a","tags":["x","toolong"]}"#).unwrap_err();
        assert!(err.starts_with("/tags/1: "), "{err}");
        let err = decode_payload(&s, br#"{"age":1}"#).unwrap_err();
        assert!(err.starts_with("(root): ") && err.contains("name"), "{err}");
        // At most a few errors.
        let err =
            decode_payload(&s, br#"{"age":"a","tags":[1,2,3,4,5,6],"x":1,"y":2}"#).unwrap_err();
        assert_eq!(err.matches("; ").count(), MAX_REPORTED_ERRORS, "{err}");
        assert!(err.ends_with("and more"), "{err}");
        // A long offending value is cut short.
        let long = format!(r#"{{"name":"{}","age":"{}"}}"#, "a", "z".repeat(10_000));
        assert!(decode_payload(&s, long.as_bytes()).unwrap_err().len() < 400);

        assert!(decode_payload(&s, b"\xff\xfe")
            .unwrap_err()
            .contains("UTF-8"));
        assert!(decode_payload(&s, b"{\"name\":")
            .unwrap_err()
            .contains("not valid JSON"));
        assert!(decode_payload(&s, b"")
            .unwrap_err()
            .contains("not valid JSON"));
        assert!(decode_payload(&s, b"{} {}")
            .unwrap_err()
            .contains("not valid JSON"));
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(decode_payload(&s, deep.as_bytes())
            .unwrap_err()
            .contains("not valid JSON"));

        let any = parse("true", &[]).unwrap();
        assert_eq!(
            decode_payload(&any, b" 12 ").unwrap(),
            serde_json::json!(12)
        );
        let none = parse("false", &[]).unwrap();
        assert!(decode_payload(&none, b"12")
            .unwrap_err()
            .starts_with("(root): "));
    }

    #[test]
    fn formats_follow_the_draft() {
        // Draft 7 asserts formats, as Confluent's validator does.
        let s = parse(r#"{"type":"string","format":"date"}"#, &[]).unwrap();
        assert!(decode_payload(&s, br#""2024-02-03""#).is_ok());
        assert!(decode_payload(&s, br#""yesterday""#).is_err());
    }

    proptest! {
        #[test]
        fn arbitrary_payloads_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let s = parse(
                r##"{"type":"object","properties":{"a":{"type":"array","items":{"$ref":"#"}},
                    "b":{"type":"string","pattern":"^(a+)+$"}},"additionalProperties":{"type":"number"}}"##,
                &[],
            ).unwrap();
            let _ = decode_payload(&s, &bytes);
        }

        #[test]
        fn arbitrary_json_text_never_panics(text in "[\\[\\]{}\":,0-9a-z\\\\ ]{0,128}") {
            let s = parse(r#"{"anyOf":[{"type":"array"},{"type":"object","required":["a"]}]}"#, &[]).unwrap();
            let _ = decode_payload(&s, text.as_bytes());
            let _ = parse(&text, &[]);
        }
    }
}
