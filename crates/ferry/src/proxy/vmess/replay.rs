//! Replay filters: a two-generation set remembering each key for one to two periods, with a
//! cap on memory (a full generation rotates early; a warning says so).

use std::collections::HashSet;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

struct Gens<K> {
    current: HashSet<K>,
    previous: HashSet<K>,
    rotated: Instant,
}

/// Remembers keys for `period`..`2 * period`; [`ReplayFilter::check`] says whether a key is new.
pub struct ReplayFilter<K> {
    gens: Mutex<Gens<K>>,
    period: Duration,
    cap: usize,
}

impl<K: Hash + Eq> ReplayFilter<K> {
    /// `cap` bounds each generation (so memory is at most `2 * cap` keys).
    pub fn new(period: Duration, cap: usize) -> Self {
        ReplayFilter {
            gens: Mutex::new(Gens {
                current: HashSet::new(),
                previous: HashSet::new(),
                rotated: Instant::now(),
            }),
            period,
            cap,
        }
    }

    /// True if `key` was not seen (and remembers it); false for a replay.
    pub fn check(&self, key: K) -> bool {
        self.check_at(key, Instant::now())
    }

    fn check_at(&self, key: K, now: Instant) -> bool {
        let mut g = self.gens.lock().unwrap_or_else(|e| e.into_inner());
        if now.duration_since(g.rotated) >= self.period {
            let gone = now.duration_since(g.rotated) >= 2 * self.period;
            g.previous = std::mem::take(&mut g.current);
            if gone {
                g.previous.clear();
            }
            g.rotated = now;
        }
        if g.current.contains(&key) || g.previous.contains(&key) {
            return false;
        }
        if g.current.len() >= self.cap {
            tracing::warn!(
                "vmess replay filter: {} entries within {:?}; rotating early",
                g.current.len(),
                self.period
            );
            g.previous = std::mem::take(&mut g.current);
            g.rotated = now;
        }
        g.current.insert(key);
        true
    }

    /// Keys held now (for tests).
    pub fn len(&self) -> usize {
        let g = self.gens.lock().unwrap_or_else(|e| e.into_inner());
        g.current.len() + g.previous.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_for_a_period_and_is_bounded() {
        let f = ReplayFilter::new(Duration::from_secs(120), 4);
        let t0 = Instant::now();
        assert!(f.check_at(1, t0));
        assert!(!f.check_at(1, t0));
        assert!(!f.check_at(1, t0 + Duration::from_secs(130)));
        assert!(f.check_at(1, t0 + Duration::from_secs(400)));
        for k in 10..100 {
            assert!(f.check_at(k, t0 + Duration::from_secs(400)));
        }
        assert!(f.len() <= 8);
        assert!(!f.check_at(99, t0 + Duration::from_secs(400)));
    }
}
