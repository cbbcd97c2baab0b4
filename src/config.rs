//! The node's configuration: one typed struct, layered as defaults ← `inlet.toml` (`--config`)
//! ← `INLET_*` environment variables ← command-line flags.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use inlet_storage::StorageConfig;

/// Everything a node needs to start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodeConfig {
    /// Where the WAL, the local object store and the SQLite metadata live.
    pub data_dir: PathBuf,
    /// Kafka protocol listener.
    pub kafka_listen: String,
    /// Schema Registry listener.
    pub registry_listen: String,
    /// HTTP listener: Iceberg REST catalog, SQL, watermarks, metrics, health.
    pub http_listen: String,
    /// Host name clients are told to connect to (Kafka Metadata); the listen host by default.
    pub advertised_host: Option<String>,
    /// Object store URL (`s3://bucket/prefix`, `file:///path`); `<data_dir>/objects` by default.
    pub object_store: Option<String>,
    /// Metadata store URL (`postgres://…`, `sqlite://…`); `<data_dir>/meta.db` by default.
    pub meta: Option<String>,
    /// This node's id in a cluster.
    pub node_id: u64,
    /// Broker-level Kafka configs by their Kafka names.
    pub kafka: BTreeMap<String, String>,
    /// The stream store's settings.
    pub storage: StorageConfig,
    /// The Schema Registry's settings.
    pub registry: inlet_schema_registry::RegistryConfig,
    /// Table topics' settings.
    pub tables: TablesConfig,
    /// Limits of each SQL query (`POST /v1/query`, `inlet query`).
    pub query: QuerySettings,
    /// Who may use the HTTP listener (`[http]`): the catalog, SQL, watermarks, status.
    pub http: HttpSettings,
    /// Membership (`[cluster]`): this node's lease on its row of the metadata store.
    pub cluster: ClusterSettings,
    /// The Iceberg catalog the tables live in (`[catalog]`): embedded by default, an
    /// external REST catalog (`type = "rest"`, `uri`, ...), or AWS Glue (`type = "glue"`,
    /// `region`, ...).
    pub catalog: inlet_catalog::CatalogConfig,
    /// Where the audit trail goes besides the log (`[audit]`, `src/audit.rs`).
    pub audit: crate::audit::AuditSettings,
}

/// `[cluster]`: membership (`cluster/src/members.rs`) and the assignment of streams (`cluster/src/placement.rs`, `cluster/src/node.rs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterSettings {
    /// How long a node's membership lasts without a renewal (renewed every third of it). A
    /// crashed node of a cluster keeps its partitions this long before others take them (a
    /// crashed single node keeps another from starting on its metadata store); the same node
    /// restarting on its own data directory starts at once.
    pub lease_ms: u64,
    /// How often a node of a cluster reconciles what it owns with the live nodes: takes the
    /// streams assigned to it, hands over the ones assigned elsewhere, and picks up topics
    /// and configs other nodes changed.
    pub rebalance_ms: u64,
    /// Produce bytes per second that weigh as much as one more partition when the nodes
    /// share the partitions out: a partition weighs 1 plus its bytes in over this (rounded to a
    /// power of two).
    pub load_unit_bytes: u64,
}

impl Default for ClusterSettings {
    fn default() -> Self {
        ClusterSettings {
            lease_ms: 6_000,
            rebalance_ms: 1_000,
            load_unit_bytes: 256 * 1024,
        }
    }
}

/// `[http]`: authentication of the HTTP listener.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpSettings {
    /// `none` (open, the default) or `token`: every endpoint but `/healthz` and the catalog's
    /// `/iceberg/v1/oauth/tokens` wants a bearer token from that endpoint or HTTP basic auth
    /// with a Kafka user, and the Kafka ACLs decide what it may do
    /// (`inlet_ingest::acl::http`).
    pub authentication: String,
    /// How long a token of `/iceberg/v1/oauth/tokens` lives, in seconds.
    pub token_ttl_s: u64,
    /// A PEM file with the private key and the certificate chain: the listener serves HTTPS
    /// (reloaded when the file changes). None: plain HTTP.
    pub tls_keystore: Option<PathBuf>,
    /// A PEM file of the CAs client certificates must chain to (mTLS, with
    /// `tls_client_auth`).
    pub tls_truststore: Option<PathBuf>,
    /// Kafka's `ssl.client.auth` for this listener: `none` (the default), `requested` (a
    /// client may present a certificate) or `required`. A verified certificate authenticates
    /// a request that has no `Authorization` header, as `User:<its subject's DN>`.
    pub tls_client_auth: String,
    /// The byte budget of the hour of the node's own figures the console's charts start from
    /// (`/v1/history`); the oldest samples go first when it is full.
    pub history_bytes: u64,
    /// How often those figures are sampled, in milliseconds.
    pub history_interval_ms: u64,
}

