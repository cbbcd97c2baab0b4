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

use crate::codec::Request;
use crate::config::BrokerConfig;
use crate::error::{KafkaError, Result};
use crate::groups::{ClientInfo, GroupConfig, GroupCoordinator};
pub(crate) use crate::handlers::ProduceTurn;
use crate::metrics::Metrics;
use crate::producers::ProducerIds;
use crate::topics::Topics;
use crate::validate::PayloadCheck;

const MIGRATIONS: &[&str] =
    &["CREATE TABLE inlet_cluster (name VARCHAR(64) PRIMARY KEY, value TEXT NOT NULL)"];

/// The shared state of the Kafka endpoint.
pub struct Broker {
    pub(crate) store: Arc<StreamStore>,
    pub(crate) topics: Topics,
    pub(crate) producer_ids: ProducerIds,
    pub(crate) groups: GroupCoordinator,
    pub(crate) config: Arc<BrokerConfig>,
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
        let config = Arc::new(config);
        let meta = store.meta().clone();
        meta.migrate("ingest.cluster", MIGRATIONS).await?;
        let cluster_id = Self::load_cluster_id(&meta).await?;
        let topics = Topics::open(store.clone(), config.clone(), clock.clone()).await?;
        let producer_ids = ProducerIds::open(meta.clone()).await?;
        let groups = GroupCoordinator::open(
            meta,
            GroupConfig {
                initial_rebalance_delay_ms: config.group_initial_rebalance_delay_ms,
                min_session_timeout_ms: config.group_min_session_timeout_ms,
                max_session_timeout_ms: config.group_max_session_timeout_ms,
            },
            clock.clone(),
        )
        .await?;
        Ok(Arc::new(Broker {
            store,
            topics,
            producer_ids,
            groups,
            config,
            metrics: Arc::new(Metrics::default()),
            clock,
            cluster_id,
            registry,
            payloads,
            shutdown: CancellationToken::new(),
        }))
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

    pub fn config(&self) -> &BrokerConfig {
        &self.config
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

    /// Answers one request. `None` means no response is sent (Produce with acks=0).
    /// `peer` is the client's address, for DescribeGroups.
    pub async fn handle(&self, request: Request, peer: &str) -> Option<ResponseKind> {
        self.handle_in_turn(request, peer, ProduceTurn::default())
            .await
    }

    /// [`Self::handle`] for a request that keeps its place among its connection's Produce
    /// requests (`turn`, see [`Broker::produce`]; other requests ignore it).
    pub async fn handle_in_turn(
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
                ResponseKind::DescribeGroups(self.groups.describe_groups(r, version).await)
            }
            RequestKind::ListGroups(r) => {
                ResponseKind::ListGroups(self.groups.list_groups(r, version).await)
            }
            RequestKind::DeleteGroups(r) => {
                ResponseKind::DeleteGroups(self.groups.delete_groups(r, version).await)
            }
            RequestKind::OffsetDelete(r) => {
                ResponseKind::OffsetDelete(self.groups.offset_delete(r, version).await)
            }
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
