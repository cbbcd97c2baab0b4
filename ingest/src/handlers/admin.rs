//! Topic administration: CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs,
//! AlterConfigs and IncrementalAlterConfigs.

use std::collections::BTreeMap;

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

use crate::broker::{str, Broker};
use crate::config::{self, BrokerConfig, SettingKind};
use crate::dynamic_config::{self, BrokerSource};
use crate::error::{KafkaError, Result};
use crate::topic_config::{self, ConfigSource, TopicConfigs};

/// Config resource types of DescribeConfigs / AlterConfigs.
const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;

/// DescribeConfigs config sources.
const SOURCE_TOPIC: i8 = 1;
const SOURCE_DYNAMIC_BROKER: i8 = 2;
const SOURCE_DYNAMIC_DEFAULT_BROKER: i8 = 3;
const SOURCE_STATIC_BROKER: i8 = 4;
const SOURCE_DEFAULT: i8 = 5;

/// DescribeConfigs config types (v3+).
const TYPE_STRING: i8 = 2;
/// DescribeConfigs' config types of the broker settings (Kafka's `ConfigType`).
const TYPE_BOOLEAN: i8 = 1;
const TYPE_INT: i8 = 3;
const TYPE_LONG: i8 = 5;
const TYPE_DOUBLE: i8 = 6;

fn broker_source_code(s: BrokerSource) -> i8 {
    match s {
        BrokerSource::Node => SOURCE_DYNAMIC_BROKER,
        BrokerSource::Cluster => SOURCE_DYNAMIC_DEFAULT_BROKER,
        BrokerSource::Static => SOURCE_STATIC_BROKER,
        BrokerSource::Default => SOURCE_DEFAULT,
    }
}

/// `current` with the comma-separated items of `given` appended (`append`) or taken out, as
/// IncrementalAlterConfigs' APPEND and SUBTRACT do to Kafka's list configs.
fn edit_comma_list(current: &str, given: &str, append: bool) -> String {
    let mut items: Vec<String> = current
        .split(',')
        .map(|i| i.trim().to_string())
        .filter(|i| !i.is_empty())
        .collect();
    let given: Vec<String> = given.split(',').map(|i| i.trim().to_string()).collect();
    if append {
        for g in given {
            if !items.contains(&g) {
                items.push(g);
            }
        }
    } else {
        items.retain(|i| !given.contains(i));
    }
    items.join(",")
}

impl Broker {
    pub(crate) async fn create_topics(
        &self,
        r: CreateTopicsRequest,
        version: i16,
    ) -> CreateTopicsResponse {
        let mut results = Vec::new();
        for t in r.topics {
            let name = t.name.0.as_str().to_string();
            let outcome = self.create_one(&t, r.validate_only).await;
            let mut result = CreatableTopicResult::default().with_name(t.name.clone());
            match outcome {
                Ok((partitions, configs, id)) => {
                    if version >= 5 {
                        result.num_partitions = partitions;
                        result.replication_factor = 1;
                        result.configs = Some(
                            configs
                                .describe(&self.config())
                                .into_iter()
                                .map(|c| {
                                    CreatableTopicConfigs::default()
                                        .with_name(str(c.name))
                                        .with_config_source(self.topic_source(c.name, c.source))
                                        .with_value(Some(str(c.value)))
                                })
                                .collect(),
                        );
                    }
                    if version >= 7 {
                        result.topic_id = id;
                    }
                }
                Err(e) => {
                    tracing::debug!(topic = name, error = %e, "CreateTopics refused");
                    result.error_code = e.code();
                    result.error_message = Some(str(e.message));
                    if version >= 5 {
                        result.num_partitions = -1;
                        result.replication_factor = -1;
                    }
                }
            }
            results.push(result);
        }
        CreateTopicsResponse::default().with_topics(results)
    }

