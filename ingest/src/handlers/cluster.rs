//! ApiVersions, Metadata, FindCoordinator, DescribeCluster and InitProducerId: what a client
//! asks before it produces or consumes.

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

use crate::broker::{str, Broker, BrokerAddr};
use crate::codec::SUPPORTED;
use crate::topics::Topic;

impl Broker {
    pub(crate) fn api_versions(
        &self,
        _r: ApiVersionsRequest,
        _version: i16,
    ) -> ApiVersionsResponse {
        ApiVersionsResponse::default().with_api_keys(
            SUPPORTED
                .iter()
                .map(|&(k, min, max)| {
                    ApiVersion::default()
                        .with_api_key(k as i16)
                        .with_min_version(min)
                        .with_max_version(max)
                })
                .collect(),
        )
    }

    fn broker_id(&self) -> BrokerId {
        BrokerId(self.config().node_id)
    }

    /// The live nodes as clients are told of them: this one alone on a single node.
    pub(crate) fn brokers(&self) -> Vec<BrokerAddr> {
        match self.cluster_view() {
            Some(view) => view.brokers(),
            None => {
                let config = self.config();
                vec![BrokerAddr {
                    node_id: config.node_id,
                    host: config.advertised_host.clone(),
                    port: config.advertised_port,
                    listeners: config.advertised_listeners.clone(),
                }]
            }
        }
    }

    /// Gives the addresses in `answer` (Metadata's brokers, FindCoordinator's coordinators,
    /// DescribeCluster's brokers) on `listener`, the one the request came in on, as Kafka
    /// answers each listener with its own addresses. The first listener's are there already.
    pub(crate) fn readdress(&self, listener: &str, answer: &mut ResponseKind) {
        let first = self.config().listeners.first().map(|l| l.name.clone());
        if first.as_deref().is_none_or(|f| f == listener) {
            return;
        }
        let brokers = self.brokers();
        let on = |node: i32| {
            brokers.iter().find(|b| b.node_id == node).map(|b| {
                let (host, port) = b.on(listener);
                (host.to_string(), i32::from(port))
            })
        };
        match answer {
            ResponseKind::Metadata(r) => {
                for b in &mut r.brokers {
                    if let Some((host, port)) = on(b.node_id.0) {
                        b.host = str(host);
                        b.port = port;
                    }
                }
            }
            ResponseKind::DescribeCluster(r) => {
                for b in &mut r.brokers {
                    if let Some((host, port)) = on(b.broker_id.0) {
                        b.host = str(host);
                        b.port = port;
                    }
                }
            }
            ResponseKind::FindCoordinator(r) => {
                // Versions 0–3 answer one key at the top; 4 and later only in `coordinators`
                // (the top's address fields do not exist there, and must stay empty).
                if r.node_id.0 >= 0 && !r.host.is_empty() {
                    if let Some((host, port)) = on(r.node_id.0) {
                        r.host = str(host);
                        r.port = port;
                    }
                }
                for c in &mut r.coordinators {
                    if c.node_id.0 >= 0 {
                        if let Some((host, port)) = on(c.node_id.0) {
                            c.host = str(host);
                            c.port = port;
                        }
                    }
                }
            }
            _ => {}
        }
    }

    pub(crate) fn topic_metadata(&self, topic: &Topic) -> MetadataResponseTopic {
        let view = self.cluster_view();
        MetadataResponseTopic::default()
            .with_name(Some(TopicName(str(topic.name.clone()))))
            .with_topic_id(topic.id)
            .with_partitions(
                topic
                    .partitions
                    .iter()
                    .map(|p| {
                        let partition =
                            MetadataResponsePartition::default().with_partition_index(p.index);
                        let leader = match &view {
                            None => Some((
                                self.config().node_id,
                                self.leader_epoch(p.stream).unwrap_or(0),
                            )),
                            Some(view) => view.leader(p.stream),
                        };
                        match leader {
                            // The leader epoch is the stream's ownership epoch: it rises with
                            // every move, so clients never take an older answer for newer.
                            Some((node, epoch)) => partition
                                .with_leader_id(BrokerId(node))
                                .with_leader_epoch(epoch)
                                .with_replica_nodes(vec![BrokerId(node)])
                                .with_isr_nodes(vec![BrokerId(node)]),
                            None => partition
                                .with_error_code(ResponseError::LeaderNotAvailable.code())
                                .with_leader_id(BrokerId(-1))
                                .with_leader_epoch(-1),
                        }
                    })
                    .collect(),
            )
    }

