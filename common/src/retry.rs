//! The one retry loop: [`retry`] runs an operation until it succeeds, fails with an error its
//! [`ErrorKind`] says not to retry, or has used the policy's attempts, waiting a bounded,
//! jittered, exponential backoff between attempts.
//!
//! Invariants: at most [`RetryPolicy::max_attempts`] calls (at least one); no wait after the
//! last; every wait is within `[b / 2, b]` where `b = min(initial × 2^failures, max)`, so two
//! callers that failed together do not retry in step.

use std::future::Future;
use std::time::Duration;

use crate::ErrorKind;

/// How often and how patiently to retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in total, the first one included. `0` is taken as `1`.
    pub max_attempts: u32,
    /// The longest wait before the second attempt; it doubles for each further one.
    pub initial_backoff: Duration,
    /// The longest wait between two attempts.
    pub max_backoff: Duration,
    /// Whether [`ErrorKind::Conflict`] is retried too: for compare-and-swap loops, whose
    /// operation reloads what changed before it tries again.
    pub retry_conflicts: bool,
}

impl RetryPolicy {
    /// A policy that retries [`ErrorKind::Retryable`] errors only.
    pub const fn new(max_attempts: u32, initial_backoff: Duration, max_backoff: Duration) -> Self {
        RetryPolicy {
            max_attempts,
            initial_backoff,
            max_backoff,
            retry_conflicts: false,
        }
    }

    /// The same policy, retrying [`ErrorKind::Conflict`] errors too.
    pub const fn with_conflicts(self) -> Self {
        RetryPolicy {
            retry_conflicts: true,
            ..self
        }
    }

    /// Whether an error of `kind` is worth another attempt under this policy.
    pub fn retries(&self, kind: ErrorKind) -> bool {
        kind == ErrorKind::Retryable || (self.retry_conflicts && kind == ErrorKind::Conflict)
    }

    /// The ceiling of the wait after `failures + 1` failed attempts:
    /// `min(initial × 2^failures, max)`.
    pub fn ceiling(&self, failures: u32) -> Duration {
        let factor = 1u32 << failures.min(20);
        self.initial_backoff
            .saturating_mul(factor)
            .min(self.max_backoff)
    }

    /// The wait after `failures + 1` failed attempts: uniformly within `[c / 2, c]` of
    /// [`RetryPolicy::ceiling`]. Loops that retry forever (the uploader) use it directly.
    pub fn backoff(&self, failures: u32) -> Duration {
        let ceiling = self.ceiling(failures);
        let half = ceiling / 2;
        let spread = (ceiling - half).as_nanos() as u64;
        if spread == 0 {
            return ceiling;
        }
        half + Duration::from_nanos(crate::random::in_range(0..=spread))
    }
}

/// Runs `op` (given the attempt's number, from 1) until it succeeds, fails with an error that
/// `classify` says the policy does not retry, or has run `policy.max_attempts` times; then
/// returns its last result. Waits [`RetryPolicy::backoff`] between attempts.
pub async fn retry<T, E, C, F, Fut>(policy: &RetryPolicy, classify: C, mut op: F) -> Result<T, E>
where
    E: std::fmt::Display,
    C: Fn(&E) -> ErrorKind,
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let attempts = policy.max_attempts.max(1);
    let mut attempt = 1;
    loop {
        let error = match op(attempt).await {
            Ok(value) => return Ok(value),
            Err(e) => e,
        };
        let kind = classify(&error);
        if attempt >= attempts || !policy.retries(kind) {
            return Err(error);
        }
        let backoff = policy.backoff(attempt - 1);
        if kind == ErrorKind::Conflict {
            tracing::info!(%error, attempt, ?backoff, "lost a race; trying again on the new state");
        } else {
            tracing::warn!(%error, attempt, ?backoff, "call failed; retrying");
        }
        tokio::time::sleep(backoff).await;
        attempt += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[derive(Debug)]
    struct Failure(ErrorKind);

    impl std::fmt::Display for Failure {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{}", self.0)
        }
    }

    const POLICY: RetryPolicy =
        RetryPolicy::new(4, Duration::from_millis(100), Duration::from_millis(250));
    /// The same attempts, with waits short enough for a test.
    const QUICK: RetryPolicy =
        RetryPolicy::new(4, Duration::from_millis(2), Duration::from_millis(4));

    /// Runs `retry` over `outcomes` (one per attempt; `Ok` after the last); returns the result
    /// and the attempts made.
    async fn run(policy: RetryPolicy, outcomes: &[ErrorKind]) -> (Result<u32, ErrorKind>, u32) {
        let calls = AtomicU32::new(0);
        let result = retry(
            &policy,
            |e: &Failure| e.0,
            |attempt| {
                calls.fetch_add(1, Ordering::SeqCst);
                let outcome = outcomes.get(attempt as usize - 1).copied();
                async move {
                    match outcome {
                        Some(kind) => Err(Failure(kind)),
                        None => Ok(attempt),
                    }
                }
            },
        )
        .await
        .map_err(|e| e.0);
        (result, calls.load(Ordering::SeqCst))
    }

    #[tokio::test]
    async fn retryable_errors_are_retried_until_the_call_succeeds() {
        let (result, calls) = run(QUICK, &[ErrorKind::Retryable, ErrorKind::Retryable]).await;
        assert_eq!((result, calls), (Ok(3), 3));
    }

    #[tokio::test]
    async fn attempts_are_bounded_and_the_last_error_returned() {
        let (result, calls) = run(QUICK, &[ErrorKind::Retryable; 6]).await;
        assert_eq!((result, calls), (Err(ErrorKind::Retryable), 4));
        let once = RetryPolicy {
            max_attempts: 0,
            ..QUICK
        };
        let (result, calls) = run(once, &[ErrorKind::Retryable; 6]).await;
        assert_eq!((result, calls), (Err(ErrorKind::Retryable), 1));
    }

    #[tokio::test]
    async fn other_kinds_stop_at_once_and_conflicts_only_when_asked() {
        for kind in [
            ErrorKind::BadInput,
            ErrorKind::Corruption,
            ErrorKind::Shutdown,
            ErrorKind::Permanent,
            ErrorKind::Conflict,
        ] {
            let (result, calls) = run(QUICK, &[kind]).await;
            assert_eq!((result, calls), (Err(kind), 1));
        }
        let (result, calls) = run(QUICK.with_conflicts(), &[ErrorKind::Conflict]).await;
        assert_eq!((result, calls), (Ok(2), 2));
    }

    #[test]
    fn backoff_stays_within_half_and_whole_of_its_ceiling() {
        for failures in 0..30 {
            let ceiling = POLICY.ceiling(failures);
            assert!(ceiling <= POLICY.max_backoff);
            for _ in 0..50 {
                let b = POLICY.backoff(failures);
                assert!(
                    b >= ceiling / 2 && b <= ceiling,
                    "{failures}: {b:?} of {ceiling:?}"
                );
            }
        }
        assert_eq!(POLICY.ceiling(0), Duration::from_millis(100));
        assert_eq!(POLICY.ceiling(1), Duration::from_millis(200));
        let zero = RetryPolicy::new(0, Duration::ZERO, Duration::ZERO);
        assert_eq!(zero.backoff(3), Duration::ZERO);
    }
}
