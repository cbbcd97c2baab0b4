//! Table topics on a node: the table worker (one memory pool for all conversions) and one
//! coordinator per topic with `table.topic.enable=true`, started and stopped as topics are
//! created, configured or deleted (docs/architecture.md, "Table topics").
//!
//! Every second the service lets the worker convert partitions that passed the file target,
//! and reconciles the running coordinators with the topics' configs. A coordinator's table is
//! `table.topic.namespace`.`table.topic.table` (defaults `default` and the topic's name).
//!
//! Upsert tables (`table.topic.id.columns` with `upsert.enable=true` or a `cdc.field`) each
//! get a primary-key index, spilling under `<index_dir>/<topic>`; all of them share the
//! memory of `tables.upsert_index_memory_bytes` (256 MiB), so it does not grow with their
//! number. Conversions share `tables.memory_bytes` (512 MiB).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use iceberg::io::FileIO;
use iceberg::{NamespaceIdent, TableIdent};
use inlet_catalog::NodeCatalog;
use inlet_ingest::Broker;
use inlet_ingest::{Compaction, TableTopicConfig};
use inlet_schema_registry::Registry;
use inlet_table_coordinator::chunks::Chunks;
use inlet_table_coordinator::commit::Committer;
use inlet_table_coordinator::convert;
use inlet_table_coordinator::coordinator::{self, Expiry, TableTopic};
use inlet_table_coordinator::Leases;
use inlet_table_coordinator::Statuses;
use inlet_table_worker::data_file::{FileSettings, FileTarget};
use inlet_table_worker::IndexBudget;
use inlet_table_worker::MemoryPool;
use inlet_table_worker::UpsertSpec;
use inlet_table_worker::ValueTransform;
use inlet_table_worker::Worker;
use inlet_table_worker::{TableContext, ValueType};
use tokio_util::sync::CancellationToken;

/// The node's `[tables]` settings as the table topics take them: memory, where upsert
/// tables' primary-key indexes spill, compaction, expiry and coordinator leases.
#[derive(Debug, Clone)]
pub(crate) struct TableSettings {
    /// Emptied at start: indexes are rebuilt from their tables.
    pub dir: PathBuf,
    /// `[tables] upsert_index_memory_bytes`: shared by every upsert table's index.
    pub budget: usize,
    /// `[tables] memory_bytes`: the one conversion pool of all table topics.
    pub conversion_bytes: usize,
    /// `[tables] dead_letter_pending_files` (see `TableTopic::dead_letter_pending_files`).
    pub dead_letter_pending_files: usize,
    /// `[tables] compaction_*` (see `TableTopic::compaction`).
    pub compaction: inlet_table_coordinator::compact::CompactionTuning,
    /// `[tables] expire_every_commits` (see `TableTopic::expire_every`).
    pub expire_every: u64,
    /// `[tables] coordinator_lease_ms`: how long a coordinator's epoch lasts unrenewed.
    pub lease_ttl: Duration,
    /// `[tables] orphan_files_*` (see `TableTopic::orphans`).
    pub orphans: Option<inlet_table_coordinator::orphans::OrphanSweep>,
}

/// What a running coordinator was started with: restarted when it changes.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fingerprint {
    ident: TableIdent,
    /// A topic deleted and created again under its name is another topic.
    topic_id: uuid::Uuid,
    partitions: usize,
    configs: Vec<(String, String)>,
}

