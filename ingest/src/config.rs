//! Broker-level settings, read from Kafka config names (`--kafka-config KEY=VALUE`, or the
//! `[kafka]` table of the node's config file) with Kafka's defaults. DescribeConfigs on the
//! broker resource reports them.
//!
//! Each setting is defined once, in the [`broker_settings!`] list below: its field, type,
//! default, Kafka name, bounds and meaning. The struct, its `Default`, parsing, DescribeConfigs
//! and `inlet config dump` all come from that one list ([`SETTINGS`]).
//!
//! Invariant: a [`BrokerConfig`] built by [`BrokerConfig::apply_kafka_configs`] holds only
//! values inside their settings' bounds, and the cross-setting rules hold (a request of
//! `socket.request.max.bytes` fits `queued.max.request.bytes`; the minimum session timeout is
//! not above the maximum).

use std::collections::BTreeMap;

use crate::topic_config::{self, TopicConfigs};

/// What a broker config's value must look like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettingKind {
    /// `true` or `false`.
    Bool,
    /// An integer in `min..=max`.
    Int { min: i64, max: i64 },
    /// A number Kafka keeps as a Java `double` (written `1.5E7` or `15000000`), kept here as a
    /// whole number in `min..=max`: larger values, Java's largest double among them, are `max`.
    Double { min: i64, max: i64 },
}

impl SettingKind {
    /// Reads `text` as this kind's value, as an integer (booleans as 0 and 1), or says what
    /// the value must be.
    fn parse(self, text: &str) -> Result<i64, String> {
        let text = text.trim();
        match self {
            SettingKind::Bool => match text {
                "true" => Ok(1),
                "false" => Ok(0),
                _ => Err("must be true or false".into()),
            },
            SettingKind::Int { min, max } => {
                let n: i64 = text.parse().map_err(|_| "not an integer".to_string())?;
                if (min..=max).contains(&n) {
                    Ok(n)
                } else if max == i64::MAX {
                    Err(format!("must be at least {min}"))
                } else {
                    Err(format!("must be {min} to {max}"))
                }
            }
            SettingKind::Double { min, max } => {
                let n: f64 = text.parse().map_err(|_| "not a number".to_string())?;
                if n.is_nan() || n < min as f64 {
                    return Err(format!("must be at least {min}"));
                }
                // `as` saturates: Java's largest double is `max`.
                Ok((n.round() as i64).min(max))
            }
        }
    }

    /// `value` written the way [`SettingKind::parse`] reads it.
    fn render(self, value: i64) -> String {
        match self {
            SettingKind::Bool => (value != 0).to_string(),
            SettingKind::Int { .. } => value.to_string(),
            // As Java prints the largest double, the default of Kafka's unbounded rates.
            SettingKind::Double { max, .. } if value >= max => "1.7976931348623157E308".into(),
            SettingKind::Double { .. } => format!("{value}.0"),
        }
    }
}

/// A field type a broker setting can have: every value crosses the table as an `i64` inside
/// the setting's bounds (booleans as 0 and 1), so the conversions cannot truncate.
trait SettingValue: Copy {
    fn to_i64(self) -> i64;
    fn from_i64(value: i64) -> Self;
}

impl SettingValue for bool {
    fn to_i64(self) -> i64 {
        i64::from(self)
    }
    fn from_i64(value: i64) -> Self {
        value != 0
    }
}

macro_rules! int_setting_value {
    ($($t:ty),*) => {$(
        impl SettingValue for $t {
            fn to_i64(self) -> i64 {
                // Every field's bounds fit i64 (the widest are u32 and i64).
                i64::try_from(self).unwrap_or(i64::MAX)
            }
            fn from_i64(value: i64) -> Self {
                // The setting's bounds fit the field's type; clamping only guards a wrong bound.
                <$t>::try_from(value).unwrap_or(if value < 0 { <$t>::MIN } else { <$t>::MAX })
            }
        }
    )*};
}
int_setting_value!(i32, i64, u32, u64);

/// One broker config: its Kafka name, bounds and meaning, and the [`BrokerConfig`] field it
/// sets. The default is that field's value in `BrokerConfig::default()`.
pub struct BrokerSetting {
    /// The Kafka config name (`inlet.*` for Inlet's own).
    pub name: &'static str,
    pub kind: SettingKind,
    /// What the setting does, for DescribeConfigs' documentation and `inlet config dump`.
    pub doc: &'static str,
    get: fn(&BrokerConfig) -> i64,
    set: fn(&mut BrokerConfig, i64),
}

impl BrokerSetting {
    /// The setting's value in `config`, written as Kafka writes it.
    pub fn value(&self, config: &BrokerConfig) -> String {
        self.kind.render((self.get)(config))
    }

    /// The setting's default, written as Kafka writes it.
    pub fn default_value(&self) -> String {
        self.value(&BrokerConfig::default())
    }
}

impl std::fmt::Debug for BrokerSetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokerSetting")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .finish()
    }
}

/// Upper bound of the settings that Kafka keeps in a Java `int`.
const INT_MAX: i64 = i32::MAX as i64;

