//! Commits and table loads on the embedded catalog, over its REST API.
//!
//! ```text
//! cargo bench -p inlet-catalog --bench commits
//! ```
//!
//! Environment: `INLET_BENCH_COMMITS` (appends per run, default 200), `INLET_BENCH_FILES`
//! (data files per append, 10), `INLET_BENCH_ROWS` (rows per data file, 100),
//! `INLET_BENCH_RUNS` (repetitions; medians are reported, 3), `INLET_BENCH_SECONDS` (length of
//! each loadTable window, 10), `INLET_BENCH_CLIENTS` (concurrent loadTable clients, 4),
//! `INLET_BENCH_DIR` (where the temp dir goes; the system temp dir by default),
//! `INLET_BENCH_KEEP` (keep the temp dir and print its path, to inspect the tables).
//!
//! The catalog is opened as `inlet serve` opens it: the metadata store (`MetaStore`, SQLite in
//! WAL mode with `synchronous = FULL`) on `<tmp>/meta.db`, then `embedded::open` on the same
//! database with the object store rooted at `<tmp>/objects`; its router is served under
//! `/iceberg` on 127.0.0.1 by a tokio runtime of 2 workers. The client runs on a second
//! 2-worker runtime in the same process, so **client and server share the machine's cores**;
//! the CPU time of each side's threads is reported per request.
//!
//! The client does what an Iceberg writer does for a fast append, over HTTP with `reqwest`
//! and its own local-filesystem `FileIO` (iceberg's: data files are written without fsync,
//! the manifest and the manifest list are fsynced on close). Each round:
//! 1. writes `INLET_BENCH_FILES` small Parquet data files (`id long`, `data string`);
//! 2. writes one manifest listing them (iceberg's `ManifestWriterBuilder`, format v2);
//! 3. reads the current snapshot's manifest list and writes a new one holding the new
//!    manifest and every previous one (`ManifestListWriter`);
//! 4. `POST /v1/namespaces/bench/tables/{t}` with requirements `assert-table-uuid` and
//!    `assert-ref-snapshot-id` (main) and updates `add-snapshot` + `set-snapshot-ref`, and
//!    parses the answer's metadata, which the next round starts from.
//!
//! The commit latency is step 4's request alone, from sending it to the last byte of the
//! answer (hdrhistogram); the server's own time in the handler is recorded by a middleware.
//! The round latency is steps 1–4. Each run appends to a fresh table, so snapshots accumulate
//! over the run: the metadata file's size and the commit latency are printed per quarter.
//! After the runs, the first table is scanned in-process (iceberg-rust's reader, through the
//! catalog) to check every file and row is there.
//!
//! Then loadTable: `INLET_BENCH_CLIENTS` keep-alive connections each send
//! `GET /v1/namespaces/bench/tables/{t}` in a closed loop for `INLET_BENCH_SECONDS` (after a
//! 1 s warm-up), on a table with one snapshot and on the first run's table with
//! `INLET_BENCH_COMMITS` snapshots. The answer is read whole but not parsed (a client would
//! parse it; that is client CPU, not catalog throughput).
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::Router;
use futures::TryStreamExt;
use hdrhistogram::Histogram;
use iceberg::arrow::schema_to_arrow_schema;
use iceberg::io::FileIO;
use iceberg::spec::{
    DataContentType, DataFile, DataFileBuilder, DataFileFormat, Datum, FormatVersion, ManifestFile,
    ManifestList, ManifestListWriter, ManifestWriterBuilder, Operation, Snapshot,
    SnapshotReference, SnapshotRetention, SnapshotSummaryCollector, Struct, Summary, TableMetadata,
};
use iceberg::{TableIdent, TableRequirement, TableUpdate};
use iceberg_catalog_rest::{CommitTableRequest, CommitTableResponse, LoadTableResult};
use inlet_catalog::embedded::{self, EmbeddedCatalog};
use inlet_catalog::rest::RestConfig;
use inlet_common::{Clock, SystemClock};
use parquet::arrow::ArrowWriter;
use reqwest::StatusCode;
use tokio::runtime::Runtime;

const SERVER_THREAD: &str = "catalog-server";
/// sqlx runs each SQLite connection on a worker thread of its own ("sqlx-sqlite-worker-N").
const SQLITE_THREAD: &str = "sqlx-sqlite";
const CLIENT_THREAD: &str = "bench-client";
const NAMESPACE: &str = "bench";
const MAIN: &str = "main";
const WARMUP: Duration = Duration::from_secs(1);

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be a whole number, got {v:?}")),
        Err(_) => default,
    }
}

