//! PROXY protocol v1 (text) and v2 (binary), HAProxy's header that carries the real client
//! address across a forwarding hop: parsed sans-IO ([`parse`]), written ([`encode`]), and the
//! acceptor [`Layer`] of `acceptProxyProtocol` (every connection must start with a header, as
//! Xray requires; the address in it becomes the connection's source).

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use async_trait::async_trait;
use bytes::Bytes;
use tokio::io::AsyncReadExt;

use super::{BoxStream, Layer, Prefixed};
use crate::common::Destination;
use crate::session::{ConnInfo, Endpoint};

/// The v2 signature.
pub const SIGNATURE: [u8; 12] = [
    0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A,
];
/// Longest v1 line, CRLF included.
const V1_MAX: usize = 107;
/// Longest v2 header accepted (addresses and TLVs of real senders fit easily).
pub const V2_MAX: usize = 16 + 2048;

/// What the first bytes of a connection say.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// Not enough bytes yet to decide.
    Incomplete,
    /// A whole header of `len` bytes; the addresses, when it carried any (`LOCAL`, `UNKNOWN`
    /// and non-IP families carry none).
    Header {
        len: usize,
        source: Option<SocketAddr>,
        dest: Option<SocketAddr>,
    },
    /// Not a PROXY header, or a malformed one.
    Invalid(&'static str),
}

/// Parses a PROXY v1 or v2 header at the start of `b`.
pub fn parse(b: &[u8]) -> Parsed {
    if b.is_empty() {
        return Parsed::Incomplete;
    }
    let sig = b.len().min(12);
    if b[..sig] == SIGNATURE[..sig] {
        return parse_v2(b);
    }
    let p = b.len().min(6);
    if b[..p] == b"PROXY "[..p] {
        return parse_v1(b);
    }
    Parsed::Invalid("not a PROXY protocol header")
}

fn parse_v2(b: &[u8]) -> Parsed {
    if b.len() < 16 {
        return Parsed::Incomplete;
    }
    let (ver, cmd) = (b[12] >> 4, b[12] & 0x0F);
    if ver != 2 {
        return Parsed::Invalid("PROXY v2 with a version other than 2");
    }
    let body = u16::from_be_bytes([b[14], b[15]]) as usize;
    let len = 16 + body;
    if len > V2_MAX {
        return Parsed::Invalid("PROXY v2 header too long");
    }
    if b.len() < len {
        return Parsed::Incomplete;
    }
    let a = &b[16..len];
    match cmd {
        0 => {
            return Parsed::Header {
                len,
                source: None,
                dest: None,
            }
        }
        1 => {}
        _ => return Parsed::Invalid("PROXY v2 with an unknown command"),
    }
    let (source, dest) = match b[13] >> 4 {
        0 | 3 => (None, None),
        1 => {
            if a.len() < 12 {
                return Parsed::Invalid("PROXY v2 IPv4 addresses truncated");
            }
            let ip = |o: usize| IpAddr::V4(Ipv4Addr::new(a[o], a[o + 1], a[o + 2], a[o + 3]));
            let port = |o: usize| u16::from_be_bytes([a[o], a[o + 1]]);
            (
                Some(SocketAddr::new(ip(0), port(8))),
                Some(SocketAddr::new(ip(4), port(10))),
            )
        }
        2 => {
            if a.len() < 36 {
                return Parsed::Invalid("PROXY v2 IPv6 addresses truncated");
            }
            let ip = |o: usize| {
                let mut x = [0u8; 16];
                x.copy_from_slice(&a[o..o + 16]);
                IpAddr::V6(Ipv6Addr::from(x))
            };
            let port = |o: usize| u16::from_be_bytes([a[o], a[o + 1]]);
            (
                Some(SocketAddr::new(ip(0), port(32))),
                Some(SocketAddr::new(ip(16), port(34))),
            )
        }
        _ => return Parsed::Invalid("PROXY v2 with an unknown address family"),
    };
    Parsed::Header { len, source, dest }
}

