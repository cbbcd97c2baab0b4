//! Committed offsets and the admin calls through the wire API.

use kafka_protocol::messages::offset_delete_request::{
    OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestGroup;
use kafka_protocol::messages::{OffsetDeleteRequest, OffsetFetchRequest, TopicName};

use super::offsets::MAX_METADATA_BYTES;
use super::tests::*;
use super::*;

#[tokio::test]
async fn committed_offsets_survive_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("meta.db").display());
    let c = open_at(&url, config(0)).await;
    // A simple commit (an `assign()` consumer or an admin tool) creates the group.
    let big = "x".repeat(MAX_METADATA_BYTES + 1);
    let committed = c
        .offset_commit(
            commit_req(
                "g",
                "",
                -1,
                &[("t", 0, 42, "meta"), ("t", 1, 7, ""), ("u", 0, 1, &big)],
            ),
            8,
        )
        .await;
    assert_eq!(
        commit_codes(&committed),
        vec![NONE, NONE, err(ResponseError::OffsetMetadataTooLarge)]
    );
    let want = vec![
        ("t".to_string(), 0, 42, 7, "meta".to_string()),
        ("t".to_string(), 2, -1, -1, String::new()),
        ("u".to_string(), 0, -1, -1, String::new()),
    ];
    let asked: &[(&str, &[i32])] = &[("t", &[0, 2]), ("u", &[0])];
    let response = c.offset_fetch(fetch_req("g", Some(asked)), 7).await;
    assert_eq!(response.error_code, NONE);
    assert_eq!(fetched(&response), want);
    assert_eq!(describe(&c, "g").await.group_state.as_str(), "Empty");
    c.shutdown().await;
    drop(c);

    let c = open_at(&url, config(0)).await;
    let response = c.offset_fetch(fetch_req("g", Some(asked)), 7).await;
    assert_eq!(fetched(&response), want);
    // No topics: everything the group committed.
    let all = c.offset_fetch(fetch_req("g", None), 7).await;
    assert_eq!(
        fetched(&all),
        vec![
            ("t".to_string(), 0, 42, 7, "meta".to_string()),
            ("t".to_string(), 1, 7, 7, String::new())
        ]
    );
    // v8+: the groups form, several groups at once.
    let req = OffsetFetchRequest::default().with_groups(vec![
        OffsetFetchRequestGroup::default()
            .with_group_id(GroupId(s("g")))
            .with_topics(None),
        OffsetFetchRequestGroup::default()
            .with_group_id(GroupId(s("other")))
            .with_topics(None),
    ]);
    let response = c.offset_fetch(req, 8).await;
    assert!(response.topics.is_empty());
    assert_eq!(response.groups.len(), 2);
    assert_eq!(response.groups[0].topics[0].partitions.len(), 2);
    assert_eq!(
        response.groups[0].topics[0].partitions[0].committed_offset,
        42
    );
    assert!(response.groups[1].topics.is_empty());
    // Listed as an empty group.
    let listed = c.list_groups(ListGroupsRequest::default(), 4).await;
    assert_eq!(listed.groups.len(), 1);
    assert_eq!(listed.groups[0].group_state.as_str(), "Empty");
    // A deleted topic's offsets go, durably.
    c.delete_topic_offsets("t")
        .await
        .expect("delete topic offsets");
    drop(c);
    let c = open_at(&url, config(0)).await;
    assert!(fetched(&c.offset_fetch(fetch_req("g", None), 7).await).is_empty());
}

