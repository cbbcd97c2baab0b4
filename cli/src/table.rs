//! `inlet table list|describe|snapshots|files`: a node's Iceberg tables as its REST catalog
//! serves them (`/iceberg`), with each table topic's commit lag and watermark (`/v1/tables`),
//! its snapshots and its live files (the node's SQL: `snapshots('ns.t')`, `files('ns.t')`).
//!
//! Requests carry the bearer token of `INLET_TOKEN` when it is set (a node with `[http]
//! authentication = "token"`).

use serde_json::{json, Value};

use crate::topic::print_table;
use crate::{Failure, Result};

#[derive(clap::Args, Debug, Clone)]
pub struct ServerArgs {
    /// The node's HTTP listener.
    #[arg(long, env = "INLET_SERVER", default_value = "http://127.0.0.1:8181")]
    pub server: String,
    /// table or json.
    #[arg(long, default_value = "table")]
    pub format: String,
}

#[derive(clap::Subcommand, Debug)]
pub enum TableCommand {
    /// Every table: records, files and bytes of its current snapshot, when it last committed,
    /// and for a table topic its lag.
    ///
    /// Example: inlet table list
    List {
        #[command(flatten)]
        server: ServerArgs,
    },
    /// A table's columns, partitioning, current snapshot, properties, and for a table topic
    /// its commit lag and watermark.
    ///
    /// Example: inlet table describe default.orders
    Describe {
        /// NAMESPACE.TABLE
        table: String,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// A table's snapshots, oldest first.
    ///
    /// Example: inlet table snapshots default.orders
    Snapshots {
        /// NAMESPACE.TABLE
        table: String,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// The live files of a table's current snapshot, with their records and sizes.
    ///
    /// Example: inlet table files default.orders --format json
    Files {
        /// NAMESPACE.TABLE
        table: String,
        #[command(flatten)]
        server: ServerArgs,
    },
}

pub async fn run(command: TableCommand) -> Result<()> {
    match command {
        TableCommand::List { server } => list(&server).await,
        TableCommand::Describe { table, server } => describe(&server, &table).await,
        TableCommand::Snapshots { table, server } => {
            split(&table)?;
            sql_rows(
                &server,
                &format!(
                    "SELECT committed_at, snapshot_id, parent_id, operation, \
                     summary['added-records'] AS added_records, \
                     summary['total-records'] AS total_records, \
                     summary['added-data-files'] AS added_files FROM snapshots('{}') \
                     ORDER BY committed_at",
                    table.replace('\'', "''")
                ),
            )
            .await
        }
        TableCommand::Files { table, server } => {
            split(&table)?;
            sql_rows(
                &server,
                &format!(
                    "SELECT content, file_path, file_format, partition, record_count, \
                     file_size_in_bytes FROM files('{}')",
                    table.replace('\'', "''")
                ),
            )
            .await
        }
    }
}

/// `NAMESPACE.TABLE` as (namespace, table).
fn split(name: &str) -> Result<(&str, &str)> {
    name.rsplit_once('.')
        .filter(|(n, t)| !n.is_empty() && !t.is_empty())
        .ok_or_else(|| Failure::usage(format!("{name:?}: expected NAMESPACE.TABLE")))
}

fn request(method: reqwest::Method, url: &str) -> reqwest::RequestBuilder {
    let request = reqwest::Client::new().request(method, url);
    match std::env::var("INLET_TOKEN") {
        Ok(token) if !token.is_empty() => request.bearer_auth(token),
        _ => request,
    }
}

/// GETs `path` of the node; 404 is exit 3 with the node's message.
async fn get(server: &ServerArgs, path: &str) -> Result<Value> {
    let url = format!("{}{path}", server.server.trim_end_matches('/'));
    let response = request(reqwest::Method::GET, &url)
        .send()
        .await
        .map_err(|e| Failure::failed(format!("GET {url}: {e}")))?;
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    let value: Value = serde_json::from_str(&text).unwrap_or(Value::String(text.clone()));
    if status.is_success() {
        return Ok(value);
    }
    let message = value["error"]["message"]
        .as_str()
        .or(value["error"].as_str())
        .unwrap_or(&text)
        .to_string();
    Err(if status == reqwest::StatusCode::NOT_FOUND {
        Failure::not_found(message)
    } else {
        Failure::failed(format!("GET {url}: {status}: {message}"))
    })
}

/// The table's metadata, as the catalog's LoadTable answers it.
async fn load(server: &ServerArgs, name: &str) -> Result<Value> {
    let (ns, table) = split(name)?;
    let path = format!(
        "/iceberg/v1/namespaces/{}/tables/{}",
        crate::path_segment(&ns.replace('.', "\u{1f}")),
        crate::path_segment(table)
    );
    match get(server, &path).await {
        Err(f) if f.exit == crate::Exit::NotFound => {
            Err(Failure::not_found(format!("table {name} does not exist")))
        }
        other => Ok(other?["metadata"].clone()),
    }
}

fn current_snapshot(metadata: &Value) -> Option<&Value> {
    let id = metadata["current-snapshot-id"].as_i64()?;
    metadata["snapshots"]
        .as_array()?
        .iter()
        .find(|s| s["snapshot-id"].as_i64() == Some(id))
}

fn summary_number(snapshot: Option<&Value>, key: &str) -> Value {
    snapshot
        .and_then(|s| s["summary"][key].as_str())
        .and_then(|v| v.parse::<i64>().ok())
        .map_or(Value::Null, Value::from)
}

/// A UTC time from epoch milliseconds: `2026-12-07T10:15:30Z`.
fn utc(ms: Option<i64>) -> String {
    let Some(ms) = ms else {
        return "-".into();
    };
    let secs = ms.div_euclid(1000);
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = inlet_common::civil::civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

async fn list(server: &ServerArgs) -> Result<()> {
    crate::check_format(&server.format)?;
    let statuses = get(server, "/v1/tables").await.unwrap_or(Value::Null);
    let namespaces = get(server, "/iceberg/v1/namespaces").await?;
    let mut rows = Vec::new();
    for ns in namespaces["namespaces"].as_array().into_iter().flatten() {
        let parts: Vec<&str> = ns
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let ns_name = parts.join(".");
        let tables = get(
            server,
            &format!(
                "/iceberg/v1/namespaces/{}/tables",
                crate::path_segment(&parts.join("\u{1f}"))
            ),
        )
        .await?;
        for t in tables["identifiers"].as_array().into_iter().flatten() {
            let Some(table) = t["name"].as_str() else {
                continue;
            };
            let name = format!("{ns_name}.{table}");
            let metadata = load(server, &name).await?;
            let snapshot = current_snapshot(&metadata);
            let status = &statuses[&name];
            rows.push(json!({
                "table": name,
                "records": summary_number(snapshot, "total-records"),
                "files": summary_number(snapshot, "total-data-files"),
                "bytes": summary_number(snapshot, "total-files-size"),
                "last_commit_ms": snapshot.and_then(|s| s["timestamp-ms"].as_i64()),
                "table_topic": !status.is_null(),
                "records_behind": status["records_behind"],
            }));
        }
    }
    rows.sort_by(|a, b| a["table"].as_str().cmp(&b["table"].as_str()));
    if server.format == "json" {
        println!("{}", Value::Array(rows));
        return Ok(());
    }
    let cell = |v: &Value| match v {
        Value::Null => "-".to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    print_table(
        &[
            "TABLE",
            "RECORDS",
            "FILES",
            "BYTES",
            "LAST COMMIT",
            "BEHIND",
        ],
        rows.iter()
            .map(|r| {
                vec![
                    cell(&r["table"]),
                    cell(&r["records"]),
                    cell(&r["files"]),
                    cell(&r["bytes"]),
                    utc(r["last_commit_ms"].as_i64()),
                    if r["table_topic"] == true {
                        cell(&r["records_behind"])
                    } else {
                        "-".into()
                    },
                ]
            })
            .collect(),
    );
    Ok(())
}

async fn describe(server: &ServerArgs, name: &str) -> Result<()> {
    crate::check_format(&server.format)?;
    let metadata = load(server, name).await?;
    let (ns, table) = split(name)?;
    let status = get(
        server,
        &format!(
            "/v1/tables/{}/{}",
            crate::path_segment(ns),
            crate::path_segment(table)
        ),
    )
    .await
    .ok();
    let schema_id = metadata["current-schema-id"].as_i64();
    let schema = metadata["schemas"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["schema-id"].as_i64() == schema_id)
        .cloned()
        .unwrap_or(Value::Null);
    let spec_id = metadata["default-spec-id"].as_i64();
    let spec = metadata["partition-specs"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["spec-id"].as_i64() == spec_id)
        .cloned()
        .unwrap_or(Value::Null);
    let snapshot = current_snapshot(&metadata).cloned();
    if server.format == "json" {
        println!(
            "{}",
            json!({"table": name, "location": metadata["location"],
                   "format_version": metadata["format-version"], "schema": schema,
                   "partition_spec": spec, "current_snapshot": snapshot,
                   "properties": metadata["properties"], "table_topic": status})
        );
        return Ok(());
    }
    println!("table          {name}");
    println!(
        "location       {}",
        metadata["location"].as_str().unwrap_or("-")
    );
    println!("format version {}", metadata["format-version"]);
    let identifiers: Vec<i64> = schema["identifier-field-ids"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_i64)
        .collect();
    println!();
    let type_text = |t: &Value| match t {
        Value::String(s) => s.clone(),
        other => other["type"].as_str().unwrap_or("?").to_string(),
    };
    print_table(
        &["ID", "COLUMN", "TYPE", "REQUIRED", "KEY"],
        schema["fields"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|f| {
                let id = f["id"].as_i64().unwrap_or(-1);
                vec![
                    id.to_string(),
                    f["name"].as_str().unwrap_or("?").to_string(),
                    type_text(&f["type"]),
                    f["required"].to_string(),
                    if identifiers.contains(&id) { "yes" } else { "" }.to_string(),
                ]
            })
            .collect(),
    );
    let fields: Vec<String> = spec["fields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| {
            format!(
                "{}({})",
                f["transform"].as_str().unwrap_or("?"),
                f["source-id"]
            )
        })
        .collect();
    println!();
    println!(
        "partitioned by {}",
        if fields.is_empty() {
            "nothing".to_string()
        } else {
            fields.join(", ")
        }
    );
    match &snapshot {
        Some(s) => println!(
            "snapshot       {} at {}: {} records in {} files, {} bytes",
            s["snapshot-id"],
            utc(s["timestamp-ms"].as_i64()),
            s["summary"]["total-records"].as_str().unwrap_or("?"),
            s["summary"]["total-data-files"].as_str().unwrap_or("?"),
            s["summary"]["total-files-size"].as_str().unwrap_or("?"),
        ),
        None => println!("snapshot       none yet"),
    }
    if let Some(status) = status {
        println!(
            "table topic    {} records behind, last commit {}, watermark {}",
            status["records_behind"],
            utc(status["last_commit_ms"].as_i64()),
            utc(status["watermark_ms"].as_i64())
        );
    }
    if let Some(props) = metadata["properties"].as_object() {
        for (k, v) in props {
            println!("property       {k}={}", v.as_str().unwrap_or_default());
        }
    }
    Ok(())
}

/// Runs read-only `sql` on the node and prints its rows (a table, or JSON).
async fn sql_rows(server: &ServerArgs, sql: &str) -> Result<()> {
    crate::check_format(&server.format)?;
    let url = format!("{}/v1/query", server.server.trim_end_matches('/'));
    let response = request(reqwest::Method::POST, &url)
        .header("Accept", "application/json")
        .json(&json!({ "sql": sql }))
        .send()
        .await
        .map_err(|e| Failure::failed(format!("POST {url}: {e}")))?;
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    if !status.is_success() {
        let value: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let message = value["error"].as_str().unwrap_or(&text).to_string();
        return Err(if message.contains("does not exist") {
            Failure::not_found(message)
        } else {
            Failure::failed(message)
        });
    }
    let rows: Value = serde_json::from_str(&text)
        .map_err(|e| Failure::failed(format!("the node's answer is not JSON: {e}")))?;
    if server.format == "json" {
        println!("{rows}");
        return Ok(());
    }
    let rows = rows.as_array().cloned().unwrap_or_default();
    let header: Vec<String> = rows
        .first()
        .and_then(Value::as_object)
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    let cell = |v: &Value| match v {
        Value::Null => "-".to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    print_table(
        &header.iter().map(String::as_str).collect::<Vec<_>>(),
        rows.iter()
            .map(|r| header.iter().map(|h| cell(&r[h])).collect())
            .collect(),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::utc;

    #[test]
    fn epoch_milliseconds_print_as_utc_times() {
        assert_eq!(utc(Some(0)), "1970-01-01T00:00:00Z");
        assert_eq!(utc(Some(1_765_102_530_000)), "2025-12-07T10:15:30Z");
        assert_eq!(utc(Some(951_782_400_000)), "2000-02-29T00:00:00Z");
        assert_eq!(utc(None), "-");
    }
}
