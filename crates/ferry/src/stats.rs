//! Traffic counters with Xray's names, shared by the relay (which adds to them) and the
//! metrics endpoint / API (which read them).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// A named set of live counters.
#[derive(Default, Debug)]
pub struct Stats {
    counters: RwLock<BTreeMap<String, Arc<AtomicU64>>>,
    /// Counters made ahead of their first use (a user's, when the user is added): they count
    /// already, and are listed from their first connection on, as Xray lists them.
    unlisted: RwLock<BTreeMap<String, Arc<AtomicU64>>>,
    /// Rejected handshakes by inbound and reason (metrics only: not Xray counters).
    pub rejects: crate::rejects::Rejects,
}

/// `inbound>>>TAG>>>traffic>>>uplink` and its kin.
pub fn name(kind: &str, tag: &str, dir: &str) -> String {
    format!("{kind}>>>{tag}>>>traffic>>>{dir}")
}

impl Stats {
    /// The counter called `name`, created at zero when new, and listed.
    pub fn counter(&self, name: &str) -> Arc<AtomicU64> {
        if let Some(c) = self
            .counters
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
        {
            return c.clone();
        }
        self.list(name)
    }

    /// The counter called `name`, made ahead of its first use: it is not listed until
    /// [`Stats::list`] is called for it (or [`Stats::counter`] asks for it).
    pub fn unlisted_counter(&self, name: &str) -> Arc<AtomicU64> {
        if let Some(c) = self
            .counters
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
        {
            return c.clone();
        }
        let mut u = self.unlisted.write().unwrap_or_else(|e| e.into_inner());
        u.entry(name.to_string()).or_default().clone()
    }

    /// Lists the counter called `name` (the one made ahead, if any) and returns it.
    pub fn list(&self, name: &str) -> Arc<AtomicU64> {
        let mut w = self.counters.write().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = w.get(name) {
            return c.clone();
        }
        let made = self
            .unlisted
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name);
        w.entry(name.to_string())
            .or_insert_with(|| made.unwrap_or_default())
            .clone()
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

    #[test]
    fn counters_made_ahead_count_unlisted_until_listed() {
        let s = Stats::default();
        let u = s.unlisted_counter("user>>>a>>>traffic>>>uplink");
        u.fetch_add(3, Ordering::Relaxed);
        assert_eq!(s.get("user>>>a>>>traffic>>>uplink"), None);
        assert!(Arc::ptr_eq(
            &u,
            &s.unlisted_counter("user>>>a>>>traffic>>>uplink")
        ));
        assert!(Arc::ptr_eq(&u, &s.list("user>>>a>>>traffic>>>uplink")));
        assert_eq!(s.get("user>>>a>>>traffic>>>uplink"), Some(3));
        assert!(Arc::ptr_eq(&u, &s.counter("user>>>a>>>traffic>>>uplink")));
    }
}
