//! Watermarks for schedulers (docs/architecture.md, "Watermarks"): `GET /v1/watermarks/{namespace}/{table}` answers
//! the watermark of the table's current snapshot, and `inlet watermark get|wait` calls it.
//!
//! The answer is JSON: `watermark_ms` (epoch ms, null before the first record), `watermark`
//! (RFC 3339, UTC), `snapshot_id`, and `partitions` (partition → its own watermark in ms). With
//! `?until_ms=T&timeout_ms=D` the request waits (long poll) until the watermark reaches `T`
//! or `D` passes, then answers what the table has.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use iceberg::{Catalog, NamespaceIdent, TableIdent};
use inlet_common::civil::{civil_from_days, days_from_civil};
use inlet_table_coordinator::commit::Committer;
use serde::{Deserialize, Serialize};

/// The watermark answer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Watermark {
    pub table: String,
    pub watermark_ms: Option<i64>,
    pub watermark: Option<String>,
    pub snapshot_id: Option<i64>,
    pub partitions: BTreeMap<String, i64>,
}

/// Longest long poll a request may ask for.
const MAX_WAIT: Duration = Duration::from_secs(300);

#[derive(Debug, Deserialize)]
pub struct WaitParams {
    until_ms: Option<i64>,
    timeout_ms: Option<u64>,
}

/// The current watermark of `namespace.table`; None when the table does not exist.
async fn current(catalog: &dyn Catalog, ident: &TableIdent) -> iceberg::Result<Option<Watermark>> {
    if !catalog.table_exists(ident).await? {
        return Ok(None);
    }
    let table = catalog.load_table(ident).await?;
    let committed = Committer::committed(&table);
    Ok(Some(Watermark {
        table: ident.to_string(),
        watermark_ms: committed.watermark_ms,
        watermark: committed.watermark_ms.map(rfc3339),
        snapshot_id: table.metadata().current_snapshot_id(),
        partitions: committed
            .partition_watermarks
            .iter()
            .map(|(p, w)| (p.to_string(), *w))
            .collect(),
    }))
}

fn error(status: StatusCode, message: String) -> Response {
    (status, Json(serde_json::json!({ "error": message }))).into_response()
}

