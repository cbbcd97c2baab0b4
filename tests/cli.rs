//! The client commands against a real node (docs/cli.md): `inlet topic create|list|describe|
//! alter|delete`, `inlet produce` and `inlet consume`, with good input and bad. Each bad case
//! gets a clear message and its exit code (1 failed, 2 usage, 3 not found), and the good
//! lines before a bad one stay acknowledged. What `inlet produce` writes is read back by
//! `inlet consume`, by confluent-kafka's AvroDeserializer and by pyiceberg from the table
//! topic's table (`tests/clients/cli_produce.py`; it needs confluent-kafka and pyiceberg, which
//! scripts/test-env.sh installs, so CI runs it).
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{avro_python, registry_url, temp_node, INLET};
use inlet_test_support::process::{run_captured, Captured};
use serde_json::{json, Value};

/// `inlet ARGS` with `stdin`, against `node`'s Kafka listener and registry.
use common::inlet_client as inlet;

fn code(c: &Captured) -> Option<i32> {
    c.status.and_then(|s| s.code())
}

use common::inlet_client_ok as ok;

fn json_of(node: &common::Node, args: &[&str]) -> Value {
    serde_json::from_str(&ok(node, args, None)).expect("JSON output")
}

#[test]
fn topic_commands_create_list_describe_alter_and_delete() {
    let (_dir, node) = temp_node(&[]);
    let created = ok(
        &node,
        &[
            "topic",
            "create",
            "orders",
            "--partitions",
            "3",
            "--table",
            "-c",
            "retention.ms=3600000",
        ],
        None,
    );
    assert!(created.contains("created topic orders"), "{created}");
    ok(
        &node,
        &["topic", "create", "plain", "audit", "-p", "1"],
        None,
    );
    ok(
        &node,
        &["topic", "create", "named", "--table=sales.named_orders"],
        None,
    );

    let again = inlet(&node, &["topic", "create", "orders"], None);
    assert_eq!(code(&again), Some(1), "{}", again.output());
    assert!(
        again.stderr.contains("orders") && again.stderr.to_lowercase().contains("already exists"),
        "{}",
        again.output()
    );
    ok(
        &node,
        &["topic", "create", "orders", "--if-not-exists"],
        None,
    );

    let listed = json_of(&node, &["topic", "list", "--format", "json"]);
    let row = |name: &str| {
        listed
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} listed in {listed}"))
    };
    assert_eq!(
        row("orders"),
        json!({"name": "orders", "partitions": 3, "table": "default.orders"})
    );
    assert_eq!(
        row("audit"),
        json!({"name": "audit", "partitions": 1, "table": null})
    );
    assert_eq!(row("named")["table"], "sales.named_orders");
    let table = ok(&node, &["topic", "list"], None);
    assert!(table.lines().next().unwrap().starts_with("NAME"), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["orders", "3", "default.orders"]),
        "{table}"
    );

    let described = json_of(&node, &["topic", "describe", "orders", "--format", "json"]);
    assert_eq!(described["configs"]["retention.ms"], "3600000");
    assert_eq!(described["configs"]["table.topic.enable"], "true");
    assert_eq!(described["partitions"].as_array().unwrap().len(), 3);
    assert_eq!(described["partitions"][0]["latest"], 0);

    // alter changes what it names and keeps the rest.
    ok(
        &node,
        &["topic", "alter", "orders", "-c", "retention.ms=7200000"],
        None,
    );
    let described = json_of(&node, &["topic", "describe", "orders", "--format", "json"]);
    assert_eq!(described["configs"]["retention.ms"], "7200000");
    assert_eq!(
        described["configs"]["table.topic.enable"], "true",
        "{described}"
    );
    ok(
        &node,
        &[
            "topic",
            "alter",
            "orders",
            "--delete-config",
            "retention.ms",
            "--partitions",
            "4",
        ],
        None,
    );
    let described = json_of(&node, &["topic", "describe", "orders", "--format", "json"]);
    assert!(
        described["configs"].get("retention.ms").is_none(),
        "{described}"
    );
    assert_eq!(described["partitions"].as_array().unwrap().len(), 4);

    let bad_value = inlet(
        &node,
        &["topic", "alter", "orders", "-c", "cleanup.policy=sometimes"],
        None,
    );
    assert_eq!(code(&bad_value), Some(1), "{}", bad_value.output());
    let usage = inlet(&node, &["topic", "create", "x", "-c", "no-equals"], None);
    assert_eq!(code(&usage), Some(2), "{}", usage.output());
    assert!(
        usage.stderr.contains("expected KEY=VALUE"),
        "{}",
        usage.output()
    );
    let nothing = inlet(&node, &["topic", "alter", "orders"], None);
    assert_eq!(code(&nothing), Some(2), "{}", nothing.output());

    ok(&node, &["topic", "delete", "orders"], None);
    for args in [
        &["topic", "describe", "orders"][..],
        &["topic", "delete", "orders"],
        &["topic", "alter", "orders", "-c", "retention.ms=1"],
    ] {
        let missing = inlet(&node, args, None);
        assert_eq!(code(&missing), Some(3), "{args:?}: {}", missing.output());
        assert!(
            missing.stderr.contains("topic orders does not exist"),
            "{}",
            missing.output()
        );
    }
    ok(&node, &["topic", "delete", "orders", "--if-exists"], None);
    node.stop();
}

