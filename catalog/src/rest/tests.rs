//! The REST catalog over a real `SqlCatalog` on a temporary SQLite file, called over HTTP with
//! `reqwest`: every route, the error codes, name checks and commit conflicts.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use iceberg::io::LocalFsStorageFactory;
use iceberg::CatalogBuilder;
use iceberg_catalog_sql::SqlCatalogBuilder;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use tempfile::TempDir;
use tokio::task::JoinHandle;

use super::{router, router_with_commits, RestConfig, SqlMetadataPointers};

/// A server on 127.0.0.1 over a fresh SQL catalog; stops when dropped.
struct Server {
    base: String,
    /// The catalog the server serves, for commits that bypass it (as Inlet's own writers do).
    catalog: Arc<dyn iceberg::Catalog>,
    warehouse: String,
    dir: TempDir,
    http: reqwest::Client,
    task: JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn start(config: RestConfig) -> Server {
    start_with(true, |_| config).await
}

/// Starts a server whose config may depend on its warehouse location (`file://.../warehouse`).
async fn start_with(commits: bool, config: impl FnOnce(&str) -> RestConfig) -> Server {
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("catalog.db").display()
    );
    let warehouse = format!("file://{}/warehouse", dir.path().display());
    let config = config(&warehouse);
    config.validate().expect("valid config");
    let catalog = SqlCatalogBuilder::default()
        .uri(&uri)
        .warehouse_location(&warehouse)
        .with_storage_factory(Arc::new(LocalFsStorageFactory))
        .load("inlet", HashMap::new())
        .await
        .expect("sql catalog");
    let catalog: Arc<dyn iceberg::Catalog> = Arc::new(catalog);
    let api = if commits {
        let pointers = SqlMetadataPointers::connect(&uri, "inlet")
            .await
            .expect("pointers");
        router_with_commits(catalog.clone(), Arc::new(pointers), config)
    } else {
        router(catalog.clone(), config)
    };
    let app = Router::new().nest("/iceberg", api);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.expect("serve");
    });
    Server {
        base: format!("http://{addr}/iceberg"),
        catalog,
        warehouse,
        dir,
        http: reqwest::Client::new(),
        task,
    }
}

