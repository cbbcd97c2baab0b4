//! One partition's transactions as its owner serves them: which producers have a transaction
//! open in it (and from where), which transactions were aborted, and so the last stable
//! offset (LSO) and the aborted transactions a `read_committed` fetch reports.
//!
//! Invariants:
//! - An open transaction's first offset is never above its first record: the owner records a
//!   lower bound (the durable end) when it queues the transaction's first batch, and the
//!   batch's own offset once it is durable. So the LSO never exposes a record of an open
//!   transaction; it may hold other records back for the length of one append.
//! - A commit marker ends its transaction when it is queued (the decision is durable at the
//!   coordinator, which writes the marker again until it is stored); an abort marker turns
//!   its transaction into an aborted entry when it is queued, before the LSO moves past its
//!   records. An aborted entry's `last` is the marker's offset once that is durable (until
//!   then, unbounded: no later transaction of the producer starts in the partition before it).
//! - The state is rebuilt from the log (the producer image: snapshot and the batches after
//!   it) whenever the partition's producer state is, so it survives restarts and failover;
//!   aborted entries wholly below the stream's start are dropped.

use std::collections::HashMap;

/// One aborted transaction: its producer's records in `first..=last` are aborted; `last` is
/// the abort marker's offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Aborted {
    pub(crate) producer_id: i64,
    pub(crate) first: u64,
    pub(crate) last: u64,
}

/// A partition's transactions (see the module doc).
#[derive(Debug, Default)]
pub(crate) struct PartitionTxns {
    /// The ownership epoch the state was built for (`None`: not built on this node yet).
    pub(crate) epoch: Option<u64>,
    /// Producer id → the first offset (or a lower bound of it) of its open transaction.
    open: HashMap<i64, u64>,
    /// Aborted transactions, in marker order.
    aborted: Vec<Aborted>,
}

impl PartitionTxns {
    /// The state for ownership epoch `epoch`, from the open transactions and aborted entries
    /// the partition's durable log defines.
    pub(crate) fn rebuilt(epoch: u64, open: HashMap<i64, u64>, aborted: Vec<Aborted>) -> Self {
        PartitionTxns {
            epoch: Some(epoch),
            open,
            aborted,
        }
    }

    /// The last stable offset given the partition's high watermark: the first offset of the
    /// earliest open transaction, or the high watermark when none is open.
    pub(crate) fn stable_end(&self, high_watermark: u64) -> u64 {
        self.open
            .values()
            .copied()
            .min()
            .map_or(high_watermark, |first| first.min(high_watermark))
    }

    /// Where `producer_id`'s open transaction here starts (a lower bound until its first
    /// batch is durable), if it has one open (DescribeProducers).
    pub(crate) fn open_first(&self, producer_id: i64) -> Option<u64> {
        self.open.get(&producer_id).copied()
    }

    /// The aborted transactions whose records overlap `from..to`: what a `read_committed`
    /// fetch of that range reports as (producer id, first offset).
    pub(crate) fn aborted_in(&self, from: u64, to: u64) -> Vec<Aborted> {
        self.aborted
            .iter()
            .filter(|a| a.first < to && a.last >= from)
            .copied()
            .collect()
    }

    /// A transactional batch of `producer_id` was queued while the durable end was `end`:
    /// opens its transaction here if it was not open. Returns whether it did (the caller then
    /// narrows the first offset with [`Self::first_stored`]).
    pub(crate) fn batch_queued(&mut self, producer_id: i64, end: u64) -> bool {
        match self.open.entry(producer_id) {
            std::collections::hash_map::Entry::Occupied(_) => false,
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(end);
                true
            }
        }
    }

    /// The batch that opened `producer_id`'s transaction (at the lower bound `bound`) is
    /// durable at `offset`.
    pub(crate) fn first_stored(&mut self, producer_id: i64, bound: u64, offset: u64) {
        if let Some(first) = self.open.get_mut(&producer_id) {
            if *first == bound {
                *first = offset.max(bound);
            }
        }
    }

    /// A marker for `producer_id` was queued: its transaction here ends (an abort keeps an
    /// aborted entry, unbounded until [`Self::marker_stored`]).
    pub(crate) fn marker_queued(&mut self, producer_id: i64, marker: inlet_records::batch::Marker) {
        let Some(first) = self.open.remove(&producer_id) else {
            return;
        };
        if marker == inlet_records::batch::Marker::Abort {
            self.aborted.push(Aborted {
                producer_id,
                first,
                last: u64::MAX,
            });
        }
    }

    /// `producer_id`'s marker is durable at `offset`: its aborted entry ends there.
    pub(crate) fn marker_stored(&mut self, producer_id: i64, offset: u64) {
        for a in self.aborted.iter_mut().rev() {
            if a.producer_id == producer_id && a.last == u64::MAX {
                a.last = offset;
            }
        }
    }

    /// Drops aborted entries wholly below `start` (retention deleted their records).
    pub(crate) fn trim(&mut self, start: u64) {
        self.aborted.retain(|a| a.last >= start);
    }
}

/// What the durable log says of a partition's transactions, kept with its producer image
/// (`producer_image`): built only from stored batches, in offset order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LogTxns {
    /// Producer id → the base offset of the first batch of its open transaction.
    pub(crate) open: HashMap<i64, u64>,
    /// Aborted transactions, in marker order.
    pub(crate) aborted: Vec<Aborted>,
}

impl LogTxns {
    /// Takes in one stored batch at `base_offset`.
    pub(crate) fn apply(
        &mut self,
        h: &inlet_records::batch::BatchHeader,
        payload: &bytes::Bytes,
        base_offset: u64,
    ) {
        if !h.is_transactional() {
            return;
        }
        if !h.is_control() {
            self.open.entry(h.producer_id).or_insert(base_offset);
            return;
        }
        let marker = inlet_records::records::stored_marker(payload);
        if let Some(first) = self.open.remove(&h.producer_id) {
            if marker == Some(inlet_records::batch::Marker::Abort) {
                self.aborted.push(Aborted {
                    producer_id: h.producer_id,
                    first,
                    last: base_offset,
                });
            }
        }
    }

    /// Drops aborted entries wholly below `start`.
    pub(crate) fn trim(&mut self, start: u64) {
        self.aborted.retain(|a| a.last >= start);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use inlet_records::batch::Marker;

    /// The LSO stays at an open transaction's first offset (its lower bound, then the batch's
    /// own), moves on at its marker, and an abort leaves an entry a fetch of its range sees.
    #[test]
    fn the_stable_end_follows_open_transactions_and_aborts_are_reported() {
        let mut t = PartitionTxns::rebuilt(0, HashMap::new(), Vec::new());
        assert_eq!(t.stable_end(10), 10);
        assert!(t.batch_queued(7, 10));
        assert!(!t.batch_queued(7, 12));
        assert_eq!(t.stable_end(11), 10);
        t.first_stored(7, 10, 11);
        assert_eq!(t.stable_end(20), 11);
        assert!(t.batch_queued(8, 20));
        t.first_stored(8, 20, 20);
        t.marker_queued(7, Marker::Abort);
        assert_eq!(t.stable_end(30), 20);
        assert_eq!(t.aborted_in(0, 30)[0].first, 11);
        t.marker_stored(7, 25);
        assert_eq!(t.aborted_in(26, 30), vec![]);
        assert_eq!(t.aborted_in(25, 30).len(), 1);
        t.marker_queued(8, Marker::Commit);
        assert_eq!(t.stable_end(30), 30);
        assert_eq!(t.aborted_in(0, 30).len(), 1);
        t.trim(26);
        assert!(t.aborted_in(0, 30).is_empty());
    }
}
