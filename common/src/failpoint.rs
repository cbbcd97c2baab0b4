//! Fail points: test hooks that stop the process at an exact step of a table topic's commit,
//! so the crash tests can kill a node between any two durable steps (docs/architecture.md,
//! "Recovery"). The table coordinator and the catalog's commit path call them.
//!
//! `INLET_FAILPOINT=<name>:<n>` makes the n-th time the process reaches the point `<name>`
//! abort it on the spot (`std::process::abort`: no destructor runs, nothing more is written,
//! as with kill -9). Unset, a fail point costs one atomic load. The points:
//! - `round-built`: a round's data files are uploaded; nothing is committed.
//! - `dlq-committed`: the round's dead letters are committed; the round is not.
//! - `metadata-staged`: a commit's new metadata file is written; the pointer is not swapped
//!   (embedded catalog; `inlet_catalog::CommitTarget::commit`).
//! - `committed`: the commit is done (the pointer swapped, or the external catalog answered);
//!   nothing after it (old metadata clean-up, status) has run.
//! - `compaction-written`: a compaction's new file is written; its replace is not committed.
//! - `compaction-committed`: a compaction's replace is committed; the coordinator does not
//!   know yet.
//! - `log-compaction-written`: a compacted topic's rewritten object is uploaded; the swap of
//!   its ranges is not committed (`StreamStore::rewrite_uploaded`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// The variable that arms a fail point.
pub const VAR: &str = "INLET_FAILPOINT";

fn armed() -> Option<&'static (String, u64)> {
    static ARMED: OnceLock<Option<(String, u64)>> = OnceLock::new();
    ARMED
        .get_or_init(|| {
            let spec = std::env::var(VAR).ok()?;
            let (name, n) = spec.split_once(':').unwrap_or((spec.as_str(), "1"));
            Some((name.to_string(), n.parse().ok()?))
        })
        .as_ref()
}

/// Aborts the process if `name` is armed and this is its n-th hit.
pub fn hit(name: &str) {
    static HITS: AtomicU64 = AtomicU64::new(0);
    let Some((armed, n)) = armed() else { return };
    if armed == name && HITS.fetch_add(1, Ordering::SeqCst) + 1 == *n {
        tracing::error!(point = name, "fail point reached: aborting");
        std::process::abort();
    }
}
