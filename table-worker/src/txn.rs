//! Kafka transactions as a table sees them: a table only ever holds committed records. The
//! node supplies a [`TxnView`] (the broker's partitions' last stable offsets and aborted
//! transactions); a job then reads no further than the partition's last stable offset and
//! skips the records of aborted transactions. Control batches (the markers) are skipped
//! always. Every offset still counts toward the table's progress: skipped records are
//! consumed, not left behind.

use futures::future::BoxFuture;

/// One aborted transaction of a partition: its producer's records in `first..=last` (`last`
/// is the abort marker's offset) are not the table's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first: u64,
    pub last: u64,
}

impl AbortedTxn {
    /// Whether a transactional batch of `producer_id` at `offset` belongs to an aborted
    /// transaction of `aborted`.
    pub fn covers(aborted: &[AbortedTxn], producer_id: i64, offset: u64) -> bool {
        aborted
            .iter()
            .any(|a| a.producer_id == producer_id && a.first <= offset && offset <= a.last)
    }
}

/// The transactions of a node's partitions, as the table worker asks about them.
pub trait TxnView: Send + Sync + std::fmt::Debug {
    /// The offset below which `partition` of `topic` is settled: the first offset of its
    /// earliest open transaction, or its end when none is open. An error (the partition is
    /// not this node's, its state cannot be read) stops the job short.
    fn stable_end<'a>(
        &'a self,
        topic: &'a str,
        partition: i32,
    ) -> BoxFuture<'a, std::result::Result<u64, String>>;

    /// The aborted transactions of `partition` of `topic` overlapping `from..to`.
    fn aborted(&self, topic: &str, partition: i32, from: u64, to: u64) -> Vec<AbortedTxn>;
}
