//! Durability: a registration answered with 200 survives kill -9 of the process. The test
//! re-runs its own binary as the server process (selected by an environment variable), registers
//! over HTTP, kills the child with SIGKILL right after the last answer, and reopens the SQLite
//! file.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;

use inlet_schema_registry::{open, serve, RegistryConfig, VersionSpec};
use inlet_storage::MetaStore;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

const CHILD_ENV: &str = "INLET_REGISTRY_KILL_TEST_DIR";
const VERSIONS: u32 = 20;

fn meta_url(dir: &std::path::Path) -> String {
    format!("sqlite://{}", dir.join("meta.db").display())
}

/// The server side: serve until killed.
fn child(dir: std::path::PathBuf) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let meta = MetaStore::connect(&meta_url(&dir)).await.expect("meta");
        let registry = open(meta, RegistryConfig::default()).await.expect("open");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        println!("ADDR={}", listener.local_addr().expect("addr"));
        serve(listener, Arc::new(registry), None, CancellationToken::new())
            .await
            .expect("serve");
    });
}

fn schema(n: u32) -> String {
    let fields: Vec<String> = (0..=n)
        .map(|i| format!(r#"{{"name":"f{i}","type":"long","default":0}}"#))
        .collect();
    format!(
        r#"{{"type":"record","name":"r","fields":[{}]}}"#,
        fields.join(",")
    )
}

#[test]
fn registrations_survive_kill_9() {
    if let Some(dir) = std::env::var_os(CHILD_ENV) {
        return child(dir.into());
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = Command::new(std::env::current_exe().expect("exe"))
        .args(["registrations_survive_kill_9", "--exact", "--nocapture"])
        .env(CHILD_ENV, dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn server");
    let stdout = server.stdout.take().expect("stdout");
    let addr = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find_map(|l| l.strip_prefix("ADDR=").map(str::to_string))
        .expect("the server prints its address");

    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let ids: Vec<i64> = rt.block_on(async {
        let http = reqwest::Client::new();
        let mut ids = Vec::new();
        for n in 0..VERSIONS {
            let resp = http
                .post(format!("http://{addr}/subjects/k-value/versions"))
                .header("content-type", "application/vnd.schemaregistry.v1+json")
                .body(json!({"schema": schema(n)}).to_string())
                .send()
                .await
                .expect("register");
            assert_eq!(resp.status().as_u16(), 200);
            let v: Value = resp.json().await.expect("json");
            ids.push(v["id"].as_i64().expect("id"));
        }
        ids
    });
    // SIGKILL right after the last answer: no graceful shutdown, no flush.
    server.kill().expect("kill -9");
    server.wait().expect("wait");

    rt.block_on(async {
        let meta = MetaStore::connect(&meta_url(dir.path()))
            .await
            .expect("meta");
        let registry = open(meta, RegistryConfig::default()).await.expect("reopen");
        let versions = registry
            .versions("k-value", inlet_schema_registry::Deleted::Exclude)
            .await
            .expect("versions");
        assert_eq!(versions, (1..=VERSIONS).collect::<Vec<_>>());
        for (n, id) in ids.iter().enumerate() {
            let v = registry
                .version("k-value", VersionSpec::Number(n as u32 + 1), false)
                .await
                .expect("version");
            assert_eq!(i64::from(v.schema.id), *id);
        }
    });
}