#[tokio::test]
async fn commits_are_checked_against_membership() {
    let c = open(config(0)).await;
    let joined = join_new(&c, "g", 10_000).await;
    let m = joined.member_id.to_string();
    // Before the leader's SyncGroup the generation is not settled yet.
    let early = c
        .offset_commit(commit_req("g", &m, 1, &[("t", 0, 1, "")]), 8)
        .await;
    assert_eq!(
        commit_codes(&early),
        vec![err(ResponseError::RebalanceInProgress)]
    );
    sync(&c, "g", &m, 1, &[]).await;
    let ok = c
        .offset_commit(commit_req("g", &m, 1, &[("t", 0, 5, "")]), 8)
        .await;
    assert_eq!(commit_codes(&ok), vec![NONE]);
    let cases = [
        (m.as_str(), 2, ResponseError::IllegalGeneration),
        ("stranger", 1, ResponseError::UnknownMemberId),
        // A simple commit while the group has members.
        ("", -1, ResponseError::UnknownMemberId),
    ];
    for (member, generation, expected) in cases {
        let response = c
            .offset_commit(commit_req("g", member, generation, &[("t", 0, 9, "")]), 8)
            .await;
        assert_eq!(
            commit_codes(&response),
            vec![err(expected)],
            "{member} {generation}"
        );
    }
    let unknown = c
        .offset_commit(commit_req("nope", "m", 3, &[("t", 0, 1, "")]), 2)
        .await;
    assert_eq!(
        commit_codes(&unknown),
        vec![err(ResponseError::IllegalGeneration)]
    );
    let response = c
        .offset_fetch(fetch_req("g", Some(&[("t", &[0])])), 7)
        .await;
    assert_eq!(
        fetched(&response)[0].2,
        5,
        "rejected commits changed nothing"
    );
}

#[tokio::test]
async fn deleting_groups() {
    let c = open(config(0)).await;
    let joined = join_new(&c, "busy", 10_000).await;
    c.offset_commit(commit_req("idle", "", -1, &[("t", 0, 3, "")]), 8)
        .await;
    let req = DeleteGroupsRequest::default().with_groups_names(vec![
        GroupId(s("busy")),
        GroupId(s("idle")),
        GroupId(s("unknown")),
    ]);
    let response = c.delete_groups(req, 2).await;
    let codes: Vec<i16> = response.results.iter().map(|r| r.error_code).collect();
    assert_eq!(
        codes,
        vec![
            err(ResponseError::NonEmptyGroup),
            NONE,
            err(ResponseError::GroupIdNotFound)
        ]
    );
    let all = c.offset_fetch(fetch_req("idle", None), 7).await;
    assert!(all.topics.is_empty());
    assert_eq!(describe(&c, "idle").await.group_state.as_str(), "Dead");

    let leave = LeaveGroupRequest::default()
        .with_group_id(GroupId(s("busy")))
        .with_member_id(s(joined.member_id.to_string()));
    assert_eq!(c.leave_group(leave, 2).await.error_code, NONE);
    let req = DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s("busy"))]);
    assert_eq!(c.delete_groups(req, 0).await.results[0].error_code, NONE);
    let listed = c.list_groups(ListGroupsRequest::default(), 0).await;
    assert!(listed.groups.is_empty());
}

#[tokio::test]
async fn offset_delete_keeps_subscribed_topics() {
    let c = open(config(0)).await;
    let joined = join_new(&c, "g", 10_000).await; // subscribes to "t"
    let m = joined.member_id.to_string();
    sync(&c, "g", &m, 1, &[]).await;
    let commit = commit_req("g", &m, 1, &[("t", 0, 1, ""), ("old", 0, 2, "")]);
    assert_eq!(
        commit_codes(&c.offset_commit(commit, 8).await),
        vec![NONE, NONE]
    );
    let topic = |name: &str| {
        OffsetDeleteRequestTopic::default()
            .with_name(TopicName(s(name)))
            .with_partitions(vec![OffsetDeleteRequestPartition::default()])
    };
    let req = OffsetDeleteRequest::default()
        .with_group_id(GroupId(s("g")))
        .with_topics(vec![topic("t"), topic("old")]);
    let response = c.offset_delete(req, 0).await;
    assert_eq!(response.error_code, NONE);
    let codes: Vec<i16> = response
        .topics
        .iter()
        .map(|t| t.partitions[0].error_code)
        .collect();
    assert_eq!(
        codes,
        vec![err(ResponseError::GroupSubscribedToTopic), NONE]
    );
    let left = fetched(&c.offset_fetch(fetch_req("g", None), 7).await);
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].0, "t");
    let unknown = OffsetDeleteRequest::default().with_group_id(GroupId(s("nope")));
    assert_eq!(
        c.offset_delete(unknown, 0).await.error_code,
        err(ResponseError::GroupIdNotFound)
    );
}

