//! Consumer group requests that need the broker's topics before the group coordinator
//! (`crate::groups`) takes them: OffsetCommit checks that the partitions exist. In a cluster,
//! requests for a group another node coordinates are answered `NOT_COORDINATOR` here, so the
//! client asks FindCoordinator again.

use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

use crate::broker::Broker;

impl Broker {
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
