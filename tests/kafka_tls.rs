//! TLS on Kafka listeners (`ingest/src/tls.rs`) with confluent-kafka (`tests/clients/tls.py`):
//! an SSL listener that requires client certificates, whose subject names the principal the
//! ACLs allow (mTLS); a SASL_SSL listener with SCRAM-SHA-512 and PLAIN; refused handshakes
//! (no certificate, an expired one, another CA's, a client that does not trust the node); and
//! the node's certificate replaced on disk, reloaded without a restart. The same node is then
//! driven by kafkajs (`tests/clients/security_kafkajs.js`: its own TLS and SASL, mTLS under
//! ACLs, deny over allow), by kcat, by the rdkafka crate (SASL_SSL with SCRAM-SHA-512 and PLAIN,
//! mTLS, a wrong password, no certificate) and by the Java client 4.3.0
//! (`tests/clients/java/SecurityClients.java`: SASL_SSL, the AdminClient's ACL and SCRAM
//! credential calls). The Schema Registry and the
//! HTTP listener serve TLS from their own settings, and reload too (`tests/clients/https.py`).
//! Certificates come from `tests/clients/tls_certs.py`.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;
use common::Start as _;

use std::time::Duration;

use common::python::{require_python, run, script};
use common::Node;
use inlet_test_support::node::free_port;

fn python_ok(python: &std::path::Path, args: &[std::ffi::OsString], what: &str) -> String {
    let (status, output) = run(python, args, Duration::from_secs(300));
    assert!(
        status.is_some_and(|s| s.success()) && output.contains("OK"),
        "{what} failed ({status:?}):\n{output}"
    );
    output
}

/// `tls_certs.py`'s files in `dir/certs`, and a copy of the node's certificate
/// (`server.pem`) at `dir/node.pem` for the node to read: (the certificates' directory, the
/// copy).
fn certificates(
    python: &std::path::Path,
    dir: &std::path::Path,
) -> (std::path::PathBuf, std::path::PathBuf) {
    let certs = dir.join("certs");
    std::fs::create_dir_all(&certs).unwrap();
    python_ok(
        python,
        &[script("tls_certs.py").into(), certs.clone().into()],
        "making the certificates",
    );
    let keystore = dir.join("node.pem");
    std::fs::copy(certs.join("server.pem"), &keystore).unwrap();
    (certs, keystore)
}

