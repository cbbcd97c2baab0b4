//! Settings of the stream store, each with its default in one place ([`StorageConfig::default`]).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

const MIB: u64 = 1024 * 1024;

/// Settings of the stream store. Every cache, queue and buffer it keeps has a byte budget here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StorageConfig {
    /// Id of this node; objects it prepares carry it, so a restarted node collects its own
    /// orphans at once and leaves other nodes' in-flight uploads alone.
    pub node_id: u64,
    /// Size at which the WAL rolls to a new segment file. Segments are deleted whole once all
    /// their entries are committed in object storage.
    pub wal_segment_bytes: u64,
    /// Most bytes one group commit writes and syncs at once.
    pub wal_max_group_bytes: u64,
    /// Number of appends that may wait for the WAL writer before `append` itself waits.
    pub wal_queue_len: usize,
    /// Largest payload one `append` accepts.
    pub max_append_bytes: u64,
    /// Byte budget of the log cache: appended data not yet in object storage plus recently
    /// uploaded data kept for tail reads. When it is full of data not yet uploaded, appends wait
    /// (back pressure) until an upload frees room.
    pub log_cache_bytes: u64,
    /// Upload a stream set object once this much appended data is waiting.
    pub upload_bytes: u64,
    /// Upload whatever is waiting after this long, even if `upload_bytes` is not reached.
    pub upload_interval_ms: u64,
    /// Largest stream set object one upload round writes. A backlog (after an object store
    /// outage, up to `log_cache_bytes`) drains as several objects, one round after another.
    pub upload_max_object_bytes: u64,
    /// Target size of a data block inside an object: the unit of ranged reads and caching.
    pub object_block_bytes: u64,
    /// Byte budget of the block cache that serves catch-up reads from objects.
    pub block_cache_bytes: u64,
    /// How far past the requested block a catch-up read fetches in the same ranged GET.
    pub readahead_bytes: u64,
    /// Prefix of every object key the stream store writes.
    pub object_prefix: String,
    /// How often compaction, retention and garbage collection run.
    pub maintenance_interval_ms: u64,
    /// Stream set objects smaller than this are merged by compaction.
    pub compaction_small_object_bytes: u64,
    /// Most bytes one merge reads and writes.
    pub compaction_max_merge_bytes: u64,
    /// A stream with at least this much data spread over stream set objects gets its own
    /// stream object.
    pub stream_object_min_bytes: u64,
    /// Default retention by time for streams that set none; `None` keeps data forever.
    pub retention_ms: Option<u64>,
    /// Default retention by size for streams that set none; `None` is unlimited.
    pub retention_bytes: Option<u64>,
    /// How long an object replaced by compaction or expired by retention stays readable for
    /// readers that already located it, before it is deleted.
    pub delete_grace_ms: u64,
    /// A prepared object of another node older than this is an orphan and is collected.
    pub orphan_grace_ms: u64,
    /// Retries of object store calls.
    pub retry: RetryConfig,
    /// Where an append becomes durable before it is acknowledged: `local` (an fsynced WAL on
    /// this node's disk) or `object` (WAL objects in the object store, indexed in the metadata
    /// store: what a cluster needs, since a node may be lost whole). Unset, the node chooses:
    /// `object` with a PostgreSQL metadata store (a cluster), `local` otherwise; the store
    /// alone takes unset as `local`.
    pub wal: Option<WalKind>,
    /// With the object-store WAL: how many WAL objects may be in flight (PUT started and not
    /// yet committed) at once. Their metadata commits still land in order.
    pub object_wal_in_flight: usize,
    /// With the object-store WAL: how long the first append of a group waits for more before
    /// the group is cut (a group is also cut at `wal_max_group_bytes`).
    pub object_wal_linger_ms: u64,
    /// With the object-store WAL: the least time between the cuts of two groups that are not
    /// full. Under a steady load below a full group per interval, a node then writes at most
    /// `1000 / object_wal_min_interval_ms` WAL objects a second (each an S3 PUT and a metadata
    /// commit), larger as the load grows; a lone append after a quiet spell is not held back.
    /// The price is latency: an append may wait up to this long for its group's cut.
    pub object_wal_min_interval_ms: u64,
}

/// Where appends become durable; see [`StorageConfig::wal`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum WalKind {
    #[default]
    Local,
    Object,
}

/// Bounded retry with exponential backoff for object store and metadata calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetryConfig {
    /// Attempts in total, the first one included.
    pub max_attempts: u32,
    /// The longest wait before the second attempt; it doubles for each further one, up to
    /// `max_backoff_ms`, and each wait is drawn between half of that and all of it.
    pub initial_backoff_ms: u64,
    /// Longest backoff between two attempts.
    pub max_backoff_ms: u64,
    /// A single attempt that takes longer than this is abandoned and counts as a failure;
    /// a PUT gets more time when its object is large (see `min_put_bytes_per_sec`).
    pub attempt_timeout_ms: u64,
    /// The slowest PUT throughput that still counts as working: a PUT of `n` bytes may take
    /// `attempt_timeout_ms + n / min_put_bytes_per_sec` seconds before it is abandoned.
    pub min_put_bytes_per_sec: u64,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            max_attempts: 8,
            initial_backoff_ms: 100,
            max_backoff_ms: 5_000,
            attempt_timeout_ms: 30_000,
            min_put_bytes_per_sec: 1 << 20,
        }
    }
}

