//! The coordinator through its wire API, as a consumer client drives it.

use std::future::Future;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use inlet_common::SystemClock;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic,
};
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    ConsumerProtocolSubscription, OffsetCommitRequest, OffsetCommitResponse, OffsetDeleteRequest,
    OffsetFetchRequest, OffsetFetchResponse, TopicName,
};
use kafka_protocol::protocol::Encodable;

use super::*;

pub(super) const JOIN_V: i16 = 5;
pub(super) const NONE: i16 = 0;

pub(super) fn err(e: ResponseError) -> i16 {
    e.code()
}

pub(super) fn config(initial_rebalance_delay_ms: u64) -> GroupConfig {
    GroupConfig {
        initial_rebalance_delay_ms,
        min_session_timeout_ms: 10,
        max_session_timeout_ms: 60_000,
        node_id: 1,
    }
}

pub(super) async fn open_at(url: &str, config: GroupConfig) -> GroupCoordinator {
    let meta = MetaStore::connect(url).await.expect("metadata store");
    GroupCoordinator::open(meta, config, Arc::new(SystemClock))
        .await
        .expect("open coordinator")
}

pub(super) async fn open(config: GroupConfig) -> GroupCoordinator {
    open_at("sqlite::memory:", config).await
}

/// Consumer subscription metadata for `topics` (what Kafka consumers send).
pub(super) fn subscription(topics: &[&str]) -> Bytes {
    let subscription =
        ConsumerProtocolSubscription::default().with_topics(topics.iter().map(|t| s(*t)).collect());
    let mut buf = BytesMut::new();
    buf.put_i16(1);
    subscription
        .encode(&mut buf, 1)
        .expect("encode subscription");
    buf.freeze()
}

pub(super) fn join_req(
    group: &str,
    member_id: &str,
    session_ms: i32,
    meta: Bytes,
) -> JoinGroupRequest {
    JoinGroupRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_member_id(s(member_id))
        .with_session_timeout_ms(session_ms)
        .with_rebalance_timeout_ms(session_ms)
        .with_protocol_type(s("consumer"))
        .with_protocols(vec![JoinGroupRequestProtocol::default()
            .with_name(s("range"))
            .with_metadata(meta)])
}

/// A new member's JoinGroup handshake (v4+): get a member id, then join with it.
pub(super) async fn join_new(
    c: &GroupCoordinator,
    group: &str,
    session_ms: i32,
) -> JoinGroupResponse {
    let first = c
        .join_group(
            join_req(group, "", session_ms, subscription(&["t"])),
            JOIN_V,
        )
        .await;
    assert_eq!(first.error_code, err(ResponseError::MemberIdRequired));
    assert!(
        first.member_id.starts_with("consumer-"),
        "{:?}",
        first.member_id
    );
    rejoin(c, group, &first.member_id, session_ms, subscription(&["t"])).await
}

pub(super) async fn rejoin(
    c: &GroupCoordinator,
    group: &str,
    member_id: &str,
    session_ms: i32,
    meta: Bytes,
) -> JoinGroupResponse {
    c.join_group(join_req(group, member_id, session_ms, meta), JOIN_V)
        .await
}

pub(super) async fn sync(
    c: &GroupCoordinator,
    group: &str,
    member_id: &str,
    generation_id: i32,
    assignments: &[(&str, &str)],
) -> SyncGroupResponse {
    let req = SyncGroupRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_member_id(s(member_id))
        .with_generation_id(generation_id)
        .with_assignments(
            assignments
                .iter()
                .map(|(m, a)| {
                    SyncGroupRequestAssignment::default()
                        .with_member_id(s(*m))
                        .with_assignment(Bytes::from(a.to_string()))
                })
                .collect(),
        );
    c.sync_group(req, 3).await
}

pub(super) async fn heartbeat(
    c: &GroupCoordinator,
    group: &str,
    member_id: &str,
    generation: i32,
) -> i16 {
    let req = HeartbeatRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_member_id(s(member_id))
        .with_generation_id(generation);
    c.heartbeat(req, 3).await.error_code
}

