//! The membership state machine of one classic consumer group, as Kafka's `GroupCoordinator`
//! runs it: `Empty → PreparingRebalance → CompletingRebalance → Stable`, back to
//! `PreparingRebalance` whenever membership or a member's subscription changes.
//!
//! Invariants:
//! - the generation id grows by one each time a rebalance completes, even into `Empty`;
//! - in `CompletingRebalance` and `Stable` every member has rejoined the current generation
//!   and `protocol_name` is supported by every member;
//! - `leader` is a current member whenever the group has members;
//! - `static_members` maps each `group.instance.id` to the member id that holds it now;
//! - a rebalance completes when every member has rejoined and no member id handed out with
//!   `MEMBER_ID_REQUIRED` is still expected, or when its deadline passes (members that did not
//!   rejoin are dropped); the first rebalance of an empty group only completes at its deadline,
//!   which the initial delay sets and each new member pushes back, within the rebalance timeout.
//!
//! Pure logic, no I/O and no clock: every call gets `now_ms`, and [`Group::tick`] runs what
//! is due. The coordinator awaits the replies it parks here.

use std::collections::{HashMap, HashSet};

use bytes::Bytes;
use kafka_protocol::ResponseError;
use tokio::sync::oneshot;

use super::member::{
    JoinParams, JoinResult, Member, MemberMetadata, Protocol, Reply, SyncParams, SyncResult,
};