fn runtime(name: &'static str) -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(name)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// CPU time (user + system) of this process's threads whose name starts with one of `prefixes`.
fn thread_cpu(prefixes: &[&str]) -> Duration {
    // utime and stime are in USER_HZ, 100 on every Linux architecture this runs on.
    let ticks = 100.0;
    let mut total = 0u64;
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Duration::ZERO;
    };
    for task in tasks.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if !prefixes.iter().any(|p| comm.trim_end().starts_with(p)) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        // Fields after the parenthesised name: state is field 3; utime and stime are 14 and 15.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f.len() > 12 {
            total += f[11].parse::<u64>().unwrap_or(0) + f[12].parse::<u64>().unwrap_or(0);
        }
    }
    Duration::from_secs_f64(total as f64 / ticks)
}

fn server_cpu() -> Duration {
    thread_cpu(&[SERVER_THREAD, SQLITE_THREAD])
}

fn client_cpu() -> Duration {
    thread_cpu(&[CLIENT_THREAD])
}

/// Latencies in microseconds, up to 10 minutes.
fn histogram() -> Histogram<u64> {
    Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).expect("histogram")
}

fn record(hist: &mut Histogram<u64>, d: Duration) {
    hist.saturating_record(d.as_micros().max(1) as u64);
}

fn ms_us(us: u64) -> f64 {
    us as f64 / 1e3
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// The local path of a `file://` location.
fn local_path(location: &str) -> PathBuf {
    PathBuf::from(location.strip_prefix("file://").unwrap_or(location))
}

fn file_size(location: &str) -> u64 {
    std::fs::metadata(local_path(location))
        .map(|m| m.len())
        .unwrap_or_else(|e| panic!("stat {location}: {e}"))
}

/// The server's time in `POST .../tables/{t}` (commits), as the handler saw it.
#[derive(Clone, Default)]
struct CommitTimes(Arc<Mutex<Vec<Duration>>>);

impl CommitTimes {
    fn take(&self) -> Vec<Duration> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

fn is_commit(req: &Request) -> bool {
    let path = req.uri().path();
    req.method() == axum::http::Method::POST
        && path.starts_with("/iceberg/v1/namespaces/")
        && path.contains("/tables/")
        && !path.ends_with("/metrics")
}

/// Random positive snapshot ids (splitmix64), as writers pick them.
struct Ids(u64);

impl Ids {
    fn seeded() -> Self {
        Ids(SystemClock.now_ms() ^ (std::process::id() as u64) << 40)
    }

    fn next(&mut self, metadata: &TableMetadata) -> i64 {
        loop {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            let id = ((z ^ (z >> 31)) >> 1) as i64;
            if id != 0 && metadata.snapshot_by_id(id).is_none() {
                return id;
            }
        }
    }
}

/// A REST client for one table.
#[derive(Clone)]
struct Client {
    http: reqwest::Client,
    base: String,
}

impl Client {
    fn new(base: &str) -> Self {
        Client {
            http: reqwest::Client::builder()
                .tcp_nodelay(true)
                .build()
                .expect("reqwest client"),
            base: base.to_string(),
        }
    }

    fn table_url(&self, table: &str) -> String {
        format!("{}/v1/namespaces/{NAMESPACE}/tables/{table}", self.base)
    }

    async fn post(&self, url: &str, body: Vec<u8>) -> (StatusCode, bytes::Bytes) {
        let resp = self
            .http
            .post(url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {url}: {e}"));
        let status = resp.status();
        let body = resp.bytes().await.expect("response body");
        (status, body)
    }

    async fn create_namespace(&self) {
        let body = serde_json::json!({ "namespace": [NAMESPACE], "properties": {} });
        let url = format!("{}/v1/namespaces", self.base);
        let (status, body) = self.post(&url, body.to_string().into_bytes()).await;
        assert!(
            status.is_success(),
            "create namespace: {status} {}",
            String::from_utf8_lossy(&body)
        );
    }

    async fn create_table(&self, table: &str) -> TableMetadata {
        let body = serde_json::json!({
            "name": table,
            "schema": {
                "type": "struct",
                "schema-id": 0,
                "fields": [
                    { "id": 1, "name": "id", "required": true, "type": "long" },
                    { "id": 2, "name": "data", "required": false, "type": "string" },
                ],
            },
            "properties": { "format-version": "2" },
        });
        let url = format!("{}/v1/namespaces/{NAMESPACE}/tables", self.base);
        let (status, body) = self.post(&url, body.to_string().into_bytes()).await;
        assert!(
            status.is_success(),
            "create table: {status} {}",
            String::from_utf8_lossy(&body)
        );
        let result: LoadTableResult = serde_json::from_slice(&body).expect("LoadTableResult");
        result.metadata
    }
}

/// What one append round cost, by step.
#[derive(Default, Clone, Copy)]
struct Steps {
    data_files: Duration,
    manifest: Duration,
    manifest_list: Duration,
    commit: Duration,
    parse: Duration,
    round: Duration,
}

/// One Parquet data file of `rows` rows with ids from `first`, as bytes.
fn parquet_file(schema: &arrow::datatypes::SchemaRef, first: i64, rows: usize) -> Vec<u8> {
    let ids: Vec<i64> = (first..first + rows as i64).collect();
    let data: Vec<String> = ids.iter().map(|i| format!("row-{i:012}")).collect();
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(ids)),
        Arc::new(StringArray::from(data)),
    ];
    let batch = RecordBatch::try_new(schema.clone(), columns).expect("record batch");
    let mut out = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut out, schema.clone(), None).expect("parquet writer");
    writer.write(&batch).expect("write batch");
    writer.close().expect("close parquet");
    out
}

