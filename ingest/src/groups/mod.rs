//! The consumer group coordinator, classic rebalance protocol: JoinGroup, SyncGroup,
//! Heartbeat, LeaveGroup, committed offsets, and the admin calls on groups.
//!
//! What lives where:
//! - `state`: one group's membership state machine (pure logic, given the time);
//! - `member`: one member, its calls in domain terms, and the replies it waits for;
//! - `offsets`: committed offsets, durable in the metadata store and cached;
//! - `offset_api`: OffsetCommit, OffsetFetch and OffsetDelete on the wire;
//! - `expiry`: committed offsets expiring (`offsets.retention.minutes`);
//! - this module: the other calls' wire types in and out, for each advertised version, and
//!   the timer task that expires sessions and ends rebalances.
//!
//! A JoinGroup call returns only when its rebalance completes (up to the rebalance timeout),
//! and SyncGroup when the leader's assignment arrives: the caller must not hold up other
//! connections' requests while it waits.
//!
//! Invariants:
//! - membership lives in memory only: after a restart every group is `Empty` with its
//!   committed offsets, and members rejoin (their old member ids answer `UNKNOWN_MEMBER_ID`);
//! - an OffsetCommit is answered only after its offsets are durable in the metadata store;
//! - the groups lock is never held across an `.await`; JoinGroup and SyncGroup park a
//!   `oneshot` in the group and await it after releasing the lock;
//! - an empty group without committed offsets is forgotten within a minute or two (it would
//!   come back `Dead`, as in Kafka);
//! - the timer task is owned by the coordinator: it stops on [`GroupCoordinator::shutdown`]
//!   and is aborted when the last clone of the coordinator is dropped;
//! - after `shutdown`, every call (and every parked JoinGroup / SyncGroup) answers
//!   `COORDINATOR_NOT_AVAILABLE`.
//!
//! One node coordinates a group at a time: FindCoordinator's answer says which, and the
//! group's owner row in the metadata store enforces it. Every group call but Heartbeat first
//! checks this node's claim on the group (`offsets::OffsetStore::claim`); when the node had
//! to take the group anew (another node coordinated it meanwhile), the membership state it
//! kept is dropped and the offsets are read afresh, and every write is conditional on the
//! claim's epoch (a fenced write answers `NOT_COORDINATOR`).

mod expiry;
mod member;
mod offset_api;
mod offsets;
mod state;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_offsets;
mod txn_offsets;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use inlet_common::Clock;
use inlet_storage::MetaStore;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{
    DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest, DescribeGroupsResponse,
    GroupId, HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse,
    LeaveGroupRequest, LeaveGroupResponse, ListGroupsRequest, ListGroupsResponse, SyncGroupRequest,
    SyncGroupResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::error::KafkaError;

/// The type ListGroups v5 and DescribeGroups report for every group: the classic protocol
/// (JoinGroup and SyncGroup), the only one Inlet speaks (KIP-848's is not built).
const CLASSIC_GROUP_TYPE: &str = "classic";
use member::{JoinParams, JoinResult, Protocol, Reply, SyncParams, SyncResult};
use offsets::OffsetStore;
use state::{Group, GroupState, GroupSummary};

/// The longest the timer sleeps without looking: bounds the effect of a clock that jumps.
const MAX_TIMER_SLEEP_MS: u64 = 1000;

/// How often empty groups without committed offsets are forgotten (Kafka does it at its
/// offsets retention check, every 10 minutes by default; it only frees memory).
const IDLE_GROUP_CLEANUP_MS: u64 = 60_000;

/// Broker settings of the group coordinator, by their Kafka names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GroupConfig {
    /// `group.initial.rebalance.delay.ms`: how long the first rebalance of an empty group waits
    /// for more members (Kafka default 3000).
    pub initial_rebalance_delay_ms: u64,
    /// `group.min.session.timeout.ms` (Kafka default 6000).
    pub min_session_timeout_ms: u64,
    /// `group.max.session.timeout.ms` (Kafka default 1800000).
    pub max_session_timeout_ms: u64,
    /// This node's id (`broker.id`): the owner its group claims name.
    pub node_id: u64,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            initial_rebalance_delay_ms: 3000,
            min_session_timeout_ms: 6000,
            max_session_timeout_ms: 1_800_000,
            node_id: 0,
        }
    }
}