impl Server {
    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("request");
        let status = response.status();
        let text = response.text().await.expect("body");
        let value = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"))
        };
        (status, value)
    }

    /// The status of a GET sent byte for byte, without the client normalizing the path.
    async fn raw_get_status(&self, path: &str) -> u16 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let authority = self
            .base
            .trim_start_matches("http://")
            .trim_end_matches("/iceberg");
        let mut stream = tokio::net::TcpStream::connect(authority)
            .await
            .expect("connect");
        let request = format!(
            "GET /iceberg{path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).await.expect("write");
        let mut response = String::new();
        stream.read_to_string(&mut response).await.expect("read");
        response
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or_else(|| panic!("no status in {response:?}"))
    }

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.call(Method::GET, path, None).await
    }

    async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.call(Method::POST, path, Some(body)).await
    }

    async fn create_namespace(&self, levels: &[&str]) {
        let (status, body) = self
            .post("/v1/namespaces", json!({"namespace": levels}))
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }

    /// Creates `ns.name` the way Spark does: name and schema only.
    async fn create_table(&self, ns: &str, name: &str) -> Value {
        let (status, body) = self
            .post(
                &format!("/v1/namespaces/{ns}/tables"),
                json!({"name": name, "schema": schema()}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body
    }
}

fn schema() -> Value {
    json!({
        "type": "struct",
        "schema-id": 0,
        "fields": [
            {"id": 1, "name": "id", "required": true, "type": "long"},
            {"id": 2, "name": "data", "required": false, "type": "string"}
        ]
    })
}

/// Asserts an `ErrorModel` answer with this status and type.
#[track_caller]
fn assert_error(answer: &(StatusCode, Value), status: StatusCode, kind: &str) {
    let (got, body) = answer;
    assert_eq!(*got, status, "{body}");
    assert_eq!(body["error"]["type"], kind, "{body}");
    assert_eq!(body["error"]["code"], status.as_u16(), "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{body}"
    );
}

fn snapshot_update(snapshot_id: i64, parent: Option<i64>, sequence: i64) -> Vec<Value> {
    let mut snapshot = json!({
        "snapshot-id": snapshot_id,
        "sequence-number": sequence,
        "timestamp-ms": 4_000_000_000_000i64 + sequence,
        "manifest-list": format!("file:///nowhere/snap-{snapshot_id}.avro"),
        "summary": {"operation": "append"},
        "schema-id": 0
    });
    if let Some(parent) = parent {
        snapshot["parent-snapshot-id"] = json!(parent);
    }
    vec![
        json!({"action": "add-snapshot", "snapshot": snapshot}),
        json!({"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": snapshot_id}),
    ]
}

#[tokio::test]
async fn config_lists_properties_and_endpoints() {
    let config = RestConfig {
        defaults: [("clients".to_string(), "4".to_string())].into(),
        overrides: [("warehouse".to_string(), "s3://bucket/wh".to_string())].into(),
        ..RestConfig::default()
    };
    let server = start(config).await;
    let (status, body) = server.get("/v1/config").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["defaults"], json!({"clients": "4"}));
    assert_eq!(body["overrides"], json!({"warehouse": "s3://bucket/wh"}));
    let endpoints: Vec<&str> = body["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert!(endpoints.contains(&"POST /v1/{prefix}/namespaces/{namespace}/tables/{table}"));
    assert!(endpoints.contains(&"HEAD /v1/{prefix}/namespaces/{namespace}"));
    assert!(endpoints.contains(&"POST /v1/{prefix}/transactions/commit"));
}

#[tokio::test]
async fn namespaces_are_created_listed_updated_and_dropped() {
    let server = start(RestConfig::default()).await;
    let (status, body) = server
        .post(
            "/v1/namespaces",
            json!({"namespace": ["sales"], "properties": {"owner": "ops"}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["namespace"], json!(["sales"]));
    assert_eq!(body["properties"]["owner"], "ops");
    assert_error(
        &server
            .post("/v1/namespaces", json!({"namespace": ["sales"]}))
            .await,
        StatusCode::CONFLICT,
        "AlreadyExistsException",
    );

    let (status, body) = server.get("/v1/namespaces/sales").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["properties"]["owner"], "ops");
    assert_eq!(
        server
            .call(Method::HEAD, "/v1/namespaces/sales", None)
            .await
            .0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        server
            .call(Method::HEAD, "/v1/namespaces/nope", None)
            .await
            .0,
        StatusCode::NOT_FOUND
    );
    assert_error(
        &server.get("/v1/namespaces/nope").await,
        StatusCode::NOT_FOUND,
        "NoSuchNamespaceException",
    );

    // Nested namespaces; `salesx` shares the prefix `sales` but is not its child.
    server.create_namespace(&["sales", "eu"]).await;
    server.create_namespace(&["sales", "eu", "fr"]).await;
    server.create_namespace(&["salesx"]).await;
    let (status, body) = server.get("/v1/namespaces").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["namespaces"], json!([["sales"], ["salesx"]]));
    let (status, body) = server.get("/v1/namespaces?parent=sales").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["namespaces"], json!([["sales", "eu"]]));
    let (_, body) = server.get("/v1/namespaces?parent=sales%1Feu").await;
    assert_eq!(body["namespaces"], json!([["sales", "eu", "fr"]]));
    let (_, body) = server.get("/v1/namespaces/sales%1Feu").await;
    assert_eq!(body["namespace"], json!(["sales", "eu"]));
    assert_error(
        &server.get("/v1/namespaces?parent=nope").await,
        StatusCode::NOT_FOUND,
        "NoSuchNamespaceException",
    );
    let (_, body) = server.get("/v1/namespaces?pageSize=1").await;
    assert_eq!(body["namespaces"], json!([["sales"]]));
    assert_eq!(body["next-page-token"], "1");
    let (_, body) = server.get("/v1/namespaces?pageSize=1&pageToken=1").await;
    assert_eq!(body["namespaces"], json!([["salesx"]]));
    assert_eq!(body["next-page-token"], Value::Null);

    // Properties: updates apply; removing a missing key reports it; the SQL catalog cannot
    // delete properties, so removing an existing one is refused before anything changes.
    let (status, body) = server
        .post(
            "/v1/namespaces/sales/properties",
            json!({"updates": {"tier": "gold"}, "removals": ["absent"]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["updated"], json!(["tier"]));
    assert_eq!(body["removed"], json!([]));
    assert_eq!(body["missing"], json!(["absent"]));
    let (_, body) = server.get("/v1/namespaces/sales").await;
    assert_eq!(body["properties"]["tier"], "gold");
    assert_error(
        &server
            .post(
                "/v1/namespaces/sales/properties",
                json!({"updates": {"x": "1"}, "removals": ["owner"]}),
            )
            .await,
        StatusCode::NOT_ACCEPTABLE,
        "UnsupportedOperationException",
    );
    let (_, body) = server.get("/v1/namespaces/sales").await;
    assert_eq!(body["properties"].get("x"), None, "{body}");
    assert_error(
        &server
            .post(
                "/v1/namespaces/sales/properties",
                json!({"updates": {"a": "1"}, "removals": ["a"]}),
            )
            .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "UnprocessableEntityException",
    );
    assert_error(
        &server
            .post(
                "/v1/namespaces/nope/properties",
                json!({"updates": {"a": "1"}}),
            )
            .await,
        StatusCode::NOT_FOUND,
        "NoSuchNamespaceException",
    );

    // Dropping: not while it holds namespaces or tables.
    assert_error(
        &server
            .call(Method::DELETE, "/v1/namespaces/sales%1Feu", None)
            .await,
        StatusCode::CONFLICT,
        "NamespaceNotEmptyException",
    );
    assert_eq!(
        server
            .call(Method::DELETE, "/v1/namespaces/sales%1Feu%1Ffr", None)
            .await
            .0,
        StatusCode::NO_CONTENT
    );
    server.create_table("sales%1Feu", "orders").await;
    assert_error(
        &server
            .call(Method::DELETE, "/v1/namespaces/sales%1Feu", None)
            .await,
        StatusCode::CONFLICT,
        "NamespaceNotEmptyException",
    );
    assert_eq!(
        server
            .call(
                Method::DELETE,
                "/v1/namespaces/sales%1Feu/tables/orders",
                None
            )
            .await
            .0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        server
            .call(Method::DELETE, "/v1/namespaces/sales%1Feu", None)
            .await
            .0,
        StatusCode::NO_CONTENT
    );
    assert_error(
        &server
            .call(Method::DELETE, "/v1/namespaces/sales%1Feu", None)
            .await,
        StatusCode::NOT_FOUND,
        "NoSuchNamespaceException",
    );
}

#[tokio::test]
async fn tables_are_created_loaded_renamed_registered_and_dropped() {
    let server = start(RestConfig {
        table_config: [("s3.region".to_string(), "eu-west-1".to_string())].into(),
        ..RestConfig::default()
    })
    .await;
    server.create_namespace(&["db"]).await;
    server.create_namespace(&["other"]).await;

    let created = server.create_table("db", "events.v1").await;
    let location = created["metadata-location"].as_str().unwrap().to_string();
    assert!(location.starts_with(&server.warehouse), "{location}");
    assert_eq!(created["metadata"]["current-schema-id"], 0);
    assert_eq!(created["config"]["s3.region"], "eu-west-1");
    assert_error(
        &server
            .post(
                "/v1/namespaces/db/tables",
                json!({"name": "events.v1", "schema": schema()}),
            )
            .await,
        StatusCode::CONFLICT,
        "AlreadyExistsException",
    );
    assert_error(
        &server
            .post(
                "/v1/namespaces/nope/tables",
                json!({"name": "t", "schema": schema()}),
            )
            .await,
        StatusCode::NOT_FOUND,
        "NoSuchNamespaceException",
    );

    // Full create request: partition spec, write order, properties, format version.
    let (status, body) = server
        .post(
            "/v1/namespaces/db/tables",
            json!({
                "name": "partitioned",
                "location": format!("{}/custom/partitioned", server.warehouse),
                "schema": schema(),
                "partition-spec": {"spec-id": 0, "fields": [
                    {"source-id": 1, "field-id": 1000, "name": "id_bucket", "transform": "bucket[4]"}
                ]},
                "write-order": {"order-id": 1, "fields": [
                    {"source-id": 1, "transform": "identity", "direction": "asc", "null-order": "nulls-first"}
                ]},
                "properties": {"format-version": "1", "owner": "me"},
                "stage-create": false
            }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["metadata"]["format-version"], 1);
    assert_eq!(body["metadata"]["properties"]["owner"], "me");
    assert_eq!(
        body["metadata"]["partition-specs"][0]["fields"][0]["transform"],
        "bucket[4]"
    );
    assert!(body["metadata"]["location"]
        .as_str()
        .unwrap()
        .ends_with("/custom/partitioned"));
    assert_error(
        &server
            .post(
                "/v1/namespaces/db/tables",
                json!({"name": "bad", "schema": {"type": "struct"}}),
            )
            .await,
        StatusCode::BAD_REQUEST,
        "BadRequestException",
    );
    assert_error(
        &server
            .post(
                "/v1/namespaces/db/tables",
                json!({"name": "bad", "schema": schema(), "properties": {"format-version": "7"}}),
            )
            .await,
        StatusCode::BAD_REQUEST,
        "BadRequestException",
    );

    let (status, body) = server.get("/v1/namespaces/db/tables").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body["identifiers"],
        json!([{"namespace": ["db"], "name": "events.v1"}, {"namespace": ["db"], "name": "partitioned"}])
    );
    assert_error(
        &server.get("/v1/namespaces/nope/tables").await,
        StatusCode::NOT_FOUND,
        "NoSuchNamespaceException",
    );

    let (status, body) = server.get("/v1/namespaces/db/tables/events.v1").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["metadata-location"], location.as_str());
    assert_eq!(body["config"]["s3.region"], "eu-west-1");
    assert_eq!(
        server
            .get("/v1/namespaces/db/tables/events.v1?snapshots=refs")
            .await
            .0,
        StatusCode::OK
    );
    assert_error(
        &server
            .get("/v1/namespaces/db/tables/events.v1?snapshots=some")
            .await,
        StatusCode::BAD_REQUEST,
        "BadRequestException",
    );
    assert_eq!(
        server
            .call(Method::HEAD, "/v1/namespaces/db/tables/events.v1", None)
            .await
            .0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        server
            .call(Method::HEAD, "/v1/namespaces/db/tables/nope", None)
            .await
            .0,
        StatusCode::NOT_FOUND
    );
    assert_error(
        &server.get("/v1/namespaces/db/tables/nope").await,
        StatusCode::NOT_FOUND,
        "NoSuchTableException",
    );

    // Metrics reports are accepted for existing tables.
    let report = json!({"report-type": "scan-report", "table-name": "db.events.v1"});
    assert_eq!(
        server
            .post("/v1/namespaces/db/tables/events.v1/metrics", report.clone())
            .await
            .0,
        StatusCode::NO_CONTENT
    );
    assert_error(
        &server
            .post("/v1/namespaces/db/tables/nope/metrics", report)
            .await,
        StatusCode::NOT_FOUND,
        "NoSuchTableException",
    );

    // Rename, across namespaces too.
    let rename = |from: (&str, &str), to: (&str, &str)| {
        json!({
            "source": {"namespace": [from.0], "name": from.1},
            "destination": {"namespace": [to.0], "name": to.1}
        })
    };
    assert_eq!(
        server
            .post(
                "/v1/tables/rename",
                rename(("db", "events.v1"), ("other", "events"))
            )
            .await
            .0,
        StatusCode::NO_CONTENT
    );
    assert_error(
        &server.get("/v1/namespaces/db/tables/events.v1").await,
        StatusCode::NOT_FOUND,
        "NoSuchTableException",
    );
    let (status, body) = server.get("/v1/namespaces/other/tables/events").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["metadata-location"], location.as_str());
    assert_error(
        &server
            .post("/v1/tables/rename", rename(("db", "gone"), ("db", "x")))
            .await,
        StatusCode::NOT_FOUND,
        "NoSuchTableException",
    );
    assert_error(
        &server
            .post(
                "/v1/tables/rename",
                rename(("other", "events"), ("db", "partitioned")),
            )
            .await,
        StatusCode::CONFLICT,
        "AlreadyExistsException",
    );
    assert_error(
        &server
            .post(
                "/v1/tables/rename",
                rename(("other", "events"), ("nope", "x")),
            )
            .await,
        StatusCode::NOT_FOUND,
        "NoSuchNamespaceException",
    );

    // Drop without purge keeps the files, so the metadata file can be registered again.
    assert_eq!(
        server
            .call(Method::DELETE, "/v1/namespaces/other/tables/events", None)
            .await
            .0,
        StatusCode::NO_CONTENT
    );
    assert_error(
        &server
            .call(Method::DELETE, "/v1/namespaces/other/tables/events", None)
            .await,
        StatusCode::NOT_FOUND,
        "NoSuchTableException",
    );
    let (status, body) = server
        .post(
            "/v1/namespaces/db/register",
            json!({"name": "revived", "metadata-location": location}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["metadata-location"], location.as_str());
    assert_error(
        &server
            .post(
                "/v1/namespaces/db/register",
                json!({"name": "revived", "metadata-location": location}),
            )
            .await,
        StatusCode::CONFLICT,
        "AlreadyExistsException",
    );
    assert_error(
        &server
            .post(
                "/v1/namespaces/db/register",
                json!({"name": "revived", "metadata-location": location, "overwrite": true}),
            )
            .await,
        StatusCode::NOT_ACCEPTABLE,
        "UnsupportedOperationException",
    );
    assert_error(
        &server
            .post(
                "/v1/namespaces/nope/register",
                json!({"name": "t", "metadata-location": location}),
            )
            .await,
        StatusCode::NOT_FOUND,
        "NoSuchNamespaceException",
    );

    // Purge deletes the table's files.
    let table_dir = server.dir.path().join("warehouse/db/revived");
    let metadata_path = location.strip_prefix("file://").unwrap().to_string();
    assert!(std::path::Path::new(&metadata_path).exists());
    assert_eq!(
        server
            .call(
                Method::DELETE,
                "/v1/namespaces/db/tables/revived?purgeRequested=true",
                None
            )
            .await
            .0,
        StatusCode::NO_CONTENT
    );
    assert!(
        !std::path::Path::new(&metadata_path).exists(),
        "{}",
        table_dir.display()
    );
    assert_error(
        &server
            .call(
                Method::DELETE,
                "/v1/namespaces/db/tables/partitioned?purgeRequested=maybe",
                None,
            )
            .await,
        StatusCode::BAD_REQUEST,
        "BadRequestException",
    );
}

#[tokio::test]
async fn commits_apply_updates_and_refuse_stale_requirements() {
    let server = start(RestConfig::default()).await;
    server.create_namespace(&["db"]).await;
    let created = server.create_table("db", "t").await;
    let first_location = created["metadata-location"].as_str().unwrap().to_string();
    let path = "/v1/namespaces/db/tables/t";

    // Spark omits the identifier.
    let (status, body) = server
        .post(
            path,
            json!({
                "requirements": [{"type": "assert-current-schema-id", "current-schema-id": 0}],
                "updates": [{"action": "set-properties", "updates": {"k": "v"}}]
            }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let second_location = body["metadata-location"].as_str().unwrap().to_string();
    assert_ne!(second_location, first_location);
    assert!(
        second_location.contains("/metadata/00001-"),
        "{second_location}"
    );
    assert_eq!(body["metadata"]["properties"]["k"], "v");
    assert_eq!(
        body["metadata"]["metadata-log"][0]["metadata-file"],
        first_location.as_str()
    );
    let (_, loaded) = server.get(path).await;
    assert_eq!(loaded["metadata-location"], second_location.as_str());

    // Schema evolution, with the identifier this time.
    let (status, body) = server
        .post(
            path,
            json!({
                "identifier": {"namespace": ["db"], "name": "t"},
                "requirements": [
                    {"type": "assert-current-schema-id", "current-schema-id": 0},
                    {"type": "assert-last-assigned-field-id", "last-assigned-field-id": 2}
                ],
                "updates": [
                    {"action": "add-schema", "schema": {"type": "struct", "schema-id": 1, "fields": [
                        {"id": 1, "name": "id", "required": true, "type": "long"},
                        {"id": 2, "name": "data", "required": false, "type": "string"},
                        {"id": 3, "name": "extra", "required": false, "type": "int"}
                    ]}, "last-column-id": 3},
                    {"action": "set-current-schema", "schema-id": -1}
                ]
            }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["metadata"]["current-schema-id"], 1);
    assert_eq!(body["metadata"]["last-column-id"], 3);

    // The same schema requirement is now stale.
    assert_error(
        &server
            .post(
                path,
                json!({
                    "requirements": [{"type": "assert-current-schema-id", "current-schema-id": 0}],
                    "updates": [{"action": "set-properties", "updates": {"k": "w"}}]
                }),
            )
            .await,
        StatusCode::CONFLICT,
        "CommitFailedException",
    );

    // Appends: a snapshot on an empty main, then a stale `assert-ref-snapshot-id`.
    let (status, body) = server
        .post(
            path,
            json!({
                "requirements": [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": null}],
                "updates": snapshot_update(101, None, 1)
            }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["metadata"]["current-snapshot-id"], 101);
    let stale = json!({
        "requirements": [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": null}],
        "updates": snapshot_update(102, None, 2)
    });
    assert_error(
        &server.post(path, stale).await,
        StatusCode::CONFLICT,
        "CommitFailedException",
    );
    let (status, body) = server
        .post(
            path,
            json!({
                "requirements": [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": 101}],
                "updates": snapshot_update(102, Some(101), 2)
            }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["metadata"]["current-snapshot-id"], 102);

    // No updates: nothing is written, the current metadata comes back.
    let (status, body) = server
        .post(path, json!({"requirements": [], "updates": []}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, loaded) = server.get(path).await;
    assert_eq!(body["metadata-location"], loaded["metadata-location"]);

    // Malformed commits.
    assert_error(
        &server
            .post(
                path,
                json!({"requirements": [], "updates": [{"action": "make-it-fast"}]}),
            )
            .await,
        StatusCode::BAD_REQUEST,
        "BadRequestException",
    );
    assert_error(
        &server
            .post(
                path,
                json!({"requirements": [{"type": "assert-magic"}], "updates": []}),
            )
            .await,
        StatusCode::BAD_REQUEST,
        "BadRequestException",
    );
    assert_error(
        &server
            .post(
                path,
                json!({"identifier": {"namespace": ["db"], "name": "other"}, "requirements": [], "updates": []}),
            )
            .await,
        StatusCode::BAD_REQUEST,
        "BadRequestException",
    );
    // An update the metadata builder rejects: a snapshot id that already exists.
    assert_error(
        &server
            .post(
                path,
                json!({"requirements": [], "updates": snapshot_update(101, Some(102), 3)}),
            )
            .await,
        StatusCode::BAD_REQUEST,
        "BadRequestException",
    );
    assert_error(
        &server
            .post(
                "/v1/namespaces/db/tables/missing",
                json!({"requirements": [], "updates": []}),
            )
            .await,
        StatusCode::NOT_FOUND,
        "NoSuchTableException",
    );
}

#[tokio::test]
async fn concurrent_commits_on_one_base_let_exactly_one_win() {
    let server = start(RestConfig::default()).await;
    server.create_namespace(&["db"]).await;
    server.create_table("db", "t").await;
    let path = "/v1/namespaces/db/tables/t";
    for round in 0..5i64 {
        let (_, loaded) = server.get(path).await;
        let parent = loaded["metadata"]["current-snapshot-id"].as_i64();
        let requirement =
            json!([{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": parent}]);
        let commit = |id: i64| json!({"requirements": requirement.clone(), "updates": snapshot_update(id, parent, round + 1)});
        let (a, b) = tokio::join!(
            server.post(path, commit(1000 + 2 * round)),
            server.post(path, commit(1001 + 2 * round))
        );
        let statuses = [a.0, b.0];
        assert_eq!(
            statuses.iter().filter(|s| **s == StatusCode::OK).count(),
            1,
            "{a:?} {b:?}"
        );
        let loser = if a.0 == StatusCode::OK { &b } else { &a };
        assert_error(loser, StatusCode::CONFLICT, "CommitFailedException");
    }
}

#[tokio::test]
async fn pointer_swaps_and_catalog_commits_exclude_each_other() {
    use iceberg::transaction::{ApplyTransactionAction, Transaction};

    use super::commit::{self, Checked};
    use super::error::RestError;

    let server = start(RestConfig::default()).await;
    server.create_namespace(&["db"]).await;
    server.create_table("db", "t").await;
    let ident = iceberg::TableIdent::from_strs(["db", "t"]).unwrap();
    let uri = format!(
        "sqlite://{}",
        server.dir.path().join("catalog.db").display()
    );
    let pointers = SqlMetadataPointers::connect(&uri, "inlet").await.unwrap();
    let set = |value: &str| iceberg::TableUpdate::SetProperties {
        updates: [("writer".to_string(), value.to_string())].into(),
    };
    let catalog_commit = |table: iceberg::table::Table, value: &'static str| {
        let catalog = server.catalog.clone();
        async move {
            let tx = Transaction::new(&table);
            let tx = tx
                .update_table_properties()
                .set("writer".to_string(), value.to_string())
                .apply(tx)
                .unwrap();
            tx.commit(catalog.as_ref()).await.unwrap()
        }
    };

    // A REST commit is staged; Inlet commits through `Catalog::update_table` before the swap.
    let base = server.catalog.load_table(&ident).await.unwrap();
    let Checked::Staged(staged) = commit::stage(base.clone(), &[], vec![set("rest")], &[])
        .await
        .unwrap()
    else {
        panic!("updates must stage a commit")
    };
    let written = staged.swap.new.strip_prefix("file://").unwrap().to_string();
    assert!(std::path::Path::new(&written).exists());
    let inlet = catalog_commit(base, "inlet").await;
    let outcome = commit::publish(&pointers, std::slice::from_ref(&*staged)).await;
    assert!(
        matches!(outcome, Err(RestError::CommitFailed(_))),
        "{outcome:?}"
    );
    assert!(
        !std::path::Path::new(&written).exists(),
        "the losing file is deleted"
    );
    let (_, loaded) = server.get("/v1/namespaces/db/tables/t").await;
    assert_eq!(
        loaded["metadata-location"],
        inlet.metadata_location().unwrap()
    );
    assert_eq!(loaded["metadata"]["properties"]["writer"], "inlet");

    // A REST commit lands first; the catalog's commit, built on the older table, reloads and
    // applies on top of it instead of overwriting it.
    let older = server.catalog.load_table(&ident).await.unwrap();
    let (status, body) = server
        .post(
            "/v1/namespaces/db/tables/t",
            json!({"requirements": [], "updates": [{"action": "set-properties", "updates": {"other": "rest"}}]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let last = catalog_commit(older, "inlet-again").await;
    assert_eq!(last.metadata().properties()["other"], "rest");
    assert_eq!(last.metadata().properties()["writer"], "inlet-again");
}

#[tokio::test]
async fn transactions_commit_several_tables_atomically() {
    let server = start(RestConfig::default()).await;
    server.create_namespace(&["db"]).await;
    server.create_table("db", "a").await;
    server.create_table("db", "b").await;
    let change = |table: &str, schema_id: i64, value: &str| {
        json!({
            "identifier": {"namespace": ["db"], "name": table},
            "requirements": [{"type": "assert-current-schema-id", "current-schema-id": schema_id}],
            "updates": [{"action": "set-properties", "updates": {"round": value}}]
        })
    };
    let (status, body) = server
        .post(
            "/v1/transactions/commit",
            json!({"table-changes": [change("a", 0, "1"), change("b", 0, "1")]}),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    for table in ["a", "b"] {
        let (_, loaded) = server
            .get(&format!("/v1/namespaces/db/tables/{table}"))
            .await;
        assert_eq!(loaded["metadata"]["properties"]["round"], "1");
    }

    // The second change is stale: neither applies.
    assert_error(
        &server
            .post(
                "/v1/transactions/commit",
                json!({"table-changes": [change("a", 0, "2"), change("b", 5, "2")]}),
            )
            .await,
        StatusCode::CONFLICT,
        "CommitFailedException",
    );
    let (_, loaded) = server.get("/v1/namespaces/db/tables/a").await;
    assert_eq!(loaded["metadata"]["properties"]["round"], "1");

    // A table with requirements but no updates takes part as an assertion.
    let assert_only = |table: &str, schema_id: i64| {
        json!({
            "identifier": {"namespace": ["db"], "name": table},
            "requirements": [{"type": "assert-current-schema-id", "current-schema-id": schema_id}],
            "updates": []
        })
    };
    let (_, before) = server.get("/v1/namespaces/db/tables/b").await;
    let (status, body) = server
        .post(
            "/v1/transactions/commit",
            json!({"table-changes": [change("a", 0, "3"), assert_only("b", 0)]}),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (_, after) = server.get("/v1/namespaces/db/tables/b").await;
    assert_eq!(before["metadata-location"], after["metadata-location"]);
    assert_error(
        &server
            .post(
                "/v1/transactions/commit",
                json!({"table-changes": [change("a", 0, "4"), assert_only("b", 9)]}),
            )
            .await,
        StatusCode::CONFLICT,
        "CommitFailedException",
    );
    let (_, loaded) = server.get("/v1/namespaces/db/tables/a").await;
    assert_eq!(loaded["metadata"]["properties"]["round"], "3");

    assert_error(
        &server
            .post(
                "/v1/transactions/commit",
                json!({"table-changes": [change("a", 0, "3"), change("a", 0, "4")]}),
            )
            .await,
        StatusCode::BAD_REQUEST,
        "BadRequestException",
    );
    assert_error(
        &server
            .post(
                "/v1/transactions/commit",
                json!({"table-changes": [{"requirements": [], "updates": []}]}),
            )
            .await,
        StatusCode::BAD_REQUEST,
        "BadRequestException",
    );
    assert_error(
        &server
            .post(
                "/v1/transactions/commit",
                json!({"table-changes": [change("zz", 0, "1")]}),
            )
            .await,
        StatusCode::NOT_FOUND,
        "NoSuchTableException",
    );
}

#[tokio::test]
async fn staged_creates_commit_as_create_transactions() {
    let server = start(RestConfig::default()).await;
    server.create_namespace(&["db"]).await;
    let location = format!("{}/db/ctas", server.warehouse);
    let (status, staged) = server
        .post(
            "/v1/namespaces/db/tables",
            json!({"name": "ctas", "location": location, "schema": schema(), "stage-create": true}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{staged}");
    assert_eq!(staged["metadata-location"], Value::Null);
    assert_error(
        &server.get("/v1/namespaces/db/tables/ctas").await,
        StatusCode::NOT_FOUND,
        "NoSuchTableException",
    );
    // Without a location anywhere, a staged create cannot place the table.
    assert_error(
        &server
            .post(
                "/v1/namespaces/db/tables",
                json!({"name": "x", "schema": schema(), "stage-create": true}),
            )
            .await,
        StatusCode::BAD_REQUEST,
        "BadRequestException",
    );

    let uuid = staged["metadata"]["table-uuid"].clone();
    let mut updates = vec![
        json!({"action": "assign-uuid", "uuid": uuid}),
        json!({"action": "upgrade-format-version", "format-version": 2}),
        json!({"action": "add-schema", "schema": staged["metadata"]["schemas"][0]}),
        json!({"action": "set-current-schema", "schema-id": -1}),
        json!({"action": "add-spec", "spec": {"fields": []}}),
        json!({"action": "set-default-spec", "spec-id": -1}),
        json!({"action": "add-sort-order", "sort-order": {"order-id": 0, "fields": []}}),
        json!({"action": "set-default-sort-order", "sort-order-id": -1}),
        json!({"action": "set-location", "location": location}),
        json!({"action": "set-properties", "updates": {"created-by": "ctas"}}),
    ];
    updates.extend(snapshot_update(7, None, 1));
    let commit = json!({
        "requirements": [{"type": "assert-create"}, {"type": "assert-table-uuid", "uuid": uuid}],
        "updates": updates
    });
    let (status, body) = server
        .post("/v1/namespaces/db/tables/ctas", commit.clone())
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["metadata"]["table-uuid"], uuid);
    assert_eq!(body["metadata"]["current-snapshot-id"], 7);
    assert_eq!(body["metadata"]["properties"]["created-by"], "ctas");
    let (status, loaded) = server.get("/v1/namespaces/db/tables/ctas").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(loaded["metadata-location"], body["metadata-location"]);
    // A second create transaction for the same table finds it created.
    assert_error(
        &server.post("/v1/namespaces/db/tables/ctas", commit).await,
        StatusCode::CONFLICT,
        "CommitFailedException",
    );
    // A staged create of an existing table is refused up front.
    assert_error(
        &server
            .post(
                "/v1/namespaces/db/tables",
                json!({"name": "ctas", "location": location, "schema": schema(), "stage-create": true}),
            )
            .await,
        StatusCode::CONFLICT,
        "AlreadyExistsException",
    );

    // Without a location in the request, the namespace's `location` property places it.
    let base = format!("{}/placed", server.warehouse);
    let (status, _) = server
        .post(
            "/v1/namespaces",
            json!({"namespace": ["placed"], "properties": {"location": base}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = server
        .post(
            "/v1/namespaces/placed/tables",
            json!({"name": "t", "schema": schema(), "stage-create": true}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["metadata"]["location"], format!("{base}/t"));

    // A create transaction whose second step fails leaves no table behind.
    let bad = json!({
        "requirements": [{"type": "assert-create"}],
        "updates": [
            {"action": "add-schema", "schema": schema()},
            {"action": "set-current-schema", "schema-id": -1},
            {"action": "set-location", "location": format!("{}/db/broken", server.warehouse)},
            {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": 404}
        ]
    });
    assert_error(
        &server.post("/v1/namespaces/db/tables/broken", bad).await,
        StatusCode::BAD_REQUEST,
        "BadRequestException",
    );
    assert_error(
        &server.get("/v1/namespaces/db/tables/broken").await,
        StatusCode::NOT_FOUND,
        "NoSuchTableException",
    );
}

#[tokio::test]
async fn names_and_bodies_are_checked_before_the_catalog() {
    let server = start(RestConfig::default()).await;
    server.create_namespace(&["db"]).await;
    let bad_levels = [
        json!([]),
        json!([""]),
        json!([".."]),
        json!(["a/b"]),
        json!(["a\\b"]),
        json!(["a\u{0}b"]),
        json!(["a\nb"]),
        json!(["a.b"]),
        json!(["x".repeat(256)]),
    ];
    for levels in bad_levels {
        assert_error(
            &server
                .post("/v1/namespaces", json!({"namespace": levels}))
                .await,
            StatusCode::BAD_REQUEST,
            "BadRequestException",
        );
    }
    for path in [
        "/v1/namespaces/a%2Fb",
        "/v1/namespaces/a%5Cb",
        "/v1/namespaces/a%00b",
        "/v1/namespaces/a%0Ab",
        "/v1/namespaces/db%1F",
        "/v1/namespaces/db/tables/a%2Fb",
        "/v1/namespaces/db/tables/%FF",
        "/v1/namespaces?parent=a%2Fb",
    ] {
        assert_error(
            &server.get(path).await,
            StatusCode::BAD_REQUEST,
            "BadRequestException",
        );
    }
    // HTTP clients resolve dot segments before sending; a raw request does not.
    for path in [
        "/v1/namespaces/..",
        "/v1/namespaces/db/tables/..",
        "/v1/namespaces/db/tables/.",
        "/v1/namespaces/db/tables/%2E%2E",
    ] {
        assert_eq!(server.raw_get_status(path).await, 400, "{path}");
    }
    let long = "x".repeat(256);
    assert_error(
        &server
            .get(&format!("/v1/namespaces/db/tables/{long}"))
            .await,
        StatusCode::BAD_REQUEST,
        "BadRequestException",
    );
    for name in ["", "..", "a/b", "a\u{1}b"] {
        assert_error(
            &server
                .post(
                    "/v1/namespaces/db/tables",
                    json!({"name": name, "schema": schema()}),
                )
                .await,
            StatusCode::BAD_REQUEST,
            "BadRequestException",
        );
        assert_error(
            &server
                .post(
                    "/v1/namespaces/db/register",
                    json!({"name": name, "metadata-location": "file:///x"}),
                )
                .await,
            StatusCode::BAD_REQUEST,
            "BadRequestException",
        );
        assert_error(
            &server
                .post(
                    "/v1/tables/rename",
                    json!({"source": {"namespace": ["db"], "name": "t"}, "destination": {"namespace": ["db"], "name": name}}),
                )
                .await,
            StatusCode::BAD_REQUEST,
            "BadRequestException",
        );
    }

    // Malformed bodies.
    let raw = server
        .http
        .post(format!("{}/v1/namespaces", server.base))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), StatusCode::BAD_REQUEST);
    let body: Value = raw.json().await.unwrap();
    assert_eq!(body["error"]["type"], "BadRequestException");
    assert_error(
        &server
            .post("/v1/namespaces", json!({"namespaces": ["typo"]}))
            .await,
        StatusCode::BAD_REQUEST,
        "BadRequestException",
    );
    assert_error(
        &server
            .post("/v1/namespaces/db/tables", json!({"name": "t"}))
            .await,
        StatusCode::BAD_REQUEST,
        "BadRequestException",
    );
    assert_error(
        &server
            .post("/v1/namespaces/db/tables/t/metrics", json!([1]))
            .await,
        StatusCode::BAD_REQUEST,
        "BadRequestException",
    );
    assert_error(
        &server.get("/v1/namespaces?pageSize=-1").await,
        StatusCode::BAD_REQUEST,
        "BadRequestException",
    );
}

#[tokio::test]
async fn client_locations_stay_under_the_allowed_prefixes() {
    let server = start_with(true, |warehouse| RestConfig {
        allowed_locations: vec![warehouse.to_string()],
        ..RestConfig::default()
    })
    .await;
    let warehouse = server.warehouse.clone();
    server.create_namespace(&["db"]).await;
    let create = |location: String| json!({"name": "t", "schema": schema(), "location": location});
    for location in [
        "file:///etc/evil".to_string(),
        format!("{warehouse}/../evil"),
        format!("{warehouse}x/t"),
    ] {
        assert_error(
            &server
                .post("/v1/namespaces/db/tables", create(location))
                .await,
            StatusCode::BAD_REQUEST,
            "BadRequestException",
        );
    }
    assert_error(
        &server
            .post(
                "/v1/namespaces",
                json!({"namespace": ["x"], "properties": {"location": "file:///tmp/x"}}),
            )
            .await,
        StatusCode::BAD_REQUEST,
        "BadRequestException",
    );
    assert_error(
        &server
            .post(
                "/v1/namespaces/db/properties",
                json!({"updates": {"location": "file:///tmp/x"}}),
            )
            .await,
        StatusCode::BAD_REQUEST,
        "BadRequestException",
    );
    assert_error(
        &server
            .post(
                "/v1/namespaces/db/register",
                json!({"name": "r", "metadata-location": "file:///etc/passwd"}),
            )
            .await,
        StatusCode::BAD_REQUEST,
        "BadRequestException",
    );
    server.create_table("db", "t").await;
    assert_error(
        &server
            .post(
                "/v1/namespaces/db/tables/t",
                json!({"requirements": [], "updates": [{"action": "set-location", "location": "file:///tmp/elsewhere"}]}),
            )
            .await,
        StatusCode::BAD_REQUEST,
        "BadRequestException",
    );
    let (status, body) = server
        .post(
            "/v1/namespaces/db/tables",
            json!({"name": "t2", "schema": schema(), "location": format!("{warehouse}/db/t2")}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn without_a_pointer_store_commits_answer_501() {
    let server = start_with(false, |_| RestConfig::default()).await;
    server.create_namespace(&["db"]).await;
    server.create_table("db", "t").await;
    let (_, config) = server.get("/v1/config").await;
    let endpoints = config["endpoints"].as_array().unwrap();
    assert!(!endpoints.contains(&json!(
        "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}"
    )));
    assert_error(
        &server
            .post(
                "/v1/namespaces/db/tables/t",
                json!({"requirements": [], "updates": []}),
            )
            .await,
        StatusCode::NOT_IMPLEMENTED,
        "NotImplementedException",
    );
    assert_error(
        &server
            .post("/v1/transactions/commit", json!({"table-changes": []}))
            .await,
        StatusCode::NOT_IMPLEMENTED,
        "NotImplementedException",
    );
}

#[tokio::test]
async fn unknown_routes_methods_and_oversized_bodies_get_error_models() {
    let server = start(RestConfig {
        max_body_bytes: 1024,
        ..RestConfig::default()
    })
    .await;
    assert_error(
        &server.get("/v1/nothing/here").await,
        StatusCode::NOT_FOUND,
        "NotFoundException",
    );
    assert_error(
        &server.call(Method::PUT, "/v1/namespaces", None).await,
        StatusCode::METHOD_NOT_ALLOWED,
        "MethodNotAllowedException",
    );
    let big = json!({"namespace": ["db"], "properties": {"pad": "x".repeat(4096)}});
    assert_error(
        &server.post("/v1/namespaces", big).await,
        StatusCode::PAYLOAD_TOO_LARGE,
        "BadRequestException",
    );
}

/// The metadata files in a table's `metadata/` folder.
fn metadata_files(server: &Server, ns: &str, table: &str) -> Vec<String> {
    let dir = server
        .dir
        .path()
        .join("warehouse")
        .join(ns)
        .join(table)
        .join("metadata");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".metadata.json"))
        .collect();
    files.sort();
    files
}

#[tokio::test]
async fn client_commits_delete_old_metadata_files_when_the_table_says_so() {
    let server = start(RestConfig::default()).await;
    server.create_namespace(&["db"]).await;
    for table in ["kept", "trimmed"] {
        server.create_table("db", table).await;
    }
    let commit = |table: &'static str, properties: Value| {
        let server = &server;
        async move {
            let (status, body) = server
                .post(
                    &format!("/v1/namespaces/db/tables/{table}"),
                    json!({"requirements": [], "updates": [{"action": "set-properties", "updates": properties}]}),
                )
                .await;
            assert_eq!(status, StatusCode::OK, "{body}");
            body
        }
    };
    // Iceberg's default: old metadata files stay, even past the log's length.
    commit("kept", json!({"write.metadata.previous-versions-max": "2"})).await;
    for n in 0..4 {
        commit("kept", json!({"n": n.to_string()})).await;
    }
    assert_eq!(metadata_files(&server, "db", "kept").len(), 6);

    // With delete-after-commit on, only the current file and the log's 2 remain.
    commit(
        "trimmed",
        json!({
            "write.metadata.delete-after-commit.enabled": "true",
            "write.metadata.previous-versions-max": "2"
        }),
    )
    .await;
    let mut last = Value::Null;
    for n in 0..4 {
        last = commit("trimmed", json!({"n": n.to_string()})).await;
    }
    let files = metadata_files(&server, "db", "trimmed");
    assert_eq!(files.len(), 3, "{files:?}");
    let log: Vec<&str> = last["metadata"]["metadata-log"]
        .as_array()
        .expect("a log")
        .iter()
        .filter_map(|e| e["metadata-file"].as_str())
        .collect();
    assert_eq!(log.len(), 2, "{last}");
    for listed in log
        .iter()
        .chain([&last["metadata-location"].as_str().expect("location")])
    {
        let name = listed.rsplit('/').next().expect("a file name");
        assert!(files.iter().any(|f| f == name), "{name} is gone: {files:?}");
    }
    // The table still loads and commits.
    let (status, _) = server.get("/v1/namespaces/db/tables/trimmed").await;
    assert_eq!(status, StatusCode::OK);
}
