//! `inlet users`: SASL users' SCRAM credentials, written straight to a node's metadata store
//! (as Kafka's `kafka-storage format --add-scram` does), so the first user can be made before
//! any client can authenticate. A running node reads them at each authentication; clients
//! change them with Kafka's AlterUserScramCredentials.

use anyhow::Context;
use inlet_ingest::sasl::credentials;
use inlet_ingest::sasl::scram::{Credential, Mechanism, MAX_ITERATIONS, MIN_ITERATIONS};
use inlet_storage::MetaStore;

use crate::config::NodeConfig;

async fn open(config: &NodeConfig) -> anyhow::Result<MetaStore> {
    if config.meta.is_none() {
        std::fs::create_dir_all(&config.data_dir)
            .with_context(|| format!("creating data dir {}", config.data_dir.display()))?;
    }
    let meta = MetaStore::connect(&config.meta_url())
        .await
        .context("opening the metadata store")?;
    credentials::prepare(&meta).await?;
    Ok(meta)
}

/// Stores `user`'s credentials for `mechanisms` from `password`.
pub async fn add(
    config: &NodeConfig,
    user: &str,
    password: &str,
    mechanisms: &[String],
    iterations: i32,
) -> anyhow::Result<()> {
    if user.is_empty() || password.is_empty() {
        anyhow::bail!("the user name and the password must not be empty");
    }
    if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
        anyhow::bail!(
            "--iterations must be {MIN_ITERATIONS} to {MAX_ITERATIONS}, not {iterations}"
        );
    }
    let mechanisms = mechanisms
        .iter()
        .map(|m| {
            Mechanism::from_name(m).with_context(|| {
                format!("unknown mechanism {m:?}: use SCRAM-SHA-256 or SCRAM-SHA-512")
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let meta = open(config).await?;
    for m in mechanisms {
        credentials::upsert(
            &meta,
            user,
            &Credential::from_password(m, password, iterations),
        )
        .await?;
    }
    Ok(())
}

/// Every user with its mechanisms' names.
pub async fn list(config: &NodeConfig) -> anyhow::Result<Vec<(String, Vec<String>)>> {
    let meta = open(config).await?;
    Ok(credentials::list(&meta)
        .await?
        .into_iter()
        .map(|(user, creds)| {
            let names = creds
                .iter()
                .map(|(m, iterations)| format!("{}({iterations})", m.name()))
                .collect();
            (user, names)
        })
        .collect())
}

/// Deletes `user`'s credentials; returns how many there were.
pub async fn delete(config: &NodeConfig, user: &str) -> anyhow::Result<u64> {
    let meta = open(config).await?;
    Ok(credentials::delete(&meta, user, None).await?)
}