/// Runs the table topics of `broker` until `stop`.
pub(crate) async fn run(
    broker: Arc<Broker>,
    registry: Arc<Registry>,
    catalog: NodeCatalog,
    statuses: Statuses,
    indexes: TableSettings,
    schemas: Arc<inlet_table_worker::TableSchemas>,
    stop: CancellationToken,
) {
    let index_dir = &indexes.dir;
    // Indexes of an earlier run of the node are rebuilt from the tables: their spills go.
    if index_dir.exists() {
        if let Err(e) = std::fs::remove_dir_all(index_dir) {
            tracing::warn!(dir = %index_dir.display(), error = %e, "cannot clear old primary-key index spills");
        }
    }
    let store = broker.store().clone();
    let worker = Arc::new(Worker::with_schemas(
        store.clone(),
        MemoryPool::new(indexes.conversion_bytes),
        schemas,
    ));
    worker.set_transactions(Arc::new(BrokerTxns(broker.clone())));
    let index_budget = IndexBudget::shared(indexes.budget);
    let committer = Committer::with_target(catalog.catalog(), catalog.commit_target())
        .with_files(catalog.storage().clone());
    let file_io = catalog.file_io().clone();
    let warehouse = catalog.warehouse();
    // Coordinator epochs, in the node's metadata store, held under the node's id.
    let lease_holder = |node_id: i32| format!("node-{node_id}");
    let leases = loop {
        match Leases::open(
            store.meta().clone(),
            lease_holder(broker.config().node_id),
            indexes.lease_ttl,
            broker.clock().clone(),
        )
        .await
        {
            // In a cluster, a dead node's coordinators move with its partitions at once.
            Ok(l) => match broker.cluster_view() {
                Some(view) => {
                    break l.with_liveness(Arc::new(move |holder: &str| {
                        view.brokers()
                            .iter()
                            .any(|b| lease_holder(b.node_id) == holder)
                    }))
                }
                None => break l,
            },
            Err(e) => {
                tracing::warn!(error = %e, "cannot open the coordinator lease table; retrying");
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            }
        }
    };
    // In a cluster, append-only tables convert on their partitions' owners and hand their
    // files to the coordinator through the chunk table.
    let chunks = match broker.cluster_view() {
        Some(_) => loop {
            match Chunks::open(store.meta().clone()).await {
                Ok(c) => break Some(c),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot open the table chunk table; retrying");
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    }
                }
            }
        },
        None => None,
    };
    let mut running: HashMap<String, Running> = HashMap::new();
    // The converters of distributed tables on this node, by topic, and those stopping.
    let mut converters: HashMap<String, Running> = HashMap::new();
    let mut converters_stopping: HashMap<String, tokio::task::JoinHandle<()>> = HashMap::new();
    // Coordinators told to stop that have not finished yet: a topic's next coordinator starts
    // only once its last one is gone, so two never commit to one table at once.
    let mut stopping: HashMap<String, tokio::task::JoinHandle<()>> = HashMap::new();
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
        stopping.retain(|_, task| !task.is_finished());
        // A coordinator that ended on its own (fenced by a newer epoch) starts again, and waits
        // for the lease.
        running.retain(|name, r| {
            let ended = r.task.is_finished();
            if ended {
                tracing::warn!(topic = %name, "table coordinator ended; starting it again");
            }
            !ended
        });
        let defaults = &broker.config().topic_defaults;
        let mut wanted: HashMap<String, (Fingerprint, TableTopic)> = HashMap::new();
        let mut wanted_converters: HashMap<String, (Fingerprint, TableTopic)> = HashMap::new();
        // Tables (and dead-letter tables) taken so far, by topic: CreateTopics and
        // AlterConfigs refuse two table topics sharing a table, but topics configured before
        // that check may still; the first by name (the order `list` gives) keeps the table.
        let mut taken: HashMap<TableIdent, String> = HashMap::new();
        for topic in broker.topics().list() {
            let Some(config) = topic.configs.table_topic(&topic.name, defaults) else {
                continue;
            };
            // In a cluster a table's coordinator runs where its control stream is owned, and
            // its partitions (keyed or not) are converted where they are owned. Before the
            // control stream exists, the owner of partition 0 (or of every partition) starts
            // the coordinator, which creates it. A single node owns everything.
            let distributed = chunks.is_some();
            let control = store.open_stream(&format!("table-control/{}", topic.name));
            let coordinates = match control {
                Ok(c) => {
                    store.owns(c.id)
                        && (distributed || topic.partitions.iter().all(|p| store.owns(p.stream)))
                }
                Err(_) if distributed => topic
                    .partitions
                    .first()
                    .is_some_and(|p| store.owns(p.stream)),
                Err(_) => topic.partitions.iter().all(|p| store.owns(p.stream)),
            };
            if !coordinates && !distributed {
                continue;
            }
            match table_topic(
                &config,
                &registry,
                &warehouse,
                &file_io,
                &indexes,
                &index_budget,
                &topic,
            ) {
                Ok((fp, mut t)) => {
                    if distributed {
                        t.chunks = chunks.clone();
                        wanted_converters.insert(topic.name.clone(), (fp.clone(), t.clone()));
                        if !coordinates {
                            continue;
                        }
                    }
                    let dlq = coordinator::dead_letter_table(&t.ident);
                    if let Some(other) = taken.get(&t.ident).or_else(|| taken.get(&dlq)) {
                        tracing::warn!(topic = %topic.name, table = %t.ident, other = %other, "table topic is misconfigured: its table or dead-letter table is another table topic's; it is not converted");
                        continue;
                    }
                    taken.insert(t.ident.clone(), topic.name.clone());
                    taken.insert(dlq, topic.name.clone());
                    wanted.insert(topic.name.clone(), (fp, t));
                }
                Err(e) => {
                    tracing::warn!(topic = %topic.name, error = %e, "table topic is misconfigured")
                }
            }
        }
        // Coordinators of topics that went away or changed stop between rounds (a round they
        // have started is committed first), then unregister their tables.
        reconcile(
            &mut running,
            &mut stopping,
            wanted,
            |topic, token| {
                tokio::spawn(coordinator::run(
                    topic,
                    worker.clone(),
                    committer.clone(),
                    store.clone(),
                    broker.clock().clone(),
                    leases.clone(),
                    statuses.clone(),
                    token,
                ))
            },
            &stop,
        );
        reconcile(
            &mut converters,
            &mut converters_stopping,
            wanted_converters,
            |topic, token| {
                tokio::spawn(convert::run(
                    topic,
                    worker.clone(),
                    committer.clone(),
                    store.clone(),
                    broker.config().node_id as i64,
                    token,
                ))
            },
            &stop,
        );
        if !running.is_empty() || !converters.is_empty() {
            worker.poll().await;
        }
    }
    for r in running.values() {
        r.token.cancel();
    }
    for r in converters.values() {
        r.token.cancel();
    }
    for task in running
        .into_values()
        .chain(converters.into_values())
        .map(|r| r.task)
        .chain(stopping.into_values())
        .chain(converters_stopping.into_values())
    {
        let _ = task.await;
    }
    worker.pool().close();
}

