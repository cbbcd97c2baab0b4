//! `inlet consume`: a topic's records to standard output, one line each, values (and keys)
//! framed by a Schema Registry serializer decoded to JSON with their schema, as
//! `kafka-avro-console-consumer` prints them; other bytes as text.
//!
//! Without `--group` the consumer assigns itself every partition and commits nothing (no group
//! is left behind on the node); with one it joins the group and commits what it printed.
//! `--from-beginning` starts where a partition (or a group without offsets) starts, otherwise
//! at its end. It stops after `--max-messages`, or once nothing arrived for `--timeout-ms`.
//!
//! Invariant: a record whose schema is known but whose bytes do not decode is reported on
//! standard error with its partition and offset, and the run ends with exit 1 after the rest.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant};

use inlet_schema_registry::framing::{self, Value as Decoded};
use inlet_schema_registry::{avro_json, ParsedSchema, StoredSchema};
use rdkafka::consumer::Consumer;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use crate::kafka::{KafkaArgs, KafkaConsumer, Reporter};
use crate::registry::Registry;
use crate::topic::key_values;
use crate::{Exit, Failure, Result};

#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:
  inlet consume --topic orders --from-beginning --max-messages 10
  inlet consume --topic orders --group audit --property print.key=true --property print.offset=true")]
pub struct ConsumeArgs {
    #[arg(long)]
    pub topic: String,
    /// Start at the beginning of each partition (or of a group without offsets).
    #[arg(long)]
    pub from_beginning: bool,
    /// Join this consumer group and commit what was printed.
    #[arg(long)]
    pub group: Option<String>,
    /// Stop after this many records.
    #[arg(long)]
    pub max_messages: Option<u64>,
    /// Stop once no record arrived for this many milliseconds.
    #[arg(long)]
    pub timeout_ms: Option<u64>,
    /// The Schema Registry (schema.registry.url).
    #[arg(long, env = "INLET_REGISTRY", default_value = "http://127.0.0.1:8081")]
    pub registry: String,
    /// A console consumer property, KEY=VALUE (repeatable): print.key, print.timestamp,
    /// print.partition, print.offset, key.separator, schema.registry.url,
    /// basic.auth.user.info.
    #[arg(long = "property", value_name = "KEY=VALUE")]
    pub property: Vec<String>,
    #[command(flatten)]
    pub kafka: KafkaArgs,
}

const PROPERTIES: &[&str] = &[
    "print.key",
    "print.timestamp",
    "print.partition",
    "print.offset",
    "key.separator",
    "schema.registry.url",
    "basic.auth.user.info",
    "basic.auth.credentials.source",
];

/// How long a group's member waits for its partitions before `--timeout-ms` counts.
const ASSIGNMENT_WAIT: Duration = Duration::from_secs(60);

/// What each output line shows besides the value.
struct Show {
    key: bool,
    timestamp: bool,
    partition: bool,
    offset: bool,
    separator: String,
}

pub async fn run(args: ConsumeArgs) -> Result<()> {
    let props = key_values(&args.property)?;
    if let Some(unknown) = props.keys().find(|k| !PROPERTIES.contains(&k.as_str())) {
        return Err(Failure::usage(format!(
            "--property {unknown}: not a property of the console consumer that inlet reads ({})",
            PROPERTIES.join(", ")
        )));
    }
    let on = |k: &str| props.get(k).is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let show = Show {
        key: on("print.key"),
        timestamp: on("print.timestamp"),
        partition: on("print.partition"),
        offset: on("print.offset"),
        separator: props
            .get("key.separator")
            .cloned()
            .unwrap_or_else(|| "\t".into()),
    };
    let url = props.get("schema.registry.url").unwrap_or(&args.registry);
    let registry = Registry::new(url, props.get("basic.auth.user.info").map(String::as_str))?;
    let consumer = subscribe(&args)?;
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || print_records(&consumer, &registry, &handle, &args, &show))
        .await
        .map_err(|e| Failure::failed(format!("the consumer stopped: {e}")))?
}

fn subscribe(args: &ConsumeArgs) -> Result<KafkaConsumer> {
    let mut config = args.kafka.client_config()?;
    config
        .set("allow.auto.create.topics", "false")
        .set("enable.partition.eof", "false")
        .set(
            "auto.offset.reset",
            if args.from_beginning {
                "earliest"
            } else {
                "latest"
            },
        );
    match &args.group {
        Some(group) => {
            let consumer: KafkaConsumer = config
                .set("group.id", group)
                .set("enable.auto.commit", "true")
                .set("enable.auto.offset.store", "false")
                .create_with_context(Reporter)?;
            crate::kafka::partitions(&consumer, &args.topic)?;
            consumer.subscribe(&[&args.topic])?;
            Ok(consumer)
        }
        None => {
            // librdkafka's consumer poll wants a group id even when it only assigns; this one
            // never joins or commits, so no group appears on the node.
            let consumer: KafkaConsumer = config
                .set("group.id", "inlet-consume")
                .set("enable.auto.commit", "false")
                .create_with_context(Reporter)?;
            let partitions = crate::kafka::partitions(&consumer, &args.topic)?;
            let mut assignment = TopicPartitionList::new();
            let start = if args.from_beginning {
                Offset::Beginning
            } else {
                Offset::End
            };
            for p in partitions {
                assignment.add_partition_offset(&args.topic, p, start)?;
            }
            consumer.assign(&assignment)?;
            Ok(consumer)
        }
    }
}

