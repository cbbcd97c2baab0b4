//! `inlet produce`: JSON lines from standard input to records of a topic, each value (and,
//! with `parse.key`, key) written with its schema and framed as Confluent's serializers frame
//! it (magic byte 0, the schema id, the payload), so that any Schema Registry deserializer,
//! and a table topic, read them. What `kafka-avro-console-producer` does, with its
//! `--property` spellings accepted, and for Protobuf and JSON Schema too.
//!
//! - The schema: `--value-schema FILE` (`.avsc` Avro, `.proto` Protobuf, `.json` JSON Schema),
//!   or `value.schema` / `value.schema.file` / `value.schema.id`; `use.latest.version=true`
//!   takes the subject's latest; otherwise it is registered under `<topic>-value`
//!   (`auto.register=false`: looked up there, never registered). Keys the same with `key.`.
//! - A line is encoded per the schema's type: Avro through
//!   [`inlet_schema_registry::avro_json`] (Avro's JSON encoding, and plain JSON where it is
//!   unambiguous); Protobuf through Protobuf's JSON mapping (the schema's first message);
//!   JSON Schema validated and sent as written. Without a schema, the line's bytes.
//!
//! Invariant: a line that does not fit stops the run with its line number and the reason
//! (exit 1), after every line before it is acknowledged; `--skip-bad-lines` reports it and goes
//! on. Records go out in input order (one producer, idempotent, Java's murmur2 partitioner as
//! the console producer's).

