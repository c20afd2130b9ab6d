//! Traffic counters with Xray's names, shared by the relay (which adds to them) and the
//! metrics endpoint / API (which read them).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// A named set of live counters.
#[derive(Default, Debug)]
pub struct Stats {
    counters: RwLock<BTreeMap<String, Arc<AtomicU64>>>,
    /// Counters made ahead of their first use (a user's, when the user is added): they count
    /// already, and are listed from their first connection on, as Xray lists them.
    unlisted: RwLock<BTreeMap<String, Arc<AtomicU64>>>,
    /// `user>>>EMAIL>>>online` maps: who is connected from where (policy `statsUserOnline`).
    online: RwLock<BTreeMap<String, Arc<OnlineMap>>>,
    /// Rejected handshakes by inbound and reason (metrics only: not Xray counters).
    pub rejects: crate::rejects::Rejects,
}

/// The source addresses one user has open connections from, as Xray's online map keeps
/// them: a reference count per IP and the Unix time of its latest connection start.
#[derive(Default, Debug)]
pub struct OnlineMap {
    ips: Mutex<HashMap<IpAddr, (u32, i64)>>,
}

impl OnlineMap {
    /// Distinct IPs with at least one open connection.
    pub fn count(&self) -> usize {
        self.ips.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Each IP with an open connection and the Unix second its latest connection started.
    pub fn ips(&self) -> Vec<(IpAddr, i64)> {
        let mut v: Vec<_> = self
            .ips
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(ip, (_, t))| (*ip, *t))
            .collect();
        v.sort();
        v
    }

    /// Records a connection from `ip` until the guard drops. Loopback sources (127.0.0.1,
    /// ::1) are not recorded, as in Xray.
    pub fn enter(self: &Arc<Self>, ip: IpAddr) -> Option<OnlineGuard> {
        if ip == IpAddr::from([127, 0, 0, 1]) || ip == IpAddr::from(std::net::Ipv6Addr::LOCALHOST) {
            return None;
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        let mut m = self.ips.lock().unwrap_or_else(|e| e.into_inner());
        let e = m.entry(ip).or_insert((0, now));
        e.0 += 1;
        e.1 = now;
        Some(OnlineGuard {
            map: self.clone(),
            ip,
        })
    }
}

/// One open connection in an [`OnlineMap`].
pub struct OnlineGuard {
    map: Arc<OnlineMap>,
    ip: IpAddr,
}

impl Drop for OnlineGuard {
    fn drop(&mut self) {
        let mut m = self.map.ips.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = m.get_mut(&self.ip) {
            e.0 = e.0.saturating_sub(1);
            if e.0 == 0 {
                m.remove(&self.ip);
            }
        }
    }
}

/// `user>>>EMAIL>>>online`.
pub fn online_name(email: &str) -> String {
    format!("user>>>{email}>>>online")
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

    /// Forgets the counters made ahead for a removed user that were never listed (no
    /// connection of it came) and that no other user of the same email holds: nothing can
    /// read them, so they would only take memory. Listed counters stay, as in Xray.
    pub fn forget_unlisted_user(&self, email: &str) {
        let mut u = self.unlisted.write().unwrap_or_else(|e| e.into_inner());
        for dir in ["uplink", "downlink"] {
            let n = name("user", email, dir);
            if u.get(&n).is_some_and(|c| Arc::strong_count(c) == 1) {
                u.remove(&n);
            }
        }
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

    /// Swaps one counter to zero and returns what it held (`None`: no such counter).
    pub fn take(&self, name: &str) -> Option<u64> {
        self.counters
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .map(|c| c.swap(0, Ordering::Relaxed))
    }

    /// The online map called `name` (`user>>>EMAIL>>>online`), made when new.
    pub fn online_map(&self, name: &str) -> Arc<OnlineMap> {
        if let Some(m) = self
            .online
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
        {
            return m.clone();
        }
        self.online
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .entry(name.to_string())
            .or_default()
            .clone()
    }

    /// The online map called `name`, if one was ever made.
    pub fn find_online(&self, name: &str) -> Option<Arc<OnlineMap>> {
        self.online
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    /// Every online map by name.
    pub fn online_maps(&self) -> Vec<(String, Arc<OnlineMap>)> {
        self.online
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// The counters whose names contain `pattern` (all for ""), each swapped to zero on its
    /// own when `reset` (every byte is reported once across successive resetting calls).
    pub fn query(&self, pattern: &str, reset: bool) -> Vec<(String, u64)> {
        let r = self.counters.read().unwrap_or_else(|e| e.into_inner());
        r.iter()
            .filter(|(k, _)| k.contains(pattern))
            .map(|(k, v)| {
                let n = if reset {
                    v.swap(0, Ordering::Relaxed)
                } else {
                    v.load(Ordering::Relaxed)
                };
                (k.clone(), n)
            })
            .collect()
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

/// Connections being served in the process (every instance), for the metrics endpoint.
pub(crate) static CONNECTIONS: AtomicUsize = AtomicUsize::new(0);

/// Connections being served now, process-wide.
pub fn live_connections() -> usize {
    CONNECTIONS.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn online_maps_count_distinct_ips_with_open_connections() {
        let s = Stats::default();
        let m = s.online_map(&online_name("a"));
        let ip = IpAddr::from([127, 0, 0, 2]);
        let g1 = m.enter(ip).unwrap();
        let g2 = m.enter(ip).unwrap();
        let g3 = m.enter(IpAddr::from([10, 0, 0, 1])).unwrap();
        assert!(m.enter(IpAddr::from([127, 0, 0, 1])).is_none());
        assert_eq!(m.count(), 2);
        drop(g1);
        assert_eq!(m.count(), 2);
        drop(g2);
        drop(g3);
        assert_eq!(m.count(), 0);
        assert!(Arc::ptr_eq(
            &m,
            &s.find_online("user>>>a>>>online").unwrap()
        ));
        assert!(s.find_online("user>>>b>>>online").is_none());
    }

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