/// The table a round appends to, as the client knows it.
struct Writer {
    client: Client,
    file_io: FileIO,
    ident: TableIdent,
    url: String,
    metadata: TableMetadata,
    metadata_location: String,
    ids: Ids,
    files: usize,
    rows: usize,
    next_row: i64,
}

impl Writer {
    /// One fast append of `self.files` new data files; returns what each step took.
    async fn append(&mut self) -> Steps {
        let start = Instant::now();
        let meta = &self.metadata;
        let snapshot_id = self.ids.next(meta);
        let parent = meta.current_snapshot().cloned();
        let sequence_number = meta.next_sequence_number();
        let location = meta.location().trim_end_matches('/').to_string();
        let schema = meta.current_schema().clone();
        let spec = meta.default_partition_spec().clone();
        let arrow_schema = Arc::new(schema_to_arrow_schema(&schema).expect("arrow schema"));

        // 1. Data files.
        let mut data_files: Vec<DataFile> = Vec::with_capacity(self.files);
        for i in 0..self.files {
            let first = self.next_row;
            self.next_row += self.rows as i64;
            let bytes = parquet_file(&arrow_schema, first, self.rows);
            let size = bytes.len() as u64;
            let path = format!("{location}/data/{snapshot_id:016x}-{i:05}.parquet");
            self.file_io
                .new_output(&path)
                .expect("output file")
                .write(bytes.into())
                .await
                .expect("write data file");
            let rows = self.rows as u64;
            data_files.push(
                DataFileBuilder::default()
                    .content(DataContentType::Data)
                    .file_path(path)
                    .file_format(DataFileFormat::Parquet)
                    .partition(Struct::empty())
                    .partition_spec_id(spec.spec_id())
                    .record_count(rows)
                    .file_size_in_bytes(size)
                    .value_counts(HashMap::from([(1, rows), (2, rows)]))
                    .null_value_counts(HashMap::from([(1, 0), (2, 0)]))
                    .lower_bounds(HashMap::from([(1, Datum::long(first))]))
                    .upper_bounds(HashMap::from([(
                        1,
                        Datum::long(first + self.rows as i64 - 1),
                    )]))
                    .build()
                    .expect("data file"),
            );
        }
        let data_done = Instant::now();

        // 2. The manifest of the new files. Their sequence numbers are inherited from the
        //    snapshot (-1: unassigned), as in every v2 writer's fast append.
        let mut summary = SnapshotSummaryCollector::default();
        for file in &data_files {
            summary.add_file(file, schema.clone(), spec.clone());
        }
        let manifest_path = format!("{location}/metadata/{snapshot_id:016x}-m0.avro");
        let mut manifest_writer = ManifestWriterBuilder::new(
            self.file_io
                .new_output(&manifest_path)
                .expect("manifest output"),
            Some(snapshot_id),
            schema.clone(),
            spec.as_ref().clone(),
        )
        .build_v2_data();
        for file in data_files {
            manifest_writer.add_file(file, -1).expect("add data file");
        }
        let manifest = manifest_writer
            .write_manifest_file()
            .await
            .expect("write manifest");
        let manifest_done = Instant::now();

        // 3. The manifest list: the new manifest, then the parent snapshot's manifests.
        let mut manifests: Vec<ManifestFile> = vec![manifest];
        if let Some(parent) = &parent {
            let bytes = self
                .file_io
                .new_input(parent.manifest_list())
                .expect("manifest list input")
                .read()
                .await
                .expect("read the parent's manifest list");
            let list = ManifestList::parse_with_version(&bytes, FormatVersion::V2)
                .expect("parse the parent's manifest list");
            manifests.extend(list.consume_entries());
        }
        let list_path = format!("{location}/metadata/snap-{snapshot_id}-1-{snapshot_id:016x}.avro");
        let mut list_writer = ManifestListWriter::v2(
            self.file_io
                .new_output(&list_path)
                .expect("manifest list output")
                .writer()
                .await
                .expect("manifest list writer"),
            snapshot_id,
            parent.as_ref().map(|p| p.snapshot_id()),
            sequence_number,
        );
        list_writer
            .add_manifests(manifests.into_iter())
            .expect("add manifests");
        list_writer.close().await.expect("write manifest list");
        let list_done = Instant::now();

        // 4. The commit.
        let mut properties = summary.build();
        let previous = parent.as_ref().map(|p| &p.summary().additional_properties);
        for (total, added) in [
            ("total-data-files", "added-data-files"),
            ("total-records", "added-records"),
            ("total-files-size", "added-files-size"),
        ] {
            let before: u64 = previous
                .and_then(|p| p.get(total))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let added: u64 = properties
                .get(added)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            properties.insert(total.to_string(), (before + added).to_string());
        }
        for total in [
            "total-delete-files",
            "total-position-deletes",
            "total-equality-deletes",
        ] {
            properties.insert(total.to_string(), "0".to_string());
        }
        let timestamp_ms = SystemClock.now_ms() as i64;
        let snapshot = Snapshot::builder()
            .with_snapshot_id(snapshot_id)
            .with_parent_snapshot_id(parent.as_ref().map(|p| p.snapshot_id()))
            .with_sequence_number(sequence_number)
            .with_timestamp_ms(timestamp_ms)
            .with_manifest_list(list_path)
            .with_summary(Summary {
                operation: Operation::Append,
                additional_properties: properties,
            })
            .with_schema_id(meta.current_schema_id())
            .build();
        let request = CommitTableRequest {
            identifier: Some(self.ident.clone()),
            requirements: vec![
                TableRequirement::UuidMatch { uuid: meta.uuid() },
                TableRequirement::RefSnapshotIdMatch {
                    r#ref: MAIN.to_string(),
                    snapshot_id: parent.as_ref().map(|p| p.snapshot_id()),
                },
            ],
            updates: vec![
                TableUpdate::AddSnapshot { snapshot },
                TableUpdate::SetSnapshotRef {
                    ref_name: MAIN.to_string(),
                    reference: SnapshotReference::new(
                        snapshot_id,
                        SnapshotRetention::branch(None, None, None),
                    ),
                },
            ],
        };
        let body = serde_json::to_vec(&request).expect("commit request JSON");
        let commit_start = Instant::now();
        let (status, body) = self.client.post(&self.url, body).await;
        let commit_done = Instant::now();
        assert_eq!(
            status,
            StatusCode::OK,
            "commit: {}",
            String::from_utf8_lossy(&body)
        );
        let response: CommitTableResponse =
            serde_json::from_slice(&body).expect("CommitTableResponse");
        assert_eq!(
            response.metadata.current_snapshot_id(),
            Some(snapshot_id),
            "the commit answered metadata without the new snapshot"
        );
        self.metadata = response.metadata;
        self.metadata_location = response.metadata_location;
        let end = Instant::now();
        Steps {
            data_files: data_done - start,
            manifest: manifest_done - data_done,
            manifest_list: list_done - manifest_done,
            commit: commit_done - commit_start,
            parse: end - commit_done,
            round: end - start,
        }
    }
}

