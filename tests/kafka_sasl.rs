//! SASL on Kafka listeners (`ingest/src/sasl`): a node with a PLAINTEXT and a SASL_PLAINTEXT
//! listener, users added with `inlet users`, PLAIN and SCRAM from confluent-kafka
//! (`tests/clients/sasl.py`), the principals they authenticate as under the ACL authorizer,
//! SCRAM credentials through the admin API, and re-authentication (KIP-368).
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;
use common::Start as _;

use std::time::Duration;

use common::python::{require_python, run, script};
use common::Node;
use inlet_test_support::node::free_port;

/// `inlet users ARGS…` on `data_dir`, fed `stdin`; its output.
fn users(data_dir: &std::path::Path, args: &[&str], stdin: &str) -> (bool, String) {
    use std::io::Write;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_inlet"))
        .arg("users")
        .args(args)
        .arg("--data-dir")
        .arg(data_dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn sasl_listeners_authenticate_plain_and_scram_users_for_the_authorizer() {
    let Some(python) = require_python("import confluent_kafka", "confluent-kafka") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("node");
    let (ok, out) = users(
        &data,
        &["add", "admin", "--mechanism", "SCRAM-SHA-512"],
        "admin-secret\n",
    );
    assert!(ok, "{out}");
    let (ok, out) = users(
        &data,
        &[
            "add",
            "alice",
            "--password",
            "alice-secret",
            "--mechanism",
            "SCRAM-SHA-256",
        ],
        "",
    );
    assert!(ok, "{out}");
    let (ok, out) = users(&data, &["add", "eve", "--iterations", "10"], "pw\n");
    assert!(
        !ok && out.contains("--iterations must be 4096 to 16384"),
        "{out}"
    );
    let (ok, out) = users(&data, &["list"], "");
    assert!(ok, "{out}");
    assert!(
        out.contains("admin\tSCRAM-SHA-512(8192)") && out.contains("alice\tSCRAM-SHA-256(8192)"),
        "{out}"
    );

    let (plain_port, sasl_port) = (free_port(), free_port());
    let listeners = format!(
        "listeners=PLAINTEXT://127.0.0.1:{plain_port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}"
    );
    let node = Node::start(
        &data,
        &[
            "--kafka-config",
            &listeners,
            "--kafka-config",
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "--kafka-config",
            "super.users=User:admin",
            "--kafka-config",
            "connections.max.reauth.ms=3000",
        ],
    );
    assert_eq!(node.kafka, format!("127.0.0.1:{plain_port}"));
    let (status, output) = run(
        &python,
        &[
            script("sasl.py").into(),
            node.kafka.clone().into(),
            format!("127.0.0.1:{sasl_port}").into(),
        ],
        Duration::from_secs(300),
    );
    assert!(
        status.is_some_and(|s| s.success()) && output.contains("\nOK\n"),
        "sasl.py failed ({status:?}):\n{output}"
    );
    // The 8 s producer outlived two 3 s sessions on its connection: librdkafka re-authenticated
    // in place rather than being cut off.
    assert!(
        node.metric("inlet_kafka_sasl_reauthentications_total") >= 1.0,
        "no re-authentication"
    );
    assert!(node.metric("inlet_kafka_sasl_failures_total") >= 4.0);
    node.stop();

    let (ok, out) = users(&data, &["delete", "alice"], "");
    assert!(ok, "{out}");
    let (ok, out) = users(&data, &["delete", "alice"], "");
    assert!(!ok && out.contains("has no credentials"), "{out}");
}

#[test]
fn a_listener_without_a_security_protocol_or_a_certificate_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    for (config, expected) in [
        (
            "listeners=INTERNAL://127.0.0.1:0",
            "listener INTERNAL has no security protocol",
        ),
        (
            "listeners=SSL://127.0.0.1:0",
            "listener SSL is SSL: name its certificate and key with ssl.keystore.location",
        ),
        ("sasl.enabled.mechanisms=GSSAPI", "GSSAPI is not offered"),
    ] {
        let text = common::refused_at_start(dir.path(), &["--kafka-config".into(), config.into()]);
        assert!(text.contains(expected), "{config}: {text}");
    }
}

/// The startup line says how open the node is, and a listener facing the network without
/// TLS or authentication is warned about.
#[test]
fn the_startup_line_says_how_open_the_node_is() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let listen = format!("0.0.0.0:{port}");
    let (http, registry) = (
        format!("0.0.0.0:{}", free_port()),
        format!("0.0.0.0:{}", free_port()),
    );
    let node = Node::start(
        &dir.path().join("open"),
        &[
            "--kafka-listen",
            &listen,
            "--advertised-host",
            "127.0.0.1",
            "--http-listen",
            &http,
            "--registry-listen",
            &registry,
        ],
    );
    let warning = node.wait_for_log("faces the network with neither TLS nor authentication");
    assert!(warning.contains("PLAINTEXT"), "{warning}");
    // Then the HTTP and registry listeners, each with the setting that closes it.
    let warning = node.wait_for_log("the HTTP listener at");
    assert!(
        warning.contains("[http] authentication") && warning.contains("has no authentication"),
        "{warning}"
    );
    let warning = node.wait_for_log("the Schema Registry listener at");
    assert!(warning.contains("[registry] authentication"), "{warning}");
    node.stop();
}

