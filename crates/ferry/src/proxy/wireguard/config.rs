//! Xray's WireGuard `settings` (the same object for the inbound and the outbound), read with
//! Xray v26.3.27's spellings, defaults and refusals.

use std::net::IpAddr;

use base64::Engine;

use crate::config::reader::{ConfigError, Obj, Result};

/// Which families a domain target inside the tunnel resolves to, in order (`ForceIP...`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    ForceIp,
    ForceIpv4,
    ForceIpv6,
    ForceIpv4v6,
    ForceIpv6v4,
}

impl Strategy {
    /// (query A, query AAAA, prefer IPv6)
    pub fn families(self) -> (bool, bool, bool) {
        match self {
            Strategy::ForceIp => (true, true, false),
            Strategy::ForceIpv4 => (true, false, false),
            Strategy::ForceIpv6 => (false, true, true),
            Strategy::ForceIpv4v6 => (true, true, false),
            Strategy::ForceIpv6v4 => (true, true, true),
        }
    }
}

/// An IP prefix (`allowedIPs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prefix {
    pub addr: IpAddr,
    pub len: u8,
}

impl Prefix {
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(a), IpAddr::V4(b)) => {
                let m = u32::MAX.checked_shl(32 - u32::from(self.len)).unwrap_or(0);
                u32::from(a) & m == u32::from(b) & m
            }
            (IpAddr::V6(a), IpAddr::V6(b)) => {
                let m = u128::MAX
                    .checked_shl(128 - u32::from(self.len))
                    .unwrap_or(0);
                u128::from(a) & m == u128::from(b) & m
            }
            _ => false,
        }
    }
}

#[derive(Clone, Debug)]
pub struct PeerSettings {
    pub public_key: [u8; 32],
    pub preshared_key: Option<[u8; 32]>,
    /// `host:port` as written (resolved when the device starts).
    pub endpoint: Option<String>,
    pub keep_alive: u16,
    pub allowed: Vec<Prefix>,
    /// The peer as a user (later Xray: `email`, `level`).
    pub email: String,
    pub level: u32,
}

#[derive(Clone, Debug)]
pub struct Settings {
    pub secret_key: [u8; 32],
    pub address: Vec<IpAddr>,
    pub peers: Vec<PeerSettings>,
    pub mtu: usize,
    pub reserved: Option<[u8; 3]>,
    pub strategy: Strategy,
}

/// Xray's `ParseWireGuardKey`: 64 hex digits, else base64 (standard when it has `+` or `/`,
/// URL-safe otherwise; `=` padding optional). A key must be 32 bytes.
pub fn parse_key(s: &str) -> std::result::Result<[u8; 32], String> {
    let bytes = if s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()) {
        (0..32)
            .map(|i| u8::from_str_radix(&s[i * 2..i * 2 + 2], 16).map_err(|e| e.to_string()))
            .collect::<std::result::Result<Vec<u8>, String>>()?
    } else {
        let t = s.trim_end_matches('=');
        let engine = if t.contains(['+', '/']) {
            &base64::engine::general_purpose::STANDARD_NO_PAD
        } else {
            &base64::engine::general_purpose::URL_SAFE_NO_PAD
        };
        engine.decode(t).map_err(|e| e.to_string())?
    };
    if s.is_empty() {
        return Err("key must not be empty".into());
    }
    bytes
        .try_into()
        .map_err(|b: Vec<u8>| format!("a key is 32 bytes, this one {}", b.len()))
}

fn key_at(o: &Obj<'_>, key: &str) -> Result<Option<[u8; 32]>> {
    match o.str(key)? {
        None => Ok(None),
        Some(s) if s.is_empty() => Ok(None),
        Some(s) => parse_key(&s)
            .map(Some)
            .map_err(|e| ConfigError::new(o.key_path(key), format!("invalid WireGuard key: {e}"))),
    }
}

fn parse_ip(s: &str) -> Option<IpAddr> {
    s.trim_matches(['[', ']']).parse().ok()
}

