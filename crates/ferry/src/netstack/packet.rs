//! IP packets as the stack sees them before its TCP engine does: what a packet is (version,
//! transport protocol, the two socket addresses, TCP flags, where the payload is), and the
//! UDP packets the stack writes itself (UDP never goes through the TCP engine). Sans-IO; every
//! length is checked against the bytes there are, so any input gives `None`, never a panic.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::ops::Range;

pub const PROTO_TCP: u8 = 6;
pub const PROTO_UDP: u8 = 17;

/// TCP flag bits (byte 13 of the TCP header).
pub const TCP_FIN: u8 = 0x01;
pub const TCP_SYN: u8 = 0x02;
pub const TCP_RST: u8 = 0x04;
pub const TCP_ACK: u8 = 0x10;

/// What one IP packet is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packet {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    /// The IP protocol number (IPv6: the first next-header, extension headers not followed).
    pub proto: u8,
    /// TCP flags (0 for other protocols).
    pub tcp_flags: u8,
    /// Where the transport payload is (UDP: the datagram; TCP: after the TCP header).
    pub payload: Range<usize>,
    /// A fragment (IPv4 MF set or offset non-zero): its ports are not known.
    pub fragment: bool,
}

impl Packet {
    pub fn is_tcp_syn(&self) -> bool {
        self.proto == PROTO_TCP && self.tcp_flags & (TCP_SYN | TCP_ACK | TCP_RST) == TCP_SYN
    }
}

/// Reads an IP packet's header (the packet's own length field bounds it; bytes past it are
/// padding). Ports are 0 for protocols without them.
pub fn parse(p: &[u8]) -> Option<Packet> {
    let version = p.first()? >> 4;
    let (src, dst, proto, l4, end, fragment) = match version {
        4 => {
            if p.len() < 20 {
                return None;
            }
            let ihl = usize::from(p[0] & 0x0f) * 4;
            let total = usize::from(u16::from_be_bytes([p[2], p[3]]));
            if ihl < 20 || total < ihl || total > p.len() {
                return None;
            }
            let frag = u16::from_be_bytes([p[6], p[7]]);
            let fragment = frag & 0x2000 != 0 || frag & 0x1fff != 0;
            let src = IpAddr::V4(Ipv4Addr::new(p[12], p[13], p[14], p[15]));
            let dst = IpAddr::V4(Ipv4Addr::new(p[16], p[17], p[18], p[19]));
            (src, dst, p[9], ihl, total, fragment)
        }
        6 => {
            if p.len() < 40 {
                return None;
            }
            let total = 40 + usize::from(u16::from_be_bytes([p[4], p[5]]));
            if total > p.len() {
                return None;
            }
            let src: [u8; 16] = p[8..24].try_into().ok()?;
            let dst: [u8; 16] = p[24..40].try_into().ok()?;
            (
                IpAddr::V6(Ipv6Addr::from(src)),
                IpAddr::V6(Ipv6Addr::from(dst)),
                p[6],
                40,
                total,
                false,
            )
        }
        _ => return None,
    };
    let mut out = Packet {
        src: SocketAddr::new(src, 0),
        dst: SocketAddr::new(dst, 0),
        proto,
        tcp_flags: 0,
        payload: l4..end,
        fragment,
    };
    if fragment {
        return Some(out);
    }
    let seg = &p[l4..end];
    match proto {
        PROTO_UDP => {
            if seg.len() < 8 {
                return None;
            }
            let len = usize::from(u16::from_be_bytes([seg[4], seg[5]]));
            if len < 8 || len > seg.len() {
                return None;
            }
            out.src.set_port(u16::from_be_bytes([seg[0], seg[1]]));
            out.dst.set_port(u16::from_be_bytes([seg[2], seg[3]]));
            out.payload = l4 + 8..l4 + len;
        }
        PROTO_TCP => {
            if seg.len() < 20 {
                return None;
            }
            let off = usize::from(seg[12] >> 4) * 4;
            if off < 20 || off > seg.len() {
                return None;
            }
            out.src.set_port(u16::from_be_bytes([seg[0], seg[1]]));
            out.dst.set_port(u16::from_be_bytes([seg[2], seg[3]]));
            out.tcp_flags = seg[13];
            out.payload = l4 + off..end;
        }
        _ => {}
    }
    Some(out)
}

