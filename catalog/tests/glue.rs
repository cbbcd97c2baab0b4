//! AWS Glue as the node's catalog (`inlet_catalog::glue`):
//! - against moto's Glue (from `scripts/test-env.sh`; skipped outside CI when it is not set
//!   up): namespaces and tables, the Glue parameters Iceberg engines read, commits, and a
//!   stale commit refused as a conflict with its metadata file deleted;
//! - against a Glue stand-in in this process: the `VersionId` guard of `UpdateTable`, which
//!   moto does not enforce (moto 5.2.5 ignores `VersionId`), so a rival commit that lands
//!   between the commit's `GetTable` and its `UpdateTable` is a conflict too; throttled
//!   calls are retried;
//! - the node's REST API over Glue (moto): one table per transaction, two answer 406.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::extract::State;
use axum::http::HeaderMap;
use iceberg::spec::{NestedField, NestedFieldRef, PrimitiveType, Schema, Type};
use iceberg::{Catalog, NamespaceIdent, TableCreation, TableIdent, TableUpdate};
use inlet_catalog::glue::{self, GlueClient, GlueSettings};
use inlet_catalog::rest::RestError;
use inlet_catalog::{CatalogConfig, CatalogKind, CommitTarget, NodeCatalog};
use object_store::aws::AwsCredential;
use object_store::StaticCredentialProvider;
use parking_lot::Mutex;
use serde_json::{json, Value};

/// A primitive field of a test schema.
fn field(id: i32, name: &str, required: bool, ty: PrimitiveType) -> NestedFieldRef {
    Arc::new(NestedField::new(id, name, Type::Primitive(ty), required))
}

/// A schema of `fields`, with id `schema_id`.
fn schema_of(schema_id: i32, fields: Vec<NestedFieldRef>) -> Schema {
    let builder = Schema::builder().with_schema_id(schema_id);
    builder.with_fields(fields).build().expect("schema")
}

fn schema() -> Schema {
    schema_of(0, vec![field(1, "id", true, PrimitiveType::Long)])
}

/// A Glue catalog's config, in `region` at `endpoint`, and where its files go: `<dir>/warehouse`
/// (created).
fn glue_config(
    dir: &tempfile::TempDir,
    region: &str,
    endpoint: String,
) -> (std::path::PathBuf, CatalogConfig) {
    let files = dir.path().join("warehouse");
    std::fs::create_dir_all(&files).expect("files dir");
    let config = CatalogConfig {
        kind: CatalogKind::Glue,
        region: Some(region.into()),
        endpoint: Some(endpoint),
        files: Some(format!("file://{}", files.display())),
        ..CatalogConfig::default()
    };
    (files, config)
}

/// The node's catalog of `config`, its own state in `dir`.
async fn open_node(config: &CatalogConfig, dir: &tempfile::TempDir) -> NodeCatalog {
    let root = dir.path().to_string_lossy();
    let clock = Arc::new(inlet_common::SystemClock);
    NodeCatalog::open(config, "unused", &root, None, clock)
        .await
        .expect("open")
}

fn set_property(key: &str, value: &str) -> Vec<TableUpdate> {
    vec![TableUpdate::SetProperties {
        updates: [(key.to_string(), value.to_string())].into(),
    }]
}

use inlet_test_support::service_env;