/// Brings the coordinators or converters `running` in line with `wanted`: stops those of
/// topics that went away or changed, and starts the missing ones with `start` once the topic's
/// last one has ended (it unregisters the table from the worker as it ends), so two never run
/// for one topic at once.
fn reconcile(
    running: &mut HashMap<String, Running>,
    stopping: &mut HashMap<String, tokio::task::JoinHandle<()>>,
    wanted: HashMap<String, (Fingerprint, TableTopic)>,
    start: impl Fn(TableTopic, CancellationToken) -> tokio::task::JoinHandle<()>,
    stop: &CancellationToken,
) {
    let ended: Vec<String> = running
        .iter()
        .filter(|(name, r)| {
            r.task.is_finished() || wanted.get(*name).is_none_or(|(w, _)| *w != r.fingerprint)
        })
        .map(|(name, _)| name.clone())
        .collect();
    for name in ended {
        if let Some(r) = running.remove(&name) {
            r.token.cancel();
            stopping.insert(name, r.task);
        }
    }
    stopping.retain(|_, task| !task.is_finished());
    for (name, (fingerprint, topic)) in wanted {
        if running.contains_key(&name) || stopping.contains_key(&name) {
            continue;
        }
        let token = stop.child_token();
        let task = start(topic, token.clone());
        running.insert(
            name,
            Running {
                fingerprint,
                token,
                task,
            },
        );
    }
}

