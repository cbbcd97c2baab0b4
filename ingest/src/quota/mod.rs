//! Client quotas (KIP-13, KIP-55, KIP-124, KIP-219, KIP-546): produce and fetch byte rates and
//! request time per user and client id, set with `AlterClientQuotas`, read with
//! `DescribeClientQuotas` (`admin`), stored in the metadata store (`store`) and enforced by
//! every node on its own traffic, as each Kafka broker enforces them.
//!
//! - **Which quota applies** to a request of user `u` with client id `c` is the first of
//!   Kafka's eight that is set, for each kind on its own: `u`+`c`, `u`+default client,
//!   `u`, default user+`c`, default user+default client, default user, `c`, default client.
//!   Clients that fall under one entity share its rate: a quota set for user `u` alone is
//!   shared by all of `u`'s client ids, one for the default user is kept per user.
//! - **Rates** are measured as Kafka measures them: `quota.window.num` samples of
//!   `quota.window.size.seconds` each; bytes (the request's size for Produce, the records
//!   sent for Fetch) or, for `request_percentage`, the time spent handling the request on a
//!   thread (100 is one thread kept busy).
//! - **Throttling** (KIP-219): a request that takes its entity over the quota is answered
//!   at once with `throttle_time_ms`, the time it takes the rate to fall back to the quota
//!   (at most one whole window), and the connection reads no further request for that
//!   long. Fetch answers carry their records (Kafka's newer brokers send an empty answer
//!   instead; either way the client waits out the throttle before the next one).
//!
//! Invariants: with no quota stored, nothing is measured and nothing is throttled; the
//! sensors (one rate per entity and kind in use) stay within `inlet.quota.sensors.max.bytes`,
//! sensors idle for a whole window go first, since their rate is zero.

pub(crate) mod admin;
pub(crate) mod enforce;
pub(crate) mod store;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

/// What a quota bounds, by Kafka's quota config names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Kind {
    /// `producer_byte_rate`: bytes a second of Produce requests.
    Produce,
    /// `consumer_byte_rate`: bytes a second of Fetch responses' records.
    Fetch,
    /// `request_percentage`: the share of one thread's time spent on the entity's requests.
    Request,
}

impl Kind {
    pub(crate) const ALL: [Kind; 3] = [Kind::Produce, Kind::Fetch, Kind::Request];

    pub(crate) fn key(self) -> &'static str {
        match self {
            Kind::Produce => "producer_byte_rate",
            Kind::Fetch => "consumer_byte_rate",
            Kind::Request => "request_percentage",
        }
    }

    pub(crate) fn from_key(key: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.key() == key)
    }

    /// Whether the value is a whole number (Kafka's LONG quota configs).
    fn whole(self) -> bool {
        !matches!(self, Kind::Request)
    }

    /// Whether `value` may be this quota, or why not.
    pub(crate) fn check(self, value: f64) -> Result<(), String> {
        if !value.is_finite() || value <= 0.0 {
            return Err(format!("{} must be positive, not {value}", self.key()));
        }
        if self.whole() && (value.fract() != 0.0 || value > i64::MAX as f64) {
            return Err(format!(
                "{} must be a whole number, not {value}",
                self.key()
            ));
        }
        Ok(())
    }
}

/// One component of a quota entity (the user, or the client id).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Part {
    /// The entity does not name this component.
    Absent,
    /// `<default>`: every user (client id) without a quota of its own.
    Default,
    Named(String),
}

/// A quota entity: a user, a client id, or both (Kafka's `ClientQuotaEntity` with the `user`
/// and `client-id` types).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Entity {
    pub(crate) user: Part,
    pub(crate) client: Part,
}

/// The quotas stored, at the version they were read at.
#[derive(Debug, Default, Clone)]
pub(crate) struct Configured {
    pub(crate) version: i64,
    pub(crate) values: BTreeMap<Entity, BTreeMap<Kind, f64>>,
}

impl Configured {
    /// The quota of `kind` for `user` with client id `client`, if any applies, and the key
    /// of the rate it is measured against: the names of the components the matching entity
    /// has (Kafka's metric tags).
    pub(crate) fn resolve(&self, kind: Kind, user: &str, client: &str) -> Option<(f64, SensorKey)> {
        use Part::{Absent, Default as Any};
        let named = |s: &str| Part::Named(s.to_string());
        let levels = [
            (named(user), named(client)),
            (named(user), Any),
            (named(user), Absent),
            (Any, named(client)),
            (Any, Any),
            (Any, Absent),
            (Absent, named(client)),
            (Absent, Any),
        ];
        levels.into_iter().find_map(|(u, c)| {
            let key = SensorKey {
                kind,
                user: (u != Absent).then(|| user.to_string()),
                client: (c != Absent).then(|| client.to_string()),
            };
            let value = self
                .values
                .get(&Entity { user: u, client: c })?
                .get(&kind)?;
            Some((*value, key))
        })
    }

