//! Hostile and malformed input on the Kafka port: the node refuses it without allocating for
//! it, closes the offending connection, and keeps serving everyone else. Also checks request
//! pipelining: many requests written at once are answered in order.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;
use common::temp_node;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bytes::{Buf, Bytes};
use common::Node;
use inlet_ingest::codec::encode_request;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse,
    RequestHeader, RequestKind, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, StrBytes};

fn connect(node: &Node) -> TcpStream {
    let s = TcpStream::connect(&node.kafka).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    s
}

fn header(api: ApiKey, version: i16, correlation: i32) -> RequestHeader {
    RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation)
        .with_client_id(Some(StrBytes::from_static_str("hostile-test")))
}

/// Reads one response frame; `None` when the server closed the connection.
fn read_frame(s: &mut TcpStream) -> Option<Bytes> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).ok()?;
    let mut body = vec![0u8; i32::from_be_bytes(len) as usize];
    s.read_exact(&mut body).ok()?;
    Some(Bytes::from(body))
}

/// Asserts the server closes the connection (EOF or reset) without answering.
fn assert_closed(s: &mut TcpStream, what: &str) {
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Ok(0) => {}
        Ok(n) => panic!("{what}: expected the connection to close, got {n} bytes"),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("{what}: expected the connection to close, got {e}"),
    }
}

fn api_versions_works(node: &Node) {
    let mut s = connect(node);
    let frame = encode_request(
        &header(ApiKey::ApiVersions, 3, 1),
        &RequestKind::ApiVersions(
            ApiVersionsRequest::default()
                .with_client_software_name(StrBytes::from_static_str("t"))
                .with_client_software_version(StrBytes::from_static_str("1")),
        ),
    )
    .expect("encode");
    s.write_all(&frame).expect("write");
    let mut body = read_frame(&mut s).expect("an ApiVersions answer");
    let h = ResponseHeader::decode(&mut body, 0).expect("header");
    assert_eq!(h.correlation_id, 1);
    let r = ApiVersionsResponse::decode(&mut body, 3).expect("body");
    assert_eq!(r.error_code, 0);
}

#[test]
fn hostile_frames_close_the_connection_and_the_node_keeps_serving() {
    let (_dir, node) = temp_node(&["--kafka-config", "socket.request.max.bytes=65536"]);
    api_versions_works(&node);
    let rss_before = node.rss_kib();

    // A length prefix of 2 GiB: refused before anything is allocated or read.
    let mut s = connect(&node);
    s.write_all(&i32::MAX.to_be_bytes()).expect("write");
    assert_closed(&mut s, "2 GiB frame");
    // Over the configured maximum, and negative.
    for len in [65537i32, -5, 3] {
        let mut s = connect(&node);
        s.write_all(&len.to_be_bytes()).expect("write");
        let _ = s.write_all(&[0u8; 16]);
        assert_closed(&mut s, &format!("frame length {len}"));
    }
    // Garbage with an unknown API key.
    let mut s = connect(&node);
    let mut garbage = 24i32.to_be_bytes().to_vec();
    garbage.extend_from_slice(&[0x77, 0x77, 0, 1, 0, 0, 0, 9]);
    garbage.extend_from_slice(&[0xAB; 16]);
    s.write_all(&garbage).expect("write");
    assert_closed(&mut s, "unknown API key");
    // A known API at a version that does not exist.
    let frame = encode_request(
        &header(ApiKey::Metadata, 12, 5),
        &RequestKind::Metadata(MetadataRequest::default()),
    )
    .expect("encode");
    let mut bad = frame.to_vec();
    bad[6..8].copy_from_slice(&77i16.to_be_bytes());
    let mut s = connect(&node);
    s.write_all(&bad).expect("write");
    assert_closed(&mut s, "Metadata v77");
    // A truncated body: the frame is consistent, the request inside is cut short.
    let frame = encode_request(
        &header(ApiKey::Metadata, 1, 6),
        &RequestKind::Metadata(MetadataRequest::default().with_topics(Some(vec![
            MetadataRequestTopic::default()
                .with_name(Some(TopicName(StrBytes::from_static_str("orders")))),
        ]))),
    )
    .expect("encode");
    let mut cut = frame[..frame.len() - 4].to_vec();
    let len = (cut.len() - 4) as i32;
    cut[..4].copy_from_slice(&len.to_be_bytes());
    let mut s = connect(&node);
    s.write_all(&cut).expect("write");
    assert_closed(&mut s, "truncated Metadata");
    // An array that claims 2^31 elements in a 30-byte frame.
    let mut lie = frame.to_vec();
    let at = 4 + 8 + 2 + "hostile-test".len();
    lie[at..at + 4].copy_from_slice(&i32::MAX.to_be_bytes());
    let mut s = connect(&node);
    s.write_all(&lie).expect("write");
    assert_closed(&mut s, "array count lie");

    // ApiVersions at a version newer than the broker's: answered in v0 with the versions it
    // has (KIP-511), not closed.
    let frame = encode_request(
        &header(ApiKey::ApiVersions, 0, 42),
        &RequestKind::ApiVersions(ApiVersionsRequest::default()),
    )
    .expect("encode");
    let mut newer = frame.to_vec();
    newer[6..8].copy_from_slice(&99i16.to_be_bytes());
    let mut s = connect(&node);
    s.write_all(&newer).expect("write");
    let mut body = read_frame(&mut s).expect("an answer");
    assert_eq!(body.get_i32(), 42, "correlation id");
    let r = ApiVersionsResponse::decode(&mut body, 0).expect("v0 body");
    assert_eq!(r.error_code, 35, "UNSUPPORTED_VERSION");
    assert!(r
        .api_keys
        .iter()
        .any(|k| k.api_key == ApiKey::Produce as i16));

    // Still serving, and nothing was allocated for the lies.
    api_versions_works(&node);
    let rss_after = node.rss_kib();
    assert!(
        rss_after < rss_before + 64 * 1024,
        "RSS grew from {rss_before} KiB to {rss_after} KiB"
    );
    let bad_frames = node.metric("inlet_kafka_bad_frames_total");
    assert!(bad_frames >= 7.0, "bad frames counted: {bad_frames}");
    node.stop();
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let (_dir, node) = temp_node(&[]);
    let mut s = connect(&node);
    let mut all = Vec::new();
    for i in 0..50 {
        let frame = encode_request(
            &header(ApiKey::Metadata, 9, 1000 + i),
            &RequestKind::Metadata(MetadataRequest::default().with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(TopicName(StrBytes::from_string(
                    format!("pipe-{}", i % 3),
                )))),
            ]))),
        )
        .expect("encode");
        all.extend_from_slice(&frame);
    }
    s.write_all(&all).expect("write all at once");
    for i in 0..50 {
        let mut body = read_frame(&mut s).expect("an answer");
        let h = ResponseHeader::decode(&mut body, 1).expect("header");
        assert_eq!(h.correlation_id, 1000 + i, "answers come in request order");
        let r = MetadataResponse::decode(&mut body, 9).expect("body");
        assert_eq!(r.topics.len(), 1);
        assert_eq!(r.topics[0].error_code, 0, "auto-created");
    }
    node.stop();
}
