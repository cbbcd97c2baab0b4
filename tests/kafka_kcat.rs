//! The Kafka endpoint with `kcat` as an independent client: metadata (`-L -J`), produce with
//! every codec (`-P -z`), keys (`-K:`), consume from the beginning and from the end (`-o -2`),
//! and balanced group consumers (`-G`) that commit and resume.
//!
//! Every kcat run has a watchdog; consumers use `-e` so they exit at the end of the partitions.
//! Without kcat on PATH the tests are skipped locally and fail in CI.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;
use common::Start as _;

use std::process::Command;
use std::time::Duration;

use common::{require, tool_runs, Node};
use inlet_test_support::process::run_captured;

/// How long one kcat run may take before it is killed.
const KCAT_TIMEOUT: Duration = Duration::from_secs(60);

/// A node started with `extra` arguments in a new data directory; None after skipping the
/// test (a failure in CI) when there is no kcat.
fn kcat_node(extra: &[&str]) -> Option<(tempfile::TempDir, Node)> {
    if !require("kcat", tool_runs("kcat", "-V")) {
        return None;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let node = Node::start(dir.path(), extra);
    Some((dir, node))
}

struct Run {
    success: bool,
    stdout: String,
    stderr: String,
    what: String,
}

impl Run {
    /// Panics with the command line and its output unless it exited 0.
    fn ok(self) -> Run {
        assert!(
            self.success,
            "{} failed\n--- stdout ---\n{}--- stderr ---\n{}",
            self.what, self.stdout, self.stderr
        );
        self
    }
}

/// Runs `kcat -b BOOTSTRAP args` with `stdin` on its standard input; killed after KCAT_TIMEOUT.
fn kcat(bootstrap: &str, args: &[&str], stdin: &str) -> Run {
    let what = format!("kcat -b {bootstrap} {}", args.join(" "));
    let done = run_captured(
        Command::new("kcat").arg("-b").arg(bootstrap).args(args),
        Some(stdin.as_bytes()),
        KCAT_TIMEOUT,
        Duration::from_millis(20),
    );
    let Some(status) = done.status else {
        panic!(
            "{what} did not finish within {KCAT_TIMEOUT:?}\n{}",
            done.output()
        );
    };
    Run {
        success: status.success(),
        stdout: done.stdout,
        stderr: done.stderr,
        what,
    }
}

/// `kcat -C -t TOPIC -e -q EXTRA -o OFFSET -f FORMAT`: reads `topic` from `offset` to its
/// end; it must exit 0. Returns what it printed.
fn consume(bootstrap: &str, topic: &str, extra: &[&str], offset: &str, format: &str) -> String {
    let mut args = vec!["-C", "-t", topic, "-e", "-q"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["-o", offset, "-f", format]);
    kcat(bootstrap, &args, "").ok().stdout
}

/// `kcat -L -J` output: the `"brokers":[...]` array, verbatim.
fn brokers_json(metadata: &str) -> &str {
    let start = metadata
        .find("\"brokers\":[")
        .unwrap_or_else(|| panic!("no brokers in {metadata}"));
    let rest = &metadata[start + "\"brokers\":".len()..];
    let end = rest.find(']').expect("the brokers array ends");
    &rest[..=end]
}

fn lines(prefix: &str, count: usize) -> Vec<(String, String)> {
    (0..count)
        .map(|i| (format!("{prefix}-key-{i}"), format!("{prefix} value {i}")))
        .collect()
}

/// `key:value` lines for `-K:`.
fn keyed_input(records: &[(String, String)]) -> String {
    records.iter().map(|(k, v)| format!("{k}:{v}\n")).collect()
}

/// What `-f '%k %s\n'` prints for `records`.
fn key_value_output(records: &[(String, String)]) -> String {
    records.iter().map(|(k, v)| format!("{k} {v}\n")).collect()
}

fn sorted_lines(text: &str) -> Vec<&str> {
    let mut v: Vec<&str> = text.lines().collect();
    v.sort_unstable();
    v
}

#[test]
fn kcat_metadata_lists_the_advertised_broker_and_topics() {
    let Some((_dir, node)) = kcat_node(&[
        "--advertised-host",
        "localhost",
        "--kafka-config",
        "num.partitions=3",
    ]) else {
        return;
    };
    let port = node
        .kafka
        .rsplit_once(':')
        .expect("host:port")
        .1
        .to_string();

    // An auto-created topic, so that the metadata has something to list.
    kcat(&node.kafka, &["-P", "-t", "meta", "-K:"], "k:v\n").ok();

    let all = kcat(&node.kafka, &["-L", "-J", "-m", "10"], "").ok().stdout;
    assert_eq!(
        brokers_json(&all),
        format!("[{{\"id\":0,\"name\":\"localhost:{port}\"}}]"),
        "the broker is listed with the advertised host and the listener's port: {all}"
    );
    assert!(all.contains("\"topic\":\"meta\""), "{all}");

    let one = kcat(&node.kafka, &["-L", "-J", "-m", "10", "-t", "meta"], "")
        .ok()
        .stdout;
    assert!(!one.contains("\"error\""), "{one}");
    let partitions: Vec<String> = (0..3)
        .map(|p| {
            format!(
                "{{\"partition\":{p},\"leader\":0,\"replicas\":[{{\"id\":0}}],\"isrs\":[{{\"id\":0}}]}}"
            )
        })
        .collect();
    let expected = format!(
        "\"topics\":[{{\"topic\":\"meta\",\"partitions\":[{}]}}]",
        partitions.join(",")
    );
    assert!(
        one.contains(&expected),
        "metadata for meta: 3 partitions led by broker 0\nexpected {expected}\nin {one}"
    );

    let missing = kcat(&node.kafka, &["-L", "-J", "-m", "10", "-t", "no/such"], "").stdout;
    assert!(
        missing.contains("\"error\""),
        "an invalid topic name is reported with an error: {missing}"
    );
    node.stop();
}

#[test]
fn kcat_produces_with_every_codec_and_reads_back_exactly() {
    let Some((_dir, node)) = kcat_node(&[]) else {
        return;
    };
    let b = node.kafka.as_str();

    let all = kcat(b, &["-L", "-J", "-m", "10"], "").ok().stdout;
    assert_eq!(
        brokers_json(&all),
        format!("[{{\"id\":0,\"name\":\"{b}\"}}]"),
        "without --advertised-host the broker is listed at its listener"
    );

    for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
        let topic = format!("kcat-{codec}");
        let records = lines(codec, 300);
        // Two producer runs: the second appends after the first's batches.
        let (first, second) = records.split_at(200);
        for part in [first, second] {
            kcat(
                b,
                &["-P", "-t", &topic, "-p", "0", "-z", codec, "-K:"],
                &keyed_input(part),
            )
            .ok();
        }
        let read = consume(b, &topic, &[], "beginning", "%k %s\n");
        assert_eq!(
            read,
            key_value_output(&records),
            "{codec}: read back in order"
        );

        let offsets = consume(b, &topic, &["-p", "0"], "beginning", "%o\n");
        let expected: String = (0..300).map(|o| format!("{o}\n")).collect();
        assert_eq!(offsets, expected, "{codec}: offsets are dense from 0");

        let last_two = consume(b, &topic, &["-p", "0"], "-2", "%o %k %s\n");
        assert_eq!(
            last_two,
            format!(
                "298 {codec}-key-298 {codec} value 298\n299 {codec}-key-299 {codec} value 299\n"
            ),
            "{codec}: -o -2 reads the last two records"
        );
    }

    // Without -K the whole line is the value and the key is null (-Z prints it as NULL).
    kcat(
        b,
        &["-P", "-t", "kcat-nokey", "-z", "lz4"],
        "first line\nsecond: with a colon\n",
    )
    .ok();
    let read = consume(b, "kcat-nokey", &["-Z"], "beginning", "%k|%s\n");
    assert_eq!(read, "NULL|first line\nNULL|second: with a colon\n");
    node.stop();
}

