//! The `inlet` command line (docs/architecture.md, "Command line").

use std::path::PathBuf;

use anyhow::Context;
use clap::parser::ValueSource;
use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand};

use inlet::config::{parse_key_value, NodeConfig};
use inlet::config_dump::{KeyPath, Source};

#[derive(Parser, Debug)]
#[command(
    name = "inlet",
    version,
    about = "Kafka-compatible streaming whose topics are Iceberg tables"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a node (embedded default: one process, data under ./inlet-data).
    Serve(ServeArgs),
    /// A table's watermark: how far its event time is complete. With `INLET_TOKEN` set, it
    /// is sent as a bearer token (a node with `[http] authentication = "token"`).
    #[command(subcommand)]
    Watermark(WatermarkCommand),
    /// The node's configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// The nodes on a node's metadata store.
    #[command(subcommand)]
    Cluster(ClusterCommand),
    /// SASL users: their SCRAM credentials in the node's metadata store (what PLAIN and
    /// SCRAM-SHA-256/512 authenticate against). Takes the node's own flags or config file.
    #[command(subcommand)]
    Users(UsersCommand),
    /// Create, list, describe, alter and delete topics (Kafka's admin API).
    #[command(subcommand)]
    Topic(inlet_cli::topic::TopicCommand),
    /// Produce JSON lines from standard input as records framed with their schema (Avro,
    /// Protobuf or JSON Schema), as kafka-avro-console-producer does.
    Produce(inlet_cli::produce::ProduceArgs),
    /// Print a topic's records, decoding framed keys and values to JSON.
    Consume(inlet_cli::consume::ConsumeArgs),
    /// A node's Iceberg tables: their snapshots, files, columns and commit lag.
    #[command(subcommand)]
    Table(inlet_cli::table::TableCommand),
    /// Consumer groups: their members, committed offsets and lag.
    #[command(subcommand)]
    Group(inlet_cli::group::GroupCommand),
    /// The Schema Registry's subjects, a version's schema, and what changed between two.
    #[command(subcommand)]
    Schema(inlet_cli::schema::SchemaCommand),
    /// Run a read-only SQL query on a node's tables (`namespace.table`). With `INLET_TOKEN`
    /// set, it is sent as a bearer token (a node with `[http] authentication = "token"`).
    Query {
        #[arg(long, env = "INLET_SERVER", default_value = "http://127.0.0.1:8181")]
        server: String,
        /// table, csv or json.
        #[arg(long, default_value = "table")]
        format: String,
        sql: String,
    },
}

#[derive(Subcommand, Debug)]
enum WatermarkCommand {
    /// Print the table's watermark as JSON.
    Get {
        /// NAMESPACE.TABLE
        #[arg(long)]
        table: String,
        #[arg(long, env = "INLET_SERVER", default_value = "http://127.0.0.1:8181")]
        server: String,
    },
    /// Wait until the table's watermark reaches a time; exit 0 then, 1 on timeout.
    Wait {
        /// NAMESPACE.TABLE
        #[arg(long)]
        table: String,
        /// RFC 3339 time (or a date, meaning its midnight UTC).
        #[arg(long)]
        until: String,
        /// Give up after this many seconds.
        #[arg(long, default_value_t = 3600)]
        timeout: u64,
        #[arg(long, env = "INLET_SERVER", default_value = "http://127.0.0.1:8181")]
        server: String,
    },
}

#[derive(Subcommand, Debug)]
enum ClusterCommand {
    /// Print the nodes on the node's metadata store (their addresses and leases) and what the
    /// node owns, as JSON.
    Status {
        #[arg(long, env = "INLET_SERVER", default_value = "http://127.0.0.1:8181")]
        server: String,
    },
}

#[derive(Subcommand, Debug)]
enum UsersCommand {
    /// Add a user, or set a user's password: stores its SCRAM credentials (salted; the
    /// password itself is never stored).
    ///
    /// Example: `echo "$PASSWORD" | inlet users add alice --config inlet.toml`
    Add {
        name: String,
        /// The password; read from the first line of standard input when not given.
        #[arg(long)]
        password: Option<String>,
        /// SCRAM-SHA-256, SCRAM-SHA-512, or both (the default).
        #[arg(long = "mechanism", value_delimiter = ',')]
        mechanisms: Vec<String>,
        /// PBKDF2 iterations (4096 to 16384).
        #[arg(long, default_value_t = 8192)]
        iterations: i32,
        #[command(flatten)]
        node: ServeArgs,
    },
    /// List the users and their mechanisms.
    List {
        #[command(flatten)]
        node: ServeArgs,
    },
    /// Delete a user's credentials (every mechanism's); exits 1 when it has none.
    Delete {
        name: String,
        #[command(flatten)]
        node: ServeArgs,
    },
}

