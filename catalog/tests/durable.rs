//! On a local disk, table files are fsynced (file and folder) before a write returns, so a
//! commit's new `metadata.json` is durable before its pointer swap. One test in its own
//! process, so the process-wide sync counter counts only its writes.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};
use iceberg::{NamespaceIdent, TableCreation, TableIdent, TableUpdate};
use inlet_catalog::rest::{publish, stage, BoxFuture, Checked, MetadataPointerStore, PointerSwap};
use inlet_catalog::storage::{file_io, local_syncs};

/// Passes swaps on, noting how many local files had been synced when the swap came.
#[derive(Debug)]
struct Watching {
    inner: Arc<dyn MetadataPointerStore>,
    syncs_at_swap: AtomicU64,
}

impl MetadataPointerStore for Watching {
    fn swap<'a>(&'a self, swaps: &'a [PointerSwap]) -> BoxFuture<'a, iceberg::Result<()>> {
        self.syncs_at_swap.store(local_syncs(), Ordering::SeqCst);
        self.inner.swap(swaps)
    }
}

#[tokio::test]
async fn local_table_files_are_fsynced_before_the_pointer_swap() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("objects");
    std::fs::create_dir_all(&root).expect("objects dir");
    let root = root.to_string_lossy().into_owned();

    // Plain writes and streaming writes.
    let io = file_io(&root, None).expect("file io");
    let before = local_syncs();
    io.new_output(format!("{root}/a/one"))
        .expect("output")
        .write(Bytes::from_static(b"1"))
        .await
        .expect("write");
    assert_eq!(local_syncs(), before + 1);
    let mut writer = io
        .new_output(format!("{root}/a/two"))
        .expect("output")
        .writer()
        .await
        .expect("writer");
    writer.write(Bytes::from_static(b"2")).await.expect("write");
    assert_eq!(local_syncs(), before + 1, "nothing is synced before close");
    writer.close().await.expect("close");
    assert_eq!(local_syncs(), before + 2);

    // A commit: its metadata file is synced by the time the pointer moves.
    let meta = format!("sqlite://{}?mode=rwc", dir.path().join("meta.db").display());
    let catalog = inlet_catalog::embedded::open(&meta, &root, None)
        .await
        .expect("catalog");
    let ns = NamespaceIdent::new("db".into());
    catalog
        .catalog
        .create_namespace(&ns, Default::default())
        .await
        .expect("namespace");
    let schema = Schema::builder()
        .with_fields(vec![Arc::new(NestedField::required(
            1,
            "id",
            Type::Primitive(PrimitiveType::Long),
        ))])
        .build()
        .expect("schema");
    let table = catalog
        .catalog
        .create_table(
            &ns,
            TableCreation::builder()
                .name("t".into())
                .schema(schema)
                .build(),
        )
        .await
        .expect("table");
    let watching = Watching {
        inner: catalog.pointers.clone(),
        syncs_at_swap: AtomicU64::new(0),
    };
    let before = local_syncs();
    let updates = vec![TableUpdate::SetProperties {
        updates: [("k".to_string(), "v".to_string())].into(),
    }];
    let Checked::Staged(staged) = stage(table, &[], updates, &[]).await.expect("stage") else {
        panic!("a commit with updates is staged");
    };
    publish(&watching, std::slice::from_ref(staged.as_ref()))
        .await
        .expect("publish");
    assert_eq!(
        watching.syncs_at_swap.load(Ordering::SeqCst),
        before + 1,
        "the new metadata.json was fsynced before the swap"
    );
    let loaded = catalog
        .catalog
        .load_table(&TableIdent::new(ns, "t".into()))
        .await
        .expect("load");
    assert_eq!(loaded.metadata_location(), Some(staged.swap.new.as_str()));
}
