//! The REST API over HTTP: shapes, content types and error codes that the Python client test
//! does not reach (raw `/schema` endpoints, verbose compatibility, mode, config errors).
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

use std::sync::Arc;

use inlet_schema_registry::{open, serve, RegistryConfig};
use inlet_storage::MetaStore;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

const CT: &str = "application/vnd.schemaregistry.v1+json";
const V1: &str = r#"{"type":"record","name":"r","fields":[{"name":"a","type":"int"}]}"#;
const BAD: &str = r#"{"type":"record","name":"r","fields":[{"name":"a","type":"int"},{"name":"b","type":"int"}]}"#;

struct Server {
    base: String,
    http: reqwest::Client,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
    _dir: tempfile::TempDir,
}

impl Server {
    async fn start() -> Server {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!("sqlite://{}", dir.path().join("meta.db").display());
        let meta = MetaStore::connect(&url).await.expect("meta");
        let registry = open(meta, RegistryConfig::default()).await.expect("open");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let stop = CancellationToken::new();
        let task = tokio::spawn(serve(listener, Arc::new(registry), None, stop.clone()));
        Server {
            base,
            http: reqwest::Client::new(),
            stop,
            task,
            _dir: dir,
        }
    }

    /// Sends a request; returns the status, content type and body (JSON when it parses, else a
    /// JSON string).
    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, String, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(b) = body {
            req = req.header("content-type", CT).body(b.to_string());
        }
        let resp = req.send().await.expect("send");
        let status = resp.status().as_u16();
        let ct = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let text = resp.text().await.expect("body");
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, ct, v)
    }

    async fn stop(self) {
        self.stop.cancel();
        self.task.await.expect("join").expect("serve");
    }
}

fn code(v: &Value) -> i64 {
    v["error_code"].as_i64().unwrap_or(-1)
}

