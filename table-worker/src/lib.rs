//! Table workers (docs/architecture.md, "Table workers"): turn ranges of a table topic's records into Arrow record
//! batches and ~32 MiB Parquet data files, map schemas to Iceberg types, propose schema
//! evolution, and lend conversion memory from one node-wide budget (docs/table-worker.md).
//!
//! The main flow, from [`job::convert_range`]:
//! 1. [`memory`]: the node-wide conversion budget a job borrows from while it runs.
//! 2. [`avro`], [`protobuf`], [`json`]: each type's schema → Iceberg mapping and its decoder
//!    into Arrow columns (all-or-nothing per row).
//! 3. [`evolve`]: the table's schema with stable field ids, and the changes a new writer
//!    schema needs.
//! 4. [`data_file`]: zstd Parquet data files with Iceberg statistics, one per partition
//!    ([`partition`] parses `table.topic.partition.by`).
//! 5. [`key`]: the decoded Kafka key as the `_key` column (`convert.key.type`).
//! 6. Upsert and CDC tables: [`upsert`] de-duplicates a job's rows by key and turns replaced
//!    or deleted rows into [`position_delete`] files, found through the table's primary-key
//!    index ([`pk_index`], memory-bounded, spilling to local disk, rebuilt from the table or
//!    caught up from a checkpoint of it: [`index_checkpoint`]).
//!
//! [`check`] runs the same decoders at produce time, so that the broker refuses exactly the
//! payloads a job would send to the dead-letter table.
//!
//! [`worker`] decides which ranges to convert and when, and holds each upsert table's index.

// The public namespaces: each is a small API of its own, whose function names read with
// the module's (`data_file::write`, `partition::parse`).
pub mod data_file;
pub mod dead_letter;
pub mod partition;
pub mod position_delete;

// Everything else is the crate's own; what other crates use is re-exported below.
pub(crate) mod avro;
pub(crate) mod check;
pub(crate) mod error;
pub(crate) mod event_time;
pub(crate) mod evolve;
pub(crate) mod index_checkpoint;
pub(crate) mod job;
pub(crate) mod json;
pub(crate) mod key;
pub(crate) mod live_files;
pub(crate) mod memory;
pub(crate) mod pk_index;
pub(crate) mod protobuf;
pub(crate) mod transform;
pub(crate) mod txn;
pub(crate) mod upsert;
pub(crate) mod worker;

pub use avro::{avro_to_iceberg, AvroDecoder};
pub use check::{PayloadChecker, Side};
pub use error::Error;
pub use evolve::{fresh_ids, reconcile, Change};
pub use index_checkpoint::{
    CaughtUp, CheckpointOf, Written, BUFFER_BYTES as CHECKPOINT_BUFFER_BYTES,
};
pub use job::{convert_range, JobOutput, JobSpec, TableContext, ValueType};
pub use json::{json_to_iceberg, JsonConverter};
pub use memory::{MemoryError, MemoryPool};
pub use pk_index::{FileRef, IndexBudget, MAX_RUNS};
pub use protobuf::{protobuf_to_iceberg, ProtobufConverter};
pub use transform::ValueTransform;
pub use txn::{AbortedTxn, TxnView};
pub use upsert::{
    decode_keys_file, encode_keys_file, read_position_deletes, FromCheckpoint, JobKeys,
    LiveDataFile, LiveFiles, TableIndex, UpsertSpec, DEFAULT_INDEX_BUDGET,
};
pub use worker::{PartitionSource, TableSchemas, Worker};

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, RecordBatch};
    use arrow::datatypes::{DataType, Field, Schema};
    use bytes::Bytes;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use parquet::arrow::ArrowWriter;

    #[test]
    fn parquet_round_trips_a_batch() {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int64Array::from(vec![1, 2, 3]))],
        )
        .expect("batch");
        let mut file = Vec::new();
        let mut writer = ArrowWriter::try_new(&mut file, schema, None).expect("writer");
        writer.write(&batch).expect("write");
        writer.close().expect("close");
        let reader = ParquetRecordBatchReaderBuilder::try_new(Bytes::from(file))
            .expect("reader")
            .build()
            .expect("build");
        let batches: Vec<_> = reader.map(|b| b.expect("read")).collect();
        assert_eq!(batches, vec![batch]);
    }
}