/// A table's metadata file after a number of commits.
struct Growth {
    /// The first commit of the quarter that ended here.
    first: usize,
    commits: usize,
    bytes: u64,
    /// Median commit latency over the quarter of the run that ended there.
    commit_p50_ms: f64,
}

struct CommitRun {
    commit: Histogram<u64>,
    server: Histogram<u64>,
    round: Histogram<u64>,
    steps: Steps,
    growth: Vec<Growth>,
    server_cpu_ms: f64,
    client_cpu_ms: f64,
    snapshots: usize,
    metadata_log: usize,
    manifest_list_bytes: u64,
    /// Every `*.metadata.json` in the table's metadata folder (old versions are kept) and their
    /// total size.
    metadata_files: usize,
    metadata_files_bytes: u64,
}

fn quantile_ms(v: &[Duration], q: f64) -> f64 {
    let mut sorted: Vec<Duration> = v.to_vec();
    sorted.sort();
    ms(sorted[((sorted.len() - 1) as f64 * q).round() as usize])
}

fn commit_run(
    client_rt: &Runtime,
    client: &Client,
    times: &CommitTimes,
    table: &str,
    commits: usize,
    files: usize,
    rows: usize,
) -> CommitRun {
    let client = client.clone();
    let table = table.to_string();
    let metadata = client_rt.block_on(client_rt.spawn({
        let client = client.clone();
        let table = table.clone();
        async move { client.create_table(&table).await }
    }));
    let metadata = metadata.expect("create table task");
    let mut writer = Writer {
        url: client.table_url(&table),
        client,
        file_io: FileIO::new_with_fs(),
        ident: TableIdent::from_strs([NAMESPACE, table.as_str()]).expect("ident"),
        metadata,
        metadata_location: String::new(),
        ids: Ids::seeded(),
        files,
        rows,
        next_row: 0,
    };
    times.take();
    let (server0, client0) = (server_cpu(), client_cpu());
    let task = client_rt.spawn(async move {
        let mut steps = Vec::with_capacity(commits);
        let mut sizes = Vec::with_capacity(commits);
        for _ in 0..commits {
            steps.push(writer.append().await);
            sizes.push(file_size(&writer.metadata_location));
        }
        (writer, steps, sizes)
    });
    let (writer, steps, sizes) = client_rt.block_on(task).expect("append task");
    let (server1, client1) = (server_cpu(), client_cpu());
    let server_times = times.take();
    assert_eq!(
        server_times.len(),
        commits,
        "the middleware should see every commit"
    );

    let mut commit = histogram();
    let mut round = histogram();
    let mut server = histogram();
    let mut total = Steps::default();
    for s in &steps {
        record(&mut commit, s.commit);
        record(&mut round, s.round);
        total.data_files += s.data_files;
        total.manifest += s.manifest;
        total.manifest_list += s.manifest_list;
        total.commit += s.commit;
        total.parse += s.parse;
        total.round += s.round;
    }
    for t in &server_times {
        record(&mut server, *t);
    }
    let n = commits as u32;
    let mean = Steps {
        data_files: total.data_files / n,
        manifest: total.manifest / n,
        manifest_list: total.manifest_list / n,
        commit: total.commit / n,
        parse: total.parse / n,
        round: total.round / n,
    };
    let mut growth = vec![Growth {
        first: 1,
        commits: 1,
        bytes: sizes[0],
        commit_p50_ms: ms(steps[0].commit),
    }];
    let quarter = commits.div_ceil(4).max(1);
    for (q, chunk) in steps.chunks(quarter).enumerate() {
        let latencies: Vec<Duration> = chunk.iter().map(|s| s.commit).collect();
        let end = (q * quarter + chunk.len()).min(commits);
        growth.push(Growth {
            first: q * quarter + 1,
            commits: end,
            bytes: sizes[end - 1],
            commit_p50_ms: quantile_ms(&latencies, 0.5),
        });
    }
    let snapshots = writer.metadata.snapshots().len();
    let metadata_log = writer.metadata.metadata_log().len();
    let manifest_list_bytes = file_size(
        writer
            .metadata
            .current_snapshot()
            .expect("a snapshot")
            .manifest_list(),
    );
    let folder = local_path(writer.metadata.location()).join("metadata");
    let (mut metadata_files, mut metadata_files_bytes) = (0, 0);
    for entry in std::fs::read_dir(&folder)
        .expect("metadata folder")
        .flatten()
    {
        if entry
            .file_name()
            .to_string_lossy()
            .ends_with(".metadata.json")
        {
            metadata_files += 1;
            metadata_files_bytes += entry.metadata().map(|m| m.len()).unwrap_or(0);
        }
    }
    CommitRun {
        commit,
        server,
        round,
        steps: mean,
        growth,
        server_cpu_ms: ms(server1 - server0) / commits as f64,
        client_cpu_ms: ms(client1 - client0) / commits as f64,
        snapshots,
        metadata_log,
        manifest_list_bytes,
        metadata_files,
        metadata_files_bytes,
    }
}

