//! Table workers (DESIGN.md §5): turn ranges of a table topic's records into Arrow record
//! batches and ~32 MiB Parquet data files, map schemas to Iceberg types, propose schema
//! evolution, and lend conversion memory from one node-wide budget.
//!
//! Built so far:
//! - [`memory`]: the node-wide conversion memory budget with RAII reservations.
//!
//! Not built yet: reading ranges from the stream store, conversion of Protobuf and JSON
//! records, Parquet data files with statistics, partitioned writes and upserts.

pub mod error;
pub mod json;
pub mod memory;
pub mod protobuf;

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