pub(super) async fn describe(c: &GroupCoordinator, group: &str) -> DescribedGroup {
    let req = DescribeGroupsRequest::default().with_groups(vec![GroupId(s(group))]);
    let mut response = c.describe_groups(req, 5).await;
    response.groups.remove(0)
}

/// Polls `condition` until it holds; fails after 10 s.
pub(super) async fn wait_until<F, Fut>(what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !condition().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Two members, both synced, in a stable group; returns (leader, follower, generation).
pub(super) async fn stable_pair(
    c: &GroupCoordinator,
    group: &str,
    session_ms: i32,
) -> (String, String, i32) {
    let a = join_new(c, group, session_ms).await;
    let a_id = a.member_id.to_string();
    assert_eq!(
        sync(c, group, &a_id, a.generation_id, &[]).await.error_code,
        NONE
    );
    let first = c
        .join_group(
            join_req(group, "", session_ms, subscription(&["t"])),
            JOIN_V,
        )
        .await;
    let b_id = first.member_id.to_string();
    let c2 = c.clone();
    let group2 = group.to_string();
    let b_id2 = b_id.clone();
    let b_join = tokio::spawn(async move {
        rejoin(&c2, &group2, &b_id2, session_ms, subscription(&["t"])).await
    });
    wait_until("a is asked to rejoin", || async {
        heartbeat(c, group, &a_id, a.generation_id).await == err(ResponseError::RebalanceInProgress)
    })
    .await;
    let a2 = rejoin(c, group, &a_id, session_ms, subscription(&["t"])).await;
    let b2 = b_join.await.expect("b joins");
    assert_eq!(a2.generation_id, b2.generation_id);
    let generation = a2.generation_id;
    let b_sync = {
        let (c2, group2, b_id2) = (c.clone(), group.to_string(), b_id.clone());
        tokio::spawn(async move { sync(&c2, &group2, &b_id2, generation, &[]).await })
    };
    let assignments = [(a_id.as_str(), "for-a"), (b_id.as_str(), "for-b")];
    let a_sync = sync(c, group, &a_id, generation, &assignments).await;
    assert_eq!(a_sync.assignment, Bytes::from("for-a"));
    let b_sync = b_sync.await.expect("b syncs");
    assert_eq!(b_sync.error_code, NONE);
    assert_eq!(b_sync.assignment, Bytes::from("for-b"));
    (a_id, b_id, generation)
}

pub(super) fn commit_req(
    group: &str,
    member: &str,
    generation: i32,
    offsets: &[(&str, i32, i64, &str)],
) -> OffsetCommitRequest {
    let mut topics: Vec<OffsetCommitRequestTopic> = Vec::new();
    for (topic, partition, offset, metadata) in offsets {
        let p = OffsetCommitRequestPartition::default()
            .with_partition_index(*partition)
            .with_committed_offset(*offset)
            .with_committed_leader_epoch(7)
            .with_committed_metadata(Some(s(metadata.to_string())));
        match topics.iter_mut().find(|t| t.name.as_str() == *topic) {
            Some(t) => t.partitions.push(p),
            None => topics.push(
                OffsetCommitRequestTopic::default()
                    .with_name(TopicName(s(*topic)))
                    .with_partitions(vec![p]),
            ),
        }
    }
    OffsetCommitRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_member_id(s(member))
        .with_generation_id_or_member_epoch(generation)
        .with_topics(topics)
}

pub(super) fn commit_codes(response: &OffsetCommitResponse) -> Vec<i16> {
    response
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
        .collect()
}

/// (topic, partition, offset, leader epoch, metadata) from a v1–7 fetch.
pub(super) fn fetched(response: &OffsetFetchResponse) -> Vec<(String, i32, i64, i32, String)> {
    response
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| {
                (
                    t.name.to_string(),
                    p.partition_index,
                    p.committed_offset,
                    p.committed_leader_epoch,
                    p.metadata.as_deref().unwrap_or_default().to_string(),
                )
            })
        })
        .collect()
}

