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
mod inner;
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
pub use meta::{
    bounded, postgres_pool_options, record_move, Backend, MetaStore, Move, CALL_WAIT, MOVES_KEPT_MS,
};
pub use objects::faulty::{Fault, FaultyStore, Op};
pub use objects::synced::{Fsync, SyncedLocalStore, Syncer};
pub use objects::{open_object_store, ObjectClient};
pub use store::{
    AppendOptions, PendingAppend, ReadBatch, StoreHealth, StoreStats, StreamId, StreamInfo,
    StreamStore, StreamStoreBuilder, TableLag, UploadFailure,
};
pub use upload::UploadReport;

/// Runs CPU-bound background `work` (the log compactor's hashing and rewriting) where it
/// neither holds up the async workers nor takes a core from them: on a thread of its own at
/// the lowest priority (nice 19: where produce and fetch want the cores, it gets about 1.5%
/// of one, so it always progresses; on idle cores it runs at full speed), while the caller
/// waits. On a multi-threaded Tokio
/// runtime the calling worker first hands its other tasks to the rest
/// (`tokio::task::block_in_place`). Where no thread can be started, `work` runs on the
/// caller's. A panic in `work` resumes in the caller.
pub fn background<R: Send>(work: impl FnOnce() -> R + Send) -> R {
    let run = || {
        let slot = parking_lot::Mutex::new(Some(work));
        let done = std::thread::scope(|s| {
            let spawned = std::thread::Builder::new()
                .name("inlet-background".into())
                .spawn_scoped(s, || {
                    lowest_priority();
                    let work = slot.lock().take();
                    work.map(|w| w())
                });
            match spawned {
                Ok(h) => h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
                Err(e) => {
                    tracing::debug!(error = %e, "no background thread: the work runs here");
                    None
                }
            }
        });
        match done {
            Some(r) => r,
            None => {
                let work = slot.lock().take();
                match work {
                    Some(w) => w(),
                    // The thread took it and returned: `done` was Some.
                    None => unreachable!("background work neither ran nor stayed"),
                }
            }
        }
    };
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(run)
        }
        _ => run(),
    }
}

/// Puts the calling thread at the lowest priority, nice 19 (Linux's nice is per thread; a
/// thread may always lower its own priority). Not `SCHED_IDLE`, which would starve the work
/// for as long as the machine is busy. Nothing elsewhere.
fn lowest_priority() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: plain system calls on the calling thread's own id.
        let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 19) };
        if rc != 0 {
            tracing::debug!(
                error = %std::io::Error::last_os_error(),
                "could not lower a background thread's priority"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::background;

    /// The calling thread's nice value.
    #[cfg(target_os = "linux")]
    fn nice() -> i32 {
        // SAFETY: plain system calls on the calling thread's own id.
        unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) }
    }

    #[cfg(target_os = "linux")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn background_work_runs_at_the_lowest_priority_and_the_caller_keeps_its_own() {
        let mut seen = Vec::new();
        let here = nice();
        let there = background(|| {
            seen.push(1);
            nice()
        });
        assert_eq!(there, 19);
        assert_eq!(seen, [1], "the work borrowed the caller's data");
        assert_eq!(nice(), here, "the caller keeps its priority");
        // Without a runtime too.
        let there = std::thread::spawn(|| background(nice)).join().unwrap();
        assert_eq!(there, 19);
    }

    #[test]
    fn a_panic_in_background_work_resumes_in_the_caller() {
        let caught = std::panic::catch_unwind(|| background(|| -> u8 { panic!("in the work") }));
        let payload = caught.unwrap_err();
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"in the work"));
    }
}
