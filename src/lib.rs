//! Assembling an Inlet node from its crates (docs/architecture.md, "Crates"): the stream
//! store, the Kafka endpoint on top of it, the Schema Registry, the Iceberg catalog (embedded
//! or external), the table coordinators and their table workers, the SQL engine, and the HTTP
//! listener with `/healthz`, `/metrics`, `/v1/…` and the Iceberg REST catalog under `/iceberg`.
//!
//! [`Node::builder`] assembles one: each part (clock, object store, metadata store, catalog)
//! comes from the configuration unless the builder is handed one, which is how tests run a
//! whole node in-process on a fault-injecting store and a manual clock. [`serve`] runs a node
//! until a signal; [`Node::shutdown`] stops one cleanly. `inlet config dump`
//! ([`config_dump`]) prints the configuration a node would run with.

pub mod audit;
pub use inlet_cluster as cluster;
pub mod config;
pub mod config_dump;
mod console;
mod http;
mod https;
pub use inlet_cluster::members;
pub mod sql;
mod tables;
pub mod users;
pub mod watermark;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use inlet_common::{Clock, SystemClock};
use inlet_ingest::{Broker, BrokerConfig};
use inlet_storage::StreamStore;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use config::NodeConfig;

/// How long a stopping node waits for in-flight requests before closing the store anyway.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Opens a node's stream store from its configuration, on `objects` (the node's one
/// object-store client) and `meta` (its metadata store) when given.
pub async fn open_store(
    config: &NodeConfig,
    objects: Option<Arc<dyn object_store::ObjectStore>>,
    meta: Option<inlet_storage::MetaStore>,
    clock: Arc<dyn Clock>,
) -> anyhow::Result<StreamStore> {
    let mut storage = config.storage.clone();
    storage.node_id = config.node_id;
    storage.wal = Some(config.wal_kind());
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("creating data dir {}", config.data_dir.display()))?;
    let mut builder = StreamStore::builder(config.wal_dir())
        .config(storage)
        .meta_url(config.meta_url())
        .object_store_url(config.object_store_url())
        .clock(clock);
    if let Some(objects) = objects {
        builder = builder.object_store(objects);
    }
    if let Some(meta) = meta {
        builder = builder.meta(meta);
    }
    builder.open().await.context("opening the stream store")
}

/// The Kafka endpoint's settings from the node's: listener, advertised address and the
/// `--kafka-config` values.
pub fn broker_config(config: &NodeConfig, kafka_addr: SocketAddr) -> anyhow::Result<BrokerConfig> {
    let mut broker = BrokerConfig {
        node_id: i32::try_from(config.node_id).context("--node-id must fit in 31 bits")?,
        advertised_host: match &config.advertised_host {
            Some(h) => h.clone(),
            None if kafka_addr.ip().is_unspecified() => "127.0.0.1".into(),
            None => kafka_addr.ip().to_string(),
        },
        advertised_port: kafka_addr.port(),
        ..BrokerConfig::default()
    };
    broker
        .apply_kafka_configs(&config.kafka)
        .map_err(anyhow::Error::msg)?;
    Ok(broker)
}