/// Reads the table back through the catalog in-process: every data file and row must be there.
fn verify(
    server_rt: &Runtime,
    catalog: &EmbeddedCatalog,
    table: &str,
    commits: usize,
    files: usize,
    rows: usize,
) {
    let catalog = catalog.catalog.clone();
    let ident = TableIdent::from_strs([NAMESPACE, table]).expect("ident");
    let started = Instant::now();
    let (tasks, read) = server_rt
        .block_on(server_rt.spawn(async move {
            let table = catalog.load_table(&ident).await.expect("load table");
            let scan = table.scan().select_all().build().expect("scan");
            let tasks: Vec<_> = scan
                .plan_files()
                .await
                .expect("plan files")
                .try_collect()
                .await
                .expect("file scan tasks");
            let batches: Vec<RecordBatch> = scan
                .to_arrow()
                .await
                .expect("to_arrow")
                .try_collect()
                .await
                .expect("read batches");
            let read: usize = batches.iter().map(|b| b.num_rows()).sum();
            (tasks.len(), read)
        }))
        .expect("verify task");
    assert_eq!(tasks, commits * files, "data files in the scan plan");
    assert_eq!(read, commits * files * rows, "rows read back");
    println!(
        "checked: table {NAMESPACE}.{table} scans {tasks} data files and {read} rows \
         (iceberg-rust reader through the catalog, {:.1} s)",
        started.elapsed().as_secs_f64()
    );
}