#[test]
fn tls_listeners_with_mtls_principals_sasl_and_a_certificate_reload() {
    let Some(python) = require_python(
        "import confluent_kafka, cryptography",
        "confluent-kafka and cryptography",
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // The node reads its certificate from `keystore`; the test replaces it later.
    let (certs, keystore) = certificates(&python, dir.path());

    let data = dir.path().join("node");
    common::add_user(&data, "admin", "admin-secret");

    let (plain, ssl, sasl_ssl) = (free_port(), free_port(), free_port());
    let configs = [
        format!(
            "listeners=PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{ssl},SASL_SSL://127.0.0.1:{sasl_ssl}"
        ),
        "ssl.keystore.type=PEM".into(),
        format!("ssl.keystore.location={}", keystore.display()),
        format!("ssl.truststore.location={}", certs.join("ca.pem").display()),
        "listener.name.ssl.ssl.client.auth=required".into(),
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer".into(),
        "super.users=User:admin".into(),
    ];
    let args: Vec<String> = configs
        .iter()
        .flat_map(|c| ["--kafka-config".to_string(), c.clone()])
        .collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let node = Node::start(&data, &args);
    let ssl_bootstrap = format!("127.0.0.1:{ssl}");
    let sasl_bootstrap = format!("localhost:{sasl_ssl}");
    let phase = |phase: &str| {
        python_ok(
            &python,
            &[
                script("tls.py").into(),
                ssl_bootstrap.clone().into(),
                sasl_bootstrap.clone().into(),
                certs.clone().into(),
                phase.into(),
            ],
            phase,
        )
    };
    phase("run");
    assert!(
        node.metric("inlet_kafka_tls_failures_total") >= 4.0,
        "the refused handshakes are counted"
    );
    // kafkajs: its own TLS and SASL code, against the same node.
    if let Some(kafkajs) = common::kafkajs() {
        let name = "security_kafkajs.js";
        let done = inlet_test_support::process::run_captured(
            std::process::Command::new("node")
                .env("NODE_PATH", kafkajs.join("node_modules"))
                .arg(script(name))
                .arg(&ssl_bootstrap)
                .arg(format!("127.0.0.1:{sasl_ssl}"))
                .arg(&certs),
            None,
            Duration::from_secs(300),
            Duration::from_millis(50),
        );
        let output = done.output();
        assert!(
            done.success() && output.contains("\nOK"),
            "{name} failed:\n{output}"
        );
    }
    // kcat (librdkafka 2.0 with OpenSSL, as packaged): SASL_SSL with SCRAM-SHA-512 produces and
    // reads back; a wrong password fails.
    if std::process::Command::new("kcat")
        .arg("-V")
        .output()
        .is_ok()
    {
        let kcat = |password: &str, args: &[&str], stdin: Option<&str>| {
            let ca = format!("ssl.ca.location={}", certs.join("ca.pem").display());
            let password = format!("sasl.password={password}");
            let mut cmd = std::process::Command::new("kcat");
            // Cargo's library path holds rdkafka-sys's own librdkafka (a newer build),
            // which kcat would load in place of the system's.
            cmd.env_remove("LD_LIBRARY_PATH");
            cmd.args(["-b", &sasl_bootstrap, "-X", "security.protocol=SASL_SSL"])
                .args([
                    "-X",
                    "sasl.mechanisms=SCRAM-SHA-512",
                    "-X",
                    "sasl.username=admin",
                ])
                .args(["-X", &password, "-X", &ca, "-m", "20"])
                .args(args);
            inlet_test_support::process::run_captured(
                &mut cmd,
                stdin.map(str::as_bytes),
                Duration::from_secs(60),
                Duration::from_millis(50),
            )
        };
        let produced = kcat(
            "admin-secret",
            &["-P", "-t", "kcat-secure"],
            Some("over-tls\n"),
        );
        assert!(
            produced.success(),
            "kcat -P ({:?}): {}",
            produced.status,
            produced.output()
        );
        let read = kcat(
            "admin-secret",
            &[
                "-C",
                "-t",
                "kcat-secure",
                "-o",
                "beginning",
                "-c",
                "1",
                "-e",
            ],
            None,
        );
        assert!(
            read.success() && read.output().contains("over-tls"),
            "kcat -C: {}",
            read.output()
        );
        let refused = kcat("wrong", &["-L"], None);
        assert!(
            !refused.success() && refused.output().to_lowercase().contains("authentication"),
            "kcat with a wrong password: {}",
            refused.output()
        );
    }
    // The rdkafka crate (its own librdkafka, built with OpenSSL): SASL_SSL and mTLS.
    rdkafka_over_tls(&ssl_bootstrap, &sasl_bootstrap, &certs);
    // The Java client (kafka-clients 4.3.0): SASL_SSL with a PEM truststore, the AdminClient's
    // ACL and SCRAM credential calls.
    if let Some(libs) = common::java_clients() {
        let classes = common::compile_java("SecurityClients.java", &libs);
        let (status, output) = run(
            "java".as_ref(),
            &[
                "-cp".into(),
                format!("{}:{}/*", classes.path().display(), libs.display()).into(),
                "SecurityClients".into(),
                format!("localhost:{sasl_ssl}").into(),
                certs.join("ca.pem").into(),
            ],
            Duration::from_secs(300),
        );
        assert!(
            status.is_some_and(|s| s.success()) && output.lines().any(|l| l == "OK"),
            "SecurityClients failed ({status:?}):\n{output}"
        );
    }

    // A new certificate (another CA's) on disk: new connections get it, without a restart.
    let replaced = dir.path().join("node.pem.new");
    std::fs::copy(certs.join("server2.pem"), &replaced).unwrap();
    std::fs::rename(&replaced, &keystore).unwrap();
    node.wait_for_log("TLS certificates reloaded");
    phase("reloaded");
    node.stop();
}

/// The rdkafka crate against the node of the test above: over SASL_SSL, admin produces and
/// reads back with SCRAM-SHA-512 and with PLAIN, and a wrong password is refused; on the SSL
/// listener, client-a's certificate (the principal `tls.py` granted the topic `secure`)
/// produces and reads back, and a client with no certificate is refused.
fn rdkafka_over_tls(ssl: &str, sasl: &str, certs: &std::path::Path) {
    use rdkafka::config::ClientConfig;
    use rdkafka::consumer::{BaseConsumer, Consumer as _};
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer as _};
    use rdkafka::Message as _;

    let ca = certs.join("ca.pem").display().to_string();
    let base = |bootstrap: &str| {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", bootstrap)
            .set("ssl.ca.location", &ca)
            .set("socket.timeout.ms", "10000");
        c
    };
    let sasl_config = |mechanism: &str, password: &str| {
        let mut c = base(sasl);
        c.set("security.protocol", "SASL_SSL")
            .set("sasl.mechanisms", mechanism)
            .set("sasl.username", "admin")
            .set("sasl.password", password);
        c
    };
    let mtls_config = || {
        let mut c = base(ssl);
        c.set("security.protocol", "SSL")
            .set(
                "ssl.certificate.location",
                certs.join("client.pem").display().to_string(),
            )
            .set(
                "ssl.key.location",
                certs.join("client.key").display().to_string(),
            );
        c
    };
    // Produces `value` to `topic` and reads it back from the beginning with `group`.
    let round_trip = |config: &ClientConfig, topic: &str, group: &str, value: &str| {
        let producer: BaseProducer = config.create().expect("a producer");
        producer
            .send(BaseRecord::<(), str>::to(topic).payload(value))
            .map_err(|(e, _)| e)
            .expect("queued");
        producer
            .flush(Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("{topic}: the record was not acknowledged: {e}"));
        let consumer: BaseConsumer = config
            .clone()
            .set("group.id", group)
            .set("auto.offset.reset", "earliest")
            .create()
            .expect("a consumer");
        consumer.subscribe(&[topic]).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            assert!(
                std::time::Instant::now() < deadline,
                "{value} not read back"
            );
            if let Some(m) = consumer.poll(Duration::from_millis(500)) {
                let m = m.expect("a record");
                if m.payload() == Some(value.as_bytes()) {
                    return;
                }
            }
        }
    };
    round_trip(
        &sasl_config("SCRAM-SHA-512", "admin-secret"),
        "rdkafka-secure",
        "rk-scram",
        "scram",
    );
    round_trip(
        &sasl_config("PLAIN", "admin-secret"),
        "rdkafka-secure",
        "rk-plain",
        "plain",
    );
    round_trip(&mtls_config(), "secure", "readers", "mtls");

    // Refused: a wrong password, and no client certificate where one is required. Either
    // way metadata never comes.
    let wrong: BaseProducer = sasl_config("SCRAM-SHA-512", "wrong")
        .create()
        .expect("a producer");
    let err = wrong
        .client()
        .fetch_metadata(None, Duration::from_secs(10))
        .expect_err("a wrong password is refused");
    let mut no_cert = base(ssl);
    no_cert.set("security.protocol", "SSL");
    let anonymous: BaseProducer = no_cert.create().expect("a producer");
    let err2 = anonymous
        .client()
        .fetch_metadata(None, Duration::from_secs(10))
        .expect_err("no client certificate is refused");
    eprintln!("rdkafka refused as expected: {err}; {err2}");
}