/// `address`: IPs, or prefixes of the full length (/32, /128).
fn parse_address(o: &Obj<'_>) -> Result<Vec<IpAddr>> {
    let Some(list) = o.str_list("address")? else {
        return Ok(vec![
            IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1)),
            IpAddr::V6(std::net::Ipv6Addr::new(
                0xfd59, 0x7153, 0x2388, 0xb5fd, 0, 0, 0, 1,
            )),
        ]);
    };
    let mut out = Vec::new();
    for (i, a) in list.iter().enumerate() {
        let path = format!("{}[{i}]", o.key_path("address"));
        let (ip, len) = match a.split_once('/') {
            Some((ip, len)) => (ip, Some(len)),
            None => (a.as_str(), None),
        };
        let ip = parse_ip(ip)
            .ok_or_else(|| ConfigError::new(&path, format!("unable to parse IP {a:?}")))?;
        if let Some(len) = len {
            let full = if ip.is_ipv4() { "32" } else { "128" };
            if len != full {
                return Err(ConfigError::new(
                    &path,
                    "interface address subnet should be /32 for IPv4 and /128 for IPv6",
                ));
            }
        }
        out.push(ip);
    }
    Ok(out)
}

fn parse_prefix(s: &str) -> Option<Prefix> {
    let (ip, len) = s.split_once('/')?;
    let addr = parse_ip(ip)?;
    let len: u8 = len.parse().ok()?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    (len <= max).then_some(Prefix { addr, len })
}

fn parse_peer(p: &Obj<'_>) -> Result<Option<PeerSettings>> {
    p.ignore(&["privateKey"]);
    let Some(public_key) = key_at(p, "publicKey")? else {
        // As Xray: a peer without a public key is not configured at all.
        return Ok(None);
    };
    let preshared_key = key_at(p, "preSharedKey")?;
    let endpoint = p.str("endpoint")?.filter(|e| !e.is_empty());
    let keep_alive = match p.i64("keepAlive")? {
        None => 0,
        Some(k) if (0..=i64::from(u16::MAX)).contains(&k) => k as u16,
        Some(_) => {
            return Err(ConfigError::new(
                p.key_path("keepAlive"),
                "must be 0..65535 seconds",
            ))
        }
    };
    let allowed = match p.str_list("allowedIPs")? {
        None => vec![
            Prefix {
                addr: IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
                len: 0,
            },
            Prefix {
                addr: IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
                len: 0,
            },
        ],
        Some(list) => {
            let mut out = Vec::new();
            for (i, a) in list.iter().enumerate() {
                out.push(parse_prefix(a).ok_or_else(|| {
                    ConfigError::new(
                        format!("{}[{i}]", p.key_path("allowedIPs")),
                        format!("{a:?} is not a prefix (an address and /length)"),
                    )
                })?);
            }
            out
        }
    };
    let email = p.str("email")?.unwrap_or_default();
    let level = p.u64("level")?.unwrap_or(0) as u32;
    Ok(Some(PeerSettings {
        public_key,
        preshared_key,
        endpoint,
        keep_alive,
        allowed,
        email,
        level,
    }))
}

fn parse_reserved(o: &Obj<'_>) -> Result<Option<[u8; 3]>> {
    let Some((path, v)) = o.get("reserved") else {
        return Ok(None);
    };
    let bytes: Vec<u8> = match v {
        serde_json::Value::Null => return Ok(None),
        serde_json::Value::String(s) => base64::engine::general_purpose::STANDARD
            .decode(s)
            .map_err(|e| ConfigError::new(&path, format!("not base64: {e}")))?,
        serde_json::Value::Array(a) => a
            .iter()
            .map(|b| b.as_u64().and_then(|b| u8::try_from(b).ok()))
            .collect::<Option<Vec<u8>>>()
            .ok_or_else(|| ConfigError::new(&path, "bytes are numbers 0..255"))?,
        _ => return Err(ConfigError::new(&path, "a byte array or a base64 string")),
    };
    match bytes.len() {
        0 => Ok(None),
        3 => Ok(Some([bytes[0], bytes[1], bytes[2]])),
        _ => Err(ConfigError::new(
            &path,
            "\"reserved\" should be empty or 3 bytes",
        )),
    }
}

