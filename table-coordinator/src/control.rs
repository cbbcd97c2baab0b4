//! A table topic's control stream (docs/architecture.md, "Recovery"): the first
//! phase of a round's two-phase commit.
//!
//! Before the coordinator commits a round to Iceberg, it appends a `PRE_COMMIT` record that
//! holds the whole round: its commit id, data and delete files, offsets, watermarks and
//! schema, and its dead-letter round. The append returns once the record is durable in the
//! stream store's write-ahead log. After the Iceberg commit it appends `COMMITTED`.
//!
//! On start, [`ControlStream::pending`] returns the last `PRE_COMMIT` that no `COMMITTED`
//! follows. The coordinator then either finds the round's commit id among the table's
//! snapshots (the commit landed: it only records `COMMITTED`), or commits the same files
//! again ([`crate::coordinator`]). The files were uploaded before the `PRE_COMMIT`, so they
//! exist.
//!
//! Invariants:
//! - A `PRE_COMMIT` is appended before any catalog call of its round, and at most once per
//!   round.
//! - A record names the Kafka partitions' streams it was built from: one left behind by a
//!   deleted topic whose name was reused is never committed to the new topic's table.
//! - The stream stays short: it is trimmed to its last record every [`TRIM_EVERY`] records.
//!
//! The snapshot summaries stay the source of truth for where conversion resumes. The control
//! stream only saves a crashed round's conversion, and keeps its uploaded files from becoming
//! orphans.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use iceberg::spec::{
    deserialize_data_file_from_json, serialize_data_file_to_json, DataFile, FormatVersion, Schema,
    StructType,
};
use inlet_storage::{AppendOptions, StreamId, StreamStore};
use serde::{Deserialize, Serialize};

use crate::round::{Round, RoundBase};

/// Control streams are named this, then the topic's name.
pub(crate) const STREAM_PREFIX: &str = "table-control/";

/// Records between two trims of the stream.
pub(crate) const TRIM_EVERY: u64 = 64;

/// Largest record read back (a round's file list).
const MAX_READ_BYTES: usize = 64 << 20;

/// A control stream error.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("control stream: {0}")]
    Storage(#[from] inlet_storage::Error),
    #[error("control stream record: {0}")]
    Record(String),
}

impl ControlError {
    /// The stream store's kind, or `Corruption` for a record that does not parse.
    pub fn kind(&self) -> inlet_common::ErrorKind {
        match self {
            ControlError::Storage(e) => e.kind(),
            ControlError::Record(_) => inlet_common::ErrorKind::Corruption,
        }
    }
}

/// One record of the stream, as JSON: `{"PRE_COMMIT": {…}}` or `{"COMMITTED": {…}}`.
/// (Externally tagged: serde's internally tagged enums cannot read integer map keys.)
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
enum Record {
    PreCommit(Box<PreCommit>),
    Committed {
        commit_id: String,
        snapshot_id: Option<i64>,
    },
}

/// A round as written to the stream.
#[derive(Debug, Serialize, Deserialize)]
struct StoredRound {
    commit_id: String,
    schema: Schema,
    /// The partition type of the files' spec (for their partition values).
    partition_type: StructType,
    spec_id: i32,
    /// Iceberg's JSON form of each data file.
    files: Vec<String>,
    delete_files: Vec<String>,
    /// `RoundBase::Snapshot` when set.
    base_snapshot: Option<Option<i64>>,
    id_columns: Vec<String>,
    offsets: BTreeMap<i32, u64>,
    watermark_ms: Option<i64>,
    partition_watermarks: BTreeMap<i32, i64>,
    timestamp_ms: i64,
    partition_spec: Option<iceberg::spec::UnboundPartitionSpec>,
    /// Absent in records written before rounds carried it.
    #[serde(default)]
    topic_id: Option<String>,
    #[serde(default)]
    base_column_id: i32,
    #[serde(default)]
    start_offsets: BTreeMap<i32, u64>,
    /// False in records written before rounds carried it (their start is checked as before).
    #[serde(default)]
    exact_start: bool,
    #[serde(default)]
    epoch: Option<i64>,
    /// The table's uuid, hyphenated.
    #[serde(default)]
    table_uuid: Option<String>,
}

/// The `PRE_COMMIT` record: a round, its dead-letter round, and the streams it was built from.
#[derive(Debug, Serialize, Deserialize)]
struct PreCommit {
    streams: Vec<(i32, StreamId)>,
    main: StoredRound,
    dead_letters: Option<StoredRound>,
}

