//! Where quotas meet requests: what a request counts (its bytes, the records a Fetch sends,
//! the thread time spent handling it) and the `throttle_time_ms` its answer carries.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use kafka_protocol::messages::{ApiKey, ResponseKind};

use super::{user_of, Kind, Usage, Windows};
use crate::acl::Session;
use crate::broker::Broker;

/// The CPU time of the calling thread, in nanoseconds.
fn thread_cpu_nanos() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec for clock_gettime to write.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) } == 0;
    if !ok {
        return 0;
    }
    (t.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec as u64)
}

/// A future that also reports the thread time spent polling it (on whichever threads that
/// was): the request's own handling, not the waits between.
pub(crate) struct ThreadTimed<F> {
    inner: Pin<Box<F>>,
    nanos: u64,
}

impl<F: Future> ThreadTimed<F> {
    pub(crate) fn new(inner: F) -> Self {
        ThreadTimed {
            inner: Box::pin(inner),
            nanos: 0,
        }
    }
}

impl<F: Future> Future for ThreadTimed<F> {
    type Output = (F::Output, u64);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let start = thread_cpu_nanos();
        let polled = self.inner.as_mut().poll(cx);
        let spent = thread_cpu_nanos().saturating_sub(start);
        self.nanos = self.nanos.saturating_add(spent);
        polled.map(|out| (out, self.nanos))
    }
}

/// The record bytes a Fetch answer sends.
fn fetched_bytes(answer: &ResponseKind) -> u64 {
    match answer {
        ResponseKind::Fetch(f) => f
            .responses
            .iter()
            .flat_map(|t| &t.partitions)
            .map(|p| p.records.as_ref().map_or(0, |r| r.len() as u64))
            .sum(),
        _ => 0,
    }
}

/// Sets an answer's `throttle_time_ms` (every answer of the APIs served has one).
fn set_throttle(answer: &mut ResponseKind, ms: i32) {
    macro_rules! throttled {
        ($($kind:ident),* $(,)?) => {
            match answer {
                $(ResponseKind::$kind(r) => r.throttle_time_ms = r.throttle_time_ms.max(ms),)*
                _ => {}
            }
        };
    }
    throttled!(
        Produce,
        Fetch,
        ListOffsets,
        Metadata,
        OffsetCommit,
        OffsetFetch,
        FindCoordinator,
        JoinGroup,
        Heartbeat,
        LeaveGroup,
        SyncGroup,
        DescribeGroups,
        ListGroups,
        ApiVersions,
        CreateTopics,
        DeleteTopics,
        DeleteRecords,
        InitProducerId,
        OffsetForLeaderEpoch,
        AddPartitionsToTxn,
        AddOffsetsToTxn,
        EndTxn,
        TxnOffsetCommit,
        DescribeAcls,
        CreateAcls,
        DeleteAcls,
        DescribeConfigs,
        AlterConfigs,
        DescribeLogDirs,
        CreatePartitions,
        DeleteGroups,
        IncrementalAlterConfigs,
        OffsetDelete,
        DescribeClientQuotas,
        AlterClientQuotas,
        DescribeUserScramCredentials,
        AlterUserScramCredentials,
        DescribeCluster,
        DescribeProducers,
        DescribeTransactions,
        ListTransactions,
        DescribeTopicPartitions,
    );
}

/// APIs no quota applies to: version discovery, authentication and node-to-node calls, as
/// Kafka exempts them.
fn exempt(api: ApiKey) -> bool {
    matches!(
        api,
        ApiKey::ApiVersions
            | ApiKey::SaslHandshake
            | ApiKey::SaslAuthenticate
            | ApiKey::WriteTxnMarkers
    )
}

impl Broker {
    /// Whether requests' thread time is measured (a `request_percentage` quota is set).
    pub(crate) fn measures_request_time(&self) -> bool {
        self.quotas.enforces(Kind::Request)
    }

    /// Whether `session`'s requests with client id `client` are under a quota
    /// ([`super::Quotas::apply_to`]).
    pub fn quota_applies(&self, session: &Session, client: &str) -> bool {
        self.quotas.apply_to(user_of(&session.principal), client)
    }

    /// Records what one answered request of `session` with client id `client` used, and
    /// sets the throttle of the quotas it went over in `answer`. Returns the throttle (ms):
    /// the connection reads no further request for that long.
    pub(crate) fn throttle(
        &self,
        session: &Session,
        client: &str,
        api: ApiKey,
        request_bytes: u64,
        thread_nanos: u64,
        answer: Option<&mut ResponseKind>,
    ) -> u64 {
        if exempt(api) {
            return 0;
        }
        let usage = Usage {
            produce_bytes: if api == ApiKey::Produce {
                request_bytes
            } else {
                0
            },
            fetch_bytes: answer.as_deref().map_or(0, fetched_bytes),
            thread_nanos,
        };
        let c = self.config();
        let windows = Windows {
            samples: c.quota_window_num,
            sample_ms: u64::from(c.quota_window_size_seconds) * 1000,
            max_bytes: c.quota_sensors_max_bytes,
        };
        let throttle = self.quotas.record(
            user_of(&session.principal),
            client,
            usage,
            self.clock.now_ms(),
            windows,
        );
        if throttle > 0 {
            if let Some(answer) = answer {
                set_throttle(answer, i32::try_from(throttle).unwrap_or(i32::MAX));
            }
            self.metrics()
                .throttled_requests
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        throttle
    }
}
