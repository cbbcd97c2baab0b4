//! Streaming writes: an object is buffered in memory up to one part, then uploaded in parts
//! of exactly [`WriteConfig::part_bytes`] with a bounded number in flight, and completed on
//! `close`. Nothing is visible under the key until `close` succeeds: a small object is one
//! atomic PUT at close, a large one a multipart upload completed at close. On any failure the
//! upload is aborted and the writer refuses further calls.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use iceberg::io::FileWrite;
use iceberg::{Error, ErrorKind, Result};
use object_store::path::Path;
use object_store::{MultipartUpload, ObjectStore, PutMultipartOptions, PutOptions, PutPayloadMut};
use serde::{Deserialize, Serialize};
use tokio::task::JoinSet;

use super::error::from_object_store;

/// S3's smallest part (all parts but the last must be at least this large).
const MIN_PART_BYTES: usize = 5 * 1024 * 1024;
/// S3's largest part.
const MAX_PART_BYTES: usize = 5 * 1024 * 1024 * 1024;

/// How [`ObjectStoreStorage`](super::ObjectStoreStorage) uploads objects. One open writer
/// holds at most `part_bytes * (max_concurrent_parts + 1)` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WriteConfig {
    /// Objects up to this size are uploaded with one PUT when the writer closes; larger ones
    /// with a multipart upload in parts of exactly this size (the last may be smaller).
    /// At least 5 MiB (S3's smallest part), at most 5 GiB.
    pub part_bytes: usize,
    /// Parts of one object uploaded at the same time; a writer waits for one to finish
    /// before buffering more. At least 1.
    pub max_concurrent_parts: usize,
    /// Attempts in total for a call that fails with a retryable error (a HEAD, a GET, a
    /// ranged read, a single-PUT write, a delete), the first included. Multipart uploads are
    /// not retried part by part: a failed one is aborted and the caller writes again. At
    /// least 1.
    pub attempts: u32,
    /// The longest wait before the second attempt, doubling for each further one (at most
    /// 5 s); each wait is drawn between half of that and all of it.
    pub initial_backoff_ms: u64,
}

impl Default for WriteConfig {
    fn default() -> Self {
        WriteConfig {
            part_bytes: 8 * 1024 * 1024,
            max_concurrent_parts: 2,
            attempts: 5,
            initial_backoff_ms: 100,
        }
    }
}

impl WriteConfig {
    /// The retries of one call: `attempts`, from `initial_backoff_ms`, at most 5 s apart.
    fn policy(&self) -> inlet_common::RetryPolicy {
        inlet_common::RetryPolicy::new(
            self.attempts,
            std::time::Duration::from_millis(self.initial_backoff_ms),
            std::time::Duration::from_secs(5),
        )
    }

    /// Runs `call` until it succeeds, fails with an error that is not retryable, or has used
    /// `attempts`.
    pub(crate) async fn retrying<T, F, Fut>(&self, mut call: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let classify = |e: &iceberg::Error| {
            if e.retryable() {
                inlet_common::ErrorKind::Retryable
            } else {
                inlet_common::ErrorKind::Permanent
            }
        };
        inlet_common::retry(&self.policy(), classify, |_| call()).await
    }
}

impl WriteConfig {
    /// Checks the limits documented on each field.
    pub fn validate(&self) -> Result<()> {
        if self.attempts == 0 {
            return Err(Error::new(
                ErrorKind::DataInvalid,
                "object store attempts must be at least 1",
            ));
        }
        if !(MIN_PART_BYTES..=MAX_PART_BYTES).contains(&self.part_bytes) {
            return Err(Error::new(
                ErrorKind::DataInvalid,
                format!(
                    "part_bytes {} must be between {MIN_PART_BYTES} (5 MiB) and {MAX_PART_BYTES} \
                     (5 GiB)",
                    self.part_bytes
                ),
            ));
        }
        if self.max_concurrent_parts == 0 {
            return Err(Error::new(
                ErrorKind::DataInvalid,
                "max_concurrent_parts must be at least 1",
            ));
        }
        Ok(())
    }
}

/// A [`FileWrite`] onto one object key.
pub(crate) struct ObjectWriter {
    store: Arc<dyn ObjectStore>,
    key: Path,
    /// The location the caller named, for messages.
    location: String,
    config: WriteConfig,
    state: State,
    /// The local file to fsync (with its folders) once the object is complete, on a
    /// local-disk root.
    sync: Option<super::durable::LocalSync>,
}

enum State {
    /// Less than one part written so far.
    Buffering(PutPayloadMut),
    /// A multipart upload is open; `part` holds less than one part.
    Uploading {
        upload: Box<dyn MultipartUpload>,
        part: PutPayloadMut,
        in_flight: JoinSet<object_store::Result<()>>,
    },
    /// Closed: the object is visible.
    Closed,
    /// A call failed; the upload was aborted and no object will appear.
    Failed,
}

impl ObjectWriter {
    pub(crate) fn new(
        store: Arc<dyn ObjectStore>,
        key: Path,
        location: String,
        config: WriteConfig,
    ) -> Self {
        ObjectWriter {
            store,
            key,
            location,
            config,
            state: State::Buffering(PutPayloadMut::new()),
            sync: None,
        }
    }

    /// Makes the object durable on `close` by fsyncing this local file and its folder.
    pub(crate) fn syncing(mut self, local: Option<super::durable::LocalSync>) -> Self {
        self.sync = local;
        self
    }