/// Binds the Kafka listeners: Kafka's `listeners` (`NAME://HOST:PORT,…`, each with its
/// security protocol), or one PLAINTEXT listener at `--kafka-listen`. The first is the one
/// nodes call each other on.
async fn bind_kafka_listeners(
    config: &NodeConfig,
) -> anyhow::Result<Vec<inlet_ingest::server::Listener>> {
    use inlet_ingest::server::{Listener, ListenerSecurity};
    let mut probe = BrokerConfig::default();
    probe
        .apply_kafka_configs(&config.kafka)
        .map_err(anyhow::Error::msg)?;
    if probe.listeners.is_empty() {
        return Ok(vec![Listener {
            tcp: bind("Kafka", &config.kafka_listen).await?,
            security: ListenerSecurity::plaintext(),
            tls: None,
        }]);
    }
    let mut out = Vec::new();
    for l in &probe.listeners {
        let protocol = probe.protocol_of(&l.name).unwrap_or("PLAINTEXT");
        let sasl_mechanisms = if protocol.starts_with("SASL_") {
            probe.sasl_enabled_mechanisms.clone()
        } else {
            Vec::new()
        };
        let tls = if protocol.ends_with("SSL") {
            let settings = inlet_ingest::tls::TlsSettings::from_configs(&l.name, |k| {
                probe.ssl_configs.get(k).cloned()
            })
            .map_err(anyhow::Error::msg)?
            .with_context(|| {
                format!(
                    "listener {} is {protocol}: name its certificate and key with ssl.keystore.location (a PEM file)",
                    l.name
                )
            })?;
            Some(Arc::new(
                inlet_ingest::tls::Tls::load(settings).map_err(anyhow::Error::msg)?,
            ))
        } else {
            None
        };
        let host = if l.host.is_empty() {
            "0.0.0.0"
        } else {
            &l.host
        };
        out.push(Listener {
            tcp: bind(&format!("Kafka {}", l.name), &format!("{host}:{}", l.port)).await?,
            security: ListenerSecurity {
                name: l.name.clone(),
                sasl_mechanisms,
            },
            tls,
        });
    }
    Ok(out)
}

/// How open the node is: a summary for the startup line (each Kafka listener's protocol,
/// `open` when one has neither TLS nor authentication, the HTTP and registry listeners'
/// authentication and TLS (`http`: name, address, authenticated, TLS), and whether the ACL
/// authorizer is on), and a warning for each listener that faces the network (not loopback)
/// without authentication, logged after the startup line.
fn describe_security(
    kafka: &[inlet_ingest::server::Listener],
    http: &[(&str, SocketAddr, bool, bool)],
    authorizer: bool,
) -> (String, Vec<String>) {
    let mut parts = Vec::new();
    let mut warnings = Vec::new();
    for l in kafka {
        let addr = l.tcp.local_addr().ok();
        let open = l.tls.is_none() && l.security.sasl_mechanisms.is_empty();
        parts.push(format!(
            "{}{}",
            l.security.name,
            if open { " (open)" } else { "" }
        ));
        if let Some(addr) = addr.filter(|a| open && !a.ip().is_loopback()) {
            warnings.push(format!(
                "the Kafka listener {} at {addr} faces the network with neither TLS nor authentication: anyone who reaches it can produce, consume and delete topics{} (docs/ingest.md, \"Security\")",
                l.security.name,
                if authorizer { " as far as the ACLs let User:ANONYMOUS" } else { "" }
            ));
        }
    }
    for (what, addr, authenticated, tls) in http {
        let over = if *tls { " over TLS" } else { "" };
        if *authenticated {
            parts.push(format!(
                "{what} with {}{over}",
                if *what == "HTTP" {
                    "tokens"
                } else {
                    "basic auth"
                }
            ));
        } else {
            if *tls {
                parts.push(format!("{what} open{over}"));
            }
            if !addr.ip().is_loopback() {
                warnings.push(format!(
                    "the {what} listener at {addr} faces the network and has no authentication: keep it behind a firewall or a proxy that authenticates{}",
                    if *what == "Schema Registry" {
                        " (or set [registry] authentication = \"basic\")"
                    } else {
                        " (or set [http] authentication = \"token\")"
                    }
                ));
            }
        }
    }
    parts.push(if authorizer {
        "ACLs on".into()
    } else {
        "no ACLs".into()
    });
    (parts.join(", "), warnings)
}

/// With Kafka's `listeners`, the address each listener tells clients (`advertised.listeners`,
/// or where it is bound), and the first one's as the node's own.
fn advertise_listeners(
    broker: &mut BrokerConfig,
    config: &NodeConfig,
    bound: &[inlet_ingest::server::Listener],
) -> anyhow::Result<()> {
    if broker.listeners.is_empty() {
        return Ok(());
    }
    let mut advertised = Vec::new();
    for l in bound {
        let name = &l.security.name;
        let spec = match broker.advertised_listeners.iter().find(|a| a.name == *name) {
            Some(a) => a.clone(),
            None => {
                let addr = l.tcp.local_addr()?;
                inlet_ingest::config::ListenerSpec {
                    name: name.clone(),
                    host: match &config.advertised_host {
                        Some(h) => h.clone(),
                        None if addr.ip().is_unspecified() => "127.0.0.1".into(),
                        None => addr.ip().to_string(),
                    },
                    port: addr.port(),
                }
            }
        };
        advertised.push(spec);
    }
    broker.advertised_host = advertised[0].host.clone();
    broker.advertised_port = advertised[0].port;
    broker.advertised_listeners = advertised;
    Ok(())
}