/// Defines [`BrokerConfig`] and [`SETTINGS`] from one list: each entry is the setting's doc
/// comment, then `field: Type = default, "kafka.name", kind;`.
macro_rules! broker_settings {
    ($(
        #[doc = $doc:literal]
        $field:ident: $ty:ty = $default:expr, $name:literal, $kind:expr;
    )*) => {
        /// The Kafka endpoint's settings: the node's identity and address, then every broker
        /// config of [`SETTINGS`] as a typed field.
        #[derive(Debug, Clone)]
        pub struct BrokerConfig {
            /// This broker's node id in Metadata responses (`--node-id`; reported as
            /// `broker.id`).
            pub node_id: i32,
            /// Host and port clients are told to connect to.
            pub advertised_host: String,
            pub advertised_port: u16,
            $(
                #[doc = concat!("`", $name, "`:", $doc)]
                pub $field: $ty,
            )*
            /// Defaults for new topics' configs (`table.topic.*` and any other topic config
            /// given at broker level by its topic name).
            pub topic_defaults: TopicConfigs,
            /// `authorizer.class.name`: empty (no authorizer), or one of Kafka's authorizer
            /// classes ([`AUTHORIZERS`]), which turns Inlet's ACL authorizer on.
            pub authorizer_class_name: String,
            /// `super.users`: principals (`User:alice`) the authorizer allows everything,
            /// given separated by `;`.
            pub super_users: Vec<String>,
            /// `sasl.enabled.mechanisms`: what SASL listeners offer ([`crate::sasl::MECHANISMS`]).
            pub sasl_enabled_mechanisms: Vec<String>,
            /// `listeners`: the Kafka listeners (`NAME://HOST:PORT`, comma-separated); empty:
            /// one PLAINTEXT listener at `--kafka-listen`.
            pub listeners: Vec<ListenerSpec>,
            /// `advertised.listeners`: the address each listener tells clients, by name.
            pub advertised_listeners: Vec<ListenerSpec>,
            /// `listener.security.protocol.map`: each listener name's security protocol
            /// (`NAME:PROTOCOL`); the protocols' own names map to themselves.
            pub listener_protocols: BTreeMap<String, String>,
            /// The TLS configs (`ssl.*` of [`SSL_CONFIGS`], each also as
            /// `listener.name.<listener>.ssl.*`), as given; `crate::tls` reads them.
            pub ssl_configs: BTreeMap<String, String>,
            /// The OAUTHBEARER configs (`sasl.oauthbearer.*` of
            /// [`crate::sasl::oauthbearer::CONFIGS`]), as given.
            pub oauthbearer_configs: BTreeMap<String, String>,
            /// `inter.broker.listener.name` (or `security.inter.broker.protocol`): the listener
            /// nodes call each other on; empty: the first (`inter_broker`).
            pub inter_broker_listener_name: String,
            /// `sasl.mechanism.inter.broker.protocol`: the mechanism a node authenticates to
            /// another with, on a SASL inter-broker listener; empty: the listener's first of
            /// SCRAM-SHA-512, SCRAM-SHA-256, PLAIN.
            pub sasl_mechanism_inter_broker_protocol: String,
            /// `sasl.jaas.config` and `listener.name.<listener>.<mechanism>.sasl.jaas.config`:
            /// the node's own credentials for calling other nodes, as given (secret).
            pub sasl_jaas_configs: BTreeMap<String, String>,
            /// Every broker config as given, for DescribeConfigs' sources.
            pub given: BTreeMap<String, String>,
        }

        impl Default for BrokerConfig {
            fn default() -> Self {
                BrokerConfig {
                    node_id: 0,
                    advertised_host: "127.0.0.1".into(),
                    advertised_port: 9092,
                    $( $field: $default, )*
                    topic_defaults: TopicConfigs::default(),
                    authorizer_class_name: String::new(),
                    super_users: Vec::new(),
                    sasl_enabled_mechanisms: DEFAULT_MECHANISMS.iter().map(|m| m.to_string()).collect(),
                    listeners: Vec::new(),
                    advertised_listeners: Vec::new(),
                    listener_protocols: BTreeMap::new(),
                    ssl_configs: BTreeMap::new(),
                    oauthbearer_configs: BTreeMap::new(),
                    inter_broker_listener_name: String::new(),
                    sasl_mechanism_inter_broker_protocol: String::new(),
                    sasl_jaas_configs: BTreeMap::new(),
                    given: BTreeMap::new(),
                }
            }
        }

        /// Every broker config, in DescribeConfigs order.
        pub const SETTINGS: &[BrokerSetting] = &[
            $(
                BrokerSetting {
                    name: $name,
                    kind: $kind,
                    doc: $doc.trim_ascii_start(),
                    get: |c| SettingValue::to_i64(c.$field),
                    set: |c, v| c.$field = <$ty as SettingValue>::from_i64(v),
                },
            )*
        ];
    };
}