/// Who sent a JoinGroup, as the connection knows it: DescribeGroups shows it, and the client
/// id prefixes new member ids, as in Kafka.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ClientInfo {
    pub client_id: String,
    pub client_host: String,
}

/// The group coordinator of this node. Cheap to clone; clones share the groups.
#[derive(Debug, Clone)]
pub(crate) struct GroupCoordinator {
    inner: Arc<Inner>,
    timer: Arc<TimerTask>,
}

#[derive(Debug)]
struct Inner {
    config: GroupConfig,
    clock: Arc<dyn Clock>,
    groups: Mutex<HashMap<String, Group>>,
    offsets: OffsetStore,
    /// Wakes the timer when a call may have set an earlier deadline.
    wake: Notify,
    /// Cancelled by `shutdown`, under the groups lock.
    cancel: CancellationToken,
    /// When the offset expiry first swept each group with offsets (`expiry`).
    offsets_seen: Mutex<HashMap<String, u64>>,
}

/// The timer task, aborted when the last coordinator clone goes.
#[derive(Debug)]
struct TimerTask(Mutex<Option<JoinHandle<()>>>);

impl Drop for TimerTask {
    fn drop(&mut self) {
        if let Some(handle) = self.0.lock().take() {
            handle.abort();
        }
    }
}

fn s(value: impl Into<String>) -> StrBytes {
    StrBytes::from_string(value.into())
}

fn code(error: Option<ResponseError>) -> i16 {
    error.map_or(0, |e| e.code())
}

impl GroupCoordinator {
    /// Opens the coordinator: creates its tables if needed, loads committed offsets, and
    /// starts the timer task. Must run inside a Tokio runtime.
    pub(crate) async fn open(
        meta: MetaStore,
        config: GroupConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, KafkaError> {
        if config.min_session_timeout_ms > config.max_session_timeout_ms {
            return Err(KafkaError::invalid_config(format!(
                "group.min.session.timeout.ms ({}) exceeds group.max.session.timeout.ms ({})",
                config.min_session_timeout_ms, config.max_session_timeout_ms
            )));
        }
        let offsets = OffsetStore::open(meta, config.node_id).await?;
        let inner = Arc::new(Inner {
            config,
            clock,
            groups: Mutex::new(HashMap::new()),
            offsets,
            wake: Notify::new(),
            cancel: CancellationToken::new(),
            offsets_seen: Mutex::new(HashMap::new()),
        });
        let handle = tokio::spawn(run_timer(inner.clone()));
        Ok(GroupCoordinator {
            inner,
            timer: Arc::new(TimerTask(Mutex::new(Some(handle)))),
        })
    }

    /// Stops the timer; parked and later JoinGroup / SyncGroup calls answer
    /// `COORDINATOR_NOT_AVAILABLE`, and so does every other call.
    pub(crate) async fn shutdown(&self) {
        {
            let mut groups = self.inner.groups.lock();
            self.inner.cancel.cancel();
            for group in groups.values_mut() {
                group.shutdown();
            }
        }
        let handle = self.timer.0.lock().take();
        if let Some(handle) = handle {
            let _ = handle.await;
        }
    }

    fn now_ms(&self) -> u64 {
        self.inner.clock.now_ms()
    }

    fn is_shut_down(&self) -> bool {
        self.inner.cancel.is_cancelled()
    }

    // ---- JoinGroup ----

    /// JoinGroup v0–9 for a client that did not say who it is. Returns when the rebalance the
    /// member joins completes (or at once on an error).
    #[cfg(test)]
    pub(crate) async fn join_group(
        &self,
        req: JoinGroupRequest,
        version: i16,
    ) -> JoinGroupResponse {
        self.join_group_from(req, version, &ClientInfo::default())
            .await
    }

    /// JoinGroup v0–9 from `client`.
    pub(crate) async fn join_group_from(
        &self,
        req: JoinGroupRequest,
        version: i16,
        client: &ClientInfo,
    ) -> JoinGroupResponse {
        let member_id = req.member_id.to_string();
        let result = match self.own(req.group_id.as_str()).await {
            Ok(()) => self.join(req, version, client).await,
            Err(e) => Err(e),
        };
        join_response(
            result.unwrap_or_else(|e| JoinResult::error(&member_id, e)),
            version,
        )
    }

    /// The groups this node holds membership state for, sorted.
    /// Every group's owner (the node that last claimed it) and epoch, from the metadata store.
    pub(crate) async fn owners(&self) -> inlet_storage::Result<Vec<(String, u64, u64)>> {
        self.inner.offsets.owners().await
    }

    pub(crate) fn group_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.inner.groups.lock().keys().cloned().collect();
        ids.sort();
        ids
    }