async fn bind(what: &str, addr: &str) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the {what} listener to {addr}"))
}

/// What the REST catalog tells clients about the object store: with S3, the endpoint, region
/// and path-style addressing the node itself uses (from the standard `AWS_*` environment), so
/// engines read the files from the same place. Credentials stay the client's own.
fn rest_config(object_store_url: &str) -> inlet_catalog::rest::RestConfig {
    let mut config = inlet_catalog::rest::RestConfig::default();
    if object_store_url.starts_with("s3://") {
        // The URL's own parameters (`?endpoint=...&region=...`) win over the environment.
        let query: Vec<(String, String)> = object_store_url
            .split_once('?')
            .map(|(_, q)| {
                q.split('&')
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            })
            .unwrap_or_default();
        let param = |name: &str| {
            query
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        };
        let env = |names: &[&str]| names.iter().find_map(|n| std::env::var(n).ok());
        if let Some(endpoint) =
            param("endpoint").or_else(|| env(&["AWS_ENDPOINT_URL", "AWS_ENDPOINT"]))
        {
            config.overrides.insert("s3.endpoint".into(), endpoint);
            config
                .overrides
                .insert("s3.path-style-access".into(), "true".into());
        }
        if let Some(region) = param("region").or_else(|| env(&["AWS_REGION", "AWS_DEFAULT_REGION"]))
        {
            config.overrides.insert("s3.region".into(), region);
        }
    }
    config
}

/// Runs a node until SIGTERM or Ctrl-C, then stops it cleanly: no new requests are read,
/// in-flight produces are answered (acked or failed), the WAL is synced and the background
/// tasks end.
pub async fn serve(config: NodeConfig) -> anyhow::Result<()> {
    // Listen for signals before announcing readiness, so an early SIGTERM is not fatal.
    let shutdown_signal = shutdown_signal()?;
    audit::open(&config.audit, Arc::new(inlet_common::clock::SystemClock))?;
    let node = Node::builder(config).start().await?;
    let lost = node.membership.lost();
    tokio::select! {
        _ = shutdown_signal => {}
        _ = lost.cancelled() => tracing::error!("stopping: this node lost its membership"),
    }
    node.shutdown().await
}

/// A running node: its listeners, the parts they serve, and the tasks that run them. Built by
/// [`Node::builder`]; [`serve`] runs one until a signal, tests run one in-process.
pub struct Node {
    kafka_addr: SocketAddr,
    http_addr: SocketAddr,
    registry_addr: SocketAddr,
    broker: Arc<Broker>,
    registry: Arc<inlet_schema_registry::Registry>,
    store: Arc<StreamStore>,
    stop: CancellationToken,
    tasks: tokio::task::JoinSet<()>,
    membership: members::Membership,
    /// Ends the membership's renewals, which leave (delete the node's row) last of all.
    leave: CancellationToken,
    renewals: tokio::task::JoinHandle<()>,
    /// In a cluster: the assigner's view, its stop and its task.
    cluster: Option<(
        Arc<cluster::ClusterState>,
        CancellationToken,
        tokio::task::JoinHandle<()>,
    )>,
}

/// What a node is built from. Each part defaults to what the configuration says: the clock
/// to the system clock, the object store and the metadata store to the URLs in the
/// configuration, the catalog to `[catalog]`. Tests hand in a fault-injecting object store, a
/// manual clock, or a catalog of their own.
pub struct NodeBuilder {
    config: NodeConfig,
    clock: Option<Arc<dyn Clock>>,
    objects: Option<Arc<dyn object_store::ObjectStore>>,
    meta: Option<inlet_storage::MetaStore>,
    catalog: Option<inlet_catalog::NodeCatalog>,
}

