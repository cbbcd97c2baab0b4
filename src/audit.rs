//! The node's audit trail (`[audit]`): the entries every part records under the `tracing`
//! target `inlet_audit` (`inlet_ingest::audit`: Kafka admin and DDL requests, failed
//! authentications; [`http`] here: every change made through the HTTP and registry
//! listeners) are written, besides the log, to an append-only file of JSON lines when
//! `[audit] file` is set.
//!
//! Invariants:
//! - The file only grows: entries are appended by one writer thread, in the order they were
//!   recorded, and made durable (`fdatasync`) with each batch it writes.
//! - What waits to be written stays within `[audit] queue_max_bytes`; an entry beyond it is
//!   dropped and counted (`dropped`), and the next entry written says how many went.
//! - Recording never blocks a request on the file: a request only queues its line.

use std::collections::VecDeque;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use axum::extract::{ConnectInfo, Request};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use inlet_common::access::Authenticated;
use serde::{Deserialize, Serialize};
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::Context;

pub use inlet_ingest::audit::TARGET;

/// `[audit]`: where audit entries go besides the log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuditSettings {
    /// A file the entries are appended to, one JSON object a line; none: the log only.
    pub file: Option<PathBuf>,
    /// The most bytes of entries waiting for the file.
    pub queue_max_bytes: u64,
}

impl Default for AuditSettings {
    fn default() -> Self {
        AuditSettings {
            file: None,
            queue_max_bytes: 4 * 1024 * 1024,
        }
    }
}

/// Lines waiting for the writer thread.
#[derive(Default)]
struct Queue {
    lines: VecDeque<Vec<u8>>,
    bytes: u64,
}

/// The file sink: the queue, its budget and the entries it dropped.
struct Sink {
    clock: Arc<dyn inlet_common::Clock>,
    queue: Mutex<Queue>,
    ready: Condvar,
    max_bytes: u64,
    dropped: AtomicU64,
}

/// The process's sink, once `[audit] file` opened one.
static SINK: OnceLock<Arc<Sink>> = OnceLock::new();

/// Opens `[audit] file` for appending and starts its writer; entries are stamped by `clock`.
/// Without a file, nothing.
pub fn open(settings: &AuditSettings, clock: Arc<dyn inlet_common::Clock>) -> anyhow::Result<()> {
    let Some(path) = &settings.file else {
        return Ok(());
    };
    let file = open_file(path)?;
    let sink = Arc::new(Sink {
        clock,
        queue: Mutex::new(Queue::default()),
        ready: Condvar::new(),
        max_bytes: settings.queue_max_bytes.max(1024),
        dropped: AtomicU64::new(0),
    });
    if SINK.set(sink.clone()).is_err() {
        anyhow::bail!("the audit file is already open");
    }
    std::thread::Builder::new()
        .name("audit-writer".into())
        .spawn(move || write_loop(&sink, file))
        .map_err(|e| anyhow::anyhow!("starting the audit writer failed: {e}"))?;
    tracing::info!(file = %path.display(), "audit entries are appended to the audit file");
    Ok(())
}

fn open_file(path: &Path) -> anyhow::Result<std::fs::File> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| anyhow::anyhow!("[audit] file {}: {e}", path.display()))?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| anyhow::anyhow!("[audit] file {}: {e}", path.display()))
}

/// The writer thread: takes every waiting line, appends them with one write, syncs.
fn write_loop(sink: &Sink, mut file: std::fs::File) {
    loop {
        let batch: Vec<Vec<u8>> = {
            let mut q = sink.queue.lock().unwrap_or_else(|e| e.into_inner());
            while q.lines.is_empty() {
                q = sink.ready.wait(q).unwrap_or_else(|e| e.into_inner());
            }
            q.bytes = 0;
            q.lines.drain(..).collect()
        };
        let joined: Vec<u8> = batch.concat();
        if let Err(e) = file.write_all(&joined).and_then(|()| file.sync_data()) {
            // Not through `tracing`'s audit target: that would queue it here again.
            eprintln!("writing the audit file failed: {e}");
        }
    }
}

