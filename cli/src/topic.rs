//! `inlet topic create|list|describe|alter|delete`: Kafka's admin API over librdkafka, with
//! `kafka-topics`' and `rpk topic`'s flags where they have them. `--table` is the shorthand for
//! a table topic (`table.topic.enable=true`, and with a value its `table.topic.namespace` and
//! `table.topic.table`).
//!
//! `alter --config` changes only what it names and keeps the topic's other settings
//! (IncrementalAlterConfigs, [`crate::alter`]).

use std::collections::{BTreeMap, HashMap};

use rdkafka::admin::{
    AdminClient, AdminOptions, ConfigSource, NewPartitions, NewTopic, ResourceSpecifier,
    TopicReplication,
};
use rdkafka::consumer::Consumer;
use rdkafka::types::RDKafkaErrorCode;
use serde_json::{json, Value};

use crate::alter::Change;
use crate::kafka::{KafkaArgs, KafkaConsumer, Reporter, TIMEOUT};
use crate::{Failure, Result};

#[derive(clap::Subcommand, Debug)]
pub enum TopicCommand {
    /// Create topics.
    ///
    /// Examples:
    ///   inlet topic create orders --partitions 3
    ///   inlet topic create orders --table                  (a table topic: default.orders)
    ///   inlet topic create orders --table=sales.orders -c table.topic.commit.interval.ms=10000
    #[command(verbatim_doc_comment)]
    Create {
        /// The topics' names.
        #[arg(required = true)]
        names: Vec<String>,
        /// Partitions of each (default: the node's num.partitions).
        #[arg(short, long)]
        partitions: Option<i32>,
        /// Replicas of each (the node's storage keeps one copy; 1 or the default).
        #[arg(short, long = "replication-factor")]
        replication_factor: Option<i32>,
        /// A topic config, KEY=VALUE (repeatable).
        #[arg(short, long = "config", value_name = "KEY=VALUE")]
        config: Vec<String>,
        /// Make it a table topic; NAMESPACE.TABLE names its table (default: the node's
        /// table.topic.namespace and the topic's name).
        #[arg(
            long,
            num_args = 0..=1,
            require_equals = true,
            default_missing_value = "",
            value_name = "NAMESPACE.TABLE"
        )]
        table: Option<String>,
        /// Succeed when a topic exists already.
        #[arg(long)]
        if_not_exists: bool,
        #[command(flatten)]
        kafka: KafkaArgs,
    },
    /// List topics: name, partitions and table.
    ///
    /// Example: inlet topic list --format json
    List {
        /// table or json.
        #[arg(long, default_value = "table")]
        format: String,
        #[command(flatten)]
        kafka: KafkaArgs,
    },
    /// A topic's partitions (leader, earliest and latest offset) and its configs that are not
    /// defaults.
    ///
    /// Example: inlet topic describe orders
    Describe {
        name: String,
        /// table or json.
        #[arg(long, default_value = "table")]
        format: String,
        #[command(flatten)]
        kafka: KafkaArgs,
    },
    /// Change a topic's configs or add partitions.
    ///
    /// Examples:
    ///   inlet topic alter orders -c retention.ms=86400000
    ///   inlet topic alter orders --delete-config retention.ms
    ///   inlet topic alter orders --partitions 6
    #[command(verbatim_doc_comment)]
    Alter {
        name: String,
        /// Set a config, KEY=VALUE (repeatable).
        #[arg(short, long = "config", value_name = "KEY=VALUE")]
        config: Vec<String>,
        /// Return a config to its default (repeatable).
        #[arg(long = "delete-config", value_name = "KEY")]
        delete_config: Vec<String>,
        /// Grow the topic to this many partitions.
        #[arg(short, long)]
        partitions: Option<usize>,
        #[command(flatten)]
        kafka: KafkaArgs,
    },
    /// Delete topics (a table topic's table stays in the catalog).
    ///
    /// Example: inlet topic delete orders
    Delete {
        #[arg(required = true)]
        names: Vec<String>,
        /// Succeed when a topic does not exist.
        #[arg(long)]
        if_exists: bool,
        #[command(flatten)]
        kafka: KafkaArgs,
    },
}

