//! Membership (`cluster/src/members.rs`): a second node on one metadata store and one object store is
//! refused with the reason (its id is live elsewhere, or its WAL is on local disk, which a
//! cluster cannot share); the
//! same node restarting on its own data directory after a kill -9 starts at once; a crashed
//! node blocks others only until its lease ends; a clean stop lets the next node start at
//! once; `GET /v1/cluster` and `inlet cluster status` show the nodes. Run on a shared SQLite
//! file, and on PostgreSQL when the tests have one.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;
use common::Start as _;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{http_url, inlet_ok, serve_command, service_env, wait_until, Node};

/// The shared arguments: one metadata store, one object store, a 2 s lease.
fn args<'a>(meta: &'a str, objects: &'a str, config: &'a str, id: &'a str) -> Vec<&'a str> {
    vec![
        "--meta",
        meta,
        "--object-store",
        objects,
        "--config",
        config,
        "--node-id",
        id,
    ]
}

/// Starts `inlet serve` on `data_dir` expecting a refusal: returns its stderr once it exits
/// with a failure; panics if it is still running after 60 s (it started) or exits cleanly.
fn refused(data_dir: &Path, extra: &[&str]) -> String {
    refused_within(data_dir, extra, Duration::from_secs(60))
        .expect("the node was refused, not still running after 60 s")
}

fn cluster(node: &Node) -> serde_json::Value {
    let (status, body) = node.http_get("/v1/cluster");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).expect("JSON")
}

fn live_ids(view: &serde_json::Value) -> Vec<u64> {
    view["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .filter(|n| n["live"] == true)
        .map(|n| n["node_id"].as_u64().expect("id"))
        .collect()
}

fn scenario(meta: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("inlet.toml");
    // Local WALs on both backends (PostgreSQL's default is the object-store WAL, tested in
    // `tests/cluster.rs`): a second node is refused.
    std::fs::write(
        &config,
        "[cluster]\nlease_ms = 2000\n[storage]\nwal = \"local\"\n",
    )
    .expect("config");
    let config = config.to_string_lossy().to_string();
    let objects = dir.path().join("objects");
    std::fs::create_dir_all(&objects).expect("objects");
    let objects = objects.to_string_lossy().to_string();
    let (a_dir, b_dir, c_dir) = (
        dir.path().join("a"),
        dir.path().join("b"),
        dir.path().join("c"),
    );

    let a = Node::start(&a_dir, &args(meta, &objects, &config, "1"));
    let view = cluster(&a);
    assert_eq!(live_ids(&view), vec![1], "{view}");
    assert_eq!(view["nodes"][0]["this_node"], true, "{view}");
    assert_eq!(
        view["nodes"][0]["kafka"].as_str(),
        Some(a.kafka.as_str()),
        "{view}"
    );
    // `inlet cluster status` prints the same view.
    let out = inlet_ok(&["cluster", "status", "--server", &http_url(&a)]);
    let printed: serde_json::Value = serde_json::from_slice(&out).expect("JSON");
    assert_eq!(live_ids(&printed), vec![1]);

    // The same id from another data directory, and another id: both refused, saying why.
    let err = refused(&b_dir, &args(meta, &objects, &config, "1"));
    assert!(err.contains("node id 1 is live"), "{err}");
    let err = refused(&c_dir, &args(meta, &objects, &config, "2"));
    assert!(err.contains("this node's WAL is on local disk"), "{err}");
    assert!(err.contains("node id 1"), "{err}");

    // kill -9, and the same node on its own data directory starts at once (its lease is
    // still live).
    let a = a.restart_after_kill9();
    assert_eq!(live_ids(&cluster(&a)), vec![1]);

    // A crashed node blocks another only until its lease ends.
    a.kill9();
    let crashed = Instant::now();
    let c_args = args(meta, &objects, &config, "2");
    let err = refused_quickly(&c_dir, &c_args).expect("refused while node 1's lease is live");
    assert!(err.contains("this node's WAL is on local disk"), "{err}");
    wait_until(
        30,
        "node 2 to be let in once node 1's lease ended",
        || match refused_quickly(&c_dir, &c_args) {
            Some(err) => {
                assert!(err.contains("this node's WAL is on local disk"), "{err}");
                None
            }
            None => Some(()),
        },
    );
    // Renewed every third of 2 s: at least 1.3 s of the lease was left at the kill.
    assert!(
        crashed.elapsed() >= Duration::from_millis(1_300),
        "node 2 was let in before node 1's lease could have ended"
    );
    let c = Node::start(&c_dir, &c_args);
    let view = cluster(&c);
    assert_eq!(
        live_ids(&view),
        vec![2],
        "the crashed node's row is gone: {view}"
    );

    // A clean stop leaves: the next node starts at once.
    c.stop();
    let b = Node::start(&b_dir, &args(meta, &objects, &config, "1"));
    assert_eq!(live_ids(&cluster(&b)), vec![1]);
    b.stop();
}

/// Runs the node for up to 5 s: Some(stderr) if it was refused in that time, None if it is
/// still running (then it is stopped, and the caller starts it for real).
fn refused_quickly(data_dir: &Path, extra: &[&str]) -> Option<String> {
    refused_within(data_dir, extra, Duration::from_secs(5))
}

/// Runs the node for up to `wait`: Some(stderr) if it exited with a failure in that time
/// (panics on a clean exit), None if it is still running (then it is sent SIGTERM, so it
/// leaves cleanly).
fn refused_within(data_dir: &Path, extra: &[&str], wait: Duration) -> Option<String> {
    let mut child = serve_command(data_dir, extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("inlet starts");
    let deadline = Instant::now() + wait;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().expect("try_wait") {
            let mut stderr = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr)
                .expect("stderr");
            assert!(!status.success(), "refused with a failure status: {stderr}");
            return Some(stderr);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
    None
}

#[test]
fn a_second_node_on_one_sqlite_metadata_store_is_refused_until_the_first_is_gone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let meta = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("shared.db").display()
    );
    scenario(&meta);
}

#[test]
fn a_second_node_on_one_postgresql_is_refused_until_the_first_is_gone() {
    let Some(pg) = service_env("INLET_TEST_POSTGRES_URL") else {
        return;
    };
    let db = common::fresh_postgres_database(&pg);
    scenario(&db);
}
