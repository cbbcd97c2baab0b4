//! Request metrics of the Kafka endpoint, rendered in Prometheus' text format: a request
//! count and a latency histogram per API, bytes in and out, open connections.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use kafka_protocol::messages::ApiKey;

use crate::codec::SUPPORTED;

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0,
];

#[derive(Debug, Default)]
struct ApiStats {
    requests: AtomicU64,
    micros_sum: AtomicU64,
    /// One counter per bucket plus +Inf; cumulative when rendered.
    buckets: Vec<AtomicU64>,
}

/// The endpoint's counters. Lock-free; shared by every connection.
#[derive(Debug)]
pub struct Metrics {
    apis: Vec<(ApiKey, ApiStats)>,
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    pub connections: AtomicU64,
    pub connections_total: AtomicU64,
    pub bad_frames: AtomicU64,
    /// Connections closed at accept for max.connections or max.connections.per.ip.
    pub refused_connections: AtomicU64,
    /// Requests answered with a throttle time: their client went over a quota.
    pub throttled_requests: AtomicU64,
    /// Connections closed because a request body did not arrive in time.
    pub slow_requests: AtomicU64,
    /// SASL authentications that succeeded (first ones and re-authentications).
    pub sasl_authentications: AtomicU64,
    /// SASL re-authentications (KIP-368) that succeeded.
    pub sasl_reauthentications: AtomicU64,
    /// SASL authentications that failed (the connection was closed).
    pub sasl_failures: AtomicU64,
    /// TLS handshakes that failed or did not finish in time.
    pub tls_failures: AtomicU64,
    /// Record batches refused because their records do not read as the header says.
    pub invalid_batches: AtomicU64,
    /// Committed offsets deleted by offsets.retention.minutes.
    pub group_offsets_expired: AtomicU64,
    /// Transactions completed by their coordinator, committed and aborted.
    pub transactions_committed: AtomicU64,
    pub transactions_aborted: AtomicU64,
    /// Transactions aborted because they stayed open past their `transaction.timeout.ms`.
    pub transactions_timed_out: AtomicU64,
    /// Compaction passes over partitions of compacted topics, the records they removed and
    /// the stored bytes they read.
    pub compaction_passes: AtomicU64,
    /// Looks at a compacted partition, whether a pass was due or not.
    pub compaction_checks: AtomicU64,
    pub compaction_records_removed: AtomicU64,
    pub compaction_bytes_read: AtomicU64,
    pub produced_records: AtomicU64,
    pub produced_bytes: AtomicU64,
    pub fetched_bytes: AtomicU64,
    /// Fetch sessions (KIP-227) opened, and incremental fetches answered in one.
    pub fetch_sessions_opened: AtomicU64,
    pub fetch_sessions_incremental: AtomicU64,
    /// Table topic records refused at produce time (errors.tolerance=none).
    pub invalid_records_refused: AtomicU64,
    /// Table topic records that failed validation but were stored (errors.tolerance=all).
    pub invalid_records_accepted: AtomicU64,
    /// Produce requests refused because the partition's table lagged past
    /// `table.topic.lag.max.bytes`.
    pub table_lag_refusals: AtomicU64,
    /// Producers remembered over all partitions (one per producer and partition), as of the
    /// last budget pass.
    pub producer_states: AtomicU64,
    /// Producers forgotten to keep within `inlet.producer.state.max.bytes`.
    pub producer_states_forgotten: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            apis: SUPPORTED
                .iter()
                .map(|&(k, _, _)| {
                    (
                        k,
                        ApiStats {
                            buckets: (0..=BUCKETS.len()).map(|_| AtomicU64::new(0)).collect(),
                            ..Default::default()
                        },
                    )
                })
                .collect(),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            connections_total: AtomicU64::new(0),
            bad_frames: AtomicU64::new(0),
            invalid_batches: AtomicU64::new(0),
            group_offsets_expired: AtomicU64::new(0),
            transactions_committed: AtomicU64::new(0),
            transactions_aborted: AtomicU64::new(0),
            transactions_timed_out: AtomicU64::new(0),
            compaction_passes: AtomicU64::new(0),
            compaction_checks: AtomicU64::new(0),
            compaction_records_removed: AtomicU64::new(0),
            compaction_bytes_read: AtomicU64::new(0),
            refused_connections: AtomicU64::new(0),
            throttled_requests: AtomicU64::new(0),
            slow_requests: AtomicU64::new(0),
            sasl_authentications: AtomicU64::new(0),
            sasl_reauthentications: AtomicU64::new(0),
            sasl_failures: AtomicU64::new(0),
            tls_failures: AtomicU64::new(0),
            produced_records: AtomicU64::new(0),
            produced_bytes: AtomicU64::new(0),
            fetched_bytes: AtomicU64::new(0),
            fetch_sessions_opened: AtomicU64::new(0),
            fetch_sessions_incremental: AtomicU64::new(0),
            invalid_records_refused: AtomicU64::new(0),
            invalid_records_accepted: AtomicU64::new(0),
            table_lag_refusals: AtomicU64::new(0),
            producer_states: AtomicU64::new(0),
            producer_states_forgotten: AtomicU64::new(0),
        }
    }
}

