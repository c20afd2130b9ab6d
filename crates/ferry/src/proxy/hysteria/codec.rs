//! Hysteria 2's frames, sans-IO: QUIC varints, the TCP request and response on a proxy stream,
//! UDP messages in QUIC datagrams with their fragmentation and reassembly, and padding.
//! Limits are the official implementation's (address and message 2048, padding 4096, a UDP
//! packet 4096 once reassembled).

use bytes::{BufMut, Bytes, BytesMut};

use crate::common::Destination;

/// The frame type that opens a proxy stream (a 2-byte varint: `44 01`).
pub const TCP_REQUEST: u64 = 0x401;
pub const MAX_ADDRESS: usize = 2048;
pub const MAX_MESSAGE: usize = 2048;
pub const MAX_PADDING: usize = 4096;
/// The largest UDP payload carried (bigger ones are dropped, as the Go implementations do).
pub const MAX_UDP: usize = 4096;

/// Why bytes are not a valid frame.
#[derive(Debug, PartialEq, Eq)]
pub enum Bad {
    /// Not a TCP request frame (some other varint first).
    NotRequest(u64),
    TooLong(&'static str, u64),
    Address,
}

impl std::fmt::Display for Bad {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Bad::NotRequest(t) => write!(f, "frame type {t:#x} is not a TCP request"),
            Bad::TooLong(what, n) => write!(f, "{what} of {n} bytes is over the limit"),
            Bad::Address => f.write_str("the address is not host:port"),
        }
    }
}

/// Reads a varint at the start of `b`: `(value, length)`, `None` when `b` is too short.
pub fn varint(b: &[u8]) -> Option<(u64, usize)> {
    let first = *b.first()?;
    let len = 1usize << (first >> 6);
    if b.len() < len {
        return None;
    }
    let mut v = u64::from(first & 0x3f);
    for x in &b[1..len] {
        v = (v << 8) | u64::from(*x);
    }
    Some((v, len))
}

/// Appends `v` (below 2^62) as a varint of the shortest length.
pub fn put_varint(out: &mut impl BufMut, v: u64) {
    if v < 1 << 6 {
        out.put_u8(v as u8);
    } else if v < 1 << 14 {
        out.put_u16(0x4000 | v as u16);
    } else if v < 1 << 30 {
        out.put_u32(0x8000_0000 | v as u32);
    } else {
        out.put_u64(0xc000_0000_0000_0000 | v);
    }
}

/// Random padding: `[A-Za-z0-9]`, its length uniform in `[lo, hi)`.
pub fn padding(lo: usize, hi: usize) -> Vec<u8> {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let mut r = [0u8; 2];
    crate::common::rand::fill(&mut r);
    let len = lo + usize::from(u16::from_le_bytes(r)) % (hi - lo).max(1);
    let mut p = vec![0u8; len];
    crate::common::rand::fill(&mut p);
    for b in &mut p {
        *b = ALPHABET[usize::from(*b) % ALPHABET.len()];
    }
    p
}

/// Padding lengths of each message (half-open ranges).
pub const AUTH_PADDING: (usize, usize) = (256, 2048);
pub const REQUEST_PADDING: (usize, usize) = (64, 512);
pub const RESPONSE_PADDING: (usize, usize) = (128, 1024);

/// The TCP request for `dest` (with padding).
pub fn tcp_request(dest: &Destination) -> BytesMut {
    let addr = dest.to_string();
    let pad = padding(REQUEST_PADDING.0, REQUEST_PADDING.1);
    let mut b = BytesMut::with_capacity(addr.len() + pad.len() + 8);
    put_varint(&mut b, TCP_REQUEST);
    put_varint(&mut b, addr.len() as u64);
    b.put_slice(addr.as_bytes());
    put_varint(&mut b, pad.len() as u64);
    b.put_slice(&pad);
    b
}

/// Reads a length-prefixed field at `b[at..]`: `(field, next)`, `Ok(None)` for more bytes.
fn field<'a>(
    b: &'a [u8],
    at: usize,
    max: usize,
    what: &'static str,
) -> Result<Option<(&'a [u8], usize)>, Bad> {
    let Some((len, n)) = varint(&b[at.min(b.len())..]) else {
        return Ok(None);
    };
    if len > max as u64 {
        return Err(Bad::TooLong(what, len));
    }
    let start = at + n;
    let end = start + len as usize;
    if b.len() < end {
        return Ok(None);
    }
    Ok(Some((&b[start..end], end)))
}

