//! The one place production code draws randomness from (`clippy.toml` refuses `rand`'s entry
//! points everywhere else, as it refuses ambient time): nonces and salts of authentication,
//! token keys, fetch session ids, retry jitter. All of it from the operating system's
//! generator through `rand`'s thread-local one, so a value never repeats across restarts.
//! Seeded simulations and tests build their own `StdRng` from a printed seed instead.

#![allow(clippy::disallowed_methods)] // this module is where randomness is allowed

/// `N` random bytes (a salt, a nonce, a key).
pub fn bytes<const N: usize>() -> [u8; N] {
    rand::random()
}

/// A random number in `range` (inclusive), e.g. a retry's jitter.
pub fn in_range(range: std::ops::RangeInclusive<u64>) -> u64 {
    rand::random_range(range)
}

/// A random 32-bit number.
pub fn u32() -> u32 {
    rand::random()
}

#[cfg(test)]
mod tests {
    #[test]
    fn draws_differ_and_stay_in_range() {
        assert_ne!(super::bytes::<16>(), super::bytes::<16>());
        for _ in 0..1000 {
            assert!((5..=9).contains(&super::in_range(5..=9)));
        }
    }
}