/// A running coordinator (or converter).
struct Running {
    /// What it was started with.
    fingerprint: Fingerprint,
    token: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

fn table_topic(
    config: &TableTopicConfig,
    registry: &Arc<Registry>,
    warehouse: &str,
    file_io: &FileIO,
    indexes: &TableSettings,
    index_budget: &IndexBudget,
    topic: &inlet_ingest::Topic,
) -> anyhow::Result<(Fingerprint, TableTopic)> {
    let topic_name = topic.name.as_str();
    let (namespace, table) = (&config.namespace, &config.table);
    let ident = TableIdent::new(NamespaceIdent::new(namespace.clone()), table.clone());
    let value_type = ValueType::parse(&config.convert_value, &format!("{topic_name}-value"))?;
    let key_type = ValueType::parse(&config.convert_key, &format!("{topic_name}-key"))?;
    let transform = ValueTransform::parse(&config.transform_value)?;
    let data_location = format!("{warehouse}/{namespace}/{table}/data");
    let ctx = TableContext {
        last_column_id: 0,
        registry: registry.clone(),
        value_type,
        key_type,
        transform,
        schema: None,
        target: FileTarget {
            file_io: file_io.clone(),
            schema: Arc::new(iceberg::spec::Schema::builder().build()?),
            spec: Arc::new(iceberg::spec::PartitionSpec::unpartition_spec()),
            data_location,
        },
        dead_letter_target: None,
        partition_by: match &config.partition_by {
            Some(p) => inlet_table_worker::partition::parse(p)?,
            None => Vec::new(),
        },
        settings: FileSettings {
            target_file_bytes: config.target_file_bytes,
            ..FileSettings::default()
        },
        dead_letter_floor: Default::default(),
        event_time_field: config.event_time_field.clone(),
        upsert: UpsertSpec::from_configs(
            &config.id_columns,
            config.upsert,
            config.cdc_field.as_deref(),
            transform,
            index_budget.clone(),
            indexes.dir.join(topic_name),
        )?,
        file_tag: None,
    };
    let ctx_upsert = ctx.upsert.is_some();
    let fp = Fingerprint {
        ident: ident.clone(),
        topic_id: topic.id,
        partitions: topic.partitions.len(),
        configs: config.effective.clone(),
    };
    Ok((
        fp,
        TableTopic {
            name: topic_name.to_string(),
            topic_id: topic.id.simple().to_string(),
            ident,
            partitions: topic
                .partitions
                .iter()
                .map(|p| (p.index, p.stream))
                .collect(),
            chunks: None,
            ctx,
            commit_interval: config.commit_interval,
            watermark_idle: config.watermark_idle,
            expire: config.expire.map(|e| Expiry {
                older_than: e.older_than,
                retain_last: e.retain_last,
                max_snapshots: e.max_snapshots,
            }),
            dead_letter_pending_files: indexes.dead_letter_pending_files,
            orphans: indexes.orphans,
            compaction: indexes.compaction,
            expire_every: indexes.expire_every,
            compaction_interval: match config.compaction {
                Compaction::Off => None,
                Compaction::Every(d) => Some(d),
                Compaction::Default => Some(inlet_table_coordinator::compact::default_interval(
                    ctx_upsert,
                )),
            },
        },
    ))
}

/// The broker's partitions' transactions, as the table worker asks about them: a table reads
/// no further than a partition's last stable offset and skips aborted transactions.
#[derive(Debug)]
struct BrokerTxns(Arc<Broker>);

impl inlet_table_worker::TxnView for BrokerTxns {
    fn stable_end<'a>(
        &'a self,
        topic: &'a str,
        partition: i32,
    ) -> futures::future::BoxFuture<'a, std::result::Result<u64, String>> {
        Box::pin(async move {
            self.0
                .partition_stable_end(topic, partition)
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn aborted(
        &self,
        topic: &str,
        partition: i32,
        from: u64,
        to: u64,
    ) -> Vec<inlet_table_worker::AbortedTxn> {
        self.0
            .partition_aborted(topic, partition, from, to)
            .into_iter()
            .map(
                |(producer_id, first, last)| inlet_table_worker::AbortedTxn {
                    producer_id,
                    first,
                    last,
                },
            )
            .collect()
    }
}
