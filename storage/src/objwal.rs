//! The object-store WAL (`wal = "object"`): an append is acknowledged once it is in an object
//! in the object store *and* that object's ranges are committed in the metadata store. A node
//! can then be lost whole (disk included) without losing anything it acknowledged, and the
//! next owner of a stream finds all of it through the metadata store, never by LIST.
//!
//! One task gathers *groups* from the append queue and cuts each one when it is full
//! (`wal_max_group_bytes`) or due: its first append has waited `object_wal_linger_ms` and the
//! last group was cut `object_wal_min_interval_ms` ago. So a lone append after a quiet spell
//! waits only the linger, while under a steady load groups are cut at most once per interval
//! and grow with the load: a node's PUTs (S3 bills each) and metadata commits are bounded by
//! the interval at any load below a full group per interval. At a cut the task assigns the
//! group's offsets in queue order and starts its object: an id prepared in the metadata
//! store, then the PUT. Up to `object_wal_in_flight` groups are in flight at once; their metadata commits land strictly in
//! the order the groups were cut, so a stream's ranges are committed in offset order.
//!
//! Invariants:
//! - An append is answered `Ok` only after the commit that indexes it returned: what is
//!   acknowledged is in the metadata store, and what the metadata store has is durable in the
//!   object store (the PUT returned first).
//! - Every commit is fenced by the epochs the group's streams were owned under: a node that
//!   lost a stream (its lease ended and another node took it, raising the epoch) cannot commit,
//!   so it cannot acknowledge, one more record of it.
//! - When a group fails (PUT, commit or fence), every group cut after it fails too, without
//!   committing: their offsets follow the failed ones. Once nothing is in flight, each stream's
//!   next offset is rewound to its durable end, so offsets stay dense, and cutting resumes.
//! - A commit whose reply was lost is resolved by reading the object's state back, asked until
//!   the metadata store answers (nothing is acknowledged or failed meanwhile): committed means
//!   the group is durable, anything else means it is not (and its object is collected).
//! - Entries land in the log cache already clean (evictable): there is nothing to upload later.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use futures::stream::{FuturesOrdered, StreamExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::cache::CleanUnit;
use crate::error::{Error, Result};
use crate::inner::{AppendRequest, Inner};
use crate::meta::{NewObject, ObjectKind, ObjectState};
use crate::objects::format::{BuiltObject, ObjectBuilder, ObjectEntry};
use crate::stream::{CachedEntry, RangeRef};

/// One append placed in a group: its offsets are fixed, its entry is what the object holds.
struct Placed {
    request: AppendRequest,
    entry: ObjectEntry,
}

/// Appends that share one WAL object and one metadata commit.
struct Group {
    placed: Vec<Placed>,
    /// The epoch each stream of the group is owned under; the commit is fenced by them.
    epochs: BTreeMap<u64, u64>,
    cut_at: Instant,
}

impl Group {
    /// Fails every append of the group with `error` (their reservations are given back): a
    /// lost stream as such (the client goes to the new owner), anything else as a failed WAL
    /// object (nothing of it was stored).
    fn fail(self, error: &Error) {
        // First the streams' generations and latches, then the answers: an append submitted
        // after a writer hears of this failure is checked against them.
        for p in &self.placed {
            note_failure(&p.request);
        }
        for p in self.placed {
            let e = match error {
                Error::Fenced { stream, epoch, now } => Error::Fenced {
                    stream: *stream,
                    epoch: *epoch,
                    now: *now,
                },
                Error::NotOwner(stream) => Error::NotOwner(*stream),
                Error::Shutdown => Error::Shutdown,
                e => Error::ObjectWal(e.to_string()),
            };
            let _ = p.request.reply.send(Err(e));
        }
    }
}

/// A group with its object written (id and layout), or the error that stopped it.
type Staged = (Group, Result<(u64, BuiltObject)>);

/// Appends taken from the queue for the next group, not yet placed (no offsets yet).
struct Gathering {
    requests: Vec<AppendRequest>,
    bytes: usize,
    /// When the group is cut even if it is not full.
    due: tokio::time::Instant,
}