impl Sink {
    fn push(&self, line: Vec<u8>) {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        if q.bytes + line.len() as u64 > self.max_bytes {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        q.bytes += line.len() as u64;
        q.lines.push_back(line);
        drop(q);
        self.ready.notify_one();
    }
}

/// A `tracing` layer that turns each event of the audit target into a JSON line for the file
/// sink (when one is open).
pub struct AuditLayer;

/// Collects an event's fields into a JSON object.
struct Fields(serde_json::Map<String, serde_json::Value>);

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0
            .insert(field.name().into(), format!("{value:?}").into());
    }
}

/// One entry as its JSON line: the time (RFC 3339, UTC, milliseconds) and its fields,
/// and, when entries were dropped since the last one written, how many.
fn line(fields: serde_json::Map<String, serde_json::Value>, now_ms: u64, dropped: u64) -> Vec<u8> {
    let mut entry = serde_json::Map::new();
    entry.insert(
        "time".into(),
        crate::watermark::rfc3339(now_ms as i64).into(),
    );
    for (k, v) in fields {
        if k != "message" {
            entry.insert(k, v);
        }
    }
    if dropped > 0 {
        entry.insert("dropped_before".into(), dropped.into());
    }
    let mut out = serde_json::to_vec(&serde_json::Value::Object(entry)).unwrap_or_default();
    out.push(b'\n');
    out
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for AuditLayer {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        if event.metadata().target() != TARGET {
            return;
        }
        let Some(sink) = SINK.get() else {
            return;
        };
        let mut fields = Fields(serde_json::Map::new());
        event.record(&mut fields);
        let now_ms = sink.clock.now_ms();
        let dropped = sink.dropped.swap(0, Ordering::Relaxed);
        sink.push(line(fields.0, now_ms, dropped));
    }
}

/// The HTTP and registry listeners' audit layer (`interface` names the listener): every request
/// that may change something (any method but GET, HEAD and OPTIONS; SQL queries and the token
/// endpoint aside, which change nothing) is recorded with its principal (as the listener's
/// authentication left it in the response, `Authenticated`), client address, method, path and
/// outcome (`ok`, `denied` for 401 and 403, else `failed` with the status).
pub async fn http(interface: &'static str, req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let audited = !matches!(method, Method::GET | Method::HEAD | Method::OPTIONS)
        && !path.ends_with("/v1/query")
        && !path.ends_with("/oauth/tokens");
    if !audited {
        return next.run(req).await;
    }
    let client = req
        .extensions()
        .get::<ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0.ip().to_string())
        .unwrap_or_default();
    let response = next.run(req).await;
    let principal = response
        .extensions()
        .get::<Authenticated>()
        .map_or("", |a| a.0.as_str())
        .to_owned();
    let status = response.status();
    let outcome = if status.is_success() || status.is_redirection() {
        "ok"
    } else if status.as_u16() == 401 || status.as_u16() == 403 {
        "denied"
    } else {
        "failed"
    };
    inlet_ingest::audit::record(
        interface,
        &principal,
        &client,
        method.as_str(),
        &path,
        outcome,
        status.as_str(),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_one_json_line_with_its_time() {
        let mut fields = serde_json::Map::new();
        fields.insert("message".into(), "audit".into());
        fields.insert("action".into(), "CreateTopics".into());
        let text = String::from_utf8(line(fields, 1_700_000_000_123, 2)).unwrap();
        assert!(
            text.ends_with('\n') && text.matches('\n').count() == 1,
            "{text}"
        );
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["time"], "2023-11-14T22:13:20.123Z");
        assert_eq!(v["action"], "CreateTopics");
        assert_eq!(v["dropped_before"], 2);
        assert!(v.get("message").is_none());
    }

    #[test]
    fn a_full_queue_drops_and_counts() {
        let sink = Sink {
            clock: Arc::new(inlet_common::clock::SystemClock),
            queue: Mutex::new(Queue::default()),
            ready: Condvar::new(),
            max_bytes: 10,
            dropped: AtomicU64::new(0),
        };
        sink.push(vec![b'a'; 8]);
        sink.push(vec![b'b'; 8]);
        assert_eq!(sink.dropped.load(Ordering::Relaxed), 1);
        assert_eq!(sink.queue.lock().unwrap().bytes, 8);
    }
}