use std::collections::BTreeMap;
use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use inlet_schema_registry::avro::AvroSchema;
use inlet_schema_registry::avro_json::Encoder;
use inlet_schema_registry::json_schema::{self, JsonSchema};
use inlet_schema_registry::{ParsedSchema, SchemaType};
use prost_reflect::prost::Message as _;
use prost_reflect::{DynamicMessage, MessageDescriptor};
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{BaseRecord, Producer, ProducerContext, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientContext;

use crate::kafka::{KafkaArgs, KafkaConsumer, Reporter};
use crate::registry::Registry;
use crate::topic::key_values;
use crate::{Failure, Result};

#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:
  echo '{\"id\": 1, \"name\": \"a\"}' | inlet produce --topic orders --value-schema order.avsc
  inlet produce --topic orders --property value.schema.id=1 < orders.jsonl
  inlet produce --topic orders --value-schema order.avsc --key-schema id.avsc \\
      --property parse.key=true --property key.separator=: < keyed.txt
  kafka-avro-console-producer's own spellings work too:
  inlet produce --bootstrap-server 127.0.0.1:9092 --topic orders \\
      --property schema.registry.url=http://127.0.0.1:8081 \\
      --property value.schema='{\"type\":\"record\",\"name\":\"O\",\"fields\":[{\"name\":\"id\",\"type\":\"long\"}]}'")]
pub struct ProduceArgs {
    #[arg(long)]
    pub topic: String,
    /// The values' schema file: .avsc (Avro), .proto (Protobuf) or .json (JSON Schema).
    #[arg(long = "value-schema", value_name = "FILE")]
    pub value_schema: Option<PathBuf>,
    /// The keys' schema file (with parse.key=true).
    #[arg(long = "key-schema", value_name = "FILE")]
    pub key_schema: Option<PathBuf>,
    /// The Schema Registry (schema.registry.url).
    #[arg(long, env = "INLET_REGISTRY", default_value = "http://127.0.0.1:8081")]
    pub registry: String,
    /// A console producer property, KEY=VALUE (repeatable): schema.registry.url,
    /// value.schema, value.schema.file, value.schema.id, key.schema, key.schema.file,
    /// key.schema.id, parse.key, key.separator, auto.register, use.latest.version,
    /// basic.auth.user.info.
    #[arg(long = "property", value_name = "KEY=VALUE")]
    pub property: Vec<String>,
    /// Report a line that does not match its schema and go on (default: stop there).
    #[arg(long)]
    pub skip_bad_lines: bool,
    #[command(flatten)]
    pub kafka: KafkaArgs,
}

/// How one side (key or value) of a record is written.
enum Format {
    Avro(AvroSchema),
    Json(JsonSchema),
    Protobuf(MessageDescriptor),
}

struct Side {
    id: u32,
    format: Format,
}

/// The console producer's properties this command reads.
const PROPERTIES: &[&str] = &[
    "schema.registry.url",
    "value.schema",
    "value.schema.file",
    "value.schema.id",
    "key.schema",
    "key.schema.file",
    "key.schema.id",
    "parse.key",
    "key.separator",
    "auto.register",
    "auto.register.schemas",
    "use.latest.version",
    "basic.auth.user.info",
    "basic.auth.credentials.source",
    "ignore.error",
];

pub async fn run(args: ProduceArgs) -> Result<()> {
    let props = key_values(&args.property)?;
    if let Some(unknown) = props.keys().find(|k| !PROPERTIES.contains(&k.as_str())) {
        return Err(Failure::usage(format!(
            "--property {unknown}: not a property of the console producer that inlet reads ({})",
            PROPERTIES.join(", ")
        )));
    }
    let flag = |k: &str, default: bool| match props.get(k).map(|v| v.to_ascii_lowercase()) {
        Some(v) => Ok(v == "true"),
        None => Ok::<_, Failure>(default),
    };
    let parse_key = flag("parse.key", false)?;
    let skip = args.skip_bad_lines || flag("ignore.error", false)?;
    let separator = props
        .get("key.separator")
        .cloned()
        .unwrap_or_else(|| "\t".to_string());
    let url = props.get("schema.registry.url").unwrap_or(&args.registry);
    let registry = Registry::new(url, props.get("basic.auth.user.info").map(String::as_str))?;
    let mode = Mode {
        auto_register: flag("auto.register", flag("auto.register.schemas", true)?)?,
        latest: flag("use.latest.version", false)?,
    };

    check_topic(&args.kafka, &args.topic)?;
    let value = side(
        &registry,
        &props,
        "value",
        args.value_schema.as_deref(),
        &args.topic,
        mode,
    )
    .await?;
    let key = side(
        &registry,
        &props,
        "key",
        args.key_schema.as_deref(),
        &args.topic,
        mode,
    )
    .await?;
    if key.is_some() && !parse_key {
        return Err(Failure::usage(
            "a key schema needs --property parse.key=true (each line KEY<key.separator>VALUE)",
        ));
    }
    let config = args.kafka.client_config()?;
    let topic = args.topic.clone();
    tokio::task::spawn_blocking(move || {
        send_lines(config, &topic, (key, value), (parse_key, &separator, skip))
    })
    .await
    .map_err(|e| Failure::failed(format!("the producer stopped: {e}")))?
}

#[derive(Clone, Copy)]
struct Mode {
    auto_register: bool,
    latest: bool,
}

/// Fails with exit 3 when `topic` does not exist (without creating it, whatever the node's
/// auto.create.topics.enable).
fn check_topic(kafka: &KafkaArgs, topic: &str) -> Result<()> {
    let consumer: KafkaConsumer = kafka
        .client_config()?
        .set("allow.auto.create.topics", "false")
        .create_with_context(Reporter)?;
    match crate::kafka::partitions(&consumer, topic) {
        Err(mut f) if f.exit == crate::Exit::NotFound => {
            f.message = format!("{} (create it with: inlet topic create {topic})", f.message);
            Err(f)
        }
        other => other.map(|_| ()),
    }
}

/// The schema type a file's name or a schema's text says.
fn type_of(path: Option<&Path>, text: &str) -> SchemaType {
    match path.and_then(|p| p.extension()).and_then(|e| e.to_str()) {
        Some("avsc") => return SchemaType::Avro,
        Some("proto") => return SchemaType::Protobuf,
        _ => {}
    }
    match serde_json::from_str::<serde_json::Value>(text) {
        Err(_) => SchemaType::Protobuf,
        Ok(serde_json::Value::Object(o))
            if o.contains_key("$schema")
                || o.contains_key("properties")
                || o.get("type").and_then(|t| t.as_str()) == Some("object") =>
        {
            SchemaType::Json
        }
        Ok(_) => SchemaType::Avro,
    }
}

/// One side's schema, registered or found (None: raw bytes).
async fn side(
    registry: &Registry,
    props: &BTreeMap<String, String>,
    which: &str,
    file: Option<&Path>,
    topic: &str,
    mode: Mode,
) -> Result<Option<Side>> {
    let subject = format!("{topic}-{which}");
    let prop = |k: &str| props.get(&format!("{which}.{k}"));
    let from_file = match (file, prop("schema.file")) {
        (Some(p), _) => Some(p.to_path_buf()),
        (None, Some(p)) => Some(PathBuf::from(p)),
        (None, None) => None,
    };
    let text = match (&from_file, prop("schema")) {
        (Some(p), _) => Some(std::fs::read_to_string(p).map_err(|e| {
            Failure::usage(format!("reading the {which} schema {}: {e}", p.display()))
        })?),
        (None, Some(t)) => Some(t.clone()),
        (None, None) => None,
    };
    let fetched = if let Some(id) = prop("schema.id") {
        let id: u32 = id
            .parse()
            .map_err(|_| Failure::usage(format!("{which}.schema.id={id}: expected a number")))?;
        Some(registry.by_id(id).await?)
    } else if mode.latest {
        Some(registry.latest(&subject).await?)
    } else {
        None
    };
    let (id, parsed) = match (fetched, text) {
        (Some(s), _) => (s.id, s.parsed),
        (None, None) => return Ok(None),
        (None, Some(text)) => {
            let kind = type_of(from_file.as_deref(), &text);
            let parsed = ParsedSchema::parse(kind, &text, &[]).map_err(|e| {
                Failure::usage(format!(
                    "the {which} schema is not a valid {} schema: {e}",
                    kind.as_str()
                ))
            })?;
            let id = if mode.auto_register {
                registry.register(&subject, kind, &text).await?
            } else {
                registry.lookup(&subject, kind, &text).await?
            };
            (id, parsed)
        }
    };
    let format = match parsed {
        ParsedSchema::Avro(a) => Format::Avro(a),
        ParsedSchema::Json(j) => Format::Json(j),
        ParsedSchema::Protobuf(p) => Format::Protobuf(
            p.message_by_indexes(&[0])
                .ok_or_else(|| Failure::usage(format!("the {which} schema has no message")))?,
        ),
    };
    Ok(Some(Side { id, format }))
}

/// Writes one side's text as its payload, framed.
struct Writer<'a> {
    side: Option<&'a Side>,
    avro: Option<Encoder<'a>>,
}

