//! One member of a classic consumer group: who it is, what it supports, the calls it makes
//! (in domain terms, not wire types) and the replies it is waiting for.
//!
//! Invariants:
//! - a member waits on at most one JoinGroup and one SyncGroup reply at a time; a newer call
//!   from the same member replaces the older one (whose caller gives up);
//! - a member with a pending reply is kept alive: its session only runs while it is not
//!   parked in JoinGroup or SyncGroup, as in Kafka.
//!
//! Pure data and logic, no I/O: the replies travel on `oneshot` channels that the coordinator
//! awaits.

use bytes::Bytes;
use kafka_protocol::messages::ConsumerProtocolSubscription;
use kafka_protocol::protocol::Decodable;
use kafka_protocol::ResponseError;
use tokio::sync::oneshot;

/// One assignor a member supports, with its subscription metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Protocol {
    pub name: String,
    pub metadata: Bytes,
}

/// A member as another member sees it in the leader's JoinGroup reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MemberMetadata {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub metadata: Bytes,
}

/// A reply that is ready, or one that comes when the rebalance moves on.
#[derive(Debug)]
pub(crate) enum Reply<T> {
    Now(T),
    Later(oneshot::Receiver<T>),
}

/// A JoinGroup call, in domain terms.
#[derive(Debug, Clone)]
pub(crate) struct JoinParams {
    /// Empty for a member joining for the first time.
    pub member_id: String,
    /// The id to give a new member (made by the caller, so this module stays deterministic).
    pub new_member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: u64,
    pub rebalance_timeout_ms: u64,
    pub protocol_type: String,
    pub protocols: Vec<Protocol>,
    /// JoinGroup v4+: a new member first gets its id with `MEMBER_ID_REQUIRED`.
    pub require_known_member_id: bool,
}

/// A SyncGroup call, in domain terms.
#[derive(Debug, Clone)]
pub(crate) struct SyncParams {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignments: Vec<(String, Bytes)>,
}

/// The outcome of a JoinGroup call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JoinResult {
    pub error: Option<ResponseError>,
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub member_id: String,
    /// Every member with its metadata for the chosen protocol; only the leader gets them.
    pub members: Vec<MemberMetadata>,
    /// The leader rejoined a stable group unchanged and must keep the current assignment.
    pub skip_assignment: bool,
}

impl JoinResult {
    pub(super) fn error(member_id: &str, error: ResponseError) -> Self {
        JoinResult {
            error: Some(error),
            generation_id: -1,
            protocol_type: None,
            protocol_name: None,
            leader: String::new(),
            member_id: member_id.to_string(),
            members: Vec::new(),
            skip_assignment: false,
        }
    }
}

/// The outcome of a SyncGroup call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SyncResult {
    pub error: Option<ResponseError>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

impl SyncResult {
    pub(super) fn error(error: ResponseError) -> Self {
        SyncResult {
            error: Some(error),
            protocol_type: None,
            protocol_name: None,
            assignment: Bytes::new(),
        }
    }
}

/// A member of a group.
#[derive(Debug)]
pub(crate) struct Member {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: u64,
    pub rebalance_timeout_ms: u64,
    pub protocol_type: String,
    /// In the member's order of preference.
    pub protocols: Vec<Protocol>,
    /// What the leader assigned to this member in the current generation.
    pub assignment: Bytes,
    /// When the member is considered dead unless it calls again (clock milliseconds).
    pub session_deadline_ms: u64,
    pub join_waiter: Option<oneshot::Sender<JoinResult>>,
    pub sync_waiter: Option<oneshot::Sender<SyncResult>>,
}

impl Member {
    /// Whether the member is parked in JoinGroup (it has rejoined the pending rebalance).
    pub(super) fn awaiting_join(&self) -> bool {
        self.join_waiter.is_some()
    }

    /// Whether the session must not expire now: the member is waiting on us, not silent.
    pub(super) fn keep_alive(&self) -> bool {
        self.join_waiter.is_some() || self.sync_waiter.is_some()
    }

