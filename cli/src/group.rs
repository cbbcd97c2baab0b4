//! `inlet group list|describe`: consumer groups as `kafka-consumer-groups` shows them: each
//! group's state and members, and per partition the committed offset, the partition's latest
//! offset and the lag between them, with the member the partition is assigned to.
//!
//! Committed offsets are fetched for every partition of every topic (OffsetFetch), so a group
//! without members still shows what it committed; a member's partitions come from its
//! assignment in the consumer protocol's encoding (DescribeGroups).

use std::collections::BTreeMap;

use rdkafka::consumer::Consumer;
use rdkafka::{Offset, TopicPartitionList};
use serde_json::{json, Value};

use crate::kafka::{KafkaArgs, KafkaConsumer, Reporter, TIMEOUT};
use crate::topic::print_table;
use crate::{Failure, Result};

#[derive(clap::Subcommand, Debug)]
pub enum GroupCommand {
    /// Every consumer group with its state and members.
    ///
    /// Example: inlet group list
    List {
        /// table or json.
        #[arg(long, default_value = "table")]
        format: String,
        #[command(flatten)]
        kafka: KafkaArgs,
    },
    /// A group's members, and per partition its committed offset, the latest offset and the
    /// lag.
    ///
    /// Example: inlet group describe audit
    Describe {
        group: String,
        /// table or json.
        #[arg(long, default_value = "table")]
        format: String,
        #[command(flatten)]
        kafka: KafkaArgs,
    },
}

pub async fn run(command: GroupCommand) -> Result<()> {
    tokio::task::spawn_blocking(move || match command {
        GroupCommand::List { format, kafka } => list(&kafka, &format),
        GroupCommand::Describe {
            group,
            format,
            kafka,
        } => describe(&kafka, &group, &format),
    })
    .await
    .map_err(|e| Failure::failed(format!("the command stopped: {e}")))?
}

fn list(kafka: &KafkaArgs, format: &str) -> Result<()> {
    crate::check_format(format)?;
    let consumer: KafkaConsumer = kafka.client_config()?.create_with_context(Reporter)?;
    let groups = consumer.fetch_group_list(None, TIMEOUT)?;
    let mut rows: Vec<Value> = groups
        .groups()
        .iter()
        .map(|g| {
            json!({"group": g.name(), "state": g.state(), "members": g.members().len(),
                   "protocol": g.protocol()})
        })
        .collect();
    rows.sort_by(|a, b| a["group"].as_str().cmp(&b["group"].as_str()));
    if format == "json" {
        println!("{}", Value::Array(rows));
        return Ok(());
    }
    print_table(
        &["GROUP", "STATE", "MEMBERS", "PROTOCOL"],
        rows.iter()
            .map(|r| {
                vec![
                    r["group"].as_str().unwrap_or_default().to_string(),
                    r["state"].as_str().unwrap_or_default().to_string(),
                    r["members"].to_string(),
                    r["protocol"].as_str().unwrap_or_default().to_string(),
                ]
            })
            .collect(),
    );
    Ok(())
}

/// A consumer protocol assignment (a version, then the message; kafka-protocol's decoder, as
/// the node reads it): its partitions, or none when the bytes are not one.
pub fn assigned_partitions(bytes: &[u8]) -> Vec<(String, i32)> {
    use kafka_protocol::messages::ConsumerProtocolAssignment;
    use kafka_protocol::protocol::Decodable as _;
    let Some((version, mut rest)) = bytes
        .split_first_chunk::<2>()
        .map(|(v, rest)| (i16::from_be_bytes(*v), bytes::Bytes::copy_from_slice(rest)))
    else {
        return Vec::new();
    };
    match ConsumerProtocolAssignment::decode(&mut rest, version.clamp(0, 3)) {
        Ok(a) => a
            .assigned_partitions
            .into_iter()
            .flat_map(|tp| {
                let topic = tp.topic.as_str().to_string();
                tp.partitions.into_iter().map(move |p| (topic.clone(), p))
            })
            .collect(),
        Err(_) => Vec::new(),
    }
}

fn describe(kafka: &KafkaArgs, group: &str, format: &str) -> Result<()> {
    crate::check_format(format)?;
    let probe: KafkaConsumer = kafka.client_config()?.create_with_context(Reporter)?;
    let groups = probe.fetch_group_list(Some(group), TIMEOUT)?;
    let info = groups.groups().iter().find(|g| g.name() == group);
    // Partition → the member it is assigned to.
    let mut owner: BTreeMap<(String, i32), String> = BTreeMap::new();
    let mut members = Vec::new();
    if let Some(info) = info {
        for m in info.members() {
            let partitions = m.assignment().map(assigned_partitions).unwrap_or_default();
            for p in &partitions {
                owner.insert(p.clone(), m.id().to_string());
            }
            members.push(json!({"member": m.id(), "client_id": m.client_id(),
                                "host": m.client_host(), "partitions": partitions.len()}));
        }
    }
    // The group's committed offsets, over every partition of every topic.
    let metadata = crate::kafka::metadata(&probe, None)?;
    let mut all = TopicPartitionList::new();
    for t in metadata.topics() {
        for p in t.partitions() {
            all.add_partition(t.name(), p.id());
        }
    }
    let reader: KafkaConsumer = kafka
        .client_config()?
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create_with_context(Reporter)?;
    let committed = if all.count() == 0 {
        TopicPartitionList::new()
    } else {
        reader.committed_offsets(all, TIMEOUT)?
    };
    let mut rows = Vec::new();
    for e in committed.elements() {
        let key = (e.topic().to_string(), e.partition());
        let offset = match e.offset() {
            Offset::Offset(o) => Some(o),
            _ => None,
        };
        if offset.is_none() && !owner.contains_key(&key) {
            continue;
        }
        let (_, latest) = probe.fetch_watermarks(e.topic(), e.partition(), TIMEOUT)?;
        rows.push(json!({
            "topic": e.topic(), "partition": e.partition(), "committed": offset,
            "latest": latest, "lag": offset.map(|o| (latest - o).max(0)),
            "member": owner.get(&key),
        }));
    }
    if info.is_none_or(|i| i.state() == "Dead") && rows.is_empty() {
        return Err(Failure::not_found(format!("group {group} does not exist")));
    }
    let state = info.map_or("Empty", |i| i.state());
    if format == "json" {
        println!(
            "{}",
            json!({"group": group, "state": state, "members": members, "partitions": rows})
        );
        return Ok(());
    }
    println!("group    {group}");
    println!("state    {state}");
    println!("members  {}", members.len());
    let total: i64 = rows.iter().filter_map(|r| r["lag"].as_i64()).sum();
    println!("lag      {total}");
    println!();
    let cell = |v: &Value| match v {
        Value::Null => "-".to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    print_table(
        &["TOPIC", "PARTITION", "COMMITTED", "LATEST", "LAG", "MEMBER"],
        rows.iter()
            .map(|r| {
                ["topic", "partition", "committed", "latest", "lag", "member"]
                    .iter()
                    .map(|k| cell(&r[*k]))
                    .collect()
            })
            .collect(),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::assigned_partitions;

    #[test]
    fn a_consumer_protocol_assignment_reads_as_its_partitions() {
        let mut b = vec![0, 3, 0, 0, 0, 1, 0, 2];
        b.extend_from_slice(b"ab");
        b.extend_from_slice(&[0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0]);
        assert_eq!(
            assigned_partitions(&b),
            [("ab".to_string(), 0), ("ab".to_string(), 5)]
        );
        assert!(assigned_partitions(&b[..9]).is_empty(), "truncated: none");
    }
}