#[derive(Subcommand, Debug)]
enum ConfigCommand {
    /// Print the configuration `inlet serve` would run with, given the same flags and
    /// environment: every setting as TOML, with where its value came from (default, file,
    /// env or flag).
    Dump(ServeArgs),
}

#[derive(Args, Debug)]
struct ServeArgs {
    /// TOML configuration file; flags and INLET_* variables override it.
    #[arg(long, env = "INLET_CONFIG")]
    config: Option<PathBuf>,
    #[arg(long, env = "INLET_DATA_DIR")]
    data_dir: Option<PathBuf>,
    #[arg(long, env = "INLET_KAFKA_LISTEN")]
    kafka_listen: Option<String>,
    #[arg(long, env = "INLET_REGISTRY_LISTEN")]
    registry_listen: Option<String>,
    #[arg(long, env = "INLET_HTTP_LISTEN")]
    http_listen: Option<String>,
    #[arg(long, env = "INLET_ADVERTISED_HOST")]
    advertised_host: Option<String>,
    /// Object store URL: s3://bucket/prefix, file:///path, or a path.
    #[arg(long, env = "INLET_OBJECT_STORE")]
    object_store: Option<String>,
    /// Metadata store URL: postgres://… or sqlite://….
    #[arg(long, env = "INLET_META")]
    meta: Option<String>,
    #[arg(long, env = "INLET_NODE_ID")]
    node_id: Option<u64>,
    /// Broker-level Kafka config by its Kafka name (repeatable; in INLET_KAFKA_CONFIG, separate
    /// pairs with ';', since values may hold commas).
    #[arg(long = "kafka-config", env = "INLET_KAFKA_CONFIG", value_delimiter = ';', value_parser = parse_key_value)]
    kafka_config: Vec<(String, String)>,
}

/// The flags of [`ServeArgs`] that set one setting each, by argument id (which is also the
/// setting's key); `kafka_config` sets `kafka.<name>` per pair.
const SETTING_ARGS: [&str; 8] = [
    "data_dir",
    "kafka_listen",
    "registry_listen",
    "http_listen",
    "advertised_host",
    "object_store",
    "meta",
    "node_id",
];

impl ServeArgs {
    /// The settings that these flags and `INLET_*` variables set, with their source, read
    /// from `matches` (the `serve` or `config dump` subcommand's).
    fn overrides(&self, matches: &ArgMatches) -> std::collections::BTreeMap<KeyPath, Source> {
        let source = |id: &str| match matches.value_source(id) {
            Some(ValueSource::CommandLine) => {
                Some(Source::Flag(format!("--{}", id.replace('_', "-"))))
            }
            Some(ValueSource::EnvVariable) => {
                Some(Source::Env(format!("INLET_{}", id.to_uppercase())))
            }
            _ => None,
        };
        let mut out = std::collections::BTreeMap::new();
        for id in SETTING_ARGS {
            if let Some(s) = source(id) {
                out.insert(vec![id.to_string()], s);
            }
        }
        if let Some(s) = source("kafka_config") {
            for (name, _) in &self.kafka_config {
                out.insert(vec!["kafka".to_string(), name.clone()], s.clone());
            }
        }
        out
    }

    /// `inlet config dump`.
    fn dump(self, matches: &ArgMatches) -> anyhow::Result<String> {
        let overrides = self.overrides(matches);
        let file = match &self.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading config file {}", path.display()))?;
                Some(
                    text.parse::<toml::Table>()
                        .with_context(|| format!("parsing config file {}", path.display()))?,
                )
            }
            None => None,
        };
        let header = match &self.config {
            Some(path) => format!(
                "# inlet config dump: defaults, then {}, then INLET_* variables, then flags\n",
                path.display()
            ),
            None => {
                "# inlet config dump: defaults, then INLET_* variables, then flags (no --config)\n"
                    .to_string()
            }
        };
        let config = self.into_config()?;
        Ok(header + &inlet::config_dump::dump(&config, file.as_ref(), &overrides)?)
    }

    fn into_config(self) -> anyhow::Result<NodeConfig> {
        let mut config = match &self.config {
            Some(path) => NodeConfig::from_file(path)?,
            None => NodeConfig::default(),
        };
        macro_rules! over {
            ($($field:ident),*) => { $( if let Some(v) = self.$field { config.$field = v; } )* };
        }
        over!(
            data_dir,
            kafka_listen,
            registry_listen,
            http_listen,
            node_id
        );
        if self.advertised_host.is_some() {
            config.advertised_host = self.advertised_host;
        }
        if self.object_store.is_some() {
            config.object_store = self.object_store;
        }
        if self.meta.is_some() {
            config.meta = self.meta;
        }
        config.kafka.extend(self.kafka_config);
        config.validate()?;
        Ok(config)
    }
}

