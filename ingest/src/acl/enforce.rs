//! Which operation each Kafka request needs, as Kafka's `KafkaApis` asks its authorizer, and
//! what the client gets when it is not allowed. Every API Inlet serves is in
//! [`Broker::authorize`]'s one match, so a new API cannot be added without deciding its rule.
//!
//! A request is checked before it is handled. A request for one resource (a group's
//! heartbeat, a transaction's end) is refused whole with the API's authorization error. A
//! request that changes several resources (Produce, CreateTopics, OffsetCommit) is narrowed to
//! the allowed ones, and the refused ones are added to the response with their error
//! (`TOPIC_AUTHORIZATION_FAILED`, `GROUP_AUTHORIZATION_FAILED`,
//! `TRANSACTIONAL_ID_AUTHORIZATION_FAILED`, `CLUSTER_AUTHORIZATION_FAILED`). A request that
//! only reads (Fetch, ListOffsets, DescribeConfigs) is handled whole and its answers for
//! refused resources are replaced by the error, or left out where Kafka leaves them out
//! (Metadata of every topic, ListGroups, ListTransactions).
//!
//! With the authorizer off, nothing here runs.

use kafka_protocol::messages::*;

use super::{Check, Operation, ResourceType, Session, CLUSTER};
use crate::broker::{str, Broker};

// Kafka's error codes of the answers here.
/// TOPIC_AUTHORIZATION_FAILED.
const TOPIC_DENIED: i16 = 29;
/// GROUP_AUTHORIZATION_FAILED.
const GROUP_DENIED: i16 = 30;
/// CLUSTER_AUTHORIZATION_FAILED.
const CLUSTER_DENIED: i16 = 31;
/// TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
const TXN_DENIED: i16 = 53;
/// OPERATION_NOT_ATTEMPTED.
const NOT_ATTEMPTED: i16 = 55;
/// UNKNOWN_TOPIC_OR_PARTITION.
const UNKNOWN_TOPIC: i16 = 3;

fn then<'a>(patch: impl FnOnce(&mut ResponseKind) + Send + 'a) -> Check<'a> {
    Check::Then(Box::new(patch))
}

fn message(code: i16) -> Option<kafka_protocol::protocol::StrBytes> {
    let what = match code {
        TOPIC_DENIED => "Topic authorization failed.",
        GROUP_DENIED => "Group authorization failed.",
        CLUSTER_DENIED => "Cluster authorization failed.",
        TXN_DENIED => "Transactional Id authorization failed.",
        _ => return None,
    };
    Some(str(what))
}

impl Broker {
    /// Whether `s` may perform `op` on the resource.
    fn may(&self, s: &Session, op: Operation, rt: ResourceType, name: &str) -> bool {
        self.authorizer.allows(s, op, rt, name)
    }

    /// A topic's name as a request names it: by name, or by id (newer versions).
    fn topic_name(&self, name: &str, id: &uuid::Uuid) -> Option<String> {
        if !name.is_empty() {
            return Some(name.to_string());
        }
        self.topics.by_id(id).map(|t| t.name.clone())
    }