fn parse_v1(b: &[u8]) -> Parsed {
    let Some(end) = b.windows(2).take(V1_MAX - 1).position(|w| w == b"\r\n") else {
        return if b.len() >= V1_MAX {
            Parsed::Invalid("PROXY v1 line too long")
        } else {
            Parsed::Incomplete
        };
    };
    let len = end + 2;
    let Ok(line) = std::str::from_utf8(&b[..end]) else {
        return Parsed::Invalid("PROXY v1 line is not text");
    };
    let f: Vec<&str> = line.split(' ').collect();
    match f.get(1).copied() {
        Some("UNKNOWN") => Parsed::Header {
            len,
            source: None,
            dest: None,
        },
        Some(fam @ ("TCP4" | "TCP6")) => {
            if f.len() != 6 {
                return Parsed::Invalid("PROXY v1 line without four address fields");
            }
            let ip = |s: &str| s.parse::<IpAddr>().ok();
            let port = |s: &str| {
                (s == "0" || !s.starts_with('0'))
                    .then(|| s.parse::<u16>().ok())
                    .flatten()
            };
            let (Some(si), Some(di), Some(sp), Some(dp)) =
                (ip(f[2]), ip(f[3]), port(f[4]), port(f[5]))
            else {
                return Parsed::Invalid("PROXY v1 line with a bad address or port");
            };
            if si.is_ipv4() != (fam == "TCP4") || di.is_ipv4() != (fam == "TCP4") {
                return Parsed::Invalid("PROXY v1 address does not match its family");
            }
            Parsed::Header {
                len,
                source: Some(SocketAddr::new(si, sp)),
                dest: Some(SocketAddr::new(di, dp)),
            }
        }
        _ => Parsed::Invalid("PROXY v1 with an unknown protocol"),
    }
}

/// The header Xray sends for `xver` 1 or 2: the client's and the local address, or the
/// "unknown" form when either is not an IP address.
pub fn encode(version: u8, source: &Endpoint, local: &Endpoint) -> Vec<u8> {
    let pair = match (source, local) {
        (Endpoint::Ip(s), Endpoint::Ip(d)) => {
            // One family for both: a v4 client on a v6 socket is written as v6, as Go does.
            let (s, d) = match (s.ip(), d.ip()) {
                (IpAddr::V4(_), IpAddr::V4(_)) | (IpAddr::V6(_), IpAddr::V6(_)) => (*s, *d),
                _ => (v6(s), v6(d)),
            };
            Some((s, d))
        }
        _ => None,
    };
    if version == 1 {
        return match pair {
            Some((s, d)) => format!(
                "PROXY {} {} {} {} {}\r\n",
                if s.is_ipv4() { "TCP4" } else { "TCP6" },
                s.ip(),
                d.ip(),
                s.port(),
                d.port()
            )
            .into_bytes(),
            None => b"PROXY UNKNOWN\r\n".to_vec(),
        };
    }
    let mut out = SIGNATURE.to_vec();
    match pair {
        Some((s, d)) => {
            out.push(0x21);
            match (s.ip(), d.ip()) {
                (IpAddr::V4(a), IpAddr::V4(b)) => {
                    out.extend_from_slice(&[0x11, 0, 12]);
                    out.extend_from_slice(&a.octets());
                    out.extend_from_slice(&b.octets());
                }
                (a, b) => {
                    let o = |ip: IpAddr| match ip {
                        IpAddr::V6(x) => x.octets(),
                        IpAddr::V4(x) => x.to_ipv6_mapped().octets(),
                    };
                    out.extend_from_slice(&[0x21, 0, 36]);
                    out.extend_from_slice(&o(a));
                    out.extend_from_slice(&o(b));
                }
            }
            out.extend_from_slice(&s.port().to_be_bytes());
            out.extend_from_slice(&d.port().to_be_bytes());
        }
        None => out.extend_from_slice(&[0x20, 0x00, 0, 0]),
    }
    out
}

fn v6(a: &SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V4(x) => SocketAddr::new(IpAddr::V6(x.ip().to_ipv6_mapped()), x.port()),
        v6 => *v6,
    }
}

/// `acceptProxyProtocol`: reads the header every connection must start with and makes its
/// source address the connection's.
#[derive(Debug, Default)]
pub struct AcceptProxyProtocol;