    pub(crate) async fn metadata(&self, r: MetadataRequest, version: i16) -> MetadataResponse {
        // v0 asks for every topic with an empty list; later versions with null.
        let all = match &r.topics {
            None => true,
            Some(t) => t.is_empty() && version == 0,
        };
        let auto_create = version < 4 || r.allow_auto_topic_creation;
        let topic_operations = crate::authorized::topic(r.include_topic_authorized_operations);
        let mut topics = Vec::new();
        if all {
            topics = self
                .topics
                .list()
                .iter()
                .map(|t| {
                    self.topic_metadata(t)
                        .with_topic_authorized_operations(topic_operations)
                })
                .collect();
        } else {
            for wanted in r.topics.unwrap_or_default() {
                let by_name = wanted.name.as_ref().map(|n| n.0.as_str().to_string());
                let found = match &by_name {
                    Some(name) => {
                        if let Err(e) = crate::topics::validate_name(name) {
                            Err(e)
                        } else if auto_create {
                            self.topics.get_or_auto_create(name).await.and_then(|t| {
                                t.ok_or_else(|| crate::error::KafkaError::unknown_topic(name))
                            })
                        } else {
                            self.topics
                                .get(name)
                                .ok_or_else(|| crate::error::KafkaError::unknown_topic(name))
                        }
                    }
                    None => self.topics.by_id(&wanted.topic_id).ok_or_else(|| {
                        crate::error::KafkaError::new(
                            ResponseError::UnknownTopicId,
                            format!("no topic has id {}", wanted.topic_id),
                        )
                    }),
                };
                topics.push(match found {
                    Ok(t) => self
                        .topic_metadata(&t)
                        .with_topic_authorized_operations(topic_operations),
                    Err(e) => MetadataResponseTopic::default()
                        .with_error_code(e.code())
                        .with_name(wanted.name.clone())
                        .with_topic_id(wanted.topic_id),
                });
            }
        }
        let mut response = MetadataResponse::default()
            .with_brokers(
                self.brokers()
                    .into_iter()
                    .map(|b| {
                        MetadataResponseBroker::default()
                            .with_node_id(BrokerId(b.node_id))
                            .with_host(str(b.host))
                            .with_port(b.port as i32)
                    })
                    .collect(),
            )
            .with_controller_id(self.broker_id())
            .with_topics(topics);
        if version >= 2 {
            response.cluster_id = Some(str(self.cluster_id.clone()));
        }
        if (8..=10).contains(&version) {
            response.cluster_authorized_operations =
                crate::authorized::cluster(r.include_cluster_authorized_operations);
        }
        response
    }