/// The ones' complement sum of `data` added to `sum` (RFC 1071), not yet folded.
fn sum16(mut sum: u32, data: &[u8]) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [b] = chunks.remainder() {
        sum += u32::from(*b) << 8;
    }
    sum
}

fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The header length of a packet from `src` (20 for IPv4, 40 for IPv6) plus UDP's 8.
pub fn udp_overhead(src: &SocketAddr) -> usize {
    if src.is_ipv4() {
        28
    } else {
        48
    }
}

/// A UDP datagram from `src` to `dst` (same family) as an IP packet, hop limit 64, with its
/// checksums; `None` when the families differ or the payload does not fit one packet.
pub fn udp_packet(src: SocketAddr, dst: SocketAddr, payload: &[u8]) -> Option<Vec<u8>> {
    let udp_len = 8 + payload.len();
    let mut p = Vec::with_capacity(udp_overhead(&src) + payload.len());
    let pseudo = match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let total = u16::try_from(20 + udp_len).ok()?;
            p.extend_from_slice(&[0x45, 0]);
            p.extend_from_slice(&total.to_be_bytes());
            p.extend_from_slice(&[0, 0, 0x40, 0, 64, PROTO_UDP, 0, 0]);
            p.extend_from_slice(&s.octets());
            p.extend_from_slice(&d.octets());
            let c = fold(sum16(0, &p[..20]));
            p[10..12].copy_from_slice(&c.to_be_bytes());
            let mut ps = sum16(0, &s.octets());
            ps = sum16(ps, &d.octets());
            ps + u32::from(PROTO_UDP) + udp_len as u32
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let len = u16::try_from(udp_len).ok()?;
            p.extend_from_slice(&[0x60, 0, 0, 0]);
            p.extend_from_slice(&len.to_be_bytes());
            p.extend_from_slice(&[PROTO_UDP, 64]);
            p.extend_from_slice(&s.octets());
            p.extend_from_slice(&d.octets());
            let mut ps = sum16(0, &s.octets());
            ps = sum16(ps, &d.octets());
            ps + u32::from(PROTO_UDP) + udp_len as u32
        }
        _ => return None,
    };
    let at = p.len();
    p.extend_from_slice(&src.port().to_be_bytes());
    p.extend_from_slice(&dst.port().to_be_bytes());
    p.extend_from_slice(&(udp_len as u16).to_be_bytes());
    p.extend_from_slice(&[0, 0]);
    p.extend_from_slice(payload);
    let mut c = fold(sum16(pseudo, &p[at..]));
    if c == 0 {
        c = 0xffff;
    }
    p[at + 6..at + 8].copy_from_slice(&c.to_be_bytes());
    Some(p)
}

/// Whether a UDP packet's checksum holds (0 in IPv4 means none was sent).
pub fn udp_checksum_ok(p: &[u8], pkt: &Packet) -> bool {
    let seg = &p[pkt.payload.start - 8..pkt.payload.end];
    if pkt.src.is_ipv4() && seg[6] == 0 && seg[7] == 0 {
        return true;
    }
    let mut ps = 0;
    for ip in [pkt.src.ip(), pkt.dst.ip()] {
        ps = match ip {
            IpAddr::V4(a) => sum16(ps, &a.octets()),
            IpAddr::V6(a) => sum16(ps, &a.octets()),
        };
    }
    ps += u32::from(PROTO_UDP) + seg.len() as u32;
    fold(sum16(ps, seg)) == 0
}

