//! The node's own figures over the last hour, sampled every `[http] history_interval_ms` (10 s)
//! into a [`History`] of `[http] history_bytes`, which the console's charts start from.
//!
//! The series, by name:
//! - `node:produced_bytes_per_s`, `node:fetched_bytes_per_s`, `node:produced_records_per_s`:
//!   Kafka throughput in and out, the rates of `inlet_kafka_*_total` between samples;
//! - `table:{namespace.table}:records_behind`, `…:seconds_since_commit`, `…:watermark_ms` and
//!   `…:partition_watermark_ms:{partition}`: each table topic this node runs (`/v1/tables`'
//!   figures, and the watermarks its last commit recorded);
//! - `group:{group}:lag`: each consumer group this node coordinates, summed over its partitions.
//!
//! Each name is allocated once and shared by the samples that hold it; the history charges
//! every point its name's length all the same, so its budget bounds the memory from above.
//!
//! Nothing here is durable: a restarted node starts a new history (Prometheus keeps longer ones).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use inlet_common::history::History;
use inlet_ingest::Broker;
use inlet_table_coordinator::Statuses;
use tokio_util::sync::CancellationToken;

/// How long samples are kept (within the byte budget).
pub(crate) const WINDOW_MS: u64 = 60 * 60 * 1000;

/// What a series is about, for deciding who may read it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Series<'a> {
    Node,
    /// A table topic's table, `namespace.table`.
    Table(&'a str),
    Group(&'a str),
}

impl<'a> Series<'a> {
    pub(crate) fn parse(name: &'a str) -> Option<Self> {
        if name.starts_with("node:") {
            return Some(Series::Node);
        }
        if let Some(rest) = name.strip_prefix("table:") {
            // `{table}:{figure}`, or `{table}:partition_watermark_ms:{partition}`.
            let (head, last) = rest.rsplit_once(':')?;
            if last.parse::<i32>().is_err() {
                return Some(Series::Table(head));
            }
            return match head.rsplit_once(':') {
                Some((table, "partition_watermark_ms")) => Some(Series::Table(table)),
                _ => None,
            };
        }
        name.strip_prefix("group:")
            .and_then(|rest| rest.rsplit_once(':'))
            .map(|(group, _)| Series::Group(group))
    }
}

/// The counters the throughput series are rates of.
fn counters(broker: &Broker) -> [u64; 3] {
    let m = broker.metrics();
    [
        m.produced_bytes.load(Ordering::Relaxed),
        m.fetched_bytes.load(Ordering::Relaxed),
        m.produced_records.load(Ordering::Relaxed),
    ]
}

const RATES: [&str; 3] = [
    "node:produced_bytes_per_s",
    "node:fetched_bytes_per_s",
    "node:produced_records_per_s",
];

/// The series' names, each allocated once and shared by every sample that has it: a sample's
/// names are looked up in the previous sample's, so names no longer sampled are dropped.
#[derive(Default)]
struct Names {
    previous: HashMap<String, Arc<str>>,
    current: HashMap<String, Arc<str>>,
}

impl Names {
    fn get(&mut self, name: String) -> Arc<str> {
        if let Some(shared) = self.current.get(&name) {
            return shared.clone();
        }
        let shared = self
            .previous
            .remove(&name)
            .unwrap_or_else(|| Arc::from(name.as_str()));
        self.current.insert(name, shared.clone());
        shared
    }

    /// Ends a sample: its names are the ones the next looks up.
    fn next(&mut self) {
        self.previous = std::mem::take(&mut self.current);
    }
}

/// One sample: the rates since `last` (none on the first), and every table's and group's
/// figures now; with the counters the rates were taken at.
fn sample(
    broker: &Broker,
    tables: &Statuses,
    now_ms: u64,
    last: Option<(u64, [u64; 3])>,
    names: &mut Names,
) -> (Vec<(Arc<str>, f64)>, [u64; 3]) {
    let mut values: Vec<(Arc<str>, f64)> = Vec::new();
    let now = counters(broker);
    if let Some((then_ms, before)) = last.filter(|(t, _)| *t < now_ms) {
        let seconds = (now_ms - then_ms) as f64 / 1e3;
        for ((name, now), before) in RATES.iter().zip(now).zip(before) {
            values.push((
                names.get(name.to_string()),
                now.saturating_sub(before) as f64 / seconds,
            ));
        }
    }
    for (table, status) in tables.snapshot() {
        values.push((
            names.get(format!("table:{table}:records_behind")),
            status.records_behind() as f64,
        ));
        if let Some(c) = status.last_commit_ms {
            values.push((
                names.get(format!("table:{table}:seconds_since_commit")),
                (now_ms as i64 - c).max(0) as f64 / 1e3,
            ));
        }
        if let Some(w) = status.watermark_ms {
            values.push((names.get(format!("table:{table}:watermark_ms")), w as f64));
        }
        for (partition, w) in &status.partition_watermarks {
            values.push((
                names.get(format!("table:{table}:partition_watermark_ms:{partition}")),
                *w as f64,
            ));
        }
    }
    let mut lags: std::collections::BTreeMap<String, u64> = Default::default();
    for (group, _topic, lag) in broker.group_lags() {
        *lags.entry(group).or_default() += lag;
    }
    for (group, lag) in lags {
        values.push((names.get(format!("group:{group}:lag")), lag as f64));
    }
    names.next();
    (values, now)
}

/// Samples every `interval` until `stop`.
pub(crate) async fn run(
    history: Arc<History>,
    interval: Duration,
    broker: Arc<Broker>,
    tables: Statuses,
    stop: CancellationToken,
) {
    let mut last: Option<(u64, [u64; 3])> = None;
    let mut names = Names::default();
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let now_ms = broker.clock_ms();
        let (values, counted) = sample(&broker, &tables, now_ms, last, &mut names);
        last = Some((now_ms, counted));
        history.record(now_ms, values);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_shared_between_samples_until_it_is_no_longer_sampled() {
        let mut names = Names::default();
        let a = names.get("table:t:records_behind".into());
        assert!(Arc::ptr_eq(&a, &names.get("table:t:records_behind".into())));
        names.next();
        let again = names.get("table:t:records_behind".into());
        assert!(Arc::ptr_eq(&a, &again), "the next sample shares it");
        names.next();
        names.next();
        assert_eq!(names.previous.len(), 0, "not sampled: dropped");
        assert!(!Arc::ptr_eq(
            &a,
            &names.get("table:t:records_behind".into())
        ));
    }

    #[test]
    fn series_names_say_what_they_are_about() {
        assert_eq!(
            Series::parse("node:fetched_bytes_per_s"),
            Some(Series::Node)
        );
        assert_eq!(
            Series::parse("table:db.orders:records_behind"),
            Some(Series::Table("db.orders"))
        );
        assert_eq!(
            Series::parse("group:billing:v2:lag"),
            Some(Series::Group("billing:v2"))
        );
        assert_eq!(
            Series::parse("table:db.orders:partition_watermark_ms:3"),
            Some(Series::Table("db.orders"))
        );
        assert_eq!(Series::parse("table:db.orders:3"), None);
        assert_eq!(Series::parse("other"), None);
        assert_eq!(Series::parse("table:nometric"), None);
    }
}