#[tokio::test]
async fn list_groups_filters_by_state() {
    let c = open(config(0)).await;
    let joined = join_new(&c, "stable", 10_000).await;
    sync(&c, "stable", &joined.member_id, 1, &[]).await;
    c.offset_commit(commit_req("empty", "", -1, &[("t", 0, 3, "")]), 8)
        .await;
    let all = c.list_groups(ListGroupsRequest::default(), 4).await;
    let states: Vec<(String, String)> = all
        .groups
        .iter()
        .map(|g| (g.group_id.to_string(), g.group_state.to_string()))
        .collect();
    assert_eq!(
        states,
        vec![
            ("empty".to_string(), "Empty".to_string()),
            ("stable".to_string(), "Stable".to_string())
        ]
    );
    let req = ListGroupsRequest::default().with_states_filter(vec![s("stable")]);
    let filtered = c.list_groups(req, 4).await;
    assert_eq!(filtered.groups.len(), 1);
    assert_eq!(filtered.groups[0].protocol_type.as_str(), "consumer");
}

/// `offsets.retention.minutes` (KIP-211): an empty group loses its offsets once it has been
/// empty, and they uncommitted, for the retention; a consumer group with members loses only
/// those of topics no member subscribes to; a group another node coordinates is left alone;
/// and an offset is never lost sooner than the retention after this node first saw it.
#[tokio::test]
async fn committed_offsets_expire_as_kafka_expires_them() {
    const RETENTION: u64 = 3_600_000;
    let clock = inlet_common::ManualClock::new(1_000_000);
    let meta = MetaStore::connect("sqlite::memory:")
        .await
        .expect("metadata store");
    // Sessions outlive the test's jumps of the clock: members stay until they leave.
    let config = GroupConfig {
        max_session_timeout_ms: 4 * RETENTION,
        ..config(0)
    };
    let c = GroupCoordinator::open(meta, config, Arc::new(clock.clone()))
        .await
        .expect("open");
    // `simple`: commits from outside the group (no members). `live`: a member subscribed to
    // `t` commits `t` and `u`. `other`: coordinated elsewhere.
    for group in ["simple", "other"] {
        let committed = c
            .offset_commit(commit_req(group, "", -1, &[("t", 0, 5, "")]), 8)
            .await;
        assert_eq!(commit_codes(&committed), vec![NONE]);
    }
    let joined = c
        .join_group(
            join_req("live", "", 3 * RETENTION as i32, subscription(&["t"])),
            3,
        )
        .await;
    let member = joined.member_id.to_string();
    sync(&c, "live", &member, joined.generation_id, &[]).await;
    let commit = commit_req(
        "live",
        &member,
        joined.generation_id,
        &[("t", 0, 7, ""), ("u", 0, 9, "")],
    );
    assert_eq!(
        commit_codes(&c.offset_commit(commit, 8).await),
        vec![NONE, NONE]
    );
    let mine = |g: &str| g != "other";
    let offset = |group: &'static str, topic: &'static str| {
        let c = &c;
        async move {
            let asked: &[(&str, &[i32])] = &[(topic, &[0])];
            fetched(&c.offset_fetch(fetch_req(group, Some(asked)), 7).await)[0].2
        }
    };

    // The first sweep sees every group; nothing is old enough.
    assert_eq!(c.expire_offsets(RETENTION, mine).await, 0);
    clock.advance(RETENTION - 1);
    assert_eq!(c.expire_offsets(RETENTION, mine).await, 0);
    clock.advance(2);
    // `simple` has been empty (and its offset uncommitted) for the retention; `live` loses
    // only `u`, which its member does not subscribe to.
    assert_eq!(c.expire_offsets(RETENTION, mine).await, 2);
    assert_eq!(offset("simple", "t").await, -1);
    assert_eq!(offset("live", "u").await, -1);
    assert_eq!(offset("live", "t").await, 7);
    assert_eq!(offset("other", "t").await, 5);

    // The member leaves: `t` counts from then, not from its old commit.
    let leave = LeaveGroupRequest::default()
        .with_group_id(GroupId(s("live")))
        .with_member_id(s(member));
    assert_eq!(c.leave_group(leave, 1).await.error_code, NONE);
    assert_eq!(describe(&c, "live").await.group_state.as_str(), "Empty");
    clock.advance(RETENTION - 1);
    assert_eq!(c.expire_offsets(RETENTION, mine).await, 0);
    assert_eq!(offset("live", "t").await, 7);
    clock.advance(2);
    assert_eq!(c.expire_offsets(RETENTION, mine).await, 1);
    assert_eq!(offset("live", "t").await, -1);
    assert_eq!(offset("other", "t").await, 5);
}
