//! The node-wide conversion memory budget (docs/architecture.md, "Time-shared memory").
//!
//! Every conversion job borrows the bytes it needs from one [`MemoryPool`] before it buffers
//! records, Arrow arrays or Parquet pages, and gives them back when its [`Reservation`] is
//! dropped. A job that cannot get its first bytes waits until others finish: nothing is
//! dropped and nothing exceeds the budget, so a node's conversion memory grows with its write
//! throughput, not with how many table topics it serves.
//!
//! Invariants:
//! - `used() <= budget()` at all times; the high-water mark records the largest `used()`.
//! - Nobody waits while holding bytes, so the pool cannot deadlock: only
//!   [`MemoryPool::reserve`], which starts from nothing, waits. A reservation grows only by
//!   bytes that are free at once ([`Reservation::grow`]); when they are not, it fails with
//!   [`MemoryError::Exhausted`] and the job gives everything back and asks again for the
//!   larger amount (`job::convert_range_indexed`). Waiting to grow while holding let jobs
//!   that filled the pool with their first reservations wait for each other for ever.
//! - Waiters are served in arrival order (tokio's semaphore is fair), so a large job is not
//!   starved by a stream of small ones.
//! - A single request larger than the whole budget is refused at once rather than waiting
//!   forever.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError};

/// Permits are counted in units of this many bytes, so budgets up to terabytes fit the
/// semaphore's permit range and small requests do not cost a permit per byte.
const UNIT: usize = 1024;

/// Why memory could not be reserved.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error("a conversion asked for {asked} bytes, more than the whole memory budget of {budget} bytes (raise [tables] memory_bytes)")]
    TooLarge { asked: usize, budget: usize },
    #[error("the memory pool is closed (the node is shutting down)")]
    Closed,
    /// A reservation could not grow to `wanted` bytes without waiting: give it back and
    /// [`MemoryPool::reserve`] `wanted` instead.
    #[error("{wanted} bytes of conversion memory are not free now (the pool is lent out)")]
    Exhausted { wanted: usize },
}

impl MemoryError {
    /// What the caller may do: a conversion larger than the whole budget is the input's (or
    /// the setting's) to change; a lent-out pool frees up; a closed one means the node is
    /// stopping.
    pub fn kind(&self) -> inlet_common::ErrorKind {
        match self {
            MemoryError::TooLarge { .. } => inlet_common::ErrorKind::BadInput,
            MemoryError::Closed => inlet_common::ErrorKind::Shutdown,
            MemoryError::Exhausted { .. } => inlet_common::ErrorKind::Retryable,
        }
    }
}

#[derive(Debug)]
struct Inner {
    semaphore: Arc<Semaphore>,
    budget_units: usize,
    used_units: AtomicUsize,
    high_water_units: AtomicUsize,
}

/// One node-wide byte budget that conversion jobs borrow from in turn.
#[derive(Debug, Clone)]
pub struct MemoryPool {
    inner: Arc<Inner>,
}

/// Bytes borrowed from a [`MemoryPool`]; returned when dropped.
#[derive(Debug)]
pub struct Reservation {
    pool: Arc<Inner>,
    permit: Option<OwnedSemaphorePermit>,
}

fn units(bytes: usize) -> usize {
    bytes.div_ceil(UNIT)
}

impl MemoryPool {
    /// A pool of `budget` bytes (rounded up to whole KiB).
    pub fn new(budget: usize) -> Self {
        let budget_units = units(budget).max(1);
        MemoryPool {
            inner: Arc::new(Inner {
                semaphore: Arc::new(Semaphore::new(budget_units)),
                budget_units,
                used_units: AtomicUsize::new(0),
                high_water_units: AtomicUsize::new(0),
            }),
        }
    }

    /// The budget in bytes.
    pub fn budget(&self) -> usize {
        self.inner.budget_units * UNIT
    }

    /// Bytes reserved right now.
    pub fn used(&self) -> usize {
        self.inner.used_units.load(Ordering::Relaxed) * UNIT
    }

    /// The most bytes ever reserved at once.
    pub fn high_water(&self) -> usize {
        self.inner.high_water_units.load(Ordering::Relaxed) * UNIT
    }