pub(super) fn fetch_req(group: &str, topics: Option<&[(&str, &[i32])]>) -> OffsetFetchRequest {
    OffsetFetchRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_topics(topics.map(|topics| {
            topics
                .iter()
                .map(|(name, partitions)| {
                    OffsetFetchRequestTopic::default()
                        .with_name(TopicName(s(*name)))
                        .with_partition_indexes(partitions.to_vec())
                })
                .collect()
        }))
}

#[tokio::test]
async fn single_member_joins_syncs_and_heartbeats() {
    let c = open(config(0)).await;
    let joined = join_new(&c, "g", 10_000).await;
    assert_eq!(joined.error_code, NONE);
    assert_eq!(joined.generation_id, 1);
    assert_eq!(joined.leader, joined.member_id);
    assert_eq!(joined.protocol_name.as_deref(), Some("range"));
    assert_eq!(joined.members.len(), 1);
    assert_eq!(joined.members[0].metadata, subscription(&["t"]));
    assert_eq!(
        describe(&c, "g").await.group_state.as_str(),
        "CompletingRebalance"
    );

    let member = joined.member_id.to_string();
    let synced = sync(&c, "g", &member, 1, &[(&member, "mine")]).await;
    assert_eq!(synced.error_code, NONE);
    assert_eq!(synced.assignment, Bytes::from("mine"));
    assert_eq!(heartbeat(&c, "g", &member, 1).await, NONE);

    let described = describe(&c, "g").await;
    assert_eq!(described.group_state.as_str(), "Stable");
    assert_eq!(described.protocol_type.as_str(), "consumer");
    assert_eq!(described.protocol_data.as_str(), "range");
    assert_eq!(described.members.len(), 1);
    assert_eq!(described.members[0].member_assignment, Bytes::from("mine"));
    // A follower-less leader syncing again in Stable gets the same assignment.
    let again = sync(&c, "g", &member, 1, &[]).await;
    assert_eq!(again.assignment, Bytes::from("mine"));
}

#[tokio::test]
async fn members_joining_together_land_in_one_generation() {
    let c = open(config(300)).await;
    let (r1, r2, r3) = tokio::join!(
        join_new(&c, "g", 10_000),
        join_new(&c, "g", 10_000),
        join_new(&c, "g", 10_000)
    );
    let all = [r1, r2, r3];
    assert!(all
        .iter()
        .all(|r| r.error_code == NONE && r.generation_id == 1));
    assert!(all.iter().all(|r| r.leader == all[0].leader));
    let leaders: Vec<_> = all.iter().filter(|r| !r.members.is_empty()).collect();
    assert_eq!(leaders.len(), 1, "exactly one member gets the member list");
    assert_eq!(leaders[0].member_id, leaders[0].leader);
    assert_eq!(leaders[0].members.len(), 3);
}

#[tokio::test]
async fn a_new_member_makes_the_group_rebalance() {
    let c = open(config(0)).await;
    let (a, b, generation) = stable_pair(&c, "g", 10_000).await;
    assert_eq!(generation, 2);
    assert_eq!(describe(&c, "g").await.members.len(), 2);
    assert_eq!(heartbeat(&c, "g", &a, generation).await, NONE);
    assert_eq!(heartbeat(&c, "g", &b, generation).await, NONE);
}