/// The Schema Registry with `[registry] authentication = "basic"`: confluent-kafka's
/// SchemaRegistryClient and AvroSerializer authenticate as Kafka users, and each operation is
/// authorized by the Kafka ACLs of its subject's topic (`tests/clients/registry_auth.py`).
#[test]
fn the_schema_registry_authenticates_kafka_users_and_follows_the_topic_acls() {
    let Some(python) = require_python(
        "import confluent_kafka.schema_registry.avro",
        "confluent-kafka with its Schema Registry client",
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (node, sasl) = common::secured_node(
        dir.path(),
        "[registry]\nauthentication = \"basic\"\n[http]\nauthentication = \"token\"\n",
    );
    let (status, output) = run(
        &python,
        &[
            script("registry_auth.py").into(),
            format!("http://{}", node.registry).into(),
            sasl.into(),
            format!("http://{}", node.http).into(),
        ],
        Duration::from_secs(300),
    );
    assert!(
        status.is_some_and(|s| s.success()) && output.contains("\nOK\n"),
        "registry_auth.py failed ({status:?}):\n{output}"
    );
    node.stop();

    let text = common::refused_at_start(
        &dir.path().join("other"),
        &["--config".into(), {
            let bad = dir.path().join("bad.toml");
            std::fs::write(&bad, "[registry]\nauthentication = \"digest\"\n").unwrap();
            bad.to_string_lossy().into_owned()
        }],
    );
    assert!(
        text.contains("authentication \"digest\" is not one of none, basic"),
        "{text}"
    );
}

/// SASL/OAUTHBEARER (`ingest/src/sasl/oauthbearer.rs`): an identity provider's JWTs checked
/// against its JSON Web Key Set (a `file:` URL here; the script signs tokens with its own keys
/// and rotates the set), their claims as Kafka checks them, and Inlet's own tokens from the
/// HTTP listener's token endpoint (also fetched by the Java client's own OAuth2 login); the
/// token's subject is the principal the ACLs see.
#[test]
fn oauthbearer_tokens_of_an_identity_provider_and_of_inlet_authenticate_kafka_clients() {
    let Some(python) = require_python(
        "import confluent_kafka, cryptography",
        "confluent-kafka and cryptography",
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let jwks = dir.path().join("jwks.json");
    std::fs::write(&jwks, r#"{"keys": []}"#).unwrap();
    let jwks_url = format!(
        "sasl.oauthbearer.jwks.endpoint.url=file://{}",
        jwks.display()
    );
    let (node, sasl) = common::secured_node_with(
        dir.path(),
        "[http]\nauthentication = \"token\"\n",
        &[
            "sasl.enabled.mechanisms=SCRAM-SHA-512,OAUTHBEARER",
            &jwks_url,
            "sasl.oauthbearer.expected.issuer=https://idp.test",
            "sasl.oauthbearer.expected.audience=inlet",
            "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms=200",
        ],
    );
    let (status, output) = run(
        &python,
        &[
            script("oauthbearer.py").into(),
            sasl.clone().into(),
            format!("http://{}", node.http).into(),
            jwks.clone().into_os_string(),
        ],
        Duration::from_secs(300),
    );
    assert!(
        status.is_some_and(|s| s.success()) && output.contains("\nOK\n"),
        "oauthbearer.py failed ({status:?}):\n{output}"
    );
    let token_url = format!("http://{}/iceberg/v1/oauth/tokens", node.http);
    // kafkajs (its own SASL code), with a token of that endpoint.
    if let Some(kafkajs) = common::kafkajs() {
        let done = inlet_test_support::process::run_captured(
            std::process::Command::new("node")
                .env("NODE_PATH", kafkajs.join("node_modules"))
                .arg(script("oauthbearer_kafkajs.js"))
                .arg(&sasl)
                .arg(&token_url)
                .arg("payments"),
            None,
            Duration::from_secs(300),
            Duration::from_millis(50),
        );
        let output = done.output();
        assert!(
            done.success() && output.contains("\nOK"),
            "oauthbearer_kafkajs.js failed:\n{output}"
        );
    }
    // The Java client's own OAuth2 login (client credentials) against Inlet's token endpoint,
    // on the topic and group the script let alice use.
    if let Some(libs) = common::java_clients() {
        let classes = common::compile_java("OAuthClients.java", &libs);
        let (status, output) = run(
            "java".as_ref(),
            &[
                format!("-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={token_url}").into(),
                "-cp".into(),
                format!("{}:{}/*", classes.path().display(), libs.display()).into(),
                "OAuthClients".into(),
                sasl.into(),
                token_url.into(),
                "payments".into(),
                "oauth-readers".into(),
            ],
            Duration::from_secs(300),
        );
        assert!(
            status.is_some_and(|s| s.success()) && output.lines().any(|l| l == "OK"),
            "OAuthClients failed ({status:?}):\n{output}"
        );
    }
    node.stop();

    // A key set URL of another scheme is refused at start, with the reason.
    let text = common::refused_at_start(
        &dir.path().join("other"),
        &[
            "--kafka-config".into(),
            "sasl.oauthbearer.jwks.endpoint.url=ftp://idp/keys".into(),
        ],
    );
    assert!(
        text.contains("must be an https:, http: or file: URL"),
        "{text}"
    );
}

/// Failed authentications are counted by client address across listeners: past
/// `inlet.authentication.failures.max` within the window, even the right password is refused
/// until the window ends (`ingest/src/sasl/failures.rs`).
#[test]
fn an_address_that_failed_too_often_is_refused_for_a_while() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("node");
    common::add_user(&data, "alice", "alice-secret");
    let config = dir.path().join("inlet.toml");
    std::fs::write(&config, "[http]\nauthentication = \"token\"\n").unwrap();
    let node = Node::start(
        &data,
        &[
            "--config",
            &config.to_string_lossy(),
            "--kafka-config",
            "inlet.authentication.failures.max=3",
            "--kafka-config",
            "inlet.authentication.failure.window.ms=4000",
        ],
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let url = format!("http://{}/v1/tables", node.http);
    let get = |password: &str| {
        rt.block_on(async {
            let r = reqwest::Client::new()
                .get(&url)
                .basic_auth("alice", Some(password))
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        })
    };
    assert_eq!(get("alice-secret").0, 200);
    for _ in 0..3 {
        let (status, body) = get("wrong");
        assert!(
            status == 401 && body.contains("invalid credentials"),
            "{status} {body}"
        );
    }
    let (status, body) = get("alice-secret");
    assert!(
        status == 401 && body.contains("too many failed authentications"),
        "the right password within the window: {status} {body}"
    );
    // Once the window has ended, the right password works again.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = get("alice-secret");
        if status == 200 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline && body.contains("too many"),
            "{status} {body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    node.stop();
}

/// One Kafka request on `stream` (request header v1, no client id), and its response body
/// after the correlation id; with how long the answer took.
fn exchange(
    stream: &mut std::net::TcpStream,
    api_key: i16,
    version: i16,
    body: &[u8],
) -> (Vec<u8>, Duration) {
    use std::io::{Read, Write};
    let mut request = Vec::new();
    request.extend_from_slice(&api_key.to_be_bytes());
    request.extend_from_slice(&version.to_be_bytes());
    request.extend_from_slice(&7i32.to_be_bytes());
    request.extend_from_slice(&(-1i16).to_be_bytes());
    request.extend_from_slice(body);
    let mut framed = (request.len() as i32).to_be_bytes().to_vec();
    framed.extend_from_slice(&request);
    let sent = std::time::Instant::now();
    stream.write_all(&framed).unwrap();
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).unwrap();
    let took = sent.elapsed();
    let mut response = vec![0u8; i32::from_be_bytes(len) as usize];
    stream.read_exact(&mut response).unwrap();
    assert_eq!(response[..4], 7i32.to_be_bytes(), "the correlation id");
    (response[4..].to_vec(), took)
}

/// A failed SASL authentication is answered only after `connection.failed.authentication.delay.ms`
/// (KIP-306), then the connection closes; a successful one is answered at once.
#[test]
fn a_failed_authentication_is_answered_after_the_configured_delay() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("node");
    common::add_user(&data, "alice", "alice-secret");
    let sasl = format!("127.0.0.1:{}", free_port());
    let listeners = format!(
        "listeners=PLAINTEXT://127.0.0.1:{},SASL_PLAINTEXT://{sasl}",
        free_port()
    );
    let node = Node::start(
        &data,
        &[
            "--kafka-config",
            &listeners,
            "--kafka-config",
            "connection.failed.authentication.delay.ms=1500",
        ],
    );
    let authenticate = |password: &str| {
        let mut stream = std::net::TcpStream::connect(&sasl).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        // SaslHandshake v1: PLAIN.
        let mut body = 5i16.to_be_bytes().to_vec();
        body.extend_from_slice(b"PLAIN");
        let (answer, _) = exchange(&mut stream, 17, 1, &body);
        assert_eq!(answer[..2], [0, 0], "the handshake's error code");
        // SaslAuthenticate v0: the PLAIN message.
        let message = format!("\0alice\0{password}");
        let mut body = (message.len() as i32).to_be_bytes().to_vec();
        body.extend_from_slice(message.as_bytes());
        let (answer, took) = exchange(&mut stream, 36, 0, &body);
        (i16::from_be_bytes([answer[0], answer[1]]), took, stream)
    };
    let (code, took, _) = authenticate("alice-secret");
    assert!(
        code == 0 && took < Duration::from_millis(1500),
        "{code} after {took:?}"
    );
    let (code, took, mut stream) = authenticate("wrong");
    // SASL_AUTHENTICATION_FAILED (58), and only after the delay.
    assert!(
        code == 58 && took >= Duration::from_millis(1500),
        "{code} after {took:?}"
    );
    let mut rest = [0u8; 1];
    assert_eq!(
        std::io::Read::read(&mut stream, &mut rest).unwrap(),
        0,
        "the connection is closed"
    );
    // A version 0 handshake (offered for old librdkafka's feature check; its unframed tokens
    // are not read) is answered UNSUPPORTED_VERSION (35).
    let mut stream = std::net::TcpStream::connect(&sasl).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut body = 5i16.to_be_bytes().to_vec();
    body.extend_from_slice(b"PLAIN");
    let (answer, _) = exchange(&mut stream, 17, 0, &body);
    assert_eq!(i16::from_be_bytes([answer[0], answer[1]]), 35);
    node.stop();
}

/// The audit trail (`[audit] file`, `ingest/src/audit.rs`, `src/audit.rs`): Kafka admin and
/// DDL requests with each resource's outcome, failed authentications, and changes through the
/// catalog and the registry, each with its principal and client, and never a password.
#[test]
fn the_audit_file_records_admin_actions_refusals_and_failed_logins() {
    let Some(python) = require_python("import confluent_kafka", "confluent-kafka") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit").join("audit.jsonl");
    let (node, sasl) = common::secured_node(
        dir.path(),
        &format!(
            "[http]\nauthentication = \"token\"\n[registry]\nauthentication = \"basic\"\n[audit]\nfile = \"{}\"\n",
            audit.display()
        ),
    );
    let (status, output) = run(
        &python,
        &[
            script("audit.py").into(),
            sasl.into(),
            format!("http://{}", node.http).into(),
            format!("http://{}", node.registry).into(),
        ],
        Duration::from_secs(300),
    );
    assert!(
        status.is_some_and(|s| s.success()) && output.contains("\nOK\n"),
        "audit.py failed ({status:?}):\n{output}"
    );
    // (interface, principal, action, resource, outcome); "" matches anything.
    let wanted: &[(&str, &str, &str, &str, &str)] = &[
        ("kafka", "User:admin", "CreateTopics", "TOPIC:audited", "ok"),
        (
            "kafka",
            "User:alice",
            "CreateTopics",
            "TOPIC:alice-topic",
            "denied",
        ),
        ("kafka", "", "authenticate", "", "failed"),
        ("kafka", "User:admin", "CreateAcls", "User:alice", "ok"),
        ("kafka", "User:admin", "DeleteTopics", "TOPIC:audited", "ok"),
        ("http", "User:admin", "POST", "/iceberg/v1/namespaces", "ok"),
        (
            "http",
            "User:alice",
            "POST",
            "/iceberg/v1/namespaces",
            "denied",
        ),
        (
            "registry",
            "User:admin",
            "POST",
            "/subjects/audited-value/versions",
            "ok",
        ),
    ];
    let mut text = String::new();
    inlet_test_support::node::poll_until(30, "every audit entry in the file", || {
        text = std::fs::read_to_string(&audit).unwrap_or_default();
        let entries: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("each line is a JSON object"))
            .collect();
        wanted
            .iter()
            .all(|(interface, principal, action, resource, outcome)| {
                entries.iter().any(|e| {
                    let is = |field: &str, want: &str| {
                        e[field].as_str().is_some_and(|v| v.contains(want))
                    };
                    is("interface", interface)
                        && is("principal", principal)
                        && is("action", action)
                        && is("resource", resource)
                        && is("outcome", outcome)
                        && is("time", "T")
                })
            })
            .then_some(())
    });
    assert!(
        !text.contains("-secret") && !text.contains("not-bobs-password"),
        "no password in the audit file:\n{text}"
    );
    node.stop();
}
