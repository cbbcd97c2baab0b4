//! Fetch sessions (KIP-227): a consumer that fetches the same partitions again and again names
//! them once, in a full fetch that opens a session, and then sends only what changed (a new
//! fetch offset, a partition added or forgotten); the broker answers only the partitions with
//! something new. This module is the sessions' state, without I/O; `handlers/fetch.rs` reads
//! the partitions a [`Plan`] names and asks which partitions its answer carries.
//!
//! Invariants:
//! - A session's partitions are those its full fetch named, changed since by each incremental
//!   fetch: its partitions added or updated (fetch offset, byte limit, leader epoch), then its
//!   forgotten topics' partitions removed, as Kafka orders them.
//! - An incremental fetch is taken only at the session's current epoch, which each one taken
//!   moves on (1, 2, …, `i32::MAX`, 1, …): a repeated or concurrent fetch at an old epoch is
//!   answered INVALID_FETCH_SESSION_EPOCH, an unknown session FETCH_SESSION_ID_NOT_FOUND, and
//!   the client starts over with a full fetch.
//! - The answer to an incremental fetch carries a partition only when it has records or an
//!   error, or its high watermark, last stable offset or log start offset differs from what
//!   the session last sent for it (a partition new to the session always goes). A partition
//!   that returned records moves to the end of the session's order, so that under
//!   `max_bytes` the others get their turn first next time.
//! - Memory: at most `max.incremental.fetch.session.cache.slots` sessions, whose partitions'
//!   estimated bytes stay within `inlet.fetch.session.cache.max.bytes`. A new session takes
//!   the place of the least recently used one only if that one was idle for
//!   [`EVICTABLE_AFTER_MS`]; otherwise it is not opened (its full fetch is answered with
//!   session id 0, and the client goes on fetching in full, as KIP-227 allows). A session
//!   that grows past the budget through incremental fetches is closed (its next fetch finds
//!   no session).
//! - Sessions are per node and live in memory only: after a restart, or on another node, a
//!   client's next incremental fetch finds no session and starts over.

use std::collections::HashMap;

use kafka_protocol::messages::{FetchRequest, TopicName};
use kafka_protocol::ResponseError;
use parking_lot::Mutex;

/// The epoch of a full fetch that opens a session (closing the one it names, if any).
pub(crate) const INITIAL_EPOCH: i32 = 0;
/// The epoch of a fetch that closes the session it names and opens none.
pub(crate) const FINAL_EPOCH: i32 = -1;

/// A session idle this long may be evicted for a new one (Kafka's
/// `min.incremental.fetch.session.eviction.ms`).
pub(crate) const EVICTABLE_AFTER_MS: u64 = 120_000;

/// Bytes counted for a session besides its partitions.
const SESSION_BYTES: usize = 128;

/// One partition a fetch reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    pub(crate) topic: TopicName,
    pub(crate) partition: i32,
    pub(crate) fetch_offset: i64,
    pub(crate) max_bytes: i32,
    pub(crate) leader_epoch: i32,
}

impl Target {
    fn bytes(&self) -> usize {
        std::mem::size_of::<Cached>() + self.topic.0.len()
    }
}

/// What an answer said of a partition's offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sent {
    pub(crate) high_watermark: i64,
    pub(crate) last_stable: i64,
    pub(crate) log_start: i64,
}

/// One partition of an answer, as the session weighs it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Answered {
    pub(crate) sent: Sent,
    /// Records or an error: the partition goes in the answer whatever its offsets.
    pub(crate) news: bool,
    pub(crate) records: bool,
}

#[derive(Debug)]
struct Cached {
    target: Target,
    sent: Option<Sent>,
}

#[derive(Debug)]
struct Session {
    epoch: i32,
    partitions: Vec<Cached>,
    last_used_ms: u64,
    bytes: usize,
}

impl Session {
    fn measure(&mut self) {
        self.bytes = SESSION_BYTES
            + self
                .partitions
                .iter()
                .map(|c| c.target.bytes())
                .sum::<usize>();
    }
}

/// What a fetch reads, and how its answer is given.
#[derive(Debug)]
pub(crate) enum Plan {
    /// No session: every partition asked for is answered, with session id 0.
    Sessionless(Vec<Target>),
    /// A full fetch that opens a session once answered ([`FetchSessions::open`]).
    Open(Vec<Target>),
    /// An incremental fetch of session `id`: every partition of the session is read, and
    /// [`FetchSessions::answer`] picks those the answer carries.
    Incremental { id: i32, targets: Vec<Target> },
}

impl Plan {
    pub(crate) fn targets(&self) -> &[Target] {
        match self {
            Plan::Sessionless(t) | Plan::Open(t) | Plan::Incremental { targets: t, .. } => t,
        }
    }
}

