//! The committer on an external REST catalog (an embedded catalog served over HTTP in this
//! process): rounds become snapshots through the spec's commit requests, and a commit that
//! loses a race (the catalog answers 409) is rebuilt on the new base and retried; a commit
//! whose answer is lost (500 after it landed) is recognised by the retry, not made twice.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use iceberg::{NamespaceIdent, TableIdent};
use inlet_catalog::rest::RestConfig;
use inlet_catalog::{CatalogConfig, CatalogKind};
use inlet_table_coordinator::commit::{Committer, Round};
use tokio::sync::Mutex;

fn round(n: u64) -> Round {
    common::round("t", n)
}

/// What the catalog's middleware does to table commits.
#[derive(Clone)]
struct Race {
    /// Commit requests seen.
    commits: Arc<AtomicUsize>,
    /// A commit another writer lands just before the next commit request is served.
    rival: Arc<Mutex<Option<(Committer, TableIdent, Round)>>>,
    /// The next commit lands, but its answer is replaced by a 500.
    lose_answer: Arc<AtomicBool>,
}

async fn race(State(race): State<Race>, request: Request, next: Next) -> Response {
    let is_commit = request.method() == Method::POST
        && request.uri().path().contains("/tables/")
        && !request.uri().path().ends_with("/metrics");
    if is_commit {
        race.commits.fetch_add(1, Ordering::SeqCst);
        if let Some((committer, ident, round)) = race.rival.lock().await.take() {
            committer
                .commit(&ident, &round)
                .await
                .expect("the rival commit");
        }
    }
    let response = next.run(request).await;
    if is_commit && race.lose_answer.swap(false, Ordering::SeqCst) {
        assert!(response.status().is_success(), "the commit itself lands");
        let body = r#"{"error":{"message":"gateway timeout","type":"CommitStateUnknownException","code":500}}"#;
        return (axum::http::StatusCode::INTERNAL_SERVER_ERROR, body).into_response();
    }
    response
}

#[tokio::test]
async fn lost_races_are_retried_on_the_new_base_and_lost_answers_not_committed_twice() {
    let dir = tempfile::tempdir().expect("tempdir");
    let meta = format!("sqlite://{}?mode=rwc", dir.path().join("meta.db").display());
    let root = dir.path().join("objects");
    std::fs::create_dir_all(&root).expect("objects dir");
    let root = root.to_string_lossy().into_owned();
    let embedded = inlet_catalog::embedded::open(&meta, &root, None)
        .await
        .expect("catalog");
    let local = Committer::new(embedded.catalog.clone(), embedded.pointers.clone());
    let state = Race {
        commits: Arc::default(),
        rival: Arc::default(),
        lose_answer: Arc::default(),
    };
    let app = axum::Router::new()
        .nest("/iceberg", embedded.router(RestConfig::default()))
        .layer(axum::middleware::from_fn_with_state(state.clone(), race));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let config = CatalogConfig {
        kind: CatalogKind::Rest,
        uri: Some(format!("http://{addr}/iceberg")),
        files: Some(format!("{root}/warehouse")),
        ..CatalogConfig::default()
    };
    let external = common::open_catalog(&config, &root).await;
    assert!(external.is_external());
    let remote = Committer::with_target(external.catalog(), external.commit_target());
    let ident = TableIdent::new(NamespaceIdent::new("default".into()), "t".into());

    // The first round creates the table (and namespace) in the external catalog.
    let first = remote.commit(&ident, &round(1)).await.expect("commit");
    assert!(first.is_some());
    assert_eq!(state.commits.load(Ordering::SeqCst), 1);
    // Committed again (an unknown outcome's retry): recognised, no request.
    assert_eq!(remote.commit(&ident, &round(1)).await.expect("again"), None);
    assert_eq!(state.commits.load(Ordering::SeqCst), 1);

    // Another writer commits just before round 3's request: the catalog answers 409, and
    // the committer rebuilds round 3 on the rival's snapshot.
    *state.rival.lock().await = Some((local.clone(), ident.clone(), round(2)));
    let third = remote
        .commit(&ident, &round(3))
        .await
        .expect("commit after a lost race");
    assert_eq!(
        state.commits.load(Ordering::SeqCst),
        3,
        "one 409, one retry"
    );
    let table = local.load(&ident).await.expect("load").expect("exists");
    common::assert_rebuilt_on_round_2(&table, third, "t");
    // Any catalog may delete the metadata files that drop off the log.
    assert_eq!(
        table
            .metadata()
            .properties()
            .get("write.metadata.delete-after-commit.enabled")
            .map(String::as_str),
        Some("true")
    );

    // Round 4 lands but its answer is lost: an error, and the retry finds it committed.
    state.lose_answer.store(true, Ordering::SeqCst);
    let err = remote.commit(&ident, &round(4)).await.unwrap_err();
    assert!(err.to_string().contains("gateway timeout"), "{err}");
    assert_eq!(remote.commit(&ident, &round(4)).await.expect("retry"), None);
    assert_eq!(state.commits.load(Ordering::SeqCst), 4, "no second request");
    let table = local.load(&ident).await.expect("load").expect("exists");
    assert_eq!(table.metadata().snapshots().len(), 4);
    server.abort();
}
