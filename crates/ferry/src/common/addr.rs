//! Addresses, destinations, and the two wire encodings every protocol uses.
//!
//! * SOCKS style (`ATYP ADDR PORT`, ATYP 1 = IPv4, 3 = domain, 4 = IPv6): SOCKS5, Shadowsocks, Trojan.
//! * V2Ray style (`PORT ATYP ADDR`, ATYP 1 = IPv4, 2 = domain, 3 = IPv6): VMess, VLESS.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use bytes::{BufMut, BytesMut};

/// Parses `IP/len` (or a bare `IP`: the whole address); `None` for a bad address or a prefix
/// longer than the family's.
pub fn parse_prefix(s: &str) -> Option<(IpAddr, u8)> {
    let (ip, bits) = match s.split_once('/') {
        Some((ip, b)) => (ip.parse::<IpAddr>().ok()?, b.parse::<u8>().ok()?),
        None => {
            let ip = s.parse::<IpAddr>().ok()?;
            (ip, if ip.is_ipv4() { 32 } else { 128 })
        }
    };
    let max = if ip.is_ipv4() { 32 } else { 128 };
    (bits <= max).then_some((ip, bits))
}

/// A host: an IP address or a domain name (not resolved yet).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Address {
    Ip(IpAddr),
    Domain(String),
}

impl Address {
    /// Parses an IP literal (IPv6 with or without brackets) or keeps the text as a domain.
    pub fn parse(s: &str) -> Address {
        let t = s.trim_start_matches('[').trim_end_matches(']');
        match t.parse::<IpAddr>() {
            Ok(ip) => Address::Ip(ip),
            Err(_) => Address::Domain(s.to_string()),
        }
    }

    pub fn ip(&self) -> Option<IpAddr> {
        match self {
            Address::Ip(ip) => Some(*ip),
            Address::Domain(_) => None,
        }
    }

    pub fn domain(&self) -> Option<&str> {
        match self {
            Address::Domain(d) => Some(d),
            Address::Ip(_) => None,
        }
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
            Address::Ip(ip) => write!(f, "{ip}"),
            Address::Domain(d) => f.write_str(d),
        }
    }
}

/// Transport network of a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Network {
    Tcp,
    Udp,
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Network::Tcp => "tcp",
            Network::Udp => "udp",
        })
    }
}

/// Where a session goes: host and port.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Destination {
    pub addr: Address,
    pub port: u16,
}

impl Destination {
    pub fn new(addr: Address, port: u16) -> Self {
        Destination { addr, port }
    }

    /// The socket address when the host is an IP literal.
    pub fn socket_addr(&self) -> Option<SocketAddr> {
        self.addr.ip().map(|ip| SocketAddr::new(ip, self.port))
    }

    /// Parses `host:port` (`[v6]:port` for IPv6).
    pub fn parse(s: &str) -> Option<Destination> {
        if let Ok(sa) = s.parse::<SocketAddr>() {
            return Some(sa.into());
        }
        let (host, port) = s.rsplit_once(':')?;
        if host.is_empty() || host.contains(':') {
            return None;
        }
        Some(Destination::new(Address::parse(host), port.parse().ok()?))
    }
}

impl From<SocketAddr> for Destination {
    fn from(sa: SocketAddr) -> Self {
        Destination::new(Address::Ip(sa.ip()), sa.port())
    }
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.addr, self.port)
    }
}

/// Why an encoded address could not be decoded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AddrError {
    #[error("unknown address type {0}")]
    BadType(u8),
    #[error("empty or non-UTF-8 domain name")]
    BadDomain,
}

/// Decoding result: `Ok(None)` means more bytes are needed.
pub type Decoded = Result<Option<(Destination, usize)>, AddrError>;

fn domain_from(bytes: &[u8]) -> Result<Address, AddrError> {
    if bytes.is_empty() {
        return Err(AddrError::BadDomain);
    }
    let s = std::str::from_utf8(bytes).map_err(|_| AddrError::BadDomain)?;
    // A domain that is an IP literal is treated as that IP, as Xray does.
    Ok(Address::parse(s))
}

/// SOCKS-style codec: `ATYP(1) ADDR PORT(2, big endian)`.
pub mod socks {
    use super::*;

    /// Bytes `encode` will write for this destination.
    pub fn encoded_len(dest: &Destination) -> usize {
        match &dest.addr {
            Address::Ip(IpAddr::V4(_)) => 1 + 4 + 2,
            Address::Ip(IpAddr::V6(_)) => 1 + 16 + 2,
            Address::Domain(d) => 1 + 1 + d.len().min(255) + 2,
        }
    }

    pub fn encode(dest: &Destination, out: &mut impl BufMut) {
        match &dest.addr {
            Address::Ip(IpAddr::V4(ip)) => {
                out.put_u8(1);
                out.put_slice(&ip.octets());
            }
            Address::Ip(IpAddr::V6(ip)) => {
                out.put_u8(4);
                out.put_slice(&ip.octets());
            }
            Address::Domain(d) => {
                // Longer names never get here: the dispatcher refuses them (`Dispatcher::pick`).
                let b = &d.as_bytes()[..d.len().min(255)];
                out.put_u8(3);
                out.put_u8(b.len() as u8);
                out.put_slice(b);
            }
        }
        out.put_u16(dest.port);
    }

    pub fn to_bytes(dest: &Destination) -> BytesMut {
        let mut b = BytesMut::with_capacity(encoded_len(dest));
        encode(dest, &mut b);
        b
    }