    /// Restarts the session timer.
    pub(super) fn touch(&mut self, now_ms: u64) {
        self.session_deadline_ms = now_ms.saturating_add(self.session_timeout_ms);
    }

    pub(super) fn supports(&self, protocol: &str) -> bool {
        self.protocols.iter().any(|p| p.name == protocol)
    }

    /// The member's metadata for `protocol` (empty if it does not support it).
    pub(super) fn metadata(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|p| p.name == protocol)
            .map(|p| p.metadata.clone())
            .unwrap_or_default()
    }

    /// The member's first choice among `candidates`.
    pub(super) fn vote<'a>(&self, candidates: &'a [String]) -> Option<&'a String> {
        self.protocols
            .iter()
            .find_map(|p| candidates.iter().find(|c| **c == p.name))
    }

    /// Answers a parked JoinGroup call, if any. A caller that went away is ignored.
    pub(super) fn reply_join(&mut self, result: JoinResult) {
        if let Some(waiter) = self.join_waiter.take() {
            let _ = waiter.send(result);
        }
    }

    /// Answers a parked SyncGroup call, if any. A caller that went away is ignored.
    pub(super) fn reply_sync(&mut self, result: SyncResult) {
        if let Some(waiter) = self.sync_waiter.take() {
            let _ = waiter.send(result);
        }
    }

    /// The topics a consumer-protocol member subscribes to with `protocol`, or `None` when its
    /// metadata is not a consumer subscription we can read.
    pub(super) fn subscribed_topics(&self, protocol: &str) -> Option<Vec<String>> {
        let mut metadata = self.metadata(protocol);
        if metadata.len() < 2 {
            return None;
        }
        let version = i16::from_be_bytes([metadata[0], metadata[1]]);
        let _ = bytes::Buf::get_i16(&mut metadata);
        // Newer versions only append fields: read them as the newest version we know.
        let subscription =
            ConsumerProtocolSubscription::decode(&mut metadata, version.clamp(0, 3)).ok()?;
        Some(
            subscription
                .topics
                .iter()
                .map(|t| t.as_str().to_string())
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{BufMut, BytesMut};
    use kafka_protocol::protocol::{Encodable, StrBytes};

    fn member(protocols: &[&str]) -> Member {
        Member {
            member_id: "m".into(),
            group_instance_id: None,
            client_id: String::new(),
            client_host: String::new(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 10_000,
            protocol_type: "consumer".into(),
            protocols: protocols
                .iter()
                .map(|name| Protocol {
                    name: name.to_string(),
                    metadata: Bytes::from(name.to_string()),
                })
                .collect(),
            assignment: Bytes::new(),
            session_deadline_ms: 0,
            join_waiter: None,
            sync_waiter: None,
        }
    }

    #[test]
    fn votes_for_its_first_supported_candidate() {
        let m = member(&["cooperative-sticky", "range"]);
        let candidates = vec!["range".to_string(), "cooperative-sticky".to_string()];
        assert_eq!(
            m.vote(&candidates).map(String::as_str),
            Some("cooperative-sticky")
        );
        assert_eq!(m.vote(&["roundrobin".to_string()]), None);
        assert_eq!(m.metadata("range"), Bytes::from("range"));
        assert!(m.metadata("roundrobin").is_empty());
    }

    #[test]
    fn reads_consumer_subscriptions() {
        let subscription = ConsumerProtocolSubscription::default().with_topics(vec![
            StrBytes::from_static_str("orders"),
            StrBytes::from_static_str("payments"),
        ]);
        let mut buf = BytesMut::new();
        buf.put_i16(1);
        subscription.encode(&mut buf, 1).expect("encode");
        let mut m = member(&[]);
        m.protocols.push(Protocol {
            name: "range".into(),
            metadata: buf.freeze(),
        });
        assert_eq!(
            m.subscribed_topics("range"),
            Some(vec!["orders".to_string(), "payments".to_string()])
        );
        m.protocols[0].metadata = Bytes::from_static(b"\x00");
        assert_eq!(m.subscribed_topics("range"), None);
    }
}
