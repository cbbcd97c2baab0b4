//! The wire format, without I/O: request frames in, response frames out. Everything here
//! takes untrusted bytes and must answer with an error, never a panic (the fuzz target and
//! property tests feed it garbage).
//!
//! A frame is a big-endian `i32` length followed by that many bytes. A request is a header
//! (API key, API version, correlation id, client id, then tagged fields for flexible
//! versions) followed by the body of that API at that version.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseHeader, ResponseKind};
use kafka_protocol::protocol::{Decodable, Encodable};

use crate::frame::{Frame, FrameWriter};

/// The API versions this broker implements; ApiVersions advertises exactly these.
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 11),
    (ApiKey::Fetch, 4, 12),
    (ApiKey::ListOffsets, 1, 9),
    (ApiKey::Metadata, 0, 12),
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetFetch, 1, 9),
    (ApiKey::FindCoordinator, 0, 5),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::DescribeGroups, 0, 5),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::InitProducerId, 0, 4),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::OffsetDelete, 0, 0),
    (ApiKey::OffsetForLeaderEpoch, 0, 4),
    (ApiKey::DescribeCluster, 0, 1),
    (ApiKey::DescribeLogDirs, 1, 4),
    (ApiKey::DescribeProducers, 0, 0),
    (ApiKey::DescribeTopicPartitions, 0, 0),
    // Transactions (KIP-98, KIP-447). The versions of transaction.version 1: Inlet finalizes
    // no transaction.version feature, so clients do not use KIP-890's second part.
    (ApiKey::AddPartitionsToTxn, 0, 3),
    (ApiKey::AddOffsetsToTxn, 0, 4),
    (ApiKey::EndTxn, 0, 4),
    (ApiKey::TxnOffsetCommit, 0, 4),
    (ApiKey::WriteTxnMarkers, 1, 1),
    (ApiKey::DescribeTransactions, 0, 0),
    (ApiKey::ListTransactions, 0, 1),
    // ACLs (KIP-140, KIP-290's prefixed patterns from version 1).
    (ApiKey::DescribeAcls, 0, 3),
    (ApiKey::CreateAcls, 0, 3),
    (ApiKey::DeleteAcls, 0, 3),
    // SCRAM credentials (KIP-554), and SASL (KIP-43, KIP-152). Handshake version 0 is offered
    // because older librdkafka (2.0.2, under kcat as Debian packages it) takes a broker to
    // support SASL handshakes only when ApiVersions offers version 0, and then uses version 1
    // with SaslAuthenticate; a version 0 handshake itself, whose tokens are not framed, is
    // answered UNSUPPORTED_VERSION (`server::authenticate`).
    // Client quotas (KIP-546).
    (ApiKey::DescribeClientQuotas, 0, 1),
    (ApiKey::AlterClientQuotas, 0, 1),
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    (ApiKey::AlterUserScramCredentials, 0, 0),
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
];

/// The version range of an API, if implemented.
pub fn supported_versions(key: ApiKey) -> Option<(i16, i16)> {
    SUPPORTED
        .iter()
        .find(|(k, _, _)| *k == key)
        .map(|&(_, min, max)| (min, max))
}

/// Why a request frame could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("frame of {0} bytes is too short for a request header")]
    TooShort(usize),
    #[error("unknown API key {0}")]
    UnknownApiKey(i16),
    #[error("{api:?} version {version} is not supported (supported: {min} to {max})")]
    UnsupportedVersion {
        api: ApiKey,
        version: i16,
        min: i16,
        max: i16,
    },
    #[error("malformed {api:?} v{version} request: {detail}")]
    Malformed {
        api: ApiKey,
        version: i16,
        detail: String,
    },
}

/// A decoded request.
#[derive(Debug)]
pub struct Request {
    pub api_key: ApiKey,
    pub header: RequestHeader,
    pub body: RequestKind,
}

impl Request {
    pub fn version(&self) -> i16 {
        self.header.request_api_version
    }
}