    /// Checks `body` for `s` (see the module doc). Only called with the authorizer on.
    pub(crate) fn authorize<'a>(
        &'a self,
        s: &'a Session,
        body: &mut RequestKind,
        version: i16,
    ) -> Check<'a> {
        use Operation::*;
        use ResourceType::{Cluster, Group, Topic, TransactionalId};
        match body {
            RequestKind::ApiVersions(_) => Check::Pass,
            RequestKind::Produce(r) => {
                if let Some(txn) = &r.transactional_id {
                    if !self.may(s, Write, TransactionalId, txn) {
                        return Check::Refuse(Box::new(ResponseKind::Produce(produce_refused(
                            std::mem::take(&mut r.topic_data),
                            |_| TXN_DENIED,
                        ))));
                    }
                }
                let mut refused = Vec::new();
                r.topic_data.retain(|t| {
                    let Some(name) = self.topic_name(&t.name, &t.topic_id) else {
                        return true;
                    };
                    let code = if !self.may(s, Write, Topic, &name) {
                        TOPIC_DENIED
                    } else if self.topics.get(&name).is_none()
                        && !self.may(s, Create, Cluster, CLUSTER)
                        && !self.may(s, Create, Topic, &name)
                    {
                        // Allowed to write but not to create: it is not auto-created.
                        UNKNOWN_TOPIC
                    } else {
                        return true;
                    };
                    refused.push((t.clone(), code));
                    false
                });
                if refused.is_empty() {
                    return Check::Pass;
                }
                then(move |resp| {
                    if let ResponseKind::Produce(resp) = resp {
                        for (t, code) in refused {
                            resp.responses
                                .extend(produce_refused(vec![t], |_| code).responses);
                        }
                    }
                })
            }
            RequestKind::Fetch(_) => then(move |resp| {
                if let ResponseKind::Fetch(resp) = resp {
                    for t in &mut resp.responses {
                        let allowed = self
                            .topic_name(&t.topic, &t.topic_id)
                            .is_none_or(|name| self.may(s, Read, Topic, &name));
                        if !allowed {
                            for p in &mut t.partitions {
                                *p = fetch_response::PartitionData::default()
                                    .with_partition_index(p.partition_index)
                                    .with_error_code(TOPIC_DENIED)
                                    .with_high_watermark(-1)
                                    .with_last_stable_offset(-1)
                                    .with_log_start_offset(-1);
                            }
                        }
                    }
                }
            }),
            RequestKind::ListOffsets(_) => then(move |resp| {
                if let ResponseKind::ListOffsets(resp) = resp {
                    for t in &mut resp.topics {
                        if !self.may(s, Describe, Topic, &t.name) {
                            for p in &mut t.partitions {
                                p.error_code = TOPIC_DENIED;
                                p.offset = -1;
                                p.timestamp = -1;
                            }
                        }
                    }
                }
            }),
            RequestKind::OffsetForLeaderEpoch(_) => then(move |resp| {
                if let ResponseKind::OffsetForLeaderEpoch(resp) = resp {
                    for t in &mut resp.topics {
                        if !self.may(s, Describe, Topic, &t.topic) {
                            for p in &mut t.partitions {
                                p.error_code = TOPIC_DENIED;
                                p.leader_epoch = -1;
                                p.end_offset = -1;
                            }
                        }
                    }
                }
            }),
            RequestKind::Metadata(r) => self.authorize_metadata(s, r),
            RequestKind::DescribeTopicPartitions(_) => then(move |resp| {
                if let ResponseKind::DescribeTopicPartitions(resp) = resp {
                    for t in &mut resp.topics {
                        let name = t.name.as_ref().map(|n| n.to_string()).unwrap_or_default();
                        if !self.may(s, Describe, Topic, &name) {
                            t.error_code = TOPIC_DENIED;
                            t.partitions.clear();
                        }
                        t.topic_authorized_operations =
                            self.authorizer.operations(s, Topic, &name);
                    }
                }
            }),
            RequestKind::DescribeProducers(_) => then(move |resp| {
                if let ResponseKind::DescribeProducers(resp) = resp {
                    for t in &mut resp.topics {
                        if !self.may(s, Read, Topic, &t.name) {
                            for p in &mut t.partitions {
                                p.error_code = TOPIC_DENIED;
                                p.error_message = message(TOPIC_DENIED);
                                p.active_producers.clear();
                            }
                        }
                    }
                }
            }),
            RequestKind::DescribeLogDirs(_) | RequestKind::DescribeCluster(_)
                if !self.may(s, Describe, Cluster, CLUSTER) =>
            {
                Check::Refuse(Box::new(match body {
                    RequestKind::DescribeLogDirs(_) => ResponseKind::DescribeLogDirs(
                        DescribeLogDirsResponse::default().with_error_code(CLUSTER_DENIED),
                    ),
                    _ => ResponseKind::DescribeCluster(
                        DescribeClusterResponse::default()
                            .with_error_code(CLUSTER_DENIED)
                            .with_error_message(message(CLUSTER_DENIED)),
                    ),
                }))
            }
            RequestKind::DescribeLogDirs(_) => Check::Pass,
            RequestKind::DescribeCluster(r) => {
                let asked = r.include_cluster_authorized_operations;
                then(move |resp| {
                    if let (ResponseKind::DescribeCluster(resp), true) = (resp, asked) {
                        resp.cluster_authorized_operations =
                            self.authorizer.operations(s, Cluster, CLUSTER);
                    }
                })
            }
            RequestKind::CreateTopics(r) => {
                if self.may(s, Create, Cluster, CLUSTER) {
                    return Check::Pass;
                }
                let mut refused = Vec::new();
                r.topics.retain(|t| {
                    let ok = self.may(s, Create, Topic, &t.name);
                    if !ok {
                        refused.push(t.name.clone());
                    }
                    ok
                });
                then(move |resp| {
                    if let ResponseKind::CreateTopics(resp) = resp {
                        for name in refused {
                            resp.topics.push(
                                create_topics_response::CreatableTopicResult::default()
                                    .with_name(name)
                                    .with_error_code(TOPIC_DENIED)
                                    .with_error_message(message(TOPIC_DENIED))
                                    .with_topic_config_error_code(TOPIC_DENIED)
                                    .with_num_partitions(-1)
                                    .with_replication_factor(-1),
                            );
                        }
                    }
                })
            }
            RequestKind::DeleteTopics(r) => {
                let mut refused = Vec::new();
                r.topic_names.retain(|name| {
                    let ok = self.may(s, Delete, Topic, name);
                    if !ok {
                        refused.push((Some(name.clone()), uuid::Uuid::nil()));
                    }
                    ok
                });
                r.topics.retain(|t| {
                    let name = t
                        .name
                        .as_ref()
                        .map(|n| n.to_string())
                        .or_else(|| self.topics.by_id(&t.topic_id).map(|t| t.name.clone()));
                    let ok = name.is_none_or(|n| self.may(s, Delete, Topic, &n));
                    if !ok {
                        refused.push((t.name.clone(), t.topic_id));
                    }
                    ok
                });
                then(move |resp| {
                    if let ResponseKind::DeleteTopics(resp) = resp {
                        for (name, id) in refused {
                            resp.responses.push(
                                delete_topics_response::DeletableTopicResult::default()
                                    .with_name(name)
                                    .with_topic_id(id)
                                    .with_error_code(TOPIC_DENIED)
                                    .with_error_message(message(TOPIC_DENIED)),
                            );
                        }
                    }
                })
            }
            RequestKind::CreatePartitions(r) => {
                let mut refused = Vec::new();
                r.topics.retain(|t| {
                    let ok = self.may(s, Alter, Topic, &t.name);
                    if !ok {
                        refused.push(t.name.clone());
                    }
                    ok
                });
                then(move |resp| {
                    if let ResponseKind::CreatePartitions(resp) = resp {
                        for name in refused {
                            resp.results.push(
                                create_partitions_response::CreatePartitionsTopicResult::default()
                                    .with_name(name)
                                    .with_error_code(TOPIC_DENIED)
                                    .with_error_message(message(TOPIC_DENIED)),
                            );
                        }
                    }
                })
            }
            RequestKind::DeleteRecords(r) => {
                let mut refused = Vec::new();
                r.topics.retain(|t| {
                    let ok = self.may(s, Delete, Topic, &t.name);
                    if !ok {
                        refused.push(t.clone());
                    }
                    ok
                });
                then(move |resp| {
                    if let ResponseKind::DeleteRecords(resp) = resp {
                        for t in refused {
                            resp.topics.push(
                                delete_records_response::DeleteRecordsTopicResult::default()
                                    .with_name(t.name)
                                    .with_partitions(
                                        t.partitions
                                            .iter()
                                            .map(|p| {
                                                delete_records_response::DeleteRecordsPartitionResult::default()
                                                    .with_partition_index(p.partition_index)
                                                    .with_low_watermark(-1)
                                                    .with_error_code(TOPIC_DENIED)
                                            })
                                            .collect(),
                                    ),
                            );
                        }
                    }
                })
            }
            RequestKind::DescribeConfigs(_) => then(move |resp| {
                if let ResponseKind::DescribeConfigs(resp) = resp {
                    for res in &mut resp.results {
                        let code = self.config_denied(s, res.resource_type, &res.resource_name, DescribeConfigs);
                        if let Some(code) = code {
                            res.error_code = code;
                            res.error_message = message(code);
                            res.configs.clear();
                        }
                    }
                }
            }),
            RequestKind::AlterConfigs(r) => {
                let mut refused = Vec::new();
                r.resources.retain(|res| {
                    match self.config_denied(s, res.resource_type, &res.resource_name, AlterConfigs) {
                        Some(code) => {
                            refused.push((res.resource_type, res.resource_name.clone(), code));
                            false
                        }
                        None => true,
                    }
                });
                then(move |resp| {
                    if let ResponseKind::AlterConfigs(resp) = resp {
                        for (resource_type, name, code) in refused {
                            resp.responses.push(
                                alter_configs_response::AlterConfigsResourceResponse::default()
                                    .with_resource_type(resource_type)
                                    .with_resource_name(name)
                                    .with_error_code(code)
                                    .with_error_message(message(code)),
                            );
                        }
                    }
                })
            }
            RequestKind::IncrementalAlterConfigs(r) => {
                let mut refused = Vec::new();
                r.resources.retain(|res| {
                    match self.config_denied(s, res.resource_type, &res.resource_name, AlterConfigs) {
                        Some(code) => {
                            refused.push((res.resource_type, res.resource_name.clone(), code));
                            false
                        }
                        None => true,
                    }
                });
                then(move |resp| {
                    if let ResponseKind::IncrementalAlterConfigs(resp) = resp {
                        for (resource_type, name, code) in refused {
                            resp.responses.push(
                                incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                                    .with_resource_type(resource_type)
                                    .with_resource_name(name)
                                    .with_error_code(code)
                                    .with_error_message(message(code)),
                            );
                        }
                    }
                })
            }
            RequestKind::FindCoordinator(r) => {
                let (op_type, code) = if r.key_type == 1 {
                    (TransactionalId, TXN_DENIED)
                } else {
                    (Group, GROUP_DENIED)
                };
                if version < 4 {
                    if self.may(s, Describe, op_type, &r.key) {
                        return Check::Pass;
                    }
                    return Check::Refuse(Box::new(ResponseKind::FindCoordinator(
                        FindCoordinatorResponse::default()
                            .with_error_code(code)
                            .with_error_message(message(code))
                            .with_node_id(BrokerId(-1))
                            .with_port(-1),
                    )));
                }
                let mut refused = Vec::new();
                r.coordinator_keys.retain(|key| {
                    let ok = self.may(s, Describe, op_type, key);
                    if !ok {
                        refused.push(key.clone());
                    }
                    ok
                });
                then(move |resp| {
                    if let ResponseKind::FindCoordinator(resp) = resp {
                        for key in refused {
                            resp.coordinators.push(
                                find_coordinator_response::Coordinator::default()
                                    .with_key(key)
                                    .with_node_id(BrokerId(-1))
                                    .with_port(-1)
                                    .with_error_code(code)
                                    .with_error_message(message(code)),
                            );
                        }
                    }
                })
            }
            RequestKind::JoinGroup(r) if !self.may(s, Read, Group, &r.group_id) => Check::Refuse(Box::new(
                ResponseKind::JoinGroup(
                    JoinGroupResponse::default()
                        .with_error_code(GROUP_DENIED)
                        .with_generation_id(-1),
                ),
            )),
            RequestKind::SyncGroup(r) if !self.may(s, Read, Group, &r.group_id) => Check::Refuse(Box::new(
                ResponseKind::SyncGroup(SyncGroupResponse::default().with_error_code(GROUP_DENIED)),
            )),
            RequestKind::Heartbeat(r) if !self.may(s, Read, Group, &r.group_id) => Check::Refuse(Box::new(
                ResponseKind::Heartbeat(HeartbeatResponse::default().with_error_code(GROUP_DENIED)),
            )),
            RequestKind::LeaveGroup(r) if !self.may(s, Read, Group, &r.group_id) => Check::Refuse(Box::new(
                ResponseKind::LeaveGroup(LeaveGroupResponse::default().with_error_code(GROUP_DENIED)),
            )),
            RequestKind::JoinGroup(_)
            | RequestKind::SyncGroup(_)
            | RequestKind::Heartbeat(_)
            | RequestKind::LeaveGroup(_) => Check::Pass,
            RequestKind::OffsetCommit(r) => {
                if !self.may(s, Read, Group, &r.group_id) {
                    return Check::Refuse(Box::new(ResponseKind::OffsetCommit(
                        OffsetCommitResponse::default().with_topics(
                            r.topics
                                .iter()
                                .map(|t| commit_refused(t.name.clone(), t.topic_id, t.partitions.iter().map(|p| p.partition_index), GROUP_DENIED))
                                .collect(),
                        ),
                    )));
                }
                let mut refused = Vec::new();
                r.topics.retain(|t| {
                    let ok = self
                        .topic_name(&t.name, &t.topic_id)
                        .is_none_or(|n| self.may(s, Read, Topic, &n));
                    if !ok {
                        refused.push(commit_refused(
                            t.name.clone(),
                            t.topic_id,
                            t.partitions.iter().map(|p| p.partition_index),
                            TOPIC_DENIED,
                        ));
                    }
                    ok
                });
                then(move |resp| {
                    if let ResponseKind::OffsetCommit(resp) = resp {
                        resp.topics.extend(refused);
                    }
                })
            }
            RequestKind::OffsetFetch(r) => {
                if version < 8 && !self.may(s, Describe, Group, &r.group_id) {
                    return Check::Refuse(Box::new(ResponseKind::OffsetFetch(
                        OffsetFetchResponse::default()
                            .with_error_code(GROUP_DENIED)
                            .with_topics(
                                r.topics
                                    .iter()
                                    .flatten()
                                    .map(|t| {
                                        offset_fetch_response::OffsetFetchResponseTopic::default()
                                            .with_name(t.name.clone())
                                            .with_partitions(
                                                t.partition_indexes
                                                    .iter()
                                                    .map(|p| {
                                                        offset_fetch_response::OffsetFetchResponsePartition::default()
                                                            .with_partition_index(*p)
                                                            .with_committed_offset(-1)
                                                            .with_error_code(GROUP_DENIED)
                                                    })
                                                    .collect(),
                                            )
                                    })
                                    .collect(),
                            ),
                    )));
                }
                let explicit = r.topics.is_some();
                let explicit_groups: Vec<bool> =
                    r.groups.iter().map(|g| g.topics.is_some()).collect();
                then(move |resp| {
                    if let ResponseKind::OffsetFetch(resp) = resp {
                        self.filter_offset_fetch(s, resp, explicit, &explicit_groups);
                    }
                })
            }
            RequestKind::DescribeGroups(r) => {
                let asked = version >= 3 && r.include_authorized_operations;
                then(move |resp| {
                    if let ResponseKind::DescribeGroups(resp) = resp {
                        for g in &mut resp.groups {
                            if !self.may(s, Describe, Group, &g.group_id) {
                                *g = describe_groups_response::DescribedGroup::default()
                                    .with_group_id(g.group_id.clone())
                                    .with_error_code(GROUP_DENIED)
                                    .with_error_message(message(GROUP_DENIED))
                                    .with_authorized_operations(crate::authorized::NOT_ASKED);
                            } else if asked {
                                g.authorized_operations =
                                    self.authorizer.operations(s, Group, &g.group_id);
                            }
                        }
                    }
                })
            }
            RequestKind::ListGroups(_) => {
                if self.may(s, Describe, Cluster, CLUSTER) {
                    return Check::Pass;
                }
                then(move |resp| {
                    if let ResponseKind::ListGroups(resp) = resp {
                        resp.groups
                            .retain(|g| self.may(s, Describe, Group, &g.group_id));
                    }
                })
            }
            RequestKind::DeleteGroups(r) => {
                let mut refused = Vec::new();
                r.groups_names.retain(|g| {
                    let ok = self.may(s, Delete, Group, g);
                    if !ok {
                        refused.push(g.clone());
                    }
                    ok
                });
                then(move |resp| {
                    if let ResponseKind::DeleteGroups(resp) = resp {
                        for g in refused {
                            resp.results.push(
                                delete_groups_response::DeletableGroupResult::default()
                                    .with_group_id(g)
                                    .with_error_code(GROUP_DENIED),
                            );
                        }
                    }
                })
            }
            RequestKind::OffsetDelete(r) => {
                if !self.may(s, Delete, Group, &r.group_id) {
                    return Check::Refuse(Box::new(ResponseKind::OffsetDelete(
                        OffsetDeleteResponse::default().with_error_code(GROUP_DENIED),
                    )));
                }
                let mut refused = Vec::new();
                r.topics.retain(|t| {
                    let ok = self.may(s, Read, Topic, &t.name);
                    if !ok {
                        refused.push(t.clone());
                    }
                    ok
                });
                then(move |resp| {
                    if let ResponseKind::OffsetDelete(resp) = resp {
                        for t in refused {
                            resp.topics.push(
                                offset_delete_response::OffsetDeleteResponseTopic::default()
                                    .with_name(t.name)
                                    .with_partitions(
                                        t.partitions
                                            .iter()
                                            .map(|p| {
                                                offset_delete_response::OffsetDeleteResponsePartition::default()
                                                    .with_partition_index(p.partition_index)
                                                    .with_error_code(TOPIC_DENIED)
                                            })
                                            .collect(),
                                    ),
                            );
                        }
                    }
                })
            }
            RequestKind::InitProducerId(r) => {
                let allowed = match &r.transactional_id {
                    Some(txn) => self.may(s, Write, TransactionalId, txn),
                    None => {
                        self.may(s, IdempotentWrite, Cluster, CLUSTER)
                            || self.authorizer.allows_some(s, Write, Topic)
                    }
                };
                if allowed {
                    return Check::Pass;
                }
                let code = if r.transactional_id.is_some() {
                    TXN_DENIED
                } else {
                    CLUSTER_DENIED
                };
                Check::Refuse(Box::new(ResponseKind::InitProducerId(
                    InitProducerIdResponse::default()
                        .with_error_code(code)
                        .with_producer_id(ProducerId(-1))
                        .with_producer_epoch(-1),
                )))
            }
            RequestKind::AddPartitionsToTxn(r) => self.authorize_add_partitions(s, r, version),
            RequestKind::AddOffsetsToTxn(r) => {
                let code = if !self.may(s, Write, TransactionalId, &r.transactional_id) {
                    TXN_DENIED
                } else if !self.may(s, Read, Group, &r.group_id) {
                    GROUP_DENIED
                } else {
                    return Check::Pass;
                };
                Check::Refuse(Box::new(ResponseKind::AddOffsetsToTxn(
                    AddOffsetsToTxnResponse::default().with_error_code(code),
                )))
            }
            RequestKind::EndTxn(r) if !self.may(s, Write, TransactionalId, &r.transactional_id) => {
                Check::Refuse(Box::new(ResponseKind::EndTxn(
                    EndTxnResponse::default()
                        .with_error_code(TXN_DENIED)
                        .with_producer_id(ProducerId(-1))
                        .with_producer_epoch(-1),
                )))
            }
            RequestKind::EndTxn(_) => Check::Pass,
            RequestKind::TxnOffsetCommit(r) => {
                let whole = if !self.may(s, Write, TransactionalId, &r.transactional_id) {
                    Some(TXN_DENIED)
                } else if !self.may(s, Read, Group, &r.group_id) {
                    Some(GROUP_DENIED)
                } else {
                    None
                };
                let refused_topic = |t: &txn_offset_commit_request::TxnOffsetCommitRequestTopic, code| {
                    txn_offset_commit_response::TxnOffsetCommitResponseTopic::default()
                        .with_name(t.name.clone())
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    txn_offset_commit_response::TxnOffsetCommitResponsePartition::default()
                                        .with_partition_index(p.partition_index)
                                        .with_error_code(code)
                                })
                                .collect(),
                        )
                };
                if let Some(code) = whole {
                    return Check::Refuse(Box::new(ResponseKind::TxnOffsetCommit(
                        TxnOffsetCommitResponse::default()
                            .with_topics(r.topics.iter().map(|t| refused_topic(t, code)).collect()),
                    )));
                }
                let mut refused = Vec::new();
                r.topics.retain(|t| {
                    let ok = self.may(s, Read, Topic, &t.name);
                    if !ok {
                        refused.push(refused_topic(t, TOPIC_DENIED));
                    }
                    ok
                });
                then(move |resp| {
                    if let ResponseKind::TxnOffsetCommit(resp) = resp {
                        resp.topics.extend(refused);
                    }
                })
            }
            RequestKind::WriteTxnMarkers(r) if !self.may(s, ClusterAction, Cluster, CLUSTER) => {
                Check::Refuse(Box::new(ResponseKind::WriteTxnMarkers(
                    WriteTxnMarkersResponse::default().with_markers(
                        r.markers
                            .iter()
                            .map(|m| {
                                write_txn_markers_response::WritableTxnMarkerResult::default()
                                    .with_producer_id(m.producer_id)
                                    .with_topics(
                                        m.topics
                                            .iter()
                                            .map(|t| {
                                                write_txn_markers_response::WritableTxnMarkerTopicResult::default()
                                                    .with_name(t.name.clone())
                                                    .with_partitions(
                                                        t.partition_indexes
                                                            .iter()
                                                            .map(|p| {
                                                                write_txn_markers_response::WritableTxnMarkerPartitionResult::default()
                                                                    .with_partition_index(*p)
                                                                    .with_error_code(CLUSTER_DENIED)
                                                            })
                                                            .collect(),
                                                    )
                                            })
                                            .collect(),
                                    )
                            })
                            .collect(),
                    ),
                )))
            }
            RequestKind::WriteTxnMarkers(_) => Check::Pass,
            RequestKind::DescribeTransactions(_) => then(move |resp| {
                if let ResponseKind::DescribeTransactions(resp) = resp {
                    for t in &mut resp.transaction_states {
                        if !self.may(s, Describe, TransactionalId, &t.transactional_id) {
                            *t = describe_transactions_response::TransactionState::default()
                                .with_transactional_id(t.transactional_id.clone())
                                .with_error_code(TXN_DENIED)
                                .with_producer_id(ProducerId(-1))
                                .with_producer_epoch(-1);
                        } else {
                            t.topics.retain(|topic| self.may(s, Describe, Topic, &topic.topic));
                        }
                    }
                }
            }),
            RequestKind::ListTransactions(_) => then(move |resp| {
                if let ResponseKind::ListTransactions(resp) = resp {
                    resp.transaction_states
                        .retain(|t| self.may(s, Describe, TransactionalId, &t.transactional_id));
                }
            }),
            RequestKind::CreateAcls(r) if !self.may(s, Alter, Cluster, CLUSTER) => {
                Check::Refuse(Box::new(ResponseKind::CreateAcls(
                    CreateAclsResponse::default().with_results(
                        r.creations
                            .iter()
                            .map(|_| {
                                create_acls_response::AclCreationResult::default()
                                    .with_error_code(CLUSTER_DENIED)
                                    .with_error_message(message(CLUSTER_DENIED))
                            })
                            .collect(),
                    ),
                )))
            }
            RequestKind::DeleteAcls(r) if !self.may(s, Alter, Cluster, CLUSTER) => {
                Check::Refuse(Box::new(ResponseKind::DeleteAcls(
                    DeleteAclsResponse::default().with_filter_results(
                        r.filters
                            .iter()
                            .map(|_| {
                                delete_acls_response::DeleteAclsFilterResult::default()
                                    .with_error_code(CLUSTER_DENIED)
                                    .with_error_message(message(CLUSTER_DENIED))
                            })
                            .collect(),
                    ),
                )))
            }
            RequestKind::DescribeAcls(_) if !self.may(s, Describe, Cluster, CLUSTER) => {
                Check::Refuse(Box::new(ResponseKind::DescribeAcls(
                    DescribeAclsResponse::default()
                        .with_error_code(CLUSTER_DENIED)
                        .with_error_message(message(CLUSTER_DENIED)),
                )))
            }
            RequestKind::CreateAcls(_) | RequestKind::DeleteAcls(_) | RequestKind::DescribeAcls(_) => Check::Pass,
            RequestKind::DescribeClientQuotas(_) if !self.may(s, DescribeConfigs, Cluster, CLUSTER) => {
                Check::Refuse(Box::new(ResponseKind::DescribeClientQuotas(
                    DescribeClientQuotasResponse::default()
                        .with_error_code(CLUSTER_DENIED)
                        .with_error_message(message(CLUSTER_DENIED))
                        .with_entries(None),
                )))
            }
            RequestKind::AlterClientQuotas(r) if !self.may(s, AlterConfigs, Cluster, CLUSTER) => {
                Check::Refuse(Box::new(ResponseKind::AlterClientQuotas(
                    AlterClientQuotasResponse::default().with_entries(
                        r.entries
                            .iter()
                            .map(|e| {
                                alter_client_quotas_response::EntryData::default()
                                    .with_error_code(CLUSTER_DENIED)
                                    .with_error_message(message(CLUSTER_DENIED))
                                    .with_entity(crate::quota::admin::echo(&e.entity))
                            })
                            .collect(),
                    ),
                )))
            }
            RequestKind::DescribeClientQuotas(_) | RequestKind::AlterClientQuotas(_) => Check::Pass,
            RequestKind::DescribeUserScramCredentials(_) if !self.may(s, Describe, Cluster, CLUSTER) => {
                Check::Refuse(Box::new(ResponseKind::DescribeUserScramCredentials(
                    DescribeUserScramCredentialsResponse::default()
                        .with_error_code(CLUSTER_DENIED)
                        .with_error_message(message(CLUSTER_DENIED)),
                )))
            }
            RequestKind::AlterUserScramCredentials(r) if !self.may(s, Alter, Cluster, CLUSTER) => {
                let users: std::collections::BTreeSet<String> = r
                    .deletions
                    .iter()
                    .map(|d| d.name.to_string())
                    .chain(r.upsertions.iter().map(|u| u.name.to_string()))
                    .collect();
                Check::Refuse(Box::new(ResponseKind::AlterUserScramCredentials(
                    AlterUserScramCredentialsResponse::default().with_results(
                        users
                            .into_iter()
                            .map(|u| {
                                alter_user_scram_credentials_response::AlterUserScramCredentialsResult::default()
                                    .with_user(str(u))
                                    .with_error_code(CLUSTER_DENIED)
                                    .with_error_message(message(CLUSTER_DENIED))
                            })
                            .collect(),
                    ),
                )))
            }
            RequestKind::DescribeUserScramCredentials(_)
            | RequestKind::AlterUserScramCredentials(_)
            | RequestKind::SaslHandshake(_)
            | RequestKind::SaslAuthenticate(_) => Check::Pass,
            // Anything else is not served (the codec refuses it before this): nothing to allow.
            _ => Check::Pass,
        }
    }

    /// The error for a config resource `s` may not `op` (DESCRIBE_CONFIGS or ALTER_CONFIGS):
    /// topics by their own ACLs, brokers by the cluster's.
    fn config_denied(
        &self,
        s: &Session,
        resource_type: i8,
        name: &str,
        op: Operation,
    ) -> Option<i16> {
        match resource_type {
            2 => (!self.may(s, op, ResourceType::Topic, name)).then_some(TOPIC_DENIED),
            4 => (!self.may(s, op, ResourceType::Cluster, CLUSTER)).then_some(CLUSTER_DENIED),
            32 => (!self.may(s, op, ResourceType::Group, name)).then_some(GROUP_DENIED),
            _ => None,
        }
    }

    /// Metadata: a named topic `s` may not describe is answered TOPIC_AUTHORIZATION_FAILED and
    /// not created; of every topic, those are left out. A topic is created only if `s` may
    /// create it. Authorized operations are `s`'s own.
    fn authorize_metadata<'a>(&'a self, s: &'a Session, r: &mut MetadataRequest) -> Check<'a> {
        use Operation::*;
        use ResourceType::{Cluster, Topic};
        let mut refused = Vec::new();
        if let Some(topics) = &mut r.topics {
            topics.retain(|t| {
                let name = t
                    .name
                    .as_ref()
                    .map(|n| n.to_string())
                    .or_else(|| self.topics.by_id(&t.topic_id).map(|t| t.name.clone()));
                let ok = name
                    .as_ref()
                    .is_none_or(|n| self.may(s, Describe, Topic, n));
                if !ok {
                    refused.push((t.name.clone(), t.topic_id));
                }
                ok
            });
            let may_create = self.may(s, Create, Cluster, CLUSTER)
                || topics.iter().all(|t| {
                    t.name.as_ref().is_none_or(|n| {
                        self.topics.get(n).is_some() || self.may(s, Create, Topic, n)
                    })
                });
            if !may_create {
                r.allow_auto_topic_creation = false;
            }
        }
        let every_topic = r.topics.is_none();
        let topic_ops = r.include_topic_authorized_operations;
        let cluster_ops = r.include_cluster_authorized_operations;
        then(move |resp| {
            let ResponseKind::Metadata(resp) = resp else {
                return;
            };
            if every_topic {
                resp.topics.retain(|t| {
                    t.name
                        .as_ref()
                        .is_none_or(|n| self.may(s, Describe, Topic, n))
                });
            }
            if topic_ops {
                for t in &mut resp.topics {
                    let name = t.name.as_ref().map(|n| n.to_string()).unwrap_or_default();
                    t.topic_authorized_operations = self.authorizer.operations(s, Topic, &name);
                }
            }
            for (name, id) in refused {
                resp.topics.push(
                    metadata_response::MetadataResponseTopic::default()
                        .with_name(name)
                        .with_topic_id(id)
                        .with_error_code(TOPIC_DENIED)
                        .with_topic_authorized_operations(crate::authorized::NOT_ASKED),
                );
            }
            if cluster_ops {
                resp.cluster_authorized_operations =
                    self.authorizer.operations(s, Cluster, CLUSTER);
            }
        })
    }

    /// OffsetFetch: a group `s` may not describe answers GROUP_AUTHORIZATION_FAILED; topics it
    /// may not describe answer TOPIC_AUTHORIZATION_FAILED when named (`explicit`), and are left
    /// out of "every topic".
    fn filter_offset_fetch(
        &self,
        s: &Session,
        resp: &mut OffsetFetchResponse,
        explicit: bool,
        explicit_groups: &[bool],
    ) {
        use Operation::Describe;
        use ResourceType::{Group, Topic};
        // Versions 0–7 name one group, checked before the request was handled.
        for (g, explicit) in resp.groups.iter_mut().zip(explicit_groups.iter().copied()) {
            if !self.may(s, Describe, Group, &g.group_id) {
                g.error_code = GROUP_DENIED;
                g.topics.clear();
                continue;
            }
            if explicit {
                for t in &mut g.topics {
                    if !self.may(s, Describe, Topic, &t.name) {
                        for p in &mut t.partitions {
                            p.error_code = TOPIC_DENIED;
                            p.committed_offset = -1;
                        }
                    }
                }
            } else {
                g.topics.retain(|t| self.may(s, Describe, Topic, &t.name));
            }
        }
        if explicit {
            for t in &mut resp.topics {
                if !self.may(s, Describe, Topic, &t.name) {
                    for p in &mut t.partitions {
                        p.error_code = TOPIC_DENIED;
                        p.committed_offset = -1;
                    }
                }
            }
        } else {
            resp.topics
                .retain(|t| self.may(s, Describe, Topic, &t.name));
        }
    }

    /// AddPartitionsToTxn: a transactional id `s` may not write answers
    /// TRANSACTIONAL_ID_AUTHORIZATION_FAILED for each of its partitions; a topic it may not
    /// write answers TOPIC_AUTHORIZATION_FAILED, and the transaction's other partitions
    /// OPERATION_NOT_ATTEMPTED, as Kafka adds all of them or none.
    fn authorize_add_partitions<'a>(
        &'a self,
        s: &'a Session,
        r: &mut AddPartitionsToTxnRequest,
        version: i16,
    ) -> Check<'a> {
        use add_partitions_to_txn_response::{
            AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult,
            AddPartitionsToTxnTopicResult,
        };
        let verdict =
            |txn: &str, topics: &[add_partitions_to_txn_request::AddPartitionsToTxnTopic]| {
                let txn_ok = self.may(s, Operation::Write, ResourceType::TransactionalId, txn);
                let denied: Vec<bool> = topics
                    .iter()
                    .map(|t| !self.may(s, Operation::Write, ResourceType::Topic, &t.name))
                    .collect();
                if txn_ok && !denied.contains(&true) {
                    return None;
                }
                Some(
                    topics
                        .iter()
                        .zip(denied)
                        .map(|(t, denied)| {
                            let code = if !txn_ok {
                                TXN_DENIED
                            } else if denied {
                                TOPIC_DENIED
                            } else {
                                NOT_ATTEMPTED
                            };
                            AddPartitionsToTxnTopicResult::default()
                                .with_name(t.name.clone())
                                .with_results_by_partition(
                                    t.partitions
                                        .iter()
                                        .map(|p| {
                                            AddPartitionsToTxnPartitionResult::default()
                                                .with_partition_index(*p)
                                                .with_partition_error_code(code)
                                        })
                                        .collect(),
                                )
                        })
                        .collect::<Vec<_>>(),
                )
            };
        if version < 4 {
            return match verdict(&r.v3_and_below_transactional_id, &r.v3_and_below_topics) {
                None => Check::Pass,
                Some(results) => Check::Refuse(Box::new(ResponseKind::AddPartitionsToTxn(
                    AddPartitionsToTxnResponse::default()
                        .with_results_by_topic_v3_and_below(results),
                ))),
            };
        }
        let mut refused = Vec::new();
        r.transactions
            .retain(|t| match verdict(&t.transactional_id, &t.topics) {
                None => true,
                Some(results) => {
                    refused.push(
                        AddPartitionsToTxnResult::default()
                            .with_transactional_id(t.transactional_id.clone())
                            .with_topic_results(results),
                    );
                    false
                }
            });
        then(move |resp| {
            if let ResponseKind::AddPartitionsToTxn(resp) = resp {
                resp.results_by_transaction.extend(refused);
            }
        })
    }
}