    /// Every group this node holds membership state or a claim for, as an operator sees it.
    pub(crate) fn views(&self) -> Vec<GroupView> {
        let ids = self.held_groups();
        let groups = self.inner.groups.lock();
        ids.into_iter()
            .map(|group| {
                let summary = self.summary(&groups, &group);
                let members = summary
                    .members
                    .into_iter()
                    .map(|m| GroupMember {
                        partitions: consumer_assignment(&m.assignment),
                        member_id: m.member_id,
                        client_id: m.client_id,
                        host: m.client_host,
                    })
                    .collect();
                let offsets = self
                    .inner
                    .offsets
                    .all(&group)
                    .into_iter()
                    .map(|((topic, partition), c)| (topic, partition, c.offset))
                    .collect();
                GroupView {
                    state: summary.state.as_str(),
                    group,
                    members,
                    offsets,
                }
            })
            .collect()
    }

    /// The groups this node holds membership state or a claim for, sorted.
    pub(crate) fn held_groups(&self) -> Vec<String> {
        let mut ids = self.group_ids();
        ids.extend(self.inner.offsets.claimed());
        ids.sort();
        ids.dedup();
        ids
    }

    /// Makes sure this node serves `group_id` under a current claim (see the module docs):
    /// when it had to take the group anew, the membership state it kept from before is
    /// dropped (its parked calls answer `COORDINATOR_NOT_AVAILABLE` and its members rejoin)
    /// and the offsets were read afresh. An empty id is left to the call's own check.
    pub(crate) async fn own(&self, group_id: &str) -> Result<(), ResponseError> {
        if group_id.is_empty() {
            return Ok(());
        }
        match self
            .inner
            .offsets
            .claim(group_id, self.inner.clock.now_ms())
            .await
        {
            Ok(offsets::Claim::Held) => Ok(()),
            Ok(offsets::Claim::Taken) => {
                self.drop_membership(group_id);
                Ok(())
            }
            Err(e) => {
                tracing::warn!(group = group_id, error = %e, "cannot check this node's claim on the group");
                Err(ResponseError::CoordinatorNotAvailable)
            }
        }
    }

    /// Drops what this node holds of a group another node coordinates now: its membership
    /// state, claim and cached offsets. The next call for it claims it anew.
    pub(crate) fn forget(&self, group_id: &str) {
        self.drop_membership(group_id);
        self.inner.offsets.forget(group_id);
    }

    fn drop_membership(&self, group_id: &str) {
        if let Some(mut group) = self.inner.groups.lock().remove(group_id) {
            group.shutdown();
        }
    }

