//! What the packets queued in sessions not yet answered may hold: in all, and per source
//! address, so that one stranger cannot take the room of every other client.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

/// What all the sessions of one inbound not yet answered may hold in packets, together.
/// Each may hold up to `scMaxBufferedPosts` × `scMaxEachPostBytes` (30 MB at the defaults)
/// for 30 s without a GET, as in Xray, which has no cap across sessions. A real client's
/// packets are read as they come in order, so it rarely has much counted.
pub const UNANSWERED_BUDGET: usize = 128 << 20;
/// What the sessions of one source address may hold of it: a quarter, so that at least
/// four sources fill the whole.
pub const PER_SOURCE_BUDGET: usize = UNANSWERED_BUDGET / 4;

/// Bytes queued in sessions whose proxied connection has not answered yet.
pub struct Budget {
    total_max: usize,
    source_max: usize,
    held: Mutex<Held>,
}

#[derive(Default)]
struct Held {
    total: usize,
    by_source: HashMap<IpAddr, usize>,
}

impl Default for Budget {
    fn default() -> Self {
        Budget::new(UNANSWERED_BUDGET, PER_SOURCE_BUDGET)
    }
}

impl Budget {
    pub fn new(total_max: usize, source_max: usize) -> Self {
        Budget {
            total_max,
            source_max,
            held: Mutex::default(),
        }
    }

    /// Counts `n` more bytes from `source` (none: a unix socket's clients share the whole), or
    /// says which budget they would overflow.
    pub fn take(&self, source: Option<IpAddr>, n: usize) -> Result<(), &'static str> {
        let mut h = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if h.total + n > self.total_max {
            return Err("the inbound's buffer for sessions not yet answered is full");
        }
        if let Some(ip) = source {
            let mine = h.by_source.entry(ip).or_default();
            if *mine + n > self.source_max {
                if *mine == 0 {
                    h.by_source.remove(&ip);
                }
                return Err("this address's buffer for sessions not yet answered is full");
            }
            *mine += n;
        }
        h.total += n;
        Ok(())
    }

    /// Gives back `n` bytes counted for `source`.
    pub fn give(&self, source: Option<IpAddr>, n: usize) {
        if n == 0 {
            return;
        }
        let mut h = self.held.lock().unwrap_or_else(|e| e.into_inner());
        h.total = h.total.saturating_sub(n);
        if let Some(ip) = source {
            if let Some(mine) = h.by_source.get_mut(&ip) {
                *mine = mine.saturating_sub(n);
                if *mine == 0 {
                    h.by_source.remove(&ip);
                }
            }
        }
    }

    #[cfg(test)]
    fn held(&self, source: Option<IpAddr>) -> (usize, usize) {
        let h = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let mine = source.and_then(|ip| h.by_source.get(&ip).copied());
        (h.total, mine.unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_source_then_in_all() {
        let b = Budget::new(100, 40);
        let (x, y, z): (IpAddr, IpAddr, IpAddr) = (
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            "10.0.0.3".parse().unwrap(),
        );
        assert!(b.take(Some(x), 40).is_ok());
        assert!(b.take(Some(x), 1).unwrap_err().contains("address"));
        // Another source still has room, up to the whole.
        assert!(b.take(Some(y), 40).is_ok());
        assert!(b.take(None, 15).is_ok());
        assert!(b.take(Some(z), 10).unwrap_err().contains("inbound"));
        assert_eq!(b.held(Some(z)), (95, 0));
        b.give(Some(x), 30);
        assert_eq!(b.held(Some(x)), (65, 10));
        assert!(b.take(Some(z), 10).is_ok());
        b.give(Some(x), 10);
        b.give(Some(y), 40);
        b.give(Some(z), 10);
        b.give(None, 15);
        assert_eq!(b.held(Some(x)), (0, 0));
        assert!(b.held.lock().unwrap().by_source.is_empty());
    }
}