/// Reads the TCP request at the start of `b`: the destination and the bytes it took,
/// `Ok(None)` while incomplete.
pub fn read_tcp_request(b: &[u8]) -> Result<Option<(Destination, usize)>, Bad> {
    let Some((ty, n)) = varint(b) else {
        return Ok(None);
    };
    if ty != TCP_REQUEST {
        return Err(Bad::NotRequest(ty));
    }
    let Some((addr, at)) = field(b, n, MAX_ADDRESS, "address")? else {
        return Ok(None);
    };
    let Some((_, end)) = field(b, at, MAX_PADDING, "padding")? else {
        return Ok(None);
    };
    let dest = std::str::from_utf8(addr)
        .ok()
        .and_then(Destination::parse)
        .ok_or(Bad::Address)?;
    Ok(Some((dest, end)))
}

/// The TCP response: OK or an error with its message.
pub fn tcp_response(ok: bool, msg: &str) -> BytesMut {
    let msg = &msg.as_bytes()[..msg.len().min(MAX_MESSAGE)];
    let pad = padding(RESPONSE_PADDING.0, RESPONSE_PADDING.1);
    let mut b = BytesMut::with_capacity(msg.len() + pad.len() + 8);
    b.put_u8(if ok { 0 } else { 1 });
    put_varint(&mut b, msg.len() as u64);
    b.put_slice(msg);
    put_varint(&mut b, pad.len() as u64);
    b.put_slice(&pad);
    b
}

/// Reads the TCP response at the start of `b`: `(ok, message, bytes taken)`.
pub fn read_tcp_response(b: &[u8]) -> Result<Option<(bool, String, usize)>, Bad> {
    let Some(status) = b.first() else {
        return Ok(None);
    };
    let Some((msg, at)) = field(b, 1, MAX_MESSAGE, "message")? else {
        return Ok(None);
    };
    let Some((_, end)) = field(b, at, MAX_PADDING, "padding")? else {
        return Ok(None);
    };
    Ok(Some((
        *status == 0,
        String::from_utf8_lossy(msg).into_owned(),
        end,
    )))
}

/// One UDP message (a datagram, or a fragment of one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UdpMessage {
    pub session: u32,
    /// 0 when not fragmented.
    pub packet: u16,
    pub frag: u8,
    pub frags: u8,
    pub addr: String,
    pub data: Bytes,
}

impl UdpMessage {
    fn header_len(addr: &str) -> usize {
        let a = addr.len();
        8 + varint_len(a as u64) + a
    }

    pub fn encode(&self, out: &mut BytesMut) {
        out.put_u32(self.session);
        out.put_u16(self.packet);
        out.put_u8(self.frag);
        out.put_u8(self.frags);
        put_varint(out, self.addr.len() as u64);
        out.put_slice(self.addr.as_bytes());
        out.put_slice(&self.data);
    }

    /// Reads one datagram; `None` when it is not a valid message.
    pub fn decode(b: &Bytes) -> Option<UdpMessage> {
        if b.len() < 8 {
            return None;
        }
        let (alen, n) = varint(&b[8..])?;
        if alen == 0 || alen > MAX_ADDRESS as u64 {
            return None;
        }
        let start = 8 + n;
        let end = start + alen as usize;
        // An empty payload is refused, as the Go parsers do.
        if b.len() <= end {
            return None;
        }
        let addr = std::str::from_utf8(&b[start..end]).ok()?.to_string();
        let frags = b[7];
        let frag = b[6];
        if frags == 0 || frag >= frags {
            return None;
        }
        Some(UdpMessage {
            session: u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
            packet: u16::from_be_bytes([b[4], b[5]]),
            frag,
            frags,
            addr,
            // Copied: a slice would keep quinn's whole receive buffer (a batch of datagrams)
            // for as long as a fragment or a queued packet waits.
            data: Bytes::copy_from_slice(&b[end..]),
        })
    }
}

fn varint_len(v: u64) -> usize {
    match v {
        0..=63 => 1,
        64..=16383 => 2,
        16384..=1_073_741_823 => 4,
        _ => 8,
    }
}

/// The datagrams carrying `data` from session `session` to/from `addr` when a datagram holds
/// at most `max` bytes: one, or fragments that each repeat the header. Empty when the payload
/// is empty, over [`MAX_UDP`] or cannot be split into 255 fragments.
pub fn udp_datagrams(session: u32, addr: &str, data: &[u8], max: usize) -> Vec<Bytes> {
    if data.is_empty() || data.len() > MAX_UDP || addr.is_empty() || addr.len() > MAX_ADDRESS {
        return Vec::new();
    }
    let header = UdpMessage::header_len(addr);
    let one = |packet: u16, frag: u8, frags: u8, part: &[u8]| {
        let mut b = BytesMut::with_capacity(header + part.len());
        UdpMessage {
            session,
            packet,
            frag,
            frags,
            addr: addr.to_string(),
            data: Bytes::new(),
        }
        .encode(&mut b);
        b.put_slice(part);
        b.freeze()
    };
    if header + data.len() <= max {
        return vec![one(0, 0, 1, data)];
    }
    let room = max.saturating_sub(header);
    if room == 0 {
        return Vec::new();
    }
    let count = data.len().div_ceil(room);
    if count > 255 {
        return Vec::new();
    }
    let mut id = [0u8; 2];
    crate::common::rand::fill(&mut id);
    let packet = u16::from_be_bytes(id).max(1);
    data.chunks(room)
        .enumerate()
        .map(|(i, part)| one(packet, i as u8, count as u8, part))
        .collect()
}

