//! FakeDNS (routing.md §4.9): a pool of addresses handed out as answers, one per name, so a
//! connection to such an address can be given its name back (sniffing's `fakedns`, §3.7).
//!
//! The top-level `fakedns` object (`{"ipPool", "poolSize"}` or an array of them) makes the pools;
//! a `dns` server `"fakedns"` answers from them, only for the `dns` outbound (routing's own
//! lookups skip it), with TTL 1. Without a `fakedns` object such a server gets Xray's defaults:
//! 198.18.0.0/15 and fc00::/18 with 32768 names each, or one pool of 65535 when the query
//! strategy keeps one family. Allocation as Xray: from `base + (now in ms mod pool size)`, one
//! up (wrapping) until an address no name holds; the least recently used name goes when the
//! pool holds `poolSize` names.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Mutex;

use serde_json::Value;

use super::Families;
use crate::config::reader::{self, ConfigError, Obj, Result};

/// Names and addresses of one pool, least recently used first out.
#[derive(Debug, Default)]
struct Lru {
    cap: usize,
    tick: u64,
    by_name: HashMap<String, (IpAddr, u64)>,
    by_ip: HashMap<IpAddr, String>,
    order: BTreeMap<u64, String>,
}

impl Lru {
    fn touch(&mut self, name: &str) {
        if let Some((_, t)) = self.by_name.get_mut(name) {
            self.order.remove(t);
            self.tick += 1;
            *t = self.tick;
            self.order.insert(self.tick, name.to_string());
        }
    }

    fn get(&mut self, name: &str) -> Option<IpAddr> {
        let ip = self.by_name.get(name)?.0;
        self.touch(name);
        Some(ip)
    }

    fn name_of(&mut self, ip: IpAddr) -> Option<String> {
        let name = self.by_ip.get(&ip)?.clone();
        self.touch(&name);
        Some(name)
    }

    fn put(&mut self, name: &str, ip: IpAddr) {
        self.tick += 1;
        if let Some((old, t)) = self.by_name.insert(name.to_string(), (ip, self.tick)) {
            self.order.remove(&t);
            self.by_ip.remove(&old);
        }
        self.by_ip.insert(ip, name.to_string());
        self.order.insert(self.tick, name.to_string());
        while self.by_name.len() > self.cap {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            if let Some((ip, _)) = self.by_name.remove(&oldest) {
                self.by_ip.remove(&ip);
            }
        }
    }
}

/// One `ipPool`.
#[derive(Debug)]
pub struct Pool {
    /// The network's first address, as a number (IPv4 in the low 32 bits).
    base: u128,
    v6: bool,
    /// Address bits after the prefix.
    host_bits: u32,
    lru: Mutex<Lru>,
}

impl Pool {
    /// A pool of `cidr` holding `size` names; the size must leave room (log2 below the host
    /// bits), as Xray requires.
    pub fn new(cidr: &str, size: u64, path: &str) -> Result<Pool> {
        let bad = || ConfigError::new(path, format!("{cidr:?} is not a CIDR"));
        let (ip, bits) = cidr.split_once('/').ok_or_else(bad)?;
        let ip: IpAddr = ip.parse().map_err(|_| bad())?;
        let bits: u32 = bits.parse().map_err(|_| bad())?;
        let (v6, width) = match ip {
            IpAddr::V4(_) => (false, 32),
            IpAddr::V6(_) => (true, 128),
        };
        if bits > width {
            return Err(bad());
        }
        let host_bits = width - bits;
        if size == 0 {
            return Err(ConfigError::new(path, "poolSize must be above 0"));
        }
        if (size as f64).log2() >= f64::from(host_bits) {
            return Err(ConfigError::new(
                path,
                format!("poolSize {size} is bigger than {cidr} can hold"),
            ));
        }
        let n = num(ip);
        let mask = if host_bits >= 128 {
            0
        } else {
            !0u128 << host_bits
        };
        Ok(Pool {
            base: n & mask & if v6 { !0 } else { u128::from(u32::MAX) },
            v6,
            host_bits,
            lru: Mutex::new(Lru {
                cap: usize::try_from(size).unwrap_or(usize::MAX),
                ..Lru::default()
            }),
        })
    }