/// The first fields of a request header, readable from any frame of at least 8 bytes: enough
/// to answer an ApiVersions request whose version this broker does not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderPrefix {
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
}

pub fn header_prefix(frame: &[u8]) -> Result<HeaderPrefix, DecodeError> {
    if frame.len() < 8 {
        return Err(DecodeError::TooShort(frame.len()));
    }
    let mut b = &frame[..8];
    Ok(HeaderPrefix {
        api_key: b.get_i16(),
        api_version: b.get_i16(),
        correlation_id: b.get_i32(),
    })
}

/// Decodes a request frame (without its length prefix).
pub fn decode_request(frame: Bytes) -> Result<Request, DecodeError> {
    let prefix = header_prefix(&frame)?;
    let api_key =
        ApiKey::try_from(prefix.api_key).map_err(|_| DecodeError::UnknownApiKey(prefix.api_key))?;
    let (min, max) =
        supported_versions(api_key).ok_or(DecodeError::UnknownApiKey(prefix.api_key))?;
    let version = prefix.api_version;
    if version < min || version > max {
        return Err(DecodeError::UnsupportedVersion {
            api: api_key,
            version,
            min,
            max,
        });
    }
    let malformed = |detail: String| DecodeError::Malformed {
        api: api_key,
        version,
        detail,
    };
    let mut buf = frame;
    let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let header = RequestHeader::decode(&mut buf, api_key.request_header_version(version))?;
        let body = RequestKind::decode(api_key, &mut buf, version)?;
        anyhow::Ok((header, body))
    }));
    match decoded {
        // Bytes after the body are ignored, as Apache Kafka ignores them: librdkafka 2.16 sends
        // three (`01 00 00`) after a Metadata v12 body.
        Ok(Ok((header, body))) => Ok(Request {
            api_key,
            header,
            body,
        }),
        Ok(Err(e)) => Err(malformed(format!("{e:#}"))),
        Err(_) => Err(malformed("the decoder panicked".into())),
    }
}

/// Encodes a response frame, length prefix included. A Fetch answer's record batches are
/// not copied: the frame refers to them ([`Frame`]).
pub fn encode_response(
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &ResponseKind,
) -> anyhow::Result<Frame> {
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    let header_version = api_key.response_header_version(version);
    if let ResponseKind::Fetch(fetch) = body {
        let batches = fetch
            .responses
            .iter()
            .flat_map(|t| &t.partitions)
            .filter_map(|p| p.records.clone());
        let mut w = FrameWriter::new(batches);
        let len = header.compute_size(header_version)? + fetch.compute_size(version)?;
        w.put_i32(i32::try_from(len)?);
        header.encode(&mut w, header_version)?;
        fetch.encode(&mut w, version)?;
        return Ok(w.finish());
    }
    let mut buf = BytesMut::with_capacity(64);
    buf.put_i32(0);
    header.encode(&mut buf, header_version)?;
    body.encode(&mut buf, version)?;
    let len = (buf.len() - 4) as i32;
    buf[..4].copy_from_slice(&len.to_be_bytes());
    Ok(Frame::from(buf.freeze()))
}

