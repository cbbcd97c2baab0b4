//! The `inlet` command line (docs/architecture.md, "Command line").

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};

use inlet::config::{parse_key_value, NodeConfig};

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
    /// A table's watermark: how far its event time is complete.
    #[command(subcommand)]
    Watermark(WatermarkCommand),
    /// Run a read-only SQL query on a node's tables (`namespace.table`).
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

impl ServeArgs {
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

/// Hands memory freed inside glibc's arenas back to the system once a second. Conversion jobs
/// and commits allocate and free tens of MiB at a time; glibc keeps freed pages below the top
/// of each arena mapped, so RSS would stay at the high-water mark of the busiest second.
fn trim_malloc_every_second() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    std::thread::Builder::new()
        .name("malloc-trim".into())
        .spawn(|| loop {
            std::thread::sleep(std::time::Duration::from_secs(1));
            // SAFETY: malloc_trim only releases free pages; it is thread-safe.
            unsafe {
                libc::malloc_trim(0);
            }
        })
        .ok();
}

fn main() -> anyhow::Result<()> {
    limit_malloc_arenas();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("INLET_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    match cli.command {
        Command::Serve(args) => {
            trim_malloc_every_second();
            runtime.block_on(inlet::serve(args.into_config()?))
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
