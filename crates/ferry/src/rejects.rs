//! Rejected handshakes counted per inbound and reason, so an operator can see that a server is
//! being probed (the metrics endpoint lists them; each one is also logged at info level).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;

/// Live counts of rejected handshakes, keyed by inbound tag and reason.
#[derive(Default, Debug)]
pub struct Rejects {
    counts: RwLock<BTreeMap<(String, &'static str), AtomicU64>>,
}

impl Rejects {
    /// Counts one rejected handshake on `inbound` for `reason` (a short stable name).
    pub fn count(&self, inbound: &str, reason: &'static str) {
        {
            let r = self.counts.read().unwrap_or_else(|e| e.into_inner());
            if let Some(c) = r.get(&(inbound.to_string(), reason)) {
                c.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        let mut w = self.counts.write().unwrap_or_else(|e| e.into_inner());
        w.entry((inbound.to_string(), reason))
            .or_default()
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Every count as `(inbound, reason, n)`, ordered by inbound then reason.
    pub fn snapshot(&self) -> Vec<(String, &'static str, u64)> {
        let r = self.counts.read().unwrap_or_else(|e| e.into_inner());
        r.iter()
            .map(|((tag, reason), n)| (tag.clone(), *reason, n.load(Ordering::Relaxed)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_inbound_and_reason() {
        let r = Rejects::default();
        r.count("ss", "replay");
        r.count("ss", "replay");
        r.count("ss", "auth");
        r.count("vm", "auth");
        assert_eq!(
            r.snapshot(),
            vec![
                ("ss".to_string(), "auth", 1),
                ("ss".to_string(), "replay", 2),
                ("vm".to_string(), "auth", 1),
            ]
        );
    }
}