    /// Kafka's checks of a manual replica assignment (`replicas`, per partition): each
    /// partition names at least one broker, none twice, all partitions as many, and only
    /// live brokers. Inlet keeps one copy of each partition and places its leader itself, so
    /// an assignment that passes is otherwise not used.
    fn check_assignments<'a>(&self, replicas: impl Iterator<Item = &'a [BrokerId]>) -> Result<()> {
        let live: std::collections::BTreeSet<i32> =
            self.brokers().iter().map(|b| b.node_id).collect();
        let bad = |why: String| {
            Err(KafkaError::new(
                ResponseError::InvalidReplicaAssignment,
                why,
            ))
        };
        let mut count = None;
        for (partition, brokers) in replicas.enumerate() {
            if brokers.is_empty() {
                return bad(format!(
                    "the assignment of partition {partition} names no broker"
                ));
            }
            let distinct: std::collections::BTreeSet<i32> = brokers.iter().map(|b| b.0).collect();
            if distinct.len() != brokers.len() {
                return bad(format!(
                    "the assignment of partition {partition} names a broker twice"
                ));
            }
            if *count.get_or_insert(brokers.len()) != brokers.len() {
                return bad("all partitions should have the same number of replicas".into());
            }
            if let Some(unknown) = distinct.iter().find(|b| !live.contains(b)) {
                return bad(format!(
                    "the manual partition assignment includes broker {unknown}, but no such \
                     broker is registered"
                ));
            }
        }
        Ok(())
    }

    /// CreatePartitions' assignments, if given: one per new partition, checked as Kafka does.
    fn check_new_partitions(
        &self,
        t: &create_partitions_request::CreatePartitionsTopic,
    ) -> Result<()> {
        let Some(assignments) = t.assignments.as_ref() else {
            return Ok(());
        };
        let current = self
            .topics
            .get(t.name.0.as_str())
            .map_or(0, |topic| topic.partitions.len() as i32);
        if current > 0 && assignments.len() as i64 != i64::from(t.count) - i64::from(current) {
            return Err(KafkaError::new(
                ResponseError::InvalidReplicaAssignment,
                format!(
                    "{} assignments given for {} new partitions",
                    assignments.len(),
                    i64::from(t.count) - i64::from(current)
                ),
            ));
        }
        self.check_assignments(assignments.iter().map(|a| a.broker_ids.as_slice()))
    }

    async fn create_one(
        &self,
        t: &create_topics_request::CreatableTopic,
        validate_only: bool,
    ) -> Result<(i32, TopicConfigs, uuid::Uuid)> {
        let name = t.name.0.as_str();
        if !t.assignments.is_empty() {
            // Kafka's checks; then the count is what Inlet takes from an assignment; where
            // partitions lead is its own to decide (docs/ingest.md, "Topics").
            if t.num_partitions != -1 || t.replication_factor != -1 {
                return Err(KafkaError::new(
                    ResponseError::InvalidRequest,
                    "both numPartitions or replicationFactor and replicasAssignments were set; \
                     both cannot be used at the same time",
                ));
            }
            let mut indexes: Vec<i32> = t.assignments.iter().map(|a| a.partition_index).collect();
            indexes.sort_unstable();
            if indexes.iter().zip(0..).any(|(&i, expected)| i != expected) {
                return Err(KafkaError::new(
                    ResponseError::InvalidReplicaAssignment,
                    "partitions should be a consecutive 0-based integer sequence",
                ));
            }
            self.check_assignments(t.assignments.iter().map(|a| a.broker_ids.as_slice()))?;
        }
        if t.assignments.is_empty() && (t.replication_factor == 0 || t.replication_factor < -1) {
            return Err(KafkaError::new(
                ResponseError::InvalidReplicationFactor,
                format!("replication factor {} is invalid", t.replication_factor),
            ));
        }
        let partitions = if !t.assignments.is_empty() {
            t.assignments.len() as i32
        } else if t.num_partitions == -1 {
            self.config().num_partitions
        } else {
            t.num_partitions
        };
        let given: BTreeMap<String, String> = t
            .configs
            .iter()
            .filter_map(|c| {
                c.value
                    .as_ref()
                    .map(|v| (c.name.as_str().to_string(), v.as_str().to_string()))
            })
            .collect();
        let mut configs = self.config().topic_defaults.clone();
        configs.merge(TopicConfigs::parse(&given)?);
        if validate_only {
            self.topics.validate_create(name, partitions, &configs)?;
            return Ok((partitions, configs, uuid::Uuid::nil()));
        }
        let topic = self.topics.create(name, partitions, configs).await?;
        Ok((partitions, topic.configs.clone(), topic.id))
    }

    pub(crate) async fn delete_topics(
        &self,
        r: DeleteTopicsRequest,
        version: i16,
    ) -> DeleteTopicsResponse {
        // v6 names topics by name or id; earlier versions by name only.
        let wanted: Vec<(Option<String>, uuid::Uuid)> = if version >= 6 {
            r.topics
                .iter()
                .map(|t| {
                    (
                        t.name.as_ref().map(|n| n.0.as_str().to_string()),
                        t.topic_id,
                    )
                })
                .collect()
        } else {
            r.topic_names
                .iter()
                .map(|n| (Some(n.0.as_str().to_string()), uuid::Uuid::nil()))
                .collect()
        };
        let mut responses = Vec::new();
        for (name, id) in wanted {
            let name = match name {
                Some(n) => Ok(n),
                None => self
                    .topics
                    .by_id(&id)
                    .map(|t| t.name.clone())
                    .ok_or_else(|| {
                        KafkaError::new(
                            ResponseError::UnknownTopicId,
                            format!("no topic has id {id}"),
                        )
                    }),
            };
            let outcome = match &name {
                Ok(n) => match self.topics.delete(n).await {
                    Ok(topic) => {
                        if let Err(e) = self.groups.delete_topic_offsets(n).await {
                            tracing::warn!(topic = n, error = %e, "dropping committed offsets of a deleted topic failed");
                        }
                        Ok(topic.id)
                    }
                    Err(e) => Err(e),
                },
                Err(e) => Err(e.clone()),
            };
            let mut result = DeletableTopicResult::default()
                .with_name(name.as_ref().ok().map(|n| TopicName(str(n.clone()))));
            if version >= 6 {
                result.topic_id = id;
            }
            match outcome {
                Ok(topic_id) => {
                    if version >= 6 {
                        result.topic_id = topic_id;
                    }
                }
                Err(e) => {
                    result.error_code = e.code();
                    if version >= 5 {
                        result.error_message = Some(str(e.message));
                    }
                }
            }
            responses.push(result);
        }
        DeleteTopicsResponse::default().with_responses(responses)
    }

    pub(crate) async fn create_partitions(
        &self,
        r: CreatePartitionsRequest,
        _version: i16,
    ) -> CreatePartitionsResponse {
        let mut results = Vec::new();
        for t in r.topics {
            let outcome = match self.check_new_partitions(&t) {
                Ok(()) => {
                    self.topics
                        .add_partitions(t.name.0.as_str(), t.count, r.validate_only)
                        .await
                }
                Err(e) => Err(e),
            };
            let mut result = CreatePartitionsTopicResult::default().with_name(t.name);
            if let Err(e) = outcome {
                result.error_code = e.code();
                result.error_message = Some(str(e.message));
            }
            results.push(result);
        }
        CreatePartitionsResponse::default().with_results(results)
    }

    pub(crate) fn describe_configs(
        &self,
        r: DescribeConfigsRequest,
        version: i16,
    ) -> DescribeConfigsResponse {
        let results = r
            .resources
            .into_iter()
            .map(|res| {
                let wanted = |name: &str| {
                    res.configuration_keys
                        .as_ref()
                        .is_none_or(|keys| keys.iter().any(|k| k.as_str() == name))
                };
                let entry = |name: String, value: String, source: i8, read_only: bool| {
                    let mut c = DescribeConfigsResourceResult::default()
                        .with_name(str(name))
                        .with_value(Some(str(value)))
                        .with_read_only(read_only)
                        .with_config_source(source);
                    if version >= 3 {
                        c.config_type = TYPE_STRING;
                    }
                    c
                };
                let base = DescribeConfigsResult::default()
                    .with_resource_type(res.resource_type)
                    .with_resource_name(res.resource_name.clone());
                match res.resource_type {
                    RESOURCE_TOPIC => match self.topics.get(res.resource_name.as_str()) {
                        Some(topic) => base.with_configs(
                            topic
                                .configs
                                .describe(&self.config())
                                .into_iter()
                                .filter(|c| wanted(c.name))
                                .map(|c| {
                                    let source = self.topic_source(c.name, c.source);
                                    entry(c.name.to_string(), c.value, source, false)
                                })
                                .collect(),
                        ),
                        None => base
                            .with_error_code(ResponseError::UnknownTopicOrPartition.code())
                            .with_error_message(Some(str(format!(
                                "topic {:?} does not exist",
                                res.resource_name.as_str()
                            )))),
                    },
                    RESOURCE_BROKER => {
                        let name = res.resource_name.as_str();
                        let config = self.config();
                        if name.is_empty() {
                            // Kafka's cluster-wide resource: the cluster-wide dynamic configs.
                            return base.with_configs(
                                self.config
                                    .layers()
                                    .cluster
                                    .into_iter()
                                    .filter(|(n, _)| wanted(n))
                                    .map(|(n, v)| entry(n, v, SOURCE_DYNAMIC_DEFAULT_BROKER, false))
                                    .collect(),
                            );
                        }
                        if name != config.node_id.to_string() {
                            return base
                                .with_error_code(ResponseError::InvalidRequest.code())
                                .with_error_message(Some(str(format!(
                                    "this broker is {}, not {name}",
                                    config.node_id
                                ))));
                        }
                        base.with_configs(
                            config
                                .describe()
                                .into_iter()
                                .filter(|(n, _, _)| wanted(n))
                                .map(|(n, v, _)| {
                                    let setting = config::setting(&n);
                                    let source = broker_source_code(self.config.source_of(&n));
                                    let read_only = dynamic_config::check_dynamic(&n).is_err();
                                    let mut c = entry(n, v, source, read_only);
                                    if let (Some(s), true) = (setting, version >= 3) {
                                        c.config_type = match s.kind {
                                            SettingKind::Bool => TYPE_BOOLEAN,
                                            SettingKind::Int { max, .. }
                                                if max <= i64::from(i32::MAX) =>
                                            {
                                                TYPE_INT
                                            }
                                            SettingKind::Int { .. } => TYPE_LONG,
                                            SettingKind::Double { .. } => TYPE_DOUBLE,
                                        };
                                        if r.include_documentation {
                                            c.documentation = Some(str(s.doc.to_string()));
                                        }
                                    }
                                    c
                                })
                                .collect(),
                        )
                    }
                    other => base
                        .with_error_code(ResponseError::InvalidRequest.code())
                        .with_error_message(Some(str(format!(
                            "config resource type {other} is not supported"
                        )))),
                }
            })
            .collect();
        DescribeConfigsResponse::default().with_results(results)
    }

    pub(crate) async fn alter_configs(
        &self,
        r: AlterConfigsRequest,
        _version: i16,
    ) -> AlterConfigsResponse {
        let mut responses = Vec::new();
        for res in r.resources {
            // AlterConfigs replaces the resource's whole set (a topic's explicit configs, a
            // broker resource's dynamic ones) with the given one.
            let given: BTreeMap<String, String> = res
                .configs
                .iter()
                .filter_map(|c| {
                    c.value
                        .as_ref()
                        .map(|v| (c.name.as_str().to_string(), v.as_str().to_string()))
                })
                .collect();
            let outcome = match res.resource_type {
                RESOURCE_TOPIC => match TopicConfigs::parse(&given) {
                    Ok(configs) => {
                        self.topics
                            .set_configs(res.resource_name.as_str(), configs, r.validate_only)
                            .await
                    }
                    Err(e) => Err(e),
                },
                RESOURCE_BROKER => {
                    self.alter_broker_configs(
                        res.resource_name.as_str(),
                        r.validate_only,
                        |set, _| {
                            *set = given;
                            Ok(())
                        },
                    )
                    .await
                }
                t => Err(unsupported_resource(t)),
            };
            let mut resp = alter_configs_response::AlterConfigsResourceResponse::default()
                .with_resource_type(res.resource_type)
                .with_resource_name(res.resource_name);
            if let Err(e) = outcome {
                resp.error_code = e.code();
                resp.error_message = Some(str(e.message));
            }
            responses.push(resp);
        }
        AlterConfigsResponse::default().with_responses(responses)
    }

    pub(crate) async fn incremental_alter_configs(
        &self,
        r: IncrementalAlterConfigsRequest,
        _version: i16,
    ) -> IncrementalAlterConfigsResponse {
        let mut responses = Vec::new();
        for res in r.resources {
            let outcome = match res.resource_type {
                RESOURCE_TOPIC => self.incremental_topic(&res, r.validate_only).await,
                RESOURCE_BROKER => self.incremental_broker(&res, r.validate_only).await,
                t => Err(unsupported_resource(t)),
            };
            let mut resp =
                incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                    .with_resource_type(res.resource_type)
                    .with_resource_name(res.resource_name);
            if let Err(e) = outcome {
                resp.error_code = e.code();
                resp.error_message = Some(str(e.message));
            }
            responses.push(resp);
        }
        IncrementalAlterConfigsResponse::default().with_responses(responses)
    }

    async fn incremental_topic(
        &self,
        res: &incremental_alter_configs_request::AlterConfigsResource,
        validate_only: bool,
    ) -> Result<()> {
        let name = res.resource_name.as_str();
        let topic = self
            .topics
            .get(name)
            .ok_or_else(|| KafkaError::unknown_topic(name))?;
        let mut set: BTreeMap<String, String> = topic.configs.explicit().clone();
        for c in &res.configs {
            let key = topic_config::canonical_name(c.name.as_str()).ok_or_else(|| {
                KafkaError::invalid_config(format!("unknown topic config {:?}", c.name.as_str()))
            })?;
            let value = c.value.as_ref().map(|v| v.as_str().to_string());
            match c.config_operation {
                0 => {
                    let v = value.ok_or_else(|| {
                        KafkaError::invalid_config(format!("SET {key} needs a value"))
                    })?;
                    set.insert(key.to_string(), v);
                }
                1 => {
                    set.remove(key);
                }
                op @ (2 | 3) => {
                    let v = value.ok_or_else(|| {
                        KafkaError::invalid_config(format!("APPEND/SUBTRACT {key} needs a value"))
                    })?;
                    if topic_config::is_comma_list(key) {
                        // Kafka's list configs (cleanup.policy): comma-separated items.
                        let current = set
                            .get(key)
                            .cloned()
                            .or_else(|| topic.configs.get(key).map(str::to_string))
                            .unwrap_or_else(|| topic_config::default_of(key).to_string());
                        set.insert(key.to_string(), edit_comma_list(&current, &v, op == 2));
                        continue;
                    }
                    if !matches!(key, "table.topic.id.columns" | "table.topic.partition.by") {
                        return Err(KafkaError::invalid_config(format!(
                            "{key} is not a list config"
                        )));
                    }
                    let current = set.get(key).cloned().unwrap_or_default();
                    let mut items = topic_config::parse_list(&current);
                    let given = topic_config::parse_list(&format!(
                        "[{}]",
                        v.trim_matches(|c| c == '[' || c == ']')
                    ));
                    if op == 2 {
                        items.extend(
                            given
                                .into_iter()
                                .filter(|g| !items.contains(g))
                                .collect::<Vec<_>>(),
                        );
                    } else {
                        items.retain(|i| !given.contains(i));
                    }
                    set.insert(key.to_string(), format!("[{}]", items.join(", ")));
                }
                op => {
                    return Err(KafkaError::new(
                        ResponseError::InvalidRequest,
                        format!("unknown config operation {op}"),
                    ))
                }
            }
        }
        let configs = TopicConfigs::parse(&set)?;
        self.topics.set_configs(name, configs, validate_only).await
    }
}

