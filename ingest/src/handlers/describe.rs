//! The describing APIs that admin tools use beside Metadata: DescribeTopicPartitions (KIP-966,
//! Metadata's topic answer in pages), DescribeProducers (KIP-664: the idempotent producers a
//! partition knows) and DescribeLogDirs (partition sizes).

use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::describe_topic_partitions_response::{
    Cursor, DescribeTopicPartitionsResponsePartition, DescribeTopicPartitionsResponseTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

use crate::broker::{str, Broker};
use crate::error::KafkaError;

/// The one "log directory" DescribeLogDirs reports: a node keeps its partitions in the stream
/// store (a WAL, then object storage), not in log directories.
const LOG_DIR: &str = "inlet-stream-store";

impl Broker {
    /// DescribeTopicPartitions v0: the named topics (all, when none is named) in name order,
    /// at most `response_partition_limit` partitions in all, from `cursor` on; `next_cursor`
    /// names where the next page starts.
    pub(crate) fn describe_topic_partitions(
        &self,
        r: DescribeTopicPartitionsRequest,
        _version: i16,
    ) -> DescribeTopicPartitionsResponse {
        let limit = usize::try_from(r.response_partition_limit.max(1)).unwrap_or(1);
        let mut names: Vec<String> = if r.topics.is_empty() {
            self.topics.list().iter().map(|t| t.name.clone()).collect()
        } else {
            r.topics.iter().map(|t| t.name.0.to_string()).collect()
        };
        names.sort();
        names.dedup();
        let (from_topic, from_partition) = match &r.cursor {
            Some(c) => (c.topic_name.0.to_string(), c.partition_index.max(0)),
            None => (String::new(), 0),
        };
        let mut topics = Vec::new();
        let mut left = limit;
        let mut next_cursor = None;
        for name in names.into_iter().filter(|n| *n >= from_topic) {
            let Some(topic) = self.topics.get(&name) else {
                topics.push(
                    DescribeTopicPartitionsResponseTopic::default()
                        .with_name(Some(TopicName(str(name))))
                        .with_error_code(ResponseError::UnknownTopicOrPartition.code()),
                );
                continue;
            };
            if left == 0 {
                next_cursor = Some(Cursor::default().with_topic_name(TopicName(str(name))));
                break;
            }
            let first = if name == from_topic {
                from_partition
            } else {
                0
            };
            let metadata = self.topic_metadata(&topic);
            let mut partitions = Vec::new();
            for p in metadata
                .partitions
                .into_iter()
                .filter(|p| p.partition_index >= first)
            {
                if left == 0 {
                    next_cursor = Some(
                        Cursor::default()
                            .with_topic_name(TopicName(str(name.clone())))
                            .with_partition_index(p.partition_index),
                    );
                    break;
                }
                left -= 1;
                partitions.push(
                    DescribeTopicPartitionsResponsePartition::default()
                        .with_error_code(p.error_code)
                        .with_partition_index(p.partition_index)
                        .with_leader_id(p.leader_id)
                        .with_leader_epoch(p.leader_epoch)
                        .with_replica_nodes(p.replica_nodes)
                        .with_isr_nodes(p.isr_nodes)
                        .with_eligible_leader_replicas(Some(Vec::new()))
                        .with_last_known_elr(Some(Vec::new()))
                        .with_offline_replicas(p.offline_replicas),
                );
            }
            topics.push(
                DescribeTopicPartitionsResponseTopic::default()
                    .with_name(Some(TopicName(str(name))))
                    .with_topic_id(topic.id)
                    .with_partitions(partitions)
                    // No authorizer yet: every operation (`crate::authorized`).
                    .with_topic_authorized_operations(crate::authorized::topic(true)),
            );
            if next_cursor.is_some() {
                break;
            }
        }
        DescribeTopicPartitionsResponse::default()
            .with_topics(topics)
            .with_next_cursor(next_cursor)
    }

    /// DescribeProducers v0: the idempotent producers each asked partition knows, from the
    /// state Produce checks sequences against (loaded first, as Produce would). The last
    /// timestamp is when the node last took a batch of the producer's; there are no
    /// transactions, so no coordinator epoch or open transaction.
    pub(crate) async fn describe_producers(
        &self,
        r: DescribeProducersRequest,
        _version: i16,
    ) -> DescribeProducersResponse {
        let mut topics = Vec::new();
        for t in r.topics {
            let topic = self.topics.get(t.name.0.as_str());
            let mut partitions = Vec::new();
            for index in t.partition_indexes {
                let answer = PartitionResponse::default().with_partition_index(index);
                let found = match topic.as_ref().and_then(|t| t.partition(index)) {
                    None => Err(KafkaError::unknown_topic(t.name.0.as_str())),
                    Some(partition) => match self.check_standing() {
                        Err(e) => Err(e),
                        Ok(()) => {
                            let mut producers = partition.producers.lock().await;
                            self.load_producers(partition, &mut producers)
                                .await
                                .map(|_| {
                                    let txns = partition.txns.lock();
                                    producers
                                        .describe()
                                        .into_iter()
                                        .map(|p| (p, txns.open_first(p.producer_id)))
                                        .collect::<Vec<_>>()
                                })
                        }
                    },
                };
                partitions.push(match found {
                    Ok(active) => answer.with_active_producers(
                        active
                            .into_iter()
                            .map(|(p, txn_start)| {
                                ProducerState::default()
                                    .with_producer_id(ProducerId(p.producer_id))
                                    .with_producer_epoch(i32::from(p.epoch))
                                    .with_last_sequence(p.last_sequence)
                                    .with_last_timestamp(p.last_ms as i64)
                                    .with_coordinator_epoch(-1)
                                    .with_current_txn_start_offset(
                                        txn_start.map_or(-1, |o| o as i64),
                                    )
                            })
                            .collect(),
                    ),
                    Err(e) => answer
                        .with_error_code(e.code())
                        .with_error_message(Some(str(e.message))),
                });
            }
            topics.push(
                TopicResponse::default()
                    .with_name(t.name)
                    .with_partitions(partitions),
            );
        }
        DescribeProducersResponse::default().with_topics(topics)
    }

    /// DescribeLogDirs v1–4: the partitions this node leads (of the asked topics, or all), in
    /// one directory, each with its size in the stream store. Kafka asks every broker; each
    /// node answers for what it leads. Capacity is unknown (`-1`): object storage has none to
    /// report.
    pub(crate) fn describe_log_dirs(
        &self,
        r: DescribeLogDirsRequest,
        _version: i16,
    ) -> DescribeLogDirsResponse {
        let wanted: Option<std::collections::HashMap<String, Vec<i32>>> = r.topics.map(|topics| {
            topics
                .into_iter()
                .map(|t| (t.topic.0.to_string(), t.partitions))
                .collect()
        });
        let mut listed = Vec::new();
        for topic in self.topics.list() {
            let indexes = match &wanted {
                None => None,
                Some(w) => match w.get(&topic.name) {
                    Some(indexes) => Some(indexes),
                    None => continue,
                },
            };
            let partitions: Vec<DescribeLogDirsPartition> = topic
                .partitions
                .iter()
                .filter(|p| indexes.is_none_or(|i| i.contains(&p.index)))
                .filter_map(|p| {
                    let size = self.store.owned_stream_bytes(p.stream)?;
                    Some(
                        DescribeLogDirsPartition::default()
                            .with_partition_index(p.index)
                            .with_partition_size(size as i64)
                            .with_offset_lag(0),
                    )
                })
                .collect();
            if !partitions.is_empty() {
                listed.push(
                    DescribeLogDirsTopic::default()
                        .with_name(TopicName(str(topic.name.clone())))
                        .with_partitions(partitions),
                );
            }
        }
        DescribeLogDirsResponse::default().with_results(vec![DescribeLogDirsResult::default()
            .with_log_dir(str(LOG_DIR))
            .with_topics(listed)
            .with_total_bytes(-1)
            .with_usable_bytes(-1)])
    }
}