impl Node {
    /// A builder for a node with `config`.
    pub fn builder(config: NodeConfig) -> NodeBuilder {
        NodeBuilder {
            config,
            clock: None,
            objects: None,
            meta: None,
            catalog: None,
        }
    }

    /// Where the Kafka listener is bound.
    pub fn kafka_addr(&self) -> SocketAddr {
        self.kafka_addr
    }

    /// Where the HTTP listener (Iceberg REST, SQL, watermarks, metrics, health) is bound.
    pub fn http_addr(&self) -> SocketAddr {
        self.http_addr
    }

    /// Where the Schema Registry listener is bound.
    pub fn registry_addr(&self) -> SocketAddr {
        self.registry_addr
    }

    /// The node's stream store.
    pub fn store(&self) -> &Arc<StreamStore> {
        &self.store
    }

    /// Stops the node cleanly: no new requests are read, in-flight produces are answered, the
    /// tasks get [`DRAIN_TIMEOUT`] to finish, and the store is closed (what was acknowledged
    /// but not uploaded is replayed from the WAL at the next start).
    pub async fn shutdown(self) -> anyhow::Result<()> {
        let Node {
            broker,
            registry,
            store,
            stop,
            mut tasks,
            leave,
            renewals,
            cluster,
            ..
        } = self;
        let mut renewals = Some(renewals);
        if let Some((_, assigner_stop, assigner)) = cluster {
            // A drain: leave first, so the other nodes' passes assign nothing here, then hand
            // every stream over; they take them at their next pass.
            tracing::info!("draining: handing this node's partitions to the other nodes");
            assigner_stop.cancel();
            let _ = assigner.await;
            leave.cancel();
            if let Some(renewals) = renewals.take() {
                let _ = renewals.await;
            }
            cluster::release_all(&broker).await;
        }
        tracing::info!("shutting down: finishing in-flight requests");
        stop.cancel();
        broker.shutdown().await;
        let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
            while tasks.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!("in-flight requests did not finish in time; stopping anyway");
            tasks.abort_all();
            while tasks.join_next().await.is_some() {}
        }
        drop(broker);
        drop(registry);
        match Arc::try_unwrap(store) {
            Ok(store) => store.close().await,
            // Every acknowledged append is already synced; what is not uploaded is replayed
            // from the WAL on the next start.
            Err(_) => tracing::warn!("the stream store is still in use; leaving it to the WAL"),
        }
        // Last: another node may start on this metadata store once the row is gone.
        leave.cancel();
        if let Some(renewals) = renewals {
            let _ = renewals.await;
        }
        tracing::info!("stopped cleanly");
        Ok(())
    }
}

impl NodeBuilder {
    /// The node's one clock (default: the system clock).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The object store for the stream store and the tables (default: the configuration's
    /// `object_store` URL).
    pub fn object_store(mut self, objects: Arc<dyn object_store::ObjectStore>) -> Self {
        self.objects = Some(objects);
        self
    }

    /// The metadata store (default: the configuration's `meta` URL).
    pub fn meta_store(mut self, meta: inlet_storage::MetaStore) -> Self {
        self.meta = Some(meta);
        self
    }

    /// The Iceberg catalog (default: `[catalog]`, over the node's object store).
    pub fn catalog(mut self, catalog: inlet_catalog::NodeCatalog) -> Self {
        self.catalog = Some(catalog);
        self
    }

