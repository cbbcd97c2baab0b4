//! The broker: the state every connection shares (stream store, topics, producer ids, consumer
//! groups, config, metrics) and the dispatch from a decoded request to its handler. Handlers
//! live in `handlers/`, one module per family of APIs; none does I/O on the socket.

use std::sync::Arc;

use inlet_common::Clock;
use inlet_storage::StreamStore;
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use kafka_protocol::protocol::StrBytes;
use sqlx::Row;
use tokio_util::sync::CancellationToken;

use crate::acl::{Check, Session};
use crate::codec::Request;
use crate::config::BrokerConfig;
use crate::error::{KafkaError, Result};
use crate::groups::{ClientInfo, GroupConfig, GroupCoordinator};
pub(crate) use crate::handlers::ProduceTurn;
use crate::metrics::Metrics;
use crate::producer_image::Snapshots;
use crate::producers::ProducerIds;
use crate::topics::Topics;
use crate::validate::PayloadCheck;

const MIGRATIONS: &[&str] =
    &["CREATE TABLE inlet_cluster (name VARCHAR(64) PRIMARY KEY, value TEXT NOT NULL)"];

pub use crate::config::BrokerAddr;

/// Who does what in a cluster, as the node that runs the broker sees it: the live nodes,
/// which node leads each partition's stream, and which coordinates each group. A single node
/// has none: it leads and coordinates everything itself.
pub trait ClusterView: Send + Sync + std::fmt::Debug {
    /// The live nodes (this one included).
    fn brokers(&self) -> Vec<BrokerAddr>;
    /// The node that owns `stream` and the epoch it owns it under, if any node does.
    fn leader(&self, stream: inlet_storage::StreamId) -> Option<(i32, i32)>;
    /// The node that coordinates the group `group_id`.
    fn coordinator(&self, group_id: &str) -> Option<i32>;
    /// Whether this node stands down for now (its lease lapsed by its own clock): it answers
    /// as the leader of no partition until it renews.
    fn stood_down(&self) -> bool {
        false
    }
}

/// The shared state of the Kafka endpoint.
pub struct Broker {
    pub(crate) store: Arc<StreamStore>,
    pub(crate) topics: Topics,
    pub(crate) producer_ids: ProducerIds,
    pub(crate) snapshots: Snapshots,
    pub(crate) groups: GroupCoordinator,
    /// The transaction coordinator's state (`txn`).
    pub(crate) txns: crate::txn::state::Transactions,
    /// The broker config in force: static, with the dynamic configs over it
    /// (`dynamic_config`).
    pub(crate) config: Arc<crate::dynamic_config::LiveConfig>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) cluster_id: String,
    /// The Schema Registry, for produce-time validation of table topics; `None` refuses
    /// produce to table topics whose records must be checked.
    pub(crate) registry: Option<Arc<inlet_schema_registry::Registry>>,
    /// Whether a table topic payload converts (the table workers' decoders, wired by the node).
    pub(crate) payloads: Arc<dyn PayloadCheck>,
    /// Cancelled when the node stops: long polls return at once.
    pub(crate) shutdown: CancellationToken,
    /// The cluster, when the node is one of several ([`Broker::set_cluster`]).
    pub(crate) cluster: parking_lot::RwLock<Option<Arc<dyn ClusterView>>>,
    /// Whether the node stands down ([`Broker::stand_down`]): the Kafka listener closes its
    /// connections and turns new ones away meanwhile.
    pub(crate) standing_down: tokio::sync::watch::Sender<bool>,
    /// Per stream, what ListOffsets' MAX_TIMESTAMP scans found so far
    /// (`handlers/fetch.rs`, `max_timestamp`): one small entry per stream asked about.
    pub(crate) max_timestamps:
        parking_lot::Mutex<std::collections::HashMap<u64, crate::handlers::MaxSeen>>,
    /// Per stream of a compacted topic, what the compactor remembers of it (`compaction`).
    pub(crate) compaction_state:
        parking_lot::Mutex<std::collections::HashMap<u64, crate::compaction::CleanState>>,
    /// The ACL authorizer (`acl`): off unless `authorizer.class.name` turns it on.
    pub(crate) authorizer: crate::acl::Authorizer,
    /// Failed authentications by client address (`sasl::failures`).
    pub(crate) auth_failures: crate::sasl::failures::FailedAuthentications,
    /// OAUTHBEARER's validator of identity providers' tokens (`sasl::oauthbearer`).
    pub(crate) oauth: crate::sasl::oauthbearer::Validator,
    /// The cluster's key for Inlet's own tokens (`acl::http`), once read.
    pub(crate) token_key: tokio::sync::OnceCell<Vec<u8>>,
    /// The fetch sessions (KIP-227) of clients fetching from this node.
    pub(crate) fetch_sessions: crate::fetch_sessions::FetchSessions,
    /// How this node calls the others (`inter_broker`), or why it cannot: refused at start
    /// when `inter.broker.listener.name` is given, and by a cluster node's start otherwise
    /// (`inlet::serve`, before it joins); a single node never calls another.
    pub(crate) inter_broker: std::result::Result<crate::inter_broker::InterBroker, String>,
    /// The client quotas and the rates they are measured by (`quota`).
    pub(crate) quotas: crate::quota::Quotas,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker")
            .field("cluster_id", &self.cluster_id)
            .finish_non_exhaustive()
    }
}

