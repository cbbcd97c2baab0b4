//! Byte accounting of the log cache, with back pressure.

use std::collections::VecDeque;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::stream::StreamShared;

/// Data of one upload, now in object storage: evictable as a unit.
#[derive(Debug)]
pub(crate) struct CleanUnit {
    pub bytes: u64,
    /// Each stream and the end offset below which its cached entries may go.
    pub streams: Vec<(Arc<StreamShared>, u64)>,
}

#[derive(Debug, Default)]
struct State {
    used: u64,
    clean: VecDeque<CleanUnit>,
}

#[derive(Debug)]
pub(crate) struct LogBudget {
    budget: u64,
    state: Mutex<State>,
    freed: Notify,
    /// Woken when an append waits for room, so the uploader runs now.
    pub pressure: Notify,
}

impl LogBudget {
    pub(crate) fn new(budget: u64) -> Self {
        LogBudget {
            budget,
            state: Mutex::default(),
            freed: Notify::new(),
            pressure: Notify::new(),
        }
    }

    fn try_reserve(&self, bytes: u64) -> bool {
        let mut state = self.state.lock();
        loop {
            if state.used + bytes <= self.budget {
                state.used += bytes;
                return true;
            }
            let Some(unit) = state.clean.pop_front() else {
                return false;
            };
            state.used -= unit.bytes;
            for (stream, end) in &unit.streams {
                stream.evict_cached_below(*end);
            }
        }
    }

    /// Reserves room for `bytes` of appended data, evicting uploaded data first and waiting
    /// for an upload if everything cached is still waiting for one.
    pub(crate) async fn reserve(&self, bytes: u64) {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if self.try_reserve(bytes) {
                return;
            }
            self.pressure.notify_one();
            freed.await;
        }
    }

    /// Charges `bytes` without waiting (replay at startup, which must not block).
    pub(crate) fn force_reserve(&self, bytes: u64) {
        if !self.try_reserve(bytes) {
            self.state.lock().used += bytes;
        }
    }

    /// Gives back room of data that never made it into the cache, or left it while dirty.
    pub(crate) fn release(&self, bytes: u64) {
        {
            let mut state = self.state.lock();
            state.used = state.used.saturating_sub(bytes);
        }
        self.freed.notify_waiters();
    }

    /// Marks an upload's data evictable.
    pub(crate) fn uploaded(&self, unit: CleanUnit) {
        self.state.lock().clean.push_back(unit);
        self.freed.notify_waiters();
    }

    /// Takes back the newest evictable unit (tests simulating an upload never applied).
    #[cfg(test)]
    pub(crate) fn take_last_clean(&self) -> Option<CleanUnit> {
        self.state.lock().clean.pop_back()
    }

    pub(crate) fn used(&self) -> u64 {
        self.state.lock().used
    }

    pub(crate) fn budget(&self) -> u64 {
        self.budget
    }
}