impl Default for HttpSettings {
    fn default() -> Self {
        HttpSettings {
            authentication: "none".into(),
            token_ttl_s: 3_600,
            tls_keystore: None,
            tls_truststore: None,
            tls_client_auth: "none".into(),
            history_bytes: 16 << 20,
            history_interval_ms: 10_000,
        }
    }
}

impl HttpSettings {
    /// Whether requests must authenticate.
    pub fn authenticates(&self) -> bool {
        self.authentication == "token"
    }
}

/// `[query]`: limits of each SQL query.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QuerySettings {
    /// Memory a query's sorts, joins and aggregates may hold before it fails.
    pub memory_limit_bytes: usize,
    /// Wall time, streaming the result included, before a query is cancelled.
    pub timeout_secs: u64,
}

impl Default for QuerySettings {
    fn default() -> Self {
        let d = inlet_query::QueryConfig::default();
        QuerySettings {
            memory_limit_bytes: d.memory_limit_bytes,
            timeout_secs: d.timeout.as_secs(),
        }
    }
}

impl QuerySettings {
    pub fn to_config(&self) -> inlet_query::QueryConfig {
        inlet_query::QueryConfig {
            memory_limit_bytes: self.memory_limit_bytes,
            timeout: std::time::Duration::from_secs(self.timeout_secs),
        }
    }
}

/// Settings of the node's table topics (`[tables]` in `inlet.toml`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TablesConfig {
    /// Bytes that all conversion jobs of the node's table topics share (records, Arrow
    /// buffers, Parquet pages, compaction): one pool, however many table topics there are
    /// (docs/table-worker.md, "Memory").
    pub memory_bytes: usize,
    /// Bytes of primary-key index entries that all upsert tables' indexes share in memory
    /// (each keeps its share, at least 256 KiB); beyond them an index spills to sorted runs
    /// under `<data_dir>/table-index` (docs/table-worker.md).
    pub upsert_index_memory_bytes: usize,
    /// Bytes of freed memory the allocator may keep for reuse before the node hands it back to
    /// the system (checked once a second; glibc only). Conversions allocate and free tens of
    /// MiB every commit: handing all of it back every second makes the kernel zero those pages
    /// again when they are next touched; keeping too much holds memory nothing uses.
    pub allocator_keep_free_bytes: usize,
    /// Dead-letter files a table topic carries while its dead-letter table refuses commits
    /// (another writer broke it); at this many the table's rounds wait until it takes them,
    /// and `/v1/tables` shows the table as held. Nothing is lost: the records stay in the
    /// stream. Bounds the memory and the control-stream records a broken dead-letter table
    /// costs.
    pub dead_letter_pending_files: usize,
    /// Commits of a table topic between two checks for small files to compact (and at most
    /// one run per `table.topic.compaction.interval.ms`).
    pub compaction_every_commits: u64,
    /// Small files (under three quarters of the target size) that make a partition worth
    /// compacting on their count alone; fewer are merged once they make half a target file.
    pub compaction_min_files: usize,
    /// Partitions (or target files' worth of one) one compaction run merges before it stops
    /// until the next check: a backlog catches up over several runs, each of bounded length.
    pub compaction_partitions_per_run: usize,
    /// Commits of a table topic between two runs of snapshot expiry
    /// (`table.topic.expire.snapshot.*` say which snapshots go).
    pub expire_every_commits: u64,
    /// How long a table coordinator's epoch (its lease in the metadata store) lasts without a
    /// renewal; it is renewed at a third of this. A node that dies holds its tables this long
    /// before another coordinator can take them over; a coordinator that cannot renew for this
    /// long stops committing.
    pub coordinator_lease_ms: u64,
    /// Files Inlet's conversions wrote into a table's `data/` folder that no snapshot names
    /// are deleted once they are this old (refused or superseded chunks, rounds that did not
    /// land); younger ones may still be on their way into a round. 0: never.
    pub orphan_files_older_than_ms: u64,
    /// The least time between two orphan-file sweeps of a table.
    pub orphan_files_interval_ms: u64,
}

