//! Table names that two table topics would share are refused at CreateTopics and at
//! IncrementalAlterConfigs with INVALID_CONFIG and a message: the same table, a table that is
//! another topic's dead-letter table (`<table>_dlq`), or a dead-letter table that is another
//! topic's table. Two coordinators committing to one table break exactly-once.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;
use common::temp_node;

use common::requests;
use common::wire::Conn;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

const INVALID_CONFIG: i16 = 40;

fn create(c: &mut Conn, name: &str, configs: &[(&str, &str)]) -> (i16, String) {
    let r: CreateTopicsResponse = c.call(
        ApiKey::CreateTopics,
        5,
        requests::create_topic(name, 1, configs),
    );
    let t = &r.topics[0];
    (
        t.error_code,
        t.error_message.as_deref().unwrap_or_default().to_string(),
    )
}

fn alter(c: &mut Conn, name: &str, key: &str, value: &str) -> (i16, String) {
    let r: IncrementalAlterConfigsResponse = c.call(
        ApiKey::IncrementalAlterConfigs,
        1,
        RequestKind::IncrementalAlterConfigs(
            IncrementalAlterConfigsRequest::default().with_resources(vec![
                AlterConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(StrBytes::from_string(name.into()))
                    .with_configs(vec![AlterableConfig::default()
                        .with_name(StrBytes::from_string(key.into()))
                        .with_config_operation(0)
                        .with_value(Some(StrBytes::from_string(value.into())))]),
            ]),
        ),
    );
    let res = &r.responses[0];
    (
        res.error_code,
        res.error_message.as_deref().unwrap_or_default().to_string(),
    )
}

#[test]
fn table_topics_cannot_share_a_table() {
    let (_dir, node) = temp_node(&[]);
    let mut c = Conn::open(&node);
    let on = ("table.topic.enable", "true");
    assert_eq!(create(&mut c, "orders", &[on]).0, 0);

    // The same table, named outright.
    let (code, message) = create(&mut c, "orders2", &[on, ("table.topic.table", "orders")]);
    assert_eq!(code, INVALID_CONFIG, "{message}");
    assert!(
        message.contains("\"orders\" already writes the table default.orders"),
        "{message}"
    );
    // orders' dead-letter table.
    let (code, message) = create(&mut c, "orders_dlq", &[on]);
    assert_eq!(code, INVALID_CONFIG, "{message}");
    assert!(message.contains("dead-letter table"), "{message}");
    // A topic whose dead-letter table would be orders.
    let (code, message) = create(&mut c, "ord", &[on, ("table.topic.table", "orders_dlq")]);
    assert_eq!(code, INVALID_CONFIG, "{message}");
    // Another namespace is another table; a plain topic has no table.
    assert_eq!(
        create(
            &mut c,
            "orders_eu",
            &[
                on,
                ("table.topic.table", "orders"),
                ("table.topic.namespace", "eu")
            ]
        )
        .0,
        0
    );
    assert_eq!(
        create(&mut c, "plain", &[("table.topic.table", "orders")]).0,
        0
    );

    // Altering into a clash is refused too, and changes nothing.
    let (code, message) = alter(&mut c, "orders_eu", "table.topic.namespace", "default");
    assert_eq!(code, INVALID_CONFIG, "{message}");
    let (code, message) = alter(&mut c, "plain", "table.topic.enable", "true");
    assert_eq!(code, INVALID_CONFIG, "{message}");
    let (code, message) = alter(&mut c, "plain", "table.topic.table", "plain");
    assert_eq!(code, 0, "{message}");
    assert_eq!(alter(&mut c, "plain", "table.topic.enable", "true").0, 0);
    node.stop();
}