broker_settings! {
    /// Metadata and Produce create unknown topics.
    auto_create_topics: bool = true, "auto.create.topics.enable", SettingKind::Bool;
    /// Partitions of auto-created topics.
    num_partitions: i32 = 1, "num.partitions", SettingKind::Int { min: 1, max: 10_000 };
    /// The largest record batch a topic accepts unless its `max.message.bytes` says otherwise.
    message_max_bytes: i32 = 1_048_588, "message.max.bytes", SettingKind::Int { min: 1, max: INT_MAX };
    /// Time retention of topics without `retention.ms`; -1 keeps forever. Also set as `log.retention.hours` or `log.retention.minutes`.
    log_retention_ms: i64 = 7 * 24 * 3600 * 1000, "log.retention.ms", SettingKind::Int { min: -1, max: i64::MAX };
    /// Per-partition size retention of topics without `retention.bytes`; -1 is unlimited.
    log_retention_bytes: i64 = -1, "log.retention.bytes", SettingKind::Int { min: -1, max: i64::MAX };
    /// How long a new consumer group waits for more members before its first rebalance.
    group_initial_rebalance_delay_ms: u64 = 3000, "group.initial.rebalance.delay.ms", SettingKind::Int { min: 0, max: 300_000 };
    /// The shortest session timeout a group member may ask for.
    group_min_session_timeout_ms: u64 = 6000, "group.min.session.timeout.ms", SettingKind::Int { min: 1, max: i64::MAX };
    /// The longest session timeout a group member may ask for.
    group_max_session_timeout_ms: u64 = 1_800_000, "group.max.session.timeout.ms", SettingKind::Int { min: 1, max: i64::MAX };
    /// A request frame longer than this closes the connection before anything is allocated for it; at most `queued.max.request.bytes`.
    socket_request_max_bytes: u32 = 100 * 1024 * 1024, "socket.request.max.bytes", SettingKind::Int { min: 1024, max: INT_MAX };
    /// Request bytes read but not yet answered, over all connections; readers wait for room (back pressure) before reading a frame.
    queued_max_request_bytes: u64 = 256 * 1024 * 1024, "queued.max.request.bytes", SettingKind::Int { min: 1, max: i64::MAX };
    /// (Inlet's own) The most bytes one compressed record batch may decompress to; more is refused as INVALID_RECORD. Records are read streaming, so this bounds time, not memory.
    max_decompressed_batch_bytes: u64 = 64 * 1024 * 1024, "inlet.batch.max.decompressed.bytes", SettingKind::Int { min: 1024, max: i64::MAX };
    /// With SASL, how long an authenticated session lasts before the client must re-authenticate (KIP-368); 0: sessions do not expire.
    connections_max_reauth_ms: u64 = 0, "connections.max.reauth.ms", SettingKind::Int { min: 0, max: i64::MAX };
    /// A connection that sends no request for this long is closed.
    connections_max_idle_ms: u64 = 600_000, "connections.max.idle.ms", SettingKind::Int { min: 1, max: i64::MAX };
    /// Connections open at once; more are closed as they are accepted.
    max_connections: u32 = i32::MAX as u32, "max.connections", SettingKind::Int { min: 0, max: INT_MAX };
    /// Connections open at once from one client address.
    max_connections_per_ip: u32 = i32::MAX as u32, "max.connections.per.ip", SettingKind::Int { min: 0, max: INT_MAX };
    /// (Inlet's own) Once a request's length has arrived, its body must arrive within this, or the connection is closed: a client that announces a body and sends it slowly, or never, holds request memory only this long.
    request_read_timeout_ms: u64 = 30_000, "inlet.request.read.timeout.ms", SettingKind::Int { min: 1, max: i64::MAX };
    /// A partition forgets an idempotent producer that sent it nothing for this long.
    producer_id_expiration_ms: u64 = 86_400_000, "producer.id.expiration.ms", SettingKind::Int { min: 1, max: i64::MAX };
    /// (Inlet's own) Memory for idempotent-producer state over all of a node's partitions, counted at 2 KiB per producer and partition; past it, the producers that sent nothing for longest are forgotten first, as if their producer.id.expiration.ms had passed (checked every inlet.producer.snapshot.interval.ms).
    producer_state_max_bytes: u64 = 256 * 1024 * 1024, "inlet.producer.state.max.bytes", SettingKind::Int { min: 2048, max: i64::MAX };
    /// (Inlet's own) How often a partition's idempotent-producer state is saved to the metadata store; a node that takes the partition over (or restarts) reads only the batches since.
    producer_snapshot_interval_ms: u64 = 1000, "inlet.producer.snapshot.interval.ms", SettingKind::Int { min: 10, max: 3_600_000 };
    /// (Inlet's own) Partitions one node holds over all topics; CreateTopics and CreatePartitions beyond it are refused (INVALID_PARTITIONS).
    max_partitions: u32 = 100_000, "inlet.max.partitions", SettingKind::Int { min: 1, max: 10_000_000 };
    /// How long committed offsets are kept once their group has no members (or, for a consumer group with members, those of topics no member subscribes to, after their commit), in minutes, as Kafka counts it (KIP-211).
    offsets_retention_minutes: u64 = 10_080, "offsets.retention.minutes", SettingKind::Int { min: 1, max: INT_MAX };
    /// How often expired committed offsets are looked for.
    offsets_retention_check_interval_ms: u64 = 600_000, "offsets.retention.check.interval.ms", SettingKind::Int { min: 1, max: i64::MAX };
    /// Whether compacted topics (cleanup.policy with compact) are compacted on this node.
    log_cleaner_enable: bool = true, "log.cleaner.enable", SettingKind::Bool;
    /// How long the compactor waits between two passes over the compacted partitions.
    log_cleaner_backoff_ms: u64 = 15_000, "log.cleaner.backoff.ms", SettingKind::Int { min: 1, max: INT_MAX };
    /// Memory for the compactor's map of keys to their latest offsets (24 bytes per distinct key); a partition with more keys than fit is compacted a part at a time.
    log_cleaner_dedupe_buffer_size: u64 = 128 * 1024 * 1024, "log.cleaner.dedupe.buffer.size", SettingKind::Int { min: 1024, max: i64::MAX };
    /// The bytes a second the compactor may read and write, on average over each round of passes (a bound on its I/O, so that produce and fetch keep the disk and the object store); the largest double, the default: no bound.
    log_cleaner_io_max_bytes_per_second: u64 = i64::MAX as u64, "log.cleaner.io.max.bytes.per.second", SettingKind::Double { min: 1, max: i64::MAX };
    /// (Inlet's own) The most stored bytes the compactor reads and rewrites at once (whole object ranges; at least one).
    log_cleaner_rewrite_max_bytes: u64 = 64 * 1024 * 1024, "inlet.log.cleaner.rewrite.max.bytes", SettingKind::Int { min: 1024, max: i64::MAX };
    /// How long a failed SASL authentication waits before its answer is sent and the connection closed (KIP-306), so a client retrying a wrong password cannot try many a second; at most connections.max.idle.ms.
    connection_failed_authentication_delay_ms: u64 = 100, "connection.failed.authentication.delay.ms", SettingKind::Int { min: 0, max: INT_MAX };
    /// (Inlet's own) Failed authentications (SASL, and the HTTP and registry listeners' basic auth, tokens and token endpoint) one client address may make within `inlet.authentication.failure.window.ms`; beyond them it is refused without a password check until the window ends. 0 (the default): no limit. Every client behind the address is refused: librdkafka retries a wrong password every 100 ms, so one misconfigured client can lock out its neighbours for the window.
    authentication_failures_max: u32 = 0, "inlet.authentication.failures.max", SettingKind::Int { min: 0, max: INT_MAX };
    /// (Inlet's own) The window `inlet.authentication.failures.max` counts in.
    authentication_failure_window_ms: u64 = 60_000, "inlet.authentication.failure.window.ms", SettingKind::Int { min: 1, max: INT_MAX };
    /// (Inlet's own) Memory for the counts of failed authentications by client address (64 bytes an address); addresses beyond it are not counted.
    authentication_failure_tracker_bytes: u64 = 1024 * 1024, "inlet.authentication.failure.tracker.bytes", SettingKind::Int { min: 0, max: i64::MAX };
    /// With the authorizer on, whether a resource that no ACL names is open to every principal (Kafka's default: no).
    allow_everyone_if_no_acl_found: bool = false, "allow.everyone.if.no.acl.found", SettingKind::Bool;
    /// The longest `transaction.timeout.ms` a transactional producer may ask for; InitProducerId with a longer one answers INVALID_TRANSACTION_TIMEOUT.
    transaction_max_timeout_ms: u64 = 900_000, "transaction.max.timeout.ms", SettingKind::Int { min: 1, max: INT_MAX };
    /// How often the transaction coordinator looks for transactions open longer than their timeout, and aborts them.
    transaction_abort_interval_ms: u64 = 10_000, "transaction.abort.timed.out.transaction.cleanup.interval.ms", SettingKind::Int { min: 1, max: INT_MAX };
    /// A transactional id whose producer sent no transactional request for this long is forgotten (its next InitProducerId starts it afresh).
    transactional_id_expiration_ms: u64 = 604_800_000, "transactional.id.expiration.ms", SettingKind::Int { min: 1, max: INT_MAX };
    /// The samples a client quota's rate is measured over (KIP-13).
    quota_window_num: u32 = 11, "quota.window.num", SettingKind::Int { min: 1, max: 3600 };
    /// How long each sample of a client quota's rate lasts, in seconds.
    quota_window_size_seconds: u32 = 1, "quota.window.size.seconds", SettingKind::Int { min: 1, max: 3600 };
    /// (Inlet's own) Memory for the rates client quotas are measured by (about 300 bytes per user and client id with a quota, plus their names); beyond it the ones idle longest are dropped first.
    quota_sensors_max_bytes: u64 = 16 * 1024 * 1024, "inlet.quota.sensors.max.bytes", SettingKind::Int { min: 1024, max: i64::MAX };
    /// The most a Fetch response carries, whatever the request asks (the first batch of a response still goes whole, KIP-74).
    fetch_max_bytes: u32 = 57_671_680, "fetch.max.bytes", SettingKind::Int { min: 1024, max: INT_MAX };
    /// Fetch sessions (KIP-227) a node keeps at once; 0 opens none (every fetch is a full fetch).
    fetch_session_slots: u32 = 1000, "max.incremental.fetch.session.cache.slots", SettingKind::Int { min: 0, max: INT_MAX };
    /// (Inlet's own) Memory for the fetch sessions' partitions (about 120 bytes per partition of a session, plus its topic name); a new session that does not fit is not opened.
    fetch_session_max_bytes: u64 = 64 * 1024 * 1024, "inlet.fetch.session.cache.max.bytes", SettingKind::Int { min: 1024, max: i64::MAX };
}