fn parse_strategy(o: &Obj<'_>) -> Result<Strategy> {
    let Some(s) = o.str("domainStrategy")? else {
        return Ok(Strategy::ForceIp);
    };
    Ok(match s.to_ascii_lowercase().as_str() {
        "" | "forceip" => Strategy::ForceIp,
        "forceipv4" => Strategy::ForceIpv4,
        "forceipv6" => Strategy::ForceIpv6,
        "forceipv4v6" => Strategy::ForceIpv4v6,
        "forceipv6v4" => Strategy::ForceIpv6v4,
        _ => {
            return Err(ConfigError::new(
                o.key_path("domainStrategy"),
                format!("unsupported domain strategy {s:?}"),
            ))
        }
    })
}

/// Reads `settings`.
pub fn parse(o: &Obj<'_>) -> Result<Settings> {
    // `workers` (receive goroutines in Xray), `noKernelTun` and the older `kernelMode`: Ferry
    // always runs its own stack, in as many tasks as it needs.
    o.ignore(&["workers", "noKernelTun", "kernelMode", "isClient"]);
    if let Some(w) = o.get("workers") {
        if !w.1.is_number() {
            return Err(ConfigError::new(w.0, "must be a number"));
        }
    }
    let secret_key = key_at(o, "secretKey")?.ok_or_else(|| {
        ConfigError::new(
            o.key_path("secretKey"),
            "invalid WireGuard secret key: key must not be empty",
        )
    })?;
    let address = parse_address(o)?;
    let mut peers = Vec::new();
    for p in o.objs(&["peers"])? {
        if let Some(peer) = parse_peer(&p)? {
            peers.push(peer);
        }
        p.finish();
    }
    if let Some((path, v)) = o.get("mtu") {
        if !v.is_number() && !v.is_null() {
            return Err(ConfigError::new(
                path,
                "must be a number (Xray reads int32)",
            ));
        }
    }
    let mtu = match o.i64("mtu")? {
        None | Some(0) => 1420,
        Some(m) if (576..=65535).contains(&m) => m as usize,
        Some(_) => return Err(ConfigError::new(o.key_path("mtu"), "must be 576..65535")),
    };
    Ok(Settings {
        secret_key,
        address,
        peers,
        mtu,
        reserved: parse_reserved(o)?,
        strategy: parse_strategy(o)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Diagnostics;

    fn read(v: serde_json::Value) -> Result<Settings> {
        let d = Diagnostics::default();
        let o = Obj::new(&v, "outbounds[0].settings", &d)?;
        parse(&o)
    }

    #[test]
    fn keys_in_every_spelling_xray_reads() {
        let b64 = "UG+dU5EFwwVt6jsZ3f4AT06YDBWDqfBYqTjfk/jn+WE=";
        let k = parse_key(b64).unwrap();
        let hex: String = k.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(parse_key(&hex).unwrap(), k);
        assert_eq!(parse_key(b64.trim_end_matches('=')).unwrap(), k);
        let url = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(k);
        assert_eq!(parse_key(&url).unwrap(), k);
        assert!(parse_key("abc").is_err());
        assert!(parse_key("").is_err());
    }

    #[test]
    fn the_warp_shape_and_xrays_defaults() {
        let s = read(serde_json::json!({
            "secretKey": "cITpcmD49xrzKowCX7a984l4DsWXLz6n1jN7EhkYekk=",
            "address": ["172.16.0.2/32", "2606:4700:110:8a36::1/128"],
            "reserved": "AQID",
            "mtu": 1280, "workers": 2, "kernelMode": false, "NOKERNELTUN": true,
            "peers": [{"publicKey": "bmXOC+F1FxEMF9dyiK2H5/1SUtzH0JuVo51h2wPfgyo=",
                       "allowedIPs": ["0.0.0.0/0", "::/0"],
                       "endpoint": "engage.cloudflareclient.com:2408"}]
        }))
        .unwrap();
        assert_eq!(s.reserved, Some([1, 2, 3]));
        assert_eq!(s.mtu, 1280);
        assert_eq!(s.address.len(), 2);
        assert_eq!(s.strategy, Strategy::ForceIp);
        assert_eq!(s.peers[0].allowed.len(), 2);
        let d = read(serde_json::json!({"secretKey": "cITpcmD49xrzKowCX7a984l4DsWXLz6n1jN7EhkYekk=",
            "peers": [{"publicKey": "bmXOC+F1FxEMF9dyiK2H5/1SUtzH0JuVo51h2wPfgyo="}, {"endpoint": "x:1"}]}))
        .unwrap();
        assert_eq!(d.mtu, 1420);
        assert_eq!(d.address[0].to_string(), "10.0.0.1");
        assert_eq!(d.peers.len(), 1, "a peer without a public key is left out");
        assert_eq!(d.peers[0].allowed[1].addr.to_string(), "::");
        assert_eq!(
            read(serde_json::json!({"secretKey": "cITpcmD49xrzKowCX7a984l4DsWXLz6n1jN7EhkYekk=", "reserved": [78, 135, 76], "domainStrategy": "forceipv4v6"})).unwrap().strategy,
            Strategy::ForceIpv4v6
        );
    }

    #[test]
    fn what_xray_refuses_names_its_path() {
        let key = "cITpcmD49xrzKowCX7a984l4DsWXLz6n1jN7EhkYekk=";
        for (v, path) in [
            (serde_json::json!({}), "outbounds[0].settings.secretKey"),
            (
                serde_json::json!({"secretKey": key, "reserved": [1, 2]}),
                "outbounds[0].settings.reserved",
            ),
            (
                serde_json::json!({"secretKey": key, "reserved": [1, 2, 256]}),
                "outbounds[0].settings.reserved",
            ),
            (
                serde_json::json!({"secretKey": key, "domainStrategy": "AsIs"}),
                "outbounds[0].settings.domainStrategy",
            ),
            (
                serde_json::json!({"secretKey": key, "address": ["10.66.0.2/24"]}),
                "outbounds[0].settings.address[0]",
            ),
            (
                serde_json::json!({"secretKey": key, "address": ["hello"]}),
                "outbounds[0].settings.address[0]",
            ),
            (
                serde_json::json!({"secretKey": key, "mtu": "1280"}),
                "outbounds[0].settings.mtu",
            ),
            (
                serde_json::json!({"secretKey": key, "peers": [{"publicKey": key, "keepAlive": -1}]}),
                "outbounds[0].settings.peers[0].keepAlive",
            ),
            (
                serde_json::json!({"secretKey": key, "peers": [{"publicKey": key, "allowedIPs": ["10.66.0.2"]}]}),
                "outbounds[0].settings.peers[0].allowedIPs[0]",
            ),
            (
                serde_json::json!({"secretKey": key, "peers": [{"publicKey": "abc"}]}),
                "outbounds[0].settings.peers[0].publicKey",
            ),
        ] {
            let e = read(v.clone())
                .err()
                .unwrap_or_else(|| panic!("accepted {v}"));
            assert_eq!(e.path, path, "{v}: {e}");
        }
    }

    #[test]
    fn prefixes_match_their_addresses() {
        let p = parse_prefix("10.66.0.0/24").unwrap();
        assert!(p.contains("10.66.0.9".parse().unwrap()));
        assert!(!p.contains("10.66.1.9".parse().unwrap()));
        assert!(!p.contains("fd66::1".parse().unwrap()));
        assert!(parse_prefix("::/0")
            .unwrap()
            .contains("2001:db8::1".parse().unwrap()));
        assert!(parse_prefix("0.0.0.0/0")
            .unwrap()
            .contains("1.2.3.4".parse().unwrap()));
        assert!(parse_prefix("10.0.0.0/33").is_none());
    }
}
