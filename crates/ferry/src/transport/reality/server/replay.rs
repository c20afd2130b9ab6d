//! The replay cache: ClientHello randoms already accepted, for the window the time check lets
//! a hello through.

use std::time::Duration;

/// ClientHello randoms already accepted: a replayed hello is a prober's and goes to the target
/// (Xray v26.3 answers a replay with a handshake the replayer cannot finish; Ferry does not
/// answer it at all). Kept for the whole window the time check lets a hello through
/// ([`replay_ttl`]), at most [`SEEN_MAX`] of them (bounded memory: ~20 MB).
#[derive(Default)]
pub(super) struct Seen {
    order: std::collections::VecDeque<(std::time::Instant, [u8; 32])>,
    set: std::collections::HashSet<[u8; 32]>,
}

pub(super) const SEEN_MAX: usize = 200_000;

/// How long an accepted ClientHello is remembered. Its timestamp passes the time check from
/// `maxTimeDiff` before it to `maxTimeDiff` after it, so one first seen at the early edge is
/// still accepted 2 x `maxTimeDiff` later: it is kept that long. Without `maxTimeDiff` any
/// time passes and only this cache stands: an hour, bounded by [`SEEN_MAX`].
pub(super) fn replay_ttl(max_time_diff: Option<Duration>) -> Duration {
    match max_time_diff {
        Some(d) if !d.is_zero() => d.saturating_mul(2),
        _ => Duration::from_secs(3600),
    }
}

impl Seen {
    /// Records `random`; false when it was already there.
    pub(super) fn insert(&mut self, random: [u8; 32], ttl: Duration) -> bool {
        let now = std::time::Instant::now();
        while let Some((t, r)) = self.order.front() {
            if now.duration_since(*t) < ttl && self.order.len() < SEEN_MAX {
                break;
            }
            self.set.remove(r);
            self.order.pop_front();
        }
        if !self.set.insert(random) {
            return false;
        }
        self.order.push_back((now, random));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_random_is_accepted_once_until_it_expires() {
        let mut seen = Seen::default();
        assert!(seen.insert([1; 32], Duration::from_secs(60)));
        assert!(!seen.insert([1; 32], Duration::from_secs(60)));
        assert!(seen.insert([2; 32], Duration::from_secs(60)));
        std::thread::sleep(Duration::from_millis(20));
        // With a shorter life the old entries are gone.
        assert!(seen.insert([1; 32], Duration::from_millis(10)));
        assert_eq!(seen.order.len(), 1);
    }

    #[test]
    fn a_replay_inside_both_sides_of_the_clock_window_is_refused() {
        let max = Duration::from_millis(300);
        let ttl = replay_ttl(Some(max));
        assert_eq!(ttl, max * 2);
        assert_eq!(replay_ttl(None), Duration::from_secs(3600));
        assert_eq!(replay_ttl(Some(Duration::ZERO)), Duration::from_secs(3600));
        let mut seen = Seen::default();
        assert!(seen.insert([3; 32], ttl));
        // Past maxTimeDiff, still inside 2 x maxTimeDiff: the time check would pass it.
        std::thread::sleep(max + Duration::from_millis(50));
        assert!(!seen.insert([3; 32], ttl));
        std::thread::sleep(max);
        assert!(seen.insert([3; 32], ttl));
    }

    #[test]
    fn a_flood_keeps_the_cache_bounded() {
        let mut seen = Seen::default();
        for i in 0..SEEN_MAX as u32 + 5000 {
            let mut r = [0u8; 32];
            r[..4].copy_from_slice(&i.to_be_bytes());
            assert!(seen.insert(r, Duration::from_secs(3600)));
        }
        assert!(seen.order.len() <= SEEN_MAX, "{}", seen.order.len());
        assert_eq!(seen.set.len(), seen.order.len());
        // The newest are still refused as replays.
        let mut r = [0u8; 32];
        r[..4].copy_from_slice(&(SEEN_MAX as u32 + 4999).to_be_bytes());
        assert!(!seen.insert(r, Duration::from_secs(3600)));
    }
}