/// One entry of `listeners` or `advertised.listeners`: `NAME://HOST:PORT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerSpec {
    pub name: String,
    /// Empty: every interface (when binding).
    pub host: String,
    pub port: u16,
}

/// The mechanisms Inlet offers, in `sasl.enabled.mechanisms`' spelling.
pub const MECHANISMS: &[&str] = &["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"];

/// The mechanisms SASL listeners offer unless `sasl.enabled.mechanisms` says otherwise
/// (OAUTHBEARER is turned on by naming it, with its `sasl.oauthbearer.*` configs).
pub const DEFAULT_MECHANISMS: &[&str] = &["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"];

/// A node of the cluster as Kafka clients are told of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerAddr {
    pub node_id: i32,
    /// The address of its first listener (the one nodes call each other on).
    pub host: String,
    pub port: u16,
    /// The address of each of its listeners, by name; empty when it has one.
    pub listeners: Vec<ListenerSpec>,
}

impl BrokerAddr {
    /// Its address on listener `name`: that listener's, or the first's when it has no such.
    pub fn on(&self, name: &str) -> (&str, u16) {
        self.listeners
            .iter()
            .find(|l| l.name == name)
            .map(|l| (l.host.as_str(), l.port))
            .unwrap_or((self.host.as_str(), self.port))
    }
}

/// Kafka's TLS configs that Inlet reads (`crate::tls::TlsSettings`).
pub const SSL_CONFIGS: &[&str] = &[
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.client.auth",
    "ssl.key.password",
];

/// Whether `key` is one of [`SSL_CONFIGS`], plainly or for one listener.
fn is_ssl_config(key: &str) -> bool {
    let plain = key
        .strip_prefix("listener.name.")
        .and_then(|rest| rest.split_once('.'))
        .map_or(key, |(_, config)| config);
    SSL_CONFIGS.contains(&plain)
}

