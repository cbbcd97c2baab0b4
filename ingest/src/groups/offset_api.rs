//! OffsetCommit, OffsetFetch and OffsetDelete on the wire, for each advertised version, over
//! the [`OffsetStore`](super::offsets::OffsetStore).
//!
//! A commit is checked against the group's membership first (see `Group::check_commit`), then
//! written durably, then answered.

use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{
    OffsetCommitRequest, OffsetCommitResponse, OffsetDeleteRequest, OffsetDeleteResponse,
    OffsetFetchRequest, OffsetFetchResponse, TopicName,
};
use kafka_protocol::ResponseError;

use super::offsets::CommittedOffset;
use super::{code, s, GroupCoordinator};

impl GroupCoordinator {
    /// OffsetCommit v2–9. Answers once the accepted offsets are durable.
    pub(crate) async fn offset_commit(
        &self,
        req: OffsetCommitRequest,
        version: i16,
    ) -> OffsetCommitResponse {
        let group_id = req.group_id.to_string();
        let allowed = match self.own(&group_id).await {
            Ok(()) => self.check_commit(&req, version),
            Err(e) => Err(e),
        };
        let now_ms = self.now_ms();
        let mut errors: Vec<Vec<Option<ResponseError>>> = Vec::with_capacity(req.topics.len());
        let mut accepted = Vec::new();
        for topic in &req.topics {
            let mut topic_errors = Vec::with_capacity(topic.partitions.len());
            for p in &topic.partitions {
                let metadata = p.committed_metadata.as_deref().unwrap_or_default();
                let error = super::offsets::accept(
                    allowed,
                    (topic.name.as_str(), p.partition_index),
                    (p.committed_offset, p.committed_leader_epoch, metadata),
                    now_ms,
                    &mut accepted,
                );
                topic_errors.push(error);
            }
            errors.push(topic_errors);
        }
        if let Err(e) = self.inner.offsets.commit(&group_id, accepted).await {
            let answer = self.write_failed(&group_id, "offset commit", &e);
            for error in errors.iter_mut().flatten() {
                if error.is_none() {
                    *error = Some(answer);
                }
            }
        }
        let topics = req
            .topics
            .into_iter()
            .zip(errors)
            .map(|(topic, errors)| {
                let partitions = topic
                    .partitions
                    .iter()
                    .zip(errors)
                    .map(|(p, error)| {
                        OffsetCommitResponsePartition::default()
                            .with_partition_index(p.partition_index)
                            .with_error_code(code(error))
                    })
                    .collect();
                OffsetCommitResponseTopic::default()
                    .with_name(topic.name)
                    .with_partitions(partitions)
            })
            .collect();
        OffsetCommitResponse::default().with_topics(topics)
    }

    fn check_commit(&self, req: &OffsetCommitRequest, version: i16) -> Result<(), ResponseError> {
        if req.group_id.is_empty() {
            return Err(ResponseError::InvalidGroupId);
        }
        let instance = if version >= 7 {
            req.group_instance_id.as_deref()
        } else {
            None
        };
        let mut groups = self.inner.groups.lock();
        if self.is_shut_down() {
            return Err(ResponseError::CoordinatorNotAvailable);
        }
        let generation_id = req.generation_id_or_member_epoch;
        match groups.get_mut(req.group_id.as_str()) {
            Some(group) => group.check_commit(
                req.member_id.as_str(),
                instance,
                generation_id,
                self.now_ms(),
            ),
            // A group known only by its offsets is empty: Kafka's answers for an empty group.
            None if generation_id < 0 => Ok(()),
            None if self.inner.offsets.has_group(req.group_id.as_str()) => {
                Err(ResponseError::UnknownMemberId)
            }
            None => Err(ResponseError::IllegalGeneration),
        }
    }