const PERSON: &str = r#"{"type": "record", "name": "Person", "namespace": "cli",
  "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"},
             {"name": "email", "type": ["null", "string"], "default": null}]}"#;

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

#[test]
fn produce_stops_at_a_bad_line_keeps_the_lines_before_and_its_records_read_back_everywhere() {
    let (dir, node) = temp_node(&[]);
    let schema = write(dir.path(), "person.avsc", PERSON);
    ok(
        &node,
        &[
            "topic",
            "create",
            "people",
            "-p",
            "1",
            "--table",
            "-c",
            "table.topic.commit.interval.ms=1000",
        ],
        None,
    );

    // Three good lines (the union wrapped, plain, and left to its default), a bad one, and one
    // after it that must not be sent.
    let lines = [
        r#"{"id": 1, "name": "ann", "email": {"string": "ann@example.com"}}"#,
        r#"{"id": 2, "name": "bob", "email": "bob@example.com"}"#,
        r#"{"id": 3, "name": "cy"}"#,
        r#"{"id": "four", "name": "dee"}"#,
        r#"{"id": 5, "name": "eve"}"#,
    ];
    let input = lines.join("\n") + "\n";
    let stopped = inlet(
        &node,
        &["produce", "--topic", "people", "--value-schema", &schema],
        Some(&input),
    );
    assert_eq!(code(&stopped), Some(1), "{}", stopped.output());
    assert!(
        stopped
            .stderr
            .contains(r#"line 4: .id: expected a long (64-bit), got "four""#)
            && stopped
                .stderr
                .contains("the 3 records before it are acknowledged"),
        "{}",
        stopped.output()
    );

    let consumed = ok(
        &node,
        &[
            "consume",
            "--topic",
            "people",
            "--from-beginning",
            "--timeout-ms",
            "3000",
            "--property",
            "print.offset=true",
        ],
        None,
    );
    let printed: Vec<&str> = consumed.lines().collect();
    assert_eq!(
        printed,
        [
            r#"Offset:0	{"id":1,"name":"ann","email":{"string":"ann@example.com"}}"#,
            r#"Offset:1	{"id":2,"name":"bob","email":{"string":"bob@example.com"}}"#,
            r#"Offset:2	{"id":3,"name":"cy","email":null}"#,
        ],
        "{consumed}"
    );

    // A group commits what it printed: the next run of it goes on from there.
    let first = ok(
        &node,
        &[
            "consume",
            "--topic",
            "people",
            "--group",
            "g",
            "--from-beginning",
            "--max-messages",
            "2",
        ],
        None,
    );
    assert_eq!(first.lines().count(), 2, "{first}");
    let rest = ok(
        &node,
        &[
            "consume",
            "--topic",
            "people",
            "--group",
            "g",
            "--from-beginning",
            "--timeout-ms",
            "3000",
        ],
        None,
    );
    assert_eq!(rest.trim(), r#"{"id":3,"name":"cy","email":null}"#);

    // --skip-bad-lines: reported and passed over.
    let skipped = inlet(
        &node,
        &["produce", "--topic", "people", "--value-schema", &schema, "--skip-bad-lines"],
        Some("{\"id\": 6, \"name\": \"fay\", \"colour\": \"red\"}\nnot json\n{\"id\": 7, \"name\": \"gus\"}\n"),
    );
    assert!(skipped.success(), "{}", skipped.output());
    assert!(
        skipped
            .stderr
            .contains("line 1: the record cli.Person has no field \"colour\"")
            && skipped.stderr.contains("line 2: not JSON")
            && skipped
                .stderr
                .contains("1 records acknowledged on people, 2 bad lines skipped"),
        "{}",
        skipped.output()
    );

    if let Some(python) = avro_python() {
        let expected = json!([
            {"id": 1, "name": "ann", "email": "ann@example.com"},
            {"id": 2, "name": "bob", "email": "bob@example.com"},
            {"id": 3, "name": "cy", "email": null},
            {"id": 7, "name": "gus", "email": null},
        ]);
        inlet_test_support::python::run_client(
            &python,
            "cli_produce.py",
            &[
                &node.kafka,
                &registry_url(&node),
                &common::iceberg_uri(&node),
                &"people",
                &expected.to_string(),
            ],
            Duration::from_secs(180),
        );
    }
    node.stop();
}

#[test]
fn produce_refuses_an_unknown_topic_an_invalid_schema_and_bad_flags_clearly() {
    let (dir, node) = temp_node(&["--kafka-config", "auto.create.topics.enable=true"]);
    let schema = write(dir.path(), "person.avsc", PERSON);
    let unknown = inlet(
        &node,
        &["produce", "--topic", "nowhere", "--value-schema", &schema],
        Some("{}\n"),
    );
    assert_eq!(code(&unknown), Some(3), "{}", unknown.output());
    assert!(
        unknown.stderr.contains("topic nowhere does not exist"),
        "{}",
        unknown.output()
    );
    // Not created by asking.
    let described = inlet(&node, &["topic", "describe", "nowhere"], None);
    assert_eq!(code(&described), Some(3), "{}", described.output());

    ok(&node, &["topic", "create", "t", "-p", "1"], None);
    let invalid = write(
        dir.path(),
        "bad.avsc",
        r#"{"type": "record", "name": "X", "fields": [{"name": "a", "type": "nope"}]}"#,
    );
    let refused = inlet(
        &node,
        &["produce", "--topic", "t", "--value-schema", &invalid],
        Some("{}\n"),
    );
    assert_eq!(code(&refused), Some(2), "{}", refused.output());
    assert!(
        refused.stderr.contains("not a valid AVRO schema"),
        "{}",
        refused.output()
    );

    let missing_file = inlet(
        &node,
        &[
            "produce",
            "--topic",
            "t",
            "--value-schema",
            "/nonexistent.avsc",
        ],
        Some("{}\n"),
    );
    assert_eq!(code(&missing_file), Some(2), "{}", missing_file.output());
    let property = inlet(
        &node,
        &["produce", "--topic", "t", "--property", "value.shcema=x"],
        Some("{}\n"),
    );
    assert_eq!(code(&property), Some(2), "{}", property.output());
    assert!(
        property.stderr.contains("value.shcema"),
        "{}",
        property.output()
    );

    // auto.register=false with a schema the subject does not have: not found, nothing sent.
    let lookup = inlet(
        &node,
        &[
            "produce",
            "--topic",
            "t",
            "--value-schema",
            &schema,
            "--property",
            "auto.register=false",
        ],
        Some("{\"id\": 1, \"name\": \"a\"}\n"),
    );
    assert_eq!(code(&lookup), Some(3), "{}", lookup.output());
    node.stop();
}

#[test]
fn the_console_producers_own_spellings_keys_protobuf_and_json_schema_round_trip() {
    let (dir, node) = temp_node(&[]);
    for t in ["keyed", "proto", "jsonschema"] {
        ok(&node, &["topic", "create", t, "-p", "1"], None);
    }
    // kafka-avro-console-producer's command, with inlet produce in its place.
    let registry = registry_url(&node);
    let registry_property = format!("schema.registry.url={registry}");
    let value_schema = format!("value.schema={PERSON}");
    let key_schema = r#"key.schema={"type": "record", "name": "Key", "fields": [{"name": "id", "type": "long"}]}"#;
    let c = run_captured(
        Command::new(INLET).args([
            "produce", "--broker-list", &node.kafka, "--topic", "keyed",
            "--property", &registry_property, "--property", &value_schema,
            "--property", key_schema, "--property", "parse.key=true", "--property", "key.separator=|",
        ]),
        Some(b"{\"id\": 1}|{\"id\": 1, \"name\": \"a\"}\n{\"id\": 2}|{\"id\": 2, \"name\": \"b\", \"email\": null}\n"),
        Duration::from_secs(60),
        Duration::from_millis(50),
    );
    assert!(c.success(), "{}", c.output());
    let printed = ok(
        &node,
        &[
            "consume",
            "--topic",
            "keyed",
            "--from-beginning",
            "--max-messages",
            "2",
            "--property",
            "print.key=true",
            "--property",
            "key.separator= => ",
        ],
        None,
    );
    assert_eq!(
        printed.lines().collect::<Vec<_>>(),
        [
            r#"{"id":1} => {"id":1,"name":"a","email":null}"#,
            r#"{"id":2} => {"id":2,"name":"b","email":null}"#,
        ]
    );
    // The schemas are registered under TopicNameStrategy's subjects.
    let (status, subjects) = node.registry_get("/subjects");
    assert_eq!(status, 200);
    let subjects: Value = serde_json::from_str(&subjects).unwrap();
    for s in ["keyed-key", "keyed-value"] {
        assert!(
            subjects.as_array().unwrap().iter().any(|v| v == s),
            "{s} in {subjects}"
        );
    }

    let proto = write(
        dir.path(),
        "reading.proto",
        "syntax = \"proto3\";\npackage cli;\nmessage Reading { string sensor = 1; double value = 2; repeated int64 at = 3; }\n",
    );
    ok(
        &node,
        &["produce", "--topic", "proto", "--value-schema", &proto],
        Some("{\"sensor\": \"s1\", \"value\": 1.5, \"at\": [\"1\", 2]}\n"),
    );
    let bad = inlet(
        &node,
        &["produce", "--topic", "proto", "--value-schema", &proto],
        Some("{\"sensor\": 3}\n"),
    );
    assert_eq!(code(&bad), Some(1), "{}", bad.output());
    assert!(
        bad.stderr.contains("line 1: not a cli.Reading"),
        "{}",
        bad.output()
    );
    let printed = ok(
        &node,
        &[
            "consume",
            "--topic",
            "proto",
            "--from-beginning",
            "--max-messages",
            "1",
        ],
        None,
    );
    let reading: Value = serde_json::from_str(printed.trim()).unwrap();
    assert_eq!(
        reading,
        json!({"sensor": "s1", "value": 1.5, "at": ["1", "2"]})
    );

    let json_schema = write(
        dir.path(),
        "event.json",
        r#"{"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
            "properties": {"kind": {"type": "string"}, "n": {"type": "integer"}}, "required": ["kind"]}"#,
    );
    let jc = inlet(
        &node,
        &[
            "produce",
            "--topic",
            "jsonschema",
            "--value-schema",
            &json_schema,
        ],
        Some("{\"kind\": \"click\", \"n\": 3}\n{\"n\": 4}\n"),
    );
    assert_eq!(code(&jc), Some(1), "{}", jc.output());
    assert!(
        jc.stderr.contains("line 2:") && jc.stderr.contains("kind"),
        "{}",
        jc.output()
    );
    let printed = ok(
        &node,
        &[
            "consume",
            "--topic",
            "jsonschema",
            "--from-beginning",
            "--max-messages",
            "1",
        ],
        None,
    );
    assert_eq!(printed.trim(), r#"{"kind": "click", "n": 3}"#, "as written");
    node.stop();
}

#[test]
fn schema_group_and_table_commands_show_what_the_node_holds() {
    let (dir, node) = temp_node(&[]);
    ok(
        &node,
        &[
            "topic",
            "create",
            "orders",
            "-p",
            "1",
            "--table",
            "-c",
            "table.topic.commit.interval.ms=1000",
        ],
        None,
    );
    let v1 = write(
        dir.path(),
        "v1.avsc",
        r#"{"type": "record", "name": "Order", "fields": [
        {"name": "id", "type": "long"}, {"name": "name", "type": "string"}]}"#,
    );
    let v2 = write(
        dir.path(),
        "v2.avsc",
        r#"{"type": "record", "name": "Order", "fields": [
        {"name": "id", "type": "long"}, {"name": "name", "type": "string"},
        {"name": "email", "type": ["null", "string"], "default": null}]}"#,
    );
    ok(
        &node,
        &["produce", "--topic", "orders", "--value-schema", &v1],
        Some("{\"id\": 1, \"name\": \"a\"}\n{\"id\": 2, \"name\": \"b\"}\n"),
    );
    ok(
        &node,
        &["produce", "--topic", "orders", "--value-schema", &v2],
        Some("{\"id\": 3, \"name\": \"c\", \"email\": \"c@x\"}\n"),
    );

    // Schemas.
    let subjects = json_of(&node, &["schema", "list", "--format", "json"]);
    assert_eq!(
        subjects,
        json!([{"subject": "orders-value", "version": 2, "id": subjects[0]["id"], "type": "AVRO", "compatibility": "BACKWARD"}])
    );
    let first = json_of(
        &node,
        &[
            "schema",
            "get",
            "orders-value",
            "--version",
            "1",
            "--format",
            "json",
        ],
    );
    assert_eq!(first["version"], 1);
    let text = ok(&node, &["schema", "get", "orders-value"], None);
    assert!(text.contains("\"email\""), "{text}");
    let diff = ok(&node, &["schema", "diff", "orders-value"], None);
    assert!(
        diff.contains("version 1")
            && diff.contains("→ version 2")
            && diff.contains("compatibility BACKWARD")
            && diff
                .lines()
                .any(|l| l == "+ email: [null, string] (default null)")
            && diff.lines().count() == 2,
        "{diff}"
    );
    let missing = inlet(&node, &["schema", "get", "nothing-value"], None);
    assert_eq!(code(&missing), Some(3), "{}", missing.output());

    // Groups: two of the three records consumed and committed.
    ok(
        &node,
        &[
            "consume",
            "--topic",
            "orders",
            "--group",
            "billing",
            "--from-beginning",
            "--max-messages",
            "2",
        ],
        None,
    );
    let groups = json_of(&node, &["group", "list", "--format", "json"]);
    assert!(
        groups
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["group"] == "billing"),
        "{groups}"
    );
    let described = json_of(&node, &["group", "describe", "billing", "--format", "json"]);
    assert_eq!(
        described["partitions"],
        json!([{"topic": "orders", "partition": 0, "committed": 2, "latest": 3, "lag": 1, "member": null}]),
        "{described}"
    );
    let human = ok(&node, &["group", "describe", "billing"], None);
    assert!(
        human
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["lag", "1"]),
        "{human}"
    );
    let unknown = inlet(&node, &["group", "describe", "nobody"], None);
    assert_eq!(code(&unknown), Some(3), "{}", unknown.output());

    // Tables: once the three records are committed.
    let server = common::http_url(&node);
    let listed = common::poll_until(60, "the table holds the three records", || {
        let v = json_of(
            &node,
            &["table", "list", "--server", &server, "--format", "json"],
        );
        (v[0]["records"] == 3).then_some(v)
    });
    assert_eq!(listed[0]["table"], "default.orders");
    assert_eq!(listed[0]["table_topic"], true);
    let table = json_of(
        &node,
        &[
            "table",
            "describe",
            "default.orders",
            "--server",
            &server,
            "--format",
            "json",
        ],
    );
    let columns: Vec<&str> = table["schema"]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["name"].as_str())
        .collect();
    // The evolved column comes after the table's own `_kafka` column.
    assert_eq!(columns, ["id", "name", "_kafka", "email"]);
    assert!(
        table["table_topic"]["committed_offsets"].is_object(),
        "{table}"
    );
    let snapshots = json_of(
        &node,
        &[
            "table",
            "snapshots",
            "default.orders",
            "--server",
            &server,
            "--format",
            "json",
        ],
    );
    let last = snapshots.as_array().unwrap().last().cloned().unwrap();
    assert_eq!(last["total_records"], "3", "{snapshots}");
    let files = json_of(
        &node,
        &[
            "table",
            "files",
            "default.orders",
            "--server",
            &server,
            "--format",
            "json",
        ],
    );
    let records: i64 = files
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["record_count"].as_i64())
        .sum();
    assert_eq!(records, 3, "{files}");
    let human = ok(
        &node,
        &["table", "files", "default.orders", "--server", &server],
        None,
    );
    assert!(human.starts_with("content"), "{human}");
    for args in [
        &["table", "describe", "default.nope", "--server", &server][..],
        &["table", "files", "default.nope", "--server", &server],
    ] {
        let missing = inlet(&node, args, None);
        assert_eq!(code(&missing), Some(3), "{args:?}: {}", missing.output());
    }
    let bad = inlet(
        &node,
        &["table", "describe", "nodot", "--server", &server],
        None,
    );
    assert_eq!(code(&bad), Some(2), "{}", bad.output());
    node.stop();
}

