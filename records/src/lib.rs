//! Kafka record batches (magic 2) as Inlet stores them, read without trusting them.
//!
//! - [`batch`]: splitting a record set into batches and checking each header and CRC without
//!   decoding records; rewriting the base offset and `LogAppendTime`.
//! - [`records`]: the records inside a batch, walked one at a time as Kafka's `LogValidator`
//!   reads them, decompressing as a stream within a byte bound; a control batch's marker.
//! - [`rewrite`]: batches rewritten record by record: recompressed for a topic's codec,
//!   compacted by the log cleaner.
//!
//! Both the Kafka endpoint (`inlet-ingest`: produce-time validation, ListOffsets by time) and
//! the table workers (`inlet-table-worker`: reading stored batches into conversion jobs) read
//! batches through this crate, so a batch one of them accepts the other can read, and neither
//! materialises what a hostile header claims. Nothing here does I/O or allocates more than one
//! record's worth beyond its input.

pub mod batch;
pub mod records;
pub mod rewrite;