    /// Binds the listeners, opens every part and starts serving: the listeners, the metadata
    /// store and this node's lease, the stream store, the catalog, the Schema Registry, the
    /// Kafka endpoint, the cluster's assigner, then the services.
    pub async fn start(self) -> anyhow::Result<Node> {
        let NodeBuilder {
            config,
            clock,
            objects,
            meta,
            catalog,
        } = self;
        let listeners = Listeners::bind(&config).await?;
        let mut broker_config = broker_config(&config, listeners.kafka_addr)?;
        advertise_listeners(&mut broker_config, &config, &listeners.kafka)?;
        // One clock for the whole node, and one object-store client for the stream store and
        // the Iceberg tables.
        let clock = clock.unwrap_or_else(|| Arc::new(SystemClock));
        // Membership first: nothing of the store (its WAL replay, its uploads) runs while
        // another node is live on this metadata store.
        let meta = open_meta(&config, &broker_config, meta).await?;
        let membership = join(&config, &broker_config, &meta, listeners.http_addr, &clock).await?;
        let leave = CancellationToken::new();
        let renewals = tokio::spawn(membership.clone().run(leave.clone()));
        let objects = match objects {
            Some(objects) => objects,
            None => inlet_storage::open_object_store(&config.object_store_url())
                .context("opening the object store")?,
        };
        let store =
            Arc::new(open_store(&config, Some(objects.clone()), Some(meta), clock.clone()).await?);
        let catalog = match catalog {
            Some(catalog) => catalog,
            // The metadata store's URL as it connected: through its relay (a PostgreSQL
            // path gone silent holds no catalog statement up for long either).
            None => inlet_catalog::NodeCatalog::open(
                &config.catalog,
                store.meta().url(),
                &config.object_store_url(),
                Some(objects),
                clock.clone(),
            )
            .await
            .context("opening the Iceberg catalog")?,
        };
        let registry = Arc::new(
            inlet_schema_registry::open(store.meta().clone(), config.registry.clone())
                .await
                .context("opening the Schema Registry")?,
        );
        // The table worker's view of its tables' schemas, which Produce checks writer schemas
        // against.
        let table_schemas = Arc::new(inlet_table_worker::TableSchemas::default());
        let broker = Broker::open(
            store.clone(),
            broker_config,
            clock,
            Some(registry.clone()),
            Arc::new(TablePayloads {
                decoders: Default::default(),
                tables: table_schemas.clone(),
            }),
        )
        .await
        .context("opening the Kafka endpoint")?;
        // In a cluster, take this node's share of the streams before serving.
        let cluster = if config.wal_kind() == inlet_storage::WalKind::Object {
            Some(start_assigner(&config, &broker, &membership).await?)
        } else {
            None
        };
        let (kafka_addr, http_addr, registry_addr) = (
            listeners.kafka_addr,
            listeners.http_addr,
            listeners.registry_addr,
        );
        let stop = CancellationToken::new();
        let parts = Parts {
            config: &config,
            broker: &broker,
            registry: &registry,
            catalog: &catalog,
            table_schemas,
            stop: &stop,
        };
        let tasks = parts.serve(listeners);
        Ok(Node {
            kafka_addr,
            http_addr,
            registry_addr,
            broker,
            registry,
            store,
            stop,
            tasks,
            membership,
            leave,
            renewals,
            cluster,
        })
    }
}

/// The node's listeners, bound before anything is opened (a port in use stops the start at
/// once), with the HTTPS configs of the HTTP and registry listeners.
struct Listeners {
    kafka: Vec<inlet_ingest::server::Listener>,
    http: TcpListener,
    registry: TcpListener,
    http_tls: Option<Arc<inlet_ingest::tls::Tls>>,
    registry_tls: Option<Arc<inlet_ingest::tls::Tls>>,
    kafka_addr: SocketAddr,
    http_addr: SocketAddr,
    registry_addr: SocketAddr,
}

impl Listeners {
    async fn bind(config: &NodeConfig) -> anyhow::Result<Listeners> {
        let kafka = bind_kafka_listeners(config).await?;
        let http = bind("HTTP", &config.http_listen).await?;
        let registry = bind("Schema Registry", &config.registry_listen).await?;
        // HTTPS where a keystore is named: read now, so a bad file stops the start.
        let http_tls = https_of(
            config.http.tls_keystore.as_deref(),
            config.http.tls_truststore.as_deref(),
            &config.http.tls_client_auth,
            "[http] tls_keystore",
        )?;
        let registry_tls = https_of(
            config.registry.tls_keystore.as_deref(),
            config.registry.tls_truststore.as_deref(),
            &config.registry.tls_client_auth,
            "[registry] tls_keystore",
        )?;
        Ok(Listeners {
            kafka_addr: kafka[0].tcp.local_addr()?,
            http_addr: http.local_addr()?,
            registry_addr: registry.local_addr()?,
            kafka,
            http,
            registry,
            http_tls,
            registry_tls,
        })
    }
}