#[allow(clippy::disallowed_methods)] // Instant: only how long nothing arrived is measured
fn print_records(
    consumer: &KafkaConsumer,
    registry: &Registry,
    handle: &tokio::runtime::Handle,
    args: &ConsumeArgs,
    show: &Show,
) -> Result<()> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let idle = args.timeout_ms.map(Duration::from_millis);
    let started = Instant::now();
    let mut last = started;
    let (mut printed, mut undecodable) = (0u64, 0u64);
    let mut schemas: BTreeMap<u32, Option<StoredSchema>> = BTreeMap::new();
    let mut text = |bytes: Option<&[u8]>| -> std::result::Result<String, String> {
        render(bytes, registry, handle, &mut schemas)
    };
    while args.max_messages.is_none_or(|m| printed < m) {
        if idle.is_some_and(|d| last.elapsed() >= d) {
            break;
        }
        let Some(polled) = consumer.poll(Duration::from_millis(100)) else {
            // A group's member has nothing to wait for until it is assigned partitions (a
            // join waits out group.initial.rebalance.delay.ms): the idle time starts then, or
            // after a minute without an assignment.
            if args.group.is_some()
                && started.elapsed() < ASSIGNMENT_WAIT
                && consumer.assignment().is_ok_and(|a| a.count() == 0)
            {
                last = Instant::now();
            }
            if out.flush().is_err() {
                return Ok(());
            }
            continue;
        };
        let message = polled?;
        last = Instant::now();
        let mut line = String::new();
        if show.timestamp {
            match message.timestamp() {
                rdkafka::Timestamp::CreateTime(t) => line.push_str(&format!("CreateTime:{t}\t")),
                rdkafka::Timestamp::LogAppendTime(t) => {
                    line.push_str(&format!("LogAppendTime:{t}\t"))
                }
                rdkafka::Timestamp::NotAvailable => line.push_str("NO_TIMESTAMP\t"),
            }
        }
        if show.partition {
            line.push_str(&format!("Partition:{}\t", message.partition()));
        }
        if show.offset {
            line.push_str(&format!("Offset:{}\t", message.offset()));
        }
        let rendered = if show.key {
            text(message.key()).map(|k| format!("{k}{}", show.separator))
        } else {
            Ok(String::new())
        }
        .and_then(|k| text(message.payload()).map(|v| format!("{k}{v}")));
        match rendered {
            Ok(record) => {
                line.push_str(&record);
                if writeln!(out, "{line}").is_err() {
                    // The reader went away (`| head`): done.
                    return Ok(());
                }
            }
            Err(e) => {
                undecodable += 1;
                let _ = out.flush();
                eprintln!(
                    "partition {} offset {}: {e}",
                    message.partition(),
                    message.offset()
                );
            }
        }
        printed += 1;
        if args.group.is_some() {
            consumer.store_offset_from_message(&message)?;
        }
    }
    let _ = out.flush();
    if args.group.is_some() {
        // What was printed is committed before the consumer leaves.
        let _ = consumer.commit_consumer_state(rdkafka::consumer::CommitMode::Sync);
    }
    if undecodable > 0 {
        return Err(Failure {
            exit: Exit::Failed,
            message: format!("{undecodable} of {printed} records did not decode"),
        });
    }
    Ok(())
}

/// A key or value as text: framed records decoded to JSON with their schema, other bytes as
/// (lossy) UTF-8, no bytes as `null`.
fn render(
    bytes: Option<&[u8]>,
    registry: &Registry,
    handle: &tokio::runtime::Handle,
    schemas: &mut BTreeMap<u32, Option<StoredSchema>>,
) -> std::result::Result<String, String> {
    let Some(bytes) = bytes else {
        return Ok("null".into());
    };
    let Ok((id, payload)) = framing::split(bytes) else {
        return Ok(String::from_utf8_lossy(bytes).into_owned());
    };
    if let std::collections::btree_map::Entry::Vacant(slot) = schemas.entry(id) {
        let found = match handle.block_on(registry.by_id(id)) {
            Ok(s) => Some(StoredSchema::new(id, s.parsed, Vec::new())),
            // Not a schema of this registry: the bytes only look framed.
            Err(f) if f.exit == Exit::NotFound => None,
            Err(f) => return Err(f.message),
        };
        slot.insert(found);
    }
    let Some(Some(stored)) = schemas.get(&id) else {
        return Ok(String::from_utf8_lossy(bytes).into_owned());
    };
    let value = framing::decode_payload(stored, payload).map_err(|e| e.to_string())?;
    Ok(match (&value, &stored.parsed) {
        (Decoded::Avro(v), ParsedSchema::Avro(schema)) => avro_json::to_json(schema, v),
        (Decoded::Protobuf(m), _) => serde_json::to_string(m).map_err(|e| e.to_string())?,
        // As written (serde's objects would sort the keys).
        (Decoded::Json(_), _) => String::from_utf8_lossy(payload).trim().to_string(),
        (Decoded::Avro(_), _) => return Err("an Avro value of a schema that is not Avro".into()),
    })
}
