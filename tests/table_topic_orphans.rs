//! Orphan files of a table topic on a running node (`table-coordinator/src/orphans.rs`): files
//! named as the table's conversions name them (its uuid's tag, or the random tag of its first
//! round) or as its compactions name them (tagged, or of one of its snapshots), in its
//! `data/` folder, older than the age rule and named by no snapshot, are deleted by the
//! coordinator's sweep; younger ones, another engine's files, another table's files and an
//! untagged compaction's of a snapshot the table never had stay, and every row of the table stays readable while records keep arriving.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use common::{current_thread_runtime, poll_until, query_json, rdkafka_send, Node};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;

const TOPIC: &str = "events";

fn create_table_topic(node: &Node) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &node.kafka)
        .create()
        .expect("admin");
    let topic = NewTopic::new(TOPIC, 2, TopicReplication::Fixed(1))
        .set("table.topic.enable", "true")
        .set("table.topic.commit.interval.ms", "1000")
        .set("table.topic.convert.value.type", "string");
    let created = current_thread_runtime()
        .block_on(admin.create_topics(
            &[topic],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        ))
        .expect("create topic");
    assert!(created.iter().all(|c| c.is_ok()), "{created:?}");
}

fn rows(node: &Node) -> u64 {
    let rows = query_json(node, "SELECT count(*) AS n FROM default.events");
    rows[0]["n"].as_u64().unwrap_or(0)
}

fn wait_rows(node: &Node, n: u64) {
    poll_until(60, &format!("{n} rows in the table"), || {
        // The table exists once its first round committed.
        let (code, body) = node.http_get("/v1/tables/default/events");
        let status: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        let committed = code == 200 && status["commits"].as_u64().is_some_and(|c| c >= 1);
        (committed && rows(node) == n).then_some(())
    });
}

/// A file at `path` whose last write was `age` ago.
fn plant(path: &Path, age: Duration) {
    std::fs::write(path, b"not a real parquet file").expect("plant");
    let file = std::fs::File::options()
        .write(true)
        .open(path)
        .expect("open");
    file.set_modified(SystemTime::now() - age).expect("mtime");
}

fn parquet_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("data folder")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".parquet"))
        .collect();
    names.sort();
    names
}

#[test]
fn orphan_files_are_swept_and_nothing_else() {
    // Any age is old enough here: the coordinator still waits ten commit intervals (10 s).
    let (dir, node) = common::sweeping_node();
    create_table_topic(&node);
    rdkafka_send(
        &node,
        &[],
        TOPIC,
        (0..300).map(|i| format!("first-{i}")),
        "the first records",
    );
    wait_rows(&node, 300);
    let data: PathBuf = dir
        .path()
        .join("node/objects/warehouse/default/events/data");
    let committed = parquet_names(&data);
    // `p<partition>-<from>-<next>-<tag>…`: the table's tag is its uuid's first digits (the
    // first round, before the table existed, used a random one).
    let (code, body) = node.http_get("/iceberg/v1/namespaces/default/tables/events");
    assert_eq!(code, 200, "{body}");
    let loaded: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let uuid = loaded["metadata"]["table-uuid"]
        .as_str()
        .unwrap_or_else(|| panic!("no table-uuid in {loaded}"))
        .replace('-', "");
    let tag = uuid[..8].to_string();
    let first_tag = committed
        .iter()
        .filter_map(|n| n.split('-').nth(3))
        .find(|t| *t != tag)
        .unwrap_or_else(|| panic!("no file of the first round in {committed:?}"))
        .to_string();
    let other_tag: String = tag
        .chars()
        .map(|c| if c == 'a' { 'b' } else { 'a' })
        .collect();
    // Crashed compactions' outputs (`compact-<parent snapshot>-<random>…`, the random part
    // starting with the table's tag): one of a snapshot that left the table's metadata (here
    // one it never had), and one untagged (as compactions wrote them before the tag) of the
    // current snapshot. An untagged one of a snapshot the table never had may be another
    // table's, and stays.
    let current = loaded["metadata"]["current-snapshot-id"]
        .as_i64()
        .unwrap_or_else(|| panic!("no current snapshot in {loaded}"));
    let untagged = format!("{other_tag}{}", &uuid[8..]);
    let expired_parent = current ^ 1;
    let compacted = format!("compact-{current:016x}-{untagged}-00000-0.parquet");
    let expired_compaction = format!("compact-{expired_parent:016x}-{uuid}-00000-0.parquet");
    let foreign_compaction = format!("compact-{expired_parent:016x}-{untagged}-00000-0.parquet");
    let hour = Duration::from_secs(3600);
    let orphan = format!("p0-0-7-{tag}-00000-orphan.parquet");
    // Under the random tag of the round before the table existed, which its files carry.
    let first_orphan = format!("p1-0-7-{first_tag}-00000-orphan.parquet");
    let young = format!("p1-0-7-{tag}-00000-young.parquet");
    let foreign = "00000-0-another-engine.parquet".to_string();
    let older_table = format!("p0-0-7-{other_tag}-00000-older-table.parquet");
    plant(&data.join(&orphan), hour);
    plant(&data.join(&first_orphan), hour);
    plant(&data.join(&young), Duration::ZERO);
    plant(&data.join(&foreign), hour);
    plant(&data.join(&older_table), hour);
    plant(&data.join(&compacted), hour);
    plant(&data.join(&expired_compaction), hour);
    plant(&data.join(&foreign_compaction), hour);
    // Records keep arriving while the coordinator sweeps.
    rdkafka_send(
        &node,
        &[],
        TOPIC,
        (0..300).map(|i| format!("second-{i}")),
        "the second records",
    );
    poll_until(60, "the orphans deleted", || {
        [&orphan, &first_orphan, &compacted, &expired_compaction]
            .iter()
            .all(|o| !data.join(o).exists())
            .then_some(())
    });
    for kept in [&young, &foreign, &older_table, &foreign_compaction] {
        assert!(data.join(kept).exists(), "{kept} was deleted");
    }
    wait_rows(&node, 600);
    let now = parquet_names(&data);
    for file in &committed {
        assert!(now.contains(file), "committed file {file} was deleted");
    }
    common::assert_logged(&node, "deleted orphan files", "the sweep's log line");
    let distinct = query_json(
        &node,
        "SELECT count(DISTINCT value) AS d FROM default.events",
    );
    assert_eq!(distinct[0]["d"], 600, "{distinct}");
    node.stop();
}
