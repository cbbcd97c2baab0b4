//! Consumer group requests that need the broker's topics before the group coordinator
//! (`crate::groups`) takes them: OffsetCommit checks that the partitions exist. In a cluster,
//! requests for a group another node coordinates are answered `NOT_COORDINATOR` here, so the
//! client asks FindCoordinator again; DescribeGroups and DeleteGroups answer it per group, and
//! ListGroups lists only this node's groups (an admin client asks every node and merges).

use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::broker::Broker;

impl Broker {
    /// Expires committed offsets every `offsets.retention.check.interval.ms` until `stop`,
    /// in the groups this node coordinates (`crate::groups` has the rules); a node standing
    /// down skips its turn.
    pub async fn run_offset_expiry(self: Arc<Self>, stop: CancellationToken) {
        let every = Duration::from_millis(self.config().offsets_retention_check_interval_ms);
        let retention_ms = self
            .config()
            .offsets_retention_minutes
            .saturating_mul(60_000);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
            if self.check_standing().is_err() {
                continue;
            }
            let expired = self
                .groups
                .expire_offsets(retention_ms, |group| self.coordinates(group))
                .await;
            if expired > 0 {
                self.metrics
                    .group_offsets_expired
                    .fetch_add(expired as u64, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }

    /// `NOT_COORDINATOR` for a group request whose group this node does not coordinate;
    /// `None` for every other request.
    pub(crate) fn not_coordinator(&self, body: &RequestKind, version: i16) -> Option<ResponseKind> {
        let code = ResponseError::NotCoordinator.code();
        let refuse = |group: &GroupId| !self.coordinates(group.0.as_str());
        Some(match body {
            RequestKind::JoinGroup(r) if refuse(&r.group_id) => ResponseKind::JoinGroup(
                JoinGroupResponse::default()
                    .with_error_code(code)
                    .with_generation_id(-1),
            ),
            RequestKind::SyncGroup(r) if refuse(&r.group_id) => {
                ResponseKind::SyncGroup(SyncGroupResponse::default().with_error_code(code))
            }
            RequestKind::Heartbeat(r) if refuse(&r.group_id) => {
                ResponseKind::Heartbeat(HeartbeatResponse::default().with_error_code(code))
            }
            RequestKind::LeaveGroup(r) if refuse(&r.group_id) => {
                ResponseKind::LeaveGroup(LeaveGroupResponse::default().with_error_code(code))
            }
            RequestKind::TxnOffsetCommit(r) if refuse(&r.group_id) => {
                ResponseKind::TxnOffsetCommit(
                    TxnOffsetCommitResponse::default().with_topics(
                        r.topics
                            .iter()
                            .map(|t| {
                                TxnOffsetCommitResponseTopic::default()
                                    .with_name(t.name.clone())
                                    .with_partitions(
                                        t.partitions
                                            .iter()
                                            .map(|p| {
                                                TxnOffsetCommitResponsePartition::default()
                                                    .with_partition_index(p.partition_index)
                                                    .with_error_code(code)
                                            })
                                            .collect(),
                                    )
                            })
                            .collect(),
                    ),
                )
            }
            RequestKind::OffsetDelete(r) if refuse(&r.group_id) => {
                ResponseKind::OffsetDelete(OffsetDeleteResponse::default().with_error_code(code))
            }
            RequestKind::OffsetCommit(r) if refuse(&r.group_id) => ResponseKind::OffsetCommit(
                OffsetCommitResponse::default().with_topics(
                    r.topics
                        .iter()
                        .map(|t| {
                            OffsetCommitResponseTopic::default()
                                .with_name(t.name.clone())
                                .with_partitions(
                                    t.partitions
                                        .iter()
                                        .map(|p| {
                                            OffsetCommitResponsePartition::default()
                                                .with_partition_index(p.partition_index)
                                                .with_error_code(code)
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                ),
            ),
            RequestKind::OffsetFetch(r) if version < 8 && refuse(&r.group_id) => {
                ResponseKind::OffsetFetch(OffsetFetchResponse::default().with_error_code(code))
            }
            RequestKind::OffsetFetch(r)
                if version >= 8 && r.groups.iter().any(|g| refuse(&g.group_id)) =>
            {
                use kafka_protocol::messages::offset_fetch_response::OffsetFetchResponseGroup;
                ResponseKind::OffsetFetch(
                    OffsetFetchResponse::default().with_groups(
                        r.groups
                            .iter()
                            .map(|g| {
                                OffsetFetchResponseGroup::default()
                                    .with_group_id(g.group_id.clone())
                                    .with_error_code(if refuse(&g.group_id) { code } else { 0 })
                            })
                            .collect(),
                    ),
                )
            }
            _ => return None,
        })
    }

    /// The groups this node coordinates, and the others.
    fn split_by_coordinator(&self, groups: Vec<GroupId>) -> (Vec<GroupId>, Vec<GroupId>) {
        groups
            .into_iter()
            .partition(|g| self.coordinates(g.as_str()))
    }

    /// DescribeGroups: the groups this node coordinates are described, the others answered
    /// `NOT_COORDINATOR`.
    pub(crate) async fn describe_groups(
        &self,
        mut r: DescribeGroupsRequest,
        version: i16,
    ) -> DescribeGroupsResponse {
        let (mine, others) = self.split_by_coordinator(std::mem::take(&mut r.groups));
        r.groups = mine;
        let mut response = self.groups.describe_groups(r, version).await;
        response.groups.extend(others.into_iter().map(|g| {
            describe_groups_response::DescribedGroup::default()
                .with_group_id(g)
                .with_error_code(ResponseError::NotCoordinator.code())
        }));
        response
    }

    /// ListGroups: the groups this node coordinates.
    pub(crate) async fn list_groups(
        &self,
        r: ListGroupsRequest,
        version: i16,
    ) -> ListGroupsResponse {
        let mut response = self.groups.list_groups(r, version).await;
        response
            .groups
            .retain(|g| self.coordinates(g.group_id.as_str()));
        response
    }

    /// DeleteGroups: the groups this node coordinates are deleted, the others answered
    /// `NOT_COORDINATOR`.
    pub(crate) async fn delete_groups(
        &self,
        mut r: DeleteGroupsRequest,
        version: i16,
    ) -> DeleteGroupsResponse {
        let (mine, others) = self.split_by_coordinator(std::mem::take(&mut r.groups_names));
        r.groups_names = mine;
        let mut response = self.groups.delete_groups(r, version).await;
        response.results.extend(others.into_iter().map(|g| {
            delete_groups_response::DeletableGroupResult::default()
                .with_group_id(g)
                .with_error_code(ResponseError::NotCoordinator.code())
        }));
        response
    }

    pub(crate) async fn offset_commit(
        &self,
        mut r: OffsetCommitRequest,
        version: i16,
    ) -> OffsetCommitResponse {
        // Partitions that do not exist are answered here; the rest go to the coordinator.
        let mut unknown = Vec::new();
        for t in r.topics.iter_mut() {
            let topic = self.topics.get(t.name.0.as_str());
            let (known, missing): (Vec<_>, Vec<_>) = t.partitions.drain(..).partition(|p| {
                topic
                    .as_ref()
                    .is_some_and(|t| t.partition(p.partition_index).is_some())
            });
            t.partitions = known;
            if !missing.is_empty() {
                unknown.push(
                    OffsetCommitResponseTopic::default()
                        .with_name(t.name.clone())
                        .with_partitions(
                            missing
                                .iter()
                                .map(|p| {
                                    OffsetCommitResponsePartition::default()
                                        .with_partition_index(p.partition_index)
                                        .with_error_code(
                                            ResponseError::UnknownTopicOrPartition.code(),
                                        )
                                })
                                .collect(),
                        ),
                );
            }
        }
        r.topics.retain(|t| !t.partitions.is_empty());
        let mut response = self.groups.offset_commit(r, version).await;
        for u in unknown {
            match response.topics.iter_mut().find(|t| t.name == u.name) {
                Some(t) => t.partitions.extend(u.partitions),
                None => response.topics.push(u),
            }
        }
        response
    }
}
