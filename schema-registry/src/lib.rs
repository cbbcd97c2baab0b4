//! Inlet's Confluent-compatible Schema Registry (DESIGN.md §2, §5). Producers keep using
//! Confluent's serializers pointed at it; the broker and the table workers decode framed
//! records with it.
//!
//! The main flow, from [`api::router`]:
//! 1. [`api`]: the REST API (axum), Confluent's JSON shapes and error codes.
//! 2. [`registry`]: the operations (register, look up, delete, settings), one writer at a time.
//! 3. [`avro`] parses and normalizes schemas and implements Avro's resolution rules;
//!    [`compat`] turns them into the compatibility levels.
//! 4. [`store`]: durable state in the metadata store; `cache`: parsed schemas by id.
//! 5. [`framing`]: decoding a framed record (magic 0, schema id, Avro datum) to a value.
//!
//! Only Avro so far: Protobuf, JSON Schema and schema references are answered with
//! 422 / 42201 "not supported yet".

pub mod api;
pub mod avro;
mod cache;
pub mod compat;
pub mod config;
pub mod error;
pub mod framing;
pub mod protobuf;
pub mod registry;
mod store;

pub use api::{router, serve};
pub use compat::{Compatibility, Mode};
pub use config::RegistryConfig;
pub use error::{Error, Result};
pub use framing::{decode, Decoded, FramingError};
pub use registry::{
    open, Registry, SchemaRequest, SchemaType, StoredSchema, SubjectVersion, VersionSpec,
};
