//! IP matchers: IPs, CIDRs and geoip tags as sorted, merged ranges searched by bisection, with
//! Xray's negation: positive CIDRs, negated CIDRs, positive tags and negated tags are four
//! unions, OR-ed; the negated tags match every address outside their union (of both families,
//! as Xray v26.3.27), the negated CIDRs (which Xray refuses) the addresses of their families
//! outside theirs.

use std::net::IpAddr;
use std::sync::Arc;

use super::geodata::{self, wire::Cidr, Assets};
use super::ranges::{in_ranges, merge};
use crate::config::reader::{ConfigError, Result};

/// Sorted, merged address ranges of both families. IPv6 ranges that start and end on /64
/// boundaries (nearly all of a geoip list: providers get /32 to /48) are kept by their upper 64
/// bits, 16 bytes a range instead of 32; the rest by full addresses.
#[derive(Debug, Clone, Default)]
pub struct IpRanges {
    v4: Vec<(u32, u32)>,
    /// Ranges of /64 prefixes: `(a, b)` holds every address whose upper 64 bits are in `a..=b`.
    v6_64: Vec<(u64, u64)>,
    v6: Vec<(u128, u128)>,
}

/// Maps `::ffff:a.b.c.d` to `a.b.c.d` so IPv4 rules see it.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    }
}

fn v4_range(a: u32, len: u8) -> (u32, u32) {
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    (a & mask, (a & mask) | !mask)
}

fn v6_range(a: u128, len: u8) -> (u128, u128) {
    let mask = if len == 0 {
        0
    } else {
        u128::MAX << (128 - len)
    };
    (a & mask, (a & mask) | !mask)
}

impl IpRanges {
    /// From CIDRs (IPv4-mapped IPv6 prefixes count as IPv4, as Xray's parser makes them).
    pub fn from_cidrs(cidrs: &[Cidr]) -> IpRanges {
        let (mut v4, mut v6) = (Vec::new(), Vec::new());
        for c in cidrs {
            match *c {
                Cidr::V4(a, l) => v4.push(v4_range(a, l.min(32))),
                Cidr::V6(a, l) => {
                    let ip = std::net::Ipv6Addr::from(a);
                    match ip.to_ipv4_mapped() {
                        Some(m) if l >= 96 => v4.push(v4_range(u32::from(m), l - 96)),
                        _ => v6.push(v6_range(a, l.min(128))),
                    }
                }
            }
        }
        let (mut v6_64, mut rest) = (Vec::new(), Vec::new());
        for (a, b) in merge(v6, |x: u128| x.checked_add(1)) {
            if a as u64 == 0 && b as u64 == u64::MAX {
                v6_64.push(((a >> 64) as u64, (b >> 64) as u64));
            } else {
                rest.push((a, b));
            }
        }
        let mut r = IpRanges {
            v4: merge(v4, |x: u32| x.checked_add(1)),
            v6_64,
            v6: rest,
        };
        r.v4.shrink_to_fit();
        r.v6_64.shrink_to_fit();
        r.v6.shrink_to_fit();
        r
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        match canonical(ip) {
            IpAddr::V4(a) => in_ranges(&self.v4, u32::from(a)),
            IpAddr::V6(a) => {
                let a = u128::from(a);
                in_ranges(&self.v6_64, (a >> 64) as u64) || in_ranges(&self.v6, a)
            }
        }
    }

