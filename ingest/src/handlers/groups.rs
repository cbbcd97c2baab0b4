//! Consumer group requests that need the broker's topics before the group coordinator
//! (`crate::groups`) takes them: OffsetCommit checks that the partitions exist.

use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

use crate::broker::Broker;

impl Broker {
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