pub(crate) fn str(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}

impl Broker {
    /// Opens the broker's state over a stream store.
    pub async fn open(
        store: Arc<StreamStore>,
        config: BrokerConfig,
        clock: Arc<dyn Clock>,
        registry: Option<Arc<inlet_schema_registry::Registry>>,
        payloads: Arc<dyn PayloadCheck>,
    ) -> Result<Arc<Self>> {
        let config = Arc::new(crate::dynamic_config::LiveConfig::new(config));
        let meta = store.meta().clone();
        meta.migrate("ingest.cluster", MIGRATIONS).await?;
        meta.migrate("ingest.broker_configs", crate::dynamic_config::MIGRATIONS)
            .await?;
        meta.migrate("ingest.acls", crate::acl::store::MIGRATIONS)
            .await?;
        meta.migrate(
            "ingest.scram_credentials",
            crate::sasl::credentials::MIGRATIONS,
        )
        .await?;
        meta.migrate("ingest.compaction", crate::compaction::MIGRATIONS)
            .await?;
        meta.migrate("ingest.client_quotas", crate::quota::store::MIGRATIONS)
            .await?;
        let cluster_id = Self::load_cluster_id(&meta).await?;
        let topics = Topics::open(store.clone(), config.clone(), clock.clone()).await?;
        let producer_ids = ProducerIds::open(meta.clone()).await?;
        let snapshots = Snapshots::open(meta.clone()).await?;
        let txns = crate::txn::state::Transactions::open(meta.clone()).await?;
        let static_config = config.current();
        let groups = GroupCoordinator::open(
            meta,
            GroupConfig {
                initial_rebalance_delay_ms: static_config.group_initial_rebalance_delay_ms,
                min_session_timeout_ms: static_config.group_min_session_timeout_ms,
                max_session_timeout_ms: static_config.group_max_session_timeout_ms,
                node_id: u64::try_from(static_config.node_id).unwrap_or_default(),
            },
            clock.clone(),
        )
        .await?;
        let broker = Arc::new(Broker {
            store,
            topics,
            producer_ids,
            snapshots,
            groups,
            txns,
            metrics: Arc::new(Metrics::default()),
            clock,
            cluster_id,
            registry,
            payloads,
            shutdown: CancellationToken::new(),
            cluster: parking_lot::RwLock::new(None),
            standing_down: tokio::sync::watch::Sender::new(false),
            max_timestamps: Default::default(),
            compaction_state: Default::default(),
            fetch_sessions: crate::fetch_sessions::FetchSessions::new(
                static_config.fetch_session_slots as usize,
                usize::try_from(static_config.fetch_session_max_bytes).unwrap_or(usize::MAX),
            ),
            auth_failures: Default::default(),
            quotas: Default::default(),
            inter_broker: match crate::inter_broker::InterBroker::from_config(&static_config) {
                Err(e) if !static_config.inter_broker_listener_name.is_empty() => {
                    return Err(crate::error::KafkaError::invalid_config(e))
                }
                r => r,
            },
            oauth: crate::sasl::oauthbearer::Validator::new(
                crate::sasl::oauthbearer::Settings::from_configs(
                    &static_config.oauthbearer_configs,
                )
                .map_err(crate::error::KafkaError::invalid_config)?,
            ),
            token_key: tokio::sync::OnceCell::new(),
            authorizer: crate::acl::Authorizer::new(crate::acl::AuthorizerSettings {
                enabled: !static_config.authorizer_class_name.is_empty(),
                super_users: static_config.super_users.clone(),
                allow_if_no_acl: static_config.allow_everyone_if_no_acl_found,
            }),
            config,
        });
        // The dynamic configs and ACLs stored by earlier runs and by other nodes.
        broker.reload_configs().await?;
        broker.reload_acls().await?;
        broker.reload_quotas().await?;
        Ok(broker)
    }

