//! The web console's pages against a node with 1,000 topics and 100 table topics (issue 44:
//! "the console's pages answer in < 200 ms with 1,000 topics and 100 tables"): one `inlet
//! serve` node (the release binary), 900 plain topics and 100 table topics of one partition,
//! each table topic with one committed record, and 20 consumer groups with committed offsets;
//! the node's history (`/v1/history`, which the charts start from) holds an hour's 360 samples.
//!
//! ```text
//! cargo bench --bench console
//! ```
//!
//! Environment: `INLET_BENCH_TOPICS` (1000), `INLET_BENCH_TABLES` (100 of them table topics),
//! `INLET_BENCH_RUNS` (20 loads of each page), `INLET_BENCH_DIR`, `INLET_BENCH_BIN`,
//! `INLET_BENCH_NODE_LOG`, `INLET_BENCH_NODE_ARGS`.
//!
//! A page's time is what the browser waits for before it can draw it: its requests, made at
//! once as the page's script makes them (`src/console/app.js`), until the last answer is read.
//! The page's script and static files are timed too. The table reports p50, p95 and the
//! slowest of the loads per page, against the 200 ms target.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a bench: a failed step fails it, and it measures real time

use std::path::PathBuf;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use serde_json::{json, Value};

use inlet_test_support::node::Node;