/// The metadata store (`given`, else the configuration's), once a cluster node has shown it
/// can call the others (a transaction's markers): checked before it joins, so a
/// misconfigured node never holds a node id's lease.
async fn open_meta(
    config: &NodeConfig,
    broker_config: &BrokerConfig,
    given: Option<inlet_storage::MetaStore>,
) -> anyhow::Result<inlet_storage::MetaStore> {
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("creating data dir {}", config.data_dir.display()))?;
    let meta = match given {
        Some(meta) => meta,
        None => inlet_storage::MetaStore::connect(&config.meta_url())
            .await
            .context("opening the metadata store")?,
    };
    if config.wal_kind() == inlet_storage::WalKind::Object {
        if let Err(problem) = inlet_ingest::inter_broker::InterBroker::from_config(broker_config) {
            anyhow::bail!("this node cannot call the cluster's other nodes: {problem}");
        }
    }
    Ok(meta)
}

/// What the node's services are started with.
struct Parts<'a> {
    config: &'a NodeConfig,
    broker: &'a Arc<Broker>,
    registry: &'a Arc<inlet_schema_registry::Registry>,
    catalog: &'a inlet_catalog::NodeCatalog,
    table_schemas: Arc<inlet_table_worker::TableSchemas>,
    stop: &'a CancellationToken,
}

impl Parts<'_> {
    /// Starts every service on `listeners` (Kafka, HTTP, the registry) and the node's
    /// background tasks, logs the node up, and returns the tasks.
    fn serve(self, listeners: Listeners) -> tokio::task::JoinSet<()> {
        let Parts {
            config,
            broker,
            registry,
            catalog,
            table_schemas,
            stop,
        } = self;
        let (security, exposed) = describe_security(
            &listeners.kafka,
            &[
                (
                    "HTTP",
                    listeners.http_addr,
                    config.http.authenticates(),
                    listeners.http_tls.is_some(),
                ),
                (
                    "Schema Registry",
                    listeners.registry_addr,
                    config.registry.authenticates(),
                    listeners.registry_tls.is_some(),
                ),
            ],
            !broker.config().authorizer_class_name.is_empty(),
        );
        let mut tasks = tokio::task::JoinSet::new();
        tasks.spawn(inlet_ingest::server::serve_listeners(
            listeners.kafka,
            broker.clone(),
            stop.clone(),
        ));
        tasks.spawn(inlet_ingest::run_producer_snapshots(
            broker.clone(),
            Duration::from_millis(broker.config().producer_snapshot_interval_ms),
            stop.clone(),
        ));
        tasks.spawn(broker.clone().run_offset_expiry(stop.clone()));
        tasks.spawn(broker.clone().run_transactions(stop.clone()));
        tasks.spawn(broker.clone().run_compaction(stop.clone()));
        let statuses = inlet_table_coordinator::Statuses::default();
        let history = Arc::new(inlet_common::history::History::new(
            config.http.history_bytes,
            console::history::WINDOW_MS,
        ));
        tasks.spawn(console::history::run(
            history.clone(),
            Duration::from_millis(config.http.history_interval_ms),
            broker.clone(),
            statuses.clone(),
            stop.clone(),
        ));
        tasks.spawn(http::serve(
            listeners.http,
            broker.clone(),
            registry.clone(),
            statuses.clone(),
            history,
            catalog.catalog(),
            config.query.to_config(),
            catalog.router(rest_config(&config.object_store_url())),
            // `[http] authentication = "token"`: Kafka users, Kafka ACLs.
            config.http.authenticates().then(|| {
                Arc::new(inlet_ingest::acl::http::NodeAccess::new(
                    broker.clone(),
                    config.http.token_ttl_s,
                )) as Arc<dyn inlet_common::access::HttpAccess>
            }),
            listeners.http_tls.clone(),
            stop.clone(),
        ));
        tasks.spawn(tables::run(
            broker.clone(),
            registry.clone(),
            catalog.clone(),
            statuses,
            table_settings(config),
            table_schemas,
            stop.clone(),
        ));
        tasks.spawn(serve_registry(
            config,
            broker,
            registry.clone(),
            listeners.registry,
            listeners.registry_tls.clone(),
            stop.clone(),
        ));
        log_up(
            config,
            broker,
            catalog,
            [
                listeners.kafka_addr,
                listeners.http_addr,
                listeners.registry_addr,
            ],
            listeners.http_tls.is_some(),
            &security,
        );
        for warning in exposed {
            tracing::warn!("{warning}");
        }
        tasks
    }
}