#[tokio::test]
async fn a_follower_rejoining_right_after_sync_with_new_metadata_starts_a_generation() {
    // Cooperative rebalancing: a member rejoins at once with its revoked partitions.
    let c = open(config(0)).await;
    let (a, b, generation) = stable_pair(&c, "g", 10_000).await;
    let b_join = {
        let (c2, b2) = (c.clone(), b.clone());
        tokio::spawn(async move { rejoin(&c2, "g", &b2, 10_000, subscription(&["t", "u"])).await })
    };
    wait_until("a is asked to rejoin", || async {
        heartbeat(&c, "g", &a, generation).await == err(ResponseError::RebalanceInProgress)
    })
    .await;
    let a2 = rejoin(&c, "g", &a, 10_000, subscription(&["t"])).await;
    let b2 = b_join.await.expect("b rejoins");
    assert_eq!(a2.generation_id, generation + 1);
    assert_eq!(b2.generation_id, generation + 1);
    assert_eq!(a2.leader.as_str(), a);
    assert!(a2
        .members
        .iter()
        .any(|m| m.metadata == subscription(&["t", "u"])));
    // The old generation is over.
    let stale = sync(&c, "g", &b, generation, &[]).await;
    assert_eq!(stale.error_code, err(ResponseError::IllegalGeneration));
    // A follower rejoining unchanged in a stable group keeps the generation.
    let (c2, b2) = (c.clone(), b.clone());
    let b_sync = tokio::spawn(async move { sync(&c2, "g", &b2, generation + 1, &[]).await });
    sync(&c, "g", &a, generation + 1, &[(&a, "x"), (&b, "y")]).await;
    assert_eq!(b_sync.await.expect("b syncs").assignment, Bytes::from("y"));
    let b3 = rejoin(&c, "g", &b, 10_000, subscription(&["t", "u"])).await;
    assert_eq!(b3.generation_id, generation + 1);
    assert_eq!(heartbeat(&c, "g", &a, generation + 1).await, NONE);
}

#[tokio::test]
async fn a_silent_member_expires_and_the_group_rebalances() {
    let c = open(config(0)).await;
    let (a, b, generation) = stable_pair(&c, "g", 300).await;
    // a keeps heartbeating; b goes silent.
    wait_until("b's session expires", || async {
        heartbeat(&c, "g", &a, generation).await == err(ResponseError::RebalanceInProgress)
    })
    .await;
    let a2 = rejoin(&c, "g", &a, 300, subscription(&["t"])).await;
    assert_eq!(a2.generation_id, generation + 1);
    assert_eq!(a2.members.len(), 1);
    assert_eq!(
        heartbeat(&c, "g", &b, generation).await,
        err(ResponseError::UnknownMemberId)
    );
    // And alone, a goes silent too: the group ends up empty.
    sync(&c, "g", &a, a2.generation_id, &[]).await;
    wait_until("the group empties", || async {
        describe(&c, "g").await.group_state.as_str() == "Empty"
    })
    .await;
}

#[tokio::test]
async fn leaving_triggers_a_rebalance() {
    let c = open(config(0)).await;
    let (a, b, generation) = stable_pair(&c, "g", 10_000).await;
    let leave = LeaveGroupRequest::default()
        .with_group_id(GroupId(s("g")))
        .with_members(vec![
            MemberIdentity::default().with_member_id(s(b.clone())),
            MemberIdentity::default().with_member_id(s("nobody")),
        ]);
    let left = c.leave_group(leave, 3).await;
    assert_eq!(left.error_code, NONE);
    let codes: Vec<i16> = left.members.iter().map(|m| m.error_code).collect();
    assert_eq!(codes, vec![NONE, err(ResponseError::UnknownMemberId)]);
    assert_eq!(
        heartbeat(&c, "g", &a, generation).await,
        err(ResponseError::RebalanceInProgress)
    );
    let a2 = rejoin(&c, "g", &a, 10_000, subscription(&["t"])).await;
    assert_eq!(a2.generation_id, generation + 1);
    assert_eq!(a2.members.len(), 1);
    // v0: one member, the error at the top.
    let old = LeaveGroupRequest::default()
        .with_group_id(GroupId(s("g")))
        .with_member_id(s(b));
    assert_eq!(
        c.leave_group(old, 0).await.error_code,
        err(ResponseError::UnknownMemberId)
    );
    let old = LeaveGroupRequest::default()
        .with_group_id(GroupId(s("g")))
        .with_member_id(s(a));
    assert_eq!(c.leave_group(old, 1).await.error_code, NONE);
    assert_eq!(describe(&c, "g").await.group_state.as_str(), "Empty");
}