    /// A write of `group_id` failed: fenced (another node took the group) answers
    /// `NOT_COORDINATOR`, so the client finds the group's coordinator again; anything else
    /// `COORDINATOR_NOT_AVAILABLE`.
    fn write_failed(&self, group_id: &str, what: &str, e: &offsets::WriteError) -> ResponseError {
        match e {
            offsets::WriteError::Fenced(_) => {
                tracing::warn!(group = group_id, error = %e, "{what}: fenced; this node drops the group");
                self.forget(group_id);
                ResponseError::NotCoordinator
            }
            offsets::WriteError::Store(_) => {
                tracing::warn!(group = group_id, error = %e, "{what} failed");
                ResponseError::CoordinatorNotAvailable
            }
        }
    }

    async fn join(
        &self,
        req: JoinGroupRequest,
        version: i16,
        client: &ClientInfo,
    ) -> Result<JoinResult, ResponseError> {
        let config = &self.inner.config;
        if req.group_id.is_empty() {
            return Err(ResponseError::InvalidGroupId);
        }
        let session_timeout_ms = u64::try_from(req.session_timeout_ms)
            .ok()
            .filter(|t| (config.min_session_timeout_ms..=config.max_session_timeout_ms).contains(t))
            .ok_or(ResponseError::InvalidSessionTimeout)?;
        // v0 has no rebalance timeout: Kafka uses the session timeout.
        let rebalance_timeout_ms = if version >= 1 && req.rebalance_timeout_ms > 0 {
            req.rebalance_timeout_ms as u64
        } else {
            session_timeout_ms
        };
        let group_instance_id = req.group_instance_id.as_ref().map(|i| i.to_string());
        let prefix = match (&group_instance_id, client.client_id.as_str()) {
            (Some(instance), _) => instance.as_str(),
            (None, "") => "consumer",
            (None, client_id) => client_id,
        };
        #[allow(clippy::disallowed_methods)] // a member id: unique is all it must be
        let params = JoinParams {
            member_id: req.member_id.to_string(),
            new_member_id: format!("{prefix}-{}", uuid::Uuid::new_v4()),
            group_instance_id,
            client_id: client.client_id.clone(),
            client_host: client.client_host.clone(),
            session_timeout_ms,
            rebalance_timeout_ms,
            protocol_type: req.protocol_type.to_string(),
            protocols: req
                .protocols
                .into_iter()
                .map(|p| Protocol {
                    name: p.name.to_string(),
                    metadata: p.metadata,
                })
                .collect(),
            require_known_member_id: version >= 4,
        };
        let reply = {
            let mut groups = self.inner.groups.lock();
            if self.is_shut_down() {
                return Err(ResponseError::CoordinatorNotAvailable);
            }
            let group_id = req.group_id.as_str();
            let group = if params.member_id.is_empty() {
                groups
                    .entry(group_id.to_string())
                    .or_insert_with(|| Group::new(config.initial_rebalance_delay_ms))
            } else {
                groups
                    .get_mut(group_id)
                    .ok_or(ResponseError::UnknownMemberId)?
            };
            group.join(params, self.now_ms())
        };
        self.inner.wake.notify_one();
        match reply {
            Reply::Now(result) => Ok(result),
            // A dropped sender means a newer JoinGroup of the same member replaced this one.
            Reply::Later(rx) => rx.await.map_err(|_| ResponseError::RebalanceInProgress),
        }
    }

    // ---- SyncGroup ----

    /// SyncGroup v0–5. The leader's call stores the assignment; every member's call returns
    /// its own assignment once the leader's has arrived.
    pub(crate) async fn sync_group(
        &self,
        req: SyncGroupRequest,
        version: i16,
    ) -> SyncGroupResponse {
        let result = self.sync(req).await.unwrap_or_else(SyncResult::error);
        let mut response = SyncGroupResponse::default()
            .with_error_code(code(result.error))
            .with_assignment(result.assignment);
        if version >= 5 {
            response = response
                .with_protocol_type(result.protocol_type.map(s))
                .with_protocol_name(result.protocol_name.map(s));
        }
        response
    }