/// A listener's HTTPS config where `keystore` names one (read now, so a bad file stops the
/// start); `what` names the setting in the error.
fn https_of(
    keystore: Option<&std::path::Path>,
    truststore: Option<&std::path::Path>,
    client_auth: &str,
    what: &'static str,
) -> anyhow::Result<Option<Arc<inlet_ingest::tls::Tls>>> {
    keystore
        .map(|k| https::load(k, truststore, client_auth).context(what))
        .transpose()
}

/// Joins the metadata store's nodes under `config.node_id`, with the addresses other nodes and
/// clients are told of.
async fn join(
    config: &NodeConfig,
    broker_config: &BrokerConfig,
    meta: &inlet_storage::MetaStore,
    http_addr: SocketAddr,
    clock: &Arc<dyn Clock>,
) -> anyhow::Result<members::Membership> {
    members::Membership::join(
        meta.clone(),
        &config.data_dir,
        config.node_id,
        (
            format!(
                "{}:{}",
                broker_config.advertised_host, broker_config.advertised_port
            ),
            http_addr.to_string(),
            broker_config
                .advertised_listeners
                .iter()
                .map(|l| format!("{}://{}:{}", l.name, l.host, l.port))
                .collect::<Vec<_>>()
                .join(","),
        ),
        config.wal_kind(),
        Duration::from_millis(config.cluster.lease_ms),
        clock.clone(),
    )
    .await
    .context("joining the metadata store's nodes")
}

/// In a cluster: takes this node's share of the streams (a first pass, before serving) and
/// starts the assigner (`inlet_cluster::run`); returns its view, its stop and its task.
async fn start_assigner(
    config: &NodeConfig,
    broker: &Arc<Broker>,
    membership: &members::Membership,
) -> anyhow::Result<(
    Arc<cluster::ClusterState>,
    CancellationToken,
    tokio::task::JoinHandle<()>,
)> {
    cluster::ClusterState::migrate(broker.store().meta())
        .await
        .context("creating the cluster's load table")?;
    let state = cluster::ClusterState::new(config.node_id, config.cluster.load_unit_bytes);
    broker.set_cluster(state.clone());
    if let Err(e) = cluster::pass(broker, &state).await {
        tracing::warn!(error = %format!("{e:#}"), "the first cluster pass failed; the assigner tries again");
    }
    let assigner_stop = CancellationToken::new();
    let assigner = tokio::spawn(cluster::run(
        broker.clone(),
        state.clone(),
        Duration::from_millis(config.cluster.rebalance_ms),
        membership.lapsed(),
        assigner_stop.clone(),
    ));
    Ok((state, assigner_stop, assigner))
}

