//! librdkafka's own integration tests (the `tests/` folder of the librdkafka source that the
//! `rdkafka-sys` crate carries, at the version this workspace builds) against a node, as the
//! librdkafka project runs them against a Kafka cluster: a single broker, PLAINTEXT,
//! `num.partitions=4` (what its test clusters are given), quick mode, with the ACL authorizer
//! on.
//!
//! The first run builds librdkafka and its `test-runner` with librdkafka's own configure
//! script and make (about two minutes on two cores) under the build directory
//! (`CARGO_TARGET_TMPDIR`), outside the clone; later runs reuse it.
//!
//! [`SUITE`] is every test of the suite that applies to one PLAINTEXT broker and passes. The
//! ones left out are in [`LEFT_OUT`], each with why: a test of a part Inlet does not have yet
//! names its issue, so that building the part means adding its test here.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use inlet_test_support::process::run_captured;

/// The tests run whole (their numbers), each passing against a node.
const SUITE: &[&str] = &[
    "0001", "0002", "0003", "0005", "0007", "0008", "0012", "0013", "0014", "0015", "0016", "0017",
    "0018", "0019", "0020", "0021", "0022", "0026", "0029", "0030", "0031", "0033", "0034", "0035",
    "0036", "0038", "0039", "0040", "0041", "0042", "0044", "0045", "0048", "0050", "0051", "0054",
    "0056", "0057", "0059", "0060", "0061", "0063", "0064", "0065", "0067", "0069", "0070", "0073",
    "0083", "0084", "0085", "0086", "0089", "0090", "0091", "0092", "0093", "0099", "0102", "0112",
    "0103", "0113", "0114", "0118", "0122", "0123", "0125", "0127", "0129", "0130", "0132", "0137",
    "0140",
];

/// Tests run sub-test by sub-test (`SUBTESTS`, a substring of the sub-test's name): the ones
/// that apply; [`LEFT_OUT`] says why the others do not.
const SUBTESTS: &[(&str, &[&str])] = &[
    (
        "0011",
        &[
            "test_message_partitioner_wo_per_message_flag",
            "test_single_partition",
            "test_partitioner",
            "test_per_message_partition_flag",
            "test_message_single_partition_record_fail",
        ],
    ),
    (
        "0081",
        &[
            "unclean_destroy",
            "CreateTopics",
            "DeleteTopics",
            "CreatePartitions",
            "CreateAcls",
            "DescribeAcls",
            "DeleteAcls",
            "DescribeConfigs",
            "AlterConfigs",
            "DeleteRecords",
            "ListConsumerGroups",
            "DescribeConsumerGroups",
            "DescribeTopics",
            "DescribeCluster",
            "DeleteGroups",
            "DeleteConsumerGroupOffsets",
            "ListOffsets",
            "AlterConsumerGroupOffsets",
            "ListConsumerGroupOffsets",
            "UserScramCredentials",
        ],
    ),
];

/// What is not run, and why (printed when the suite fails).
const LEFT_OUT: &[(&str, &str)] = &[
    (
        "0077",
        "it drives Kafka's command-line tools (KAFKA_PATH) to compact",
    ),
    (
        "0098",
        "it drives a Java transactional producer built from Kafka's sources (KAFKA_PATH)",
    ),
    (
        "0052, 0109, 0115, 0119",
        "they drive Kafka's command-line tools (KAFKA_PATH)",
    ),
    (
        "0097, 0126, 0128, 0135",
        "TLS, OAUTHBEARER and OIDC (issue 42); 0135 also needs SCRAM in librdkafka's build (OpenSSL)",
    ),
    (
        "0053, 0101, 0110",
        "they need RapidJSON, which librdkafka's build here leaves out",
    ),
    (
        "0153",
        "KIP-848 member ids (the consumer protocol, issue 41)",
    ),
    ("0082", "skipped by librdkafka itself in quick mode"),
    (
        "0055",
        "skipped by librdkafka itself when CI is set (latency measurements)",
    ),
    (
        "local and mock tests",
        "they run without a broker (test-runner -L leaves them out)",
    ),
];

/// The `rdkafka-sys` version in Cargo.lock, whose crate source carries librdkafka.
fn rdkafka_sys_version() -> String {
    let lock = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.lock"))
        .expect("Cargo.lock");
    let mut lines = lock.lines();
    while let Some(line) = lines.next() {
        if line == "name = \"rdkafka-sys\"" {
            let version = lines.next().expect("a version line");
            return version
                .trim_start_matches("version = \"")
                .trim_end_matches('"')
                .to_string();
        }
    }
    panic!("rdkafka-sys is not in Cargo.lock")
}