impl<'a> Writer<'a> {
    fn new(side: Option<&'a Side>) -> Writer<'a> {
        let avro = match side.map(|s| &s.format) {
            Some(Format::Avro(a)) => Some(Encoder::new(a)),
            _ => None,
        };
        Writer { side, avro }
    }

    fn write(&self, text: &str, out: &mut Vec<u8>) -> std::result::Result<(), String> {
        out.clear();
        let Some(side) = self.side else {
            out.extend_from_slice(text.as_bytes());
            return Ok(());
        };
        out.push(0);
        out.extend_from_slice(&side.id.to_be_bytes());
        match &side.format {
            Format::Avro(_) => {
                let value: serde_json::Value =
                    serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
                if let Some(encoder) = &self.avro {
                    encoder.encode(&value, out).map_err(|e| e.to_string())?;
                }
            }
            Format::Json(schema) => {
                json_schema::decode_payload(schema, text.as_bytes())?;
                out.extend_from_slice(text.as_bytes());
            }
            Format::Protobuf(desc) => {
                let mut de = serde_json::Deserializer::from_str(text);
                let message = DynamicMessage::deserialize(desc.clone(), &mut de).map_err(|e| {
                    format!("not a {} in Protobuf's JSON form: {e}", desc.full_name())
                })?;
                de.end().map_err(|e| format!("not JSON: {e}"))?;
                // Message indexes [0]: a single 0.
                out.push(0);
                message.encode(out).map_err(|e| e.to_string())?;
            }
        }
        Ok(())
    }
}

/// What the producer's delivery reports say so far.
#[derive(Default)]
struct Deliveries {
    acked: AtomicU64,
    failed: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl Deliveries {
    fn first_error(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.first_error.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[derive(Clone)]
struct Context(Arc<Deliveries>);

impl ClientContext for Context {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, message: &str) {
        crate::kafka::Reporter.log(level, fac, message);
    }

    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        crate::kafka::report(&error, reason);
    }
}

impl ProducerContext for Context {
    /// The line's number.
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, line: usize) {
        match result {
            Ok(_) => {
                self.0.acked.fetch_add(1, Ordering::Relaxed);
            }
            Err((e, _)) => {
                self.0.failed.fetch_add(1, Ordering::Relaxed);
                self.0
                    .first_error()
                    .get_or_insert_with(|| format!("line {line} was not acknowledged: {e}"));
            }
        }
    }
}

#[allow(clippy::disallowed_methods)] // Instant: only the progress line's interval is measured
fn send_lines(
    mut config: rdkafka::ClientConfig,
    topic: &str,
    (key, value): (Option<Side>, Option<Side>),
    (parse_key, separator, skip): (bool, &str, bool),
) -> Result<()> {
    let deliveries = Arc::new(Deliveries::default());
    let producer: ThreadedProducer<Context> = config
        .set("partitioner", "murmur2_random")
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .create_with_context(Context(deliveries.clone()))?;
    let keys = Writer::new(key.as_ref());
    let values = Writer::new(value.as_ref());
    let progress = std::io::stderr().is_terminal();
    let mut last_progress = Instant::now();
    let (mut line, mut key_bytes, mut value_bytes) = (String::new(), Vec::new(), Vec::new());
    let (mut number, mut sent, mut skipped, mut bytes) = (0usize, 0u64, 0u64, 0u64);
    let mut stopped = None;
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    loop {
        line.clear();
        match input.read_line(&mut line) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                stopped = Some(Failure::failed(format!("reading standard input: {e}")));
                break;
            }
        }
        number += 1;
        let text = line.trim_end_matches(['\n', '\r']);
        if text.trim().is_empty() {
            continue;
        }
        let (key_text, value_text) = if parse_key {
            match text.split_once(separator) {
                Some((k, v)) => (Some(k), v),
                None => {
                    let reason = format!("no key separator {separator:?} (parse.key=true)");
                    if report(number, &reason, skip, &mut skipped, &mut stopped) {
                        break;
                    }
                    continue;
                }
            }
        } else {
            (None, text)
        };
        let encoded = match key_text {
            Some(k) => keys
                .write(k, &mut key_bytes)
                .map_err(|e| format!("key: {e}")),
            None => Ok(()),
        }
        .and_then(|()| values.write(value_text, &mut value_bytes));
        if let Err(reason) = encoded {
            if report(number, &reason, skip, &mut skipped, &mut stopped) {
                break;
            }
            continue;
        }
        let mut record = BaseRecord::with_opaque_to(topic, number).payload(&value_bytes[..]);
        if key_text.is_some() {
            record = record.key(&key_bytes[..]);
        }
        // A full queue: wait for deliveries, then send again.
        let mut pending = record;
        loop {
            match producer.send(pending) {
                Ok(()) => break,
                Err((e, back)) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull) => {
                    std::thread::sleep(Duration::from_millis(5));
                    pending = back;
                }
                Err((e, _)) => return Err(Failure::failed(format!("line {number}: {e}"))),
            }
        }
        sent += 1;
        bytes += value_bytes.len() as u64;
        if deliveries.failed.load(Ordering::Relaxed) > 0 {
            break;
        }
        if progress && last_progress.elapsed() >= Duration::from_secs(1) {
            last_progress = Instant::now();
            eprint!(
                "\r{number} lines read, {sent} sent, {} acknowledged, {:.1} MiB",
                deliveries.acked.load(Ordering::Relaxed),
                bytes as f64 / (1 << 20) as f64
            );
            let _ = std::io::stderr().flush();
        }
    }
    producer
        .flush(Duration::from_secs(60))
        .map_err(|e| Failure::failed(format!("waiting for acknowledgements: {e}")))?;
    if progress {
        eprint!("\r\x1b[K");
    }
    let acked = deliveries.acked.load(Ordering::Relaxed);
    if let Some(e) = deliveries.first_error().take() {
        return Err(Failure::failed(format!(
            "{e} ({acked} of {sent} records acknowledged)"
        )));
    }
    eprintln!(
        "{acked} records acknowledged on {topic}{}",
        if skipped > 0 {
            format!(", {skipped} bad lines skipped")
        } else {
            String::new()
        }
    );
    match stopped {
        Some(mut f) => {
            f.message = format!(
                "{}; the {acked} records before it are acknowledged",
                f.message
            );
            Err(f)
        }
        None => Ok(()),
    }
}

/// Reports a bad line; true when the run stops at it.
fn report(
    number: usize,
    reason: &str,
    skip: bool,
    skipped: &mut u64,
    stopped: &mut Option<Failure>,
) -> bool {
    let message = format!("line {number}: {reason}");
    if skip {
        eprintln!("{message} (skipped)");
        *skipped += 1;
        false
    } else {
        *stopped = Some(Failure::failed(message));
        true
    }
}