#[cfg(any(test, feature = "fuzzing"))]
/// The fuzz target's body: parsing never panics, and what it reports lies inside the packet.
pub fn fuzz_one(data: &[u8]) {
    if let Some(p) = parse(data) {
        assert!(p.payload.start <= p.payload.end && p.payload.end <= data.len());
        if p.proto == PROTO_UDP && !p.fragment {
            let _ = udp_checksum_ok(data, &p);
            let _ = udp_packet(p.dst, p.src, &data[p.payload.clone()]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_udp_packet_we_write_parses_back_with_a_valid_checksum() {
        for (s, d) in [
            ("10.0.0.1:5353", "10.0.0.2:53"),
            ("[fd00::1]:40000", "[fd00::2]:443"),
        ] {
            let (s, d): (SocketAddr, SocketAddr) = (s.parse().unwrap(), d.parse().unwrap());
            let p = udp_packet(s, d, b"hello, odd").unwrap();
            let got = parse(&p).unwrap();
            assert_eq!((got.src, got.dst, got.proto), (s, d, PROTO_UDP));
            assert_eq!(&p[got.payload.clone()], b"hello, odd");
            assert!(udp_checksum_ok(&p, &got));
            let mut bad = p.clone();
            let last = bad.len() - 1;
            bad[last] ^= 1;
            assert!(!udp_checksum_ok(&bad, &parse(&bad).unwrap()));
        }
        let mixed = udp_packet(
            "10.0.0.1:1".parse().unwrap(),
            "[::1]:1".parse().unwrap(),
            b"",
        );
        assert!(mixed.is_none());
    }

    #[test]
    fn the_ipv4_header_checksum_verifies() {
        let p = udp_packet(
            "192.168.1.1:1".parse().unwrap(),
            "192.168.1.2:2".parse().unwrap(),
            b"x",
        )
        .unwrap();
        assert_eq!(fold(sum16(0, &p[..20])), 0);
    }

    #[test]
    fn truncated_and_lying_headers_are_refused() {
        let p = udp_packet(
            "10.0.0.1:1000".parse().unwrap(),
            "10.0.0.2:2000".parse().unwrap(),
            &[7; 100],
        )
        .unwrap();
        for n in 0..p.len() {
            assert!(parse(&p[..n]).is_none(), "{n} bytes");
        }
        // Padding after the packet is not part of it.
        let mut padded = p.clone();
        padded.extend_from_slice(&[0; 12]);
        assert_eq!(parse(&padded).unwrap().payload.end, p.len());
        // A UDP length beyond the IP packet.
        let mut lying = p.clone();
        lying[24..26].copy_from_slice(&500u16.to_be_bytes());
        assert!(parse(&lying).is_none());
        // An IHL below 5 words.
        let mut ihl = p;
        ihl[0] = 0x44;
        assert!(parse(&ihl).is_none());
    }

    #[test]
    fn a_tcp_syn_is_told_from_other_segments() {
        // IPv4 + a 20-byte TCP header with SYN.
        let mut p = vec![0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, PROTO_TCP, 0, 0];
        p.extend_from_slice(&[10, 0, 0, 2, 1, 1, 1, 1]);
        p.extend_from_slice(&[0x9c, 0x40, 0, 80, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, TCP_SYN]);
        p.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
        let got = parse(&p).unwrap();
        assert!(got.is_tcp_syn());
        assert_eq!(got.dst, "1.1.1.1:80".parse().unwrap());
        assert_eq!(got.src.port(), 40000);
        p[33] = TCP_SYN | TCP_ACK;
        assert!(!parse(&p).unwrap().is_tcp_syn());
        // A fragment's ports are not read.
        p[33] = TCP_SYN;
        p[6] = 0x20;
        let f = parse(&p).unwrap();
        assert!(f.fragment && !f.is_tcp_syn());
        assert_eq!(f.dst.port(), 0);
    }
}
