//! IP matchers: IPs and CIDRs as sorted, merged ranges searched by bisection.

use std::net::IpAddr;

use super::ranges::{in_ranges, merge};
use crate::config::reader::{ConfigError, Result};

/// IPs and CIDRs as sorted, merged ranges.
#[derive(Debug, Clone, Default)]
pub struct IpSet {
    v4: Vec<(u32, u32)>,
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

impl IpSet {
    /// Reads `IP` and `IP/len` entries; `geoip:`/`ext:` are an error naming the entry.
    pub fn parse(items: &[String], path: &str) -> Result<IpSet> {
        let (mut v4, mut v6) = (Vec::new(), Vec::new());
        for (i, raw) in items.iter().enumerate() {
            let p = format!("{path}[{i}]");
            let s = raw.trim();
            let lower = s.to_ascii_lowercase();
            if lower.starts_with("geoip:")
                || lower.starts_with("ext:")
                || lower.starts_with("ext-ip:")
            {
                return Err(ConfigError::new(
                    p,
                    format!("{s:?}: geosite/geoip data files are not supported yet"),
                ));
            }
            let bad = || ConfigError::new(p.clone(), format!("{s:?} is not an IP or CIDR"));
            let (ip, len) = match s.split_once('/') {
                Some((ip, len)) => (
                    ip.parse::<IpAddr>().map_err(|_| bad())?,
                    Some(len.parse::<u8>().map_err(|_| bad())?),
                ),
                None => (s.parse::<IpAddr>().map_err(|_| bad())?, None),
            };
            match canonical(ip) {
                IpAddr::V4(a) => {
                    let len = match (ip, len) {
                        // A v4-mapped CIDR counts its prefix in IPv6 bits.
                        (IpAddr::V6(_), Some(l)) => l.checked_sub(96).ok_or_else(bad)?,
                        (_, l) => l.unwrap_or(32),
                    };
                    if len > 32 {
                        return Err(bad());
                    }
                    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
                    let start = u32::from(a) & mask;
                    v4.push((start, start | !mask));
                }
                IpAddr::V6(a) => {
                    let len = len.unwrap_or(128);
                    if len > 128 {
                        return Err(bad());
                    }
                    let mask = if len == 0 {
                        0
                    } else {
                        u128::MAX << (128 - len)
                    };
                    let start = u128::from(a) & mask;
                    v6.push((start, start | !mask));
                }
            }
        }
        Ok(IpSet {
            v4: merge(v4, |x: u32| x.checked_add(1)),
            v6: merge(v6, |x: u128| x.checked_add(1)),
        })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        match canonical(ip) {
            IpAddr::V4(a) => in_ranges(&self.v4, u32::from(a)),
            IpAddr::V6(a) => in_ranges(&self.v6, u128::from(a)),
        }
    }
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
        assert_eq!(s.v4.len(), 2, "adjacent ranges merge: {:?}", s.v4);
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
}
