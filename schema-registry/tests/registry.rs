//! The registry over a real SQLite metadata store: ids, versions, deletes, settings, and that
//! everything survives closing and reopening the store.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

use inlet_schema_registry::{
    framing, open, Compatibility, Deleted, Error, Mode, ParsedSchema, Registry, RegistryConfig,
    SchemaRequest, VersionSpec,
};
use inlet_storage::MetaStore;

const V1: &str =
    r#"{"type":"record","name":"User","namespace":"t","fields":[{"name":"id","type":"long"}]}"#;
const V2: &str = r#"{"type":"record","name":"User","namespace":"t","fields":[{"name":"id","type":"long"},{"name":"email","type":["null","string"],"default":null}]}"#;
const BAD: &str = r#"{"type":"record","name":"User","namespace":"t","fields":[{"name":"id","type":"long"},{"name":"age","type":"int"}]}"#;

fn req(s: &str) -> SchemaRequest {
    SchemaRequest {
        schema: s.to_string(),
        ..Default::default()
    }
}

fn sqlite_url(dir: &tempfile::TempDir) -> String {
    format!("sqlite://{}", dir.path().join("meta.db").display())
}

async fn open_url(url: &str) -> Registry {
    let meta = MetaStore::connect(url).await.expect("meta store");
    open(meta, RegistryConfig::default())
        .await
        .expect("registry")
}

async fn registry(dir: &tempfile::TempDir) -> Registry {
    open_url(&sqlite_url(dir)).await
}

/// A new empty database on the PostgreSQL of `source scripts/test-env.sh`; None (skip) when
/// there is none, except in CI.
async fn fresh_postgres_database() -> Option<String> {
    let url = inlet_test_support::service_env("INLET_TEST_POSTGRES_URL")?;
    Some(inlet_test_support::fresh_postgres_database(&url).await)
}

#[tokio::test]
async fn ids_are_global_and_survive_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    ids_and_restart(&sqlite_url(&dir)).await;
}

#[tokio::test]
async fn ids_are_global_and_survive_a_restart_on_postgres() {
    if let Some(url) = fresh_postgres_database().await {
        ids_and_restart(&url).await;
    }
}

#[tokio::test]
async fn compatibility_deletes_and_errors_on_postgres() {
    if let Some(url) = fresh_postgres_database().await {
        compatibility_deletes_errors(open_url(&url).await).await;
    }
}