/// Runs a topic command, printing its result to standard output.
pub async fn run(command: TopicCommand) -> Result<()> {
    match command {
        TopicCommand::Create {
            names,
            partitions,
            replication_factor,
            config,
            table,
            if_not_exists,
            kafka,
        } => {
            let mut configs = key_values(&config)?;
            if let Some(table) = table {
                configs.insert("table.topic.enable".into(), "true".into());
                if !table.is_empty() {
                    let (ns, name) = table.rsplit_once('.').ok_or_else(|| {
                        Failure::usage(format!("--table {table:?}: expected NAMESPACE.TABLE"))
                    })?;
                    configs.insert("table.topic.namespace".into(), ns.into());
                    configs.insert("table.topic.table".into(), name.into());
                }
            }
            if names.len() > 1 && configs.contains_key("table.topic.table") {
                return Err(Failure::usage(
                    "--table NAMESPACE.TABLE names one table: create one topic with it",
                ));
            }
            let admin = admin(&kafka)?;
            let topics: Vec<NewTopic> = names
                .iter()
                .map(|n| {
                    let mut t = NewTopic::new(
                        n,
                        partitions.unwrap_or(-1),
                        TopicReplication::Fixed(replication_factor.unwrap_or(-1)),
                    );
                    for (k, v) in &configs {
                        t = t.set(k, v);
                    }
                    t
                })
                .collect();
            let results = admin.create_topics(&topics, &options()).await?;
            let mut failed = None;
            for r in results {
                match r {
                    Ok(name) => println!("created topic {name}"),
                    Err((name, RDKafkaErrorCode::TopicAlreadyExists)) if if_not_exists => {
                        println!("topic {name} exists already")
                    }
                    Err((name, code)) => {
                        eprintln!("topic {name}: {}", code);
                        failed.get_or_insert(Failure::failed(format!(
                            "topic {name} was not created: {}",
                            code
                        )));
                    }
                }
            }
            failed.map_or(Ok(()), Err)
        }
        TopicCommand::List { format, kafka } => list(&kafka, &format).await,
        TopicCommand::Describe {
            name,
            format,
            kafka,
        } => describe(&kafka, &name, &format).await,
        TopicCommand::Alter {
            name,
            config,
            delete_config,
            partitions,
            kafka,
        } => alter(&kafka, &name, &config, &delete_config, partitions).await,
        TopicCommand::Delete {
            names,
            if_exists,
            kafka,
        } => {
            let admin = admin(&kafka)?;
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            let mut failed = None;
            for r in admin.delete_topics(&refs, &options()).await? {
                match r {
                    Ok(name) => println!("deleted topic {name}"),
                    Err((name, RDKafkaErrorCode::UnknownTopicOrPartition)) if if_exists => {
                        println!("topic {name} does not exist")
                    }
                    Err((name, RDKafkaErrorCode::UnknownTopicOrPartition)) => {
                        failed.get_or_insert(Failure::not_found(format!(
                            "topic {name} does not exist"
                        )));
                    }
                    Err((name, code)) => {
                        failed.get_or_insert(Failure::failed(format!(
                            "topic {name} was not deleted: {}",
                            code
                        )));
                    }
                }
            }
            failed.map_or(Ok(()), Err)
        }
    }
}

fn admin(kafka: &KafkaArgs) -> Result<AdminClient<Reporter>> {
    Ok(kafka.client_config()?.create_with_context(Reporter)?)
}

fn options() -> AdminOptions {
    AdminOptions::new().request_timeout(Some(TIMEOUT))
}

/// KEY=VALUE arguments.
pub fn key_values(args: &[String]) -> Result<BTreeMap<String, String>> {
    args.iter()
        .map(|a| {
            a.split_once('=')
                .map(|(k, v)| (k.trim().to_string(), v.to_string()))
                .ok_or_else(|| Failure::usage(format!("{a:?}: expected KEY=VALUE")))
        })
        .collect()
}

/// A topic's partitions: (id, leader).
type Partitions = Vec<(i32, i32)>;

/// The topics' names and partitions, by name.
fn topics(kafka: &KafkaArgs, only: Option<&str>) -> Result<Vec<(String, Partitions)>> {
    let consumer: KafkaConsumer = kafka
        .client_config()?
        .set("allow.auto.create.topics", "false")
        .create_with_context(Reporter)?;
    let metadata = crate::kafka::metadata(&consumer, only)?;
    let mut out = Vec::new();
    for t in metadata.topics() {
        if let Some(e) = t.error() {
            return Err(crate::kafka::topic_failure(t.name(), e));
        }
        let partitions = t
            .partitions()
            .iter()
            .map(|p| (p.id(), p.leader()))
            .collect();
        out.push((t.name().to_string(), partitions));
    }
    out.sort();
    Ok(out)
}

/// A topic's configs: those set on it, and every config's value in force.
#[derive(Default)]
struct Configs {
    own: BTreeMap<String, String>,
    all: BTreeMap<String, String>,
}

/// The topics' configs, by topic.
async fn configs_of(kafka: &KafkaArgs, names: &[&str]) -> Result<HashMap<String, Configs>> {
    let admin = admin(kafka)?;
    let specs: Vec<ResourceSpecifier> = names.iter().map(|n| ResourceSpecifier::Topic(n)).collect();
    let mut out = HashMap::new();
    for (name, r) in names
        .iter()
        .zip(admin.describe_configs(&specs, &options()).await?)
    {
        let resource = r.map_err(|code| {
            Failure::failed(format!("describing topic {name}'s configs: {code}"))
        })?;
        let mut configs = Configs::default();
        for e in &resource.entries {
            let Some(value) = &e.value else { continue };
            if matches!(e.source, ConfigSource::DynamicTopic) {
                configs.own.insert(e.name.clone(), value.clone());
            }
            configs.all.insert(e.name.clone(), value.clone());
        }
        out.insert(name.to_string(), configs);
    }
    Ok(out)
}

