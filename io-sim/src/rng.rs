//! The world's only source of randomness: one ChaCha8 stream seeded from the
//! run's `u64` seed, plus the seeded [`IdSource`] handed to each engine
//! incarnation. Nothing here reads the OS.

use orbit_core::engine::IdSource;
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The seeded random stream every choice of a run draws from.
#[derive(Debug, Clone)]
pub struct SimRng {
    inner: ChaCha8Rng,
}

impl SimRng {
    /// The stream of `seed`.
    pub fn new(seed: u64) -> SimRng {
        SimRng {
            inner: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    /// True with probability `p` (0 never, 1 always).
    pub fn chance(&mut self, p: f64) -> bool {
        if p <= 0.0 {
            return false;
        }
        if p >= 1.0 {
            return true;
        }
        self.inner.random::<f64>() < p
    }

    /// A value in `lo..=hi` (`lo` when the range is empty).
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        self.inner.random_range(lo..=hi)
    }

    /// A float in `lo..hi`.
    pub fn float(&mut self, lo: f64, hi: f64) -> f64 {
        if hi <= lo {
            return lo;
        }
        self.inner.random_range(lo..hi)
    }

    /// An index below `n` (0 when `n` is 0).
    pub fn index(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        self.inner.random_range(0..n)
    }

    /// A raw 64-bit draw (used to seed derived streams).
    pub fn next_u64(&mut self) -> u64 {
        self.inner.next_u64()
    }
}

/// UUIDv4-shaped ids drawn from a stream derived from the world's seed: the
/// simulation's [`IdSource`] for engines (tokens, session ids, generated
/// execution ids).
#[derive(Debug, Clone)]
pub struct SeededIds {
    rng: ChaCha8Rng,
}

impl SeededIds {
    /// A source seeded with `seed` (draw it from the world's [`SimRng`]).
    pub fn new(seed: u64) -> SeededIds {
        SeededIds {
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }
}

impl IdSource for SeededIds {
    fn next_id(&mut self) -> String {
        let mut b = [0u8; 16];
        self.rng.fill_bytes(&mut b);
        b[6] = (b[6] & 0x0f) | 0x40;
        b[8] = (b[8] & 0x3f) | 0x80;
        let h =
            |r: std::ops::Range<usize>| b[r].iter().map(|x| format!("{x:02x}")).collect::<String>();
        format!(
            "{}-{}-{}-{}-{}",
            h(0..4),
            h(4..6),
            h(6..8),
            h(8..10),
            h(10..16)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_and_ids() {
        let mut a = SimRng::new(7);
        let mut b = SimRng::new(7);
        for _ in 0..100 {
            assert_eq!(a.between(0, 1000), b.between(0, 1000));
        }
        let mut x = SeededIds::new(3);
        let mut y = SeededIds::new(3);
        let id = x.next_id();
        assert_eq!(id, y.next_id());
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "4");
        assert_ne!(id, x.next_id());
    }
}