    pub fn decode(buf: &[u8]) -> Decoded {
        let Some(&atyp) = buf.first() else {
            return Ok(None);
        };
        let (addr, len) = match atyp {
            1 => {
                if buf.len() < 7 {
                    return Ok(None);
                }
                let o: [u8; 4] = crate::common::array(&buf[1..5]);
                (Address::Ip(IpAddr::V4(Ipv4Addr::from(o))), 5)
            }
            4 => {
                if buf.len() < 19 {
                    return Ok(None);
                }
                let o: [u8; 16] = crate::common::array(&buf[1..17]);
                (Address::Ip(IpAddr::V6(Ipv6Addr::from(o))), 17)
            }
            3 => {
                let Some(&n) = buf.get(1) else {
                    return Ok(None);
                };
                let n = n as usize;
                if buf.len() < 2 + n + 2 {
                    return Ok(None);
                }
                (domain_from(&buf[2..2 + n])?, 2 + n)
            }
            t => return Err(AddrError::BadType(t)),
        };
        let port = u16::from_be_bytes([buf[len], buf[len + 1]]);
        Ok(Some((Destination::new(addr, port), len + 2)))
    }
}

/// V2Ray-style codec: `PORT(2, big endian) ATYP(1) ADDR`, ATYP 1 = IPv4, 2 = domain, 3 = IPv6.
pub mod v2ray {
    use super::*;

    pub fn encoded_len(dest: &Destination) -> usize {
        socks::encoded_len(dest)
    }

    pub fn encode(dest: &Destination, out: &mut impl BufMut) {
        out.put_u16(dest.port);
        match &dest.addr {
            Address::Ip(IpAddr::V4(ip)) => {
                out.put_u8(1);
                out.put_slice(&ip.octets());
            }
            Address::Ip(IpAddr::V6(ip)) => {
                out.put_u8(3);
                out.put_slice(&ip.octets());
            }
            Address::Domain(d) => {
                // Longer names never get here: the dispatcher refuses them (`Dispatcher::pick`).
                let b = &d.as_bytes()[..d.len().min(255)];
                out.put_u8(2);
                out.put_u8(b.len() as u8);
                out.put_slice(b);
            }
        }
    }

    pub fn decode(buf: &[u8]) -> Decoded {
        if buf.len() < 3 {
            return Ok(None);
        }
        let port = u16::from_be_bytes([buf[0], buf[1]]);
        let (addr, len) = match buf[2] {
            1 => {
                if buf.len() < 7 {
                    return Ok(None);
                }
                let o: [u8; 4] = crate::common::array(&buf[3..7]);
                (Address::Ip(IpAddr::V4(Ipv4Addr::from(o))), 7)
            }
            3 => {
                if buf.len() < 19 {
                    return Ok(None);
                }
                let o: [u8; 16] = crate::common::array(&buf[3..19]);
                (Address::Ip(IpAddr::V6(Ipv6Addr::from(o))), 19)
            }
            2 => {
                let Some(&n) = buf.get(3) else {
                    return Ok(None);
                };
                let n = n as usize;
                if buf.len() < 4 + n {
                    return Ok(None);
                }
                (domain_from(&buf[4..4 + n])?, 4 + n)
            }
            t => return Err(AddrError::BadType(t)),
        };
        Ok(Some((Destination::new(addr, port), len)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Destination {
        Destination::parse(s).unwrap()
    }

    #[test]
    fn socks_round_trip_and_partial() {
        for s in ["1.2.3.4:80", "[2001:db8::1]:443", "example.com:8080"] {
            let dest = d(s);
            let b = socks::to_bytes(&dest);
            assert_eq!(b.len(), socks::encoded_len(&dest));
            assert_eq!(socks::decode(&b).unwrap(), Some((dest.clone(), b.len())));
            for cut in 0..b.len() {
                assert_eq!(socks::decode(&b[..cut]).unwrap(), None, "{s} cut {cut}");
            }
        }
        assert_eq!(socks::decode(&[9, 0, 0]), Err(AddrError::BadType(9)));
        assert_eq!(socks::decode(&[3, 0, 0, 80]), Err(AddrError::BadDomain));
    }

    #[test]
    fn v2ray_layout_matches_xray_vectors() {
        // Xray common/protocol/address_test.go: port first, then type 1/2/3.
        let mut b = BytesMut::new();
        v2ray::encode(&d("1.2.3.4:80"), &mut b);
        assert_eq!(&b[..], &[0, 80, 1, 1, 2, 3, 4]);
        let mut b = BytesMut::new();
        v2ray::encode(&d("v2ray.com:80"), &mut b);
        assert_eq!(&b[..4], &[0, 80, 2, 9]);
        assert_eq!(v2ray::decode(&b).unwrap().unwrap().0, d("v2ray.com:80"));
        let v6 = [
            0u8, 80, 3, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
        ];
        let (dest, n) = v2ray::decode(&v6).unwrap().unwrap();
        assert_eq!(n, 19);
        assert_eq!(dest.port, 80);
        assert_eq!(v2ray::decode(&[0, 80, 5]), Err(AddrError::BadType(5)));
        assert_eq!(v2ray::decode(&[0, 80, 2, 5, b'a']).unwrap(), None);
    }

    #[test]
    fn parse_and_display() {
        assert_eq!(d("[::1]:53").to_string(), "[::1]:53");
        assert_eq!(d("a.b:1").addr, Address::Domain("a.b".into()));
        assert!(Destination::parse("nope").is_none());
        assert!(Destination::parse("a:b:c").is_none());
    }
}