/// The protocol type of Kafka consumers (the only type whose metadata we read).
pub(crate) const CONSUMER_PROTOCOL_TYPE: &str = "consumer";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    /// The name Kafka uses in DescribeGroups and ListGroups.
    pub(super) fn as_str(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

/// One member as DescribeGroups shows it.
#[derive(Debug, Clone)]
pub(crate) struct MemberSummary {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub metadata: Bytes,
    pub assignment: Bytes,
}

/// A group as DescribeGroups shows it.
#[derive(Debug, Clone)]
pub(crate) struct GroupSummary {
    pub state: GroupState,
    pub protocol_type: String,
    pub protocol_name: String,
    pub members: Vec<MemberSummary>,
}

#[derive(Debug)]
struct Rebalance {
    deadline_ms: u64,
    /// Set for the first rebalance of an empty group.
    initial: Option<InitialDelay>,
}

#[derive(Debug)]
struct InitialDelay {
    delay_ms: u64,
    /// How much longer the delay may still be extended.
    remaining_ms: u64,
    new_member_added: bool,
}

#[derive(Debug)]
pub(crate) struct Group {
    state: GroupState,
    generation_id: i32,
    protocol_type: Option<String>,
    protocol_name: Option<String>,
    leader: Option<String>,
    /// In join order.
    members: Vec<Member>,
    /// Member ids handed out with `MEMBER_ID_REQUIRED`, with the time they expire.
    pending: HashMap<String, u64>,
    /// `group.instance.id` → member id.
    static_members: HashMap<String, String>,
    rebalance: Option<Rebalance>,
    initial_rebalance_delay_ms: u64,
    /// When the group last became `Empty` (0: it was created empty), for offset expiry.
    empty_since_ms: u64,
}

impl Group {
    pub(super) fn new(initial_rebalance_delay_ms: u64) -> Self {
        Group {
            state: GroupState::Empty,
            generation_id: 0,
            protocol_type: None,
            protocol_name: None,
            leader: None,
            members: Vec::new(),
            pending: HashMap::new(),
            static_members: HashMap::new(),
            rebalance: None,
            initial_rebalance_delay_ms,
            empty_since_ms: 0,
        }
    }

    /// Since when the group has been `Empty`; None while it is in any other state.
    pub(super) fn empty_since(&self) -> Option<u64> {
        (self.state == GroupState::Empty).then_some(self.empty_since_ms)
    }

    #[cfg(test)]
    pub(super) fn state(&self) -> GroupState {
        self.state
    }

    /// Whether DeleteGroups may remove the group.
    pub(super) fn is_deletable(&self) -> bool {
        self.state == GroupState::Empty && self.members.is_empty()
    }

    /// Empty and expecting nobody: without committed offsets, the group can be forgotten.
    pub(super) fn is_idle(&self) -> bool {
        self.is_deletable() && self.pending.is_empty()
    }

    fn index(&self, member_id: &str) -> Option<usize> {
        self.members.iter().position(|m| m.member_id == member_id)
    }

    fn is_leader(&self, member_id: &str) -> bool {
        self.leader.as_deref() == Some(member_id)
    }

    /// Another member holds this static instance id.
    fn is_fenced(&self, member_id: &str, group_instance_id: Option<&str>) -> bool {
        group_instance_id
            .and_then(|instance| self.static_members.get(instance))
            .is_some_and(|holder| holder != member_id)
    }

    /// Whether a member (`member_id`, empty if new) with these protocols may be in the group:
    /// same protocol type, and one protocol every other member supports.
    fn supports_protocols(
        &self,
        member_id: &str,
        protocol_type: &str,
        protocols: &[Protocol],
    ) -> bool {
        let others: Vec<&Member> = self
            .members
            .iter()
            .filter(|m| m.member_id != member_id)
            .collect();
        if others.is_empty() {
            return !protocol_type.is_empty() && !protocols.is_empty();
        }
        self.protocol_type.as_deref() == Some(protocol_type)
            && protocols
                .iter()
                .any(|p| others.iter().all(|m| m.supports(&p.name)))
    }

    // ---- JoinGroup ----

    pub(super) fn join(&mut self, params: JoinParams, now_ms: u64) -> Reply<JoinResult> {
        let reply = self.join_inner(params, now_ms);
        // The initial delay may be zero: complete now rather than on the next timer tick.
        self.tick(now_ms);
        reply
    }

    fn join_inner(&mut self, p: JoinParams, now_ms: u64) -> Reply<JoinResult> {
        let fail = |id: &str, e| Reply::Now(JoinResult::error(id, e));
        if self.state == GroupState::Dead {
            return fail(&p.member_id, ResponseError::CoordinatorNotAvailable);
        }
        if !self.supports_protocols(&p.member_id, &p.protocol_type, &p.protocols) {
            return fail(&p.member_id, ResponseError::InconsistentGroupProtocol);
        }
        if p.member_id.is_empty() {
            let new_id = p.new_member_id.clone();
            if let Some(instance) = &p.group_instance_id {
                if let Some(old_id) = self.static_members.get(instance).cloned() {
                    return self.replace_static_member(&old_id, new_id, p, now_ms);
                }
                return self.add_member_and_rebalance(new_id, p, now_ms);
            }
            if p.require_known_member_id {
                self.pending
                    .insert(new_id.clone(), now_ms.saturating_add(p.session_timeout_ms));
                return fail(&new_id, ResponseError::MemberIdRequired);
            }
            return self.add_member_and_rebalance(new_id, p, now_ms);
        }
        if self.pending.contains_key(&p.member_id) {
            return self.add_member_and_rebalance(p.member_id.clone(), p, now_ms);
        }
        if self.is_fenced(&p.member_id, p.group_instance_id.as_deref()) {
            return fail(&p.member_id, ResponseError::FencedInstanceId);
        }
        let Some(idx) = self.index(&p.member_id) else {
            return fail(&p.member_id, ResponseError::UnknownMemberId);
        };
        let unchanged = self.members[idx].protocols == p.protocols;
        match self.state {
            GroupState::PreparingRebalance => self.update_member_and_rebalance(idx, p, now_ms),
            // The member lost our reply: send the current generation again.
            GroupState::CompletingRebalance if unchanged => {
                self.members[idx].touch(now_ms);
                Reply::Now(self.current_join_result(&p.member_id, false))
            }
            // A follower rejoining unchanged keeps the generation; a leader rejoining, or a
            // member whose subscription changed (cooperative rebalancing), starts a new one.
            GroupState::Stable if unchanged && !self.is_leader(&p.member_id) => {
                self.members[idx].touch(now_ms);
                Reply::Now(self.current_join_result(&p.member_id, false))
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                self.update_member_and_rebalance(idx, p, now_ms)
            }
            GroupState::Empty | GroupState::Dead => {
                fail(&p.member_id, ResponseError::UnknownMemberId)
            }
        }
    }

    /// A known static instance rejoined with a new member id: the old id is fenced, and a
    /// stable group keeps its generation if the member's protocols did not change.
    fn replace_static_member(
        &mut self,
        old_id: &str,
        new_id: String,
        p: JoinParams,
        now_ms: u64,
    ) -> Reply<JoinResult> {
        let Some(idx) = self.index(old_id) else {
            // A stale mapping: treat the instance as new.
            if let Some(instance) = &p.group_instance_id {
                self.static_members.remove(instance);
            }
            return self.add_member_and_rebalance(new_id, p, now_ms);
        };
        let member = &mut self.members[idx];
        member.reply_join(JoinResult::error(old_id, ResponseError::FencedInstanceId));
        member.reply_sync(SyncResult::error(ResponseError::FencedInstanceId));
        member.member_id = new_id.clone();
        if let Some(instance) = &p.group_instance_id {
            self.static_members.insert(instance.clone(), new_id.clone());
        }
        if self.is_leader(old_id) {
            self.leader = Some(new_id.clone());
        }
        if self.state == GroupState::Stable && self.members[idx].protocols == p.protocols {
            let member = &mut self.members[idx];
            member.session_timeout_ms = p.session_timeout_ms;
            member.rebalance_timeout_ms = p.rebalance_timeout_ms;
            member.client_id = p.client_id;
            member.client_host = p.client_host;
            member.touch(now_ms);
            let is_leader = self.is_leader(&new_id);
            return Reply::Now(self.current_join_result(&new_id, is_leader));
        }
        self.update_member_and_rebalance(idx, p, now_ms)
    }

    fn add_member_and_rebalance(
        &mut self,
        member_id: String,
        p: JoinParams,
        now_ms: u64,
    ) -> Reply<JoinResult> {
        let (tx, rx) = oneshot::channel();
        self.pending.remove(&member_id);
        if self.members.is_empty() {
            self.protocol_type = Some(p.protocol_type.clone());
        }
        if let Some(instance) = &p.group_instance_id {
            self.static_members
                .insert(instance.clone(), member_id.clone());
        }
        if self.leader.is_none() {
            self.leader = Some(member_id.clone());
        }
        if let Some(Rebalance {
            initial: Some(delay),
            ..
        }) = &mut self.rebalance
        {
            delay.new_member_added = true;
        }
        let mut member = Member {
            member_id,
            group_instance_id: p.group_instance_id,
            client_id: p.client_id,
            client_host: p.client_host,
            session_timeout_ms: p.session_timeout_ms,
            rebalance_timeout_ms: p.rebalance_timeout_ms,
            protocol_type: p.protocol_type,
            protocols: p.protocols,
            assignment: Bytes::new(),
            session_deadline_ms: 0,
            join_waiter: Some(tx),
            sync_waiter: None,
        };
        member.touch(now_ms);
        self.members.push(member);
        self.maybe_prepare_rebalance(now_ms);
        self.try_complete_join(now_ms);
        Reply::Later(rx)
    }

    fn update_member_and_rebalance(
        &mut self,
        idx: usize,
        p: JoinParams,
        now_ms: u64,
    ) -> Reply<JoinResult> {
        let (tx, rx) = oneshot::channel();
        let member = &mut self.members[idx];
        member.protocols = p.protocols;
        member.protocol_type = p.protocol_type.clone();
        member.session_timeout_ms = p.session_timeout_ms;
        member.rebalance_timeout_ms = p.rebalance_timeout_ms;
        member.client_id = p.client_id;
        member.client_host = p.client_host;
        // A previous call of the same member is superseded; its caller gets no reply.
        member.join_waiter = Some(tx);
        member.touch(now_ms);
        if self.members.len() == 1 {
            self.protocol_type = Some(p.protocol_type);
        }
        self.maybe_prepare_rebalance(now_ms);
        self.try_complete_join(now_ms);
        Reply::Later(rx)
    }

    fn current_join_result(&self, member_id: &str, skip_assignment: bool) -> JoinResult {
        let members = if self.is_leader(member_id) {
            self.member_metadata()
        } else {
            Vec::new()
        };
        JoinResult {
            error: None,
            generation_id: self.generation_id,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            leader: self.leader.clone().unwrap_or_default(),
            member_id: member_id.to_string(),
            members,
            skip_assignment,
        }
    }

    fn member_metadata(&self) -> Vec<MemberMetadata> {
        let protocol = self.protocol_name.as_deref().unwrap_or_default();
        self.members
            .iter()
            .map(|m| MemberMetadata {
                member_id: m.member_id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                metadata: m.metadata(protocol),
            })
            .collect()
    }

    // ---- rebalancing ----

    fn maybe_prepare_rebalance(&mut self, now_ms: u64) {
        if matches!(
            self.state,
            GroupState::Empty | GroupState::Stable | GroupState::CompletingRebalance
        ) {
            self.prepare_rebalance(now_ms);
        }
    }

    fn prepare_rebalance(&mut self, now_ms: u64) {
        if self.state == GroupState::CompletingRebalance {
            // The leader's assignment will never come for this generation.
            for member in &mut self.members {
                member.assignment = Bytes::new();
                member.reply_sync(SyncResult::error(ResponseError::RebalanceInProgress));
            }
        }
        let rebalance_timeout = self
            .members
            .iter()
            .map(|m| m.rebalance_timeout_ms)
            .max()
            .unwrap_or(0);
        self.rebalance = Some(if self.state == GroupState::Empty {
            let delay = self.initial_rebalance_delay_ms;
            Rebalance {
                deadline_ms: now_ms.saturating_add(delay),
                initial: Some(InitialDelay {
                    delay_ms: delay,
                    remaining_ms: rebalance_timeout.saturating_sub(delay),
                    new_member_added: false,
                }),
            }
        } else {
            Rebalance {
                deadline_ms: now_ms.saturating_add(rebalance_timeout),
                initial: None,
            }
        });
        self.state = GroupState::PreparingRebalance;
    }

    /// Completes the rebalance early when nobody is left to wait for.
    fn try_complete_join(&mut self, now_ms: u64) {
        if self.state != GroupState::PreparingRebalance {
            return;
        }
        if let Some(Rebalance {
            initial: Some(_), ..
        }) = self.rebalance
        {
            return;
        }
        if self.members.iter().all(Member::awaiting_join) && self.pending.is_empty() {
            self.complete_join(now_ms);
        }
    }

    fn complete_join(&mut self, now_ms: u64) {
        self.rebalance = None;
        let gone: Vec<String> = self
            .members
            .iter()
            .filter(|m| !m.awaiting_join())
            .map(|m| m.member_id.clone())
            .collect();
        for member_id in gone {
            tracing::debug!(member_id, "member did not rejoin in time; removed");
            self.remove_member_quietly(&member_id);
        }
        self.generation_id = self.generation_id.checked_add(1).unwrap_or(1);
        if self.members.is_empty() {
            self.state = GroupState::Empty;
            self.empty_since_ms = now_ms;
            self.protocol_name = None;
            self.leader = None;
            return;
        }
        self.protocol_name = self.select_protocol();
        self.state = GroupState::CompletingRebalance;
        if self.leader.as_deref().and_then(|l| self.index(l)).is_none() {
            self.leader = self.members.first().map(|m| m.member_id.clone());
        }
        let ids: Vec<String> = self.members.iter().map(|m| m.member_id.clone()).collect();
        for (idx, member_id) in ids.iter().enumerate() {
            let result = self.current_join_result(member_id, false);
            let member = &mut self.members[idx];
            member.touch(now_ms);
            member.reply_join(result);
        }
    }

    /// The protocol every member supports that most members prefer; ties go to the order of
    /// the first member's preferences.
    fn select_protocol(&self) -> Option<String> {
        let first = self.members.first()?;
        let candidates: Vec<String> = first
            .protocols
            .iter()
            .map(|p| p.name.clone())
            .filter(|name| self.members.iter().all(|m| m.supports(name)))
            .collect();
        let mut votes = vec![0usize; candidates.len()];
        for member in &self.members {
            if let Some(choice) = member.vote(&candidates) {
                if let Some(i) = candidates.iter().position(|c| c == choice) {
                    votes[i] += 1;
                }
            }
        }
        let mut best: Option<usize> = None;
        for (i, count) in votes.iter().enumerate() {
            if best.is_none_or(|b| *count > votes[b]) {
                best = Some(i);
            }
        }
        best.map(|i| candidates[i].clone())
    }

    /// Removes a member and answers its parked calls, without changing the group state.
    fn remove_member_quietly(&mut self, member_id: &str) {
        let Some(idx) = self.index(member_id) else {
            return;
        };
        let mut member = self.members.remove(idx);
        member.reply_join(JoinResult::error(member_id, ResponseError::UnknownMemberId));
        member.reply_sync(SyncResult::error(ResponseError::UnknownMemberId));
        if let Some(instance) = &member.group_instance_id {
            if self.static_members.get(instance).map(String::as_str) == Some(member_id) {
                self.static_members.remove(instance);
            }
        }
        if self.is_leader(member_id) {
            self.leader = self.members.first().map(|m| m.member_id.clone());
        }
    }

    /// Removes a member; the others rebalance without it.
    fn remove_member(&mut self, member_id: &str, now_ms: u64) {
        self.remove_member_quietly(member_id);
        match self.state {
            GroupState::Stable | GroupState::CompletingRebalance => {
                self.prepare_rebalance(now_ms);
                self.try_complete_join(now_ms);
            }
            GroupState::PreparingRebalance => self.try_complete_join(now_ms),
            GroupState::Empty | GroupState::Dead => {}
        }
    }

    /// Runs what is due at `now_ms`: expired sessions and pending member ids, and the
    /// rebalance deadline.
    pub(super) fn tick(&mut self, now_ms: u64) {
        let pending_before = self.pending.len();
        self.pending.retain(|_, deadline| *deadline > now_ms);
        if self.pending.len() < pending_before {
            self.try_complete_join(now_ms);
        }
        let expired: Vec<String> = self
            .members
            .iter()
            .filter(|m| !m.keep_alive() && m.session_deadline_ms <= now_ms)
            .map(|m| m.member_id.clone())
            .collect();
        for member_id in expired {
            tracing::info!(member_id, "session expired; member removed from group");
            self.remove_member(&member_id, now_ms);
        }
        let due = self
            .rebalance
            .as_ref()
            .is_some_and(|r| r.deadline_ms <= now_ms);
        if !due || self.state != GroupState::PreparingRebalance {
            return;
        }
        if let Some(Rebalance {
            deadline_ms,
            initial: Some(delay),
        }) = &mut self.rebalance
        {
            if delay.new_member_added && delay.remaining_ms > 0 && delay.delay_ms > 0 {
                // Members are still arriving: wait a little longer for the rest of them.
                let extra = delay.delay_ms.min(delay.remaining_ms);
                delay.remaining_ms -= extra;
                delay.new_member_added = false;
                *deadline_ms = now_ms.saturating_add(extra);
                return;
            }
        }
        self.complete_join(now_ms);
    }

    /// The earliest time [`Group::tick`] has something to do.
    pub(super) fn next_deadline(&self) -> Option<u64> {
        let sessions = self
            .members
            .iter()
            .filter(|m| !m.keep_alive())
            .map(|m| m.session_deadline_ms);
        let pending = self.pending.values().copied();
        let rebalance = self.rebalance.as_ref().map(|r| r.deadline_ms);
        sessions.chain(pending).chain(rebalance).min()
    }

    // ---- SyncGroup, Heartbeat, LeaveGroup, OffsetCommit ----

    pub(super) fn sync(&mut self, p: SyncParams, now_ms: u64) -> Reply<SyncResult> {
        let fail = |e| Reply::Now(SyncResult::error(e));
        if self.state == GroupState::Dead {
            return fail(ResponseError::CoordinatorNotAvailable);
        }
        if self.is_fenced(&p.member_id, p.group_instance_id.as_deref()) {
            return fail(ResponseError::FencedInstanceId);
        }
        let Some(idx) = self.index(&p.member_id) else {
            return fail(ResponseError::UnknownMemberId);
        };
        if p.generation_id != self.generation_id {
            return fail(ResponseError::IllegalGeneration);
        }
        let type_differs = p
            .protocol_type
            .as_ref()
            .is_some_and(|t| self.protocol_type.as_ref() != Some(t));
        let name_differs = p
            .protocol_name
            .as_ref()
            .is_some_and(|n| self.protocol_name.as_ref() != Some(n));
        if type_differs || name_differs {
            return fail(ResponseError::InconsistentGroupProtocol);
        }
        match self.state {
            GroupState::Empty | GroupState::Dead => fail(ResponseError::UnknownMemberId),
            GroupState::PreparingRebalance => fail(ResponseError::RebalanceInProgress),
            GroupState::Stable => {
                let member = &mut self.members[idx];
                member.touch(now_ms);
                Reply::Now(self.sync_ok(self.members[idx].assignment.clone()))
            }
            GroupState::CompletingRebalance => {
                let (tx, rx) = oneshot::channel();
                let member = &mut self.members[idx];
                member.sync_waiter = Some(tx);
                member.touch(now_ms);
                if self.is_leader(&p.member_id) {
                    let mut assignments: HashMap<String, Bytes> =
                        p.assignments.into_iter().collect();
                    for member in &mut self.members {
                        member.assignment =
                            assignments.remove(&member.member_id).unwrap_or_default();
                    }
                    self.state = GroupState::Stable;
                    for idx in 0..self.members.len() {
                        let result = self.sync_ok(self.members[idx].assignment.clone());
                        self.members[idx].reply_sync(result);
                    }
                }
                Reply::Later(rx)
            }
        }
    }

    fn sync_ok(&self, assignment: Bytes) -> SyncResult {
        SyncResult {
            error: None,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            assignment,
        }
    }

    pub(super) fn heartbeat(
        &mut self,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation_id: i32,
        now_ms: u64,
    ) -> Option<ResponseError> {
        if self.state == GroupState::Dead {
            return Some(ResponseError::CoordinatorNotAvailable);
        }
        if self.is_fenced(member_id, group_instance_id) {
            return Some(ResponseError::FencedInstanceId);
        }
        let idx = match self.index(member_id) {
            Some(idx) => idx,
            None => return Some(ResponseError::UnknownMemberId),
        };
        if generation_id != self.generation_id {
            return Some(ResponseError::IllegalGeneration);
        }
        match self.state {
            GroupState::Empty | GroupState::Dead => Some(ResponseError::UnknownMemberId),
            GroupState::CompletingRebalance | GroupState::Stable => {
                self.members[idx].touch(now_ms);
                None
            }
            GroupState::PreparingRebalance => {
                self.members[idx].touch(now_ms);
                Some(ResponseError::RebalanceInProgress)
            }
        }
    }

    /// LeaveGroup for each `(member_id, group_instance_id)`; a member may be named by its
    /// instance id alone. One answer per identity, in order.
    pub(super) fn leave(
        &mut self,
        identities: &[(String, Option<String>)],
        now_ms: u64,
    ) -> Vec<Option<ResponseError>> {
        identities
            .iter()
            .map(|(member_id, instance)| {
                if self.state == GroupState::Dead {
                    return Some(ResponseError::CoordinatorNotAvailable);
                }
                if !member_id.is_empty() && self.is_fenced(member_id, instance.as_deref()) {
                    return Some(ResponseError::FencedInstanceId);
                }
                let target = if member_id.is_empty() {
                    instance
                        .as_ref()
                        .and_then(|i| self.static_members.get(i))
                        .cloned()
                } else {
                    Some(member_id.clone())
                };
                let Some(target) = target else {
                    return Some(ResponseError::UnknownMemberId);
                };
                if self.pending.remove(&target).is_some() {
                    self.try_complete_join(now_ms);
                    return None;
                }
                if self.index(&target).is_none() {
                    return Some(ResponseError::UnknownMemberId);
                }
                tracing::debug!(member_id = target, "member left the group");
                self.remove_member(&target, now_ms);
                None
            })
            .collect()
    }

    /// Whether a member may commit offsets now. `generation_id < 0` is a commit from outside
    /// the group (admin tools, `assign()` consumers), allowed only while the group is empty.
    pub(super) fn check_commit(
        &mut self,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation_id: i32,
        now_ms: u64,
    ) -> Result<(), ResponseError> {
        if self.state == GroupState::Dead {
            return Err(ResponseError::CoordinatorNotAvailable);
        }
        if self.is_fenced(member_id, group_instance_id) {
            return Err(ResponseError::FencedInstanceId);
        }
        if generation_id < 0 && self.state == GroupState::Empty {
            return Ok(());
        }
        let idx = self
            .index(member_id)
            .ok_or(ResponseError::UnknownMemberId)?;
        if generation_id != self.generation_id {
            return Err(ResponseError::IllegalGeneration);
        }
        if self.state == GroupState::CompletingRebalance {
            return Err(ResponseError::RebalanceInProgress);
        }
        self.members[idx].touch(now_ms);
        Ok(())
    }

    /// For OffsetDelete: `Ok(Some(topics))` when the group is a consumer group (only offsets of
    /// topics outside `topics` may go), `Ok(None)` when every offset may go.
    pub(super) fn offset_delete_guard(&self) -> Result<Option<HashSet<String>>, ResponseError> {
        if self.state == GroupState::Dead {
            return Err(ResponseError::CoordinatorNotAvailable);
        }
        if self.protocol_type.as_deref() == Some(CONSUMER_PROTOCOL_TYPE) {
            let protocol = self.protocol_name.as_deref().unwrap_or_default();
            let topics = self
                .members
                .iter()
                .filter_map(|m| m.subscribed_topics(protocol))
                .flatten()
                .collect();
            return Ok(Some(topics));
        }
        if self.members.is_empty() {
            Ok(None)
        } else {
            Err(ResponseError::NonEmptyGroup)
        }
    }

    /// Answers every parked call: the coordinator is going away.
    pub(super) fn shutdown(&mut self) {
        for member in &mut self.members {
            member.reply_join(JoinResult::error(
                &member.member_id.clone(),
                ResponseError::CoordinatorNotAvailable,
            ));
            member.reply_sync(SyncResult::error(ResponseError::CoordinatorNotAvailable));
        }
        self.rebalance = None;
    }

    pub(super) fn summary(&self) -> GroupSummary {
        // As Kafka: member metadata and the protocol only once the group is stable.
        let stable = self.state == GroupState::Stable;
        let protocol = self.protocol_name.clone().unwrap_or_default();
        GroupSummary {
            state: self.state,
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            protocol_name: if stable {
                protocol.clone()
            } else {
                String::new()
            },
            members: self
                .members
                .iter()
                .map(|m| MemberSummary {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    metadata: if stable {
                        m.metadata(&protocol)
                    } else {
                        Bytes::new()
                    },
                    assignment: if stable {
                        m.assignment.clone()
                    } else {
                        Bytes::new()
                    },
                })
                .collect(),
        }
    }
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
