//! The Kafka wire protocol server (docs/architecture.md, "Crates"): topics, partitions, produce and fetch over
//! the stream store, consumer groups, idempotent producers and topic configs.
//!
//! The main flow: [`server::serve`] accepts connections; each frame goes through
//! [`codec::decode_request`] (no I/O, fuzzed) to [`broker::Broker::handle`], which dispatches
//! to the handlers in `handlers/` by API. Partitions are streams of the stream store
//! ([`topics`]); produce checks batches ([`batch`]) and idempotent producers' sequences
//! ([`producers`]); consumer groups are [`groups`].
//!
//! Where a produce becomes durable: `handlers/produce.rs` (`Broker::produce`) checks each
//! partition's batch, then `submit_batch` hands it to
//! [`inlet_storage::StreamStore::submit_append`]; the WAL writer's group commit (one `write`,
//! one `fdatasync`; storage's `wal` module) completes it, and only then is the batch acked.
//!
//! Table topics' records are checked against the Schema Registry at produce time
//! ([`validate`]). In a cluster the node hands the broker a [`ClusterView`]
//! ([`Broker::set_cluster`]): Metadata and FindCoordinator then route to the owners, and
//! requests for partitions or groups another node holds answer `NOT_LEADER_OR_FOLLOWER` or
//! `NOT_COORDINATOR`. Transactions ([`txn`], `handlers/txn.rs`): the coordinator's state in the
//! metadata store, markers, and each partition's last stable offset.
//!
//! Security: a connection on a SASL listener authenticates first ([`sasl`], in `server`);
//! with the authorizer on, every request is checked against the ACLs before its handler runs
//! ([`acl`], `acl/enforce.rs`). Admin and DDL requests and failed authentications are
//! recorded in the audit trail ([`audit`]). Broker configs may change while nodes run
//! ([`dynamic_config`]).

pub mod acl;
pub mod audit;
pub(crate) mod authorized;
pub(crate) mod broker;
pub(crate) mod compaction;
// Record batches are read by one crate shared with the table workers.
pub use inlet_records::{batch, records};
pub mod codec;
pub mod config;
pub mod dynamic_config;
pub(crate) mod error;
pub(crate) mod fetch_sessions;
pub(crate) mod frame;
pub(crate) mod groups;
mod handlers;
pub mod inter_broker;
pub(crate) mod metrics;
pub mod producer_image;
pub(crate) mod producer_tasks;
pub(crate) mod producers;
pub(crate) mod quota;
pub mod sasl;
pub mod server;
pub mod tls;
pub(crate) mod topic_config;
pub(crate) mod topics;
pub(crate) mod txn;
pub(crate) mod validate;
pub(crate) mod versioned;

pub use producer_tasks::run_snapshots as run_producer_snapshots;
pub use topic_config::{Compaction, TableTopicConfig};
pub use topics::Topic;
pub use validate::{PayloadCheck, RegistryDecoder, Side};

pub use broker::{Broker, BrokerAddr, ClusterView};
pub use config::{BrokerConfig, BrokerSetting, SettingKind};
pub use error::KafkaError;
pub use groups::{GroupMember, GroupView};