/// The object-store WAL's task: gathers groups, cuts them, keeps their objects in flight,
/// commits them in order, and answers the appends. Gathering goes on while commits run, so a
/// group that waits for its cut delays no other group's acknowledgement.
pub(crate) async fn run(
    inner: Arc<Inner>,
    mut queue: mpsc::Receiver<AppendRequest>,
    cancel: CancellationToken,
) {
    let limit = inner.config.object_wal_in_flight;
    let max_bytes = inner.config.wal_max_group_bytes as usize;
    let linger = Duration::from_millis(inner.config.object_wal_linger_ms);
    let interval = Duration::from_millis(inner.config.object_wal_min_interval_ms);
    let mut in_flight = FuturesOrdered::new();
    let mut gathering: Option<Gathering> = None;
    // When the last group was cut: a group that is not full is cut `interval` after it at
    // the earliest.
    let mut last_cut: Option<tokio::time::Instant> = None;
    // A group failed: the ones after it fail too, and nothing new is cut until none is left.
    let mut failing = false;
    loop {
        let full = gathering.as_ref().is_some_and(|g| g.bytes >= max_bytes);
        let room = !failing && in_flight.len() < limit;
        let due = gathering.as_ref().map(|g| g.due);
        tokio::select! {
            biased;
            _ = cancel.cancelled() => break,
            Some(done) = in_flight.next(), if !in_flight.is_empty() => {
                match done {
                    // The task panicked and took its group with it (its appends see the store
                    // as shut down); the groups behind it fail as after any failure.
                    Err(e) => {
                        tracing::error!(error = %e, "a WAL object's task panicked");
                        failing = true;
                    }
                    Ok((group, staged)) if failing => discard(&inner, group, staged).await,
                    Ok((group, staged)) => {
                        if let Err(e) = commit(&inner, group, staged, &cancel).await {
                            tracing::error!(error = %e, "a WAL object failed; the appends in flight behind it fail too");
                            failing = true;
                        }
                    }
                }
            }
            _ = tokio::time::sleep_until(due.unwrap_or_else(tokio::time::Instant::now)),
                if room && due.is_some() && !full => {
                cut_next(&inner, &mut gathering, &mut queue, &mut last_cut, &mut in_flight);
            }
            next = queue.recv(), if !full => {
                let Some(next) = next else { break };
                let now = tokio::time::Instant::now();
                let g = gathering.get_or_insert_with(|| Gathering {
                    requests: Vec::new(),
                    bytes: 0,
                    // A lone append after a quiet spell waits only `linger`; under a steady
                    // load, groups are cut `interval` apart and grow with the load.
                    due: (now + linger).max(last_cut.map_or(now, |at| at + interval)),
                });
                g.bytes += next.payload.len();
                g.requests.push(next);
            }
        }
        if failing && in_flight.is_empty() {
            // Nothing is in flight: every offset handed out above a durable end is void.
            for stream in inner.live_streams() {
                let mut state = stream.state.lock();
                state.next_offset = state.durable_end;
            }
            failing = false;
        }
        let full = gathering.as_ref().is_some_and(|g| g.bytes >= max_bytes);
        if full && !failing && in_flight.len() < limit {
            cut_next(
                &inner,
                &mut gathering,
                &mut queue,
                &mut last_cut,
                &mut in_flight,
            );
        }
    }
    // Shutting down: what is gathered or in flight is not acknowledged (its callers see the
    // failure and Kafka clients retry on another owner); prepared objects are collected as
    // orphans.
    for request in gathering.into_iter().flat_map(|g| g.requests) {
        let _ = request.reply.send(Err(Error::Shutdown));
    }
    while let Some(done) = in_flight.next().await {
        if let Ok((group, _)) = done {
            group.fail(&Error::Shutdown);
        }
    }
}

/// Cuts the gathered group, with whatever else is already queued up to a full group, and
/// starts its object.
fn cut_next(
    inner: &Arc<Inner>,
    gathering: &mut Option<Gathering>,
    queue: &mut mpsc::Receiver<AppendRequest>,
    last_cut: &mut Option<tokio::time::Instant>,
    in_flight: &mut FuturesOrdered<tokio::task::JoinHandle<Staged>>,
) {
    let Some(mut g) = gathering.take() else {
        return;
    };
    while g.bytes < inner.config.wal_max_group_bytes as usize {
        let Ok(next) = queue.try_recv() else { break };
        g.bytes += next.payload.len();
        g.requests.push(next);
    }
    *last_cut = Some(tokio::time::Instant::now());
    if let Some(group) = place(g.requests) {
        // A task of its own: a group's prepare and PUT (and the metadata-store connection
        // they hold) must progress while the loop awaits a commit, or the commit could wait
        // for a connection an unpolled group holds.
        in_flight.push_back(tokio::spawn(stage(inner.clone(), group)));
    }
}

/// Records on its stream that `request` fails: appends queued before now fail too (a new
/// generation), and a latching append holds the stream's latch until its writer clears it.
fn note_failure(request: &AppendRequest) {
    let mut state = request.stream.state.lock();
    state.generation += 1;
    if request.failure_latch {
        state.failed += 1;
    }
}