/// A Produce answer of `code(topic)` for every partition of `topics`.
fn produce_refused(
    topics: Vec<produce_request::TopicProduceData>,
    code: impl Fn(&produce_request::TopicProduceData) -> i16,
) -> ProduceResponse {
    ProduceResponse::default().with_responses(
        topics
            .iter()
            .map(|t| {
                let code = code(t);
                produce_response::TopicProduceResponse::default()
                    .with_name(t.name.clone())
                    .with_topic_id(t.topic_id)
                    .with_partition_responses(
                        t.partition_data
                            .iter()
                            .map(|p| {
                                produce_response::PartitionProduceResponse::default()
                                    .with_index(p.index)
                                    .with_error_code(code)
                                    .with_error_message(message(code))
                                    .with_base_offset(-1)
                                    .with_log_append_time_ms(-1)
                                    .with_log_start_offset(-1)
                            })
                            .collect(),
                    )
            })
            .collect(),
    )
}

/// An OffsetCommit answer of `code` for `partitions` of a topic.
fn commit_refused(
    name: TopicName,
    id: uuid::Uuid,
    partitions: impl Iterator<Item = i32>,
    code: i16,
) -> offset_commit_response::OffsetCommitResponseTopic {
    offset_commit_response::OffsetCommitResponseTopic::default()
        .with_name(name)
        .with_topic_id(id)
        .with_partitions(
            partitions
                .map(|p| {
                    offset_commit_response::OffsetCommitResponsePartition::default()
                        .with_partition_index(p)
                        .with_error_code(code)
                })
                .collect(),
        )
}