/// The sessions of one node.
#[derive(Debug)]
pub(crate) struct FetchSessions {
    slots: usize,
    max_bytes: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    sessions: HashMap<i32, Session>,
    bytes: usize,
}

impl Inner {
    fn remove(&mut self, id: i32) {
        if let Some(s) = self.sessions.remove(&id) {
            self.bytes -= s.bytes;
        }
    }
}

/// The partitions `r` names, in its order.
fn targets_of(r: &FetchRequest) -> Vec<Target> {
    r.topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| Target {
                topic: t.topic.clone(),
                partition: p.partition,
                fetch_offset: p.fetch_offset,
                max_bytes: p.partition_max_bytes,
                leader_epoch: p.current_leader_epoch,
            })
        })
        .collect()
}

impl FetchSessions {
    /// At most `slots` sessions (0: none) within `max_bytes`.
    pub(crate) fn new(slots: usize, max_bytes: usize) -> Self {
        FetchSessions {
            slots,
            max_bytes,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Sessions open now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.inner.lock().sessions.len()
    }

    /// What fetch `r` reads, at `now_ms`; an error answers the whole fetch.
    pub(crate) fn begin(&self, r: &FetchRequest, now_ms: u64) -> Result<Plan, ResponseError> {
        match (r.session_id, r.session_epoch) {
            (id, FINAL_EPOCH) => {
                if id != 0 {
                    self.inner.lock().remove(id);
                }
                Ok(Plan::Sessionless(targets_of(r)))
            }
            (id, INITIAL_EPOCH) => {
                if id != 0 {
                    self.inner.lock().remove(id);
                }
                Ok(if self.slots == 0 {
                    Plan::Sessionless(targets_of(r))
                } else {
                    Plan::Open(targets_of(r))
                })
            }
            (id, epoch) if epoch > 0 => {
                let mut inner = self.inner.lock();
                let session = inner
                    .sessions
                    .get_mut(&id)
                    .ok_or(ResponseError::FetchSessionIdNotFound)?;
                if session.epoch != epoch {
                    return Err(ResponseError::InvalidFetchSessionEpoch);
                }
                for t in targets_of(r) {
                    match session
                        .partitions
                        .iter_mut()
                        .find(|c| c.target.topic == t.topic && c.target.partition == t.partition)
                    {
                        Some(c) => c.target = t,
                        None => session.partitions.push(Cached {
                            target: t,
                            sent: None,
                        }),
                    }
                }
                for f in &r.forgotten_topics_data {
                    session.partitions.retain(|c| {
                        c.target.topic != f.topic || !f.partitions.contains(&c.target.partition)
                    });
                }
                session.epoch = if epoch == i32::MAX { 1 } else { epoch + 1 };
                session.last_used_ms = now_ms;
                let before = session.bytes;
                session.measure();
                let after = session.bytes;
                let targets = session
                    .partitions
                    .iter()
                    .map(|c| c.target.clone())
                    .collect();
                inner.bytes = inner.bytes - before + after;
                if inner.bytes > self.max_bytes {
                    // Grown past the budget: this answer goes in full, and the session ends.
                    inner.remove(id);
                    return Ok(Plan::Sessionless(targets));
                }
                Ok(Plan::Incremental { id, targets })
            }
            _ => Err(ResponseError::InvalidFetchSessionEpoch),
        }
    }

    /// Opens a session over `targets`, whose answer said `sent` of each (in order); its id,
    /// or 0 when there is no room for it.
    pub(crate) fn open(&self, targets: &[Target], sent: &[Sent], now_ms: u64) -> i32 {
        let mut session = Session {
            epoch: 1,
            partitions: targets
                .iter()
                .zip(sent)
                .map(|(t, s)| Cached {
                    target: t.clone(),
                    sent: Some(*s),
                })
                .collect(),
            last_used_ms: now_ms,
            bytes: 0,
        };
        session.measure();
        if session.bytes > self.max_bytes {
            return 0;
        }
        let mut inner = self.inner.lock();
        while inner.sessions.len() >= self.slots || inner.bytes + session.bytes > self.max_bytes {
            let idlest = inner
                .sessions
                .iter()
                .min_by_key(|(_, s)| s.last_used_ms)
                .map(|(id, s)| (*id, s.last_used_ms));
            match idlest {
                Some((id, used)) if now_ms.saturating_sub(used) >= EVICTABLE_AFTER_MS => {
                    inner.remove(id)
                }
                _ => return 0,
            }
        }
        // Random, as Kafka's: after a restart, a client still holding an id of the node's
        // previous life must not find another client's session under it.
        let mut id = 0;
        while id == 0 || inner.sessions.contains_key(&id) {
            id = (inlet_common::random::u32() & 0x7fff_ffff) as i32;
        }
        inner.bytes += session.bytes;
        inner.sessions.insert(id, session);
        id
    }

    /// Which partitions of an incremental fetch of session `id` its answer carries, given
    /// what was read of each (in the order of the plan's targets); records what it sends. All
    /// of them when the session ended meanwhile.
    pub(crate) fn answer(&self, id: i32, targets: &[Target], answered: &[Answered]) -> Vec<bool> {
        let mut inner = self.inner.lock();
        let Some(session) = inner.sessions.get_mut(&id) else {
            return vec![true; answered.len()];
        };
        let mut carried = Vec::with_capacity(answered.len());
        let mut to_end = Vec::new();
        let same =
            |c: &Cached, t: &Target| c.target.topic == t.topic && c.target.partition == t.partition;
        for (k, (t, a)) in targets.iter().zip(answered).enumerate() {
            // No fetch of the session changed it since the plan (its epoch moved with the
            // plan), so the k-th partition is the k-th target; a search only if not.
            let at = session
                .partitions
                .get(k)
                .filter(|c| same(c, t))
                .map(|_| k)
                .or_else(|| session.partitions.iter().position(|c| same(c, t)));
            let Some(i) = at else {
                // Forgotten by a later fetch meanwhile: answered all the same.
                carried.push(true);
                continue;
            };
            let cached = &mut session.partitions[i];
            let carry = a.news || cached.sent != Some(a.sent);
            if carry {
                cached.sent = Some(a.sent);
            }
            if a.records {
                to_end.push(i);
            }
            carried.push(carry);
        }
        // Those that returned records go last, in their order.
        to_end.sort_unstable();
        for (moved, i) in to_end.into_iter().enumerate() {
            let c = session.partitions.remove(i - moved);
            session.partitions.push(c);
        }
        carried
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
    use kafka_protocol::protocol::StrBytes;

    fn name(s: &str) -> TopicName {
        TopicName(StrBytes::from_string(s.to_string()))
    }

    fn request(
        id: i32,
        epoch: i32,
        parts: &[(&str, i32, i64)],
        forget: &[(&str, i32)],
    ) -> FetchRequest {
        let mut r = FetchRequest::default()
            .with_session_id(id)
            .with_session_epoch(epoch);
        for (t, p, offset) in parts {
            r.topics
                .push(FetchTopic::default().with_topic(name(t)).with_partitions(
                    vec![FetchPartition::default()
                        .with_partition(*p)
                        .with_fetch_offset(*offset)
                        .with_partition_max_bytes(1 << 20)],
                ));
        }
        for (t, p) in forget {
            r.forgotten_topics_data.push(
                ForgottenTopic::default()
                    .with_topic(name(t))
                    .with_partitions(vec![*p]),
            );
        }
        r
    }

    fn sent(hw: i64) -> Sent {
        Sent {
            high_watermark: hw,
            last_stable: hw,
            log_start: 0,
        }
    }

    fn quiet(hw: i64) -> Answered {
        Answered {
            sent: sent(hw),
            news: false,
            records: false,
        }
    }

    fn names(plan: &Plan) -> Vec<(String, i32, i64)> {
        plan.targets()
            .iter()
            .map(|t| (t.topic.0.to_string(), t.partition, t.fetch_offset))
            .collect()
    }

    /// A full fetch opens a session; incremental fetches add, update and forget partitions,
    /// and their answers carry only what changed.
    #[test]
    fn incremental_fetches_change_the_session_and_answer_only_news() {
        let s = FetchSessions::new(10, 1 << 20);
        let full = s
            .begin(
                &request(0, INITIAL_EPOCH, &[("a", 0, 5), ("a", 1, 7)], &[]),
                0,
            )
            .unwrap();
        assert!(matches!(full, Plan::Open(_)));
        let id = s.open(full.targets(), &[sent(10), sent(10)], 0);
        assert!(id > 0);

        // a-0 moved on (new offset), b-0 joins.
        let plan = s
            .begin(&request(id, 1, &[("a", 0, 10), ("b", 0, 0)], &[]), 1)
            .unwrap();
        assert_eq!(
            names(&plan),
            vec![("a".into(), 0, 10), ("a".into(), 1, 7), ("b".into(), 0, 0)]
        );
        let Plan::Incremental { targets, .. } = &plan else {
            panic!("{plan:?}")
        };
        // a-0 unchanged, a-1's high watermark moved, b-0 is new.
        let carried = s.answer(id, targets, &[quiet(10), quiet(11), quiet(3)]);
        assert_eq!(carried, vec![false, true, true]);
        // Nothing changed since: nothing is carried; records always are.
        let plan = s.begin(&request(id, 2, &[], &[]), 2).unwrap();
        let carried = s.answer(
            id,
            plan.targets(),
            &[
                quiet(10),
                quiet(11),
                Answered {
                    sent: sent(3),
                    news: true,
                    records: true,
                },
            ],
        );
        assert_eq!(carried, vec![false, false, true]);
        // Forgotten: a-1 leaves the session.
        let plan = s.begin(&request(id, 3, &[], &[("a", 1)]), 3).unwrap();
        assert_eq!(names(&plan), vec![("a".into(), 0, 10), ("b".into(), 0, 0)]);
    }

    /// A stale or unknown epoch, an unknown session, and closing a session.
    #[test]
    fn epochs_are_checked_and_sessions_close() {
        let s = FetchSessions::new(10, 1 << 20);
        let full = s
            .begin(&request(0, INITIAL_EPOCH, &[("a", 0, 0)], &[]), 0)
            .unwrap();
        let id = s.open(full.targets(), &[sent(1)], 0);
        s.begin(&request(id, 1, &[], &[]), 0).unwrap();
        // The same epoch again (a retry, or a concurrent fetch).
        assert_eq!(
            s.begin(&request(id, 1, &[], &[]), 0).unwrap_err(),
            ResponseError::InvalidFetchSessionEpoch
        );
        assert_eq!(
            s.begin(&request(id + 1, 1, &[], &[]), 0).unwrap_err(),
            ResponseError::FetchSessionIdNotFound
        );
        assert_eq!(
            s.begin(&request(id, -2, &[], &[]), 0).unwrap_err(),
            ResponseError::InvalidFetchSessionEpoch
        );
        // The final epoch closes it: a sessionless fetch.
        let plan = s
            .begin(&request(id, FINAL_EPOCH, &[("a", 0, 1)], &[]), 0)
            .unwrap();
        assert!(matches!(plan, Plan::Sessionless(_)));
        assert_eq!(s.len(), 0);
        assert_eq!(
            s.begin(&request(id, 2, &[], &[]), 0).unwrap_err(),
            ResponseError::FetchSessionIdNotFound
        );
    }

    /// Slots and bytes bound the sessions: a new one takes an idle one's place, never a busy
    /// one's, and one that does not fit is not opened.
    #[test]
    fn the_cache_keeps_within_its_slots_and_bytes() {
        let s = FetchSessions::new(2, 1 << 20);
        let full = s
            .begin(&request(0, INITIAL_EPOCH, &[("a", 0, 0)], &[]), 0)
            .unwrap();
        let first = s.open(full.targets(), &[sent(1)], 0);
        let second = s.open(full.targets(), &[sent(1)], 1_000);
        assert!(first > 0 && second > 0 && first != second);
        // Both busy: no room.
        assert_eq!(s.open(full.targets(), &[sent(1)], 2_000), 0);
        // The first idle long enough: it makes room.
        let third = s.open(full.targets(), &[sent(1)], EVICTABLE_AFTER_MS + 500);
        assert!(third > 0);
        assert_eq!(s.len(), 2);
        assert_eq!(
            s.begin(&request(first, 1, &[], &[]), 0).unwrap_err(),
            ResponseError::FetchSessionIdNotFound
        );
        // A session larger than the whole budget is never opened.
        let tiny = FetchSessions::new(10, 100);
        assert_eq!(tiny.open(full.targets(), &[sent(1)], 0), 0);
        // No slots: no sessions at all.
        let none = FetchSessions::new(0, 1 << 20);
        let plan = none
            .begin(&request(0, INITIAL_EPOCH, &[("a", 0, 0)], &[]), 0)
            .unwrap();
        assert!(matches!(plan, Plan::Sessionless(_)));
    }

    /// Partitions that returned records go to the end of the session's order.
    #[test]
    fn partitions_with_records_go_last() {
        let s = FetchSessions::new(10, 1 << 20);
        let full = s
            .begin(
                &request(
                    0,
                    INITIAL_EPOCH,
                    &[("a", 0, 0), ("a", 1, 0), ("a", 2, 0)],
                    &[],
                ),
                0,
            )
            .unwrap();
        let id = s.open(full.targets(), &[sent(1), sent(1), sent(1)], 0);
        let plan = s.begin(&request(id, 1, &[], &[]), 0).unwrap();
        let with_records = Answered {
            sent: sent(1),
            news: true,
            records: true,
        };
        s.answer(id, plan.targets(), &[with_records, quiet(1), quiet(1)]);
        let plan = s.begin(&request(id, 2, &[], &[]), 0).unwrap();
        assert_eq!(
            names(&plan),
            vec![("a".into(), 1, 0), ("a".into(), 2, 0), ("a".into(), 0, 0)]
        );
    }
}
