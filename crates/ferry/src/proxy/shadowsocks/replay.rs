//! Salt replay filters.
//!
//! * [`BloomPair`] for the stream and AEAD editions: two Bloom filters used in turn, as
//!   shadowsocks-rust and libev ("ppbloom") do. When the current one is full the older one is
//!   cleared and becomes current, so memory is fixed and the last `capacity`..`2·capacity` salts
//!   are always remembered.
//! * [`SaltPool`] for 2022: an exact set of request salts kept for 60 s (SIP022 forbids Bloom
//!   filters there, and the timestamp check bounds how long a salt must be kept).

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Salts per Bloom filter before the pair rotates.
pub const BLOOM_CAPACITY: usize = 100_000;
/// Hash functions per Bloom filter (false-positive rate about 1e-6 at capacity).
const BLOOM_HASHES: usize = 20;

struct Bloom {
    bits: Vec<u64>,
    count: usize,
}

impl Bloom {
    fn new(nbits: usize) -> Bloom {
        Bloom {
            bits: vec![0; nbits.div_ceil(64)],
            count: 0,
        }
    }
    fn positions(h: (u64, u64), nbits: u64) -> impl Iterator<Item = usize> {
        (0..BLOOM_HASHES as u64)
            .map(move |i| (h.0.wrapping_add(i.wrapping_mul(h.1)) % nbits) as usize)
    }
    fn contains(&self, h: (u64, u64)) -> bool {
        let n = (self.bits.len() * 64) as u64;
        Self::positions(h, n).all(|p| self.bits[p / 64] & (1 << (p % 64)) != 0)
    }
    fn insert(&mut self, h: (u64, u64)) {
        let n = (self.bits.len() * 64) as u64;
        for p in Self::positions(h, n) {
            self.bits[p / 64] |= 1 << (p % 64);
        }
        self.count += 1;
    }
    fn clear(&mut self) {
        self.bits.iter_mut().for_each(|w| *w = 0);
        self.count = 0;
    }
}

/// A rotating pair of Bloom filters of seen salts (bounded memory).
pub struct BloomPair {
    keys: (RandomState, RandomState),
    inner: Mutex<(Bloom, Bloom)>,
    capacity: usize,
}

impl Default for BloomPair {
    fn default() -> Self {
        Self::new(BLOOM_CAPACITY)
    }
}

impl BloomPair {
    /// A pair holding `capacity` salts per filter.
    pub fn new(capacity: usize) -> BloomPair {
        // m = -n ln p / (ln 2)^2 with p = 1e-6: about 28.8 bits per entry.
        let nbits = (capacity.max(16) * 29).max(1024);
        BloomPair {
            keys: (RandomState::new(), RandomState::new()),
            inner: Mutex::new((Bloom::new(nbits), Bloom::new(nbits))),
            capacity: capacity.max(16),
        }
    }

    fn hash(&self, salt: &[u8]) -> (u64, u64) {
        (self.keys.0.hash_one(salt), self.keys.1.hash_one(salt) | 1)
    }

    /// Records `salt`; returns `false` when it was (probably) seen before.
    pub fn check_and_insert(&self, salt: &[u8]) -> bool {
        let h = self.hash(salt);
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (cur, old) = &mut *g;
        if cur.contains(h) || old.contains(h) {
            return false;
        }
        if cur.count >= self.capacity {
            std::mem::swap(cur, old);
            cur.clear();
        }
        cur.insert(h);
        true
    }
}

/// How long a 2022 salt is remembered.
pub const SALT_POOL_TTL: Duration = Duration::from_secs(60);

/// An exact set of recent 2022 request salts.
type Salts = HashMap<Box<[u8]>, Instant>;

#[derive(Default)]
pub struct SaltPool {
    /// Salts with the time they were first seen, and the last purge.
    inner: Mutex<(Salts, Option<Instant>)>,
}

impl SaltPool {
    /// Records `salt`; returns `false` when it was seen within the last 60 s.
    pub fn check_and_insert(&self, salt: &[u8]) -> bool {
        let now = Instant::now();
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (map, last_purge) = &mut *g;
        if last_purge.is_none_or(|t| now.duration_since(t) > Duration::from_secs(1)) {
            map.retain(|_, t| now.duration_since(*t) < SALT_POOL_TTL);
            *last_purge = Some(now);
        }
        if let Some(t) = map.get(salt) {
            if now.duration_since(*t) < SALT_POOL_TTL {
                return false;
            }
        }
        map.insert(salt.into(), now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bloom_pair_rejects_repeats_and_rotates() {
        let b = BloomPair::new(100);
        for i in 0..100u32 {
            assert!(b.check_and_insert(&i.to_be_bytes()));
        }
        for i in 0..100u32 {
            assert!(!b.check_and_insert(&i.to_be_bytes()), "{i}");
        }
        // Fill a second generation; the first is still in the old filter.
        for i in 100..200u32 {
            assert!(b.check_and_insert(&i.to_be_bytes()));
        }
        assert!(!b.check_and_insert(&5u32.to_be_bytes()));
        // A third generation drops the first.
        for i in 200..300u32 {
            assert!(b.check_and_insert(&i.to_be_bytes()));
        }
        assert!(b.check_and_insert(&5u32.to_be_bytes()));
    }

    #[test]
    fn salt_pool_is_exact() {
        let p = SaltPool::default();
        assert!(p.check_and_insert(b"abc"));
        assert!(!p.check_and_insert(b"abc"));
        assert!(p.check_and_insert(b"abd"));
    }
}