    fn addr(&self, n: u128) -> IpAddr {
        if self.v6 {
            IpAddr::from(n.to_be_bytes())
        } else {
            IpAddr::from((n as u32).to_be_bytes())
        }
    }

    /// Whether `ip` is in this pool's network.
    pub fn contains(&self, ip: IpAddr) -> bool {
        if ip.is_ipv6() != self.v6 {
            return false;
        }
        let n = num(ip);
        self.host_bits >= 128 || (n >> self.host_bits) == (self.base >> self.host_bits)
    }

    /// The address of `name`, given out now if it has none.
    pub fn ip_for(&self, name: &str) -> IpAddr {
        let mut lru = self.lru.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(ip) = lru.get(name) {
            return ip;
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let offset = if self.host_bits < 64 {
            u128::from(now % (1u64 << self.host_bits))
        } else {
            u128::from(now)
        };
        let last = if self.host_bits >= 128 {
            u128::MAX
        } else {
            self.base | ((1u128 << self.host_bits) - 1)
        };
        let mut n = self.base.saturating_add(offset);
        // The pool holds fewer names than addresses, so a free one is found.
        loop {
            let ip = self.addr(n);
            if !lru.by_ip.contains_key(&ip) {
                lru.put(name, ip);
                return ip;
            }
            n = if n >= last { self.base } else { n + 1 };
        }
    }

    fn name_of(&self, ip: IpAddr) -> Option<String> {
        if !self.contains(ip) {
            return None;
        }
        self.lru
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .name_of(ip)
    }
}

fn num(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

/// The fake pools of a config.
#[derive(Debug)]
pub struct FakeDns {
    pools: Vec<Pool>,
}

impl FakeDns {
    /// Reads the top-level `fakedns` value: one pool object or an array of them.
    pub fn parse(v: &Value, path: &str, diag: &crate::config::Diagnostics) -> Result<FakeDns> {
        let items: Vec<(String, &Value)> = match v {
            Value::Array(a) => a
                .iter()
                .enumerate()
                .map(|(i, x)| (format!("{path}[{i}]"), x))
                .collect(),
            Value::Object(_) => vec![(path.to_string(), v)],
            _ => {
                return Err(ConfigError::new(
                    path,
                    format!(
                        "expected a pool object or an array of them, found {}",
                        reader::show(v)
                    ),
                ))
            }
        };
        let mut pools = Vec::new();
        for (p, x) in items {
            let o = Obj::new(x, p.clone(), diag)?;
            let cidr = o.req_str("ipPool")?;
            let size = o.u64("poolSize")?.unwrap_or(0);
            pools.push(Pool::new(&cidr, size, &o.key_path("ipPool"))?);
            o.finish();
        }
        if pools.is_empty() {
            return Err(ConfigError::new(path, "no pool given"));
        }
        Ok(FakeDns { pools })
    }

    /// Xray's pools for a `fakedns` server without a `fakedns` object.
    pub fn default_for(f: Families) -> FakeDns {
        const V4: &str = "198.18.0.0/15";
        const V6: &str = "fc00::/18";
        let pools = match (f.v4, f.v6) {
            (true, false) => vec![Pool::new(V4, 65535, "fakedns")],
            (false, true) => vec![Pool::new(V6, 65535, "fakedns")],
            _ => vec![
                Pool::new(V4, 32768, "fakedns"),
                Pool::new(V6, 32768, "fakedns"),
            ],
        };
        FakeDns {
            pools: pools.into_iter().filter_map(|p| p.ok()).collect(),
        }
    }

    /// The fake addresses of `name` for the families asked (each pool answers its own).
    pub fn ips_for(&self, name: &str, want: Families) -> Vec<IpAddr> {
        self.pools
            .iter()
            .filter(|p| if p.v6 { want.v6 } else { want.v4 })
            .map(|p| p.ip_for(name))
            .collect()
    }

    /// The name `ip` was given to, while the pool still holds it.
    pub fn name_of(&self, ip: IpAddr) -> Option<String> {
        self.pools.iter().find_map(|p| p.name_of(ip))
    }

    /// Whether `ip` is in one of the pools.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.pools.iter().any(|p| p.contains(ip))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn names_get_addresses_in_the_pool_and_back() {
        let f = FakeDns {
            pools: vec![
                Pool::new("198.18.0.0/15", 3, "p").unwrap(),
                Pool::new("fc00::/18", 3, "p").unwrap(),
            ],
        };
        let a = f.ips_for("a.example", Families::BOTH);
        assert_eq!(a.len(), 2);
        assert!(a[0].is_ipv4() && a[1].is_ipv6(), "{a:?}");
        assert!(f.contains(a[0]) && f.contains(a[1]));
        assert!(f.contains(ip("198.19.255.255")) && !f.contains(ip("198.20.0.0")));
        assert!(!f.contains(ip("1.2.3.4")) && !f.contains(ip("fd00::1")));
        // The same name keeps its addresses; another name gets others.
        assert_eq!(f.ips_for("a.example", Families::BOTH), a);
        let b = f.ips_for(
            "b.example",
            Families {
                v4: true,
                v6: false,
            },
        );
        assert_eq!(b.len(), 1);
        assert_ne!(b[0], a[0]);
        assert_eq!(f.name_of(a[0]).as_deref(), Some("a.example"));
        assert_eq!(f.name_of(a[1]).as_deref(), Some("a.example"));
        assert_eq!(f.name_of(b[0]).as_deref(), Some("b.example"));
        assert_eq!(f.name_of(ip("1.2.3.4")), None);
        // Three names fit; a fourth pushes out the least recently used (b: a was just read).
        let _ = f.name_of(a[0]);
        f.ips_for("c.example", Families::BOTH);
        f.ips_for("d.example", Families::BOTH);
        assert_eq!(f.name_of(b[0]), None);
        assert!(f.contains(b[0]), "still a pool address, its name gone");
        assert_eq!(f.name_of(a[0]).as_deref(), Some("a.example"));
    }

    #[test]
    fn a_small_pool_wraps_and_never_hands_out_a_held_address() {
        // 4 addresses, 3 names: every name gets its own, whatever the clock says.
        let p = Pool::new("10.0.0.0/30", 3, "p").unwrap();
        let mut seen = std::collections::HashSet::new();
        for n in ["a", "b", "c"] {
            let a = p.ip_for(n);
            assert!(p.contains(a), "{a}");
            assert!(seen.insert(a), "{a} twice");
        }
        for i in 0..50 {
            let a = p.ip_for(&format!("n{i}"));
            assert!(p.contains(a));
        }
        let held: std::collections::HashSet<IpAddr> =
            p.lru.lock().unwrap().by_ip.keys().copied().collect();
        assert_eq!(held.len(), 3);
    }

    #[test]
    fn bad_pools_are_config_errors() {
        for (cidr, size, what) in [
            ("198.18.0.0", 10, "not a CIDR"),
            ("198.18.0.0/33", 10, "not a CIDR"),
            ("10.0.0.0/30", 4, "bigger than"),
            ("10.0.0.0/24", 0, "above 0"),
        ] {
            let e = Pool::new(cidr, size, "fakedns.ipPool").unwrap_err();
            assert!(e.to_string().contains(what), "{cidr}: {e}");
            assert!(e.to_string().contains("fakedns.ipPool"), "{e}");
        }
        let d = crate::config::Diagnostics::default();
        let v = serde_json::json!([{"ipPool": "198.18.0.0/15", "poolSize": 10}, {"ipPool": "x/1"}]);
        let e = FakeDns::parse(&v, "fakedns", &d).unwrap_err();
        assert!(e.to_string().contains("fakedns[1].ipPool"), "{e}");
        assert_eq!(
            FakeDns::default_for(Families {
                v4: true,
                v6: false
            })
            .pools
            .len(),
            1
        );
        assert_eq!(FakeDns::default_for(Families::BOTH).pools.len(), 2);
    }
}
