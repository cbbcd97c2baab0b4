//! Broker-level settings, read from Kafka config names (`--kafka-config KEY=VALUE`) with
//! Kafka's defaults. DescribeConfigs on the broker resource reports them.

use std::collections::BTreeMap;

use crate::topic_config::{self, TopicConfigs};

/// The Kafka endpoint's settings.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// This broker's node id in Metadata responses.
    pub node_id: i32,
    /// Host and port clients are told to connect to.
    pub advertised_host: String,
    pub advertised_port: u16,
    /// `auto.create.topics.enable`: Metadata and Produce create unknown topics.
    pub auto_create_topics: bool,
    /// `num.partitions`: partitions of auto-created topics.
    pub num_partitions: i32,
    /// `message.max.bytes`: the largest record batch a topic accepts unless its
    /// `max.message.bytes` says otherwise.
    pub message_max_bytes: i32,
    /// `log.retention.ms`: retention of topics without `retention.ms`; -1 keeps forever.
    pub log_retention_ms: i64,
    /// `log.retention.bytes`: per-partition size retention; -1 is unlimited.
    pub log_retention_bytes: i64,
    /// `group.initial.rebalance.delay.ms`.
    pub group_initial_rebalance_delay_ms: u64,
    /// `group.min.session.timeout.ms` / `group.max.session.timeout.ms`.
    pub group_min_session_timeout_ms: u64,
    pub group_max_session_timeout_ms: u64,
    /// `socket.request.max.bytes`: a request frame longer than this closes the connection
    /// before anything is allocated for it.
    pub socket_request_max_bytes: u32,
    /// `queued.max.request.bytes`: request bytes read but not yet answered, over all
    /// connections; readers wait for room (back pressure) before reading a frame.
    pub queued_max_request_bytes: u64,
    /// `inlet.batch.max.decompressed.bytes` (Inlet's own): the most bytes one compressed record
    /// batch may decompress to; more is refused as INVALID_RECORD. Records are read streaming,
    /// so this bounds time, not memory.
    pub max_decompressed_batch_bytes: u64,
    /// `connections.max.idle.ms`: a connection that sends no request for this long is closed.
    pub connections_max_idle_ms: u64,
    /// `max.connections`: connections open at once; more are closed as they are accepted.
    pub max_connections: u32,
    /// `max.connections.per.ip`: connections open at once from one client address.
    pub max_connections_per_ip: u32,
    /// `inlet.request.read.timeout.ms` (Inlet's own): once a request's length has arrived, its
    /// body must arrive within this, or the connection is closed (a client that announces a
    /// body and sends it slowly, or never, holds request memory only this long).
    pub request_read_timeout_ms: u64,
    /// `fetch.max.bytes`: the most a Fetch response carries, whatever the request asks (the
    /// first batch of a response still goes whole, KIP-74).
    pub fetch_max_bytes: u32,
    /// `inlet.max.partitions` (Inlet's own): partitions one node holds over all topics;
    /// CreateTopics and CreatePartitions beyond it are refused (INVALID_PARTITIONS).
    pub max_partitions: u32,
    /// `producer.id.expiration.ms`: a partition forgets an idempotent producer that sent it
    /// nothing for this long.
    pub producer_id_expiration_ms: u64,
    /// Defaults for new topics' `table.topic.*` configs (and any other topic config given at
    /// broker level by its topic name).
    pub topic_defaults: TopicConfigs,
    /// Every broker config as given, for DescribeConfigs.
    pub given: BTreeMap<String, String>,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            node_id: 0,
            advertised_host: "127.0.0.1".into(),
            advertised_port: 9092,
            auto_create_topics: true,
            num_partitions: 1,
            message_max_bytes: 1_048_588,
            log_retention_ms: 7 * 24 * 3600 * 1000,
            log_retention_bytes: -1,
            group_initial_rebalance_delay_ms: 3000,
            group_min_session_timeout_ms: 6000,
            group_max_session_timeout_ms: 1_800_000,
            socket_request_max_bytes: 100 * 1024 * 1024,
            queued_max_request_bytes: 256 * 1024 * 1024,
            max_decompressed_batch_bytes: 64 * 1024 * 1024,
            connections_max_idle_ms: 600_000,
            max_connections: i32::MAX as u32,
            max_connections_per_ip: i32::MAX as u32,
            request_read_timeout_ms: 30_000,
            fetch_max_bytes: 57_671_680,
            max_partitions: 100_000,
            producer_id_expiration_ms: 86_400_000,
            topic_defaults: TopicConfigs::default(),
            given: BTreeMap::new(),
        }
    }
}

