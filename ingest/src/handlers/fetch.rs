//! Fetch, ListOffsets, OffsetForLeaderEpoch and DeleteRecords: reading a partition's stream.
//! Each checks the request's `current_leader_epoch` against the epoch this node leads the
//! partition under (`Broker::check_leader_epoch`). Fetch returns stored batches byte for byte
//! (as appended: base offset and partition leader epoch stamped by the store); a fetch that finds less than `min_bytes` waits on the partitions'
//! end offsets (long polling) until data arrives, `max_wait_ms` passes or the node stops.

use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::future::{select_all, FutureExt};
use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, PartitionData,
};
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

use crate::batch;
use crate::broker::Broker;
use crate::error::{KafkaError, Result};
use crate::fetch_sessions::Plan;
use crate::records;

/// One partition's share of a fetch.
/// What ListOffsets' MAX_TIMESTAMP scan of a stream found: the batches from `from` to `to`
/// were read, and the first with the largest max timestamp (`max`) starts at `batch_start`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MaxSeen {
    from: u64,
    to: u64,
    max: i64,
    batch_start: Option<u64>,
}

/// Bytes a MAX_TIMESTAMP scan reads at a time.
const SCAN_BYTES: usize = 1 << 20;

struct PartitionRead {
    error: Option<KafkaError>,
    high_watermark: i64,
    /// The last stable offset: the high watermark, unless a transaction is open.
    last_stable: i64,
    /// For `read_committed`: the aborted transactions overlapping what was read.
    aborted: Vec<crate::txn::Aborted>,
    log_start: i64,
    records: Bytes,
    stream: Option<u64>,
}

impl Broker {
    pub(crate) async fn fetch(&self, r: FetchRequest, version: i16) -> FetchResponse {
        // The partitions to read: those asked for, or a session's (`crate::fetch_sessions`).
        let plan = match self.fetch_sessions.begin(&r, self.clock.now_ms()) {
            Ok(plan) => plan,
            Err(e) => return FetchResponse::default().with_error_code(e.code()),
        };
        let max_wait = Duration::from_millis(r.max_wait_ms.max(0) as u64);
        let deadline = tokio::time::Instant::now() + max_wait;
        let min_bytes = r.min_bytes.max(0) as usize;
        // The broker's fetch.max.bytes caps what any request may ask for.
        let cap = self.config().fetch_max_bytes as usize;
        let max_bytes = if r.max_bytes > 0 {
            (r.max_bytes as usize).min(cap)
        } else {
            cap
        };
        loop {
            let mut reads = Vec::new();
            let mut total = 0usize;
            let mut topic: Option<(&TopicName, Option<_>)> = None;
            for t in plan.targets() {
                if topic.as_ref().is_none_or(|(name, _)| *name != &t.topic) {
                    topic = Some((&t.topic, self.topics.get(t.topic.0.as_str())));
                }
                let found = topic.as_ref().and_then(|(_, found)| found.as_deref());
                let budget = (t.max_bytes.max(0) as usize).min(max_bytes.saturating_sub(total));
                let read = self
                    .read_partition(
                        found,
                        t.topic.0.as_str(),
                        (t.partition, t.leader_epoch),
                        t.fetch_offset,
                        budget,
                        (total == 0, r.isolation_level == 1),
                    )
                    .await;
                total += read.records.len();
                reads.push(read);
            }
            let failed = reads.iter().any(|r| r.error.is_some());
            let now = tokio::time::Instant::now();
            if total >= min_bytes || failed || now >= deadline || self.shutdown.is_cancelled() {
                self.metrics
                    .fetched_bytes
                    .fetch_add(total as u64, Ordering::Relaxed);
                return self.fetch_response(&r, &plan, reads, version);
            }
            // Wait for any partition's end to move.
            let mut watches = Vec::new();
            for read in &reads {
                if let Some(stream) = read.stream {
                    if let Ok(mut rx) = self.store.watch_end(stream) {
                        let seen = read.high_watermark as u64;
                        watches.push(
                            async move {
                                let _ = rx.wait_for(|end| *end > seen).await;
                            }
                            .boxed(),
                        );
                    }
                }
            }
            if watches.is_empty() {
                tokio::select! {
                    _ = tokio::time::sleep_until(deadline) => {}
                    _ = self.shutdown.cancelled() => {}
                }
            } else {
                tokio::select! {
                    _ = select_all(watches) => {}
                    _ = tokio::time::sleep_until(deadline) => {}
                    _ = self.shutdown.cancelled() => {}
                }
            }
        }
    }