    async fn sync(&self, req: SyncGroupRequest) -> Result<SyncResult, ResponseError> {
        if req.group_id.is_empty() {
            return Err(ResponseError::InvalidGroupId);
        }
        let params = SyncParams {
            member_id: req.member_id.to_string(),
            group_instance_id: req.group_instance_id.map(|i| i.to_string()),
            generation_id: req.generation_id,
            protocol_type: req.protocol_type.map(|t| t.to_string()),
            protocol_name: req.protocol_name.map(|n| n.to_string()),
            assignments: req
                .assignments
                .into_iter()
                .map(|a| (a.member_id.to_string(), a.assignment))
                .collect(),
        };
        let reply = {
            let mut groups = self.inner.groups.lock();
            if self.is_shut_down() {
                return Err(ResponseError::CoordinatorNotAvailable);
            }
            let group = groups
                .get_mut(req.group_id.as_str())
                .ok_or(ResponseError::UnknownMemberId)?;
            group.sync(params, self.now_ms())
        };
        self.inner.wake.notify_one();
        match reply {
            Reply::Now(result) => Ok(result),
            Reply::Later(rx) => rx.await.map_err(|_| ResponseError::RebalanceInProgress),
        }
    }

    // ---- Heartbeat, LeaveGroup ----

    /// Heartbeat v0–4: keeps the member's session alive; `REBALANCE_IN_PROGRESS` tells it to
    /// rejoin.
    pub(crate) async fn heartbeat(
        &self,
        req: HeartbeatRequest,
        _version: i16,
    ) -> HeartbeatResponse {
        let error = if req.group_id.is_empty() {
            Some(ResponseError::InvalidGroupId)
        } else {
            let mut groups = self.inner.groups.lock();
            if self.is_shut_down() {
                Some(ResponseError::CoordinatorNotAvailable)
            } else {
                match groups.get_mut(req.group_id.as_str()) {
                    None => Some(ResponseError::UnknownMemberId),
                    Some(group) => group.heartbeat(
                        req.member_id.as_str(),
                        req.group_instance_id.as_deref(),
                        req.generation_id,
                        self.now_ms(),
                    ),
                }
            }
        };
        HeartbeatResponse::default().with_error_code(code(error))
    }

    /// LeaveGroup v0–5 (v3+: a batch of members, by member id and/or instance id).
    pub(crate) async fn leave_group(
        &self,
        req: LeaveGroupRequest,
        version: i16,
    ) -> LeaveGroupResponse {
        let identities: Vec<(String, Option<String>)> = if version >= 3 {
            req.members
                .iter()
                .map(|m| {
                    (
                        m.member_id.to_string(),
                        m.group_instance_id.as_ref().map(|i| i.to_string()),
                    )
                })
                .collect()
        } else {
            vec![(req.member_id.to_string(), None)]
        };
        let (top, errors) = if req.group_id.is_empty() {
            (Some(ResponseError::InvalidGroupId), Vec::new())
        } else {
            let mut groups = self.inner.groups.lock();
            if self.is_shut_down() {
                (Some(ResponseError::CoordinatorNotAvailable), Vec::new())
            } else {
                match groups.get_mut(req.group_id.as_str()) {
                    None => (
                        None,
                        vec![Some(ResponseError::UnknownMemberId); identities.len()],
                    ),
                    Some(group) => (None, group.leave(&identities, self.now_ms())),
                }
            }
        };
        self.inner.wake.notify_one();
        if version < 3 {
            let error = top.or_else(|| errors.first().copied().flatten());
            return LeaveGroupResponse::default().with_error_code(code(error));
        }
        let members = if top.is_some() {
            Vec::new()
        } else {
            identities
                .into_iter()
                .zip(errors)
                .map(|((member_id, instance), error)| {
                    MemberResponse::default()
                        .with_member_id(s(member_id))
                        .with_group_instance_id(instance.map(s))
                        .with_error_code(code(error))
                })
                .collect()
        };
        LeaveGroupResponse::default()
            .with_error_code(code(top))
            .with_members(members)
    }