/// A round read back from a `PRE_COMMIT`, with its dead-letter round.
#[derive(Debug, Clone)]
pub(crate) struct PendingRound {
    pub main: Round,
    pub dead_letters: Option<Round>,
}

/// The spec the files of a round were written with: its id and partition type.
#[derive(Debug, Clone)]
pub struct FileSpec {
    pub spec_id: i32,
    pub partition_type: StructType,
}

/// One table topic's control stream.
#[derive(Debug, Clone)]
pub(crate) struct ControlStream {
    store: Arc<StreamStore>,
    stream: StreamId,
    /// The topic's (partition, stream) pairs.
    streams: Vec<(i32, StreamId)>,
}

impl ControlStream {
    /// Opens the control stream of `topic`, creating it the first time.
    pub(crate) async fn open(
        store: Arc<StreamStore>,
        topic: &str,
        streams: &[(i32, StreamId)],
    ) -> Result<Self, ControlError> {
        let name = format!("{STREAM_PREFIX}{topic}");
        let stream = match store.open_stream(&name) {
            Ok(s) => s.id,
            Err(_) => store.create_stream(&name).await?.id,
        };
        Ok(ControlStream {
            store,
            stream,
            streams: streams.to_vec(),
        })
    }

    /// Appends the `PRE_COMMIT` of `main` (whose files follow `spec`) and its dead-letter
    /// round; returns once it is durable.
    pub(crate) async fn pre_commit(
        &self,
        main: &Round,
        spec: &FileSpec,
        dead_letters: Option<&Round>,
    ) -> Result<(), ControlError> {
        let unpartitioned = FileSpec {
            spec_id: 0,
            partition_type: StructType::new(Vec::new()),
        };
        let record = Record::PreCommit(Box::new(PreCommit {
            streams: self.streams.clone(),
            main: store_round(main, spec)?,
            dead_letters: dead_letters
                .map(|r| store_round(r, &unpartitioned))
                .transpose()?,
        }));
        self.append(&record).await
    }

    /// Appends `COMMITTED` for `commit_id`, and trims the stream now and then.
    pub(crate) async fn committed(
        &self,
        commit_id: &str,
        snapshot_id: Option<i64>,
    ) -> Result<(), ControlError> {
        let offset = self
            .append(&Record::Committed {
                commit_id: commit_id.to_string(),
                snapshot_id,
            })
            .await;
        let end = self.store.end_offset(self.stream)?;
        if end - self.store.start_offset(self.stream)? > TRIM_EVERY {
            // Only the last record counts.
            self.store.trim(self.stream, end - 1).await?;
        }
        offset
    }

    async fn append(&self, record: &Record) -> Result<(), ControlError> {
        let payload =
            serde_json::to_vec(record).map_err(|e| ControlError::Record(e.to_string()))?;
        self.store
            .append_with(
                self.stream,
                Bytes::from(payload),
                1,
                AppendOptions::default(),
            )
            .await?;
        Ok(())
    }

    /// The last `PRE_COMMIT` without a `COMMITTED` after it, built from this topic's streams;
    /// None when there is none.
    pub(crate) async fn pending(&self) -> Result<Option<PendingRound>, ControlError> {
        let start = self.store.start_offset(self.stream)?;
        let end = self.store.end_offset(self.stream)?;
        let mut last: Option<Record> = None;
        let mut offset = start;
        while offset < end {
            let batches = self.store.read(self.stream, offset, MAX_READ_BYTES).await?;
            let Some(b) = batches.last() else { break };
            for b in &batches {
                if b.base_offset + u64::from(b.record_count) <= offset {
                    continue;
                }
                last = match serde_json::from_slice(&b.payload) {
                    Ok(r) => Some(r),
                    Err(e) => {
                        // The snapshot summaries still say where to resume: an unreadable
                        // record costs a conversion, never the table.
                        tracing::warn!(offset = b.base_offset, error = %e, "unreadable control stream record; ignored");
                        None
                    }
                };
            }
            offset = b.base_offset + u64::from(b.record_count);
        }
        let Some(Record::PreCommit(pre)) = last else {
            return Ok(None);
        };
        if pre.streams != self.streams {
            tracing::warn!(
                commit_id = %pre.main.commit_id,
                "the control stream's last round is from other partitions (a deleted topic of the same name); ignored"
            );
            return Ok(None);
        }
        let PreCommit {
            main, dead_letters, ..
        } = *pre;
        let loaded = load_round(main).and_then(|main| {
            Ok(PendingRound {
                main,
                dead_letters: dead_letters.map(load_round).transpose()?,
            })
        });
        match loaded {
            Ok(p) => Ok(Some(p)),
            Err(e) => {
                tracing::warn!(error = %e, "the control stream's last round does not load; it is converted again");
                Ok(None)
            }
        }
    }
}