    /// Makes this broker one node of a cluster: Metadata lists the live nodes and each
    /// partition's owner, FindCoordinator names each group's node, and group requests for
    /// groups another node coordinates are answered `NOT_COORDINATOR`.
    pub fn set_cluster(&self, view: Arc<dyn ClusterView>) {
        *self.cluster.write() = Some(view);
    }

    /// Stands the node down (`true`) or back up: while it stands down, the Kafka listener
    /// closes every connection and turns new ones away, as a stopped broker would. Its view
    /// of the cluster is stale (it cannot read the metadata store), so Metadata from it would
    /// keep clients on partitions other nodes took meanwhile; turned away, they ask the others.
    pub fn stand_down(&self, on: bool) {
        self.standing_down
            .send_if_modified(|was| std::mem::replace(was, on) != on);
    }

    /// Whether the node stands down, and its changes ([`Broker::stand_down`]).
    pub(crate) fn standing_down(&self) -> tokio::sync::watch::Receiver<bool> {
        self.standing_down.subscribe()
    }

    /// The cluster view, if this node is one of several.
    pub fn cluster_view(&self) -> Option<Arc<dyn ClusterView>> {
        self.cluster.read().clone()
    }

    /// Drops this node's state (membership, claim, cached offsets) of every group it holds
    /// but does not coordinate in the current cluster view: the group moved to another node,
    /// and if it comes back it is claimed and read afresh. Returns the groups dropped.
    pub fn forget_groups_elsewhere(&self) -> Vec<String> {
        let mut gone = self.groups.held_groups();
        gone.retain(|g| !self.coordinates(g));
        for g in &gone {
            self.groups.forget(g);
        }
        gone
    }

    /// Every consumer group's owner (the node that last claimed it, whichever node asks) and
    /// ownership epoch, by group id.
    pub async fn group_owners(&self) -> inlet_storage::Result<Vec<(String, u64, u64)>> {
        self.groups.owners().await
    }

    /// The groups this node coordinates now and holds membership state for.
    pub fn coordinated_groups(&self) -> Vec<String> {
        let mut ids = self.groups.group_ids();
        ids.retain(|g| self.coordinates(g));
        ids
    }

    /// Whether this node coordinates `group_id` (always, on a single node).
    pub(crate) fn coordinates(&self, group_id: &str) -> bool {
        match self.cluster_view() {
            None => true,
            Some(view) => view.coordinator(group_id) == Some(self.config().node_id),
        }
    }

    /// The stream of a partition this node leads, or `NOT_LEADER_OR_FOLLOWER`.
    pub(crate) fn led_stream(
        &self,
        stream: inlet_storage::StreamId,
    ) -> Result<inlet_storage::StreamInfo> {
        self.check_standing()?;
        if !self.store.owns(stream) {
            return Err(KafkaError::new(
                kafka_protocol::ResponseError::NotLeaderOrFollower,
                "another node leads this partition (or none yet): refresh the metadata",
            ));
        }
        Ok(self.store.stream(stream)?)
    }