    /// Whether any quota of `kind` is stored.
    fn any(&self, kind: Kind) -> bool {
        self.values.values().any(|v| v.contains_key(&kind))
    }
}

/// Whose rate a request counts against.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct SensorKey {
    pub(crate) kind: Kind,
    pub(crate) user: Option<String>,
    pub(crate) client: Option<String>,
}

impl SensorKey {
    fn bytes(&self) -> u64 {
        SENSOR_BYTES
            + self.user.as_ref().map_or(0, |u| u.len() as u64)
            + self.client.as_ref().map_or(0, |c| c.len() as u64)
    }
}

/// What a sensor costs besides its names: its samples, the map's entry.
pub(crate) const SENSOR_BYTES: u64 = 96 + 16 * 11;

/// How rates are measured: Kafka's `quota.window.num` and `quota.window.size.seconds`, and
/// the sensors' memory.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Windows {
    pub(crate) samples: u32,
    pub(crate) sample_ms: u64,
    pub(crate) max_bytes: u64,
}

/// A rate over the last `samples` windows of `sample_ms` (Kafka's `Rate` over a `SampledStat`).
#[derive(Debug, Clone)]
struct Rate {
    /// (window start, total recorded in it), oldest first.
    samples: std::collections::VecDeque<(u64, f64)>,
    last_ms: u64,
}

impl Rate {
    fn new() -> Rate {
        Rate {
            samples: Default::default(),
            last_ms: 0,
        }
    }

    fn forget_old(&mut self, now_ms: u64, w: Windows) {
        let span = w.sample_ms * u64::from(w.samples);
        while let Some(&(start, _)) = self.samples.front() {
            if now_ms.saturating_sub(start) >= span {
                self.samples.pop_front();
            } else {
                break;
            }
        }
    }

    fn record(&mut self, value: f64, now_ms: u64, w: Windows) {
        self.forget_old(now_ms, w);
        match self.samples.back_mut() {
            Some((start, total)) if now_ms.saturating_sub(*start) < w.sample_ms => *total += value,
            _ => self.samples.push_back((now_ms, value)),
        }
        self.last_ms = now_ms;
    }

    /// The span the rate is taken over: from the oldest sample to now, and never less than
    /// `samples - 1` whole windows, so a burst on a new sensor is not read as a huge rate.
    fn window_ms(&self, now_ms: u64, w: Windows) -> u64 {
        let elapsed = self
            .samples
            .front()
            .map_or(0, |&(start, _)| now_ms.saturating_sub(start));
        elapsed.max(w.sample_ms * u64::from(w.samples.saturating_sub(1)).max(1))
    }

    /// The rate per second now, and the span it is over.
    fn measure(&mut self, now_ms: u64, w: Windows) -> (f64, u64) {
        self.forget_old(now_ms, w);
        let total: f64 = self.samples.iter().map(|&(_, v)| v).sum();
        let window = self.window_ms(now_ms, w);
        (total * 1000.0 / window as f64, window)
    }
}

/// One node's quotas: what is configured (read from the metadata store) and the rates of
/// the entities in use.
#[derive(Debug)]
pub(crate) struct Quotas {
    configured: RwLock<Arc<Configured>>,
    /// The kinds some stored quota has (bit `1 << kind as u8`), taken when the quotas are
    /// installed: every request asks, so it is not worked out from `configured` each time.
    kinds: std::sync::atomic::AtomicU8,
    sensors: Mutex<Sensors>,
}

#[derive(Debug, Default)]
struct Sensors {
    rates: HashMap<SensorKey, Rate>,
    bytes: u64,
}

/// Kafka's request time unit: `request_percentage` a second from nanoseconds.
const NANOS_TO_PERCENT: f64 = 100.0 / 1e9;

/// What one answered request counts against its quotas.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Usage {
    pub(crate) produce_bytes: u64,
    pub(crate) fetch_bytes: u64,
    pub(crate) thread_nanos: u64,
}

impl Default for Quotas {
    fn default() -> Self {
        Quotas {
            configured: RwLock::new(Arc::new(Configured::default())),
            kinds: std::sync::atomic::AtomicU8::new(0),
            sensors: Mutex::new(Sensors::default()),
        }
    }
}

impl Quotas {
    pub(crate) fn configured(&self) -> Arc<Configured> {
        self.configured.read().clone()
    }