impl Metrics {
    /// Records one answered request.
    pub fn observe(&self, api: ApiKey, micros: u64) {
        let Some((_, s)) = self.apis.iter().find(|(k, _)| *k == api) else {
            return;
        };
        s.requests.fetch_add(1, Ordering::Relaxed);
        s.micros_sum.fetch_add(micros, Ordering::Relaxed);
        let secs = micros as f64 / 1e6;
        let i = BUCKETS
            .iter()
            .position(|&b| secs <= b)
            .unwrap_or(BUCKETS.len());
        s.buckets[i].fetch_add(1, Ordering::Relaxed);
    }

    /// Requests answered for one API (for tests).
    pub fn requests(&self, api: ApiKey) -> u64 {
        self.apis
            .iter()
            .find(|(k, _)| *k == api)
            .map_or(0, |(_, s)| s.requests.load(Ordering::Relaxed))
    }

    /// Appends the metrics in Prometheus' text format.
    pub fn render(&self, out: &mut String) {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "# HELP inlet_kafka_requests_total Kafka requests answered, by API."
        );
        let _ = writeln!(out, "# TYPE inlet_kafka_requests_total counter");
        for (k, s) in &self.apis {
            let _ = writeln!(
                out,
                "inlet_kafka_requests_total{{api=\"{k:?}\"}} {}",
                get(&s.requests)
            );
        }
        let _ = writeln!(out, "# HELP inlet_kafka_request_seconds Time from a request's arrival to its answer, by API.");
        let _ = writeln!(out, "# TYPE inlet_kafka_request_seconds histogram");
        for (k, s) in &self.apis {
            let mut cumulative = 0;
            for (i, bound) in BUCKETS.iter().enumerate() {
                cumulative += get(&s.buckets[i]);
                let _ = writeln!(out, "inlet_kafka_request_seconds_bucket{{api=\"{k:?}\",le=\"{bound}\"}} {cumulative}");
            }
            cumulative += get(&s.buckets[BUCKETS.len()]);
            let _ = writeln!(
                out,
                "inlet_kafka_request_seconds_bucket{{api=\"{k:?}\",le=\"+Inf\"}} {cumulative}"
            );
            let _ = writeln!(
                out,
                "inlet_kafka_request_seconds_sum{{api=\"{k:?}\"}} {}",
                get(&s.micros_sum) as f64 / 1e6
            );
            let _ = writeln!(
                out,
                "inlet_kafka_request_seconds_count{{api=\"{k:?}\"}} {cumulative}"
            );
        }
        for (name, help, kind, v) in [
            (
                "inlet_kafka_bytes_in_total",
                "Request bytes read from Kafka clients.",
                "counter",
                get(&self.bytes_in),
            ),
            (
                "inlet_kafka_bytes_out_total",
                "Response bytes written to Kafka clients.",
                "counter",
                get(&self.bytes_out),
            ),
            (
                "inlet_kafka_connections",
                "Open Kafka client connections.",
                "gauge",
                get(&self.connections),
            ),
            (
                "inlet_kafka_connections_total",
                "Kafka client connections accepted.",
                "counter",
                get(&self.connections_total),
            ),
            (
                "inlet_kafka_bad_frames_total",
                "Connections closed for an oversized, malformed or unsupported request.",
                "counter",
                get(&self.bad_frames),
            ),
            (
                "inlet_kafka_refused_connections_total",
                "Connections closed as they were accepted, over max.connections or max.connections.per.ip.",
                "counter",
                get(&self.refused_connections),
            ),
            (
                "inlet_kafka_throttled_requests_total",
                "Requests answered with a throttle time because their user or client id went over a client quota.",
                "counter",
                get(&self.throttled_requests),
            ),
            (
                "inlet_kafka_sasl_authentications_total",
                "SASL authentications of Kafka connections that succeeded, re-authentications included.",
                "counter",
                get(&self.sasl_authentications),
            ),
            (
                "inlet_kafka_sasl_reauthentications_total",
                "SASL re-authentications (KIP-368) of Kafka connections that succeeded.",
                "counter",
                get(&self.sasl_reauthentications),
            ),
            (
                "inlet_kafka_sasl_failures_total",
                "SASL authentications of Kafka connections that failed (each closed its connection).",
                "counter",
                get(&self.sasl_failures),
            ),
            (
                "inlet_kafka_tls_failures_total",
                "TLS handshakes on Kafka listeners that failed (a bad or missing client certificate, a client that does not trust the node) or did not finish within inlet.request.read.timeout.ms.",
                "counter",
                get(&self.tls_failures),
            ),
            (
                "inlet_kafka_slow_requests_total",
                "Connections closed because a request body did not arrive within inlet.request.read.timeout.ms.",
                "counter",
                get(&self.slow_requests),
            ),
            (
                "inlet_kafka_invalid_batches_total",
                "Record batches refused by Produce because their records do not read as the batch header says (count, offset deltas, lengths, decompression).",
                "counter",
                get(&self.invalid_batches),
            ),
            (
                "inlet_kafka_group_offsets_expired_total",
                "Committed offsets of consumer groups deleted by offsets.retention.minutes.",
                "counter",
                get(&self.group_offsets_expired),
            ),
            (
                "inlet_kafka_transactions_committed_total",
                "Transactions this node's coordinator committed (markers written, offsets applied).",
                "counter",
                get(&self.transactions_committed),
            ),
            (
                "inlet_kafka_transactions_aborted_total",
                "Transactions this node's coordinator aborted (by the producer, a fencing instance or a timeout).",
                "counter",
                get(&self.transactions_aborted),
            ),
            (
                "inlet_kafka_transactions_timed_out_total",
                "Transactions aborted because they stayed open past their transaction.timeout.ms.",
                "counter",
                get(&self.transactions_timed_out),
            ),
            (
                "inlet_kafka_compaction_passes_total",
                "Compaction passes over partitions of compacted topics (cleanup.policy with compact).",
                "counter",
                get(&self.compaction_passes),
            ),
            (
                "inlet_kafka_compaction_checks_total",
                "Looks at partitions of compacted topics, whether a compaction pass was due or not.",
                "counter",
                get(&self.compaction_checks),
            ),
            (
                "inlet_kafka_compaction_records_removed_total",
                "Records compaction removed: superseded by a later record of their key, or tombstones past delete.retention.ms.",
                "counter",
                get(&self.compaction_records_removed),
            ),
            (
                "inlet_kafka_compaction_bytes_read_total",
                "Stored bytes compaction read to map the keys of the partitions it compacted.",
                "counter",
                get(&self.compaction_bytes_read),
            ),
            (
                "inlet_kafka_produced_records_total",
                "Records stored by Produce.",
                "counter",
                get(&self.produced_records),
            ),
            (
                "inlet_kafka_produced_bytes_total",
                "Record batch bytes stored by Produce.",
                "counter",
                get(&self.produced_bytes),
            ),
            (
                "inlet_kafka_fetched_bytes_total",
                "Record batch bytes returned by Fetch.",
                "counter",
                get(&self.fetched_bytes),
            ),
            (
                "inlet_kafka_fetch_sessions_opened_total",
                "Fetch sessions (KIP-227) opened by full fetches.",
                "counter",
                get(&self.fetch_sessions_opened),
            ),
            (
                "inlet_kafka_fetch_sessions_incremental_total",
                "Incremental fetches answered in a fetch session.",
                "counter",
                get(&self.fetch_sessions_incremental),
            ),
            (
                "inlet_kafka_invalid_records_refused_total",
                "Table topic records refused at produce time (errors.tolerance=none).",
                "counter",
                get(&self.invalid_records_refused),
            ),
            (
                "inlet_kafka_invalid_records_accepted_total",
                "Table topic records that failed validation and were stored for the dead-letter table (errors.tolerance=all).",
                "counter",
                get(&self.invalid_records_accepted),
            ),
            (
                "inlet_kafka_table_lag_refusals_total",
                "Partition batches refused at produce time because the partition's table had not committed table.topic.lag.max.bytes of it (retriable: produce resumes once the table commits).",
                "counter",
                get(&self.table_lag_refusals),
            ),
            (
                "inlet_kafka_producer_states",
                "Idempotent producers remembered over all partitions (one per producer and partition), as of the last check against inlet.producer.state.max.bytes.",
                "gauge",
                get(&self.producer_states),
            ),
            (
                "inlet_kafka_producer_states_forgotten_total",
                "Idempotent producers' partition state forgotten, longest idle first, to keep within inlet.producer.state.max.bytes.",
                "counter",
                get(&self.producer_states_forgotten),
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
            );
        }
    }
}