impl BrokerConfig {
    /// Applies broker configs given by their Kafka names. Unknown names are refused, so a
    /// typo does not silently keep a default.
    pub fn apply_kafka_configs(
        &mut self,
        configs: &BTreeMap<String, String>,
    ) -> Result<(), String> {
        for (key, value) in configs {
            let bad = |what: &str| format!("--kafka-config {key}={value}: {what}");
            let int = || {
                value
                    .trim()
                    .parse::<i64>()
                    .map_err(|_| bad("not an integer"))
            };
            match key.as_str() {
                "auto.create.topics.enable" => {
                    self.auto_create_topics = match value.trim() {
                        "true" => true,
                        "false" => false,
                        _ => return Err(bad("must be true or false")),
                    }
                }
                "num.partitions" => {
                    let n = int()?;
                    if !(1..=10_000).contains(&n) {
                        return Err(bad("must be 1 to 10000"));
                    }
                    self.num_partitions = n as i32;
                }
                "message.max.bytes" => {
                    let n = int()?;
                    if !(1..=i32::MAX as i64).contains(&n) {
                        return Err(bad("must be a positive 32-bit integer"));
                    }
                    self.message_max_bytes = n as i32;
                }
                "log.retention.ms" => {
                    let n = int()?;
                    if n < -1 {
                        return Err(bad("must be -1 (forever) or a duration"));
                    }
                    self.log_retention_ms = n;
                }
                "log.retention.hours" | "log.retention.minutes" => {
                    let n = int()?;
                    if n < -1 {
                        return Err(bad("must be -1 (forever) or a duration"));
                    }
                    let unit = if key.ends_with("hours") {
                        3_600_000
                    } else {
                        60_000
                    };
                    self.log_retention_ms = if n == -1 { -1 } else { n * unit };
                }
                "log.retention.bytes" => {
                    let n = int()?;
                    if n < -1 {
                        return Err(bad("must be -1 (unlimited) or a size"));
                    }
                    self.log_retention_bytes = n;
                }
                "group.initial.rebalance.delay.ms" => {
                    let n = int()?;
                    if !(0..=300_000).contains(&n) {
                        return Err(bad("must be 0 to 300000"));
                    }
                    self.group_initial_rebalance_delay_ms = n as u64;
                }
                "group.min.session.timeout.ms" | "group.max.session.timeout.ms" => {
                    let n = int()?;
                    if n < 1 {
                        return Err(bad("must be positive"));
                    }
                    if key.contains(".min.") {
                        self.group_min_session_timeout_ms = n as u64;
                    } else {
                        self.group_max_session_timeout_ms = n as u64;
                    }
                }
                "socket.request.max.bytes" => {
                    let n = int()?;
                    if !(1024..=i32::MAX as i64).contains(&n) {
                        return Err(bad("must be 1024 to 2147483647"));
                    }
                    self.socket_request_max_bytes = n as u32;
                }
                "queued.max.request.bytes" => {
                    let n = int()?;
                    if n < 1 {
                        return Err(bad("must be positive"));
                    }
                    self.queued_max_request_bytes = n as u64;
                }
                "inlet.batch.max.decompressed.bytes" => {
                    let n = int()?;
                    if n < 1024 {
                        return Err(bad("must be at least 1024"));
                    }
                    self.max_decompressed_batch_bytes = n as u64;
                }
                "connections.max.idle.ms" | "inlet.request.read.timeout.ms" => {
                    let n = int()?;
                    if n < 1 {
                        return Err(bad("must be positive"));
                    }
                    if key.starts_with("connections") {
                        self.connections_max_idle_ms = n as u64;
                    } else {
                        self.request_read_timeout_ms = n as u64;
                    }
                }
                "max.connections" | "max.connections.per.ip" => {
                    let n = int()?;
                    if !(0..=i32::MAX as i64).contains(&n) {
                        return Err(bad("must be 0 to 2147483647"));
                    }
                    if key.ends_with("per.ip") {
                        self.max_connections_per_ip = n as u32;
                    } else {
                        self.max_connections = n as u32;
                    }
                }
                "producer.id.expiration.ms" => {
                    let n = int()?;
                    if n < 1 {
                        return Err(bad("must be positive"));
                    }
                    self.producer_id_expiration_ms = n as u64;
                }
                "inlet.max.partitions" => {
                    let n = int()?;
                    if !(1..=10_000_000).contains(&n) {
                        return Err(bad("must be 1 to 10000000"));
                    }
                    self.max_partitions = n as u32;
                }
                "fetch.max.bytes" => {
                    let n = int()?;
                    if !(1024..=i32::MAX as i64).contains(&n) {
                        return Err(bad("must be 1024 to 2147483647"));
                    }
                    self.fetch_max_bytes = n as u32;
                }
                other => {
                    // Topic configs given at broker level become defaults for new topics.
                    let name = topic_config::canonical_name(other)
                        .ok_or_else(|| bad("unknown broker config"))?;
                    let mut one = BTreeMap::new();
                    one.insert(name.to_string(), value.clone());
                    let parsed = TopicConfigs::parse(&one).map_err(|e| bad(&e.message))?;
                    self.topic_defaults.merge(parsed);
                }
            }
            self.given.insert(key.clone(), value.clone());
        }
        if u64::from(self.socket_request_max_bytes) > self.queued_max_request_bytes {
            return Err(format!(
                "socket.request.max.bytes ({}) exceeds queued.max.request.bytes ({}): a request that large could never be read",
                self.socket_request_max_bytes, self.queued_max_request_bytes
            ));
        }
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms {
            return Err("group.min.session.timeout.ms exceeds group.max.session.timeout.ms".into());
        }
        Ok(())
    }