impl TablesConfig {
    /// How the coordinators sweep orphan files; None: never.
    pub fn orphan_sweep(&self) -> Option<inlet_table_coordinator::orphans::OrphanSweep> {
        (self.orphan_files_older_than_ms > 0).then(|| {
            inlet_table_coordinator::orphans::OrphanSweep {
                older_than: Duration::from_millis(self.orphan_files_older_than_ms),
                every: Duration::from_millis(self.orphan_files_interval_ms),
            }
        })
    }

    /// The compaction settings as the coordinators take them.
    pub fn compaction_tuning(&self) -> inlet_table_coordinator::compact::CompactionTuning {
        inlet_table_coordinator::compact::CompactionTuning {
            every_commits: self.compaction_every_commits,
            min_files: self.compaction_min_files,
            partitions_per_run: self.compaction_partitions_per_run,
        }
    }
}

/// The default `[tables] memory_bytes`.
pub const DEFAULT_CONVERSION_BYTES: usize = 512 << 20;

impl Default for TablesConfig {
    fn default() -> Self {
        let compaction = inlet_table_coordinator::compact::CompactionTuning::default();
        TablesConfig {
            memory_bytes: DEFAULT_CONVERSION_BYTES,
            upsert_index_memory_bytes: inlet_table_worker::DEFAULT_INDEX_BUDGET,
            allocator_keep_free_bytes: 64 << 20,
            dead_letter_pending_files:
                inlet_table_coordinator::coordinator::DEFAULT_DEAD_LETTER_PENDING_FILES,
            compaction_every_commits: compaction.every_commits,
            compaction_min_files: compaction.min_files,
            compaction_partitions_per_run: compaction.partitions_per_run,
            expire_every_commits: inlet_table_coordinator::coordinator::DEFAULT_EXPIRE_EVERY,
            coordinator_lease_ms: inlet_table_coordinator::DEFAULT_LEASE_TTL.as_millis() as u64,
            orphan_files_older_than_ms: inlet_table_coordinator::orphans::DEFAULT_OLDER_THAN
                .as_millis() as u64,
            orphan_files_interval_ms: inlet_table_coordinator::orphans::DEFAULT_EVERY.as_millis()
                as u64,
        }
    }
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            data_dir: PathBuf::from("inlet-data"),
            kafka_listen: "127.0.0.1:9092".into(),
            registry_listen: "127.0.0.1:8081".into(),
            http_listen: "127.0.0.1:8181".into(),
            advertised_host: None,
            object_store: None,
            meta: None,
            node_id: 0,
            kafka: BTreeMap::new(),
            storage: StorageConfig::default(),
            registry: inlet_schema_registry::RegistryConfig::default(),
            tables: TablesConfig::default(),
            query: QuerySettings::default(),
            http: HttpSettings::default(),
            cluster: ClusterSettings::default(),
            audit: crate::audit::AuditSettings::default(),
            catalog: inlet_catalog::CatalogConfig::default(),
        }
    }
}

impl NodeConfig {
    /// Reads a TOML file over the defaults.
    pub fn from_file(path: &std::path::Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading config file {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("parsing config file {}", path.display()))
    }

    pub fn wal_dir(&self) -> PathBuf {
        self.data_dir.join("wal")
    }

    pub fn object_store_url(&self) -> String {
        self.object_store
            .clone()
            .unwrap_or_else(|| self.data_dir.join("objects").to_string_lossy().into_owned())
    }

    pub fn meta_url(&self) -> String {
        self.meta
            .clone()
            .unwrap_or_else(|| format!("sqlite://{}", self.data_dir.join("meta.db").display()))
    }