/// `GET /v1/watermarks/{namespace}/{table}`.
pub async fn get(
    State(catalog): State<Arc<dyn Catalog>>,
    viewer: Option<axum::Extension<inlet_common::access::Viewer>>,
    Path((namespace, table)): Path<(String, String)>,
    Query(params): Query<WaitParams>,
) -> Response {
    if let Some(axum::Extension(v)) = &viewer {
        if !v.may(
            inlet_common::access::TableOp::Describe,
            std::slice::from_ref(&namespace),
            &table,
        ) {
            return error(
                StatusCode::FORBIDDEN,
                format!("{} may not describe table {namespace}.{table}", v.principal),
            );
        }
    }
    let ident = TableIdent::new(NamespaceIdent::new(namespace), table);
    let deadline = tokio::time::Instant::now()
        + Duration::from_millis(params.timeout_ms.unwrap_or(0)).min(MAX_WAIT);
    loop {
        let answer = match current(catalog.as_ref(), &ident).await {
            Ok(a) => a,
            Err(e) => return error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
        };
        let reached = match (&answer, params.until_ms) {
            (Some(w), Some(until)) => w.watermark_ms.is_some_and(|m| m >= until),
            // A table that does not exist yet may appear with the first commit.
            (None, Some(_)) => false,
            (_, None) => true,
        };
        if reached || tokio::time::Instant::now() >= deadline {
            return match answer {
                Some(w) => Json(w).into_response(),
                None => error(StatusCode::NOT_FOUND, format!("no table {ident}")),
            };
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Epoch milliseconds as RFC 3339 in UTC, e.g. `2024-01-01T00:00:00.123Z`.
pub fn rfc3339(ms: i64) -> String {
    let (secs, millis) = (ms.div_euclid(1000), ms.rem_euclid(1000));
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Parses RFC 3339 (`2024-01-01T00:00:00Z`, fractional seconds and `±HH:MM` offsets allowed,
/// or a bare date meaning its midnight UTC) into epoch milliseconds.
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    let s = s.trim();
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> { s.get(r)?.parse().ok() };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    if b.get(4) != Some(&b'-')
        || b.get(7) != Some(&b'-')
        || !(1..=12).contains(&mo)
        || !(1..=31).contains(&d)
    {
        return None;
    }
    let days = days_from_civil(y, mo, d);
    if b.len() == 10 {
        return Some(days * 86_400_000);
    }
    if !matches!(b.get(10), Some(b'T' | b't' | b' '))
        || b.get(13) != Some(&b':')
        || b.get(16) != Some(&b':')
    {
        return None;
    }
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut i = 19;
    let mut millis = 0i64;
    if b.get(i) == Some(&b'.') {
        let start = i + 1;
        i = start;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        let frac = s.get(start..i)?;
        if frac.is_empty() {
            return None;
        }
        let digits: String = frac.chars().chain("000".chars()).take(3).collect();
        millis = digits.parse().ok()?;
    }
    let offset_min = match b.get(i) {
        Some(b'Z' | b'z') if i + 1 == b.len() => 0,
        Some(sign @ (b'+' | b'-')) if i + 6 == b.len() && b.get(i + 3) == Some(&b':') => {
            let v = num(i + 1..i + 3)? * 60 + num(i + 4..i + 6)?;
            if *sign == b'+' {
                v
            } else {
                -v
            }
        }
        _ => return None,
    };
    Some(((days * 86_400 + h * 3600 + mi * 60 + sec - offset_min * 60) * 1000) + millis)
}

/// `inlet watermark get`: the watermark of `table` (`namespace.table`) from the node at
/// `server`.
pub async fn fetch(
    server: &str,
    table: &str,
    wait: Option<(i64, Duration)>,
) -> anyhow::Result<Watermark> {
    let (namespace, name) = table
        .rsplit_once('.')
        .ok_or_else(|| anyhow::anyhow!("--table must be NAMESPACE.TABLE, got {table:?}"))?;
    let mut url = format!(
        "{}/v1/watermarks/{namespace}/{name}",
        server.trim_end_matches('/')
    );
    if let Some((until, timeout)) = wait {
        url.push_str(&format!(
            "?until_ms={until}&timeout_ms={}",
            timeout.as_millis()
        ));
    }
    let response = crate::http::with_token(reqwest::Client::new().get(&url))
        .timeout(wait.map_or(Duration::from_secs(30), |(_, t)| {
            t + Duration::from_secs(30)
        }))
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("cannot reach {server}: {e}"))?;
    let status = response.status();
    let body = response.text().await?;
    if !status.is_success() {
        let message = serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["error"].as_str().map(str::to_string))
            .unwrap_or(body);
        anyhow::bail!("{status}: {message}");
    }
    Ok(serde_json::from_str(&body)?)
}

/// `inlet watermark wait`: returns once the watermark of `table` reaches `until_ms`, or an
/// error saying where it stands when `timeout` passes.
pub async fn wait(
    server: &str,
    table: &str,
    until_ms: i64,
    timeout: Duration,
) -> anyhow::Result<Watermark> {
    let deadline = tokio::time::Instant::now() + timeout;
    // On a terminal, a progress line after each long poll: where the watermark is.
    let progress = std::io::IsTerminal::is_terminal(&std::io::stderr());
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        // Long polls of at most a minute (10 s with a progress line), so a node restart only
        // costs one retry.
        let chunk = left.min(Duration::from_secs(if progress { 10 } else { 60 }));
        let w = match fetch(server, table, Some((until_ms, chunk))).await {
            Ok(w) => Some(w),
            Err(e) if e.to_string().starts_with("404") => None,
            Err(e) => return Err(e),
        };
        if let Some(w) = &w {
            if w.watermark_ms.is_some_and(|m| m >= until_ms) {
                if progress {
                    eprint!("\r\x1b[K");
                }
                return Ok(w.clone());
            }
        }
        if progress {
            let now = w
                .as_ref()
                .and_then(|w| w.watermark.clone())
                .unwrap_or_else(|| "none yet".into());
            eprint!(
                "\r\x1b[K{table}: watermark {now}, waiting for {} ({} s left)",
                rfc3339(until_ms),
                deadline
                    .saturating_duration_since(tokio::time::Instant::now())
                    .as_secs()
            );
        }
        if tokio::time::Instant::now() >= deadline {
            if progress {
                eprintln!();
            }
            let now = w
                .and_then(|w| w.watermark)
                .unwrap_or_else(|| "none yet".into());
            anyhow::bail!(
                "timed out after {}s: the watermark of {table} is {now}, waiting for {}",
                timeout.as_secs(),
                rfc3339(until_ms)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_round_trips() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_704_067_200_123), "2024-01-01T00:00:00.123Z");
        assert_eq!(
            parse_rfc3339("2024-01-01T00:00:00.123Z"),
            Some(1_704_067_200_123)
        );
        assert_eq!(parse_rfc3339("2024-01-01"), Some(1_704_067_200_000));
        assert_eq!(
            parse_rfc3339("2024-01-01T02:00:00+02:00"),
            Some(1_704_067_200_000)
        );
        assert_eq!(
            parse_rfc3339("2024-02-29T23:59:59.5Z"),
            Some(1_709_251_199_500)
        );
        for ms in [-86_400_001i64, 951_782_400_000, 4_102_444_800_999] {
            assert_eq!(parse_rfc3339(&rfc3339(ms)), Some(ms), "{ms}");
        }
        for bad in [
            "",
            "2024-13-01",
            "2024-01-01T25:00:00Z",
            "2024-01-01T00:00:00",
            "yesterday",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }
}
