//! Inlet's Confluent-compatible Schema Registry (docs/architecture.md, "Schemas and columns"). Producers keep using
//! Confluent's serializers pointed at it; the broker and the table workers decode framed
//! records with it.
//!
//! The main flow, from [`api::router`]:
//! 1. [`api`]: the REST API (axum), Confluent's JSON shapes and error codes; [`access`]: who
//!    may call it, when the node guards it.
//! 2. [`registry`]: the operations (register, look up, delete, settings, modes), one writer at a
//!    time; schema references are resolved here.
//! 3. [`schema`]: a parsed schema of any type. [`avro`], [`protobuf`] and [`json_schema`] each
//!    parse, normalize and check compatibility for their type; [`compat`] turns the
//!    reader/writer rule into the compatibility levels.
//! 4. `store`: durable state in the metadata store; `cache`: parsed schemas by id.
//! 5. [`framing`]: decoding a framed record (magic 0, schema id, then the payload of the
//!    schema's type) to a typed value; [`avro_json`]: Avro's JSON encoding both ways, for the
//!    command line's producer and consumer.

pub mod access;
pub(crate) mod api;
pub mod avro;
pub mod avro_json;
mod avro_spec;
mod cache;
pub(crate) mod compat;
pub(crate) mod config;
pub(crate) mod error;
pub mod framing;
pub mod json_schema;
pub mod protobuf;
pub(crate) mod registry;
pub(crate) mod schema;
mod store;

pub use access::{Access, Operation, Unauthenticated};
pub use api::{guarded_router, router, serve};
pub use compat::{Compatibility, Mode};
pub use config::RegistryConfig;
pub use error::{Error, Result};
pub use framing::{decode, Decoded, FramingError, Value};
pub use registry::{open, Deleted, Registry, SchemaRequest, SubjectVersion, VersionSpec};
pub use schema::{ParsedSchema, Reference, SchemaType, StoredSchema};
