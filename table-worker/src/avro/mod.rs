//! Avro in table topics: the table schema an Avro schema maps to, and a decoder from Avro binary
//! datums straight into Arrow arrays of that table's schema.
//!
//! - [`avro_to_iceberg`] ([`mapping`]) owns the conventions that turn an Avro record into table
//!   columns (unions, logical types, provisional field ids). Other code depends on them.
//! - [`AvroDecoder`] ([`decode`]) reads datums of one writer schema into the columns of one
//!   target Arrow schema — the table's, which may be newer than the writer's — matching fields
//!   by name. A datum that fails leaves no trace (rollback to the previous row count), and
//!   hostile input can neither panic it nor make it allocate out of proportion to the input.
//!
//! Inside: `names` resolves named types and guards expansion (recursion, depth, size) for both;
//! `plan` compiles writer × target into decoding ops; `columns` holds the buffers and builds the
//! arrays; `reader` reads the binary encoding.

mod columns;
pub(crate) mod decode;
pub(crate) mod mapping;
mod names;
mod plan;
mod reader;

pub use decode::AvroDecoder;
pub use mapping::avro_to_iceberg;

#[cfg(test)]
mod tests;