    /// OffsetFetch v1–9 (v8+: several groups). Partitions without a committed offset answer
    /// offset -1; no topics means every committed offset of the group.
    pub(crate) async fn offset_fetch(
        &self,
        req: OffsetFetchRequest,
        version: i16,
    ) -> OffsetFetchResponse {
        let shut_down = self
            .is_shut_down()
            .then_some(ResponseError::CoordinatorNotAvailable);
        // Per group: whether this node's claim on it is current (its offsets are then the
        // group's, read afresh if it had to take the group again).
        let mut unowned = std::collections::HashMap::new();
        let ids: Vec<&str> = if version >= 8 {
            req.groups.iter().map(|g| g.group_id.as_str()).collect()
        } else {
            vec![req.group_id.as_str()]
        };
        for id in ids {
            if let Err(e) = self.own(id).await {
                unowned.insert(id.to_string(), e);
            }
        }
        let shut_down_or = |group: &str| shut_down.or_else(|| unowned.get(group).copied());
        // A consumer that asks for stable offsets (v7+, read_committed) is told to retry a
        // partition whose offset a transaction has pending (`txn_offsets`).
        let mut pending: std::collections::HashMap<
            String,
            std::collections::HashSet<(String, i32)>,
        > = std::collections::HashMap::new();
        if version >= 7 && req.require_stable {
            let ids: Vec<String> = if version >= 8 {
                req.groups.iter().map(|g| g.group_id.to_string()).collect()
            } else {
                vec![req.group_id.to_string()]
            };
            for id in ids {
                if let Ok(found) = self.pending_txn_offsets(&id).await {
                    pending.insert(id, found.into_iter().collect());
                }
            }
        }
        let unstable = |group: &str, topic: &str, partition: i32| {
            pending
                .get(group)
                .is_some_and(|p| p.contains(&(topic.to_string(), partition)))
                .then_some(ResponseError::UnstableOffsetCommit)
        };
        if version >= 8 {
            let groups = req
                .groups
                .into_iter()
                .map(|g| {
                    let error = shut_down_or(g.group_id.as_str()).or_else(|| {
                        g.group_id
                            .is_empty()
                            .then_some(ResponseError::InvalidGroupId)
                    });
                    let wanted = g.topics.map(|topics| {
                        topics
                            .into_iter()
                            .map(|t| (t.name, t.partition_indexes))
                            .collect()
                    });
                    let topics = if error.is_some() {
                        Vec::new()
                    } else {
                        self.fetch(&g.group_id, wanted)
                            .into_iter()
                            .map(|(name, partitions)| {
                                let partitions = partitions
                                    .into_iter()
                                    .map(|(index, o)| {
                                        let o = o.unwrap_or_else(no_offset);
                                        OffsetFetchResponsePartitions::default()
                                            .with_error_code(code(unstable(
                                                g.group_id.as_str(),
                                                name.as_str(),
                                                index,
                                            )))
                                            .with_partition_index(index)
                                            .with_committed_offset(o.offset)
                                            .with_committed_leader_epoch(o.leader_epoch)
                                            .with_metadata(Some(s(o.metadata)))
                                    })
                                    .collect();
                                OffsetFetchResponseTopics::default()
                                    .with_name(name)
                                    .with_partitions(partitions)
                            })
                            .collect()
                    };
                    OffsetFetchResponseGroup::default()
                        .with_group_id(g.group_id)
                        .with_topics(topics)
                        .with_error_code(code(error))
                })
                .collect();
            return OffsetFetchResponse::default().with_groups(groups);
        }
        let error = shut_down_or(req.group_id.as_str()).or_else(|| {
            req.group_id
                .is_empty()
                .then_some(ResponseError::InvalidGroupId)
        });
        let wanted = req.topics.map(|topics| {
            topics
                .into_iter()
                .map(|t| (t.name, t.partition_indexes))
                .collect()
        });
        let topics = if error.is_some() {
            Vec::new()
        } else {
            self.fetch(&req.group_id, wanted)
                .into_iter()
                .map(|(name, partitions)| {
                    let partitions = partitions
                        .into_iter()
                        .map(|(index, o)| {
                            let o = o.unwrap_or_else(no_offset);
                            let mut p = OffsetFetchResponsePartition::default()
                                .with_error_code(code(unstable(
                                    req.group_id.as_str(),
                                    name.as_str(),
                                    index,
                                )))
                                .with_partition_index(index)
                                .with_committed_offset(o.offset)
                                .with_metadata(Some(s(o.metadata)));
                            if version >= 5 {
                                p = p.with_committed_leader_epoch(o.leader_epoch);
                            }
                            p
                        })
                        .collect();
                    OffsetFetchResponseTopic::default()
                        .with_name(name)
                        .with_partitions(partitions)
                })
                .collect()
        };
        let response = OffsetFetchResponse::default().with_topics(topics);
        if version >= 2 {
            response.with_error_code(code(error))
        } else {
            response
        }
    }