/// The Schema Registry's listener: its API (behind `[registry] authentication`'s guard when
/// set), the audit of its changes, TLS when configured, until `stop`.
fn serve_registry(
    config: &NodeConfig,
    broker: &Arc<Broker>,
    registry: Arc<inlet_schema_registry::Registry>,
    listener: TcpListener,
    tls: Option<Arc<inlet_ingest::tls::Tls>>,
    stop: CancellationToken,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    // `[registry] authentication = "basic"`: Kafka users, Kafka ACLs.
    let access: Option<Arc<dyn inlet_schema_registry::Access>> =
        config.registry.authenticates().then(|| {
            Arc::new(inlet_ingest::acl::registry::RegistryAccess::new(
                broker.clone(),
                config.http.token_ttl_s,
            )) as Arc<dyn inlet_schema_registry::Access>
        });
    let app = match access {
        Some(access) => inlet_schema_registry::guarded_router(registry, access),
        None => inlet_schema_registry::router(registry),
    }
    .layer(axum::middleware::from_fn(
        |req: axum::extract::Request, next: axum::middleware::Next| {
            audit::http("registry", req, next)
        },
    ));
    async move {
        if let Err(e) = https::serve(listener, tls, app, "Schema Registry", stop).await {
            tracing::error!(error = %e, "the Schema Registry listener failed");
        }
    }
}

/// The table topics' service settings from `[tables]`.
fn table_settings(config: &NodeConfig) -> tables::TableSettings {
    tables::TableSettings {
        dir: config.data_dir.join("table-index"),
        budget: config.tables.upsert_index_memory_bytes,
        conversion_bytes: config.tables.memory_bytes,
        dead_letter_pending_files: config.tables.dead_letter_pending_files,
        compaction: config.tables.compaction_tuning(),
        expire_every: config.tables.expire_every_commits,
        lease_ttl: Duration::from_millis(config.tables.coordinator_lease_ms),
        orphans: config.tables.orphan_sweep(),
    }
}

/// The startup line: where the node listens (`addrs`: Kafka, HTTP, registry), what it
/// stores where, and how open it is (`security`).
fn log_up(
    config: &NodeConfig,
    broker: &Broker,
    catalog: &inlet_catalog::NodeCatalog,
    addrs: [SocketAddr; 3],
    https: bool,
    security: &str,
) {
    tracing::info!(
        kafka = %addrs[0],
        advertised = %format!("{}:{}", broker.config().advertised_host, broker.config().advertised_port),
        http = %addrs[1],
        registry = %addrs[2],
        data_dir = %config.data_dir.display(),
        object_store = %config.object_store_url(),
        iceberg = %format!(
            "{}://{}/iceberg",
            if https { "https" } else { "http" },
            addrs[1]
        ),
        warehouse = %catalog.warehouse(),
        catalog = %match config.catalog.kind {
            inlet_catalog::CatalogKind::Embedded => "embedded".to_string(),
            inlet_catalog::CatalogKind::Rest => config.catalog.uri.clone().unwrap_or_default(),
            inlet_catalog::CatalogKind::Glue => format!(
                "glue ({})",
                config.catalog.endpoint.as_deref().or(config.catalog.region.as_deref()).unwrap_or("region from AWS_REGION")
            ),
        },
        topics = broker.topics().list().len(),
        security = %security,
        "Inlet node is up"
    );
}

/// Resolves on SIGTERM or Ctrl-C; the handlers are installed when this is called.
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("listening for SIGINT")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}

/// Produce-time checks of table topic payloads with the table workers' own decoders, and of
/// writer schemas against the tables' schemas, so that the broker refuses exactly what a
/// conversion job would send to the dead-letter table.
#[derive(Debug)]
struct TablePayloads {
    decoders: inlet_table_worker::PayloadChecker,
    tables: Arc<inlet_table_worker::TableSchemas>,
}

impl inlet_ingest::PayloadCheck for TablePayloads {
    fn check(
        &self,
        side: inlet_ingest::Side,
        schema: &inlet_schema_registry::StoredSchema,
        payload: &[u8],
    ) -> Result<(), String> {
        use inlet_table_worker::Side as WorkerSide;
        let side = match side {
            inlet_ingest::Side::Value => WorkerSide::Value,
            inlet_ingest::Side::Key => WorkerSide::Key,
        };
        self.decoders.check(side, schema, payload)
    }

    fn check_schema(
        &self,
        topic: &str,
        schema: &inlet_schema_registry::StoredSchema,
    ) -> Result<(), String> {
        self.tables.fits(topic, schema)
    }
}