#[tokio::test]
async fn rest_api_shapes_and_errors() {
    let s = Server::start().await;
    let (st, ct, v) = s
        .call("POST", "/subjects/x/versions", Some(json!({"schema": V1})))
        .await;
    assert_eq!((st, ct.as_str()), (200, CT), "{v}");
    let id = v["id"].as_i64().expect("id");
    // application/json bodies work too.
    let resp = s
        .http
        .post(format!("{}/subjects/y/versions", s.base))
        .header("content-type", "application/json")
        .body(json!({"schema": V1, "schemaType": "AVRO"}).to_string())
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status().as_u16(), 200);

    assert_eq!(
        s.call("GET", "/schemas/types", None).await.2,
        json!(["AVRO", "PROTOBUF", "JSON"])
    );
    let (_, _, raw) = s
        .call("GET", &format!("/schemas/ids/{id}/schema"), None)
        .await;
    assert_eq!(raw["name"], "r", "raw schema is the schema itself: {raw}");
    let (_, _, raw) = s
        .call("GET", "/subjects/x/versions/latest/schema", None)
        .await;
    assert_eq!(raw["type"], "record");
    let (_, _, v) = s.call("GET", "/subjects/x/versions/1", None).await;
    assert_eq!(
        (
            v["subject"].as_str(),
            v["version"].as_i64(),
            v["id"].as_i64()
        ),
        (Some("x"), Some(1), Some(id))
    );
    assert!(v.get("schemaType").is_none(), "AVRO is implied: {v}");
    let (_, _, v) = s
        .call("GET", &format!("/schemas/ids/{id}/versions"), None)
        .await;
    assert_eq!(
        v,
        json!([{"subject": "x", "version": 1}, {"subject": "y", "version": 1}])
    );
    let (_, _, v) = s
        .call("GET", &format!("/schemas/ids/{id}/subjects"), None)
        .await;
    assert_eq!(v, json!(["x", "y"]));
    let (st, _, v) = s.call("GET", "/schemas/ids/77/subjects", None).await;
    assert_eq!((st, code(&v)), (404, 40403));

    // Compatibility checks, verbose and not.
    let (_, _, v) = s
        .call(
            "POST",
            "/compatibility/subjects/x/versions/latest?verbose=true",
            Some(json!({"schema": BAD})),
        )
        .await;
    assert_eq!(v["is_compatible"], false);
    assert!(
        v["messages"][0]
            .as_str()
            .is_some_and(|m| m.contains("\"b\"")),
        "{v}"
    );
    let (_, _, v) = s
        .call(
            "POST",
            "/compatibility/subjects/x/versions/1",
            Some(json!({"schema": V1})),
        )
        .await;
    assert_eq!(v, json!({"is_compatible": true}));
    let (st, _, v) = s
        .call("POST", "/subjects/x/versions", Some(json!({"schema": BAD})))
        .await;
    assert_eq!((st, code(&v)), (409, 409));

    // Lookup.
    let (_, _, v) = s
        .call("POST", "/subjects/x", Some(json!({"schema": V1})))
        .await;
    assert_eq!(
        (v["id"].as_i64(), v["version"].as_i64()),
        (Some(id), Some(1))
    );
    let (st, _, v) = s
        .call("POST", "/subjects/x", Some(json!({"schema": r#""long""#})))
        .await;
    assert_eq!((st, code(&v)), (404, 40403));

    // Bad input.
    let (st, _, v) = s.call("GET", "/subjects/x/versions/abc", None).await;
    assert_eq!((st, code(&v)), (422, 42202));
    let (st, _, v) = s.call("GET", "/subjects/x/versions/0", None).await;
    assert_eq!((st, code(&v)), (422, 42202));
    for (body, says) in [
        (
            json!({"schema": "syntax = \"proto3\"; message M {", "schemaType": "PROTOBUF"}),
            "",
        ),
        (
            json!({"schema": r#"{"type": 5}"#, "schemaType": "JSON"}),
            "",
        ),
        (
            json!({"schema": V1, "schemaType": "XML"}),
            "unknown schemaType",
        ),
        (
            json!({"schema": V1, "references": [{"name": "a", "subject": "b", "version": 1}]}),
            "does not exist",
        ),
    ] {
        let (st, _, v) = s.call("POST", "/subjects/z/versions", Some(body)).await;
        assert_eq!((st, code(&v)), (422, 42201), "{v}");
        assert!(
            v["message"].as_str().is_some_and(|m| m.contains(says)),
            "{v}"
        );
    }
    let (st, _, v) = s
        .call("POST", "/subjects/z/versions", Some(json!({"nope": 1})))
        .await;
    assert_eq!((st, code(&v)), (422, 42201));

    // Config.
    let (st, _, v) = s
        .call("PUT", "/config", Some(json!({"compatibility": "SIDEWAYS"})))
        .await;
    assert_eq!((st, code(&v)), (422, 42203));
    assert_eq!(
        s.call("PUT", "/config", Some(json!({"compatibility": "FULL"})))
            .await
            .2,
        json!({"compatibility": "FULL"})
    );
    assert_eq!(
        s.call("GET", "/config", None).await.2,
        json!({"compatibilityLevel": "FULL"})
    );
    assert_eq!(
        s.call("DELETE", "/config", None).await.2,
        json!({"compatibilityLevel": "FULL"})
    );
    assert_eq!(
        s.call("GET", "/config", None).await.2,
        json!({"compatibilityLevel": "BACKWARD"})
    );
    let (st, _, v) = s.call("GET", "/config/x", None).await;
    assert_eq!((st, code(&v)), (404, 40408));
    assert_eq!(
        s.call("GET", "/config/x?defaultToGlobal=true", None)
            .await
            .2,
        json!({"compatibilityLevel": "BACKWARD"})
    );
    s.call("PUT", "/config/x", Some(json!({"compatibility": "NONE"})))
        .await;
    assert_eq!(
        s.call("GET", "/config/x", None).await.2,
        json!({"compatibilityLevel": "NONE"})
    );
    assert_eq!(
        s.call("DELETE", "/config/x", None).await.2,
        json!({"compatibilityLevel": "NONE"})
    );

    // Mode.
    assert_eq!(
        s.call("GET", "/mode", None).await.2,
        json!({"mode": "READWRITE"})
    );
    let (st, _, v) = s
        .call("PUT", "/mode", Some(json!({"mode": "SLEEPY"})))
        .await;
    assert_eq!((st, code(&v)), (422, 42204));
    assert_eq!(
        s.call("PUT", "/mode", Some(json!({"mode": "READONLY"})))
            .await
            .2,
        json!({"mode": "READONLY"})
    );
    let (st, _, v) = s
        .call("POST", "/subjects/w/versions", Some(json!({"schema": V1})))
        .await;
    assert_eq!((st, code(&v)), (422, 42205));
    s.call("PUT", "/mode", Some(json!({"mode": "READWRITE"})))
        .await;

    // Deletes.
    assert_eq!(
        s.call("DELETE", "/subjects/y/versions/latest", None)
            .await
            .2,
        json!(1)
    );
    let (st, _, v) = s.call("GET", "/subjects/y/versions", None).await;
    assert_eq!((st, code(&v)), (404, 40401));
    assert_eq!(
        s.call("GET", "/subjects/y/versions?deleted=true", None)
            .await
            .2,
        json!([1])
    );
    assert_eq!(
        s.call("DELETE", "/subjects/y/versions/1?permanent=true", None)
            .await
            .2,
        json!(1)
    );
    assert_eq!(s.call("DELETE", "/subjects/x", None).await.2, json!([1]));
    let (st, _, v) = s.call("DELETE", "/subjects/x", None).await;
    assert_eq!((st, code(&v)), (404, 40404));
    assert_eq!(
        s.call("DELETE", "/subjects/x?permanent=true", None).await.2,
        json!([1])
    );
    assert_eq!(s.call("GET", "/subjects", None).await.2, json!([]));
    // Unknown paths and methods answer in the same error shape.
    let (st, ct, v) = s.call("GET", "/nope", None).await;
    assert_eq!((st, ct.as_str(), code(&v)), (404, CT, 404));
    let (st, _, v) = s.call("PATCH", "/subjects", None).await;
    assert_eq!((st, code(&v)), (405, 405));
    // The id outlives its subjects.
    assert_eq!(
        s.call("GET", &format!("/schemas/ids/{id}"), None).await.0,
        200
    );
    s.stop().await;
}

#[tokio::test]
async fn avro_references_are_resolved_listed_and_protected() {
    let s = Server::start().await;
    let code = |v: &Value| v["error_code"].as_i64().unwrap_or_default();
    let address = r#"{"type":"record","name":"Address","namespace":"t","fields":[{"name":"city","type":"string"}]}"#;
    let user = r#"{"type":"record","name":"User","namespace":"t","fields":[{"name":"id","type":"long"},{"name":"home","type":"t.Address"}]}"#;
    let (st, _, v) = s
        .call(
            "POST",
            "/subjects/address/versions",
            Some(json!({ "schema": address })),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    let address_id = v["id"].as_i64().expect("id");

    // Without the reference the named type is unknown; with it (version -1: the latest) the
    // schema registers, and the reference is stored with the concrete version.
    let (st, _, v) = s
        .call(
            "POST",
            "/subjects/user/versions",
            Some(json!({ "schema": user })),
        )
        .await;
    assert_eq!((st, code(&v)), (422, 42201), "{v}");
    let refs = json!([{"name": "t.Address", "subject": "address", "version": -1}]);
    let (st, _, v) = s
        .call(
            "POST",
            "/subjects/user/versions",
            Some(json!({"schema": user, "references": refs})),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    let user_id = v["id"].as_i64().expect("id");
    assert_ne!(user_id, address_id);
    let (_, _, v) = s.call("GET", "/subjects/user/versions/latest", None).await;
    assert_eq!(
        v["references"],
        json!([{"name": "t.Address", "subject": "address", "version": 1}]),
        "{v}"
    );
    let (_, _, v) = s
        .call("GET", &format!("/schemas/ids/{user_id}"), None)
        .await;
    assert_eq!(v["references"][0]["subject"], "address", "{v}");
    // The same schema with the same references is the same id; looked up too.
    let concrete = json!([{"name": "t.Address", "subject": "address", "version": 1}]);
    let (_, _, v) = s
        .call(
            "POST",
            "/subjects/user/versions",
            Some(json!({"schema": user, "references": concrete})),
        )
        .await;
    assert_eq!(v["id"].as_i64(), Some(user_id), "{v}");
    let (st, _, v) = s
        .call(
            "POST",
            "/subjects/user",
            Some(json!({"schema": user, "references": concrete})),
        )
        .await;
    assert_eq!((st, v["id"].as_i64()), (200, Some(user_id)), "{v}");

    // The referenced version knows who uses it and cannot be deleted while it is used.
    let (_, _, v) = s
        .call("GET", "/subjects/address/versions/1/referencedby", None)
        .await;
    assert_eq!(v, json!([user_id]));
    let (st, _, v) = s.call("DELETE", "/subjects/address/versions/1", None).await;
    assert_eq!((st, code(&v)), (422, 42206), "{v}");
    let (st, _, v) = s.call("DELETE", "/subjects/address", None).await;
    assert_eq!((st, code(&v)), (422, 42206), "{v}");
    // Once the user is gone for good, the address can go.
    for path in ["/subjects/user", "/subjects/user?permanent=true"] {
        let (st, _, v) = s.call("DELETE", path, None).await;
        assert_eq!(st, 200, "{path}: {v}");
    }
    let (st, _, v) = s.call("DELETE", "/subjects/address/versions/1", None).await;
    assert_eq!((st, v), (200, json!(1)));
}

#[tokio::test]
async fn modes_listings_and_import() {
    let s = Server::start().await;
    let code = |v: &Value| v["error_code"].as_i64().unwrap_or_default();
    for subject in ["orders-value", "orders-key", "users-value"] {
        let (st, _, v) = s
            .call(
                "POST",
                &format!("/subjects/{subject}/versions"),
                Some(json!({ "schema": V1 })),
            )
            .await;
        assert_eq!(st, 200, "{v}");
    }
    let (_, _, v) = s.call("GET", "/subjects?subjectPrefix=orders", None).await;
    assert_eq!(v, json!(["orders-key", "orders-value"]));
    let (_, _, v) = s.call("GET", "/subjects?offset=1&limit=1", None).await;
    assert_eq!(v, json!(["orders-value"]));
    s.call("DELETE", "/subjects/users-value", None).await;
    let (_, _, v) = s.call("GET", "/subjects?deletedOnly=true", None).await;
    assert_eq!(v, json!(["users-value"]));
    let (_, _, v) = s
        .call(
            "GET",
            "/subjects/users-value/versions?deletedOnly=true",
            None,
        )
        .await;
    assert_eq!(v, json!([1]));

    // Subject modes: READONLY on one subject refuses its writes only.
    let (st, _, v) = s.call("GET", "/mode/orders-value", None).await;
    assert_eq!((st, code(&v)), (404, 40409), "{v}");
    let (_, _, v) = s
        .call("GET", "/mode/orders-value?defaultToGlobal=true", None)
        .await;
    assert_eq!(v, json!({"mode": "READWRITE"}));
    let (st, _, _) = s
        .call(
            "PUT",
            "/mode/orders-value",
            Some(json!({"mode": "READONLY"})),
        )
        .await;
    assert_eq!(st, 200);
    let (st, _, v) = s
        .call(
            "POST",
            "/subjects/orders-value/versions",
            Some(json!({"schema": r#""string""#, "schemaType": "AVRO"})),
        )
        .await;
    assert_eq!((st, code(&v)), (422, 42205), "{v}");
    let (st, _, v) = s.call("DELETE", "/mode/orders-value", None).await;
    assert_eq!((st, v), (200, json!({"mode": "READONLY"})));

    // IMPORT needs an empty registry (or force), then takes ids and versions as given.
    let (st, _, v) = s
        .call("PUT", "/mode", Some(json!({"mode": "IMPORT"})))
        .await;
    assert_eq!((st, code(&v)), (422, 42205), "{v}");
    let (st, _, v) = s
        .call(
            "POST",
            "/subjects/fresh/versions",
            Some(json!({"schema": V1, "id": 77})),
        )
        .await;
    assert_eq!((st, code(&v)), (422, 42205), "not in IMPORT mode: {v}");
    let (st, _, _) = s
        .call("PUT", "/mode/fresh", Some(json!({"mode": "IMPORT"})))
        .await;
    assert_eq!(st, 200);
    let (st, _, v) = s
        .call(
            "POST",
            "/subjects/fresh/versions",
            Some(json!({"schema": r#""bytes""#, "id": 77, "version": 5})),
        )
        .await;
    assert_eq!((st, &v), (200, &json!({"id": 77, "version": 5})), "{v}");
    // The same id for another schema is a conflict; the imported id is served.
    let (st, _, v) = s
        .call(
            "POST",
            "/subjects/fresh/versions",
            Some(json!({"schema": r#""double""#, "id": 77, "version": 6})),
        )
        .await;
    assert_eq!((st, code(&v)), (422, 42207), "{v}");
    let (_, _, v) = s.call("GET", "/schemas/ids/77", None).await;
    assert_eq!(v["schema"], r#""bytes""#);
    // Ids created later do not collide with imported ones.
    s.call("DELETE", "/mode/fresh", None).await;
    let (_, _, v) = s
        .call(
            "POST",
            "/subjects/later/versions",
            Some(json!({"schema": r#""float""#})),
        )
        .await;
    assert!(v["id"].as_i64().expect("id") > 77, "{v}");
}