async fn load_client(url: String, measure: Instant, end: Instant) -> (u64, Histogram<u64>, usize) {
    let http = reqwest::Client::builder()
        .tcp_nodelay(true)
        .build()
        .expect("reqwest client");
    let mut hist = histogram();
    let mut count = 0u64;
    let mut size = 0;
    loop {
        let start = Instant::now();
        if start >= end {
            break;
        }
        let resp = http.get(&url).send().await.expect("GET table");
        let status = resp.status();
        let body = resp.bytes().await.expect("loadTable body");
        assert_eq!(status, StatusCode::OK, "loadTable answered {status}");
        size = body.len();
        if start >= measure {
            count += 1;
            record(&mut hist, start.elapsed());
        }
    }
    (count, hist, size)
}

struct LoadRun {
    rate: f64,
    hist: Histogram<u64>,
    bytes: usize,
    server_cpu_us: f64,
    client_cpu_us: f64,
}

fn load_run(client_rt: &Runtime, url: &str, clients: usize, seconds: u64) -> LoadRun {
    let measure = Instant::now() + WARMUP;
    let end = measure + Duration::from_secs(seconds);
    let handles: Vec<_> = (0..clients)
        .map(|_| client_rt.spawn(load_client(url.to_string(), measure, end)))
        .collect();
    std::thread::sleep(measure.saturating_duration_since(Instant::now()));
    let (server0, client0) = (server_cpu(), client_cpu());
    std::thread::sleep(end.saturating_duration_since(Instant::now()));
    let (server1, client1) = (server_cpu(), client_cpu());
    let mut hist = histogram();
    let mut count = 0;
    let mut bytes = 0;
    for h in handles {
        let (n, h, size) = client_rt.block_on(h).expect("load task");
        count += n;
        bytes = size;
        hist.add(h).expect("merge histograms");
    }
    let per_request = |d: Duration| d.as_secs_f64() * 1e6 / count.max(1) as f64;
    LoadRun {
        rate: count as f64 / seconds as f64,
        hist,
        bytes,
        server_cpu_us: per_request(server1 - server0),
        client_cpu_us: per_request(client1 - client0),
    }
}