/// Places each append of a group being cut: its offsets, the epoch of its stream, its stored
/// bytes. Appends that can no longer be placed (their stream was deleted, lost, or failed
/// since they were queued) are answered with the error here.
fn place(requests: Vec<AppendRequest>) -> Option<Group> {
    let mut group = Group {
        placed: Vec::with_capacity(requests.len()),
        epochs: BTreeMap::new(),
        #[allow(clippy::disallowed_methods)] // only the elapsed time is measured (a metric)
        cut_at: Instant::now(),
    };
    for request in requests {
        let stream_id = request.stream.id;
        let placed = {
            let mut state = request.stream.state.lock();
            if state.deleted {
                Err(Error::UnknownStream(stream_id.to_string()))
            } else if !state.owned {
                Err(Error::NotOwner(stream_id))
            } else if request.generation != state.generation {
                Err(Error::ObjectWal(
                    "an append to this stream queued before it failed".into(),
                ))
            } else {
                let base = state.next_offset;
                state.next_offset += request.record_count as u64;
                Ok((base, state.epoch))
            }
        };
        let (base, epoch) = match placed {
            Ok(p) => p,
            Err(e) => {
                note_failure(&request);
                let _ = request.reply.send(Err(e));
                continue;
            }
        };
        group.epochs.entry(stream_id).or_insert(epoch);
        let payload = if request.write_base_offset {
            let mut copy = BytesMut::from(&request.payload[..]);
            crate::inner::stamp(&mut copy, base, request.write_epoch.then_some(epoch));
            copy.freeze()
        } else {
            request.payload.clone()
        };
        group.placed.push(Placed {
            entry: ObjectEntry {
                base_offset: base,
                record_count: request.record_count,
                timestamp_ms: request.timestamp_ms,
                payload,
            },
            request,
        });
    }
    (!group.placed.is_empty()).then_some(group)
}

/// Writes the group's object: prepares its id, builds it (each stream's entries together, in
/// offset order) and PUTs it.
async fn stage(inner: Arc<Inner>, group: Group) -> Staged {
    let result = async {
        let id = crate::meta::bounded(inner.meta.prepare_object(
            ObjectKind::StreamSet,
            inner.config.node_id,
            inner.now_ms(),
        ))
        .await?;
        let mut order: Vec<&Placed> = group.placed.iter().collect();
        order.sort_by_key(|p| (p.request.stream.id, p.entry.base_offset));
        let mut builder = ObjectBuilder::new(inner.config.object_block_bytes);
        for p in order {
            builder.add(p.request.stream.id, &p.entry);
        }
        let built = builder.finish();
        inner
            .objects
            .put_chunks(&inner.object_path(id), &built.chunks)
            .await?;
        Ok((id, built))
    }
    .await;
    (group, result)
}

/// Commits a written group, fenced by its epochs, and answers its appends; on failure fails
/// them and returns the error.
async fn commit(
    inner: &Inner,
    group: Group,
    staged: Result<(u64, BuiltObject)>,
    cancel: &CancellationToken,
) -> Result<()> {
    let (id, built) = match staged {
        Ok(written) => written,
        Err(e) => {
            group.fail(&e);
            return Err(e);
        }
    };
    let object = NewObject::new(id, &built);
    let committed =
        match crate::meta::bounded(inner.meta.commit_upload(&object, &group.epochs)).await {
            Ok(_) => true,
            // The reply may be lost while the commit landed: the object's state says which.
            Err(e) if e.is_retryable() => match resolve(inner, id, cancel).await {
                Some(landed) => landed,
                None => {
                    group.fail(&Error::Shutdown);
                    return Err(e);
                }
            },
            Err(e) => {
                if let Error::Fenced { stream, .. } = &e {
                    // Another node owns it now: refuse its appends here from now on.
                    if let Some(s) = inner.streams.read().get(stream) {
                        s.state.lock().owned = false;
                    }
                }
                collect(inner, id).await;
                group.fail(&e);
                return Err(e);
            }
        };
    if !committed {
        let e = Error::ObjectWal(format!("the commit of WAL object {id} did not land"));
        collect(inner, id).await;
        group.fail(&e);
        return Err(e);
    }
    publish(inner, group, &object);
    Ok(())
}

