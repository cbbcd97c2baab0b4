//! Failed authentications counted by client address, so that a password cannot be guessed at
//! the speed of the network: SASL on the Kafka listeners, basic auth and bearer tokens on the
//! HTTP and registry listeners, and the token endpoint all count here. An address that failed
//! `inlet.authentication.failures.max` times within `inlet.authentication.failure.window.ms`
//! is refused, without a password check, until that window ends; its successes do not reset
//! the count. Off unless that setting is given (every client behind an address is refused
//! with it, so one client retrying a wrong password locks out its neighbours). The counts live within `inlet.authentication.failure.tracker.bytes`; addresses
//! beyond it are not counted (ones whose window ended make room first).

use std::collections::HashMap;
use std::net::IpAddr;

use parking_lot::Mutex;

/// What counting one address costs: the address, the count, the window's start, the map's
/// overhead.
pub(crate) const ENTRY_BYTES: u64 = 64;

/// The counts of one node.
#[derive(Debug, Default)]
pub(crate) struct FailedAuthentications {
    /// By address: failures in the current window, and when the window started (ms).
    by_ip: Mutex<HashMap<IpAddr, (u32, u64)>>,
}

impl FailedAuthentications {
    /// For how much longer `ip` is refused at `now_ms` (None: it may try), with at most
    /// `max` failures a `window_ms` (0: no limit).
    pub(crate) fn refused_for(
        &self,
        ip: IpAddr,
        now_ms: u64,
        max: u32,
        window_ms: u64,
    ) -> Option<u64> {
        if max == 0 {
            return None;
        }
        let by_ip = self.by_ip.lock();
        let (count, start) = by_ip.get(&ip)?;
        let ends = start.saturating_add(window_ms);
        (now_ms < ends && *count >= max).then(|| ends - now_ms)
    }

    /// Counts a failure of `ip` at `now_ms`, within `budget_bytes`.
    pub(crate) fn failed(&self, ip: IpAddr, now_ms: u64, window_ms: u64, budget_bytes: u64) {
        let mut by_ip = self.by_ip.lock();
        if let Some((count, start)) = by_ip.get_mut(&ip) {
            if now_ms >= start.saturating_add(window_ms) {
                (*count, *start) = (1, now_ms);
            } else {
                *count = count.saturating_add(1);
            }
            return;
        }
        let room = (budget_bytes / ENTRY_BYTES) as usize;
        if by_ip.len() >= room {
            by_ip.retain(|_, (_, start)| now_ms < start.saturating_add(window_ms));
            if by_ip.len() >= room {
                return;
            }
        }
        by_ip.insert(ip, (1, now_ms));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_refused_after_its_failures_until_the_window_ends() {
        let f = FailedAuthentications::default();
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        for at in 0..3 {
            assert_eq!(f.refused_for(a, 1_000 + at, 3, 60_000), None);
            f.failed(a, 1_000 + at, 60_000, 1 << 20);
        }
        assert_eq!(f.refused_for(a, 2_000, 3, 60_000), Some(59_000));
        assert_eq!(f.refused_for(b, 2_000, 3, 60_000), None, "another address");
        assert_eq!(f.refused_for(a, 2_000, 0, 60_000), None, "0: no limit");
        assert_eq!(
            f.refused_for(a, 61_000, 3, 60_000),
            None,
            "the window ended"
        );
        // A failure after the window starts a new one.
        f.failed(a, 61_000, 60_000, 1 << 20);
        assert_eq!(f.refused_for(a, 61_001, 2, 60_000), None);
        f.failed(a, 61_002, 60_000, 1 << 20);
        assert_eq!(f.refused_for(a, 61_003, 2, 60_000), Some(59_997));
    }

    #[test]
    fn addresses_beyond_the_budget_are_not_counted_until_old_windows_end() {
        let f = FailedAuthentications::default();
        let ip = |n: u8| -> IpAddr { format!("10.0.0.{n}").parse().unwrap() };
        let budget = 2 * ENTRY_BYTES;
        f.failed(ip(1), 0, 1_000, budget);
        f.failed(ip(2), 500, 1_000, budget);
        f.failed(ip(3), 600, 1_000, budget);
        assert_eq!(
            f.refused_for(ip(3), 700, 1, 1_000),
            None,
            "not counted: no room"
        );
        assert_eq!(f.refused_for(ip(1), 700, 1, 1_000), Some(300));
        // ip(1)'s window ended: its room goes to ip(3).
        f.failed(ip(3), 1_200, 1_000, budget);
        assert_eq!(f.refused_for(ip(3), 1_300, 1, 1_000), Some(900));
        assert_eq!(f.by_ip.lock().len(), 2);
    }
}
