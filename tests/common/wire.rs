//! A bare Kafka protocol connection for tests that need exact control of requests.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bytes::Bytes;
use inlet_ingest::codec::encode_request;
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseHeader};
use kafka_protocol::protocol::{Decodable, StrBytes};

use super::Node;

/// One connection; requests are sent one at a time.
pub(crate) struct Conn {
    pub s: TcpStream,
    next: i32,
}

impl Conn {
    pub(crate) fn open(node: &Node) -> Conn {
        let s = TcpStream::connect(&node.kafka).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        Conn { s, next: 1 }
    }

    /// Sends one request and decodes its response body.
    pub(crate) fn call<R: Decodable>(&mut self, api: ApiKey, version: i16, body: RequestKind) -> R {
        let correlation = self.send(api, version, body);
        self.receive(api, version, correlation)
    }

    /// Sends one request without reading its answer; returns its correlation id.
    pub(crate) fn send(&mut self, api: ApiKey, version: i16, body: RequestKind) -> i32 {
        let correlation = self.next;
        self.next += 1;
        let header = RequestHeader::default()
            .with_request_api_key(api as i16)
            .with_request_api_version(version)
            .with_correlation_id(correlation)
            .with_client_id(Some(StrBytes::from_static_str("idempotence-test")));
        let frame = encode_request(&header, &body).expect("encode");
        self.s.write_all(&frame).expect("write");
        correlation
    }

    /// Reads the next answer, which must be `correlation`'s, and decodes its body.
    pub(crate) fn receive<R: Decodable>(
        &mut self,
        api: ApiKey,
        version: i16,
        correlation: i32,
    ) -> R {
        let mut len = [0u8; 4];
        self.s.read_exact(&mut len).expect("response length");
        let mut buf = vec![0u8; i32::from_be_bytes(len) as usize];
        self.s.read_exact(&mut buf).expect("response");
        let mut buf = Bytes::from(buf);
        let h =
            ResponseHeader::decode(&mut buf, api.response_header_version(version)).expect("header");
        assert_eq!(h.correlation_id, correlation);
        R::decode(&mut buf, version).expect("body")
    }
}

/// Encodes one record batch (magic 2) of `values` with keys `None`, timestamps fixed, and
/// `producer_id`/`epoch`/`first_seq` for idempotent batches (-1 for plain ones). Records get
/// consecutive sequences so the encoder keeps them in one batch.
pub(crate) fn record_batch(
    values: &[Option<Bytes>],
    producer_id: i64,
    epoch: i16,
    first_seq: i32,
    compression: kafka_protocol::records::Compression,
) -> Bytes {
    use kafka_protocol::records::{Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};
    let records: Vec<Record> = values
        .iter()
        .enumerate()
        .map(|(i, value)| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id,
            producer_epoch: epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: first_seq.max(0) + i as i32,
            timestamp: 1_700_000_000_000,
            key: None,
            value: value.clone(),
            headers: Default::default(),
        })
        .collect();
    let mut buf = bytes::BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression,
        },
    )
    .expect("encode a record batch");
    buf.freeze()
}