fn unsupported_resource(resource_type: i8) -> KafkaError {
    const RESOURCE_GROUP: i8 = 32;
    KafkaError::new(
        ResponseError::InvalidRequest,
        if resource_type == RESOURCE_GROUP {
            "group configs are not supported: they belong to KIP-848's consumer group protocol, which Inlet does not offer".to_string()
        } else {
            format!("config resource type {resource_type} is not supported")
        },
    )
}

impl Broker {
    /// The DescribeConfigs source of a topic's entry `name` that `source` says where it came
    /// from: a broker-level value is told apart as dynamic (per node or cluster-wide) or static.
    fn topic_source(&self, name: &str, source: ConfigSource) -> i8 {
        let broker_name = match name {
            "retention.ms" => "log.retention.ms",
            "retention.bytes" => "log.retention.bytes",
            "max.message.bytes" => "message.max.bytes",
            other => other,
        };
        match source {
            ConfigSource::Topic => SOURCE_TOPIC,
            ConfigSource::Broker | ConfigSource::Default => {
                match self.config.source_of(broker_name) {
                    BrokerSource::Default if source == ConfigSource::Broker => SOURCE_STATIC_BROKER,
                    s => broker_source_code(s),
                }
            }
        }
    }

    /// IncrementalAlterConfigs on a broker resource: SET, DELETE, and APPEND and SUBTRACT on
    /// list configs, applied to the resource's dynamic set (`dynamic_config`).
    async fn incremental_broker(
        &self,
        res: &incremental_alter_configs_request::AlterConfigsResource,
        validate_only: bool,
    ) -> Result<()> {
        let ops: Vec<(String, i8, Option<String>)> = res
            .configs
            .iter()
            .map(|c| {
                (
                    c.name.as_str().to_string(),
                    c.config_operation,
                    c.value.as_ref().map(|v| v.as_str().to_string()),
                )
            })
            .collect();
        self.alter_broker_configs(res.resource_name.as_str(), validate_only, |set, current| {
            for (key, op, value) in ops {
                edit_broker_config(set, current, &key, op, value)?;
            }
            Ok(())
        })
        .await
    }
}