    async fn read_partition(
        &self,
        topic: Option<&crate::topics::Topic>,
        name: &str,
        (index, current_leader_epoch): (i32, i32),
        offset: i64,
        budget: usize,
        (first, read_committed): (bool, bool),
    ) -> PartitionRead {
        let fail = |error: KafkaError| PartitionRead {
            error: Some(error),
            high_watermark: -1,
            last_stable: -1,
            aborted: Vec::new(),
            log_start: -1,
            records: Bytes::new(),
            stream: None,
        };
        let Some(partition) = topic.and_then(|t| t.partition(index)) else {
            return fail(KafkaError::new(
                ResponseError::UnknownTopicOrPartition,
                format!("unknown partition {name}-{index}"),
            ));
        };
        if let Err(e) = self.check_leader_epoch(partition.stream, current_leader_epoch) {
            return fail(e);
        }
        let info = match self.led_stream(partition.stream) {
            Ok(info) => info,
            Err(e) if e.code == ResponseError::NotLeaderOrFollower => return fail(e),
            Err(_) => return fail(KafkaError::unknown_topic(name)),
        };
        let (start, end) = (info.start_offset as i64, info.end_offset as i64);
        let last_stable = match self
            .stable_end(partition, info.end_offset, read_committed)
            .await
        {
            Ok(lso) => lso as i64,
            Err(e) => return fail(e),
        };
        // A read_committed reader reads to the last stable offset only.
        let until = if read_committed { last_stable } else { end };
        let mut read = PartitionRead {
            error: None,
            high_watermark: end,
            last_stable,
            aborted: Vec::new(),
            log_start: start,
            records: Bytes::new(),
            stream: Some(partition.stream),
        };
        if offset < start || offset > end {
            read.error = Some(KafkaError::new(
                ResponseError::OffsetOutOfRange,
                format!("offset {offset} is outside {start}..={end} of {name}-{index}"),
            ));
            return read;
        }
        if offset >= until || budget == 0 {
            return read;
        }
        match self
            .store
            .read(partition.stream, offset as u64, budget)
            .await
        {
            Ok(batches) => {
                // The first batch of the response goes out whatever its size (KIP-74); later
                // ones only within the budget.
                let mut taken = 0usize;
                let mut size = 0usize;
                for b in &batches {
                    if b.base_offset as i64 >= until {
                        break;
                    }
                    if size + b.payload.len() > budget && !(first && taken == 0) {
                        break;
                    }
                    size += b.payload.len();
                    taken += 1;
                }
                if read_committed && taken > 0 {
                    let to = batches[taken - 1].end_offset();
                    read.aborted = partition.txns.lock().aborted_in(offset as u64, to);
                }
                // One batch is handed on as it is (no copy); several are joined once.
                read.records = match taken {
                    0 => Bytes::new(),
                    1 => batches[0].payload.clone(),
                    _ => {
                        let mut out = BytesMut::with_capacity(size);
                        for b in &batches[..taken] {
                            out.extend_from_slice(&b.payload);
                        }
                        out.freeze()
                    }
                };
            }
            Err(inlet_storage::Error::OffsetOutOfRange { start, end, .. }) => {
                read.error = Some(KafkaError::new(
                    ResponseError::OffsetOutOfRange,
                    format!("offset {offset} is outside {start}..={end} of {name}-{index}"),
                ));
            }
            Err(e) => read.error = Some(e.into()),
        }
        read
    }