    /// Every broker config with its current value, for DescribeConfigs.
    pub fn describe(&self) -> Vec<(String, String, bool)> {
        let mut out: Vec<(String, String, bool)> = vec![
            (
                "auto.create.topics.enable".into(),
                self.auto_create_topics.to_string(),
                false,
            ),
            (
                "num.partitions".into(),
                self.num_partitions.to_string(),
                false,
            ),
            (
                "message.max.bytes".into(),
                self.message_max_bytes.to_string(),
                false,
            ),
            (
                "log.retention.ms".into(),
                self.log_retention_ms.to_string(),
                false,
            ),
            (
                "log.retention.bytes".into(),
                self.log_retention_bytes.to_string(),
                false,
            ),
            (
                "group.initial.rebalance.delay.ms".into(),
                self.group_initial_rebalance_delay_ms.to_string(),
                false,
            ),
            (
                "group.min.session.timeout.ms".into(),
                self.group_min_session_timeout_ms.to_string(),
                false,
            ),
            (
                "group.max.session.timeout.ms".into(),
                self.group_max_session_timeout_ms.to_string(),
                false,
            ),
            (
                "socket.request.max.bytes".into(),
                self.socket_request_max_bytes.to_string(),
                false,
            ),
            (
                "queued.max.request.bytes".into(),
                self.queued_max_request_bytes.to_string(),
                false,
            ),
            (
                "inlet.batch.max.decompressed.bytes".into(),
                self.max_decompressed_batch_bytes.to_string(),
                false,
            ),
            (
                "connections.max.idle.ms".into(),
                self.connections_max_idle_ms.to_string(),
                false,
            ),
            (
                "max.connections".into(),
                self.max_connections.to_string(),
                false,
            ),
            (
                "max.connections.per.ip".into(),
                self.max_connections_per_ip.to_string(),
                false,
            ),
            (
                "inlet.request.read.timeout.ms".into(),
                self.request_read_timeout_ms.to_string(),
                false,
            ),
            (
                "producer.id.expiration.ms".into(),
                self.producer_id_expiration_ms.to_string(),
                false,
            ),
            (
                "inlet.max.partitions".into(),
                self.max_partitions.to_string(),
                false,
            ),
            (
                "fetch.max.bytes".into(),
                self.fetch_max_bytes.to_string(),
                false,
            ),
            ("broker.id".into(), self.node_id.to_string(), false),
        ];
        for (name, value) in self.topic_defaults.explicit() {
            out.push((name.clone(), value.clone(), false));
        }
        for entry in out.iter_mut() {
            entry.2 = !self.given.contains_key(&entry.0)
                && !self
                    .given
                    .keys()
                    .any(|k| topic_config::canonical_name(k) == Some(&entry.0));
        }
        out
    }
}