fn main() {
    // `cargo bench` passes --bench; nothing else to parse.
    let commits = env_u64("INLET_BENCH_COMMITS", 200).max(4) as usize;
    let files = env_u64("INLET_BENCH_FILES", 10).max(1) as usize;
    let rows = env_u64("INLET_BENCH_ROWS", 100).max(1) as usize;
    let runs = env_u64("INLET_BENCH_RUNS", 3).max(1) as usize;
    let seconds = env_u64("INLET_BENCH_SECONDS", 10).max(1);
    let clients = env_u64("INLET_BENCH_CLIENTS", 4).max(1) as usize;
    let keep = std::env::var_os("INLET_BENCH_KEEP").is_some();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());

    let server_rt = runtime(SERVER_THREAD);
    let client_rt = runtime(CLIENT_THREAD);
    let dir = match std::env::var_os("INLET_BENCH_DIR") {
        Some(d) => tempfile::tempdir_in(d),
        None => tempfile::tempdir(),
    }
    .expect("temp dir");
    let meta_url = format!("sqlite://{}?mode=rwc", dir.path().join("meta.db").display());
    let root = dir.path().join("objects").display().to_string();

    // As `inlet serve` opens them: the metadata store first (it puts the database in WAL mode),
    // then the catalog on the same database and the node's one object-store client.
    let (meta, catalog) = server_rt.block_on(async {
        let meta = inlet_storage::MetaStore::connect(&meta_url)
            .await
            .expect("meta store");
        let objects = inlet_storage::open_object_store(&root).expect("object store");
        let catalog = embedded::open(&meta_url, &root, Some(objects))
            .await
            .expect("embedded catalog");
        (meta, catalog)
    });

    let times = CommitTimes::default();
    let app = Router::new()
        .nest("/iceberg", catalog.router(RestConfig::default()))
        .layer(middleware::from_fn({
            let times = times.clone();
            move |req: Request, next: Next| {
                let times = times.clone();
                async move {
                    let commit = is_commit(&req);
                    let start = Instant::now();
                    let response = next.run(req).await;
                    if commit {
                        times.0.lock().unwrap().push(start.elapsed());
                    }
                    response
                }
            }
        }));
    let listener = server_rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let addr = listener.local_addr().expect("local addr");
    let served = server_rt.spawn(async move { axum::serve(listener, app).await });
    let base = format!("http://{addr}/iceberg");
    let client = Client::new(&base);
    client_rt
        .block_on(client_rt.spawn({
            let client = client.clone();
            async move { client.create_namespace().await }
        }))
        .expect("create namespace task");

    println!(
        "Embedded catalog commits: {runs} runs × {commits} appends of {files} Parquet data files \
         × {rows} rows (format v2, unpartitioned), then loadTable from {clients} clients for \
         {seconds} s (after {} s warm-up); {cores} cores",
        WARMUP.as_secs()
    );
    println!(
        "catalog: SQLite {} (WAL, synchronous FULL), objects under {root}; server: 2-worker \
         runtime; client: a second 2-worker runtime in the same process — they share the cores",
        dir.path().join("meta.db").display()
    );

    let mut commit_p50 = Vec::new();
    let mut commit_p99 = Vec::new();
    let mut server_p50 = Vec::new();
    let mut server_p99 = Vec::new();
    let mut round_p50 = Vec::new();
    let mut round_p99 = Vec::new();
    let mut first_table = String::new();
    let mut last: Option<CommitRun> = None;
    for run in 0..runs {
        let table = format!("appends_{run}");
        let r = commit_run(&client_rt, &client, &times, &table, commits, files, rows);
        let q = |h: &Histogram<u64>, q: f64| ms_us(h.value_at_quantile(q));
        println!(
            "run {run}: commit p50 {:.2} p99 {:.2} max {:.2} ms (server handler p50 {:.2} p99 \
             {:.2} ms); round p50 {:.2} p99 {:.2} ms; CPU per commit: server {:.2} ms, client \
             {:.2} ms",
            q(&r.commit, 0.5),
            q(&r.commit, 0.99),
            ms_us(r.commit.max()),
            q(&r.server, 0.5),
            q(&r.server, 0.99),
            q(&r.round, 0.5),
            q(&r.round, 0.99),
            r.server_cpu_ms,
            r.client_cpu_ms,
        );
        println!(
            "  mean round {:.2} ms = data files {:.2} + manifest {:.2} + manifest list {:.2} + \
             commit {:.2} + parsing the answer {:.2}",
            ms(r.steps.round),
            ms(r.steps.data_files),
            ms(r.steps.manifest),
            ms(r.steps.manifest_list),
            ms(r.steps.commit),
            ms(r.steps.parse),
        );
        let sizes: Vec<String> = r
            .growth
            .iter()
            .map(|g| format!("{}: {:.1} KiB", g.commits, g.bytes as f64 / 1024.0))
            .collect();
        println!("  metadata.json size after commit {}", sizes.join(", "));
        let quarters: Vec<String> = r.growth[1..]
            .iter()
            .map(|g| format!("{}–{}: {:.2} ms", g.first, g.commits, g.commit_p50_ms))
            .collect();
        println!(
            "  commit p50 by quarter of the run: {}",
            quarters.join(", ")
        );
        println!(
            "  final metadata: {} snapshots, {} metadata-log entries; last manifest list {:.1} KiB \
             ({} manifests); {} metadata.json files kept, {:.1} MiB in all",
            r.snapshots,
            r.metadata_log,
            r.manifest_list_bytes as f64 / 1024.0,
            commits,
            r.metadata_files,
            r.metadata_files_bytes as f64 / (1024.0 * 1024.0)
        );
        commit_p50.push(q(&r.commit, 0.5));
        commit_p99.push(q(&r.commit, 0.99));
        server_p50.push(q(&r.server, 0.5));
        server_p99.push(q(&r.server, 0.99));
        round_p50.push(q(&r.round, 0.5));
        round_p99.push(q(&r.round, 0.99));
        if run == 0 {
            first_table = table;
        }
        last = Some(r);
    }
    verify(&server_rt, &catalog, &first_table, commits, files, rows);

    // A table with one snapshot, to compare loads against.
    let one = "one_snapshot";
    commit_run(&client_rt, &client, &times, one, 1, files, rows);
    let small_url = client.table_url(one);
    let big_url = client.table_url(&first_table);
    // The big table's answer must parse and hold every snapshot.
    let loaded: LoadTableResult = client_rt
        .block_on(client_rt.spawn({
            let url = big_url.clone();
            async move {
                let body = reqwest::get(&url)
                    .await
                    .expect("GET table")
                    .bytes()
                    .await
                    .expect("body");
                serde_json::from_slice(&body).expect("LoadTableResult")
            }
        }))
        .expect("load task");
    assert_eq!(loaded.metadata.snapshots().len(), commits);

    let mut small_rates = Vec::new();
    let mut big_rates = Vec::new();
    let mut small_p99 = Vec::new();
    let mut big_p99 = Vec::new();
    let mut small_p50 = Vec::new();
    let mut big_p50 = Vec::new();
    let mut small_cpu = Vec::new();
    let mut big_cpu = Vec::new();
    let (mut small_bytes, mut big_bytes) = (0, 0);
    for run in 0..runs {
        for (name, url) in [("1 snapshot", &small_url), ("big", &big_url)] {
            let r = load_run(&client_rt, url, clients, seconds);
            let (p50, p99) = (
                ms_us(r.hist.value_at_quantile(0.5)),
                ms_us(r.hist.value_at_quantile(0.99)),
            );
            let label = if name == "big" {
                format!("{commits} snapshots")
            } else {
                name.to_string()
            };
            println!(
                "run {run}: loadTable ({label}, {:.1} KiB answers): {:.0} req/s; p50 {p50:.2} \
                 p99 {p99:.2} max {:.2} ms; CPU per request: server {:.0} µs, client {:.0} µs",
                r.bytes as f64 / 1024.0,
                r.rate,
                ms_us(r.hist.max()),
                r.server_cpu_us,
                r.client_cpu_us
            );
            let (rates, p50s, p99s, cpu, bytes) = if name == "big" {
                (
                    &mut big_rates,
                    &mut big_p50,
                    &mut big_p99,
                    &mut big_cpu,
                    &mut big_bytes,
                )
            } else {
                (
                    &mut small_rates,
                    &mut small_p50,
                    &mut small_p99,
                    &mut small_cpu,
                    &mut small_bytes,
                )
            };
            rates.push(r.rate);
            p50s.push(p50);
            p99s.push(p99);
            cpu.push(r.server_cpu_us);
            *bytes = r.bytes;
        }
    }

    served.abort();
    drop(meta);

    let last = last.expect("a run");
    let growth_first = &last.growth[0];
    let growth_last = last.growth.last().expect("growth");
    println!();
    println!("medians of {runs} runs:");
    println!(
        "  commit (append of {files} files), client-observed: p50 {:.2} ms, p99 {:.2} ms; server \
         handler p50 {:.2} ms, p99 {:.2} ms",
        median(&mut commit_p50),
        median(&mut commit_p99),
        median(&mut server_p50),
        median(&mut server_p99)
    );
    println!(
        "  whole round (data files + manifest + manifest list + commit): p50 {:.2} ms, p99 {:.2} \
         ms",
        median(&mut round_p50),
        median(&mut round_p99)
    );
    println!(
        "  metadata.json: {:.1} KiB after 1 commit, {:.1} KiB after {} ({} snapshots; grows \
         ~{:.2} KiB per commit); the table's {} metadata.json versions take {:.1} MiB",
        growth_first.bytes as f64 / 1024.0,
        growth_last.bytes as f64 / 1024.0,
        growth_last.commits,
        last.snapshots,
        (growth_last.bytes - growth_first.bytes) as f64
            / 1024.0
            / (growth_last.commits - 1).max(1) as f64,
        last.metadata_files,
        last.metadata_files_bytes as f64 / (1024.0 * 1024.0)
    );
    println!(
        "  loadTable, {clients} clients: 1 snapshot ({:.1} KiB): {:.0} req/s, p50 {:.2} ms, p99 \
         {:.2} ms, server {:.0} µs CPU each; {commits} snapshots ({:.1} KiB): {:.0} req/s, p50 \
         {:.2} ms, p99 {:.2} ms, server {:.0} µs CPU each",
        small_bytes as f64 / 1024.0,
        median(&mut small_rates),
        median(&mut small_p50),
        median(&mut small_p99),
        median(&mut small_cpu),
        big_bytes as f64 / 1024.0,
        median(&mut big_rates),
        median(&mut big_p50),
        median(&mut big_p99),
        median(&mut big_cpu),
    );

    if keep {
        let path: PathBuf = dir.keep();
        println!("kept {}", path.display());
    }
}
