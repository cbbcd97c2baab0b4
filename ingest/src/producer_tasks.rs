//! The node's background work on idempotent producers' state, over every partition: saving
//! snapshots (`producer_image`) and keeping the state within its memory budget. Apart from
//! `producers` (one partition's state) because it walks the topics.

use std::sync::Arc;

use crate::producers::STATE_BYTES;
use crate::topics::Partition;
use crate::Broker;

/// Keeps the node's idempotent-producer state within `inlet.producer.state.max.bytes`. When
/// all partitions together remember more producers than the budget pays for
/// ([`STATE_BYTES`] each), the ones that sent nothing for longest (ties: the lower producer
/// id, the older one) are forgotten, from the live state and the snapshot image, until nine
/// tenths of the budget is used. A forgotten producer is treated as an expired one: its next
/// batch is accepted at any sequence. A producer with a batch still being appended is kept.
///
/// Runs with the snapshot task, so the state can pass the budget by what arrives between two
/// passes. Returns (producers remembered, producers forgotten).
pub(crate) async fn enforce_budget(broker: &Broker) -> (u64, u64) {
    let partitions: Vec<Arc<Partition>> = broker
        .topics
        .list()
        .iter()
        .flat_map(|t| t.partitions.iter().cloned())
        .collect();
    let mut held = 0u64;
    for p in &partitions {
        held += p.producers.lock().await.len() as u64;
    }
    let allowed = broker.config().producer_state_max_bytes / STATE_BYTES;
    if held <= allowed {
        return (held, 0);
    }
    // (last seen, producer id, partition): the smallest sort first.
    let mut seen: Vec<(u64, i64, usize)> = Vec::new();
    for (i, p) in partitions.iter().enumerate() {
        let live = p.producers.lock().await;
        seen.extend(live.last_seen().map(|(id, ms)| (ms, id, i)));
    }
    let excess = seen.len().saturating_sub((allowed * 9 / 10) as usize);
    if excess == 0 {
        return (seen.len() as u64, 0);
    }
    held = seen.len() as u64;
    seen.select_nth_unstable(excess - 1);
    seen.truncate(excess);
    seen.sort_unstable_by_key(|&(_, _, i)| i);
    let mut forgotten = 0u64;
    for victims in seen.chunk_by(|a, b| a.2 == b.2) {
        let partition = &partitions[victims[0].2];
        let gone: Vec<i64> = {
            let mut live = partition.producers.lock().await;
            victims
                .iter()
                .filter(|&&(ms, id, _)| live.forget_idle(id, ms))
                .map(|&(_, id, _)| id)
                .collect()
        };
        if let Some((_, image)) = partition.image.lock().await.as_mut() {
            for id in &gone {
                image.producers.remove(id);
            }
        }
        forgotten += gone.len() as u64;
    }
    (held - forgotten, forgotten)
}

/// Saves the producers' snapshots every `every` until `stop` (`producer_image`), and keeps
/// their state within `inlet.producer.state.max.bytes` ([`enforce_budget`]).
pub async fn run_snapshots(
    broker: Arc<Broker>,
    every: std::time::Duration,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut rounds: u64 = 0;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        if let Err(e) = crate::producer_image::save_images(&broker, |_| true).await {
            tracing::warn!(error = %e, "could not save producer snapshots; trying again");
        }
        let (held, forgotten) = enforce_budget(&broker).await;
        let metrics = broker.metrics();
        metrics
            .producer_states
            .store(held, std::sync::atomic::Ordering::Relaxed);
        if forgotten > 0 {
            metrics
                .producer_states_forgotten
                .fetch_add(forgotten, std::sync::atomic::Ordering::Relaxed);
            tracing::info!(
                forgotten,
                held,
                "forgot the longest idle producers' state to stay within inlet.producer.state.max.bytes"
            );
        }
        rounds += 1;
        if rounds.is_multiple_of(crate::producer_image::SWEEP_ROUNDS) {
            if let Err(e) = broker.snapshots.sweep().await {
                tracing::debug!(error = %e, "could not drop deleted streams' producer snapshots");
            }
        }
    }
}