/// librdkafka's source in the cargo registry (cargo downloaded it to build this crate).
fn librdkafka_source(version: &str) -> PathBuf {
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cargo"));
    let registry = cargo_home.join("registry").join("src");
    std::fs::read_dir(&registry)
        .unwrap_or_else(|e| panic!("{}: {e}", registry.display()))
        .filter_map(|d| d.ok())
        .map(|d| {
            d.path()
                .join(format!("rdkafka-sys-{version}"))
                .join("librdkafka")
        })
        .find(|p| p.join("tests").join("test.c").exists())
        .unwrap_or_else(|| {
            panic!(
                "librdkafka's source of rdkafka-sys {version} is not in {}",
                registry.display()
            )
        })
}

fn sh(dir: &Path, script: &str, what: &str) {
    let run = run_captured(
        Command::new("sh").arg("-c").arg(script).current_dir(dir),
        None,
        Duration::from_secs(1800),
        Duration::from_millis(200),
    );
    assert!(run.success(), "{what} failed:\n{}", run.output());
}

/// librdkafka and its test-runner, built once per version; returns the source directory.
fn built() -> PathBuf {
    let version = rdkafka_sys_version();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("librdkafka-suite-{version}"));
    if dir.join("tests").join("test-runner").exists() {
        return dir;
    }
    let building = dir.with_extension("building");
    let _ = std::fs::remove_dir_all(&building);
    let source = librdkafka_source(&version);
    sh(
        Path::new("."),
        &format!("cp -r '{}' '{}'", source.display(), building.display()),
        "copying librdkafka's source",
    );
    // Only what the PLAINTEXT suite needs: no TLS, SASL, HTTP or zstd libraries required.
    sh(
        &building,
        "./configure --disable-ssl --disable-gssapi --disable-curl --disable-sasl --disable-zstd \
         && make -j2 libs && make -C tests -j2 test-runner",
        "building librdkafka and its test-runner",
    );
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::rename(&building, &dir).expect("move the build in place");
    dir
}

/// Strips the test-runner's colours.
fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// How the node is reached: PLAINTEXT (the suite's own setup), or SASL.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Over {
    Plaintext,
    /// A SASL_PLAINTEXT listener, user `admin` with PLAIN (the only mechanism librdkafka's
    /// build here has; SCRAM needs OpenSSL), sessions of [`REAUTH_MS`], and the whole
    /// (not quick) mode, which 0142's sub-tests need.
    Sasl,
}

/// `connections.max.reauth.ms` of the SASL runs. librdkafka re-authenticates at 90% of it, once
/// its in-flight requests are answered (a Fetch may be held 500 ms), and a request after the
/// lifetime closes the connection, as Kafka's broker closes it: the 10% must cover that wait on
/// a loaded machine. With 10 s, 0142's consumer was cut off once under the whole suite's load
/// (a Fetch sent after the lifetime); 30 s leaves 3 s.
const REAUTH_MS: u64 = 30_000;

/// Tests run over SASL, whole: re-authentication (KIP-368) in producers, consumers and
/// transactions, and a failed one; and 0002 (unknown partitions). Not 0001: its many short-lived
/// clients each authenticate, and a PLAIN check (PBKDF2 of 8,192 rounds) takes ~0.1 s in a
/// debug build, which its timeouts do not allow for beside another test (it passes alone).
const SASL_SUITE: &[&str] = &["0002", "0142"];