    pub(crate) fn install(&self, configured: Configured) {
        let kinds = Kind::ALL
            .into_iter()
            .filter(|k| configured.any(*k))
            .fold(0u8, |bits, k| bits | 1 << k as u8);
        *self.configured.write() = Arc::new(configured);
        self.kinds
            .store(kinds, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether any quota of `kind` is stored (else nothing of it is measured).
    pub(crate) fn enforces(&self, kind: Kind) -> bool {
        self.kinds.load(std::sync::atomic::Ordering::Relaxed) & (1 << kind as u8) != 0
    }

    /// Whether any quota applies to `user` with client id `client`: its connection then
    /// handles one request at a time, as Kafka's do, so that a throttle holds back the
    /// requests after it rather than ones already being handled.
    pub(crate) fn apply_to(&self, user: &str, client: &str) -> bool {
        let configured = self.configured.read();
        !configured.values.is_empty()
            && Kind::ALL
                .iter()
                .any(|k| configured.resolve(*k, user, client).is_some())
    }

    /// Records `usage` of `user` (a principal's name) with client id `client` at `now_ms`
    /// and returns how long the client must wait before its next request (0: no wait): the
    /// longest throttle of the quotas it went over.
    pub(crate) fn record(
        &self,
        user: &str,
        client: &str,
        usage: Usage,
        now_ms: u64,
        w: Windows,
    ) -> u64 {
        let configured = self.configured();
        if configured.values.is_empty() {
            return 0;
        }
        let mut throttle = 0u64;
        for (kind, value) in [
            (Kind::Produce, usage.produce_bytes as f64),
            (Kind::Fetch, usage.fetch_bytes as f64),
            (Kind::Request, usage.thread_nanos as f64 * NANOS_TO_PERCENT),
        ] {
            if value <= 0.0 {
                continue;
            }
            let Some((quota, key)) = configured.resolve(kind, user, client) else {
                continue;
            };
            throttle = throttle.max(self.sensors.lock().record(key, value, quota, now_ms, w));
        }
        throttle
    }
}

impl Sensors {
    /// Records `value` on `key`'s rate; the throttle (ms) if that takes it over `quota`.
    fn record(&mut self, key: SensorKey, value: f64, quota: f64, now_ms: u64, w: Windows) -> u64 {
        if !self.rates.contains_key(&key) {
            self.make_room(key.bytes(), now_ms, w);
            self.bytes += key.bytes();
            self.rates.insert(key.clone(), Rate::new());
        }
        let rate = self.rates.get_mut(&key).expect("inserted above");
        rate.record(value, now_ms, w);
        let (observed, window_ms) = rate.measure(now_ms, w);
        if observed <= quota {
            return 0;
        }
        // The time at which the rate, with nothing more recorded, is back at the quota;
        // Kafka's `QuotaUtils.throttleTime`, bounded by the whole window.
        let throttle = (observed - quota) / quota * window_ms as f64;
        let most = w.sample_ms * u64::from(w.samples);
        (throttle.ceil() as u64).min(most)
    }

    /// Drops sensors until `need` more bytes fit: idle ones first (their rate is zero), then
    /// those recorded on longest ago.
    fn make_room(&mut self, need: u64, now_ms: u64, w: Windows) {
        if self.bytes + need <= w.max_bytes {
            return;
        }
        let span = w.sample_ms * u64::from(w.samples);
        let mut freed = 0;
        self.rates.retain(|k, r| {
            let idle = now_ms.saturating_sub(r.last_ms) >= span;
            if idle {
                freed += k.bytes();
            }
            !idle
        });
        self.bytes -= freed;
        while self.bytes + need > w.max_bytes {
            let Some(oldest) = self
                .rates
                .iter()
                .min_by_key(|(_, r)| r.last_ms)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            self.rates.remove(&oldest);
            self.bytes -= oldest.bytes();
        }
    }
}

/// The user name of a principal (`User:alice` → `alice`), as quota entities name users.
pub(crate) fn user_of(principal: &str) -> &str {
    principal
        .split_once(':')
        .map_or(principal, |(_, name)| name)
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: Windows = Windows {
        samples: 11,
        sample_ms: 1000,
        max_bytes: 1 << 20,
    };

    fn entity(user: Part, client: Part) -> Entity {
        Entity { user, client }
    }

    fn named(s: &str) -> Part {
        Part::Named(s.into())
    }

    #[test]
    fn the_most_specific_of_kafkas_eight_levels_applies_per_kind() {
        let mut c = Configured::default();
        let mut set = |e: Entity, k: Kind, v: f64| {
            c.values.entry(e).or_default().insert(k, v);
        };
        set(entity(Part::Absent, Part::Default), Kind::Produce, 8.0);
        set(entity(Part::Absent, named("app")), Kind::Produce, 7.0);
        set(entity(Part::Default, Part::Absent), Kind::Produce, 6.0);
        set(entity(named("alice"), Part::Absent), Kind::Produce, 3.0);
        set(entity(named("alice"), named("app")), Kind::Fetch, 1.0);
        type Found = Option<(f64, Option<String>, Option<String>)>;
        fn q(c: &Configured, k: Kind, u: &str, cl: &str) -> Found {
            c.resolve(k, u, cl)
                .map(|(v, key)| (v, key.user, key.client))
        }
        // alice's own quota, shared by all of her clients.
        assert_eq!(
            q(&c, Kind::Produce, "alice", "app"),
            Some((3.0, Some("alice".into()), None))
        );
        // The default user's, one rate per user.
        assert_eq!(
            q(&c, Kind::Produce, "bob", "app"),
            Some((6.0, Some("bob".into()), None))
        );
        // A fetch quota only alice+app has.
        assert_eq!(
            q(&c, Kind::Fetch, "alice", "app"),
            Some((1.0, Some("alice".into()), Some("app".into())))
        );
        assert_eq!(q(&c, Kind::Fetch, "alice", "other"), None);
        assert_eq!(q(&c, Kind::Request, "alice", "app"), None);
        c.values.remove(&entity(Part::Default, Part::Absent));
        assert_eq!(
            q(&c, Kind::Produce, "bob", "app"),
            Some((7.0, None, Some("app".into())))
        );
        assert_eq!(
            q(&c, Kind::Produce, "bob", "cli"),
            Some((8.0, None, Some("cli".into())))
        );
    }

    #[test]
    fn going_over_a_byte_rate_throttles_until_the_rate_is_back_at_the_quota() {
        let q = Quotas::default();
        let mut c = Configured::default();
        c.values
            .entry(entity(named("alice"), Part::Absent))
            .or_default()
            .insert(Kind::Produce, 1000.0);
        q.install(c);
        let produce = |bytes| Usage {
            produce_bytes: bytes,
            ..Usage::default()
        };
        // 10 s of window at 1000 B/s: 10,000 bytes fit, 5,000 more take 5 s to drain.
        assert_eq!(q.record("alice", "a", produce(10_000), 0, W), 0);
        assert_eq!(q.record("alice", "a", produce(5_000), 0, W), 5000);
        // Another client of alice's shares her rate; bob has no quota.
        assert!(q.record("alice", "b", produce(1), 10, W) > 0);
        assert_eq!(q.record("bob", "a", produce(1 << 30), 10, W), 0);
        // Eleven windows later the samples are gone.
        assert_eq!(q.record("alice", "a", produce(100), 12_000, W), 0);
        // Never more than the whole window.
        assert_eq!(q.record("alice", "a", produce(1 << 40), 12_000, W), 11_000);
    }

    #[test]
    fn request_time_is_a_percentage_of_one_thread() {
        let q = Quotas::default();
        let mut c = Configured::default();
        c.values
            .entry(entity(Part::Default, Part::Absent))
            .or_default()
            .insert(Kind::Request, 10.0);
        q.install(c);
        let busy = |nanos| Usage {
            thread_nanos: nanos,
            ..Usage::default()
        };
        // 10% of a thread over 10 s: 1 s of thread time fits, 2 s goes over by 100%.
        assert_eq!(q.record("u", "c", busy(1_000_000_000), 0, W), 0);
        assert_eq!(q.record("u", "c", busy(1_000_000_000), 0, W), 10_000);
        assert!(!q.enforces(Kind::Produce) && q.enforces(Kind::Request));
    }

    #[test]
    fn sensors_stay_within_their_budget_idle_ones_first() {
        let mut s = Sensors::default();
        let w = Windows {
            max_bytes: 3 * (SENSOR_BYTES + 2),
            ..W
        };
        let key = |c: &str| SensorKey {
            kind: Kind::Fetch,
            user: None,
            client: Some(c.into()),
        };
        s.record(key("c1"), 1.0, 1e9, 0, w);
        s.record(key("c2"), 1.0, 1e9, 19_999, w);
        s.record(key("c3"), 1.0, 1e9, 20_000, w);
        s.record(key("c4"), 1.0, 1e9, 20_001, w);
        assert!(!s.rates.contains_key(&key("c1")), "the idle one went");
        s.record(key("c5"), 1.0, 1e9, 20_002, w);
        assert!(!s.rates.contains_key(&key("c2")), "then the oldest");
        assert_eq!(s.rates.len(), 3);
        assert!(s.bytes <= w.max_bytes);
    }

    #[test]
    fn values_are_checked_as_kafka_types_them() {
        assert!(Kind::Produce.check(1024.0).is_ok());
        assert!(Kind::Produce.check(10.5).unwrap_err().contains("whole"));
        assert!(Kind::Request.check(10.5).is_ok());
        assert!(Kind::Fetch.check(0.0).unwrap_err().contains("positive"));
        assert!(Kind::Fetch.check(f64::NAN).is_err());
        assert_eq!(user_of("User:alice"), "alice");
        assert_eq!(user_of("User:CN=a,O=b"), "CN=a,O=b");
    }
}