    /// The partition's last stable offset given its high watermark `end`. A partition whose
    /// transactions this node has not loaded yet reports `end` unless `load` asks for them
    /// (a `read_committed` reader must not read past an open transaction).
    pub(crate) async fn stable_end(
        &self,
        partition: &crate::topics::Partition,
        end: u64,
        load: bool,
    ) -> Result<u64> {
        let owned = self.store.owned_epoch(partition.stream);
        {
            let txns = partition.txns.lock();
            if txns.epoch.is_some() && txns.epoch == owned {
                return Ok(txns.stable_end(end));
            }
        }
        if !load {
            return Ok(end);
        }
        let mut producers = partition.producers.lock().await;
        self.load_producers(partition, &mut producers).await?;
        drop(producers);
        Ok(partition.txns.lock().stable_end(end))
    }

    /// The answer to fetch `r` whose `plan` read `reads` (one per target, in order): every
    /// partition read, or for an incremental fetch those with news (`crate::fetch_sessions`),
    /// grouped by topic in the order read; a full fetch that may open a session opens it.
    fn fetch_response(
        &self,
        r: &FetchRequest,
        plan: &Plan,
        reads: Vec<PartitionRead>,
        version: i16,
    ) -> FetchResponse {
        use crate::fetch_sessions::{Answered, Sent};
        let sent = |read: &PartitionRead| Sent {
            high_watermark: read.high_watermark,
            last_stable: read.last_stable,
            log_start: read.log_start,
        };
        let (session_id, carried) = match plan {
            Plan::Sessionless(_) => (0, vec![true; reads.len()]),
            Plan::Open(targets) => {
                let sent: Vec<Sent> = reads.iter().map(sent).collect();
                let id = self
                    .fetch_sessions
                    .open(targets, &sent, self.clock.now_ms());
                if id != 0 {
                    self.metrics
                        .fetch_sessions_opened
                        .fetch_add(1, Ordering::Relaxed);
                }
                (id, vec![true; reads.len()])
            }
            Plan::Incremental { id, targets } => {
                let answered: Vec<Answered> = reads
                    .iter()
                    .map(|read| Answered {
                        sent: sent(read),
                        news: read.error.is_some() || !read.records.is_empty(),
                        records: !read.records.is_empty(),
                    })
                    .collect();
                self.metrics
                    .fetch_sessions_incremental
                    .fetch_add(1, Ordering::Relaxed);
                (*id, self.fetch_sessions.answer(*id, targets, &answered))
            }
        };
        let read_committed = r.isolation_level == 1;
        let mut responses: Vec<FetchableTopicResponse> = Vec::new();
        for ((t, read), carry) in plan.targets().iter().zip(reads).zip(carried) {
            if !carry {
                continue;
            }
            let mut data = PartitionData::default()
                .with_partition_index(t.partition)
                .with_error_code(read.error.as_ref().map_or(0, KafkaError::code))
                .with_high_watermark(read.high_watermark)
                .with_last_stable_offset(read.last_stable)
                .with_log_start_offset(read.log_start)
                .with_records(Some(read.records));
            if read_committed {
                data.aborted_transactions = Some(
                    read.aborted
                        .iter()
                        .map(|a| {
                            AbortedTransaction::default()
                                .with_producer_id(ProducerId(a.producer_id))
                                .with_first_offset(a.first as i64)
                        })
                        .collect(),
                );
            }
            if version >= 11 {
                data.preferred_read_replica = BrokerId(-1);
            }
            match responses.last_mut() {
                Some(last) if last.topic == t.topic => last.partitions.push(data),
                _ => responses.push(
                    FetchableTopicResponse::default()
                        .with_topic(t.topic.clone())
                        .with_partitions(vec![data]),
                ),
            }
        }
        FetchResponse::default()
            .with_session_id(session_id)
            .with_responses(responses)
    }

