//! Traffic counters with Xray's names, shared by the relay (which adds to them) and the
//! metrics endpoint / API (which read them).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// A named set of live counters.
#[derive(Default, Debug)]
pub struct Stats {
    counters: RwLock<BTreeMap<String, Arc<AtomicU64>>>,
}

/// `inbound>>>TAG>>>traffic>>>uplink` and its kin.
pub fn name(kind: &str, tag: &str, dir: &str) -> String {
    format!("{kind}>>>{tag}>>>traffic>>>{dir}")
}

impl Stats {
    /// The counter called `name`, created at zero when new.
    pub fn counter(&self, name: &str) -> Arc<AtomicU64> {
        if let Some(c) = self
            .counters
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
        {
            return c.clone();
        }
        let mut w = self.counters.write().unwrap_or_else(|e| e.into_inner());
        w.entry(name.to_string()).or_default().clone()
    }

    /// The value of one counter, if it exists.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.counters
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .map(|c| c.load(Ordering::Relaxed))
    }

    /// All counters by name (optionally reset to zero, as Xray's QueryStats `reset` does).
    pub fn snapshot(&self, reset: bool) -> Vec<(String, u64)> {
        let r = self.counters.read().unwrap_or_else(|e| e.into_inner());
        r.iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    if reset {
                        v.swap(0, Ordering::Relaxed)
                    } else {
                        v.load(Ordering::Relaxed)
                    },
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_shared_by_name_and_reset() {
        let s = Stats::default();
        let a = s.counter(&name("inbound", "in", "uplink"));
        a.fetch_add(5, Ordering::Relaxed);
        s.counter("inbound>>>in>>>traffic>>>uplink")
            .fetch_add(2, Ordering::Relaxed);
        assert_eq!(s.get("inbound>>>in>>>traffic>>>uplink"), Some(7));
        assert_eq!(
            s.snapshot(true),
            vec![("inbound>>>in>>>traffic>>>uplink".to_string(), 7)]
        );
        assert_eq!(s.get("inbound>>>in>>>traffic>>>uplink"), Some(0));
        assert_eq!(s.get("nope"), None);
    }
}