/// Puts a session's fragments back together: one packet at a time, as the Go
/// implementations do (a fragment of another packet drops the partial one), so a session
/// holds at most one packet's worth ([`MAX_UDP`] and its fragments' headers).
#[derive(Default)]
pub struct Defrag {
    packet: u16,
    frags: u8,
    parts: Vec<Option<Bytes>>,
    have: usize,
    size: usize,
}

impl Defrag {
    /// Takes one message: the whole packet (address and payload) when it is complete.
    pub fn feed(&mut self, m: UdpMessage) -> Option<(String, Bytes)> {
        if m.frags == 1 {
            return Some((m.addr, m.data));
        }
        if m.packet != self.packet || m.frags != self.frags {
            self.packet = m.packet;
            self.frags = m.frags;
            self.parts = vec![None; usize::from(m.frags)];
            self.have = 0;
            self.size = 0;
        }
        let slot = self.parts.get_mut(usize::from(m.frag))?;
        if slot.is_some() {
            return None;
        }
        self.size += m.data.len();
        if self.size > MAX_UDP {
            self.reset();
            return None;
        }
        *slot = Some(m.data);
        self.have += 1;
        if self.have < usize::from(self.frags) {
            return None;
        }
        let mut whole = BytesMut::with_capacity(self.size);
        for p in self.parts.drain(..).flatten() {
            whole.put_slice(&p);
        }
        self.reset();
        Some((m.addr, whole.freeze()))
    }

    fn reset(&mut self) {
        self.packet = 0;
        self.frags = 0;
        self.parts = Vec::new();
        self.have = 0;
        self.size = 0;
    }
}