/// A table topic's table (`namespace.table`), from the configs in force.
fn table_of(name: &str, configs: &Configs) -> Option<String> {
    let all = &configs.all;
    if all.get("table.topic.enable").map(String::as_str) != Some("true") {
        return None;
    }
    let ns = all
        .get("table.topic.namespace")
        .filter(|n| !n.is_empty())
        .map_or("default", String::as_str);
    let table = all
        .get("table.topic.table")
        .filter(|t| !t.is_empty())
        .map_or(name, String::as_str);
    Some(format!("{ns}.{table}"))
}

async fn list(kafka: &KafkaArgs, format: &str) -> Result<()> {
    crate::check_format(format)?;
    let topics = topics(kafka, None)?;
    let names: Vec<&str> = topics.iter().map(|(n, _)| n.as_str()).collect();
    let configs = if names.is_empty() {
        HashMap::new()
    } else {
        configs_of(kafka, &names).await?
    };
    let rows: Vec<Value> = topics
        .iter()
        .map(|(name, partitions)| {
            let table = configs.get(name).and_then(|c| table_of(name, c));
            json!({"name": name, "partitions": partitions.len(), "table": table})
        })
        .collect();
    if format == "json" {
        println!("{}", Value::Array(rows));
        return Ok(());
    }
    print_table(
        &["NAME", "PARTITIONS", "TABLE"],
        rows.iter()
            .map(|r| {
                vec![
                    r["name"].as_str().unwrap_or_default().to_string(),
                    r["partitions"].to_string(),
                    r["table"].as_str().unwrap_or("-").to_string(),
                ]
            })
            .collect(),
    );
    Ok(())
}

async fn describe(kafka: &KafkaArgs, name: &str, format: &str) -> Result<()> {
    crate::check_format(format)?;
    let topics = topics(kafka, Some(name))?;
    let Some((_, partitions)) = topics.into_iter().find(|(n, _)| n == name) else {
        return Err(Failure::not_found(format!("topic {name} does not exist")));
    };
    let configs = configs_of(kafka, &[name])
        .await?
        .remove(name)
        .unwrap_or_default();
    let consumer: KafkaConsumer = kafka.client_config()?.create_with_context(Reporter)?;
    let mut rows = Vec::new();
    for (p, leader) in &partitions {
        let (low, high) = consumer.fetch_watermarks(name, *p, TIMEOUT)?;
        rows.push(json!({"partition": p, "leader": leader, "earliest": low, "latest": high}));
    }
    let table = table_of(name, &configs);
    let own = configs.own;
    if format == "json" {
        println!(
            "{}",
            json!({"name": name, "table": table, "configs": own, "partitions": rows})
        );
        return Ok(());
    }
    println!("topic      {name}");
    println!("partitions {}", partitions.len());
    println!("table      {}", table.as_deref().unwrap_or("-"));
    if own.is_empty() {
        println!("configs    (all defaults)");
    } else {
        for (i, (k, v)) in own.iter().enumerate() {
            println!(
                "{} {k}={v}",
                if i == 0 { "configs   " } else { "          " }
            );
        }
    }
    println!();
    print_table(
        &["PARTITION", "LEADER", "EARLIEST", "LATEST"],
        rows.iter()
            .map(|r| {
                ["partition", "leader", "earliest", "latest"]
                    .iter()
                    .map(|k| r[*k].to_string())
                    .collect()
            })
            .collect(),
    );
    Ok(())
}

async fn alter(
    kafka: &KafkaArgs,
    name: &str,
    set: &[String],
    delete: &[String],
    partitions: Option<usize>,
) -> Result<()> {
    if set.is_empty() && delete.is_empty() && partitions.is_none() {
        return Err(Failure::usage(
            "nothing to change: give --config, --delete-config or --partitions",
        ));
    }
    // Exists? (exit 3 otherwise.)
    topics(kafka, Some(name))?;
    let admin = admin(kafka)?;
    if !set.is_empty() || !delete.is_empty() {
        let mut changes: Vec<Change> = key_values(set)?
            .into_iter()
            .map(|(k, v)| Change::Set(k, v))
            .collect();
        changes.extend(delete.iter().map(|k| Change::Delete(k.clone())));
        crate::alter::alter_topic(admin.inner(), name, &changes)?;
        println!("altered the configs of topic {name}");
    }
    if let Some(n) = partitions {
        for r in admin
            .create_partitions(&[NewPartitions::new(name, n)], &options())
            .await?
        {
            if let Err((_, code)) = r {
                return Err(Failure::failed(format!(
                    "topic {name} was not grown to {n} partitions: {code}"
                )));
            }
        }
        println!("topic {name} has {n} partitions");
    }
    Ok(())
}

/// Prints rows under a header, each column as wide as its widest cell.
pub fn print_table(header: &[&str], rows: Vec<Vec<String>>) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        println!("{}", padded.join("  ").trim_end());
    };
    line(header.to_vec());
    for row in &rows {
        line(row.iter().map(String::as_str).collect());
    }
}