    // ---- admin ----

    /// A group's summary, also for groups known only by their offsets (`Empty`) and unknown
    /// groups (`Dead`, as Kafka answers before DescribeGroups v6).
    fn summary(&self, groups: &HashMap<String, Group>, group_id: &str) -> GroupSummary {
        match groups.get(group_id) {
            Some(group) => group.summary(),
            None => GroupSummary {
                state: if self.inner.offsets.has_group(group_id) {
                    GroupState::Empty
                } else {
                    GroupState::Dead
                },
                protocol_type: String::new(),
                protocol_name: String::new(),
                members: Vec::new(),
            },
        }
    }

    /// DescribeGroups v0–5.
    pub(crate) async fn describe_groups(
        &self,
        req: DescribeGroupsRequest,
        version: i16,
    ) -> DescribeGroupsResponse {
        let mut unowned = HashMap::new();
        for group_id in &req.groups {
            if let Err(e) = self.own(group_id.as_str()).await {
                unowned.insert(group_id.to_string(), e);
            }
        }
        let groups = self.inner.groups.lock();
        let shut_down = self.is_shut_down();
        let operations =
            crate::authorized::group(version >= 3 && req.include_authorized_operations);
        let described = req
            .groups
            .into_iter()
            .map(|group_id| {
                let error = if shut_down {
                    Some(ResponseError::CoordinatorNotAvailable)
                } else {
                    unowned.get(group_id.as_str()).copied()
                };
                if let Some(error) = error {
                    return DescribedGroup::default()
                        .with_group_id(group_id)
                        .with_error_code(error.code());
                }
                let summary = self.summary(&groups, &group_id);
                let members = summary
                    .members
                    .into_iter()
                    .map(|m| {
                        let member = DescribedGroupMember::default()
                            .with_member_id(s(m.member_id))
                            .with_client_id(s(m.client_id))
                            .with_client_host(s(m.client_host))
                            .with_member_metadata(m.metadata)
                            .with_member_assignment(m.assignment);
                        if version >= 4 {
                            member.with_group_instance_id(m.group_instance_id.map(s))
                        } else {
                            member
                        }
                    })
                    .collect();
                DescribedGroup::default()
                    .with_group_id(group_id)
                    .with_group_state(s(summary.state.as_str()))
                    .with_protocol_type(s(summary.protocol_type))
                    .with_protocol_data(s(summary.protocol_name))
                    .with_members(members)
                    .with_authorized_operations(operations)
            })
            .collect();
        DescribeGroupsResponse::default().with_groups(described)
    }

    /// ListGroups v0–5 (v4: a filter by state; v5: by type, of which Inlet's groups have one,
    /// Kafka's `classic`).
    pub(crate) async fn list_groups(
        &self,
        req: ListGroupsRequest,
        version: i16,
    ) -> ListGroupsResponse {
        let groups = self.inner.groups.lock();
        if self.is_shut_down() {
            return ListGroupsResponse::default()
                .with_error_code(ResponseError::CoordinatorNotAvailable.code());
        }
        let mut ids: Vec<String> = groups.keys().cloned().collect();
        ids.extend(self.inner.offsets.groups());
        ids.sort();
        ids.dedup();
        let listed = ids
            .into_iter()
            .filter_map(|group_id| {
                let summary = self.summary(&groups, &group_id);
                let state = summary.state.as_str();
                let wanted = version < 4
                    || req.states_filter.is_empty()
                    || req
                        .states_filter
                        .iter()
                        .any(|f| f.eq_ignore_ascii_case(state));
                // v5 (KIP-848): every group here is a classic one.
                let of_type = version < 5
                    || req.types_filter.is_empty()
                    || req
                        .types_filter
                        .iter()
                        .any(|t| t.eq_ignore_ascii_case(CLASSIC_GROUP_TYPE));
                if !wanted || !of_type || summary.state == GroupState::Dead {
                    return None;
                }
                let mut listed = ListedGroup::default()
                    .with_group_id(GroupId(s(group_id)))
                    .with_protocol_type(s(summary.protocol_type));
                if version >= 4 {
                    listed = listed.with_group_state(s(state));
                }
                if version >= 5 {
                    listed = listed.with_group_type(s(CLASSIC_GROUP_TYPE.to_string()));
                }
                Some(listed)
            })
            .collect();
        ListGroupsResponse::default().with_groups(listed)
    }

