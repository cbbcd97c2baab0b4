//! Table coordinators (docs/architecture.md, "Commit rounds"): one per table topic. Commit rounds, the two-phase commit
//! protocol through the table's control stream, exactly-once offsets, watermarks and the
//! `inlet.*` snapshot summary properties.
//!
//! The parts:
//! - [`commit`]: a round as one Iceberg snapshot with `inlet.commit-id`, `inlet.offsets` and
//!   `inlet.watermark`, schema evolution in the same commit, retried on lost races; upsert
//!   rounds as row deltas (data and position delete manifests) pinned to their base snapshot;
//! - [`control`]: the table's control stream, `PRE_COMMIT` before a round's Iceberg commit
//!   and `COMMITTED` after, from which a restarted coordinator commits a crashed round's
//!   files again;
//! - [`lease`]: coordinator epochs in the metadata store, which fence every commit (at most
//!   one live coordinator per table);
//! - [`compact`]: rewrites a table's small files into target-size ones (position deletes
//!   applied), beside the rounds; files without deletes are merged by copying their Parquet
//!   column chunks ([`concat`]), not decoded;
//! - `expiry`: snapshot expiry, with the manifests and files only expired snapshots held;
//!   [`reading`]: the table-reading side of commits (a snapshot's manifests and live files);
//! - [`manifest_merge`]: merges small manifests, so the manifest list stays short however
//!   often a table commits;
//! - [`machine`]: the coordinator's decisions as a state machine without I/O (events in,
//!   actions out), which the simulation drives too;
//! - [`chunks`] and [`convert`]: in a cluster, an append-only table's partitions are
//!   converted on their owners, which hand their files to the coordinator as chunks in the
//!   metadata store;
//! - [`coordinator`]: the per-table loop that carries out the machine's actions: collects
//!   the worker's conversions every commit interval and commits them;
//! - [`watermark`]: the table and partition watermarks; [`status`]: commit lag per table.
//!
//! Where a round commits: [`coordinator::run`] carries out the machine's `Action::Commit` with
//! [`commit::Committer::commit`], which writes the round's manifests and manifest list and
//! makes one catalog commit that requires the base snapshot (`assert-ref-snapshot-id`), after
//! checking the round's epoch and continuity against that base.

pub mod chunks;
pub mod commit;
pub(crate) mod commit_error;
pub mod compact;
pub mod concat;
pub(crate) mod control;
pub mod convert;
pub mod coordinator;
pub(crate) mod expiry;
pub(crate) mod key_checkpoint;
pub(crate) mod lease;
pub mod machine;
pub(crate) mod manifest_merge;
pub mod orphans;
pub mod reading;
pub(crate) mod rebase;
pub(crate) mod round;
/// Fail points live in the catalog crate, whose commit path holds two of them.
pub use inlet_common::failpoint;
pub(crate) mod status;
pub(crate) mod topic;
pub(crate) mod watermark;

pub use lease::{Lease, Leases, Liveness, DEFAULT_TTL as DEFAULT_LEASE_TTL};
pub use manifest_merge::{MergePolicy, MIN_COUNT_TO_MERGE};
pub use status::{Statuses, TableStatus};

#[cfg(test)]
mod tests {
    use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};

    #[test]
    fn iceberg_schema_builds() {
        let schema = Schema::builder()
            .with_fields(vec![NestedField::required(
                1,
                "id",
                Type::Primitive(PrimitiveType::Long),
            )
            .into()])
            .build()
            .expect("schema");
        assert_eq!(schema.highest_field_id(), 1);
    }
}