#[async_trait]
impl Layer for AcceptProxyProtocol {
    async fn accept(&self, mut stream: BoxStream, info: &mut ConnInfo) -> io::Result<BoxStream> {
        let mut buf = Vec::with_capacity(256);
        loop {
            match parse(&buf) {
                Parsed::Incomplete => {}
                Parsed::Invalid(why) => {
                    return Err(io::Error::new(io::ErrorKind::InvalidData, why));
                }
                Parsed::Header { len, source, .. } => {
                    if let Some(s) = source {
                        info.source = Endpoint::Ip(s);
                    }
                    let rest = Bytes::from(buf).slice(len..);
                    return Ok(if rest.is_empty() {
                        stream
                    } else {
                        Box::new(Prefixed::new(rest, stream))
                    });
                }
            }
            if buf.len() >= V2_MAX {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "PROXY header too long",
                ));
            }
            // Read only what can still belong to a header, so a small first flight is not
            // held back waiting for more.
            let want = (V2_MAX - buf.len()).min(512);
            let start = buf.len();
            buf.resize(start + want, 0);
            let n = stream.read(&mut buf[start..]).await?;
            buf.truncate(start + n);
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed before the PROXY header was complete",
                ));
            }
        }
    }

    async fn connect(&self, stream: BoxStream, _server: &Destination) -> io::Result<BoxStream> {
        Ok(stream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_spec_examples_parse() {
        let v1 = b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\nGET /";
        assert_eq!(
            parse(v1),
            Parsed::Header {
                len: 47,
                source: Some(sa("192.168.0.1:56324")),
                dest: Some(sa("192.168.0.11:443")),
            }
        );
        let mut v2 = SIGNATURE.to_vec();
        v2.extend_from_slice(&[
            0x21, 0x11, 0x00, 0x0c, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0x0b, 0xdc, 0x04,
            0x01, 0xbb,
        ]);
        assert_eq!(
            parse(&v2),
            Parsed::Header {
                len: 28,
                source: Some(sa("192.168.0.1:56324")),
                dest: Some(sa("192.168.0.11:443")),
            }
        );
        // The writer produces exactly those bytes.
        let (s, d) = (
            Endpoint::Ip(sa("192.168.0.1:56324")),
            Endpoint::Ip(sa("192.168.0.11:443")),
        );
        assert_eq!(encode(2, &s, &d), v2);
        assert_eq!(encode(1, &s, &d), &v1[..47]);
    }

    #[test]
    fn every_prefix_of_a_header_is_incomplete_and_ipv6_and_local_work() {
        let s = Endpoint::Ip(sa("[2001:db8::1]:40000"));
        let d = Endpoint::Ip(sa("[2001:db8::2]:443"));
        for v in [1, 2] {
            let h = encode(v, &s, &d);
            for i in 0..h.len() {
                assert_eq!(parse(&h[..i]), Parsed::Incomplete, "v{v} prefix {i}");
            }
            assert_eq!(
                parse(&h),
                Parsed::Header {
                    len: h.len(),
                    source: Some(sa("[2001:db8::1]:40000")),
                    dest: Some(sa("[2001:db8::2]:443")),
                }
            );
        }
        let unix = Endpoint::Unix("/x.sock".into());
        assert_eq!(encode(1, &unix, &d), b"PROXY UNKNOWN\r\n");
        let local = encode(2, &unix, &d);
        assert_eq!(local.len(), 16);
        assert!(matches!(
            parse(&local),
            Parsed::Header {
                len: 16,
                source: None,
                ..
            }
        ));
    }

    #[test]
    fn malformed_headers_are_invalid() {
        for bad in [
            &b"GET / HTTP/1.1\r\n"[..],
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n",
            b"PROXY TCP4 1.2.3.4 ::1 1 2\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 01 2\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 70000 2\r\n",
            b"PROXY SCTP 1.2.3.4 5.6.7.8 1 2\r\n",
        ] {
            assert!(matches!(parse(bad), Parsed::Invalid(_)), "{bad:?}");
        }
        let long = [b"PROXY TCP4 ".as_slice(), &[b'1'; 120]].concat();
        assert!(matches!(parse(&long), Parsed::Invalid(_)));
        let mut wrong_sig = SIGNATURE.to_vec();
        wrong_sig[11] = 0;
        wrong_sig.extend_from_slice(&[0x21, 0x11, 0, 12]);
        assert!(matches!(parse(&wrong_sig), Parsed::Invalid(_)));
        let mut oversized = SIGNATURE.to_vec();
        oversized.extend_from_slice(&[0x21, 0x11, 0xff, 0xff]);
        assert!(matches!(parse(&oversized), Parsed::Invalid(_)));
        let mut short = SIGNATURE.to_vec();
        short.extend_from_slice(&[0x21, 0x11, 0, 4, 1, 2, 3, 4]);
        assert!(matches!(parse(&short), Parsed::Invalid(_)));
    }

    #[tokio::test]
    async fn the_layer_takes_the_source_and_hands_on_the_rest() {
        use tokio::io::AsyncWriteExt;
        let (a, mut b) = tokio::io::duplex(1024);
        let mut h = encode(
            2,
            &Endpoint::Ip(sa("203.0.113.7:5555")),
            &Endpoint::Ip(sa("127.0.0.1:443")),
        );
        h.extend_from_slice(b"hello");
        b.write_all(&h).await.unwrap();
        let mut info = ConnInfo::new(
            Endpoint::Ip(sa("127.0.0.1:1")),
            Endpoint::Ip(sa("127.0.0.1:443")),
        );
        let mut s = AcceptProxyProtocol
            .accept(Box::new(a), &mut info)
            .await
            .unwrap();
        assert_eq!(info.source, Endpoint::Ip(sa("203.0.113.7:5555")));
        let mut got = [0u8; 5];
        s.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"hello");
    }
}