    /// An empty reservation, to grow later.
    pub fn empty(&self) -> Reservation {
        Reservation {
            pool: self.inner.clone(),
            permit: None,
        }
    }

    /// Reserves `bytes`, waiting until they are free (holding nothing while it waits).
    pub async fn reserve(&self, bytes: usize) -> Result<Reservation, MemoryError> {
        let n = units(bytes);
        let mut r = self.empty();
        if n == 0 {
            return Ok(r);
        }
        if n > self.inner.budget_units {
            return Err(MemoryError::TooLarge {
                asked: bytes,
                budget: self.budget(),
            });
        }
        let permit = self
            .inner
            .semaphore
            .clone()
            .acquire_many_owned(n as u32)
            .await
            .map_err(|_| MemoryError::Closed)?;
        self.inner.account(n as isize);
        r.permit = Some(permit);
        Ok(r)
    }

    /// Reserves `bytes` if they are free now.
    pub fn try_reserve(&self, bytes: usize) -> Option<Reservation> {
        let n = units(bytes);
        let permit = self
            .inner
            .semaphore
            .clone()
            .try_acquire_many_owned(u32::try_from(n).ok()?)
            .ok()?;
        self.inner.account(n as isize);
        Some(Reservation {
            pool: self.inner.clone(),
            permit: Some(permit),
        })
    }

    /// Refuses new reservations and wakes every waiter with [`MemoryError::Closed`].
    pub fn close(&self) {
        self.inner.semaphore.close();
    }
}

impl Inner {
    fn account(&self, delta_units: isize) {
        let now = if delta_units >= 0 {
            self.used_units
                .fetch_add(delta_units as usize, Ordering::Relaxed)
                + delta_units as usize
        } else {
            self.used_units
                .fetch_sub(delta_units.unsigned_abs(), Ordering::Relaxed)
                - delta_units.unsigned_abs()
        };
        self.high_water_units.fetch_max(now, Ordering::Relaxed);
    }
}

impl Reservation {
    /// Bytes held.
    pub fn size(&self) -> usize {
        self.permit.as_ref().map_or(0, |p| p.num_permits()) * UNIT
    }

    /// Adds `bytes` to the reservation if they are free now; never waits (see the module
    /// docs): [`MemoryError::Exhausted`] names the total the holder should ask for instead.
    pub fn grow(&mut self, bytes: usize) -> Result<(), MemoryError> {
        let n = units(bytes);
        if n == 0 {
            return Ok(());
        }
        let held = self.permit.as_ref().map_or(0, |p| p.num_permits());
        if held + n > self.pool.budget_units {
            return Err(MemoryError::TooLarge {
                asked: (held + n) * UNIT,
                budget: self.pool.budget_units * UNIT,
            });
        }
        let permits = u32::try_from(n).map_err(|_| MemoryError::TooLarge {
            asked: bytes,
            budget: self.pool.budget_units * UNIT,
        })?;
        let more = match self.pool.semaphore.clone().try_acquire_many_owned(permits) {
            Ok(p) => p,
            Err(TryAcquireError::Closed) => return Err(MemoryError::Closed),
            Err(TryAcquireError::NoPermits) => {
                return Err(MemoryError::Exhausted {
                    wanted: (held + n) * UNIT,
                })
            }
        };
        self.pool.account(n as isize);
        match &mut self.permit {
            Some(p) => p.merge(more),
            None => self.permit = Some(more),
        }
        Ok(())
    }

    /// Grows (if the bytes are free now, as [`Reservation::grow`]) or shrinks the reservation
    /// to `bytes`.
    pub fn resize(&mut self, bytes: usize) -> Result<(), MemoryError> {
        let held = self.size();
        if bytes > held {
            self.grow(bytes - held)
        } else {
            self.shrink(held - bytes);
            Ok(())
        }
    }