    pub(crate) fn find_coordinator(
        &self,
        r: FindCoordinatorRequest,
        version: i16,
    ) -> FindCoordinatorResponse {
        let answer = |key_type: i8| -> Result<(), String> {
            match key_type {
                0 | 1 => Ok(()),
                t => Err(format!("unknown coordinator key type {t}")),
            }
        };
        let brokers = self.brokers();
        // The node that coordinates `key`: this one on a single node; in a cluster the one the
        // view names, which must be live.
        let coordinator = |key: &str| -> Result<BrokerAddr, String> {
            let node = match self.cluster_view() {
                None => self.config().node_id,
                Some(view) => view
                    .coordinator(key)
                    .ok_or_else(|| "no node coordinates this group yet".to_string())?,
            };
            brokers
                .iter()
                .find(|b| b.node_id == node)
                .cloned()
                .ok_or_else(|| format!("the coordinator, node {node}, is not live"))
        };
        let answer = |key_type: i8, key: &str| answer(key_type).and_then(|()| coordinator(key));
        if version >= 4 {
            let coordinators = r
                .coordinator_keys
                .iter()
                .map(|key| match answer(r.key_type, key.as_str()) {
                    Ok(b) => Coordinator::default()
                        .with_key(key.clone())
                        .with_node_id(BrokerId(b.node_id))
                        .with_host(str(b.host))
                        .with_port(b.port as i32),
                    Err(msg) => Coordinator::default()
                        .with_key(key.clone())
                        .with_node_id(BrokerId(-1))
                        .with_error_code(ResponseError::CoordinatorNotAvailable.code())
                        .with_error_message(Some(str(msg))),
                })
                .collect();
            return FindCoordinatorResponse::default().with_coordinators(coordinators);
        }
        match answer(r.key_type, r.key.as_str()) {
            Ok(b) => FindCoordinatorResponse::default()
                .with_node_id(BrokerId(b.node_id))
                .with_host(str(b.host))
                .with_port(b.port as i32),
            Err(msg) => {
                let mut resp = FindCoordinatorResponse::default()
                    .with_node_id(BrokerId(-1))
                    .with_port(-1)
                    .with_error_code(ResponseError::CoordinatorNotAvailable.code());
                if version >= 1 {
                    resp.error_message = Some(str(msg));
                }
                resp
            }
        }
    }

    pub(crate) fn describe_cluster(
        &self,
        r: DescribeClusterRequest,
        _version: i16,
    ) -> DescribeClusterResponse {
        DescribeClusterResponse::default()
            .with_cluster_authorized_operations(crate::authorized::cluster(
                r.include_cluster_authorized_operations,
            ))
            .with_cluster_id(str(self.cluster_id.clone()))
            .with_controller_id(self.broker_id())
            .with_brokers(
                self.brokers()
                    .into_iter()
                    .map(|b| {
                        DescribeClusterBroker::default()
                            .with_broker_id(BrokerId(b.node_id))
                            .with_host(str(b.host))
                            .with_port(b.port as i32)
                    })
                    .collect(),
            )
    }

    pub(crate) async fn init_producer_id(
        &self,
        r: InitProducerIdRequest,
        version: i16,
    ) -> InitProducerIdResponse {
        let fail = |code: ResponseError| {
            InitProducerIdResponse::default()
                .with_error_code(code.code())
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1)
        };
        match r.transactional_id.as_deref() {
            None => {}
            // As Kafka: an empty transactional id is a malformed request.
            Some(id) if id.is_empty() => return fail(ResponseError::InvalidRequest),
            Some(id) => {
                return match self.init_transactional(id, &r, version).await {
                    Ok((producer_id, epoch)) => InitProducerIdResponse::default()
                        .with_producer_id(ProducerId(producer_id))
                        .with_producer_epoch(epoch),
                    Err(e) => {
                        tracing::debug!(transactional_id = id.as_str(), error = %e, "InitProducerId refused");
                        fail(e.code)
                    }
                };
            }
        }
        // An idempotent (non-transactional) producer always gets a new id at epoch 0, as
        // Kafka answers it: even when it names its current id and epoch (KIP-360), which
        // clients accept. Bumping the epoch of the id a request names would let any client
        // fence any other producer, since nothing ties an id to the connection that holds it.
        // Not while this node stands down (it may not reach the metadata store, whose counter
        // hands the ids out), and never waiting on it for long: the client asks another node.
        if self.check_standing().is_err() {
            return fail(ResponseError::CoordinatorNotAvailable);
        }
        match inlet_storage::bounded(async {
            self.producer_ids
                .next()
                .await
                .map_err(|e| inlet_storage::Error::Internal(e.to_string()))
        })
        .await
        {
            Ok(id) => InitProducerIdResponse::default()
                .with_producer_id(ProducerId(id))
                .with_producer_epoch(0),
            Err(e) => {
                tracing::warn!(error = %e, "allocating a producer id failed");
                fail(ResponseError::CoordinatorNotAvailable)
            }
        }
    }
}