impl RetryConfig {
    /// How long one attempt to PUT `bytes` may take.
    pub(crate) fn put_timeout(&self, bytes: u64) -> Duration {
        let extra_ms = bytes
            .saturating_mul(1000)
            .checked_div(self.min_put_bytes_per_sec)
            .unwrap_or(0);
        Duration::from_millis(self.attempt_timeout_ms.saturating_add(extra_ms))
    }

    /// The policy [`inlet_common::retry()`] runs object store calls under; the uploader, which
    /// retries forever, waits its [`inlet_common::RetryPolicy::backoff`] between rounds.
    pub fn policy(&self) -> inlet_common::RetryPolicy {
        inlet_common::RetryPolicy::new(
            self.max_attempts,
            Duration::from_millis(self.initial_backoff_ms),
            Duration::from_millis(self.max_backoff_ms),
        )
    }
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            node_id: 0,
            wal_segment_bytes: 64 * MIB,
            wal_max_group_bytes: 4 * MIB,
            wal_queue_len: 4096,
            max_append_bytes: 16 * MIB,
            log_cache_bytes: 512 * MIB,
            upload_bytes: 64 * MIB,
            upload_interval_ms: 10_000,
            upload_max_object_bytes: 64 * MIB,
            object_block_bytes: 512 * 1024,
            block_cache_bytes: 256 * MIB,
            readahead_bytes: 4 * MIB,
            object_prefix: "streams".to_string(),
            maintenance_interval_ms: 60_000,
            compaction_small_object_bytes: 16 * MIB,
            compaction_max_merge_bytes: 256 * MIB,
            stream_object_min_bytes: 32 * MIB,
            retention_ms: Some(7 * 24 * 3600 * 1000),
            retention_bytes: None,
            delete_grace_ms: 60_000,
            orphan_grace_ms: 3_600_000,
            retry: RetryConfig::default(),
            wal: None,
            object_wal_in_flight: 8,
            object_wal_linger_ms: 2,
            object_wal_min_interval_ms: 20,
        }
    }
}

impl StorageConfig {
    /// The WAL this store runs ([`StorageConfig::wal`], `local` when unset).
    pub fn wal_kind(&self) -> WalKind {
        self.wal.unwrap_or_default()
    }

    /// Checks that the settings fit together.
    pub fn validate(&self) -> Result<()> {
        let fail = |msg: String| Err(Error::Config(msg));
        // A WAL entry must stay within what replay accepts.
        let most =
            (crate::wal::format::MAX_ENTRY_LEN - crate::wal::format::ENTRY_HEADER_LEN) as u64;
        if self.max_append_bytes == 0 || self.max_append_bytes > most {
            return fail(format!("max_append_bytes must be between 1 and {most}"));
        }
        if self.log_cache_bytes < 2 * self.max_append_bytes {
            return fail(format!(
                "log_cache_bytes ({}) must be at least twice max_append_bytes ({})",
                self.log_cache_bytes, self.max_append_bytes
            ));
        }
        if self.upload_bytes == 0 || self.upload_bytes > self.log_cache_bytes {
            return fail(format!(
                "upload_bytes ({}) must be between 1 and log_cache_bytes ({})",
                self.upload_bytes, self.log_cache_bytes
            ));
        }
        if self.wal_segment_bytes < 4096 {
            return fail("wal_segment_bytes must be at least 4096".into());
        }
        if self.wal_max_group_bytes == 0 || self.wal_queue_len == 0 {
            return fail("wal_max_group_bytes and wal_queue_len must be positive".into());
        }
        if self.object_wal_in_flight == 0 {
            return fail("object_wal_in_flight must be at least 1".into());
        }
        if self.object_block_bytes == 0 || self.object_block_bytes > 1 << 30 {
            return fail("object_block_bytes must be between 1 and 1 GiB".into());
        }
        if self.upload_interval_ms == 0 || self.maintenance_interval_ms == 0 {
            return fail("upload_interval_ms and maintenance_interval_ms must be positive".into());
        }
        if self.retry.max_attempts == 0 {
            return fail("retry.max_attempts must be at least 1".into());
        }
        if self.object_prefix.contains("..") {
            return fail("object_prefix must not contain '..'".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        StorageConfig::default()
            .validate()
            .expect("defaults validate");
    }

    #[test]
    fn upload_threshold_above_cache_is_refused() {
        let config = StorageConfig {
            upload_bytes: 2 * 512 * MIB,
            ..StorageConfig::default()
        };
        let err = config.validate().unwrap_err();
        assert!(err.to_string().contains("upload_bytes"), "{err}");
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        let retry = RetryConfig::default();
        assert_eq!(retry.policy().ceiling(0), Duration::from_millis(100));
        assert_eq!(retry.policy().ceiling(1), Duration::from_millis(200));
        assert_eq!(retry.policy().ceiling(30), Duration::from_millis(5_000));
    }
}