    pub(crate) async fn list_offsets(
        &self,
        r: ListOffsetsRequest,
        version: i16,
    ) -> ListOffsetsResponse {
        let mut topics = Vec::new();
        for t in r.topics {
            let topic = self.topics.get(t.name.0.as_str());
            let mut partitions = Vec::new();
            for p in t.partitions {
                let found = match topic.as_ref().and_then(|t| t.partition(p.partition_index)) {
                    None => Err(KafkaError::unknown_topic(t.name.0.as_str())),
                    Some(partition) => {
                        match self.check_leader_epoch(partition.stream, p.current_leader_epoch) {
                            Ok(epoch) => match self.offset_for(partition.stream, p.timestamp).await
                            {
                                // read_committed's latest offset is the last stable one.
                                Ok((offset, timestamp))
                                    if r.isolation_level == 1 && p.timestamp == -1 =>
                                {
                                    self.stable_end(partition, offset.max(0) as u64, true)
                                        .await
                                        .map(|lso| (lso as i64, timestamp, epoch))
                                }
                                found => {
                                    found.map(|(offset, timestamp)| (offset, timestamp, epoch))
                                }
                            },
                            Err(e) => Err(e),
                        }
                    }
                };
                let mut resp =
                    ListOffsetsPartitionResponse::default().with_partition_index(p.partition_index);
                match found {
                    Ok((offset, timestamp, epoch)) => {
                        resp.offset = offset;
                        resp.timestamp = timestamp;
                        if version >= 4 {
                            resp.leader_epoch = if offset >= 0 { epoch } else { -1 };
                        }
                    }
                    Err(e) => {
                        resp.error_code = e.code();
                        resp.offset = -1;
                        resp.timestamp = -1;
                    }
                }
                partitions.push(resp);
            }
            topics.push(
                ListOffsetsTopicResponse::default()
                    .with_name(t.name)
                    .with_partitions(partitions),
            );
        }
        ListOffsetsResponse::default().with_topics(topics)
    }

    /// OffsetForLeaderEpoch v0–4: where each requested leader epoch of a partition ends, for a
    /// consumer that validates its position after a leader change (KIP-320). An Inlet log
    /// never diverges: every acknowledged batch is in the metadata store before the answer,
    /// and a new owner continues from exactly the committed end, so no record of an epoch is
    /// ever replaced. Every epoch up to the current one therefore ends, for truncation
    /// purposes, at the log's end: that is the answer (with the requested epoch), and a
    /// consumer's position is never found truncated. An epoch newer than the leader's is
    /// unknown here (`-1`, `-1`, as Kafka answers), and `current_leader_epoch` is checked as in
    /// Fetch.
    pub(crate) fn offset_for_leader_epoch(
        &self,
        r: OffsetForLeaderEpochRequest,
        version: i16,
    ) -> OffsetForLeaderEpochResponse {
        let topics = r
            .topics
            .into_iter()
            .map(|t| {
                let topic = self.topics.get(t.topic.0.as_str());
                let partitions = t
                    .partitions
                    .into_iter()
                    .map(|p| {
                        let answer = EpochEndOffset::default()
                            .with_partition(p.partition)
                            .with_leader_epoch(-1)
                            .with_end_offset(-1);
                        let Some(partition) = topic.as_ref().and_then(|t| t.partition(p.partition))
                        else {
                            return answer
                                .with_error_code(ResponseError::UnknownTopicOrPartition.code());
                        };
                        let current = if version >= 2 {
                            p.current_leader_epoch
                        } else {
                            -1
                        };
                        let ours = match self.check_leader_epoch(partition.stream, current) {
                            Ok(ours) => ours,
                            Err(e) => return answer.with_error_code(e.code()),
                        };
                        if p.leader_epoch > ours {
                            return answer;
                        }
                        match self.led_stream(partition.stream) {
                            Ok(info) => answer
                                .with_leader_epoch(if version >= 1 { p.leader_epoch } else { -1 })
                                .with_end_offset(info.end_offset as i64),
                            Err(e) => answer.with_error_code(e.code()),
                        }
                    })
                    .collect();
                OffsetForLeaderTopicResult::default()
                    .with_topic(t.topic)
                    .with_partitions(partitions)
            })
            .collect();
        OffsetForLeaderEpochResponse::default().with_topics(topics)
    }