/// One test-runner run of `tests` (and `subtests`, if any) against a fresh node. Returns
/// the summary rows (`| NNNN_name | STATE | ...`) and the whole output.
fn run(
    source: &Path,
    tests: &str,
    subtests: Option<&str>,
    over: Over,
) -> (Vec<(String, String)>, String) {
    // With the ACL authorizer on, as a secured Kafka runs: every request of the suite passes
    // the authorizer (open to everyone while no ACL names a resource), and 0081's ACL
    // sub-tests administer ACLs.
    let dir = tempfile::tempdir().unwrap();
    let mut args: Vec<String> = [
        "num.partitions=4",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found=true",
    ]
    .iter()
    .flat_map(|c| ["--kafka-config".to_string(), c.to_string()])
    .collect();
    let mut conf_text = String::new();
    if over == Over::Sasl {
        common::add_user(dir.path(), "admin", "admin-secret");
        for c in [
            format!(
                "listeners=SASL_PLAINTEXT://127.0.0.1:{}",
                inlet_test_support::node::free_port()
            ),
            format!("connections.max.reauth.ms={REAUTH_MS}"),
            "super.users=User:admin".to_string(),
        ] {
            args.extend(["--kafka-config".to_string(), c]);
        }
        conf_text.push_str(
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=admin\nsasl.password=admin-secret\n",
        );
    }
    let node = {
        use common::Start as _;
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        common::Node::start(dir.path(), &args)
    };
    let conf_dir = tempfile::tempdir().unwrap();
    let conf = conf_dir.path().join("test.conf");
    std::fs::write(
        &conf,
        format!("bootstrap.servers={}\n{conf_text}", node.kafka),
    )
    .unwrap();
    let libs = format!(
        "{}:{}",
        source.join("src").display(),
        source.join("src-cpp").display()
    );
    let mut command = Command::new(source.join("tests").join("test-runner"));
    command
        .args(if over == Over::Sasl {
            &["-L", "-E", "-p2"][..]
        } else {
            &["-Q", "-L", "-E", "-p2"][..]
        })
        .current_dir(conf_dir.path())
        .env("LD_LIBRARY_PATH", libs)
        .env("RDKAFKA_TEST_CONF", &conf)
        .env("TESTS", tests)
        // The Kafka whose protocol Inlet speaks; librdkafka picks its tests' features by it.
        .env("TEST_KAFKA_VERSION", "3.9.0");
    if let Some(subtests) = subtests {
        command.env("SUBTESTS", subtests);
    }
    let out = run_captured(
        &mut command,
        None,
        Duration::from_secs(900),
        Duration::from_millis(500),
    );
    node.stop();
    let text = plain(&format!("{}{}", out.stdout, out.stderr));
    let mut rows: Vec<(String, String)> = text
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            (cells.len() >= 4
                && cells[1].len() > 5
                && cells[1].as_bytes()[..4].iter().all(u8::is_ascii_digit))
            .then(|| (cells[1].to_string(), cells[2].to_string()))
        })
        .collect();
    rows.sort();
    rows.dedup();
    let failed = !out.success();
    (
        rows,
        if failed {
            format!("exit {:?}\n{text}", out.status)
        } else {
            text
        },
    )
}

/// The failure lines of a run's output, for the assertion message.
fn failures(text: &str) -> String {
    text.lines()
        .filter(|l| {
            l.contains("failed at")
                || l.contains("assertion failed")
                || l.contains("Expected")
                || l.starts_with("exit ")
        })
        .take(40)
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn librdkafkas_own_integration_tests_pass() {
    if !common::require(
        "a C compiler and make (librdkafka's build)",
        common::tool_runs("make", "--version"),
    ) {
        return;
    }
    let source = built();
    let (rows, text) = run(&source, &SUITE.join(","), None, Over::Plaintext);
    let passed: Vec<&str> = rows
        .iter()
        .filter(|(_, state)| state == "PASSED")
        .map(|(name, _)| &name[..4])
        .collect();
    let missing: Vec<&&str> = SUITE.iter().filter(|t| !passed.contains(t)).collect();
    eprintln!("librdkafka suite: {} tests passed", passed.len());
    assert!(
        missing.is_empty() && !text.starts_with("exit "),
        "tests that did not pass: {missing:?}\nrows: {rows:?}\n{}\n(left out: {LEFT_OUT:?})",
        failures(&text)
    );
    for (test, names) in SUBTESTS {
        for name in *names {
            let (rows, text) = run(&source, test, Some(name), Over::Plaintext);
            let state = rows
                .iter()
                .find(|(n, _)| n.starts_with(test))
                .map(|(_, s)| s.as_str());
            // A filter that matched no sub-test would pass without running anything.
            let ran = text
                .lines()
                .filter(|l| l.contains(name) && l.contains(": PASS ("))
                .count();
            eprintln!("librdkafka suite: {test} {name}: {state:?}, {ran} sub-test(s) passed");
            assert!(
                state == Some("PASSED") && ran > 0 && !text.starts_with("exit "),
                "{test} {name}: {state:?}, {ran} sub-test(s) passed\n{}",
                failures(&text)
            );
        }
    }
    // Over SASL, whole: 0142 re-authenticates producers, consumers and transactions.
    let (rows, text) = run(&source, &SASL_SUITE.join(","), None, Over::Sasl);
    let passed: Vec<&str> = rows
        .iter()
        .filter(|(_, state)| state == "PASSED")
        .map(|(name, _)| &name[..4])
        .collect();
    let reauthenticated = text
        .lines()
        .filter(|l| l.contains("while reauthenticating") && l.contains(": PASS ("))
        .count();
    eprintln!(
        "librdkafka suite over SASL: {passed:?} passed, {reauthenticated} re-authentication sub-tests"
    );
    assert!(
        SASL_SUITE.iter().all(|t| passed.contains(t))
            && reauthenticated >= 2
            && !text.starts_with("exit "),
        "over SASL: {rows:?}\n{}",
        failures(&text)
    );
}