async fn ids_and_restart(url: &str) {
    let (id1, id2) = {
        let r = open_url(url).await;
        let (id1, v1) = r.register("a-value", &req(V1)).await.expect("v1");
        assert_eq!(v1, 1);
        // The same schema, spelled differently, under another subject: the same id.
        let spaced = V1.replace(',', " , ");
        let (same, v) = r.register("b-value", &req(&spaced)).await.expect("b");
        assert_eq!((same, v), (id1, 1));
        // Registering again is idempotent.
        assert_eq!(
            r.register("a-value", &req(V1)).await.expect("again"),
            (id1, 1)
        );
        let (id2, v2) = r.register("a-value", &req(V2)).await.expect("v2");
        assert_eq!(v2, 2);
        assert_ne!(id1, id2);
        (id1, id2)
    };
    let r = open_url(url).await;
    assert_eq!(
        r.versions("a-value", Deleted::Exclude)
            .await
            .expect("versions"),
        vec![1, 2]
    );
    let latest = r
        .version("a-value", VersionSpec::Latest, false)
        .await
        .expect("latest");
    assert_eq!((latest.version, latest.schema.id), (2, id2));
    assert_eq!(
        r.schema_by_id(id1).await.expect("id1").text,
        r.version("b-value", VersionSpec::Number(1), false)
            .await
            .expect("b1")
            .schema
            .text
    );
    assert_eq!(
        r.subjects("", Deleted::Exclude).await.expect("subjects"),
        vec!["a-value", "b-value"]
    );
    // The next new schema gets a fresh id, not a reused one.
    r.set_compatibility(Some("c"), Compatibility::None)
        .await
        .expect("config");
    let (id3, _) = r.register("c", &req(r#""string""#)).await.expect("c");
    assert!(id3 > id2);
}

#[tokio::test]
async fn compatibility_deletes_and_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    compatibility_deletes_errors(registry(&dir).await).await;
}

async fn compatibility_deletes_errors(r: Registry) {
    r.register("s", &req(V1)).await.expect("v1");
    assert!(matches!(
        r.register("s", &req(BAD)).await,
        Err(Error::Incompatible { .. })
    ));
    assert!(!r
        .test_compatibility("s", Some(VersionSpec::Latest), &req(BAD))
        .await
        .expect("test")
        .is_empty());
    assert!(r
        .test_compatibility("s", None, &req(V2))
        .await
        .expect("test")
        .is_empty());
    r.set_compatibility(Some("s"), Compatibility::None)
        .await
        .expect("set");
    assert_eq!(
        r.compatibility(Some("s"), false).await.expect("get"),
        Compatibility::None
    );
    assert!(matches!(
        r.compatibility(Some("other"), false).await,
        Err(Error::SubjectConfigNotFound(_))
    ));
    let (_, v2) = r.register("s", &req(BAD)).await.expect("NONE accepts");
    assert_eq!(v2, 2);

    // Error codes a client sees.
    let e = r
        .version("nope", VersionSpec::Latest, false)
        .await
        .unwrap_err();
    assert_eq!((e.error_code(), e.http_status()), (40401, 404));
    let e = r
        .version("s", VersionSpec::Number(9), false)
        .await
        .unwrap_err();
    assert_eq!(e.error_code(), 40402);
    let e = r.schema_by_id(999).await.unwrap_err();
    assert_eq!(e.error_code(), 40403);
    let e = r.register("s", &req("{not json")).await.unwrap_err();
    assert_eq!((e.error_code(), e.http_status()), (42201, 422));
    let proto = SchemaRequest {
        schema: "syntax = \"proto3\"; message M { int32 a = 1 }".into(),
        schema_type: Some("PROTOBUF".into()),
        ..SchemaRequest::default()
    };
    let e = r.register("p", &proto).await.unwrap_err();
    assert_eq!((e.error_code(), e.http_status()), (42201, 422), "{e}");
    let json = SchemaRequest {
        schema: r#"{"type": 5}"#.into(),
        schema_type: Some("JSON".into()),
        ..SchemaRequest::default()
    };
    let e = r.register("j", &json).await.unwrap_err();
    assert_eq!((e.error_code(), e.http_status()), (42201, 422), "{e}");

    // Version deletes: soft, then permanent; a permanent delete needs a soft one first.
    let delete_v2 = |permanent| r.delete_version("s", VersionSpec::Number(2), permanent);
    let err = delete_v2(true).await.unwrap_err();
    assert_eq!(err.error_code(), 40407);
    assert_eq!(delete_v2(false).await.expect("soft"), 2);
    let err = delete_v2(false).await.unwrap_err();
    assert_eq!(err.error_code(), 40406);
    assert_eq!(
        r.versions("s", Deleted::Exclude).await.expect("live"),
        vec![1]
    );
    assert_eq!(
        r.versions("s", Deleted::Include).await.expect("all"),
        vec![1, 2]
    );
    assert_eq!(delete_v2(true).await.expect("hard"), 2);
    // Version numbers are not reused while a row exists; after the hard delete, 2 is free.
    let (_, v) = r.register("s", &req(V2)).await.expect("v2");
    assert_eq!(v, 2);

    // Subject deletes.
    assert_eq!(
        r.delete_subject("s", true).await.unwrap_err().error_code(),
        40405
    );
    assert_eq!(
        r.delete_subject("s", false).await.expect("soft"),
        vec![1, 2]
    );
    assert_eq!(
        r.delete_subject("s", false).await.unwrap_err().error_code(),
        40404
    );
    assert!(r
        .subjects("", Deleted::Exclude)
        .await
        .expect("subjects")
        .is_empty());
    assert_eq!(
        r.subjects("", Deleted::Include).await.expect("subjects"),
        vec!["s"]
    );
    assert_eq!(r.delete_subject("s", true).await.expect("hard"), vec![1, 2]);
    assert_eq!(
        r.versions("s", Deleted::Include)
            .await
            .unwrap_err()
            .error_code(),
        40401
    );

    // Read-only mode refuses writes.
    r.set_mode(None, Mode::ReadOnly, false).await.expect("mode");
    assert_eq!(
        r.register("t", &req(V1)).await.unwrap_err().error_code(),
        42205
    );
    r.set_mode(None, Mode::ReadWrite, false)
        .await
        .expect("mode");
    r.register("t", &req(V1)).await.expect("writable again");
}

#[tokio::test]
async fn framed_records_decode_through_the_registry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let r = registry(&dir).await;
    let (id, _) = r.register("u", &req(V1)).await.expect("v1");
    let schema = r.schema_by_id(id).await.expect("schema");
    let value =
        apache_avro::types::Value::Record(vec![("id".into(), apache_avro::types::Value::Long(42))]);
    let ParsedSchema::Avro(avro) = &schema.parsed else {
        panic!("an Avro schema")
    };
    let datum = apache_avro::to_avro_datum(&avro.schema, value.clone()).expect("encode");
    let decoded = framing::decode(&r, &framing::frame(id, &datum))
        .await
        .expect("decode");
    assert_eq!(decoded.schema.id, id);
    assert!(matches!(decoded.value, framing::Value::Avro(v) if v == value));
    assert!(matches!(
        framing::decode(&r, &framing::frame(id + 100, &datum)).await,
        Err(framing::FramingError::UnknownId(_))
    ));
    assert!(matches!(
        framing::decode(&r, &[1, 0, 0, 0, 1, 2]).await,
        Err(framing::FramingError::BadMagic(1))
    ));
}

/// Two registries (two nodes) on one PostgreSQL register the same new schemas at the same
/// time under different subjects: each schema must end up with one id, not two.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_nodes_give_a_schema_one_id_on_postgres() {
    let Some(url) = fresh_postgres_database().await else {
        return;
    };
    let (a, b) = (
        std::sync::Arc::new(open_url(&url).await),
        std::sync::Arc::new(open_url(&url).await),
    );
    for round in 0..20 {
        let text = format!(
            r#"{{"type":"record","name":"R{round}","fields":[{{"name":"x","type":"long"}}]}}"#
        );
        let (ra, rb) = (a.clone(), b.clone());
        let (ta, tb) = (text.clone(), text.clone());
        let left =
            tokio::spawn(async move { ra.register(&format!("left-{round}"), &req(&ta)).await });
        let right =
            tokio::spawn(async move { rb.register(&format!("right-{round}"), &req(&tb)).await });
        let (l, r) = (
            left.await.expect("task").expect("left registers"),
            right.await.expect("task").expect("right registers"),
        );
        assert_eq!(l.0, r.0, "round {round}: one schema, one id");
    }
}