/// Kafka's security protocols.
pub const SECURITY_PROTOCOLS: &[&str] = &["PLAINTEXT", "SASL_PLAINTEXT", "SSL", "SASL_SSL"];

/// Reads a `listeners`-style list: `NAME://HOST:PORT` entries separated by commas, each name
/// once.
pub fn parse_listeners(text: &str) -> Result<Vec<ListenerSpec>, String> {
    let mut out: Vec<ListenerSpec> = Vec::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, address) = entry
            .split_once("://")
            .ok_or_else(|| format!("{entry:?} is not of the form NAME://HOST:PORT"))?;
        let (host, port) = address
            .rsplit_once(':')
            .ok_or_else(|| format!("{entry:?} has no port"))?;
        let port: u16 = port
            .parse()
            .map_err(|_| format!("{entry:?}: the port is not a number"))?;
        let name = name.to_ascii_uppercase();
        if out.iter().any(|l| l.name == name) {
            return Err(format!("listener {name} is named twice"));
        }
        out.push(ListenerSpec {
            name,
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
            port,
        });
    }
    Ok(out)
}

impl BrokerConfig {
    /// The security protocol of listener `name`: by `listener.security.protocol.map`, or the
    /// name itself when it is a protocol's.
    pub fn protocol_of(&self, name: &str) -> Option<&str> {
        self.listener_protocols
            .get(name)
            .map(String::as_str)
            .or_else(|| SECURITY_PROTOCOLS.iter().copied().find(|p| *p == name))
    }
}

/// The `authorizer.class.name` values that turn Inlet's authorizer on: Kafka's own
/// authorizers, whose semantics it follows (`ingest/src/acl`).
pub const AUTHORIZERS: &[&str] = &[
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
    "kafka.security.auth.SimpleAclAuthorizer",
];

/// Kafka's other spellings of a setting: the name, the setting it sets, and the factor from
/// its unit to the setting's (-1 stays -1).
const ALIASES: &[(&str, &str, i64)] = &[
    ("log.retention.hours", "log.retention.ms", 3_600_000),
    ("log.retention.minutes", "log.retention.ms", 60_000),
];

/// Kafka's broker-level names of topic configs (the `log.*` synonyms): given at broker level,
/// each sets the default of the topic config it names, as the topic config's own name does.
const TOPIC_SYNONYMS: &[(&str, &str)] = &[
    ("log.cleanup.policy", "cleanup.policy"),
    ("log.message.timestamp.type", "message.timestamp.type"),
    ("log.segment.bytes", "segment.bytes"),
    ("log.roll.ms", "segment.ms"),
    ("log.roll.jitter.ms", "segment.jitter.ms"),
    (
        "log.message.timestamp.before.max.ms",
        "message.timestamp.before.max.ms",
    ),
    (
        "log.message.timestamp.after.max.ms",
        "message.timestamp.after.max.ms",
    ),
    (
        "log.message.timestamp.difference.max.ms",
        "message.timestamp.difference.max.ms",
    ),
    ("log.flush.interval.messages", "flush.messages"),
    ("log.flush.interval.ms", "flush.ms"),
    ("log.cleaner.delete.retention.ms", "delete.retention.ms"),
    ("log.cleaner.min.compaction.lag.ms", "min.compaction.lag.ms"),
    ("log.cleaner.max.compaction.lag.ms", "max.compaction.lag.ms"),
    (
        "log.cleaner.min.cleanable.ratio",
        "min.cleanable.dirty.ratio",
    ),
    ("log.segment.delete.delay.ms", "file.delete.delay.ms"),
    ("log.index.interval.bytes", "index.interval.bytes"),
    ("log.index.size.max.bytes", "segment.index.bytes"),
    ("log.preallocate", "preallocate"),
    (
        "log.message.downconversion.enable",
        "message.downconversion.enable",
    ),
    ("log.message.format.version", "message.format.version"),
    ("log.local.retention.ms", "local.retention.ms"),
    ("log.local.retention.bytes", "local.retention.bytes"),
];

/// Kafka broker configs that have no part in Inlet (its threads, replication and Kerberos
/// belong to Kafka's design, not Inlet's), accepted so that a Kafka `server.properties` or an
/// admin tool's change applies, kept and reported by DescribeConfigs, and otherwise without
/// effect.
pub const KEPT_WITHOUT_EFFECT: &[&str] = &[
    "background.threads",
    "num.io.threads",
    "num.network.threads",
    "num.replica.fetchers",
    "num.recovery.threads.per.data.dir",
    "log.cleaner.threads",
    "log.cleaner.io.buffer.size",
    "log.cleaner.io.buffer.load.factor",
    "sasl.kerberos.kinit.cmd",
    "sasl.kerberos.min.time.before.relogin",
    "sasl.kerberos.principal.to.local.rules",
    "sasl.kerberos.service.name",
    "sasl.kerberos.ticket.renew.jitter",
    "sasl.kerberos.ticket.renew.window.factor",
];

/// The topic config whose default broker config `key` sets: a `log.*` synonym's topic
/// config, or the topic config named by `key` itself.
pub(crate) fn topic_default_set_by(key: &str) -> Option<&'static str> {
    TOPIC_SYNONYMS
        .iter()
        .find(|(synonym, _)| *synonym == key)
        .and_then(|(_, name)| topic_config::canonical_name(name))
        .or_else(|| topic_config::canonical_name(key))
}

/// The name of the setting that config `key` sets: itself, or what an alias such as
/// `log.retention.hours` stands for.
pub fn setting_set_by(key: &str) -> Option<&'static str> {
    setting(key).map(|s| s.name).or_else(|| {
        ALIASES
            .iter()
            .find(|(alias, _, _)| *alias == key)
            .map(|(_, target, _)| *target)
    })
}