fn store_round(round: &Round, spec: &FileSpec) -> Result<StoredRound, ControlError> {
    let files = |files: &[DataFile]| -> Result<Vec<String>, ControlError> {
        files
            .iter()
            .map(|f| {
                serialize_data_file_to_json(f.clone(), &spec.partition_type, FormatVersion::V2)
                    .map_err(|e| ControlError::Record(e.to_string()))
            })
            .collect()
    };
    Ok(StoredRound {
        commit_id: round.commit_id.clone(),
        schema: round.schema.clone(),
        partition_type: spec.partition_type.clone(),
        spec_id: spec.spec_id,
        files: files(&round.files)?,
        delete_files: files(&round.delete_files)?,
        base_snapshot: match round.base {
            RoundBase::Latest => None,
            RoundBase::Snapshot(s) => Some(s),
        },
        id_columns: round.id_columns.clone(),
        offsets: round.offsets.clone(),
        watermark_ms: round.watermark_ms,
        partition_watermarks: round.partition_watermarks.clone(),
        timestamp_ms: round.timestamp_ms,
        partition_spec: round.partition_spec.clone(),
        topic_id: round.topic_id.clone(),
        base_column_id: round.base_column_id,
        start_offsets: round.start_offsets.clone(),
        exact_start: round.exact_start,
        epoch: round.epoch,
        table_uuid: round.table_uuid.map(|u| u.to_string()),
    })
}