    /// Checks the settings fit together.
    /// The WAL the node runs: `[storage] wal` when set; otherwise the object-store WAL with a
    /// PostgreSQL metadata store (a cluster, whose nodes may be lost whole) and the local WAL
    /// with SQLite (a single node).
    pub fn wal_kind(&self) -> inlet_storage::WalKind {
        let url = self.meta_url();
        self.storage.wal.unwrap_or(
            if url.starts_with("postgres://") || url.starts_with("postgresql://") {
                inlet_storage::WalKind::Object
            } else {
                inlet_storage::WalKind::Local
            },
        )
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        if self.cluster.rebalance_ms == 0 || self.cluster.rebalance_ms > self.cluster.lease_ms {
            bail!(
                "[cluster] rebalance_ms must be between 1 and lease_ms ({}), got {}",
                self.cluster.lease_ms,
                self.cluster.rebalance_ms
            );
        }
        if self.cluster.load_unit_bytes == 0 {
            bail!("[cluster] load_unit_bytes must be positive");
        }
        if !matches!(self.http.authentication.as_str(), "none" | "token") {
            bail!(
                "[http] authentication {:?} is not one of none, token",
                self.http.authentication
            );
        }
        if self.http.history_interval_ms == 0 {
            bail!("[http] history_interval_ms must be positive");
        }
        if self.http.token_ttl_s == 0 {
            bail!("[http] token_ttl_s must be positive");
        }
        if self.cluster.lease_ms < 1_000 {
            bail!(
                "[cluster] lease_ms must be at least 1000, got {}",
                self.cluster.lease_ms
            );
        }
        for (name, addr) in [
            ("kafka-listen", &self.kafka_listen),
            ("registry-listen", &self.registry_listen),
            ("http-listen", &self.http_listen),
        ] {
            if addr
                .rsplit_once(':')
                .and_then(|(_, p)| p.parse::<u16>().ok())
                .is_none()
            {
                bail!("--{name} must be HOST:PORT, got {addr:?}");
            }
        }
        let mut storage = self.storage.clone();
        storage.node_id = self.node_id;
        storage.validate()?;
        self.registry.validate().map_err(anyhow::Error::msg)?;
        if self.tables.memory_bytes < 1 << 20 {
            bail!("tables.memory_bytes must be at least 1 MiB");
        }
        if self.tables.upsert_index_memory_bytes == 0 {
            bail!("tables.upsert_index_memory_bytes must be positive");
        }
        if self.tables.dead_letter_pending_files == 0 {
            bail!("tables.dead_letter_pending_files must be positive");
        }
        if self.tables.compaction_every_commits == 0 {
            bail!("tables.compaction_every_commits must be positive");
        }
        if self.tables.compaction_min_files < 2 {
            bail!(
                "tables.compaction_min_files must be at least 2, got {}",
                self.tables.compaction_min_files
            );
        }
        if self.tables.compaction_partitions_per_run == 0 {
            bail!("tables.compaction_partitions_per_run must be positive");
        }
        if self.tables.expire_every_commits == 0 {
            bail!("tables.expire_every_commits must be positive");
        }
        if self.tables.coordinator_lease_ms < 1_000 {
            bail!(
                "tables.coordinator_lease_ms must be at least 1000, got {}",
                self.tables.coordinator_lease_ms
            );
        }
        self.catalog.validate().map_err(anyhow::Error::msg)?;
        Ok(())
    }
}