    /// After the object is complete: fsyncs it on a local disk.
    async fn closed(&mut self) -> Result<()> {
        self.state = State::Closed;
        match self.sync.take() {
            Some(local) => local.sync(&self.location).await,
            None => Ok(()),
        }
    }

    /// Buffers `bytes`, starting a multipart upload once more than one part is written.
    async fn push(&mut self, bytes: Bytes) -> Result<()> {
        if let State::Buffering(buffer) = &mut self.state {
            if buffer.content_length() + bytes.len() <= self.config.part_bytes {
                buffer.push(bytes);
                return Ok(());
            }
            let buffered = std::mem::take(buffer).freeze();
            match self
                .store
                .put_multipart_opts(&self.key, PutMultipartOptions::default())
                .await
            {
                Ok(upload) => {
                    self.state = State::Uploading {
                        upload,
                        part: PutPayloadMut::new(),
                        in_flight: JoinSet::new(),
                    }
                }
                Err(e) => {
                    self.state = State::Failed;
                    return Err(from_object_store(
                        "start a multipart upload of",
                        &self.location,
                        e,
                    ));
                }
            }
            for chunk in buffered.iter() {
                self.append(chunk.clone()).await?;
            }
        }
        self.append(bytes).await
    }

    /// Adds `bytes` to the open upload, sending each part as it fills.
    async fn append(&mut self, mut bytes: Bytes) -> Result<()> {
        let part_bytes = self.config.part_bytes;
        let max_in_flight = self.config.max_concurrent_parts;
        while !bytes.is_empty() {
            let State::Uploading { part, .. } = &mut self.state else {
                return Err(self.unusable());
            };
            // Cut exactly `part_bytes`: some stores need every part but the last the same size.
            let room = part_bytes - part.content_length();
            if bytes.len() < room {
                part.push(bytes);
                break;
            }
            part.push(bytes.split_to(room));
            let full = std::mem::take(part).freeze();
            // Back pressure: at most `max_in_flight` parts uploading, plus one buffering.
            self.wait_for_parts(max_in_flight - 1).await?;
            let State::Uploading {
                upload, in_flight, ..
            } = &mut self.state
            else {
                return Err(self.unusable());
            };
            in_flight.spawn(upload.put_part(full));
        }
        Ok(())
    }

    /// Waits until at most `left` part uploads are in flight; on a failed part, aborts.
    async fn wait_for_parts(&mut self, left: usize) -> Result<()> {
        loop {
            let State::Uploading { in_flight, .. } = &mut self.state else {
                return Err(self.unusable());
            };
            if in_flight.len() <= left {
                return Ok(());
            }
            let outcome = in_flight.join_next().await;
            if let Err(e) = joined(outcome) {
                return Err(self.fail("upload a part of", e).await);
            }
        }
    }

    /// Aborts the upload (if any) and marks the writer failed; returns the error to report.
    async fn fail(&mut self, doing: &str, cause: object_store::Error) -> Error {
        let err = from_object_store(doing, &self.location, cause);
        if let State::Uploading {
            mut upload,
            mut in_flight,
            ..
        } = std::mem::replace(&mut self.state, State::Failed)
        {
            in_flight.shutdown().await;
            if let Err(abort) = upload.abort().await {
                // The object stays invisible either way, but its parts may linger until the
                // bucket's lifecycle rule removes incomplete uploads.
                return err.with_context("abort", format!("aborting the upload failed: {abort}"));
            }
        }
        err
    }

    fn unusable(&self) -> Error {
        match self.state {
            State::Closed => Error::new(
                ErrorKind::DataInvalid,
                format!("writer for {} is already closed", self.location),
            ),
            _ => Error::new(
                ErrorKind::Unexpected,
                format!(
                    "writer for {} failed earlier; its upload was abandoned",
                    self.location
                ),
            ),
        }
    }
}

/// A finished part upload's outcome; a panicked task counts as a failure.
fn joined(
    outcome: Option<std::result::Result<object_store::Result<()>, tokio::task::JoinError>>,
) -> object_store::Result<()> {
    match outcome {
        None => Ok(()),
        Some(Ok(result)) => result,
        Some(Err(join)) => Err(object_store::Error::JoinError { source: join }),
    }
}

#[async_trait]
impl FileWrite for ObjectWriter {
    async fn write(&mut self, bs: Bytes) -> Result<()> {
        match self.state {
            State::Closed | State::Failed => Err(self.unusable()),
            State::Buffering(_) | State::Uploading { .. } => self.push(bs).await,
        }
    }

    async fn close(&mut self) -> Result<()> {
        match &mut self.state {
            State::Closed | State::Failed => Err(self.unusable()),
            State::Buffering(buffer) => {
                let payload = std::mem::take(buffer).freeze();
                let put = self
                    .store
                    .put_opts(&self.key, payload, PutOptions::default())
                    .await;
                match put {
                    Ok(_) => self.closed().await,
                    Err(e) => {
                        self.state = State::Failed;
                        Err(from_object_store("write", &self.location, e))
                    }
                }
            }
            State::Uploading {
                upload,
                part,
                in_flight,
            } => {
                if !part.is_empty() {
                    in_flight.spawn(upload.put_part(std::mem::take(part).freeze()));
                }
                self.wait_for_parts(0).await?;
                let State::Uploading { upload, .. } = &mut self.state else {
                    return Err(self.unusable());
                };
                match upload.complete().await {
                    Ok(_) => self.closed().await,
                    Err(e) => Err(self.fail("complete the upload of", e).await),
                }
            }
        }
    }
}