#[tokio::test]
async fn membership_errors() {
    let c = open(GroupConfig {
        initial_rebalance_delay_ms: 0,
        min_session_timeout_ms: 1000,
        max_session_timeout_ms: 5000,
        node_id: 1,
    })
    .await;
    let code_of = |r: JoinGroupResponse| r.error_code;
    for timeout in [999, 5001, -1] {
        let r = c
            .join_group(join_req("g", "", timeout, Bytes::new()), JOIN_V)
            .await;
        assert_eq!(code_of(r), err(ResponseError::InvalidSessionTimeout));
    }
    let r = c
        .join_group(join_req("", "", 2000, Bytes::new()), JOIN_V)
        .await;
    assert_eq!(code_of(r), err(ResponseError::InvalidGroupId));
    let r = c
        .join_group(join_req("g", "ghost", 2000, Bytes::new()), JOIN_V)
        .await;
    assert_eq!(code_of(r), err(ResponseError::UnknownMemberId));

    // v3 and older join without the member id round trip.
    let joined = c.join_group(join_req("g", "", 2000, Bytes::new()), 3).await;
    assert_eq!(joined.error_code, NONE);
    assert_eq!(joined.generation_id, 1);
    let m = joined.member_id.to_string();
    let other_type = join_req("g", "", 2000, Bytes::new()).with_protocol_type(s("connect"));
    let r = c.join_group(other_type, JOIN_V).await;
    assert_eq!(code_of(r), err(ResponseError::InconsistentGroupProtocol));

    let r = sync(&c, "g", &m, 2, &[]).await;
    assert_eq!(r.error_code, err(ResponseError::IllegalGeneration));
    let r = sync(&c, "g", "ghost", 1, &[]).await;
    assert_eq!(r.error_code, err(ResponseError::UnknownMemberId));
    let r = sync(&c, "nope", &m, 1, &[]).await;
    assert_eq!(r.error_code, err(ResponseError::UnknownMemberId));
    let v5 = SyncGroupRequest::default()
        .with_group_id(GroupId(s("g")))
        .with_member_id(s(m.clone()))
        .with_generation_id(1)
        .with_protocol_type(Some(s("consumer")))
        .with_protocol_name(Some(s("roundrobin")));
    let r = c.sync_group(v5, 5).await;
    assert_eq!(r.error_code, err(ResponseError::InconsistentGroupProtocol));
    assert_eq!(
        heartbeat(&c, "g", &m, 0).await,
        err(ResponseError::IllegalGeneration)
    );
    assert_eq!(
        heartbeat(&c, "g", "ghost", 1).await,
        err(ResponseError::UnknownMemberId)
    );
    assert_eq!(
        heartbeat(&c, "nope", &m, 1).await,
        err(ResponseError::UnknownMemberId)
    );
    let v5 = SyncGroupRequest::default()
        .with_group_id(GroupId(s("g")))
        .with_member_id(s(m.clone()))
        .with_generation_id(1)
        .with_protocol_type(Some(s("consumer")))
        .with_protocol_name(Some(s("range")));
    let r = c.sync_group(v5, 5).await;
    assert_eq!(r.error_code, NONE);
    assert_eq!(r.protocol_name.as_deref(), Some("range"));
}

#[tokio::test]
async fn a_static_member_rejoins_without_a_rebalance() {
    let c = open(config(0)).await;
    let static_join = |member_id: &str| {
        join_req("g", member_id, 10_000, subscription(&["t"]))
            .with_group_instance_id(Some(s("instance-1")))
    };
    // Static members get their id at once, even on v5.
    let first = c.join_group(static_join(""), JOIN_V).await;
    assert_eq!(first.error_code, NONE);
    assert!(first.member_id.starts_with("instance-1-"));
    let old_id = first.member_id.to_string();
    sync(&c, "g", &old_id, 1, &[(&old_id, "parts")]).await;

    // The process restarts: same instance, new member id, same generation and assignment.
    let again = c.join_group(static_join(""), 9).await;
    assert_eq!(again.error_code, NONE);
    assert_eq!(again.generation_id, 1);
    assert_ne!(again.member_id.as_str(), old_id);
    assert!(
        again.skip_assignment,
        "the leader keeps the current assignment"
    );
    let new_id = again.member_id.to_string();
    let synced = sync(&c, "g", &new_id, 1, &[]).await;
    assert_eq!(synced.assignment, Bytes::from("parts"));
    // The old incarnation is fenced.
    let stale = HeartbeatRequest::default()
        .with_group_id(GroupId(s("g")))
        .with_member_id(s(old_id.clone()))
        .with_generation_id(1)
        .with_group_instance_id(Some(s("instance-1")));
    assert_eq!(
        c.heartbeat(stale, 3).await.error_code,
        err(ResponseError::FencedInstanceId)
    );
    let stale_join = c.join_group(static_join(&old_id), JOIN_V).await;
    assert_eq!(stale_join.error_code, err(ResponseError::FencedInstanceId));
    // Leaving by instance id alone.
    let leave = LeaveGroupRequest::default()
        .with_group_id(GroupId(s("g")))
        .with_members(vec![
            MemberIdentity::default().with_group_instance_id(Some(s("instance-1")))
        ]);
    let left = c.leave_group(leave, 4).await;
    assert_eq!(left.members[0].error_code, NONE);
    assert_eq!(describe(&c, "g").await.group_state.as_str(), "Empty");
}

