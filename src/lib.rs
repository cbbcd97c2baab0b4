//! Assembling an Inlet node from its crates (DESIGN.md §2): the stream store today; the Kafka
//! endpoint, Schema Registry, table workers, coordinators, catalog and query engine join it as
//! their issues land.

pub mod config;

use anyhow::Context;
use inlet_storage::StreamStore;

use config::NodeConfig;

/// Opens a node's stream store from its configuration.
pub async fn open_store(config: &NodeConfig) -> anyhow::Result<StreamStore> {
    let mut storage = config.storage.clone();
    storage.node_id = config.node_id;
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("creating data dir {}", config.data_dir.display()))?;
    StreamStore::builder(config.wal_dir())
        .config(storage)
        .meta_url(config.meta_url())
        .object_store_url(config.object_store_url())
        .open()
        .await
        .context("opening the stream store")
}

/// Runs a node until SIGTERM or Ctrl-C, then stops it cleanly: the WAL is synced and the
/// background tasks end.
pub async fn serve(config: NodeConfig) -> anyhow::Result<()> {
    // Listen for signals before announcing readiness, so an early SIGTERM is not fatal.
    let shutdown = shutdown_signal()?;
    let store = open_store(&config).await?;
    tracing::info!(
        data_dir = %config.data_dir.display(),
        object_store = %config.object_store_url(),
        streams = store.list_streams().len(),
        "Inlet node is up (stream store only: the Kafka, Schema Registry and HTTP listeners \
         arrive with their issues)"
    );
    shutdown.await;
    tracing::info!("shutting down");
    store.close().await;
    tracing::info!("stopped cleanly");
    Ok(())
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
