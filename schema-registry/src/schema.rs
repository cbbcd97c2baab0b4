//! A schema of any of the three types, parsed: what the registry stores, compares and decodes
//! with. Each type's own module owns its parsing, canonical text and compatibility rules
//! ([`avro`], [`protobuf`], [`json_schema`]); this module only dispatches on the type.
//!
//! Invariants: a schema's identity is its type, its canonical text and its references (in
//! order); the canonical text is what the REST API serves. A schema is parsed once, when
//! registered or first loaded into the cache, never per record.

use serde::{Deserialize, Serialize};

use crate::avro::{self, AvroSchema};
use crate::error::{Error, Result};
use crate::json_schema::{self, JsonSchema};
use crate::protobuf::{self, ProtoSchema};

/// The type of a schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaType {
    Avro,
    Protobuf,
    Json,
}

impl SchemaType {
    pub fn as_str(self) -> &'static str {
        match self {
            SchemaType::Avro => "AVRO",
            SchemaType::Protobuf => "PROTOBUF",
            SchemaType::Json => "JSON",
        }
    }

    /// Parses the `schemaType` field (absent: AVRO).
    pub fn parse(s: Option<&str>) -> Result<Self> {
        match s.map(str::to_ascii_uppercase).as_deref() {
            None | Some("AVRO") => Ok(SchemaType::Avro),
            Some("PROTOBUF") => Ok(SchemaType::Protobuf),
            Some("JSON") => Ok(SchemaType::Json),
            Some(other) => Err(Error::InvalidSchema(format!(
                "unknown schemaType {other:?}; valid types are AVRO, PROTOBUF and JSON"
            ))),
        }
    }

    /// All types, as `GET /schemas/types` lists them.
    pub const ALL: [SchemaType; 3] = [SchemaType::Avro, SchemaType::Protobuf, SchemaType::Json];
}

/// A reference from a schema to a version of another subject (Confluent `references`): the
/// name the schema uses for it (an Avro type name, a Protobuf import path, a JSON `$ref`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reference {
    pub name: String,
    pub subject: String,
    pub version: i64,
}

/// A parsed schema of one of the three types.
#[derive(Debug, Clone)]
pub enum ParsedSchema {
    Avro(AvroSchema),
    Protobuf(ProtoSchema),
    Json(JsonSchema),
}

impl ParsedSchema {
    /// Parses `text` as `schema_type`. `refs` are the referenced schemas, references of
    /// references included, as (name, text) pairs.
    pub fn parse(schema_type: SchemaType, text: &str, refs: &[(String, String)]) -> Result<Self> {
        Ok(match schema_type {
            SchemaType::Avro => {
                let texts: Vec<String> = refs.iter().map(|(_, t)| t.clone()).collect();
                ParsedSchema::Avro(avro::parse_with_refs(text, &texts)?)
            }
            SchemaType::Protobuf => ParsedSchema::Protobuf(protobuf::parse(text, refs)?),
            SchemaType::Json => ParsedSchema::Json(json_schema::parse(text, refs)?),
        })
    }

    pub fn schema_type(&self) -> SchemaType {
        match self {
            ParsedSchema::Avro(_) => SchemaType::Avro,
            ParsedSchema::Protobuf(_) => SchemaType::Protobuf,
            ParsedSchema::Json(_) => SchemaType::Json,
        }
    }

    /// The canonical text: identity (with the references) and what the API serves.
    pub fn canonical(&self) -> &str {
        match self {
            ParsedSchema::Avro(s) => &s.normalized,
            ParsedSchema::Protobuf(s) => &s.canonical,
            ParsedSchema::Json(s) => &s.canonical,
        }
    }

    /// Estimated memory of the parsed schema, for the cache's byte budget.
    pub fn estimated_bytes(&self) -> usize {
        match self {
            // The parsed tree holds every name and field: a few times the text (twice with
            // a semantic view).
            ParsedSchema::Avro(s) => {
                s.normalized.len() * 4 * (1 + usize::from(s.semantic.is_some())) + 256
            }
            ParsedSchema::Protobuf(s) => s.estimated_bytes(),
            ParsedSchema::Json(s) => s.estimated_bytes(),
        }
    }

    /// Reasons a reader with this schema cannot read data written with `writer`; empty when
    /// it can. Schemas of different types never can.
    pub fn can_read(&self, writer: &ParsedSchema) -> Vec<String> {
        match (self, writer) {
            (ParsedSchema::Avro(r), ParsedSchema::Avro(w)) => avro::can_read_parsed(w, r),
            (ParsedSchema::Protobuf(r), ParsedSchema::Protobuf(w)) => protobuf::can_read(r, w),
            (ParsedSchema::Json(r), ParsedSchema::Json(w)) => json_schema::can_read(r, w),
            (r, w) => vec![format!(
                "schema type changed from {} to {}",
                w.schema_type().as_str(),
                r.schema_type().as_str()
            )],
        }
    }
}

/// A registered schema, parsed.
#[derive(Debug)]
pub struct StoredSchema {
    /// The global id.
    pub id: u32,
    /// The canonical text, as stored and served.
    pub text: String,
    pub references: Vec<Reference>,
    pub parsed: ParsedSchema,
}

impl StoredSchema {
    pub fn new(id: u32, parsed: ParsedSchema, references: Vec<Reference>) -> Self {
        StoredSchema {
            id,
            text: parsed.canonical().to_string(),
            references,
            parsed,
        }
    }

    pub fn schema_type(&self) -> SchemaType {
        self.parsed.schema_type()
    }

    /// Estimated memory, for the cache's byte budget.
    pub fn estimated_bytes(&self) -> usize {
        self.parsed.estimated_bytes() + self.text.len()
    }
}

/// The references of a schema as stored: a JSON array, or empty for none, so that schemas
/// without references keep the identity key they had before references existed.
pub(crate) fn references_key(refs: &[Reference]) -> String {
    if refs.is_empty() {
        String::new()
    } else {
        serde_json::to_string(refs).unwrap_or_default()
    }
}

/// The references stored by [`references_key`].
pub(crate) fn references_from_key(key: &str) -> Result<Vec<Reference>> {
    if key.is_empty() {
        return Ok(Vec::new());
    }
    serde_json::from_str(key).map_err(|e| Error::Corrupt(format!("stored references: {e}")))
}