#[tokio::test]
async fn idle_groups_without_offsets_are_forgotten() {
    let clock = inlet_common::ManualClock::new(1_000_000);
    let meta = MetaStore::connect("sqlite::memory:")
        .await
        .expect("metadata store");
    let c = GroupCoordinator::open(meta, config(0), Arc::new(clock.clone()))
        .await
        .expect("open");
    for group in ["gone", "kept"] {
        let joined = c
            .join_group(join_req(group, "", 10_000, subscription(&["t"])), 3)
            .await;
        let m = joined.member_id.to_string();
        if group == "kept" {
            let commit = commit_req(group, &m, joined.generation_id, &[("t", 0, 1, "")]);
            sync(&c, group, &m, joined.generation_id, &[]).await;
            assert_eq!(commit_codes(&c.offset_commit(commit, 8).await), vec![NONE]);
        }
        let leave = LeaveGroupRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_member_id(s(m));
        assert_eq!(c.leave_group(leave, 1).await.error_code, NONE);
    }
    assert_eq!(describe(&c, "gone").await.group_state.as_str(), "Empty");
    clock.advance(2 * IDLE_GROUP_CLEANUP_MS);
    wait_until("the idle group is forgotten", || async {
        describe(&c, "gone").await.group_state.as_str() == "Dead"
    })
    .await;
    assert_eq!(describe(&c, "kept").await.group_state.as_str(), "Empty");
}

#[tokio::test]
async fn shutdown_answers_parked_calls() {
    let c = open(config(0)).await;
    let joined = join_new(&c, "g", 10_000).await;
    let m = joined.member_id.to_string();
    sync(&c, "g", &m, 1, &[]).await;
    // A second member waits for the first to rejoin.
    let first = c
        .join_group(join_req("g", "", 10_000, subscription(&["t"])), JOIN_V)
        .await;
    let parked = {
        let (c2, id) = (c.clone(), first.member_id.to_string());
        tokio::spawn(async move { rejoin(&c2, "g", &id, 10_000, subscription(&["t"])).await })
    };
    wait_until("the rebalance starts", || async {
        heartbeat(&c, "g", &m, 1).await == err(ResponseError::RebalanceInProgress)
    })
    .await;
    c.shutdown().await;
    let answer = parked.await.expect("parked join answers");
    assert_eq!(
        answer.error_code,
        err(ResponseError::CoordinatorNotAvailable)
    );
    assert_eq!(
        heartbeat(&c, "g", &m, 1).await,
        err(ResponseError::CoordinatorNotAvailable)
    );
    let r = c
        .join_group(join_req("g", "", 10_000, Bytes::new()), JOIN_V)
        .await;
    assert_eq!(r.error_code, err(ResponseError::CoordinatorNotAvailable));
}

fn encodes<T: Encodable>(what: &str, message: &T, version: i16) {
    let mut buf = BytesMut::new();
    if let Err(e) = message.encode(&mut buf, version) {
        panic!("{what} v{version} does not encode: {e}");
    }
}