/// Fuzz entry: every decoder over arbitrary bytes (must never panic).
#[cfg(any(test, feature = "fuzzing"))]
pub fn fuzz_one(data: &[u8]) {
    let _ = read_tcp_request(data);
    let _ = read_tcp_response(data);
    let b = Bytes::copy_from_slice(data);
    let mut d = Defrag::default();
    for chunk in data.chunks(64) {
        if let Some(m) = UdpMessage::decode(&Bytes::copy_from_slice(chunk)) {
            let _ = d.feed(m);
        }
    }
    if let Some(m) = UdpMessage::decode(&b) {
        let _ = d.feed(m);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::Address;

    #[test]
    fn varints_as_quic_writes_them() {
        let mut b = BytesMut::new();
        put_varint(&mut b, TCP_REQUEST);
        assert_eq!(&b[..], [0x44, 0x01]);
        for v in [0u64, 63, 64, 16383, 16384, 1 << 29, 1 << 40] {
            let mut b = BytesMut::new();
            put_varint(&mut b, v);
            assert_eq!(varint(&b), Some((v, b.len())));
            assert_eq!(b.len(), varint_len(v));
            assert_eq!(varint(&b[..b.len() - 1]), None);
        }
    }

    #[test]
    fn tcp_request_as_the_spec_example() {
        let b = [
            0x44, 0x01, 0x0f, b'e', b'x', b'a', b'm', b'p', b'l', b'e', b'.', b'c', b'o', b'm',
            b':', b'4', b'4', b'3', 0x00,
        ];
        let (d, n) = read_tcp_request(&b).unwrap().unwrap();
        assert_eq!(
            d,
            Destination::new(Address::Domain("example.com".into()), 443)
        );
        assert_eq!(n, b.len());
        for cut in 0..b.len() {
            assert_eq!(read_tcp_request(&b[..cut]), Ok(None), "{cut}");
        }
        assert_eq!(read_tcp_request(&[0x01]), Err(Bad::NotRequest(1)));
        let long = [0x44, 0x01, 0x48, 0x01];
        assert_eq!(read_tcp_request(&long), Err(Bad::TooLong("address", 2049)));
        let v6: Destination = "[::1]:8443".parse::<std::net::SocketAddr>().unwrap().into();
        let req = tcp_request(&v6);
        let (d, n) = read_tcp_request(&req).unwrap().unwrap();
        assert_eq!((d, n), (v6, req.len()));
        assert!((64 + 14..512 + 14).contains(&req.len()), "{}", req.len());
    }

    #[test]
    fn tcp_response_round_trips() {
        let r = tcp_response(false, "dial failed");
        let (ok, msg, n) = read_tcp_response(&r).unwrap().unwrap();
        assert!(!ok);
        assert_eq!((msg.as_str(), n), ("dial failed", r.len()));
        let r = tcp_response(true, "");
        assert!(read_tcp_response(&r).unwrap().unwrap().0);
        assert_eq!(read_tcp_response(&r[..r.len() - 1]), Ok(None));
    }

    #[test]
    fn udp_message_as_the_spec_example() {
        let mut b = BytesMut::new();
        b.put_slice(&[0, 0, 0, 1, 0, 0, 0, 1, 10]);
        b.put_slice(b"1.1.1.1:53");
        b.put_slice(b"query");
        let m = UdpMessage::decode(&b.freeze()).unwrap();
        assert_eq!((m.session, m.packet, m.frag, m.frags), (1, 0, 0, 1));
        assert_eq!(
            (m.addr.as_str(), &m.data[..]),
            ("1.1.1.1:53", &b"query"[..])
        );
        // Empty payload, fragment number out of range, no fragments: refused.
        let mut e = BytesMut::new();
        e.put_slice(&[0, 0, 0, 1, 0, 0, 0, 1, 10]);
        e.put_slice(b"1.1.1.1:53");
        assert!(UdpMessage::decode(&e.clone().freeze()).is_none());
        e[6] = 1;
        e.put_u8(1);
        assert!(UdpMessage::decode(&e.clone().freeze()).is_none());
        e[6] = 0;
        e[7] = 0;
        assert!(UdpMessage::decode(&e.freeze()).is_none());
    }

    #[test]
    fn fragments_split_at_the_datagram_limit_and_come_back() {
        let addr = "127.0.0.1:18083";
        // A 1200-byte DATAGRAM frame carries 1197 bytes: header 24, so 1173 fit whole.
        assert_eq!(udp_datagrams(1, addr, &[7; 1173], 1197).len(), 1);
        let parts = udp_datagrams(1, addr, &[7; 1174], 1197);
        assert_eq!(parts.len(), 2);
        let data: Vec<u8> = (0..4000u32).map(|i| i as u8).collect();
        let parts = udp_datagrams(9, addr, &data, 1197);
        assert_eq!(parts.len(), 4);
        let mut d = Defrag::default();
        let mut got = None;
        for p in parts.iter().rev() {
            assert!(p.len() <= 1197);
            got = d.feed(UdpMessage::decode(p).unwrap());
        }
        let (a, whole) = got.unwrap();
        assert_eq!((a.as_str(), &whole[..]), (addr, &data[..]));
        assert!(udp_datagrams(1, addr, &[0; MAX_UDP + 1], 1197).is_empty());
        assert!(udp_datagrams(1, addr, &[], 1197).is_empty());
    }

    #[test]
    fn a_lost_fragment_loses_its_packet_only() {
        let addr = "10.0.0.1:53";
        let a = udp_datagrams(1, addr, &[1; 3000], 1197);
        let b = udp_datagrams(1, addr, &[2; 3000], 1197);
        let mut d = Defrag::default();
        // Packet a misses its last fragment; b arrives whole.
        for p in &a[..a.len() - 1] {
            assert!(d.feed(UdpMessage::decode(p).unwrap()).is_none());
        }
        let mut got = None;
        for p in &b {
            got = d.feed(UdpMessage::decode(p).unwrap());
        }
        assert_eq!(&got.unwrap().1[..], &[2; 3000][..]);
        // A repeated fragment is not counted twice.
        let mut d = Defrag::default();
        let m = UdpMessage::decode(&a[0]).unwrap();
        assert!(d.feed(m.clone()).is_none());
        assert!(d.feed(m).is_none());
        assert!(d.feed(UdpMessage::decode(&a[1]).unwrap()).is_none());
    }

    #[test]
    fn hostile_bytes_never_panic() {
        fuzz_one(&[]);
        fuzz_one(&[0xff; 40]);
        fuzz_one(&[
            0, 0, 0, 1, 0, 9, 200, 255, 0xc0, 0, 0, 0, 0, 0, 0, 9, 1, 2, 3,
        ]);
        for seed in 0..200u32 {
            let data: Vec<u8> = (0..(seed % 97))
                .map(|i| (i.wrapping_mul(2654435761u32.wrapping_add(seed)) >> 13) as u8)
                .collect();
            fuzz_one(&data);
        }
    }
}
