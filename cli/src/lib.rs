//! Inlet's client-side commands (docs/cli.md): what a user runs against a node, as Kafka's and
//! Confluent's console tools do it, so that nothing but the `inlet` binary is needed to reach a
//! first row.
//!
//! - [`topic`]: `inlet topic create|list|describe|alter|delete` (Kafka's admin API, as
//!   `kafka-topics` and `rpk topic`);
//! - [`produce`]: `inlet produce`, JSON lines to schema-framed records (as
//!   `kafka-avro-console-producer`, with its `--property` spellings);
//! - [`consume`]: `inlet consume`, framed records back to JSON lines;
//! - [`group`]: `inlet group list|describe`, consumer groups with their lag;
//! - [`table`]: `inlet table list|describe|snapshots|files`, through the node's catalog and
//!   SQL;
//! - [`schema`]: `inlet schema list|get|diff`, the registry's subjects and a field-level diff
//!   of two versions;
//! - [`alter`]: IncrementalAlterConfigs through librdkafka's C API (the `rdkafka` crate
//!   offers only AlterConfigs);
//! - [`kafka`]: the client settings every Kafka command shares (bootstrap servers, security,
//!   librdkafka properties); [`registry`]: the Schema Registry calls of the producer and the
//!   consumer.
//!
//! Invariant: every command ends with an [`Exit`] code scripts can rely on, and its message on
//! standard error; data goes to standard output only.

pub mod alter;
pub mod consume;
pub mod group;
pub mod kafka;
pub mod produce;
pub mod registry;
pub mod schema;
pub mod table;
pub mod topic;

/// Why a command failed, with the exit code it ends with.
#[derive(Debug)]
pub struct Failure {
    pub exit: Exit,
    pub message: String,
}

/// The exit codes of the client commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 1: the operation failed: a node refused it or could not be reached, or an input line
    /// did not match its schema.
    Failed = 1,
    /// 2: the command line or a file it names is wrong (clap's own code for bad flags).
    Usage = 2,
    /// 3: what the command names does not exist (a topic, a schema).
    NotFound = 3,
}

impl Failure {
    pub fn failed(message: impl Into<String>) -> Failure {
        Failure {
            exit: Exit::Failed,
            message: message.into(),
        }
    }

    pub fn usage(message: impl Into<String>) -> Failure {
        Failure {
            exit: Exit::Usage,
            message: message.into(),
        }
    }

    pub fn not_found(message: impl Into<String>) -> Failure {
        Failure {
            exit: Exit::NotFound,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<rdkafka::error::KafkaError> for Failure {
    fn from(e: rdkafka::error::KafkaError) -> Failure {
        match kafka::last_client_error() {
            // What librdkafka said on its own, e.g. why SASL authentication failed.
            Some(said) => Failure::failed(format!("{e} (the client reported: {said})")),
            None => Failure::failed(e.to_string()),
        }
    }
}

pub type Result<T> = std::result::Result<T, Failure>;

/// A `--format` of the listing commands: `table` (for people) or `json` (for scripts).
pub(crate) fn check_format(format: &str) -> Result<()> {
    match format {
        "table" | "json" => Ok(()),
        other => Err(Failure::usage(format!(
            "--format {other:?}: expected table or json"
        ))),
    }
}

/// `s` as one segment of a URL path: unreserved characters kept, every other byte
/// percent-encoded.
pub(crate) fn path_segment(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