/// The DescribeConfigs entry that broker config `key` shows up in: its setting's name, the
/// topic config it sets the default of, or itself for one kept without effect.
pub(crate) fn described_as(key: &str) -> Option<&str> {
    setting_set_by(key)
        .or_else(|| topic_default_set_by(key))
        .or_else(|| KEPT_WITHOUT_EFFECT.iter().copied().find(|k| *k == key))
}

/// The setting named `name`, if it is one.
pub fn setting(name: &str) -> Option<&'static BrokerSetting> {
    SETTINGS.iter().find(|s| s.name == name)
}

impl BrokerConfig {
    /// Applies broker configs given by their Kafka names. Unknown names are refused, so a
    /// typo does not silently keep a default; so are values outside a setting's bounds.
    pub fn apply_kafka_configs(
        &mut self,
        configs: &BTreeMap<String, String>,
    ) -> Result<(), String> {
        self.apply_named(configs, "--kafka-config ")
    }

    /// [`BrokerConfig::apply_kafka_configs`], with `origin` before each refused `KEY=VALUE`
    /// in its reason (`--kafka-config ` for the node's own, nothing for a dynamic change).
    pub(crate) fn apply_named(
        &mut self,
        configs: &BTreeMap<String, String>,
        origin: &str,
    ) -> Result<(), String> {
        for (key, value) in configs {
            let bad = |what: &str| format!("{origin}{key}={value}: {what}");
            if key == "authorizer.class.name" {
                let name = value.trim();
                if !name.is_empty() && !AUTHORIZERS.contains(&name) {
                    return Err(bad(&format!(
                        "Inlet's authorizer is built in and follows Kafka's; name one of {} (or nothing, for no authorizer)",
                        AUTHORIZERS.join(", ")
                    )));
                }
                self.authorizer_class_name = name.to_string();
            } else if key == "sasl.enabled.mechanisms" {
                let mechanisms: Vec<String> = value
                    .split(',')
                    .map(|m| m.trim().to_string())
                    .filter(|m| !m.is_empty())
                    .collect();
                if let Some(m) = mechanisms
                    .iter()
                    .find(|m| !MECHANISMS.contains(&m.as_str()))
                {
                    return Err(bad(&format!(
                        "{m} is not offered; Inlet offers {}",
                        MECHANISMS.join(", ")
                    )));
                }
                self.sasl_enabled_mechanisms = mechanisms;
            } else if key == "listeners" {
                self.listeners = parse_listeners(value).map_err(|e| bad(&e))?;
            } else if key == "advertised.listeners" {
                self.advertised_listeners = parse_listeners(value).map_err(|e| bad(&e))?;
            } else if key == "listener.security.protocol.map" {
                let mut map = BTreeMap::new();
                for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
                    let (name, protocol) = entry.split_once(':').ok_or_else(|| {
                        bad(&format!("{entry:?} is not of the form NAME:PROTOCOL"))
                    })?;
                    let protocol = protocol.trim().to_ascii_uppercase();
                    if !SECURITY_PROTOCOLS.contains(&protocol.as_str()) {
                        return Err(bad(&format!(
                            "{protocol} is not a security protocol ({})",
                            SECURITY_PROTOCOLS.join(", ")
                        )));
                    }
                    map.insert(name.trim().to_ascii_uppercase(), protocol);
                }
                self.listener_protocols = map;
            } else if key == "inter.broker.listener.name" || key == "security.inter.broker.protocol"
            {
                self.inter_broker_listener_name = value.trim().to_ascii_uppercase();
            } else if key == "sasl.mechanism.inter.broker.protocol" {
                let m = value.trim().to_ascii_uppercase();
                if !["", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"].contains(&m.as_str()) {
                    return Err(bad(
                        "a node authenticates to another with PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512",
                    ));
                }
                self.sasl_mechanism_inter_broker_protocol = m;
            } else if key == "sasl.jaas.config"
                || (key.starts_with("listener.name.") && key.ends_with(".sasl.jaas.config"))
            {
                self.sasl_jaas_configs
                    .insert(key.clone(), value.trim().to_string());
            } else if is_ssl_config(key) {
                self.ssl_configs
                    .insert(key.clone(), value.trim().to_string());
            } else if crate::sasl::oauthbearer::CONFIGS.contains(&key.as_str()) {
                self.oauthbearer_configs
                    .insert(key.clone(), value.trim().to_string());
            } else if key == "super.users" {
                let users: Vec<String> = value
                    .split(';')
                    .map(|u| u.trim().to_string())
                    .filter(|u| !u.is_empty())
                    .collect();
                if let Some(u) = users.iter().find(|u| !u.contains(':')) {
                    return Err(bad(&format!(
                        "{u:?} is not a principal of the form User:name"
                    )));
                }
                self.super_users = users;
            } else if let Some(s) = setting(key) {
                let n = s.kind.parse(value).map_err(|e| bad(&e))?;
                (s.set)(self, n);
            } else if let Some(&(_, target, unit)) = ALIASES.iter().find(|a| a.0 == key) {
                let s = setting(target).ok_or_else(|| bad("an alias of an unknown setting"))?;
                let n = SettingKind::Int {
                    min: -1,
                    max: i64::MAX / unit,
                }
                .parse(value)
                .map_err(|e| bad(&e))?;
                (s.set)(self, if n == -1 { -1 } else { n * unit });
            } else if KEPT_WITHOUT_EFFECT.contains(&key.as_str()) {
                // Kept for DescribeConfigs only (see the list's doc).
            } else {
                // Topic configs given at broker level (by their own names or Kafka's `log.*`
                // synonyms) become defaults for topics that do not set them.
                let name = topic_default_set_by(key).ok_or_else(|| bad("unknown broker config"))?;
                let one = BTreeMap::from([(name.to_string(), value.clone())]);
                let parsed = TopicConfigs::parse(&one).map_err(|e| bad(&e.message))?;
                self.topic_defaults.merge(parsed);
            }
            self.given.insert(key.clone(), value.clone());
        }
        if u64::from(self.socket_request_max_bytes) > self.queued_max_request_bytes {
            return Err(format!(
                "socket.request.max.bytes ({}) exceeds queued.max.request.bytes ({}): a request that large could never be read",
                self.socket_request_max_bytes, self.queued_max_request_bytes
            ));
        }
        for l in &self.listeners {
            if self.protocol_of(&l.name).is_none() {
                return Err(format!(
                    "listener {} has no security protocol: name it by one ({}) or map it in listener.security.protocol.map",
                    l.name,
                    SECURITY_PROTOCOLS.join(", ")
                ));
            }
        }
        if let Some(a) = self
            .advertised_listeners
            .iter()
            .find(|a| !self.listeners.iter().any(|l| l.name == a.name))
        {
            return Err(format!(
                "advertised.listeners names {}, which listeners does not",
                a.name
            ));
        }
        crate::sasl::oauthbearer::Settings::from_configs(&self.oauthbearer_configs)?;
        if self.connection_failed_authentication_delay_ms >= self.connections_max_idle_ms {
            return Err(format!(
                "connection.failed.authentication.delay.ms ({}) must be less than connections.max.idle.ms ({})",
                self.connection_failed_authentication_delay_ms, self.connections_max_idle_ms
            ));
        }
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms {
            return Err("group.min.session.timeout.ms exceeds group.max.session.timeout.ms".into());
        }
        Ok(())
    }

    /// Every broker config with its current value and whether that is the default, for
    /// DescribeConfigs: [`SETTINGS`], then `broker.id`, then the topic defaults given at
    /// broker level.
    pub fn describe(&self) -> Vec<(String, String, bool)> {
        let mut out: Vec<(String, String, bool)> = SETTINGS
            .iter()
            .map(|s| (s.name.to_string(), s.value(self), false))
            .collect();
        out.push(("broker.id".into(), self.node_id.to_string(), false));
        out.push((
            "authorizer.class.name".into(),
            self.authorizer_class_name.clone(),
            false,
        ));
        out.push(("super.users".into(), self.super_users.join(";"), false));
        out.push((
            "sasl.enabled.mechanisms".into(),
            self.sasl_enabled_mechanisms.join(","),
            false,
        ));
        let render = |specs: &[ListenerSpec]| {
            specs
                .iter()
                .map(|l| format!("{}://{}:{}", l.name, l.host, l.port))
                .collect::<Vec<_>>()
                .join(",")
        };
        out.push(("listeners".into(), render(&self.listeners), false));
        out.push((
            "advertised.listeners".into(),
            render(&self.advertised_listeners),
            false,
        ));
        for (name, value) in &self.ssl_configs {
            let shown = if name.ends_with("password") {
                "[hidden]".to_string()
            } else {
                value.clone()
            };
            out.push((name.clone(), shown, false));
        }
        for (name, value) in &self.oauthbearer_configs {
            out.push((name.clone(), value.clone(), false));
        }
        out.push((
            "inter.broker.listener.name".into(),
            self.inter_broker_listener_name.clone(),
            false,
        ));
        out.push((
            "sasl.mechanism.inter.broker.protocol".into(),
            self.sasl_mechanism_inter_broker_protocol.clone(),
            false,
        ));
        for name in self.sasl_jaas_configs.keys() {
            out.push((name.clone(), "[hidden]".into(), false));
        }
        out.push((
            "listener.security.protocol.map".into(),
            self.listener_protocols
                .iter()
                .map(|(n, p)| format!("{n}:{p}"))
                .collect::<Vec<_>>()
                .join(","),
            false,
        ));
        for (name, value) in self.topic_defaults.explicit() {
            out.push((name.clone(), value.clone(), false));
        }
        for (name, value) in &self.given {
            if KEPT_WITHOUT_EFFECT.contains(&name.as_str()) {
                out.push((name.clone(), value.clone(), false));
            }
        }
        for entry in out.iter_mut() {
            entry.2 = !self.given.contains_key(&entry.0)
                && !self
                    .given
                    .keys()
                    .any(|k| described_as(k) == Some(entry.0.as_str()));
        }
        out
    }
}