fn load_round(r: StoredRound) -> Result<Round, ControlError> {
    let files = |files: &[String]| -> Result<Vec<DataFile>, ControlError> {
        files
            .iter()
            .map(|f| {
                deserialize_data_file_from_json(f, r.spec_id, &r.partition_type, &r.schema)
                    .map_err(|e| ControlError::Record(e.to_string()))
            })
            .collect()
    };
    Ok(Round {
        files: files(&r.files)?,
        delete_files: files(&r.delete_files)?,
        commit_id: r.commit_id,
        schema: r.schema,
        base: match r.base_snapshot {
            None => RoundBase::Latest,
            Some(s) => RoundBase::Snapshot(s),
        },
        id_columns: r.id_columns,
        offsets: r.offsets,
        watermark_ms: r.watermark_ms,
        partition_watermarks: r.partition_watermarks,
        timestamp_ms: r.timestamp_ms,
        partition_spec: r.partition_spec,
        topic_id: r.topic_id,
        base_column_id: r.base_column_id,
        start_offsets: r.start_offsets,
        exact_start: r.exact_start,
        epoch: r.epoch,
        table_uuid: r
            .table_uuid
            .map(|u| u.parse())
            .transpose()
            .map_err(|e: uuid::Error| ControlError::Record(e.to_string()))?,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use iceberg::spec::{
        DataContentType, DataFileBuilder, DataFileFormat, Literal, NestedField, PrimitiveType,
        Struct, Transform, Type, UnboundPartitionSpec,
    };
    use inlet_storage::MetaStore;

    use super::*;

    async fn store(dir: &std::path::Path) -> Arc<StreamStore> {
        let meta = MetaStore::connect(&format!("sqlite://{}", dir.join("meta.db").display()))
            .await
            .expect("meta");
        Arc::new(
            StreamStore::builder(dir.join("wal"))
                .meta(meta)
                .object_store_url(format!("file://{}", dir.join("objects").display()))
                .background_tasks(false)
                .open()
                .await
                .expect("store"),
        )
    }

    fn round(commit_id: &str, day: i32) -> (Round, FileSpec) {
        let schema = Schema::builder()
            .with_fields(vec![
                NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
                NestedField::optional(2, "ts", Type::Primitive(PrimitiveType::Timestamptz)).into(),
            ])
            .build()
            .expect("schema");
        let unbound = UnboundPartitionSpec::builder()
            .add_partition_field(2, "ts_day", Transform::Day)
            .expect("field")
            .build();
        let spec = unbound.clone().bind(schema.clone()).expect("bind");
        let file = DataFileBuilder::default()
            .content(DataContentType::Data)
            .file_path(format!("file:///t/data/{commit_id}.parquet"))
            .file_format(DataFileFormat::Parquet)
            .partition(Struct::from_iter([Some(Literal::date(day))]))
            .partition_spec_id(spec.spec_id())
            .record_count(10)
            .file_size_in_bytes(1234)
            .value_counts(HashMap::from([(1, 10)]))
            .build()
            .expect("data file");
        let round = Round {
            commit_id: commit_id.into(),
            schema: schema.clone(),
            files: vec![file],
            delete_files: Vec::new(),
            base: RoundBase::Latest,
            id_columns: Vec::new(),
            offsets: BTreeMap::from([(0, 10), (1, 7)]),
            watermark_ms: Some(1_700_000_000_000),
            partition_watermarks: BTreeMap::from([(0, 1_700_000_000_000)]),
            timestamp_ms: 42,
            partition_spec: Some(unbound),
            topic_id: None,
            base_column_id: 0,
            start_offsets: BTreeMap::new(),
            exact_start: false,
            epoch: Some(3),
            table_uuid: None,
        };
        let file_spec = FileSpec {
            spec_id: spec.spec_id(),
            partition_type: spec.partition_type(&schema).expect("type"),
        };
        (round, file_spec)
    }

    #[tokio::test]
    async fn a_pre_commit_without_committed_is_pending_until_committed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = store(dir.path()).await;
        let streams = vec![(0, 7), (1, 8)];
        let control = ControlStream::open(store.clone(), "t", &streams)
            .await
            .expect("open");
        assert!(control.pending().await.expect("pending").is_none());

        let (r1, spec) = round("t-0.10-1.7", 19_700);
        // Its dead-letter round starts where the dead-letter table's progress was.
        let mut d1 = r1.clone();
        d1.commit_id = format!("{}-dlq", r1.commit_id);
        d1.start_offsets = BTreeMap::from([(0, 4)]);
        d1.exact_start = true;
        control
            .pre_commit(&r1, &spec, Some(&d1))
            .await
            .expect("pre");
        // Reopened (a restart): the same stream, the round back with its files.
        let control = ControlStream::open(store.clone(), "t", &streams)
            .await
            .expect("reopen");
        let p = control.pending().await.expect("pending").expect("a round");
        assert_eq!(p.main.commit_id, r1.commit_id);
        assert_eq!(p.main.offsets, r1.offsets);
        assert_eq!(p.main.files, r1.files, "partition values and stats survive");
        assert_eq!(p.main.watermark_ms, r1.watermark_ms);
        assert_eq!(p.main.partition_spec, r1.partition_spec);
        assert_eq!(p.main.epoch, Some(3));
        assert!(!p.main.exact_start);
        let d = p.dead_letters.expect("the dead-letter round");
        assert_eq!(d.commit_id, d1.commit_id);
        assert_eq!(d.start_offsets, d1.start_offsets);
        assert!(
            d.exact_start,
            "a dead-letter round's start is checked as a whole"
        );

        control
            .committed(&r1.commit_id, Some(1))
            .await
            .expect("committed");
        assert!(control.pending().await.expect("pending").is_none());

        // Another topic of the same name (new streams) ignores the old round.
        let (r2, spec) = round("t-0.20-1.9", 19_701);
        control.pre_commit(&r2, &spec, None).await.expect("pre");
        let other = ControlStream::open(store.clone(), "t", &[(0, 99)])
            .await
            .expect("open");
        assert!(other.pending().await.expect("pending").is_none());

        // Many rounds: the stream is trimmed, the last round still found.
        for n in 0..TRIM_EVERY {
            let (r, spec) = round(&format!("t-{n}"), 19_702);
            control.pre_commit(&r, &spec, None).await.expect("pre");
            control
                .committed(&r.commit_id, None)
                .await
                .expect("committed");
        }
        let (last, spec) = round("t-last", 19_703);
        control.pre_commit(&last, &spec, None).await.expect("pre");
        let start = store.start_offset(control.stream).expect("start");
        let end = store.end_offset(control.stream).expect("end");
        assert!(end - start <= TRIM_EVERY + 1, "{start}..{end}");
        let p = control.pending().await.expect("pending").expect("a round");
        assert_eq!(p.main.commit_id, "t-last");
    }
}