    /// Returns `bytes` (at most what is held) to the pool.
    pub fn shrink(&mut self, bytes: usize) {
        let n = bytes / UNIT;
        let Some(p) = &mut self.permit else {
            return;
        };
        let n = n.min(p.num_permits());
        if n == 0 {
            return;
        }
        if let Some(released) = p.split(n) {
            self.pool.account(-(n as isize));
            drop(released);
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some(p) = self.permit.take() {
            self.pool.account(-(p.num_permits() as isize));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn memory_errors_say_what_the_caller_may_do() {
        use inlet_common::ErrorKind;
        let too_large = MemoryError::TooLarge {
            asked: 2,
            budget: 1,
        };
        assert_eq!(too_large.kind(), ErrorKind::BadInput);
        assert_eq!(MemoryError::Closed.kind(), ErrorKind::Shutdown);
        assert_eq!(
            MemoryError::Exhausted { wanted: 1 }.kind(),
            ErrorKind::Retryable
        );
        assert_eq!(
            crate::error::Error::from(MemoryError::Closed).kind(),
            ErrorKind::Shutdown
        );
    }

    #[tokio::test]
    async fn reservations_wait_for_room_and_return_it_on_drop() {
        let pool = MemoryPool::new(10 * UNIT);
        let a = pool.reserve(6 * UNIT).await.expect("a");
        assert_eq!((pool.used(), a.size()), (6 * UNIT, 6 * UNIT));
        assert!(pool.try_reserve(5 * UNIT).is_none());
        let waiter = {
            let pool = pool.clone();
            tokio::spawn(async move { pool.reserve(5 * UNIT).await.map(|r| r.size()) })
        };
        // The waiter cannot finish while `a` holds its bytes.
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        drop(a);
        let got = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("the waiter gets its bytes once they are returned")
            .expect("task")
            .expect("reserved");
        assert_eq!(got, 5 * UNIT);
        assert_eq!(pool.used(), 0);
        assert_eq!(pool.high_water(), 6 * UNIT);
    }

    #[tokio::test]
    async fn grow_shrink_and_limits() {
        let pool = MemoryPool::new(8 * UNIT);
        let mut r = pool.empty();
        r.grow(3 * UNIT).expect("grow");
        r.grow(1).expect("rounds up to a unit");
        assert_eq!(r.size(), 4 * UNIT);
        r.shrink(2 * UNIT);
        assert_eq!((r.size(), pool.used()), (2 * UNIT, 2 * UNIT));
        r.resize(7 * UNIT).expect("resize up");
        assert_eq!(pool.used(), 7 * UNIT);
        assert!(matches!(
            r.grow(2 * UNIT),
            Err(MemoryError::TooLarge { .. })
        ));
        assert!(matches!(
            pool.reserve(9 * UNIT).await,
            Err(MemoryError::TooLarge { .. })
        ));
        drop(r);
        assert_eq!(pool.used(), 0);
        pool.close();
        assert!(matches!(pool.reserve(UNIT).await, Err(MemoryError::Closed)));
    }

    /// Growing never waits: with the room lent out it fails at once and names the total to
    /// ask for again, and the reservation keeps what it had.
    #[tokio::test]
    async fn growing_past_the_free_room_fails_at_once() {
        let pool = MemoryPool::new(8 * UNIT);
        let other = pool.reserve(5 * UNIT).await.expect("other");
        let mut r = pool.reserve(2 * UNIT).await.expect("r");
        match r.grow(3 * UNIT) {
            Err(MemoryError::Exhausted { wanted }) => assert_eq!(wanted, 5 * UNIT),
            other => panic!("{other:?}"),
        }
        assert_eq!((r.size(), pool.used()), (2 * UNIT, 7 * UNIT));
        r.grow(UNIT).expect("the last free unit");
        drop(other);
        r.resize(8 * UNIT)
            .expect("room once the other gave it back");
        assert_eq!(pool.high_water(), 8 * UNIT);
    }

    #[tokio::test]
    async fn many_jobs_never_exceed_the_budget() {
        let pool = MemoryPool::new(64 * UNIT);
        let mut jobs = tokio::task::JoinSet::new();
        for i in 0..100usize {
            let pool = pool.clone();
            jobs.spawn(async move {
                let r = pool.reserve((i % 16 + 1) * UNIT).await.expect("reserve");
                assert!(pool.used() <= pool.budget());
                tokio::task::yield_now().await;
                drop(r);
            });
        }
        while let Some(j) = jobs.join_next().await {
            j.expect("job");
        }
        assert!(pool.high_water() <= pool.budget());
        assert!(pool.high_water() >= 16 * UNIT);
        assert_eq!(pool.used(), 0);
    }
}
