//! The committer on AWS Glue (moto's, from `scripts/test-env.sh`; skipped outside CI when it
//! is not set up): rounds become snapshots whose pointer moves in Glue, and a round whose
//! base went stale (another writer committed right after the committer loaded the table) is
//! a conflict, rebuilt on the new base and retried; the losing attempt leaves no metadata
//! file.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use iceberg::table::Table;
use iceberg::{Catalog, Namespace, NamespaceIdent, Result, TableCommit, TableCreation, TableIdent};
use inlet_catalog::{CatalogConfig, CatalogKind};
use inlet_table_coordinator::commit::{Committer, Round};
use tokio::sync::Mutex;

fn round(n: u64) -> Round {
    common::round("g", n)
}

/// The Glue catalog, except that the next `load_table` is followed by a rival's commit, so
/// the table it returns is stale by the time the committer commits on it.
#[derive(Debug)]
struct RivalAfterLoad {
    inner: Arc<dyn Catalog>,
    rival: Mutex<Option<(Committer, Round)>>,
}

#[async_trait]
impl Catalog for RivalAfterLoad {
    async fn list_namespaces(&self, p: Option<&NamespaceIdent>) -> Result<Vec<NamespaceIdent>> {
        self.inner.list_namespaces(p).await
    }
    async fn create_namespace(
        &self,
        ns: &NamespaceIdent,
        props: HashMap<String, String>,
    ) -> Result<Namespace> {
        self.inner.create_namespace(ns, props).await
    }
    async fn get_namespace(&self, ns: &NamespaceIdent) -> Result<Namespace> {
        self.inner.get_namespace(ns).await
    }
    async fn namespace_exists(&self, ns: &NamespaceIdent) -> Result<bool> {
        self.inner.namespace_exists(ns).await
    }
    async fn update_namespace(
        &self,
        ns: &NamespaceIdent,
        props: HashMap<String, String>,
    ) -> Result<()> {
        self.inner.update_namespace(ns, props).await
    }
    async fn drop_namespace(&self, ns: &NamespaceIdent) -> Result<()> {
        self.inner.drop_namespace(ns).await
    }
    async fn list_tables(&self, ns: &NamespaceIdent) -> Result<Vec<TableIdent>> {
        self.inner.list_tables(ns).await
    }
    async fn create_table(&self, ns: &NamespaceIdent, c: TableCreation) -> Result<Table> {
        self.inner.create_table(ns, c).await
    }
    async fn load_table(&self, table: &TableIdent) -> Result<Table> {
        let loaded = self.inner.load_table(table).await?;
        if let Some((rival, round)) = self.rival.lock().await.take() {
            rival
                .commit(table, &round)
                .await
                .expect("the rival's commit");
        }
        Ok(loaded)
    }
    async fn drop_table(&self, table: &TableIdent) -> Result<()> {
        self.inner.drop_table(table).await
    }
    async fn purge_table(&self, table: &TableIdent) -> Result<()> {
        self.inner.purge_table(table).await
    }
    async fn table_exists(&self, table: &TableIdent) -> Result<bool> {
        self.inner.table_exists(table).await
    }
    async fn rename_table(&self, src: &TableIdent, dest: &TableIdent) -> Result<()> {
        self.inner.rename_table(src, dest).await
    }
    async fn register_table(&self, table: &TableIdent, location: String) -> Result<Table> {
        self.inner.register_table(table, location).await
    }
    async fn update_table(&self, commit: TableCommit) -> Result<Table> {
        self.inner.update_table(commit).await
    }
}

#[tokio::test]
async fn rounds_commit_to_glue_and_a_stale_base_is_retried() {
    let Some(endpoint) = inlet_test_support::service_env("INLET_TEST_S3_ENDPOINT") else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let files = dir.path().join("warehouse");
    std::fs::create_dir_all(&files).expect("files dir");
    let config = CatalogConfig {
        kind: CatalogKind::Glue,
        region: Some("us-east-1".into()),
        endpoint: Some(endpoint),
        files: Some(format!("file://{}", files.display())),
        ..CatalogConfig::default()
    };
    let root = dir.path().to_string_lossy().into_owned();
    let ours = common::open_catalog(&config, &root).await;
    let theirs = common::open_catalog(&config, &root).await;
    let catalog = Arc::new(RivalAfterLoad {
        inner: ours.catalog(),
        rival: Mutex::new(None),
    });
    let committer = Committer::with_target(catalog.clone(), ours.commit_target());
    let rival = Committer::with_target(theirs.catalog(), theirs.commit_target());
    // moto keeps its state for the whole run: a database of our own.
    let db = format!("coordtest_{}", std::process::id());
    let ident = TableIdent::new(NamespaceIdent::new(db.clone()), "t".into());

    // The first round creates the namespace and the table in Glue.
    assert!(committer
        .commit(&ident, &round(1))
        .await
        .expect("commit")
        .is_some());
    assert_eq!(
        committer.commit(&ident, &round(1)).await.expect("again"),
        None
    );

    // The rival commits round 2 right after the committer loads the table for round 3:
    // the swap finds Glue's pointer moved, and round 3 is rebuilt on round 2.
    *catalog.rival.lock().await = Some((rival.clone(), round(2)));
    let third = committer
        .commit(&ident, &round(3))
        .await
        .expect("commit after a lost race");
    assert!(catalog.rival.lock().await.is_none(), "the rival committed");
    let table = rival.load(&ident).await.expect("load").expect("exists");
    common::assert_rebuilt_on_round_2(&table, third, "g");
    // Created, then rounds 1, 2 and 3: the lost attempt's metadata file was deleted.
    let metadata = files.join(&db).join("t").join("metadata");
    let count = std::fs::read_dir(&metadata)
        .expect("metadata dir")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".metadata.json"))
        .count();
    assert_eq!(count, 4);
}