/// Caps glibc's malloc arenas at one per core, unless `MALLOC_ARENA_MAX` says otherwise.
///
/// glibc gives threads arenas of their own, up to eight per core, and keeps what they free for
/// reuse within each. The many short tasks of table topics that commit every second spread
/// over all of them: from 10 to 100 table topics at the same load, the node's RSS beyond its
/// log cache grew 3.3×, and with one arena per core 1.7× (docs/benchmarks.md, "Memory").
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        // SAFETY: mallopt only sets an allocator parameter; no other thread runs yet.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, cores.clamp(1, 64) as libc::c_int);
        }
    }
}

/// Hands memory freed inside glibc's arenas back to the system, once a second, when the
/// arenas hold more than `keep` bytes free (`[tables] allocator_keep_free_bytes`). Conversion
/// jobs and commits allocate and free tens of MiB at a time; glibc keeps freed pages below the
/// top of each arena mapped, so RSS would stay at the high-water mark of the busiest second.
/// Handing back every free page every second costs the opposite: the next second's jobs touch
/// them again, and the kernel zeroes each one (about a MiB of page faults per MiB ingested,
/// and with three nodes on one machine, three times the trims per MiB: docs/benchmarks.md,
/// "1 vs 3 nodes"). Keeping up to `keep` free bounds the memory and spares the steady churn.
fn trim_malloc(keep: usize) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    std::thread::Builder::new()
        .name("malloc-trim".into())
        .spawn(move || loop {
            std::thread::sleep(std::time::Duration::from_secs(1));
            // SAFETY: mallinfo2 only reads the arenas' statistics (under their locks), and
            // malloc_trim only releases free pages; both are thread-safe.
            unsafe {
                if libc::mallinfo2().fordblks > keep {
                    libc::malloc_trim(0);
                }
            }
        })
        .ok();
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = keep;
}