    /// `NOT_LEADER_OR_FOLLOWER` while this node stands down ([`ClusterView::stood_down`]).
    pub(crate) fn check_standing(&self) -> Result<()> {
        if self.cluster_view().is_some_and(|v| v.stood_down()) {
            return Err(KafkaError::new(
                kafka_protocol::ResponseError::NotLeaderOrFollower,
                "this node could not renew its cluster lease (is the metadata store reachable?) \
                 and leads no partition until it does: refresh the metadata",
            ));
        }
        Ok(())
    }

    /// The leader epoch of a partition this node leads: the epoch it owns the partition's
    /// stream under. Metadata reports it, every batch appended is stamped with it, and it
    /// rises with every move (0 on a single node whose streams never moved).
    pub(crate) fn leader_epoch(&self, stream: inlet_storage::StreamId) -> Result<i32> {
        self.check_standing()?;
        match self.store.owned_epoch(stream) {
            Some(epoch) => Ok(i32::try_from(epoch).unwrap_or(i32::MAX)),
            None => Err(KafkaError::new(
                kafka_protocol::ResponseError::NotLeaderOrFollower,
                "another node leads this partition (or none yet): refresh the metadata",
            )),
        }
    }

    /// Kafka's check of a request's `current_leader_epoch` (-1: none given) against this
    /// node's leader epoch of the partition, which it returns: an older one answers
    /// `FENCED_LEADER_EPOCH` (the client's metadata is stale), a newer one
    /// `UNKNOWN_LEADER_EPOCH` (this node has not learnt that it lost the partition yet, and
    /// must not answer from what it holds).
    pub(crate) fn check_leader_epoch(
        &self,
        stream: inlet_storage::StreamId,
        current: i32,
    ) -> Result<i32> {
        let ours = self.leader_epoch(stream)?;
        if current >= 0 && current < ours {
            return Err(KafkaError::new(
                kafka_protocol::ResponseError::FencedLeaderEpoch,
                format!("leader epoch {current} is older than this leader's {ours}: refresh the metadata"),
            ));
        }
        if current > ours {
            return Err(KafkaError::new(
                kafka_protocol::ResponseError::UnknownLeaderEpoch,
                format!("leader epoch {current} is newer than this node's {ours}: the partition may have moved"),
            ));
        }
        Ok(ours)
    }