#[test]
fn kcat_group_consumers_commit_and_resume() {
    let Some((_dir, node)) = kcat_node(&[
        "--kafka-config",
        "num.partitions=3",
        "--kafka-config",
        "group.initial.rebalance.delay.ms=0",
    ]) else {
        return;
    };
    let b = node.kafka.as_str();
    let group_consume = |group: &str| {
        kcat(
            b,
            &[
                "-G",
                group,
                "-X",
                "auto.offset.reset=earliest",
                "-e",
                "-q",
                "-f",
                "%k %s\n",
                "grouped",
            ],
            "",
        )
        .ok()
        .stdout
    };

    let old = lines("old", 150);
    kcat(
        b,
        &["-P", "-t", "grouped", "-z", "snappy", "-K:"],
        &keyed_input(&old),
    )
    .ok();
    let first = group_consume("kcat-group");
    let expected = key_value_output(&old);
    assert_eq!(
        sorted_lines(&first),
        sorted_lines(&expected),
        "the first group consumer reads every record once"
    );

    // The first run committed its position when it left: a second run gets nothing old, only
    // what was produced since.
    let new = lines("new", 7);
    kcat(
        b,
        &["-P", "-t", "grouped", "-z", "gzip", "-K:"],
        &keyed_input(&new),
    )
    .ok();
    let second = group_consume("kcat-group");
    assert_eq!(
        sorted_lines(&second),
        sorted_lines(&key_value_output(&new)),
        "the second run of the group resumes at the committed offsets"
    );
    let third = group_consume("kcat-group");
    assert_eq!(third, "", "a third run has nothing left to read");

    // Another group starts from the beginning on its own.
    let other = group_consume("kcat-other-group");
    let everything = format!("{expected}{}", key_value_output(&new));
    assert_eq!(sorted_lines(&other), sorted_lines(&everything));

    // The default partitioner spread the keyed records over the auto-created topic's 3 partitions.
    let by_partition = consume(b, "grouped", &[], "beginning", "%p %k\n");
    let partitions: std::collections::BTreeSet<&str> = by_partition
        .lines()
        .filter_map(|l| l.split(' ').next())
        .collect();
    assert!(
        partitions.len() > 1,
        "157 keyed records over 3 partitions all landed in {partitions:?}"
    );
    node.stop();
}
