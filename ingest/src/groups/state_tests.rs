//! The state machine alone, driven by hand with explicit times.

use super::*;

fn params(member_id: &str, new_id: &str, protocols: &[(&str, &str)]) -> JoinParams {
    JoinParams {
        member_id: member_id.into(),
        new_member_id: new_id.into(),
        group_instance_id: None,
        client_id: "c".into(),
        client_host: "h".into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 30_000,
        protocol_type: "consumer".into(),
        protocols: protocols
            .iter()
            .map(|(name, meta)| Protocol {
                name: name.to_string(),
                metadata: Bytes::from(meta.to_string()),
            })
            .collect(),
        require_known_member_id: false,
    }
}

fn later<T: std::fmt::Debug>(reply: Reply<T>) -> oneshot::Receiver<T> {
    match reply {
        Reply::Later(rx) => rx,
        Reply::Now(r) => panic!("expected to wait, got {r:?}"),
    }
}

#[test]
fn initial_delay_is_extended_while_members_arrive_then_capped() {
    let mut g = Group::new(100);
    let mut a = later(g.join(params("", "a", &[("range", "")]), 0));
    assert_eq!(g.state(), GroupState::PreparingRebalance);
    g.tick(50);
    let mut b = later(g.join(params("", "b", &[("range", "")]), 60));
    g.tick(100); // delay over, but b arrived: extended to 200
    assert!(a.try_recv().is_err());
    g.tick(200);
    let ra = a.try_recv().expect("a answered");
    let rb = b.try_recv().expect("b answered");
    assert_eq!(ra.generation_id, 1);
    assert_eq!(ra.leader, "a");
    assert_eq!(ra.members.len(), 2);
    assert!(rb.members.is_empty());
    assert_eq!(g.state(), GroupState::CompletingRebalance);
}

#[test]
fn selects_the_protocol_most_members_prefer_among_common_ones() {
    let mut g = Group::new(0);
    let mut a = later(g.join(
        params("", "a", &[("roundrobin", "a-rr"), ("range", "a-r")]),
        0,
    ));
    let r = a.try_recv().expect("joined");
    assert_eq!(r.protocol_name.as_deref(), Some("roundrobin"));
    // b supports only range: a rejoin by both must settle on range.
    let mut b = later(g.join(params("", "b", &[("range", "b-r")]), 1));
    let mut a = later(g.join(
        params("a", "", &[("roundrobin", "a-rr"), ("range", "a-r")]),
        2,
    ));
    let ra = a.try_recv().expect("a answered");
    b.try_recv().expect("b answered");
    assert_eq!(ra.protocol_name.as_deref(), Some("range"));
    let metadata: Vec<_> = ra.members.iter().map(|m| m.metadata.clone()).collect();
    assert_eq!(metadata, vec![Bytes::from("a-r"), Bytes::from("b-r")]);
    // A member that shares nothing with the group is refused.
    match g.join(params("", "c", &[("sticky", "")]), 3) {
        Reply::Now(r) => assert_eq!(r.error, Some(ResponseError::InconsistentGroupProtocol)),
        Reply::Later(_) => panic!("c must be refused"),
    }
}

#[test]
fn rebalance_timeout_drops_members_that_do_not_rejoin() {
    let mut g = Group::new(0);
    let mut long_session = params("", "a", &[("range", "")]);
    long_session.session_timeout_ms = 60_000;
    let mut a = later(g.join(long_session, 0));
    a.try_recv().expect("a joined");
    // b joins; a keeps heartbeating but never rejoins.
    let mut b = later(g.join(params("", "b", &[("range", "")]), 10));
    assert_eq!(
        g.heartbeat("a", None, 1, 20),
        Some(ResponseError::RebalanceInProgress)
    );
    g.tick(29_999);
    assert!(b.try_recv().is_err());
    g.tick(30_010);
    let rb = b.try_recv().expect("b answered");
    assert_eq!(rb.generation_id, 2);
    assert_eq!(rb.leader, "b", "the leader left, b leads");
    assert_eq!(
        g.heartbeat("a", None, 2, 30_020),
        Some(ResponseError::UnknownMemberId)
    );
}