    /// Whether it holds any range of `ip`'s family.
    pub fn has_family_of(&self, ip: IpAddr) -> bool {
        match canonical(ip) {
            IpAddr::V4(_) => !self.v4.is_empty(),
            IpAddr::V6(_) => !self.v6_64.is_empty() || !self.v6.is_empty(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.v4.is_empty() && self.v6_64.is_empty() && self.v6.is_empty()
    }

    /// Number of merged ranges.
    pub fn len(&self) -> usize {
        self.v4.len() + self.v6_64.len() + self.v6.len()
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.v4.capacity() * 8 + self.v6_64.capacity() * 16 + self.v6.capacity() * 32
    }
}

/// A rule's IP list.
#[derive(Debug, Clone, Default)]
pub struct IpSet {
    pos: IpRanges,
    neg: Option<IpRanges>,
    geo: Vec<Arc<IpRanges>>,
    geo_not: Vec<Arc<IpRanges>>,
}

/// Parses `IP` or `IP/len` (Xray's `parseCIDR`).
fn parse_cidr(s: &str) -> Option<Cidr> {
    let (ip, len) = match s.split_once('/') {
        Some((ip, len)) => (ip.parse::<IpAddr>().ok()?, Some(len.parse::<u8>().ok()?)),
        None => (s.parse::<IpAddr>().ok()?, None),
    };
    match canonical(ip) {
        IpAddr::V4(a) => {
            let len = match (ip, len) {
                // A v4-mapped CIDR counts its prefix in IPv6 bits.
                (IpAddr::V6(_), Some(l)) => l.checked_sub(96)?,
                (_, l) => l.unwrap_or(32),
            };
            (len <= 32).then_some(Cidr::V4(u32::from(a), len))
        }
        IpAddr::V6(a) => {
            let len = len.unwrap_or(128);
            (len <= 128).then_some(Cidr::V6(u128::from(a), len))
        }
    }
}

impl IpSet {
    /// Reads `IP`, `IP/len`, `geoip:TAG`, `ext:FILE:TAG`, `ext-ip:FILE:TAG`, each optionally
    /// negated with `!` (before the entry or the tag); errors name the entry.
    pub fn parse(items: &[String], path: &str) -> Result<IpSet> {
        Self::parse_with(items, path, &Assets::from_env())
    }

    /// Like [`IpSet::parse`] with the asset locations given.
    pub fn parse_with(items: &[String], path: &str, assets: &Assets) -> Result<IpSet> {
        let (mut pos, mut neg) = (Vec::new(), Vec::new());
        let mut set = IpSet::default();
        for (i, raw) in items.iter().enumerate() {
            let p = format!("{path}[{i}]");
            let (s, not) = geodata::cut_not(raw.trim());
            let lower = s.get(..7).unwrap_or(s).to_ascii_lowercase();
            let geo = if lower.starts_with("geoip:") {
                Some((geodata::GEOIP, &s[6..]))
            } else if lower.starts_with("ext-ip:") || lower.starts_with("ext:") {
                let rest = &s[s.find(':').map_or(0, |i| i + 1)..];
                Some(rest.split_once(':').ok_or_else(|| {
                    ConfigError::new(p.clone(), format!("{raw:?}: expected ext:FILE:TAG"))
                })?)
            } else {
                None
            };
            if let Some((file, code)) = geo {
                let (code, not2) = geodata::cut_not(code);
                let r = geoip(assets, file, code)
                    .map_err(|e| ConfigError::new(p.clone(), format!("{raw:?}: {e}")))?;
                if not != not2 {
                    set.geo_not.push(r);
                } else {
                    set.geo.push(r);
                }
                continue;
            }
            let c = parse_cidr(s).ok_or_else(|| {
                ConfigError::new(p.clone(), format!("{raw:?} is not an IP or CIDR"))
            })?;
            if not {
                neg.push(c);
            } else {
                pos.push(c);
            }
        }
        set.pos = IpRanges::from_cidrs(&pos);
        if !neg.is_empty() {
            set.neg = Some(IpRanges::from_cidrs(&neg));
        }
        Ok(set)
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        if self.pos.contains(ip) || self.geo.iter().any(|r| r.contains(ip)) {
            return true;
        }
        if let Some(n) = &self.neg {
            if n.has_family_of(ip) && !n.contains(ip) {
                return true;
            }
        }
        // A negated tag matches every address outside the union of the negated tags, of
        // either family: `geoip:!TAG` with a TAG of IPv4 ranges only matches every IPv6
        // address, as Xray v26.3.27 does (a `geoip:!cn -> block` rule must not let IPv6 by).
        !self.geo_not.is_empty() && !self.geo_not.iter().any(|r| r.contains(ip))
    }
}

fn ips() -> &'static geodata::Cache<IpRanges> {
    static C: std::sync::OnceLock<geodata::Cache<IpRanges>> = std::sync::OnceLock::new();
    C.get_or_init(Default::default)
}

/// Loads `CODE` of geoip file `file`.
pub fn geoip(
    assets: &Assets,
    file: &str,
    code: &str,
) -> std::result::Result<Arc<IpRanges>, geodata::GeoError> {
    if file.is_empty() {
        return Err(geodata::GeoError::Syntax("empty file".into()));
    }
    let code = code.to_ascii_uppercase();
    if code.is_empty() {
        return Err(geodata::GeoError::Syntax("empty tag".into()));
    }
    let path = assets.find(file)?;
    geodata::cached(ips(), geodata::key(&path, &code, Vec::new()), || {
        let body = geodata::read_entry(&path, &code)?;
        let cidrs =
            geodata::wire::geoip_cidrs(&body).map_err(|err| geodata::GeoError::Corrupt {
                path: path.display().to_string(),
                err,
            })?;
        Ok(IpRanges::from_cidrs(&cidrs))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_cidrs_v4_v6() {
        let v: Vec<String> = ["10.0.0.0/8", "192.168.1.7", "fc00::/7", "::1", "11.0.0.0/8"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let s = IpSet::parse(&v, "ip").unwrap();
        assert_eq!(s.pos.v4.len(), 2, "adjacent ranges merge: {:?}", s.pos.v4);
        for ok in [
            "10.255.0.1",
            "11.0.0.0",
            "192.168.1.7",
            "fd12::5",
            "::1",
            "::ffff:10.0.0.1",
        ] {
            assert!(s.contains(ok.parse().unwrap()), "{ok}");
        }
        for no in ["12.0.0.0", "9.255.255.255", "192.168.1.8", "fe80::1", "::2"] {
            assert!(!s.contains(no.parse().unwrap()), "{no}");
        }
        let all = IpSet::parse(&["0.0.0.0/0".to_string()], "ip").unwrap();
        assert!(all.contains("255.255.255.255".parse().unwrap()));
        assert!(!all.contains("::1".parse().unwrap()));
        assert!(IpSet::parse(&["1.2.3.4/33".to_string()], "ip").is_err());
        assert!(IpSet::parse(&["nope".to_string()], "ip").is_err());
    }

    /// IPv6 ranges on /64 boundaries go to the 64-bit table, others stay whole, and lookups
    /// see both, at each edge.
    #[test]
    fn v6_ranges_split_by_alignment() {
        let v: Vec<String> = [
            "2001:db8::/32",
            "2001:db9::/48",
            "2001:dba:0:1::/64",
            "2001:dbb::1/128",
            "2001:dbc::/80",
            "::/0",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let s = IpSet::parse(&v[..5], "ip").unwrap();
        // 2001:db8::/32 and 2001:db9::/48 are adjacent: one merged range.
        assert_eq!(s.pos.v6_64.len(), 2, "{:?}", s.pos.v6_64);
        assert_eq!(s.pos.v6.len(), 2, "{:?}", s.pos.v6);
        assert_eq!(s.pos.len(), 4);
        for ok in [
            "2001:db8::",
            "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff",
            "2001:db9::1",
            "2001:db9:0:ffff:ffff:ffff:ffff:ffff",
            "2001:dba:0:1::",
            "2001:dba:0:1:ffff:ffff:ffff:ffff",
            "2001:dbb::1",
            "2001:dbc::ffff:ffff:ffff",
        ] {
            assert!(s.contains(ok.parse().unwrap()), "{ok}");
        }
        for no in [
            "2001:db7:ffff:ffff:ffff:ffff:ffff:ffff",
            "2001:db9:1::",
            "2001:dba::ffff",
            "2001:dba:0:2::",
            "2001:dbb::",
            "2001:dbb::2",
            "2001:dbc:0:0:1::",
            "10.0.0.1",
        ] {
            assert!(!s.contains(no.parse().unwrap()), "{no}");
        }
        let all = IpSet::parse(&v[5..], "ip").unwrap();
        assert_eq!((all.pos.v6_64.len(), all.pos.v6.len()), (1, 0));
        assert!(all.contains("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff".parse().unwrap()));
        assert!(all.contains("::".parse().unwrap()));
        assert!(!all.contains("1.2.3.4".parse().unwrap()));
    }
}