/// Whether WAL object `id`'s commit landed, asked of the metadata store until it answers (no
/// group is acknowledged or failed meanwhile: guessing wrong would either lose an
/// acknowledged append or reuse offsets that are committed). `None` if the store shuts down
/// first.
///
/// Reading the state is not enough: the transaction whose reply was lost may still be running
/// on the server (its client connection is gone, the server has not noticed yet) and commit
/// after the read. So the object is *claimed* (`PREPARED` → `DELETING`): that update waits for
/// the row lock the commit holds, and then either finds the object committed (the commit
/// landed) or makes sure it never will (a later commit of it finds it no longer prepared).
async fn resolve(inner: &Inner, id: u64, cancel: &CancellationToken) -> Option<bool> {
    let policy = inner.config.retry.policy();
    let mut failures = 0u32;
    loop {
        let answer = async {
            if inner.meta.claim_orphan(id, inner.now_ms()).await? {
                return Ok(false);
            }
            Ok::<_, Error>(inner.meta.object_state(id).await? == Some(ObjectState::Committed))
        };
        match crate::meta::bounded(answer).await {
            Ok(landed) => return Some(landed),
            Err(e) => {
                failures += 1;
                let backoff = policy.backoff(failures);
                tracing::warn!(object = id, error = %e, ?backoff, "cannot tell whether a WAL object's commit landed; asking again");
                tokio::select! {
                    _ = cancel.cancelled() => return None,
                    _ = tokio::time::sleep(backoff) => {}
                }
            }
        }
    }
}

/// Makes a committed group readable and answers its appends.
fn publish(inner: &Inner, group: Group, object: &NewObject) {
    let elapsed = group.cut_at.elapsed().as_micros() as u64;
    let mut unit = CleanUnit {
        bytes: 0,
        streams: Vec::new(),
    };
    let streams: HashMap<u64, &Arc<crate::stream::StreamShared>> = group
        .placed
        .iter()
        .map(|p| (p.request.stream.id, &p.request.stream))
        .collect();
    for row in &object.ranges {
        let Some(stream) = streams.get(&row.stream_id) else {
            continue;
        };
        let mut state = stream.state.lock();
        if !state.deleted {
            state.ranges.insert(
                row.start_offset,
                RangeRef {
                    row: *row,
                    kind: ObjectKind::StreamSet,
                    index_position: object.index_position,
                    index_len: object.index_len,
                },
            );
        }
    }
    drop(streams);
    let (mut appends, mut bytes) = (0u64, 0u64);
    // Answered once the counters have taken the group in: a caller that reads the stats after
    // its acknowledgement sees its append counted.
    let mut answers = Vec::with_capacity(group.placed.len());
    for p in group.placed {
        let stream = p.request.stream.clone();
        let end = p.entry.end_offset();
        let size = p.entry.payload.len() as u64;
        let mut state = stream.state.lock();
        if state.deleted {
            drop(state);
            let _ = p
                .request
                .reply
                .send(Err(Error::UnknownStream(stream.id.to_string())));
            continue;
        }
        state.cache.push_back(CachedEntry {
            base_offset: p.entry.base_offset,
            record_count: p.entry.record_count,
            timestamp_ms: p.entry.timestamp_ms,
            payload: p.entry.payload,
            wal_end: 0,
        });
        state.durable_end = end;
        state.committed_end = end;
        state.appended_bytes += size;
        drop(state);
        p.request.reservation.into_cache();
        unit.bytes += size;
        match unit.streams.last_mut() {
            Some((s, e)) if Arc::ptr_eq(s, &stream) => *e = end,
            _ => unit.streams.push((stream.clone(), end)),
        }
        stream.end.send_replace(end);
        appends += 1;
        bytes += size;
        answers.push((p.request.reply, p.entry.base_offset));
    }
    let c = &inner.counters;
    c.appends.fetch_add(appends, Ordering::Relaxed);
    c.appended_bytes.fetch_add(bytes, Ordering::Relaxed);
    c.uploads.fetch_add(1, Ordering::Relaxed);
    c.uploaded_bytes.fetch_add(bytes, Ordering::Relaxed);
    c.object_wal_groups.fetch_add(1, Ordering::Relaxed);
    c.object_wal_micros.fetch_add(elapsed, Ordering::Relaxed);
    c.object_wal_max_micros
        .fetch_max(elapsed, Ordering::Relaxed);
    inner.log_budget.uploaded(unit);
    for (reply, base_offset) in answers {
        let _ = reply.send(Ok(base_offset));
    }
}

/// Fails a group cut after a failed one, and collects its object if it was written.
async fn discard(inner: &Inner, group: Group, staged: Result<(u64, BuiltObject)>) {
    if let Ok((id, _)) = staged {
        collect(inner, id).await;
    }
    group.fail(&Error::ObjectWal(
        "a WAL object before this one failed".into(),
    ));
}

/// Deletes a WAL object that will not be committed, if it can still be claimed; otherwise
/// orphan collection gets it later.
async fn collect(inner: &Inner, id: u64) {
    let result = async {
        if inner.meta.claim_orphan(id, inner.now_ms()).await? {
            inner.objects.delete(&inner.object_path(id)).await?;
            inner.meta.forget_object(id).await?;
        }
        Ok::<_, Error>(())
    }
    .await;
    if let Err(e) = result {
        tracing::warn!(object = id, error = %e, "an uncommitted WAL object is left to orphan collection");
    }
}