const INLET: &str = env!("CARGO_BIN_EXE_inlet");
const TARGET_MS: f64 = 200.0;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let topics = env_u64("INLET_BENCH_TOPICS", 1000) as usize;
    let tables = (env_u64("INLET_BENCH_TABLES", 100) as usize).min(topics);
    let runs = env_u64("INLET_BENCH_RUNS", 20).max(1) as usize;
    let base = std::env::var("INLET_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_TARGET_TMPDIR")))
        .join(format!("inlet-console-bench-{}", std::process::id()));
    std::fs::create_dir_all(&base).unwrap();
    eprintln!(
        "console: {}, {topics} topics of which {tables} table topics, {runs} loads per page",
        base.display()
    );
    // The history the charts start from, sampled every 50 ms so that an hour's worth (360
    // samples) is there after 18 s: the pages then read as much as after an hour at 10 s.
    let config = base.join("inlet.toml");
    std::fs::write(&config, "[http]\nhistory_interval_ms = 50\n").unwrap();
    let node = Node::start_bench_with(
        INLET.as_ref(),
        &base.join("node"),
        &["--config", &config.to_string_lossy()],
    );
    let http = format!("http://{}", node.http);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = reqwest::Client::new();

    let started = Instant::now();
    // The topics: table topics first, committing every second.
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &node.kafka)
        .create()
        .unwrap();
    let names: Vec<String> = (0..topics)
        .map(|i| {
            if i < tables {
                format!("table{i:03}")
            } else {
                format!("plain{i:04}")
            }
        })
        .collect();
    for chunk in names.chunks(100) {
        let new: Vec<NewTopic> = chunk
            .iter()
            .map(|n| {
                let t = NewTopic::new(n, 1, TopicReplication::Fixed(1));
                if n.starts_with("table") {
                    t.set("table.topic.enable", "true")
                        .set("table.topic.commit.interval.ms", "1000")
                } else {
                    t
                }
            })
            .collect();
        for r in rt
            .block_on(admin.create_topics(&new, &AdminOptions::new()))
            .unwrap()
        {
            r.unwrap();
        }
    }
    // One framed Avro record in each topic: {"id": 1} of a registered schema.
    let id = rt.block_on(async {
        let r: Value = client
            .post(format!("http://{}/subjects/bench-value/versions", node.registry))
            .header("Content-Type", "application/vnd.schemaregistry.v1+json")
            .body(json!({"schema": r#"{"type":"record","name":"R","fields":[{"name":"id","type":"long"}]}"#}).to_string())
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        r["id"].as_u64().unwrap() as u32
    });
    let mut payload = vec![0u8];
    payload.extend_from_slice(&id.to_be_bytes());
    payload.push(2); // zig-zag 1
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", &node.kafka)
        .create()
        .unwrap();
    for n in &names {
        producer
            .send(BaseRecord::<(), _>::to(n).payload(&payload))
            .unwrap();
    }
    producer.flush(Duration::from_secs(60)).unwrap();
    // Twenty groups with committed offsets on the table topics.
    for g in 0..20 {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &node.kafka)
            .set("group.id", format!("group{g:02}"))
            .create()
            .unwrap();
        let mut tpl = TopicPartitionList::new();
        for n in names.iter().take(tables) {
            tpl.add_partition_offset(n, 0, Offset::Offset(1)).unwrap();
        }
        consumer.commit(&tpl, CommitMode::Sync).unwrap();
    }
    // Every table committed its record.
    loop {
        let statuses: Value = rt.block_on(async {
            client
                .get(format!("{http}/v1/tables"))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap()
        });
        let committed = statuses.as_object().map_or(0, |o| {
            o.values()
                .filter(|s| s["commits"].as_u64().unwrap_or(0) >= 1 && s["records_behind"] == 0)
                .count()
        });
        if committed >= tables {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "{committed} of {tables} tables committed after 5 minutes"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // An hour of history: 360 samples of every table's and group's figures.
    loop {
        let h: Value = rt.block_on(async {
            client
                .get(format!(
                    "{http}/v1/history?prefix=node:produced_records_per_s"
                ))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap()
        });
        let samples = h["series"]["node:produced_records_per_s"]
            .as_array()
            .map_or(0, Vec::len);
        if samples >= 360 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(400),
            "{samples} samples of history after {:?}",
            started.elapsed()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    eprintln!("set up in {:.1} s", started.elapsed().as_secs_f64());

    let get = |path: String| {
        let client = client.clone();
        let url = format!("{http}{path}");
        async move {
            let r = client
                .get(&url)
                .header("Accept", "application/json")
                .send()
                .await
                .unwrap();
            assert!(r.status().is_success(), "{url}: {}", r.status());
            r.bytes().await.unwrap().len()
        }
    };
    let query = |sql: String| {
        let client = client.clone();
        let url = format!("{http}/v1/query");
        async move {
            let r = client
                .post(&url)
                .header("Accept", "application/json")
                .json(&json!({"sql": sql}))
                .send()
                .await
                .unwrap();
            assert!(r.status().is_success(), "{sql}: {}", r.status());
            r.bytes().await.unwrap().len()
        }
    };
    let table_name = format!("table{:03}", tables / 2);
    let table = format!("default.{table_name}");
    let status_path = format!("/v1/tables/default/{table_name}");
    type Page<'a> = (
        &'a str,
        Box<dyn Fn() -> futures::future::BoxFuture<'static, usize> + 'a>,
    );
    let pages: Vec<Page> = vec![
        (
            "static files (/ui, app.js, app.css)",
            Box::new(|| {
                Box::pin({
                    let (a, b, c) = (
                        get("/ui".into()),
                        get("/ui/app.js".into()),
                        get("/ui/app.css".into()),
                    );
                    async move {
                        let (a, b, c) = futures::join!(a, b, c);
                        a + b + c
                    }
                })
            }),
        ),
        (
            "overview",
            Box::new(|| {
                Box::pin({
                    let (a, b, c, d, e) = (
                        get("/v1/cluster".into()),
                        get("/v1/topics".into()),
                        get("/v1/tables".into()),
                        get("/metrics".into()),
                        get("/v1/history?prefix=node:".into()),
                    );
                    async move {
                        let (a, b, c, d, e) = futures::join!(a, b, c, d, e);
                        a + b + c + d + e
                    }
                })
            }),
        ),
        ("topics", Box::new(|| Box::pin(get("/v1/topics".into())))),
        ("tables", Box::new(|| Box::pin(get("/v1/tables".into())))),
        (
            "a table",
            Box::new(|| {
                Box::pin({
                    let a = get(status_path.clone());
                    let b = query(format!("SELECT committed_at, CAST(snapshot_id AS VARCHAR) AS snapshot_id, operation, summary['added-records'] AS added_records, summary['total-records'] AS total_records, summary['added-data-files'] AS added_files FROM snapshots('{table}') ORDER BY committed_at DESC LIMIT 10"));
                    let c = query(format!("SELECT content, file_path, record_count, file_size_in_bytes FROM files('{table}')"));
                    let d = get(format!("/v1/history?prefix=table:{table}:"));
                    async move {
                        let (a, b, c, d) = futures::join!(a, b, c, d);
                        a + b + c + d
                    }
                })
            }),
        ),
        ("schemas", Box::new(|| Box::pin(get("/v1/schemas".into())))),
        (
            "consumer groups",
            Box::new(|| {
                Box::pin({
                    let (a, b) = (
                        get("/v1/groups".into()),
                        get("/v1/history?prefix=group:".into()),
                    );
                    async move {
                        let (a, b) = futures::join!(a, b);
                        a + b
                    }
                })
            }),
        ),
        ("cluster", Box::new(|| Box::pin(get("/v1/cluster".into())))),
        (
            "the whole history (no page asks for it)",
            Box::new(|| Box::pin(get("/v1/history".into()))),
        ),
    ];
    println!("| page ({topics} topics, {tables} table topics, 20 groups; {runs} loads) | bytes | p50 | p95 | slowest | < {TARGET_MS} ms |");
    println!("|---|---|---|---|---|---|");
    let mut all_met = true;
    for (name, load) in &pages {
        let mut times = Vec::new();
        let mut bytes = 0;
        for _ in 0..runs {
            let t = Instant::now();
            bytes = rt.block_on(load());
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        times.sort_by(f64::total_cmp);
        let p95 = percentile(&times, 0.95);
        let met = p95 < TARGET_MS;
        all_met &= met;
        println!(
            "| {name} | {bytes} | {:.1} ms | {p95:.1} ms | {:.1} ms | {} |",
            percentile(&times, 0.5),
            times[times.len() - 1],
            if met { "yes" } else { "**no**" }
        );
    }
    node.stop_within(60);
    let _ = std::fs::remove_dir_all(&base);
    println!(
        "\nissue 44's target (every page < {TARGET_MS} ms at p95): {}",
        if all_met { "met" } else { "NOT met" }
    );
}
