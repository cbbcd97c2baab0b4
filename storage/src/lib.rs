//! Inlet's stream store (docs/architecture.md, "Stream store"): durable, ordered streams of batches on a local
//! write-ahead log and object storage.
//!
//! The main flow, from [`StreamStore::append`]:
//! 1. [`wal`]: the batch joins a group commit — one write and one `fdatasync` for every append
//!    waiting — and gets its offset; `append` returns when it is durable (the Kafka endpoint
//!    uses [`StreamStore::submit_append`], which returns the offset at once and completes
//!    with the sync).
//! 2. The batch sits in the log cache ([`cache`]) for tail reads.
//! 3. [`upload`]: when enough data waits (or time passes), all of it becomes one stream set
//!    object ([`objects::format`]) in the object store, indexed in the metadata store ([`meta`])
//!    in one transaction; then the WAL is trimmed behind it.
//! 4. Catch-up reads ([`StreamStore::read`] below the cache) go through the block cache to the
//!    objects with ranged GETs and read-ahead.
//! 5. [`maintenance`]: retention, compaction into stream objects, merging of small objects, and
//!    deletion of objects nothing refers to.
//!
//! The metadata store ([`meta`]) reaches PostgreSQL through a relay in the process
//! ([`pg_link`]) that ends connections the server has gone silent on.
//!
//! This crate knows nothing of Kafka or tables: streams, offsets and byte batches only.

mod cache;
pub(crate) mod config;
pub(crate) mod error;
pub(crate) mod maintenance;
pub(crate) mod meta;
pub mod objects;
mod objwal;
mod pg_link;
mod reader;
mod store;
mod stream;
pub(crate) mod upload;
pub mod wal;

pub use config::{RetryConfig, StorageConfig, WalKind};
pub use error::{meta_error_kind, Error, ErrorKind, Result};
pub use maintenance::MaintenanceReport;
pub use meta::{bounded, postgres_pool_options, Backend, MetaStore, CALL_WAIT};
pub use objects::faulty::{Fault, FaultyStore, Op};
pub use objects::synced::{Fsync, SyncedLocalStore, Syncer};
pub use objects::{open_object_store, ObjectClient};
pub use store::{
    AppendOptions, PendingAppend, ReadBatch, StoreHealth, StoreStats, StreamId, StreamInfo,
    StreamStore, StreamStoreBuilder, TableLag, UploadFailure,
};
pub use upload::UploadReport;

/// Runs CPU-bound `work` where it does not hold up the async workers: on a multi-threaded
/// Tokio runtime the worker hands its other tasks to the rest first
/// (`tokio::task::block_in_place`); elsewhere (a current-thread runtime, no runtime) inline.
pub fn blocking<R>(work: impl FnOnce() -> R) -> R {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(work)
        }
        _ => work(),
    }
}