    /// DeleteGroups v0–2: removes empty groups and their committed offsets.
    pub(crate) async fn delete_groups(
        &self,
        req: DeleteGroupsRequest,
        _version: i16,
    ) -> DeleteGroupsResponse {
        let mut results = Vec::with_capacity(req.groups_names.len());
        for group_id in req.groups_names {
            let error = self.delete_group(group_id.as_str()).await;
            results.push(
                DeletableGroupResult::default()
                    .with_group_id(group_id)
                    .with_error_code(code(error)),
            );
        }
        DeleteGroupsResponse::default().with_results(results)
    }

    async fn delete_group(&self, group_id: &str) -> Option<ResponseError> {
        if group_id.is_empty() {
            return Some(ResponseError::InvalidGroupId);
        }
        if let Err(e) = self.own(group_id).await {
            return Some(e);
        }
        {
            let mut groups = self.inner.groups.lock();
            if self.is_shut_down() {
                return Some(ResponseError::CoordinatorNotAvailable);
            }
            match groups.get(group_id).map(Group::is_deletable) {
                Some(false) => return Some(ResponseError::NonEmptyGroup),
                Some(true) => {
                    groups.remove(group_id);
                }
                None if !self.inner.offsets.has_group(group_id) => {
                    return Some(ResponseError::GroupIdNotFound)
                }
                None => {}
            }
        }
        match self.inner.offsets.delete_group(group_id).await {
            Ok(()) => None,
            Err(e) => Some(self.write_failed(group_id, "deleting the offsets of a group", &e)),
        }
    }
}

fn join_response(result: JoinResult, version: i16) -> JoinGroupResponse {
    // A static leader rejoining unchanged: v9 says "skip the assignment"; older versions get
    // no members, so the leader's assignment is empty and SyncGroup keeps the current one.
    let skip_assignment = result.skip_assignment && version >= 9;
    let members = if result.skip_assignment && version < 9 {
        Vec::new()
    } else {
        result
            .members
            .into_iter()
            .map(|m| {
                let member = JoinGroupResponseMember::default()
                    .with_member_id(s(m.member_id))
                    .with_metadata(m.metadata);
                if version >= 5 {
                    member.with_group_instance_id(m.group_instance_id.map(s))
                } else {
                    member
                }
            })
            .collect()
    };
    let mut response = JoinGroupResponse::default()
        .with_error_code(code(result.error))
        .with_generation_id(result.generation_id)
        .with_leader(s(result.leader))
        .with_member_id(s(result.member_id))
        .with_skip_assignment(skip_assignment)
        .with_members(members);
    if version >= 7 {
        response = response
            .with_protocol_type(result.protocol_type.map(s))
            .with_protocol_name(result.protocol_name.map(s));
    } else {
        // Not nullable before v7.
        response = response.with_protocol_name(Some(s(result.protocol_name.unwrap_or_default())));
    }
    response
}