    /// Answers `(offset, timestamp)` for a ListOffsets timestamp: -1 latest, -2 earliest,
    /// otherwise the first record whose timestamp is at least the given one (`(-1, -1)` if
    /// none is).
    async fn offset_for(&self, stream: u64, timestamp: i64) -> Result<(i64, i64)> {
        let info = self.led_stream(stream)?;
        match timestamp {
            -1 => return Ok((info.end_offset as i64, -1)),
            // EARLIEST and EARLIEST_LOCAL (v8+, KIP-405): no tier below object storage, so the
            // local log starts where the log does.
            -2 | -4 => return Ok((info.start_offset as i64, -1)),
            -3 => return self.max_timestamp(stream, &info).await,
            // LATEST_TIERED (v9+, KIP-1005): nothing is tiered, as Kafka answers without
            // remote storage.
            -5 => return Ok((-1, -1)),
            t if t < 0 => {
                return Err(KafkaError::new(
                    ResponseError::UnsupportedVersion,
                    format!("ListOffsets timestamp {t} is not supported"),
                ))
            }
            _ => {}
        }
        // Binary search over batches by their max timestamp: like Kafka's time index, this
        // treats the log's timestamps as non-decreasing.
        let (mut lo, mut hi) = (info.start_offset, info.end_offset);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let Some(b) = self.read_one(stream, mid).await? else {
                break;
            };
            let max_ts = batch::stored_header(&b.payload).map_or(-1, |h| h.max_timestamp);
            if max_ts >= timestamp {
                hi = b.base_offset.min(hi);
                if b.base_offset <= lo {
                    break;
                }
            } else {
                lo = b.end_offset();
            }
        }
        // `lo` starts the first batch that reaches the timestamp; find the record in it.
        let mut at = lo;
        while at < info.end_offset {
            let Some(b) = self.read_one(stream, at).await? else {
                break;
            };
            if let Some(hit) = self.first_record_from(&b, timestamp, info.start_offset) {
                return Ok(hit);
            }
            at = b.end_offset();
        }
        Ok((-1, -1))
    }

    /// The first record of stored batch `b` at or after `timestamp` and at or after the log
    /// start `start` (records below it, in a batch cut by DeleteRecords, are gone): its offset
    /// and timestamp. A `LogAppendTime` batch's records all have its time. Streamed with the
    /// produce-time walker: no record is materialised, and a stored batch's claims cannot
    /// make this allocate.
    fn first_record_from(
        &self,
        b: &inlet_storage::ReadBatch,
        timestamp: i64,
        start: u64,
    ) -> Option<(i64, i64)> {
        let header = batch::stored_header(&b.payload)?;
        if header.max_timestamp < timestamp {
            return None;
        }
        let (base, start) = (b.base_offset as i64, start as i64);
        if header.attributes & 0x08 != 0 {
            return Some((base.max(start), header.max_timestamp));
        }
        let stored = crate::batch::Batch {
            header,
            bytes: b.payload.clone(),
        };
        let mut found = None;
        // A compacted topic's batches may skip offsets (`compaction`).
        let limits = records::Limits {
            compacted: true,
            ..self.record_limits()
        };
        let _ = records::walk(&stored, limits, |r| {
            let offset = base + i64::from(r.index);
            let ts = header.base_timestamp.saturating_add(r.timestamp_delta);
            if found.is_none() && ts >= timestamp && offset >= start {
                found = Some((offset, ts));
            }
        });
        found
    }

    /// ListOffsets' MAX_TIMESTAMP (-3, v7+, KIP-734): the first record with the partition's
    /// largest timestamp, and that timestamp; `(-1, -1)` for an empty partition. Batch
    /// headers carry their max timestamp, so the scan reads headers only, then walks the one
    /// batch that holds the maximum. What a scan found is kept per stream ([`MaxSeen`]), so a
    /// later call scans only what was appended since, unless retention has taken the record
    /// found.
    async fn max_timestamp(
        &self,
        stream: u64,
        info: &inlet_storage::StreamInfo,
    ) -> Result<(i64, i64)> {
        let (start, end) = (info.start_offset, info.end_offset);
        let cached = self.max_timestamps.lock().get(&stream).copied();
        let mut seen = match cached {
            Some(seen)
                if seen.from <= start
                    && seen.batch_start.is_none_or(|b| b >= start)
                    && seen.to <= end =>
            {
                seen
            }
            _ => MaxSeen {
                from: start,
                to: start,
                max: -1,
                batch_start: None,
            },
        };
        let mut at = seen.to.max(start);
        while at < end {
            let batches = self.store.read(stream, at, SCAN_BYTES).await?;
            if batches.is_empty() {
                break;
            }
            for b in &batches {
                let max = batch::stored_header(&b.payload).map_or(-1, |h| h.max_timestamp);
                if max > seen.max {
                    seen.max = max;
                    seen.batch_start = Some(b.base_offset);
                }
                at = b.end_offset();
            }
        }
        seen.to = at;
        self.max_timestamps.lock().insert(stream, seen);
        let Some(base) = seen.batch_start else {
            return Ok((-1, -1));
        };
        let Some(b) = self.read_one(stream, base.max(start)).await? else {
            return Ok((-1, -1));
        };
        // No record is later than the maximum: the first at or after it has it.
        Ok(self
            .first_record_from(&b, seen.max, start)
            .unwrap_or(((b.base_offset.max(start)) as i64, seen.max)))
    }

    async fn read_one(&self, stream: u64, offset: u64) -> Result<Option<inlet_storage::ReadBatch>> {
        Ok(self.store.read(stream, offset, 1).await?.into_iter().next())
    }

    pub(crate) async fn delete_records(
        &self,
        r: DeleteRecordsRequest,
        _version: i16,
    ) -> DeleteRecordsResponse {
        let mut topics = Vec::new();
        for t in r.topics {
            let topic = self.topics.get(t.name.0.as_str());
            let mut partitions = Vec::new();
            for p in t.partitions {
                let result = match topic.as_ref().and_then(|t| t.partition(p.partition_index)) {
                    None => Err(KafkaError::unknown_topic(t.name.0.as_str())),
                    Some(partition) => self.delete_before(partition.stream, p.offset).await,
                };
                partitions.push(match result {
                    Ok(low) => DeleteRecordsPartitionResult::default()
                        .with_partition_index(p.partition_index)
                        .with_low_watermark(low),
                    Err(e) => DeleteRecordsPartitionResult::default()
                        .with_partition_index(p.partition_index)
                        .with_low_watermark(-1)
                        .with_error_code(e.code()),
                });
            }
            topics.push(
                DeleteRecordsTopicResult::default()
                    .with_name(t.name)
                    .with_partitions(partitions),
            );
        }
        DeleteRecordsResponse::default().with_topics(topics)
    }

    async fn delete_before(&self, stream: u64, offset: i64) -> Result<i64> {
        let end = self.led_stream(stream)?.end_offset as i64;
        let target = if offset == -1 { end } else { offset };
        if target < 0 || target > end {
            return Err(KafkaError::new(
                ResponseError::OffsetOutOfRange,
                format!("cannot delete records before {offset}: the partition ends at {end}"),
            ));
        }
        self.store.trim(stream, target as u64).await?;
        Ok(self.store.start_offset(stream)? as i64)
    }
}
