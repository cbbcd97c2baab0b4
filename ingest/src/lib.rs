//! The Kafka wire protocol server (DESIGN.md §2): topics, partitions, produce and fetch over
//! the stream store, consumer groups, idempotent producers, topic configs and produce-time
//! schema validation.
//!
//! Not built yet: the Kafka endpoint issue builds this crate. Until then it only proves that
//! the pinned `kafka-protocol` crate encodes and decodes with this toolchain.

pub mod groups;

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use kafka_protocol::messages::ApiVersionsRequest;
    use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

    #[test]
    fn api_versions_request_round_trips() {
        let request = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("inlet-smoke"))
            .with_client_software_version(StrBytes::from_static_str("1"));
        let mut buf = BytesMut::new();
        request.encode(&mut buf, 3).expect("encode");
        let decoded = ApiVersionsRequest::decode(&mut buf.freeze(), 3).expect("decode");
        assert_eq!(decoded, request);
    }
}