    /// The offsets asked for (`None`: all the group has), topic by topic.
    #[allow(clippy::type_complexity)]
    fn fetch(
        &self,
        group_id: &str,
        wanted: Option<Vec<(TopicName, Vec<i32>)>>,
    ) -> Vec<(TopicName, Vec<(i32, Option<CommittedOffset>)>)> {
        let offsets = &self.inner.offsets;
        match wanted {
            Some(topics) => topics
                .into_iter()
                .map(|(name, partitions)| {
                    let found = partitions
                        .into_iter()
                        .map(|p| (p, offsets.get(group_id, &name, p)))
                        .collect();
                    (name, found)
                })
                .collect(),
            None => {
                let mut by_topic: Vec<(TopicName, Vec<(i32, Option<CommittedOffset>)>)> =
                    Vec::new();
                for ((topic, partition), o) in offsets.all(group_id) {
                    match by_topic.last_mut() {
                        Some((name, partitions)) if name.as_str() == topic => {
                            partitions.push((partition, Some(o)))
                        }
                        _ => by_topic.push((TopicName(s(topic)), vec![(partition, Some(o))])),
                    }
                }
                by_topic
            }
        }
    }

    /// Drops committed offsets of a deleted topic, in every group.
    pub(crate) async fn delete_topic_offsets(
        &self,
        topic: &str,
    ) -> Result<(), inlet_storage::Error> {
        self.inner.offsets.delete_topic(topic).await
    }

    /// OffsetDelete v0. Offsets of topics a consumer group's members subscribe to stay
    /// (`GROUP_SUBSCRIBED_TO_TOPIC`).
    pub(crate) async fn offset_delete(
        &self,
        req: OffsetDeleteRequest,
        _version: i16,
    ) -> OffsetDeleteResponse {
        let group_id = req.group_id.as_str();
        let guard = if group_id.is_empty() {
            Err(ResponseError::InvalidGroupId)
        } else if let Err(e) = self.own(group_id).await {
            Err(e)
        } else {
            let groups = self.inner.groups.lock();
            if self.is_shut_down() {
                Err(ResponseError::CoordinatorNotAvailable)
            } else {
                match groups.get(group_id) {
                    Some(group) => group.offset_delete_guard(),
                    None if self.inner.offsets.has_group(group_id) => Ok(None),
                    None => Err(ResponseError::GroupIdNotFound),
                }
            }
        };
        let subscribed = match guard {
            Ok(subscribed) => subscribed,
            Err(e) => return OffsetDeleteResponse::default().with_error_code(e.code()),
        };
        let is_subscribed = |topic: &str| subscribed.as_ref().is_some_and(|t| t.contains(topic));
        let doomed: Vec<(String, i32)> = req
            .topics
            .iter()
            .filter(|t| !is_subscribed(&t.name))
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| (t.name.to_string(), p.partition_index))
            })
            .collect();
        let store_error = match self
            .inner
            .offsets
            .delete_partitions(group_id, &doomed)
            .await
        {
            Ok(()) => None,
            Err(e) => Some(self.write_failed(group_id, "offset delete", &e)),
        };
        let topics = req
            .topics
            .into_iter()
            .map(|t| {
                let error = if is_subscribed(&t.name) {
                    Some(ResponseError::GroupSubscribedToTopic)
                } else {
                    store_error
                };
                let partitions = t
                    .partitions
                    .iter()
                    .map(|p| {
                        OffsetDeleteResponsePartition::default()
                            .with_partition_index(p.partition_index)
                            .with_error_code(code(error))
                    })
                    .collect();
                OffsetDeleteResponseTopic::default()
                    .with_name(t.name)
                    .with_partitions(partitions)
            })
            .collect();
        OffsetDeleteResponse::default().with_topics(topics)
    }
}

fn no_offset() -> CommittedOffset {
    CommittedOffset {
        offset: -1,
        leader_epoch: -1,
        metadata: String::new(),
        commit_ms: 0,
    }
}
