//! `/healthz` tells the truth: a node whose uploads fail with an error that will not pass (here
//! a bucket that does not exist, on moto's S3) answers 503 with the reason, and the metric
//! beside it says 0; a healthy node answers 200.
//!
//! Needs moto (`scripts/test-env.sh`); skipped locally without it, fails in CI.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;
use common::Start as _;

use common::{poll_until, rdkafka_send, Node};

fn produce_one(node: &Node, topic: &str) {
    rdkafka_send(
        node,
        &[],
        topic,
        ["x".to_string()],
        "the WAL takes the record while uploads fail",
    );
}

#[test]
fn healthz_answers_503_when_uploads_cannot_succeed() {
    let Some(endpoint) = inlet_test_support::service_env("INLET_TEST_S3_ENDPOINT") else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let healthy = Node::start(dir.path().join("ok").as_path(), &[]);
    let (status, body) = healthy.http_get("/healthz");
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    healthy.stop();

    let node = Node::start_with_env(
        dir.path().join("missing").as_path(),
        &["--object-store", "s3://inlet-no-such-bucket/p"],
        &[("AWS_ENDPOINT", &endpoint), ("AWS_ALLOW_HTTP", "true")],
    );
    produce_one(&node, "health");
    let body = poll_until(60, "/healthz turns 503", || {
        let (status, body) = node.http_get("/healthz");
        (status == 503).then_some(body)
    });
    assert!(
        body.contains("will not pass") && body.contains("inlet-no-such-bucket"),
        "{body}"
    );
    assert_eq!(node.metric("inlet_healthy"), 0.0);
    node.stop();
}
