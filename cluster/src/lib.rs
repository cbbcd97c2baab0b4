//! A node of a cluster (docs/architecture.md, "Cluster"): which node owns which stream, and
//! which coordinates which group, among the nodes whose leases are live ([`members`]).
//!
//! Every node computes the same assignment from the same inputs, with no coordinator of its
//! own ([`assign`]): rendezvous hashing of each key over the live node ids, bounded so that
//! every node takes at most its fair share of the streams' weight. A stream's load is 1 plus
//! its produce rate over `[cluster] load_unit_bytes`; its weight is the load rounded to a
//! power of two, published by its owner when the load moved far from it ([`measure`]) and
//! taken in by the assignment once the published weights settle ([`Settled`]), so the nodes
//! balance bytes in, swings move nothing, and a new load does not move partitions back and
//! forth. A stream's key is its name, except that a table topic's control stream goes by the
//! topic's id ([`stream_key`]): the table's coordinator runs where it is owned, while the
//! table's partitions, keyed or not, spread and convert where they are owned. Control streams
//! are pinned to the rendezvous of their key ([`PINNED_PREFIX`]): a coordinator moves only when
//! the live nodes change, never for the partitions' weights, since a moved coordinator
//! reopens its table (and a keyed one rebuilds its index from the table's files). A group goes
//! to the rendezvous of its id.
//!
//! The assigner ([`run`]) reconciles the node with the assignment every `[cluster]
//! rebalance_ms` (and at once at start):
//! - streams assigned here that are free, or whose owner's lease ended, are acquired (a new
//!   epoch: the previous owner can commit nothing more, see `inlet_storage::StreamStore::acquire`);
//! - streams owned here but assigned to another live node are released, after their appends
//!   in flight finish; that node acquires them at its next pass. Nothing is copied.
//! - topics and streams other nodes created, deleted or reconfigured are picked up (also
//!   every [`TOPICS_POLL`] apart from the pass, so a change reaches every node within a
//!   second even while a pass waits on a takeover).
//!
//! Safety does not rest on the leases' timing: every metadata commit of a stream is fenced by
//! its epoch in PostgreSQL, and an append is acknowledged only after its commit. A node paused
//! past its lease (SIGSTOP) finds every commit refused when it runs again, so it acknowledges
//! nothing more. The lease only decides how soon another node may take over.
//!
//! A node whose lease lapsed by its own clock (no renewal answered within a ttl of its start:
//! the metadata store is unreachable, or the node was paused) stands down at once
//! ([`follow_lease`]): it leads no partition (Produce and Fetch answer `NOT_LEADER_OR_FOLLOWER`,
//! Metadata names no leader for what it holds) and coordinates no group until a renewal
//! succeeds; then it serves what it still owns. Clients so leave it within about its lease,
//! instead of waiting on requests it cannot acknowledge.

//!
//! The crate: [`members`] (the membership rows and leases), `placement` (the assignment,
//! I/O-free, driven by a seeded simulation in `tests/placement.rs`), `node` (the assigner
//! and the polls, which read the metadata store and act on the assignment).

pub mod members;
mod node;
pub mod placement;

pub use node::{load_weights, pass, release_all, run, ClusterState};
pub use placement::{assign, decide, rendezvous, Seen, Step};
