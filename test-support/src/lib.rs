#![allow(clippy::panic, clippy::unwrap_used, clippy::disallowed_methods)] // test-only: a failed step is a failed test, and deadlines are real time
//! What every crate's tests share: the one way a test says that a tool or service it needs
//! (moto, PostgreSQL, the Python venv, kcat, a JDK) is missing on this machine.
//!
//! Invariants:
//! - in CI (`CI` set, as `scripts/test` sets it under `.ci/run`) a missing requirement fails
//!   the test: nothing CI is meant to run is skipped silently;
//! - elsewhere the test returns early, prints why and how to get the whole suite
//!   (`scripts/test`), and, when `INLET_TEST_SKIP_LOG` names a file, appends one line
//!   `<test name>\t<reason>` to it, so `scripts/test` can count skipped tests and say why.
//!
//! A skipped test still counts as passed for `cargo test`; only the log tells them apart.
//!
//! [`fresh_postgres_database`] gives each test an empty database of its own on the
//! PostgreSQL that `scripts/test-env.sh` starts.
//!
//! The rest of the kit, a dev-dependency of the crates whose tests and benches use it:
//! - [`node`]: the `inlet serve` launcher of the end-to-end tests and benches;
//! - [`python`]: the Python client runner, on [`process`], which runs any tool with a watchdog;
//! - [`proxy`]: a fault-injecting TCP proxy (latency, cut connections, refusals) to put in front
//!   of PostgreSQL or S3;
//! - [`wire`] (feature `kafka`): raw Kafka wire helpers and record batches;
//! - [`raw_disk`] (feature `bench`): the raw-disk probes benchmarks compare against.
//!
//! It depends on no workspace crate: those that dev-depend on it would see two copies of their
//! own types. Fixtures that need a crate's types stay in that crate's `tests/common`.

pub mod node;
pub mod process;
pub mod proxy;
pub mod python;
#[cfg(feature = "bench")]
pub mod raw_disk;
#[cfg(feature = "kafka")]
pub mod wire;

use std::io::Write;

/// Skips the calling test, or fails it in CI: call it and return when this machine lacks
/// `why` (a sentence: "INLET_TEST_S3_ENDPOINT is not set").
pub fn skip(why: &str) {
    if std::env::var_os("CI").is_some() {
        panic!("{why}: CI runs every test (`scripts/test` sets up the tools and services)");
    }
    eprintln!(
        "skipping: {why} (`scripts/test` sets up the tools and services and runs every test)"
    );
    record_skip(why);
}

/// `true` when `available`; otherwise [`skip`]s the calling test with "`what` is not
/// available here" and returns `false`.
pub fn require(what: &str, available: bool) -> bool {
    if !available {
        skip(&format!("{what} is not available here"));
    }
    available
}

/// The value of a variable that `scripts/test-env.sh` exports (a service's address); `None`
/// after [`skip`]ping the calling test when it is unset or empty.
pub fn service_env(name: &str) -> Option<String> {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => Some(v),
        _ => {
            skip(&format!("{name} is not set"));
            None
        }
    }
}

/// Appends `<test name>\t<why>` to `INLET_TEST_SKIP_LOG`. libtest names each test's thread
/// after the test.
fn record_skip(why: &str) {
    let Some(path) = std::env::var_os("INLET_TEST_SKIP_LOG") else {
        return;
    };
    let test = std::thread::current()
        .name()
        .unwrap_or("an unnamed thread")
        .to_owned();
    if let Err(e) = append_skip(std::path::Path::new(&path), &test, why) {
        eprintln!("cannot record the skip in {}: {e}", path.to_string_lossy());
    }
}

/// One line per skip, written with one `write` on an `O_APPEND` file, so that lines from
/// concurrent tests and test binaries stay whole.
fn append_skip(path: &std::path::Path, test: &str, why: &str) -> std::io::Result<()> {
    let line = format!("{test}\t{}\n", why.replace(['\t', '\n'], " "));
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?
        .write_all(line.as_bytes())
}

/// A new empty database on the PostgreSQL at `url` (a database URL); returns its URL. The name
/// is unique without reading the clock: the process id and a fresh temporary directory's name.
pub async fn fresh_postgres_database(url: &str) -> String {
    use sqlx::Connection;
    let tmp = tempfile::tempdir().expect("tempdir");
    let token: String = tmp
        .path()
        .file_name()
        .map(|n| n.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default()
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect();
    let name = format!("inlet_t_{}_{token}", std::process::id());
    let mut conn = sqlx::PgConnection::connect(url)
        .await
        .expect("connect to PostgreSQL");
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut conn)
        .await
        .expect("create database");
    let (base, _) = url.rsplit_once('/').expect("database in URL");
    format!("{base}/{name}")
}

/// The first column of the first row of `sql` (an integer) on the PostgreSQL database at `url`:
/// a test's look into the server's own state (`pg_stat_activity`, `pg_locks`).
pub async fn postgres_i64(url: &str, sql: &str) -> i64 {
    use sqlx::{Connection, Row};
    let mut conn = sqlx::PgConnection::connect(url)
        .await
        .expect("connect to PostgreSQL");
    let row = sqlx::query(sql)
        .fetch_one(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    row.try_get::<i64, _>(0).expect("an integer")
}

/// Asks `sql` (an integer query) again and again on one connection to the PostgreSQL database
/// at `url` until it answers more than 0, for at most `secs`; whether it did. For catching the
/// server in a passing state (a node's session inside a transaction).
pub async fn postgres_until_positive(url: &str, sql: &str, secs: u64) -> bool {
    use sqlx::{Connection, Row};
    let mut conn = sqlx::PgConnection::connect(url)
        .await
        .expect("connect to PostgreSQL");
    #[allow(clippy::disallowed_methods)] // a test's deadline is real time
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    #[allow(clippy::disallowed_methods)]
    while std::time::Instant::now() < deadline {
        let row = sqlx::query(sql)
            .fetch_one(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        if row.try_get::<i64, _>(0).expect("an integer") > 0 {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_present_requirement_runs_the_test() {
        assert!(require("anything", true));
    }

    #[test]
    fn skips_are_logged_one_line_each() {
        let dir = std::env::temp_dir().join(format!("inlet-skip-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let log = dir.join("skips");
        append_skip(&log, "a::test", "kcat is not\tavailable\nhere").expect("append");
        append_skip(&log, "b::test", "INLET_TEST_S3_ENDPOINT is not set").expect("append");
        let text = std::fs::read_to_string(&log).expect("read");
        std::fs::remove_dir_all(&dir).expect("cleanup");
        assert_eq!(
            text,
            "a::test\tkcat is not available here\nb::test\tINLET_TEST_S3_ENDPOINT is not set\n"
        );
    }
}