    /// The cluster id, created once and kept in the metadata store.
    async fn load_cluster_id(meta: &inlet_storage::MetaStore) -> Result<String> {
        #[allow(clippy::disallowed_methods)] // a cluster id: unique is all it must be
        let fresh = uuid::Uuid::new_v4().simple().to_string();
        sqlx::query(
            "INSERT INTO inlet_cluster (name, value) VALUES ('cluster_id', $1)
             ON CONFLICT (name) DO NOTHING",
        )
        .bind(&fresh[..22])
        .execute(meta.pool())
        .await
        .map_err(inlet_storage::Error::from)?;
        let row = sqlx::query("SELECT value FROM inlet_cluster WHERE name = 'cluster_id'")
            .fetch_one(meta.pool())
            .await
            .map_err(inlet_storage::Error::from)?;
        Ok(row.try_get("value").map_err(inlet_storage::Error::from)?)
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The consumer groups this node coordinates: state, members and committed offsets.
    pub fn group_views(&self) -> Vec<crate::GroupView> {
        self.groups.views()
    }

    /// The end offset of `topic`'s partition `partition` where this node holds its stream.
    pub fn partition_end(&self, topic: &str, partition: i32) -> Option<u64> {
        let stream = self.topics.get(topic)?.partition(partition)?.stream;
        self.store.end_offset(stream).ok()
    }

    /// Each consumer group this node coordinates, per topic it committed offsets for: the
    /// records between its committed offsets and the partitions' ends (partitions of streams
    /// this node does not hold count nothing), as (group, topic, lag). For `/metrics`
    /// (`inlet_kafka_group_lag`): one series per group and topic, so its size grows with
    /// the groups this node coordinates, not with partitions.
    pub fn group_lags(&self) -> Vec<(String, String, u64)> {
        let mut out = Vec::new();
        for view in self.group_views() {
            let mut by_topic: std::collections::BTreeMap<String, u64> = Default::default();
            for (topic, partition, committed) in view.offsets {
                let Some(end) = self.partition_end(&topic, partition) else {
                    continue;
                };
                *by_topic.entry(topic).or_default() += end.saturating_sub(committed.max(0) as u64);
            }
            out.extend(
                by_topic
                    .into_iter()
                    .map(|(topic, lag)| (view.group.clone(), topic, lag)),
            );
        }
        out
    }

    /// For how much longer authentications from `ip` are refused (`sasl::failures`); None:
    /// it may try.
    pub(crate) fn authentication_refused_for(&self, ip: std::net::IpAddr) -> Option<u64> {
        let c = self.config();
        self.auth_failures.refused_for(
            ip,
            self.clock.now_ms(),
            c.authentication_failures_max,
            c.authentication_failure_window_ms,
        )
    }

    /// Counts a failed authentication from `ip`.
    /// Validates an OAUTHBEARER token (`sasl::oauthbearer`): Inlet's own (HS256, from the HTTP
    /// listener's token endpoint) with the cluster's key, any other with the identity
    /// provider's keys.
    pub(crate) async fn validate_bearer(
        &self,
        token: &str,
        now_ms: u64,
    ) -> std::result::Result<crate::sasl::oauthbearer::Validated, String> {
        if crate::sasl::oauthbearer::alg_of(token).as_deref() == Some("HS256") {
            let key = crate::acl::http::token_key(self).await?;
            let (subject, expires_s) = crate::acl::http::verify_token(key, token, now_ms / 1000)?;
            return Ok(crate::sasl::oauthbearer::Validated {
                subject,
                expires_ms: expires_s.saturating_mul(1000),
            });
        }
        self.oauth.validate(token, now_ms).await
    }

    pub(crate) fn authentication_failed(&self, ip: std::net::IpAddr) {
        let c = self.config();
        self.auth_failures.failed(
            ip,
            self.clock.now_ms(),
            c.authentication_failure_window_ms,
            c.authentication_failure_tracker_bytes,
        );
    }

    /// The broker config in force now (static, with the dynamic configs over it): read it
    /// where a value is used, so that a dynamic change takes effect.
    pub fn config(&self) -> Arc<BrokerConfig> {
        self.config.current()
    }

    pub fn store(&self) -> &Arc<StreamStore> {
        &self.store
    }

    pub fn topics(&self) -> &Topics {
        &self.topics
    }

    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    /// Stops long polls and group waits; connections finish what they have.
    pub async fn shutdown(&self) {
        self.shutdown.cancel();
        self.groups.shutdown().await;
    }

    /// Answers one request from `session` (its principal, for the authorizer, and the
    /// client's address, for DescribeGroups). `None` means no response is sent (Produce with
    /// acks=0).
    pub async fn handle(&self, request: Request, session: &Session) -> Option<ResponseKind> {
        self.handle_in_turn(request, session, ProduceTurn::default())
            .await
    }

    /// [`Self::handle`] for a request that keeps its place among its connection's Produce
    /// requests (`turn`, see [`Broker::produce`]; other requests ignore it). With the
    /// authorizer on, the request is checked first (`acl::enforce`).
    pub async fn handle_in_turn(
        &self,
        mut request: Request,
        session: &Session,
        turn: ProduceTurn,
    ) -> Option<ResponseKind> {
        let version = request.version();
        let audited = crate::audit::Pending::of(&request.body);
        let check = if self.authorizer.enabled() {
            self.authorize(session, &mut request.body, version)
        } else {
            Check::Pass
        };
        let patch = match check {
            Check::Refuse(answer) => {
                if let Some(audited) = audited {
                    audited.finish(session, Some(&answer));
                }
                return Some(*answer);
            }
            Check::Then(patch) => Some(patch),
            Check::Pass => None,
        };
        let mut answer = self.dispatch(request, &session.host, turn).await;
        if let (Some(patch), Some(answer)) = (patch, answer.as_mut()) {
            patch(answer);
        }
        if let Some(audited) = audited {
            audited.finish(session, answer.as_ref());
        }
        if let Some(answer) = answer.as_mut() {
            self.readdress(&session.listener, answer);
        }
        answer
    }

    /// Hands `request` to its API's handler.
    async fn dispatch(
        &self,
        request: Request,
        peer: &str,
        turn: ProduceTurn,
    ) -> Option<ResponseKind> {
        let version = request.version();
        let client_id = request
            .header
            .client_id
            .as_ref()
            .map(|s| s.as_str().to_string())
            .unwrap_or_default();
        let client = ClientInfo {
            client_id,
            client_host: format!("/{peer}"),
        };
        if let Some(refused) = self.not_coordinator(&request.body, version) {
            return Some(refused);
        }
        Some(match request.body {
            RequestKind::ApiVersions(r) => ResponseKind::ApiVersions(self.api_versions(r, version)),
            RequestKind::Metadata(r) => ResponseKind::Metadata(self.metadata(r, version).await),
            RequestKind::Produce(r) => {
                return self
                    .produce(r, version, turn)
                    .await
                    .map(ResponseKind::Produce)
            }
            RequestKind::Fetch(r) => ResponseKind::Fetch(self.fetch(r, version).await),
            RequestKind::ListOffsets(r) => {
                ResponseKind::ListOffsets(self.list_offsets(r, version).await)
            }
            RequestKind::OffsetForLeaderEpoch(r) => {
                ResponseKind::OffsetForLeaderEpoch(self.offset_for_leader_epoch(r, version))
            }
            RequestKind::DeleteRecords(r) => {
                ResponseKind::DeleteRecords(self.delete_records(r, version).await)
            }
            RequestKind::InitProducerId(r) => {
                ResponseKind::InitProducerId(self.init_producer_id(r, version).await)
            }
            RequestKind::FindCoordinator(r) => {
                ResponseKind::FindCoordinator(self.find_coordinator(r, version))
            }
            RequestKind::DescribeCluster(r) => {
                ResponseKind::DescribeCluster(self.describe_cluster(r, version))
            }
            RequestKind::DescribeTopicPartitions(r) => {
                ResponseKind::DescribeTopicPartitions(self.describe_topic_partitions(r, version))
            }
            RequestKind::DescribeProducers(r) => {
                ResponseKind::DescribeProducers(self.describe_producers(r, version).await)
            }
            RequestKind::DescribeLogDirs(r) => {
                ResponseKind::DescribeLogDirs(self.describe_log_dirs(r, version))
            }
            RequestKind::CreateTopics(r) => {
                ResponseKind::CreateTopics(self.create_topics(r, version).await)
            }
            RequestKind::DeleteTopics(r) => {
                ResponseKind::DeleteTopics(self.delete_topics(r, version).await)
            }
            RequestKind::CreatePartitions(r) => {
                ResponseKind::CreatePartitions(self.create_partitions(r, version).await)
            }
            RequestKind::DescribeConfigs(r) => {
                ResponseKind::DescribeConfigs(self.describe_configs(r, version))
            }
            RequestKind::AlterConfigs(r) => {
                ResponseKind::AlterConfigs(self.alter_configs(r, version).await)
            }
            RequestKind::IncrementalAlterConfigs(r) => ResponseKind::IncrementalAlterConfigs(
                self.incremental_alter_configs(r, version).await,
            ),
            RequestKind::JoinGroup(r) => {
                ResponseKind::JoinGroup(self.groups.join_group_from(r, version, &client).await)
            }
            RequestKind::SyncGroup(r) => {
                ResponseKind::SyncGroup(self.groups.sync_group(r, version).await)
            }
            RequestKind::Heartbeat(r) => {
                ResponseKind::Heartbeat(self.groups.heartbeat(r, version).await)
            }
            RequestKind::LeaveGroup(r) => {
                ResponseKind::LeaveGroup(self.groups.leave_group(r, version).await)
            }
            RequestKind::OffsetCommit(r) => {
                ResponseKind::OffsetCommit(self.offset_commit(r, version).await)
            }
            RequestKind::OffsetFetch(r) => {
                ResponseKind::OffsetFetch(self.groups.offset_fetch(r, version).await)
            }
            RequestKind::DescribeGroups(r) => {
                ResponseKind::DescribeGroups(self.describe_groups(r, version).await)
            }
            RequestKind::ListGroups(r) => {
                ResponseKind::ListGroups(self.list_groups(r, version).await)
            }
            RequestKind::DeleteGroups(r) => {
                ResponseKind::DeleteGroups(self.delete_groups(r, version).await)
            }
            RequestKind::OffsetDelete(r) => {
                ResponseKind::OffsetDelete(self.groups.offset_delete(r, version).await)
            }
            RequestKind::AddPartitionsToTxn(r) => {
                ResponseKind::AddPartitionsToTxn(self.add_partitions_to_txn(r, version).await)
            }
            RequestKind::AddOffsetsToTxn(r) => {
                ResponseKind::AddOffsetsToTxn(self.add_offsets_to_txn(r, version).await)
            }
            RequestKind::EndTxn(r) => ResponseKind::EndTxn(self.end_txn(r, version).await),
            RequestKind::TxnOffsetCommit(r) => {
                ResponseKind::TxnOffsetCommit(self.groups.txn_offset_commit(r, version).await)
            }
            RequestKind::WriteTxnMarkers(r) => {
                ResponseKind::WriteTxnMarkers(self.write_txn_markers(r, version).await)
            }
            RequestKind::DescribeTransactions(r) => {
                ResponseKind::DescribeTransactions(self.describe_transactions(r, version).await)
            }
            RequestKind::ListTransactions(r) => {
                ResponseKind::ListTransactions(self.list_transactions(r, version).await)
            }
            RequestKind::CreateAcls(r) => {
                ResponseKind::CreateAcls(self.create_acls(r, version).await)
            }
            RequestKind::DescribeAcls(r) => {
                ResponseKind::DescribeAcls(self.describe_acls(r, version).await)
            }
            RequestKind::DeleteAcls(r) => {
                ResponseKind::DeleteAcls(self.delete_acls(r, version).await)
            }
            RequestKind::DescribeClientQuotas(r) => {
                ResponseKind::DescribeClientQuotas(self.describe_client_quotas(r, version).await)
            }
            RequestKind::AlterClientQuotas(r) => {
                ResponseKind::AlterClientQuotas(self.alter_client_quotas(r, version).await)
            }
            RequestKind::DescribeUserScramCredentials(r) => {
                ResponseKind::DescribeUserScramCredentials(
                    self.describe_user_scram_credentials(r, version).await,
                )
            }
            RequestKind::AlterUserScramCredentials(r) => ResponseKind::AlterUserScramCredentials(
                self.alter_user_scram_credentials(r, version).await,
            ),
            // Authentication is the connection's (`server`, `sasl`): here it is either not
            // needed (a listener without SASL) or over, as Kafka answers.
            RequestKind::SaslHandshake(_) => ResponseKind::SaslHandshake(
                kafka_protocol::messages::SaslHandshakeResponse::default()
                    .with_error_code(kafka_protocol::ResponseError::IllegalSaslState.code()),
            ),
            RequestKind::SaslAuthenticate(_) => ResponseKind::SaslAuthenticate(
                kafka_protocol::messages::SaslAuthenticateResponse::default()
                    .with_error_code(kafka_protocol::ResponseError::IllegalSaslState.code())
                    .with_error_message(Some(str("this listener does not authenticate with SASL"))),
            ),
            other => {
                // The codec only lets through what `SUPPORTED` lists, and every entry there
                // has an arm above.
                tracing::error!(api = ?ApiKey::try_from(request.header.request_api_key), "no handler for a supported API");
                let _ = other;
                return None;
            }
        })
    }

    /// Looks a topic up, creating it when auto-creation allows.
    pub(crate) async fn topic_for_write(&self, name: &str) -> Result<Arc<crate::topics::Topic>> {
        crate::topics::validate_name(name)?;
        self.topics
            .get_or_auto_create(name)
            .await?
            .ok_or_else(|| KafkaError::unknown_topic(name))
    }

    pub(crate) fn now_ms(&self) -> i64 {
        self.clock.now_ms() as i64
    }

    /// The node's clock, as the stream store reads it (epoch milliseconds).
    pub fn clock_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// The node's clock, for the parts the node starts beside the broker.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }
}