#[test]
fn a_tls_listener_with_a_bad_keystore_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.pem");
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "").unwrap();
    for (configs, expected) in [
        (
            vec![
                "listeners=SSL://127.0.0.1:0".to_string(),
                format!("ssl.keystore.location={}", missing.display()),
            ],
            "ssl.keystore.location",
        ),
        (
            vec![
                "listeners=SSL://127.0.0.1:0".to_string(),
                format!("ssl.keystore.location={}", empty.display()),
            ],
            "no certificate in it",
        ),
        (vec!["ssl.keystore.type=JKS".to_string()], "PEM files only"),
    ] {
        let mut args: Vec<String> = Vec::new();
        for c in &configs {
            args.extend(["--kafka-config".to_string(), c.clone()]);
        }
        if configs.len() == 1 {
            // A keystore type is checked where a TLS listener reads it.
            args.extend([
                "--kafka-config".to_string(),
                "listeners=SSL://127.0.0.1:0".into(),
            ]);
        }
        let text = common::refused_at_start(dir.path(), &args);
        assert!(text.contains(expected), "{configs:?}: {text}");
    }
}

/// The Schema Registry and the HTTP listener over TLS from PEM files in Inlet's own settings
/// (`[registry] tls_keystore`, `[http] tls_keystore`), the registry with basic auth, and a
/// certificate replaced while the node runs (`tests/clients/https.py`).
#[test]
fn the_registry_and_http_listeners_serve_tls_and_reload_their_certificate() {
    let Some(python) = require_python(
        "import confluent_kafka.schema_registry, cryptography",
        "confluent-kafka and cryptography",
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (certs, keystore) = certificates(&python, dir.path());
    let keystore_toml = keystore.display().to_string().replace('\\', "\\\\");
    let (node, _sasl) = common::secured_node(
        dir.path(),
        &format!(
            "[registry]\nauthentication = \"basic\"\ntls_keystore = \"{keystore_toml}\"\n\
             [http]\ntls_keystore = \"{keystore_toml}\"\n"
        ),
    );
    let port = |addr: &str| addr.rsplit_once(':').unwrap().1.to_string();
    python_ok(
        &python,
        &[
            script("https.py").into(),
            port(&node.registry).into(),
            port(&node.http).into(),
            certs.clone().into(),
            keystore.clone().into(),
        ],
        "https.py",
    );
    node.stop();

    // Client certificates (mTLS): requested by the registry, required by the HTTP listener.
    let dir2 = tempfile::tempdir().unwrap();
    let truststore = certs
        .join("ca.pem")
        .display()
        .to_string()
        .replace('\\', "\\\\");
    // The first CA's server certificate again (https.py left the keystore at another CA's).
    let keystore_toml = certs
        .join("server.pem")
        .display()
        .to_string()
        .replace('\\', "\\\\");
    let (node, sasl) = common::secured_node(
        dir2.path(),
        &format!(
            "[registry]\nauthentication = \"basic\"\ntls_keystore = \"{keystore_toml}\"\n\
             tls_truststore = \"{truststore}\"\ntls_client_auth = \"requested\"\n\
             [http]\nauthentication = \"token\"\ntls_keystore = \"{keystore_toml}\"\n\
             tls_truststore = \"{truststore}\"\ntls_client_auth = \"required\"\n"
        ),
    );
    python_ok(
        &python,
        &[
            script("mtls_http.py").into(),
            port(&node.registry).into(),
            port(&node.http).into(),
            sasl.into(),
            certs.clone().into(),
        ],
        "mtls_http.py",
    );
    node.stop();
    // Client authentication without a truststore refuses the start, naming the setting.
    let text = common::refused_at_start(
        &dir.path().join("other2"),
        &["--config".into(), {
            let c = dir.path().join("mtls-bad.toml");
            std::fs::write(
                &c,
                format!(
                    "[http]\ntls_keystore = \"{keystore_toml}\"\ntls_client_auth = \"required\"\n"
                ),
            )
            .unwrap();
            c.to_string_lossy().into_owned()
        }],
    );
    assert!(text.contains("tls_truststore"), "{text}");

    // A keystore that is not one refuses the start, naming the setting.
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[http]\ntls_keystore = \"/nonexistent/key.pem\"\n").unwrap();
    let text = common::refused_at_start(
        &dir.path().join("other"),
        &["--config".into(), bad.to_string_lossy().into_owned()],
    );
    assert!(
        text.contains("[http] tls_keystore") && text.contains("/nonexistent/key.pem"),
        "{text}"
    );
}
