//! Raw Kafka wire helpers: a bare protocol connection for tests that need exact control of
//! requests, and record batches (magic 2) encoded the way clients send them and the broker
//! stores them.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use crate::node::Node;

/// One connection; requests are sent one at a time.
pub struct Conn {
    pub s: TcpStream,
    next: i32,
}

impl Conn {
    /// A connection to `node`'s Kafka listener, with a 30 s read timeout.
    pub fn open(node: &Node) -> Conn {
        let s = TcpStream::connect(&node.kafka).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        Conn { s, next: 1 }
    }

    /// Sends one request and decodes its response body.
    pub fn call<R: Decodable>(&mut self, api: ApiKey, version: i16, body: RequestKind) -> R {
        let correlation = self.send(api, version, body);
        self.receive(api, version, correlation)
    }

    /// Sends one request without reading its answer; returns its correlation id.
    pub fn send(&mut self, api: ApiKey, version: i16, body: RequestKind) -> i32 {
        let correlation = self.next;
        self.next += 1;
        let header = RequestHeader::default()
            .with_request_api_key(api as i16)
            .with_request_api_version(version)
            .with_correlation_id(correlation)
            .with_client_id(Some(StrBytes::from_static_str("idempotence-test")));
        let frame = encode_request(&header, &body);
        self.s.write_all(&frame).expect("write");
        correlation
    }

    /// Reads the next answer, which must be `correlation`'s, and decodes its body.
    pub fn receive<R: Decodable>(&mut self, api: ApiKey, version: i16, correlation: i32) -> R {
        self.try_receive(api, version, correlation)
            .expect("response length: the connection was closed")
    }

    /// [`Conn::receive`], or `None` if the broker closed the connection before answering.
    pub fn try_receive<R: Decodable>(
        &mut self,
        api: ApiKey,
        version: i16,
        correlation: i32,
    ) -> Option<R> {
        let mut len = [0u8; 4];
        match self.s.read_exact(&mut len) {
            Ok(()) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset
                ) =>
            {
                return None
            }
            Err(e) => panic!("response length: {e}"),
        }
        let mut buf = vec![0u8; i32::from_be_bytes(len) as usize];
        self.s.read_exact(&mut buf).expect("response");
        let mut buf = Bytes::from(buf);
        let h =
            ResponseHeader::decode(&mut buf, api.response_header_version(version)).expect("header");
        assert_eq!(h.correlation_id, correlation);
        Some(R::decode(&mut buf, version).expect("body"))
    }
}

/// One request frame: the length prefix, `header` and `body` at the header's version (what
/// `inlet_ingest::codec::encode_request` writes, without depending on ingest).
pub fn encode_request(header: &RequestHeader, body: &RequestKind) -> Bytes {
    let api = ApiKey::try_from(header.request_api_key).expect("a known API key");
    let version = header.request_api_version;
    let mut buf = BytesMut::new();
    buf.put_i32(0);
    header
        .encode(&mut buf, api.request_header_version(version))
        .expect("encode the header");
    body.encode(&mut buf, version).expect("encode the body");
    let len = (buf.len() - 4) as i32;
    buf[..4].copy_from_slice(&len.to_be_bytes());
    buf.freeze()
}

/// How [`encode_batch`] fills the fields a record batch's records share.
#[derive(Debug, Clone, Copy)]
pub struct BatchOptions {
    /// -1 for a plain (not idempotent) batch.
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// The first record's sequence (negative counts as 0); the others follow, so the encoder
    /// keeps them in one batch.
    pub first_sequence: i32,
    /// The first record's CreateTime timestamp, in ms.
    pub timestamp: i64,
    /// What each record's timestamp adds to the one before.
    pub timestamp_step: i64,
    pub compression: Compression,
    /// A transactional batch (its producer's transaction).
    pub transactional: bool,
}

impl Default for BatchOptions {
    /// A plain uncompressed batch, timestamps from 1,700,000,000,000 ms, one ms apart.
    fn default() -> Self {
        BatchOptions {
            producer_id: -1,
            producer_epoch: -1,
            first_sequence: 0,
            timestamp: 1_700_000_000_000,
            timestamp_step: 1,
            compression: Compression::None,
            transactional: false,
        }
    }
}

/// `records` (key, value) as one record batch (magic 2), offsets from 0.
pub fn encode_batch(records: &[(Option<Bytes>, Option<Bytes>)], options: &BatchOptions) -> Bytes {
    let encoded: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, (key, value))| Record {
            transactional: options.transactional,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: options.producer_id,
            producer_epoch: options.producer_epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: options.first_sequence.max(0) + i as i32,
            timestamp: options.timestamp + options.timestamp_step * i as i64,
            key: key.clone(),
            value: value.clone(),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &encoded,
        &RecordEncodeOptions {
            version: 2,
            compression: options.compression,
        },
    )
    .expect("encode a record batch");
    buf.freeze()
}

/// Encodes one record batch (magic 2) of `values` with keys `None`, timestamps fixed, and
/// `producer_id`/`epoch`/`first_seq` for idempotent batches (-1 for plain ones). Records get
/// consecutive sequences so the encoder keeps them in one batch.
pub fn record_batch(
    values: &[Option<Bytes>],
    producer_id: i64,
    epoch: i16,
    first_seq: i32,
    compression: Compression,
) -> Bytes {
    let records: Vec<_> = values.iter().map(|v| (None, v.clone())).collect();
    encode_batch(
        &records,
        &BatchOptions {
            producer_id,
            producer_epoch: epoch,
            first_sequence: first_seq,
            timestamp_step: 0,
            compression,
            ..BatchOptions::default()
        },
    )
}