fn main() -> anyhow::Result<()> {
    limit_malloc_arenas();
    {
        use tracing_subscriber::layer::SubscriberExt as _;
        use tracing_subscriber::util::SubscriberInitExt as _;
        use tracing_subscriber::Layer as _;
        let log = tracing_subscriber::EnvFilter::try_from_env("INLET_LOG")
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
        // The audit trail's entries also go to `[audit] file` when `serve` opens one.
        let audit = tracing_subscriber::filter::Targets::new()
            .with_target(inlet::audit::TARGET, tracing::Level::INFO);
        // A node logs to standard output; the client commands keep it for their data, so
        // their log lines (none at the default level) go to standard error.
        let serving = std::env::args().nth(1).as_deref() == Some("serve");
        let writer = tracing_subscriber::fmt::writer::BoxMakeWriter::new(move || {
            if serving {
                Box::new(std::io::stdout()) as Box<dyn std::io::Write>
            } else {
                Box::new(std::io::stderr())
            }
        });
        let terminal = if serving {
            std::io::IsTerminal::is_terminal(&std::io::stdout())
        } else {
            std::io::IsTerminal::is_terminal(&std::io::stderr())
        };
        tracing_subscriber::registry()
            .with(
                tracing_subscriber::fmt::layer()
                    .with_ansi(terminal)
                    .with_writer(writer)
                    .with_filter(log),
            )
            .with(inlet::audit::AuditLayer.with_filter(audit))
            .init();
    }
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    match cli.command {
        Command::Serve(args) => {
            let config = args.into_config()?;
            trim_malloc(config.tables.allocator_keep_free_bytes);
            runtime.block_on(inlet::serve(config))
        }
        Command::Cluster(ClusterCommand::Status { server }) => {
            let url = format!("{}/v1/cluster", server.trim_end_matches('/'));
            let body = runtime.block_on(async {
                let response = reqwest::get(&url)
                    .await
                    .with_context(|| format!("GET {url}"))?;
                let status = response.status();
                let text = response.text().await?;
                if !status.is_success() {
                    anyhow::bail!("GET {url}: {status}: {text}");
                }
                Ok(text)
            })?;
            let value: serde_json::Value = serde_json::from_str(&body)?;
            println!("{}", serde_json::to_string_pretty(&value)?);
            Ok(())
        }
        Command::Users(command) => runtime.block_on(users(command)),
        Command::Topic(command) => client(runtime.block_on(inlet_cli::topic::run(command))),
        Command::Produce(args) => client(runtime.block_on(inlet_cli::produce::run(args))),
        Command::Consume(args) => client(runtime.block_on(inlet_cli::consume::run(args))),
        Command::Table(command) => client(runtime.block_on(inlet_cli::table::run(command))),
        Command::Group(command) => client(runtime.block_on(inlet_cli::group::run(command))),
        Command::Schema(command) => client(runtime.block_on(inlet_cli::schema::run(command))),
        Command::Config(ConfigCommand::Dump(args)) => {
            let sub = matches
                .subcommand_matches("config")
                .and_then(|m| m.subcommand_matches("dump"))
                .context("the config dump subcommand's arguments")?;
            print!("{}", args.dump(sub)?);
            Ok(())
        }
        Command::Query {
            server,
            format,
            sql,
        } => match runtime.block_on(inlet::sql::remote(&server, &sql, &format)) {
            Ok(out) => {
                print!("{out}");
                if !out.ends_with('\n') {
                    println!();
                }
                Ok(())
            }
            Err(e) => {
                eprintln!("{e}");
                std::process::exit(1);
            }
        },
        Command::Watermark(WatermarkCommand::Get { table, server }) => {
            let w = runtime.block_on(inlet::watermark::fetch(&server, &table, None))?;
            println!("{}", serde_json::to_string_pretty(&w)?);
            Ok(())
        }
        Command::Watermark(WatermarkCommand::Wait {
            table,
            until,
            timeout,
            server,
        }) => {
            let until_ms = inlet::watermark::parse_rfc3339(&until).ok_or_else(|| {
                anyhow::anyhow!(
                    "--until {until:?} is not an RFC 3339 time (e.g. 2024-01-02T00:00:00Z)"
                )
            })?;
            match runtime.block_on(inlet::watermark::wait(
                &server,
                &table,
                until_ms,
                std::time::Duration::from_secs(timeout),
            )) {
                Ok(w) => {
                    println!(
                        "{table} is complete up to {}",
                        w.watermark.unwrap_or_default()
                    );
                    Ok(())
                }
                Err(e) => {
                    eprintln!("{e}");
                    std::process::exit(1);
                }
            }
        }
    }
}

/// Ends a client command (`inlet topic|produce|consume`): its message on standard error and
/// its exit code (`inlet_cli::Exit`).
fn client(result: inlet_cli::Result<()>) -> anyhow::Result<()> {
    match result {
        Ok(()) => Ok(()),
        Err(f) => {
            eprintln!("error: {}", f.message);
            std::process::exit(f.exit as i32);
        }
    }
}

/// `inlet users`.
async fn users(command: UsersCommand) -> anyhow::Result<()> {
    match command {
        UsersCommand::Add {
            name,
            password,
            mechanisms,
            iterations,
            node,
        } => {
            let password = match password {
                Some(p) => p,
                None => {
                    let mut line = String::new();
                    std::io::stdin()
                        .read_line(&mut line)
                        .context("reading the password from standard input")?;
                    line.trim_end_matches(['\n', '\r']).to_string()
                }
            };
            let mechanisms = if mechanisms.is_empty() {
                vec!["SCRAM-SHA-256".to_string(), "SCRAM-SHA-512".to_string()]
            } else {
                mechanisms
            };
            inlet::users::add(
                &node.into_config()?,
                &name,
                &password,
                &mechanisms,
                iterations,
            )
            .await?;
            println!("user {name} stored ({})", mechanisms.join(", "));
            Ok(())
        }
        UsersCommand::List { node } => {
            for (name, mechanisms) in inlet::users::list(&node.into_config()?).await? {
                println!("{name}\t{}", mechanisms.join(","));
            }
            Ok(())
        }
        UsersCommand::Delete { name, node } => {
            if inlet::users::delete(&node.into_config()?, &name).await? == 0 {
                eprintln!("user {name} has no credentials");
                std::process::exit(1);
            }
            println!("user {name} deleted");
            Ok(())
        }
    }
}