/// One IncrementalAlterConfigs operation on a broker resource's dynamic `set`; `current` is
/// the config in force, whose value APPEND and SUBTRACT start from when `set` has none.
fn edit_broker_config(
    set: &mut BTreeMap<String, String>,
    current: &BrokerConfig,
    key: &str,
    op: i8,
    value: Option<String>,
) -> Result<()> {
    let needs_value = || {
        value
            .clone()
            .ok_or_else(|| KafkaError::invalid_config(format!("{key} needs a value")))
    };
    match op {
        0 => {
            set.insert(key.to_string(), needs_value()?);
        }
        1 => {
            set.remove(key);
        }
        2 | 3 => {
            let list = config::topic_default_set_by(key)
                .filter(|name| topic_config::is_comma_list(name))
                .ok_or_else(|| KafkaError::invalid_config(format!("{key} is not a list config")))?;
            let now = set
                .get(key)
                .cloned()
                .or_else(|| current.topic_defaults.get(list).map(str::to_string))
                .unwrap_or_else(|| topic_config::default_of(list).to_string());
            set.insert(
                key.to_string(),
                edit_comma_list(&now, &needs_value()?, op == 2),
            );
        }
        op => {
            return Err(KafkaError::new(
                ResponseError::InvalidRequest,
                format!("unknown config operation {op}"),
            ))
        }
    }
    Ok(())
}