/// Parses `KEY=VALUE`.
pub fn parse_key_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
        _ => Err(format!("expected KEY=VALUE, got {s:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_overrides_defaults_and_unknown_keys_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("inlet.toml");
        std::fs::write(
            &path,
            "data_dir = \"/srv/inlet\"\n[storage]\nlog_cache_bytes = 1073741824\n\
             [tables]\nupsert_index_memory_bytes = 1048576\nmemory_bytes = 67108864\n",
        )
        .expect("write");
        let config = NodeConfig::from_file(&path).expect("parses");
        assert_eq!(config.data_dir, PathBuf::from("/srv/inlet"));
        assert_eq!(config.storage.log_cache_bytes, 1 << 30);
        assert_eq!(config.tables.upsert_index_memory_bytes, 1 << 20);
        assert_eq!(config.tables.memory_bytes, 64 << 20);
        assert_eq!(
            NodeConfig::default().tables.memory_bytes,
            DEFAULT_CONVERSION_BYTES
        );
        assert_eq!(
            NodeConfig::default().tables.upsert_index_memory_bytes,
            256 << 20
        );
        assert_eq!(config.kafka_listen, "127.0.0.1:9092");
        assert_eq!(
            config.tables.compaction_tuning(),
            inlet_table_coordinator::compact::CompactionTuning::default(),
            "unset, the compaction settings are the coordinator's defaults"
        );
        std::fs::write(
            &path,
            "[tables]\ncompaction_min_files = 4\ncompaction_every_commits = 3\n",
        )
        .expect("write");
        let config = NodeConfig::from_file(&path).expect("parses");
        assert_eq!(config.tables.compaction_tuning().min_files, 4);
        assert_eq!(config.tables.compaction_tuning().every_commits, 3);
        config.validate().expect("valid");
        std::fs::write(&path, "[tables]\ncompaction_min_files = 1\n").expect("write");
        let err = NodeConfig::from_file(&path)
            .expect("parses")
            .validate()
            .unwrap_err();
        assert!(format!("{err}").contains("compaction_min_files"), "{err}");
        std::fs::write(
            &path,
            "[tables]\nexpire_every_commits = 5\ncoordinator_lease_ms = 4000\n",
        )
        .expect("write");
        let config = NodeConfig::from_file(&path).expect("parses");
        assert_eq!(config.tables.expire_every_commits, 5);
        assert_eq!(config.tables.coordinator_lease_ms, 4_000);
        config.validate().expect("valid");
        for (text, name) in [
            (
                "[tables]\ncoordinator_lease_ms = 999\n",
                "coordinator_lease_ms",
            ),
            (
                "[tables]\nexpire_every_commits = 0\n",
                "expire_every_commits",
            ),
        ] {
            std::fs::write(&path, text).expect("write");
            let err = NodeConfig::from_file(&path)
                .expect("parses")
                .validate()
                .unwrap_err();
            assert!(format!("{err}").contains(name), "{err}");
        }
        std::fs::write(&path, "colour = \"blue\"\n").expect("write");
        let err = NodeConfig::from_file(&path).unwrap_err();
        assert!(format!("{err:#}").contains("colour"), "{err:#}");
    }

    #[test]
    fn an_external_catalog_is_a_catalog_section() {
        let config: NodeConfig = toml::from_str(
            "[catalog]\ntype = \"rest\"\nuri = \"https://catalog.example/api/catalog\"\n\
             warehouse = \"analytics\"\ncredential = \"id:secret\"\n\
             [catalog.properties]\n\"header.X-Iceberg-Access-Delegation\" = \"vended-credentials\"\n",
        )
        .expect("parses");
        assert_eq!(config.catalog.kind, inlet_catalog::CatalogKind::Rest);
        assert_eq!(config.catalog.warehouse.as_deref(), Some("analytics"));
        assert_eq!(config.catalog.properties.len(), 1);
        config.validate().expect("valid");
        let config: NodeConfig = toml::from_str("[catalog]\ntype = \"rest\"\n").expect("parses");
        assert!(config.validate().is_err(), "a REST catalog needs a uri");
        let config: NodeConfig = toml::from_str(
            "[catalog]\ntype = \"glue\"\nregion = \"eu-west-1\"\ncatalog_id = \"123456789012\"\n\
             files = \"s3://lake/warehouse\"\n",
        )
        .expect("parses");
        assert_eq!(config.catalog.kind, inlet_catalog::CatalogKind::Glue);
        assert_eq!(config.catalog.region.as_deref(), Some("eu-west-1"));
        assert!(config.validate().is_ok());
    }

    #[test]
    fn bad_listen_address_is_refused() {
        let config = NodeConfig {
            kafka_listen: "localhost".into(),
            ..NodeConfig::default()
        };
        assert!(config.validate().is_err());
        assert_eq!(parse_key_value("a=b=c"), Ok(("a".into(), "b=c".into())));
        assert!(parse_key_value("novalue").is_err());
    }
}