/// DescribeConfigs of a topic: here rather than in `topic_config`, since it reads the broker's
/// defaults (so `topic_config` needs nothing of this module).
impl TopicConfigs {
    /// Every known config with its effective value and whether it is a default, for
    /// DescribeConfigs. `broker_defaults` supplies values that come from the broker.
    pub fn describe(&self, broker: &BrokerConfig) -> Vec<topic_config::DescribedConfig> {
        topic_config::DEFS
            .iter()
            .map(|d| {
                let (value, source) = if let Some(v) = self.set.get(d.name) {
                    (v.clone(), topic_config::ConfigSource::Topic)
                } else if let Some(v) = broker.topic_defaults.get(d.name) {
                    (v.to_string(), topic_config::ConfigSource::Broker)
                } else {
                    let v = match d.name {
                        "retention.ms" => broker.log_retention_ms.to_string(),
                        "retention.bytes" => broker.log_retention_bytes.to_string(),
                        "max.message.bytes" => broker.message_max_bytes.to_string(),
                        _ => d.default.to_string(),
                    };
                    (v, topic_config::ConfigSource::Default)
                };
                topic_config::DescribedConfig {
                    name: d.name,
                    value,
                    source,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn applied(pairs: &[(&str, &str)]) -> Result<BrokerConfig, String> {
        let mut config = BrokerConfig::default();
        let given = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        config.apply_kafka_configs(&given).map(|()| config)
    }

    #[test]
    fn every_setting_has_a_unique_name_and_a_default_inside_its_bounds() {
        let mut names: Vec<_> = SETTINGS.iter().map(|s| s.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), SETTINGS.len(), "a setting is defined twice");
        for s in SETTINGS {
            assert!(
                s.kind.parse(&s.default_value()).is_ok(),
                "{}'s default {} is outside its bounds",
                s.name,
                s.default_value()
            );
            assert!(!s.doc.is_empty() && !s.doc.starts_with(' '), "{}", s.name);
        }
    }

    #[test]
    fn every_described_value_is_accepted_back_and_changes_nothing() {
        let tuned = applied(&[
            ("num.partitions", "3"),
            ("auto.create.topics.enable", "false"),
            ("log.retention.hours", "2"),
            ("fetch.max.bytes", "2048"),
        ])
        .expect("valid configs");
        let described: BTreeMap<String, String> = tuned
            .describe()
            .into_iter()
            .filter(|(name, _, _)| name != "broker.id")
            .map(|(name, value, _)| (name, value))
            .collect();
        let again = applied(
            &described
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect::<Vec<_>>(),
        )
        .expect("every described value reads back");
        for s in SETTINGS {
            assert_eq!(s.value(&again), s.value(&tuned), "{}", s.name);
        }
        assert_eq!(tuned.num_partitions, 3);
        assert!(!tuned.auto_create_topics);
        assert_eq!(tuned.log_retention_ms, 7_200_000);
        assert_eq!(tuned.fetch_max_bytes, 2048);
    }

    #[test]
    fn a_double_setting_reads_as_java_writes_it() {
        let name = "log.cleaner.io.max.bytes.per.second";
        let unbounded = setting(name).expect("defined").default_value();
        assert_eq!(unbounded, "1.7976931348623157E308");
        assert_eq!(
            applied(&[(name, "1.5E7")])
                .expect("a double")
                .log_cleaner_io_max_bytes_per_second,
            15_000_000
        );
        assert_eq!(
            applied(&[(name, &unbounded)])
                .expect("the largest double")
                .log_cleaner_io_max_bytes_per_second,
            i64::MAX as u64
        );
        let tuned = applied(&[(name, "20000000")]).expect("an integer");
        assert_eq!(setting(name).expect("defined").value(&tuned), "20000000.0");
        for bad in ["0", "-5", "NaN", "fast"] {
            assert!(applied(&[(name, bad)]).is_err(), "{bad} is refused");
        }
    }

    #[test]
    fn describe_marks_what_was_given_and_keeps_the_rest_default() {
        let config = applied(&[("log.retention.minutes", "-1"), ("max.connections", "5")])
            .expect("valid configs");
        let described = config.describe();
        let entry = |name: &str| {
            described
                .iter()
                .find(|(n, _, _)| n == name)
                .cloned()
                .unwrap_or_else(|| panic!("{name} is not described"))
        };
        assert_eq!(
            entry("log.retention.ms"),
            ("log.retention.ms".into(), "-1".into(), false)
        );
        assert_eq!(
            entry("max.connections"),
            ("max.connections".into(), "5".into(), false)
        );
        assert_eq!(
            entry("num.partitions"),
            ("num.partitions".into(), "1".into(), true)
        );
        assert_eq!(entry("broker.id"), ("broker.id".into(), "0".into(), true));
    }

    #[test]
    fn values_outside_the_bounds_and_unknown_names_are_refused_with_the_reason() {
        for (pairs, expected) in [
            (
                vec![("num.partitions", "0")],
                "--kafka-config num.partitions=0: must be 1 to 10000",
            ),
            (
                vec![("auto.create.topics.enable", "yes")],
                "--kafka-config auto.create.topics.enable=yes: must be true or false",
            ),
            (
                vec![("log.retention.ms", "-2")],
                "--kafka-config log.retention.ms=-2: must be at least -1",
            ),
            (
                vec![("log.retention.hours", "x")],
                "--kafka-config log.retention.hours=x: not an integer",
            ),
            (
                vec![("num.partition", "3")],
                "--kafka-config num.partition=3: unknown broker config",
            ),
            (
                vec![("socket.request.max.bytes", "4096"), ("queued.max.request.bytes", "2048")],
                "socket.request.max.bytes (4096) exceeds queued.max.request.bytes (2048): a request that large could never be read",
            ),
            (
                vec![("group.min.session.timeout.ms", "10"), ("group.max.session.timeout.ms", "5")],
                "group.min.session.timeout.ms exceeds group.max.session.timeout.ms",
            ),
        ] {
            assert_eq!(applied(&pairs).err().as_deref(), Some(expected), "{pairs:?}");
        }
    }

    #[test]
    fn topic_configs_given_at_broker_level_become_topic_defaults() {
        let config = applied(&[("table.topic.commit.interval.ms", "5000")]).expect("valid");
        assert_eq!(
            config.topic_defaults.get("table.topic.commit.interval.ms"),
            Some("5000")
        );
        assert!(config
            .describe()
            .iter()
            .any(|(n, v, default)| n == "table.topic.commit.interval.ms"
                && v == "5000"
                && !default));
    }

    #[test]
    fn the_architecture_doc_lists_every_broker_setting() {
        let doc = include_str!("../../docs/architecture.md");
        let section = doc
            .split_once("### Broker configs")
            .map(|(_, rest)| rest.split("\n### ").next().unwrap_or(rest))
            .expect("docs/architecture.md has a Broker configs section");
        for s in SETTINGS {
            assert!(
                section.contains(&format!("`{}`", s.name)),
                "docs/architecture.md, Broker configs, does not list {}",
                s.name
            );
        }
    }
}