#[tokio::test]
async fn responses_encode_at_every_advertised_version() {
    let c = open(config(0)).await;
    for version in 0..=9i16 {
        let group = format!("g{version}");
        let req = join_req(&group, "", 10_000, subscription(&["t"]))
            .with_group_instance_id((version >= 5).then(|| s(format!("i{version}"))));
        let mut joined = c.join_group(req, version).await;
        encodes("JoinGroup", &joined, version);
        if joined.error_code == err(ResponseError::MemberIdRequired) {
            let req = join_req(&group, &joined.member_id, 10_000, subscription(&["t"]));
            joined = c.join_group(req, version).await;
            encodes("JoinGroup", &joined, version);
        }
        assert_eq!(joined.error_code, NONE, "join v{version}");
        let m = joined.member_id.to_string();
        let sync_version = version.min(5);
        let req = SyncGroupRequest::default()
            .with_group_id(GroupId(s(group.clone())))
            .with_member_id(s(m.clone()))
            .with_generation_id(joined.generation_id);
        encodes(
            "SyncGroup",
            &c.sync_group(req, sync_version).await,
            sync_version,
        );
        let hb_version = version.min(4);
        let req = HeartbeatRequest::default()
            .with_group_id(GroupId(s(group.clone())))
            .with_member_id(s(m.clone()))
            .with_generation_id(joined.generation_id);
        encodes("Heartbeat", &c.heartbeat(req, hb_version).await, hb_version);
        if version >= 2 {
            let req = commit_req(&group, &m, joined.generation_id, &[("t", 0, 1, "")]);
            let response = c.offset_commit(req, version).await;
            assert_eq!(commit_codes(&response), vec![NONE]);
            encodes("OffsetCommit", &response, version);
        }
        if version >= 1 {
            let req = if version >= 8 {
                OffsetFetchRequest::default().with_groups(vec![
                    OffsetFetchRequestGroup::default().with_group_id(GroupId(s(group.clone())))
                ])
            } else {
                fetch_req(&group, Some(&[("t", &[0, 1])]))
            };
            encodes("OffsetFetch", &c.offset_fetch(req, version).await, version);
        }
        if version <= 5 {
            let req = DescribeGroupsRequest::default().with_groups(vec![GroupId(s(group.clone()))]);
            encodes(
                "DescribeGroups",
                &c.describe_groups(req, version).await,
                version,
            );
        }
        if version <= 4 {
            let req = ListGroupsRequest::default();
            encodes("ListGroups", &c.list_groups(req, version).await, version);
        }
        if version == 0 {
            let req = OffsetDeleteRequest::default().with_group_id(GroupId(s(group.clone())));
            encodes("OffsetDelete", &c.offset_delete(req, 0).await, 0);
        }
        let leave_version = version.min(5);
        let req = if leave_version >= 3 {
            LeaveGroupRequest::default()
                .with_group_id(GroupId(s(group.clone())))
                .with_members(vec![MemberIdentity::default().with_member_id(s(m.clone()))])
        } else {
            LeaveGroupRequest::default()
                .with_group_id(GroupId(s(group.clone())))
                .with_member_id(s(m.clone()))
        };
        let left = c.leave_group(req, leave_version).await;
        assert_eq!(left.error_code, NONE);
        encodes("LeaveGroup", &left, leave_version);
        if version <= 2 {
            let req = DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s(group))]);
            let response = c.delete_groups(req, version).await;
            assert_eq!(response.results[0].error_code, NONE);
            encodes("DeleteGroups", &response, version);
        }
    }
}

#[test]
fn coordinator_futures_are_send() {
    fn assert_send<T: Send>(_: &T) {}
    fn check(c: &GroupCoordinator) {
        assert_send(&c.join_group(JoinGroupRequest::default(), 5));
        assert_send(&c.sync_group(SyncGroupRequest::default(), 5));
        assert_send(&c.offset_commit(OffsetCommitRequest::default(), 8));
        assert_send(&c.delete_groups(DeleteGroupsRequest::default(), 2));
        assert_send(&c.shutdown());
    }
    let _ = check;
}
