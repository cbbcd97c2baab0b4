//! Kafka transactions (KIP-98, KIP-447): the transaction coordinator's state ([`state`]) and
//! each partition's open and aborted transactions ([`partition`]). The requests are answered
//! in `handlers/txn.rs`.
//!
//! The flow: InitProducerId with a `transactional.id` maps it to a producer id and a new
//! epoch (fencing older instances: an open transaction of theirs is aborted first);
//! AddPartitionsToTxn and AddOffsetsToTxn record what the transaction touches; the producer's
//! batches (transactional, so held back from `read_committed` readers by the last stable
//! offset) and TxnOffsetCommit (pending in the group, `groups::txn_offsets`) follow; EndTxn
//! makes the decision durable (`PrepareCommit` or `PrepareAbort`), writes a control batch (a
//! marker) to every partition and ends the group offsets, then records `CompleteCommit` or
//! `CompleteAbort`. A decision whose markers could not all be written (a partition moved, a
//! node died) is completed again by the coordinator's sweep (`Broker::run_transactions`),
//! which also aborts transactions open longer than their timeout, bumping the producer's
//! epoch so the late producer is fenced.

pub(crate) mod forward;
pub(crate) mod partition;
pub(crate) mod state;

pub(crate) use partition::{Aborted, LogTxns, PartitionTxns};