/// Encodes a request frame, length prefix included (for tests and tools).
pub fn encode_request(header: &RequestHeader, body: &RequestKind) -> anyhow::Result<Bytes> {
    let api_key = ApiKey::try_from(header.request_api_key)
        .map_err(|_| anyhow::anyhow!("unknown API key {}", header.request_api_key))?;
    let version = header.request_api_version;
    let mut buf = BytesMut::new();
    buf.put_i32(0);
    header.encode(&mut buf, api_key.request_header_version(version))?;
    body.encode(&mut buf, version)?;
    let len = (buf.len() - 4) as i32;
    buf[..4].copy_from_slice(&len.to_be_bytes());
    Ok(buf.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    use kafka_protocol::messages::{MetadataRequest, TopicName};
    use kafka_protocol::protocol::StrBytes;
    use proptest::prelude::*;

    fn metadata_frame(version: i16) -> Bytes {
        let header = RequestHeader::default()
            .with_request_api_key(ApiKey::Metadata as i16)
            .with_request_api_version(version)
            .with_correlation_id(7)
            .with_client_id(Some(StrBytes::from_static_str("t")));
        let body = MetadataRequest::default()
            .with_topics(Some(vec![MetadataRequestTopic::default()
                .with_name(Some(TopicName(StrBytes::from_static_str("orders"))))]));
        encode_request(&header, &RequestKind::Metadata(body))
            .expect("encode")
            .slice(4..)
    }

    #[test]
    fn requests_round_trip_and_versions_are_checked() {
        for v in [1, 9, 12] {
            let r = decode_request(metadata_frame(v)).expect("decodes");
            assert_eq!(
                (r.api_key, r.version(), r.header.correlation_id),
                (ApiKey::Metadata, v, 7)
            );
        }
        let mut frame = BytesMut::from(&metadata_frame(12)[..]);
        frame[2..4].copy_from_slice(&99i16.to_be_bytes());
        assert!(matches!(
            decode_request(frame.freeze()),
            Err(DecodeError::UnsupportedVersion { version: 99, .. })
        ));
        let mut frame = BytesMut::from(&metadata_frame(12)[..]);
        frame[0..2].copy_from_slice(&999i16.to_be_bytes());
        assert_eq!(
            decode_request(frame.freeze()).unwrap_err(),
            DecodeError::UnknownApiKey(999)
        );
        let frame = metadata_frame(9);
        assert!(matches!(
            decode_request(frame.slice(..frame.len() - 3)),
            Err(DecodeError::Malformed { .. })
        ));
    }

    #[test]
    fn bytes_after_the_body_are_ignored_as_kafka_ignores_them() {
        // librdkafka 2.16's Metadata v12 request ends with `01 00 00` after the body.
        for v in [4, 12] {
            let mut frame = BytesMut::from(&metadata_frame(v)[..]);
            frame.extend_from_slice(&[0x01, 0x00, 0x00]);
            let r = decode_request(frame.freeze()).expect("trailing bytes are ignored");
            let RequestKind::Metadata(body) = r.body else {
                panic!("not a Metadata request")
            };
            let topics = body.topics.expect("topics");
            assert_eq!(topics.len(), 1);
            assert_eq!(&*topics[0].name.clone().expect("name").0, "orders");
        }
    }

    #[test]
    fn unknown_tagged_fields_are_accepted() {
        // Metadata v12's body ends with its tagged fields: replace the empty set (0) with one
        // unknown tag (tag 99, 2 bytes of data).
        let frame = metadata_frame(12);
        let mut tagged = BytesMut::from(&frame[..frame.len() - 1]);
        tagged.extend_from_slice(&[0x01, 99, 0x02, 0xAB, 0xCD]);
        let r = decode_request(tagged.freeze()).expect("an unknown tagged field is accepted");
        assert_eq!(r.version(), 12);
    }

    #[test]
    fn a_huge_array_count_in_a_tiny_frame_is_refused() {
        // Metadata v1: header, then the topics array's i32 count.
        let mut frame = BytesMut::from(&metadata_frame(1)[..]);
        let at = 8 + 2 + 1; // api key, version, correlation id, client id "t"
        frame[at..at + 4].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(decode_request(frame.freeze()).is_err());
    }

    proptest! {
        #[test]
        fn garbage_never_panics(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = decode_request(Bytes::from(data));
        }

        #[test]
        fn mutated_requests_never_panic(at in 0usize..40, byte in any::<u8>(), v in 0i16..=12) {
            let mut frame = BytesMut::from(&metadata_frame(v)[..]);
            let at = at % frame.len();
            frame[at] = byte;
            let _ = decode_request(frame.freeze());
        }
    }
}