fn metadata_files(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".metadata.json"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[tokio::test]
async fn tables_live_in_moto_glue_and_stale_commits_conflict() {
    let Some(endpoint) = service_env("INLET_TEST_S3_ENDPOINT") else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let (files, config) = glue_config(&dir, "us-east-1", endpoint.clone());
    let node = open_node(&config, &dir).await;
    assert!(node.is_external());
    let catalog = node.catalog();
    // moto keeps its state for the whole run: a database of our own.
    let db = format!("gluetest_{}", std::process::id());
    let ns = NamespaceIdent::new(db.clone());
    catalog
        .create_namespace(
            &ns,
            HashMap::from([
                ("comment".to_string(), "made by a test".to_string()),
                ("owner".to_string(), "inlet".to_string()),
            ]),
        )
        .await
        .expect("create namespace");
    assert!(catalog
        .list_namespaces(None)
        .await
        .expect("list")
        .contains(&ns));
    let loaded = catalog.get_namespace(&ns).await.expect("namespace");
    assert_eq!(loaded.properties()["comment"], "made by a test");
    assert_eq!(loaded.properties()["owner"], "inlet");
    let err = catalog
        .create_namespace(&ns, HashMap::new())
        .await
        .unwrap_err();
    assert_eq!(
        err.kind(),
        iceberg::ErrorKind::NamespaceAlreadyExists,
        "{err}"
    );

    // A table without a location goes to <files>/<db>/<table>.
    let ident = TableIdent::new(ns.clone(), "events".into());
    let creation = TableCreation::builder()
        .name("events".into())
        .schema(schema())
        .build();
    let table = catalog.create_table(&ns, creation).await.expect("create");
    assert_eq!(
        table.metadata().location(),
        format!("file://{}/{db}/events", files.display())
    );
    assert!(catalog.table_exists(&ident).await.expect("exists"));
    assert_eq!(
        catalog.list_tables(&ns).await.expect("tables"),
        vec![ident.clone()]
    );
    let err = catalog
        .create_table(
            &ns,
            TableCreation::builder()
                .name("events".into())
                .schema(schema())
                .build(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), iceberg::ErrorKind::TableAlreadyExists, "{err}");
    let metadata_dir = files.join(&db).join("events").join("metadata");
    assert_eq!(
        metadata_files(&metadata_dir).len(),
        1,
        "the refused create left no file"
    );

    // The Glue table is what Athena and pyiceberg expect.
    let glue = GlueClient::new(
        &GlueSettings {
            region: "us-east-1".into(),
            endpoint: Some(endpoint.clone()),
            catalog_id: None,
        },
        Arc::new(inlet_common::SystemClock),
    )
    .expect("client");
    let get = || async {
        glue.call("GetTable", json!({"DatabaseName": db, "Name": "events"}))
            .await
            .expect("GetTable")["Table"]
            .clone()
    };
    let raw = get().await;
    assert_eq!(raw["Parameters"]["table_type"], "ICEBERG");
    assert_eq!(raw["StorageDescriptor"]["Columns"][0]["Name"], "id");
    assert_eq!(raw["StorageDescriptor"]["Columns"][0]["Type"], "bigint");
    assert_eq!(
        raw["Parameters"]["metadata_location"],
        table.metadata_location().expect("location")
    );

    // A commit moves the pointer and records the previous one.
    let target = node.commit_target();
    let first = target
        .commit(&table, Vec::new(), set_property("round", "1"))
        .await
        .expect("commit")
        .expect("changed");
    let after = catalog.load_table(&ident).await.expect("load");
    assert_eq!(after.metadata().properties()["round"], "1");
    assert_eq!(after.metadata().last_updated_ms(), first.last_updated_ms());
    let raw = get().await;
    assert_eq!(
        raw["Parameters"]["previous_metadata_location"],
        table.metadata_location().expect("location")
    );
    assert_eq!(
        raw["Parameters"]["metadata_location"],
        after.metadata_location().expect("location")
    );
    assert_eq!(metadata_files(&metadata_dir).len(), 2);

    // A commit based on the table before that one lost the race: a conflict, nothing
    // changed, and the metadata file it wrote is gone.
    match target
        .commit(&table, Vec::new(), set_property("round", "stale"))
        .await
    {
        Err(RestError::CommitFailed(m)) => assert!(m.contains("another commit won"), "{m}"),
        other => panic!("a stale commit must conflict: {other:?}"),
    }
    let now = catalog.load_table(&ident).await.expect("load");
    assert_eq!(now.metadata_location(), after.metadata_location());
    assert_eq!(metadata_files(&metadata_dir).len(), 2);

    // iceberg's own commit API reaches the same path.
    let table = catalog.load_table(&ident).await.expect("load");
    let tx = iceberg::transaction::Transaction::new(&table);
    let tx = iceberg::transaction::ApplyTransactionAction::apply(
        tx.update_table_properties().set("round".into(), "2".into()),
        tx,
    )
    .expect("action");
    let table = tx.commit(catalog.as_ref()).await.expect("transaction");
    assert_eq!(table.metadata().properties()["round"], "2");

    // A schema change shows in the Glue table's columns, in Hive type names.
    let wider = schema_of(
        1,
        vec![
            field(1, "id", true, PrimitiveType::Long),
            field(2, "page", false, PrimitiveType::String),
        ],
    );
    target
        .commit(
            &table,
            Vec::new(),
            vec![
                TableUpdate::AddSchema { schema: wider },
                TableUpdate::SetCurrentSchema { schema_id: -1 },
            ],
        )
        .await
        .expect("schema change")
        .expect("changed");
    let raw = get().await;
    let columns: Vec<(String, String)> = raw["StorageDescriptor"]["Columns"]
        .as_array()
        .expect("columns")
        .iter()
        .map(|c| {
            (
                c["Name"].as_str().unwrap_or_default().to_string(),
                c["Type"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert_eq!(
        columns,
        vec![
            ("id".to_string(), "bigint".to_string()),
            ("page".to_string(), "string".to_string())
        ]
    );
    assert_eq!(
        raw["StorageDescriptor"]["Location"],
        table.metadata().location()
    );

    // Glue would delete the tables with their database: refused.
    let err = catalog.drop_namespace(&ns).await.unwrap_err();
    assert!(err.to_string().contains("not empty"), "{err}");
    catalog.drop_table(&ident).await.expect("drop");
    assert!(!catalog.table_exists(&ident).await.expect("exists"));
    let err = catalog.load_table(&ident).await.unwrap_err();
    assert_eq!(err.kind(), iceberg::ErrorKind::TableNotFound, "{err}");
    catalog.drop_namespace(&ns).await.expect("drop namespace");
    assert!(!catalog.namespace_exists(&ns).await.expect("exists"));
}

/// A Glue stand-in: one table, with the `VersionId` bookkeeping real Glue does.
#[derive(Clone, Default)]
struct FakeGlue {
    table: Arc<Mutex<Option<Value>>>,
    version: Arc<AtomicUsize>,
    /// `VersionId`s the `UpdateTable` calls carried.
    update_versions: Arc<Mutex<Vec<Option<String>>>>,
    /// Another writer updates the table right after the next `GetTable` is answered.
    rival_after_get: Arc<AtomicUsize>,
    /// This many calls are answered `ThrottlingException` first.
    throttle: Arc<AtomicUsize>,
}

async fn fake_glue(
    State(glue): State<FakeGlue>,
    headers: HeaderMap,
    body: String,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let target = headers
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    assert!(
        headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|a| a.starts_with("AWS4-HMAC-SHA256 ")),
        "signed"
    );
    let request: Value = serde_json::from_str(&body).expect("json");
    let error = |name: &str| {
        (
            axum::http::StatusCode::BAD_REQUEST,
            json!({"__type": name, "message": "from the stand-in"}).to_string(),
        )
            .into_response()
    };
    let ok = |v: Value| v.to_string().into_response();
    if glue
        .throttle
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
    {
        return error("ThrottlingException");
    }
    match target.as_str() {
        "AWSGlue.CreateTable" => {
            let mut table = request["TableInput"].clone();
            table["DatabaseName"] = request["DatabaseName"].clone();
            *glue.table.lock() = Some(table);
            glue.version.store(0, Ordering::SeqCst);
            ok(json!({}))
        }
        "AWSGlue.GetTable" => {
            let Some(mut table) = glue.table.lock().clone() else {
                return error("EntityNotFoundException");
            };
            table["VersionId"] = json!(glue.version.load(Ordering::SeqCst).to_string());
            if glue.rival_after_get.swap(0, Ordering::SeqCst) == 1 {
                // The rival changes something other than the pointer, so only the
                // version tells.
                glue.version.fetch_add(1, Ordering::SeqCst);
            }
            ok(json!({"Table": table}))
        }
        "AWSGlue.UpdateTable" => {
            let sent = request["VersionId"].as_str().map(str::to_string);
            glue.update_versions.lock().push(sent.clone());
            let current = glue.version.load(Ordering::SeqCst).to_string();
            if sent.as_deref() != Some(current.as_str()) {
                return error("ConcurrentModificationException");
            }
            let mut table = request["TableInput"].clone();
            table["DatabaseName"] = request["DatabaseName"].clone();
            *glue.table.lock() = Some(table);
            glue.version.fetch_add(1, Ordering::SeqCst);
            ok(json!({}))
        }
        other => error(&format!("UnknownOperationException {other}")),
    }
}

#[tokio::test]
async fn update_table_carries_the_loaded_version_and_a_newer_one_is_a_conflict() {
    let glue = FakeGlue::default();
    let app = axum::Router::new()
        .route("/", axum::routing::post(fake_glue))
        .with_state(glue.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let endpoint = format!("http://{}", listener.local_addr().expect("addr"));
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let dir = tempfile::tempdir().expect("tempdir");
    let (files, config) = glue_config(&dir, "eu-west-1", endpoint);
    // Fixed keys for the signature (nothing checks them), so no credential chain runs.
    let client = GlueClient::new(
        &glue::settings(&config).expect("settings"),
        Arc::new(inlet_common::SystemClock),
    )
    .expect("client")
    .with_credentials(Arc::new(StaticCredentialProvider::new(AwsCredential {
        key_id: "AKIDEXAMPLE".into(),
        secret_key: "secret".into(),
        token: None,
    })));
    let home =
        glue::open_with_client(&config, &dir.path().to_string_lossy(), None, client).expect("open");
    let target = CommitTarget::Glue(home.catalog.clone());
    let catalog: Arc<dyn Catalog> = home.catalog.clone();
    // Throttled calls are retried (here, the CreateTable below).
    glue.throttle.store(2, Ordering::SeqCst);
    let ns = NamespaceIdent::new("db".into());
    let location = format!("file://{}/db/t", files.display());
    let table = catalog
        .create_table(
            &ns,
            TableCreation::builder()
                .name("t".into())
                .location(location)
                .schema(schema())
                .build(),
        )
        .await
        .expect("create");
    assert_eq!(glue.throttle.load(Ordering::SeqCst), 0);
    target
        .commit(&table, Vec::new(), set_property("k", "1"))
        .await
        .expect("commit")
        .expect("changed");
    assert_eq!(*glue.update_versions.lock(), vec![Some("0".to_string())]);

    // Someone updates the Glue table between the commit's GetTable and its UpdateTable:
    // the pointer check passes, the version does not.
    let table = catalog
        .load_table(&TableIdent::new(ns.clone(), "t".into()))
        .await
        .expect("load");
    glue.rival_after_get.store(1, Ordering::SeqCst);
    match target
        .commit(&table, Vec::new(), set_property("k", "2"))
        .await
    {
        Err(RestError::CommitFailed(m)) => {
            assert!(m.contains("ConcurrentModificationException"), "{m}")
        }
        other => panic!("a lost race must conflict: {other:?}"),
    }
    assert_eq!(
        *glue.update_versions.lock(),
        vec![Some("0".to_string()), Some("1".to_string())]
    );
    assert_eq!(
        metadata_files(&files.join("db").join("t").join("metadata")).len(),
        2,
        "the losing commit's metadata file is deleted"
    );
    server.abort();
}

/// The node's `/iceberg` over Glue: a one-table transaction commits (and moves the Glue
/// pointer), a transaction over two tables answers 406 and changes nothing.
#[tokio::test]
async fn the_rest_api_over_glue_commits_one_table_at_a_time() {
    let Some(endpoint) = service_env("INLET_TEST_S3_ENDPOINT") else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let (files, config) = glue_config(&dir, "us-east-1", endpoint);
    let node = open_node(&config, &dir).await;
    let catalog = node.catalog();
    let db = format!("resttest_{}", std::process::id());
    let ns = NamespaceIdent::new(db.clone());
    catalog
        .create_namespace(&ns, HashMap::new())
        .await
        .expect("namespace");
    for name in ["a", "b"] {
        catalog
            .create_table(
                &ns,
                TableCreation::builder()
                    .name(name.into())
                    .schema(schema())
                    .build(),
            )
            .await
            .expect("create");
    }
    let app = axum::Router::new().nest(
        "/iceberg",
        node.router(inlet_catalog::rest::RestConfig::default()),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}/iceberg/v1", listener.local_addr().expect("addr"));
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let http = reqwest::Client::new();

    let config: Value = http
        .get(format!("{base}/config"))
        .send()
        .await
        .expect("config")
        .json()
        .await
        .expect("json");
    assert_eq!(
        config["overrides"]["warehouse"],
        format!("file://{}", files.display())
    );

    let change = |table: &str, value: &str| {
        json!({
            "identifier": {"namespace": [db], "name": table},
            "requirements": [],
            "updates": [{"action": "set-properties", "updates": {"k": value}}],
        })
    };
    let a = TableIdent::new(ns.clone(), "a".into());
    let b = TableIdent::new(ns.clone(), "b".into());
    let before_b = catalog.load_table(&b).await.expect("b");
    let response = http
        .post(format!("{base}/transactions/commit"))
        .json(&json!({"table-changes": [change("a", "1"), change("b", "1")]}))
        .send()
        .await
        .expect("transaction");
    assert_eq!(response.status(), 406);
    let body: Value = response.json().await.expect("json");
    assert_eq!(
        body["error"]["type"], "UnsupportedOperationException",
        "{body}"
    );
    assert!(!catalog
        .load_table(&a)
        .await
        .expect("a")
        .metadata()
        .properties()
        .contains_key("k"));
    assert_eq!(
        metadata_files(&files.join(&db).join("b").join("metadata")).len(),
        1,
        "the refused transaction's metadata files are deleted"
    );

    let response = http
        .post(format!("{base}/transactions/commit"))
        .json(&json!({"table-changes": [change("b", "2")]}))
        .send()
        .await
        .expect("transaction");
    assert_eq!(response.status(), 204);
    let after_b = catalog.load_table(&b).await.expect("b");
    assert_eq!(after_b.metadata().properties()["k"], "2");
    assert_ne!(after_b.metadata_location(), before_b.metadata_location());
    server.abort();
}