/// Expires sessions and ends rebalances on time, until the coordinator shuts down.
async fn run_timer(inner: Arc<Inner>) {
    let mut next_cleanup_ms = inner.clock.now_ms().saturating_add(IDLE_GROUP_CLEANUP_MS);
    loop {
        let now = inner.clock.now_ms();
        let next = {
            let mut groups = inner.groups.lock();
            if now >= next_cleanup_ms {
                groups.retain(|group_id, group| {
                    !group.is_idle() || inner.offsets.has_group(group_id)
                });
                next_cleanup_ms = now.saturating_add(IDLE_GROUP_CLEANUP_MS);
            }
            let mut next: Option<u64> = None;
            for group in groups.values_mut() {
                group.tick(now);
                if let Some(deadline) = group.next_deadline() {
                    next = Some(next.map_or(deadline, |n| n.min(deadline)));
                }
            }
            next
        };
        let wait_ms = next
            .map_or(MAX_TIMER_SLEEP_MS, |deadline| deadline.saturating_sub(now))
            .clamp(1, MAX_TIMER_SLEEP_MS);
        tokio::select! {
            _ = inner.cancel.cancelled() => return,
            _ = inner.wake.notified() => {}
            _ = tokio::time::sleep(Duration::from_millis(wait_ms)) => {}
        }
    }
}

/// A consumer group this node coordinates, as an operator sees it (the console's
/// `/v1/groups`): its state, its members with the partitions assigned to them, and its
/// committed offsets.
#[derive(Debug, Clone)]
pub struct GroupView {
    pub group: String,
    /// Kafka's name of the state (`Stable`, `Empty`, ...).
    pub state: &'static str,
    pub members: Vec<GroupMember>,
    /// (topic, partition, committed offset).
    pub offsets: Vec<(String, i32, i64)>,
}

/// A member of a [`GroupView`].
#[derive(Debug, Clone)]
pub struct GroupMember {
    pub member_id: String,
    pub client_id: String,
    pub host: String,
    /// Its assignment, read as the consumer protocol's; empty for a member of another
    /// protocol (Connect's workers) or before its first assignment.
    pub partitions: Vec<(String, i32)>,
}

/// The partitions of a consumer protocol assignment (a version, then the message); none when
/// the bytes are not one.
fn consumer_assignment(bytes: &bytes::Bytes) -> Vec<(String, i32)> {
    use bytes::Buf as _;
    use kafka_protocol::messages::ConsumerProtocolAssignment;
    use kafka_protocol::protocol::Decodable as _;
    let mut buf = bytes.clone();
    if buf.len() < 2 {
        return Vec::new();
    }
    let version = buf.get_i16();
    match ConsumerProtocolAssignment::decode(&mut buf, version.clamp(0, 3)) {
        Ok(a) => a
            .assigned_partitions
            .into_iter()
            .flat_map(|tp| {
                let topic = tp.topic.as_str().to_string();
                tp.partitions.into_iter().map(move |p| (topic.clone(), p))
            })
            .collect(),
        Err(_) => Vec::new(),
    }
}

#[cfg(test)]
mod assignment_tests {
    use super::consumer_assignment;
    use bytes::{BufMut, BytesMut};
    use kafka_protocol::messages::consumer_protocol_assignment::{
        ConsumerProtocolAssignment, TopicPartition,
    };
    use kafka_protocol::messages::TopicName;
    use kafka_protocol::protocol::{Encodable, StrBytes};

    #[test]
    fn a_consumer_protocol_assignment_reads_as_its_partitions() {
        let assignment = ConsumerProtocolAssignment::default().with_assigned_partitions(vec![
            TopicPartition::default()
                .with_topic(TopicName(StrBytes::from_static_str("orders")))
                .with_partitions(vec![0, 2]),
        ]);
        let mut buf = BytesMut::new();
        buf.put_i16(1);
        assignment.encode(&mut buf, 1).expect("encodes");
        assert_eq!(
            consumer_assignment(&buf.freeze()),
            [("orders".to_string(), 0), ("orders".to_string(), 2)]
        );
        assert!(consumer_assignment(&bytes::Bytes::from_static(&[0, 1, 0])).is_empty());
    }
}