/// The client commands authenticate like any client: SASL/SCRAM on the Kafka listener from a
/// Java-style properties file (`--command-config` with `sasl.jaas.config`), and the registry's
/// basic authentication (`basic.auth.user.info`); wrong credentials fail with exit 1 and the
/// reason.
#[test]
fn the_commands_authenticate_with_scram_and_the_registrys_basic_auth() {
    let dir = tempfile::tempdir().unwrap();
    let (node, sasl) = common::secured_node(dir.path(), "[registry]\nauthentication = \"basic\"\n");
    let properties = |password: &str| {
        write(
            dir.path(),
            &format!("client-{password}.properties"),
            &format!(
                "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n\
                 sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"admin\" password=\"{password}\";\n"
            ),
        )
    };
    let good = properties("admin-secret");
    let schema = write(dir.path(), "person.avsc", PERSON);
    let kafka = [
        "--bootstrap-server",
        sasl.as_str(),
        "--command-config",
        good.as_str(),
    ];
    let with = |args: &[&str]| -> Vec<String> {
        args.iter()
            .chain(kafka.iter())
            .map(|s| s.to_string())
            .collect()
    };
    let run = |args: Vec<String>, stdin: Option<&str>| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        inlet(&node, &args, stdin)
    };
    let created = run(with(&["topic", "create", "secure", "-p", "1"]), None);
    assert!(created.success(), "{}", created.output());
    let produced = run(
        with(&[
            "produce",
            "--topic",
            "secure",
            "--value-schema",
            &schema,
            "--property",
            "basic.auth.user.info=admin:admin-secret",
        ]),
        Some("{\"id\": 1, \"name\": \"a\"}\n"),
    );
    assert!(produced.success(), "{}", produced.output());
    let consumed = run(
        with(&[
            "consume",
            "--topic",
            "secure",
            "--from-beginning",
            "--max-messages",
            "1",
            "--property",
            "basic.auth.user.info=admin:admin-secret",
        ]),
        None,
    );
    assert!(consumed.success(), "{}", consumed.output());
    assert_eq!(
        consumed.stdout.trim(),
        r#"{"id":1,"name":"a","email":null}"#
    );
    let subjects = run(
        vec![
            "schema".into(),
            "list".into(),
            "--basic-auth".into(),
            "admin:admin-secret".into(),
            "--format".into(),
            "json".into(),
        ],
        None,
    );
    assert!(
        subjects.success() && subjects.stdout.contains("secure-value"),
        "{}",
        subjects.output()
    );

    // Wrong credentials: a clear failure, exit 1.
    let bad = properties("wrong");
    let refused = run(
        vec![
            "topic".into(),
            "list".into(),
            "--bootstrap-server".into(),
            sasl.clone(),
            "--command-config".into(),
            bad,
        ],
        None,
    );
    assert_eq!(code(&refused), Some(1), "{}", refused.output());
    assert!(
        refused.stderr.to_lowercase().contains("authentication"),
        "{}",
        refused.output()
    );
    let no_registry_login = run(
        with(&["produce", "--topic", "secure", "--value-schema", &schema]),
        Some("{\"id\": 2, \"name\": \"b\"}\n"),
    );
    assert_eq!(
        code(&no_registry_login),
        Some(1),
        "{}",
        no_registry_login.output()
    );
    assert!(
        no_registry_login.stderr.contains("schema registry"),
        "{}",
        no_registry_login.output()
    );
    node.stop();
}
