//! UDP packet codecs (sans-IO): stream ciphers and AEAD per packet (§3.3, §5.4), and 2022
//! sessions with separate headers, EIH and a packet-id window (§6.7, §6.8).

use std::collections::HashMap;
use std::hash::Hash;
use std::net::SocketAddr;
use std::ops::Range;
use std::time::{Duration, Instant};

use super::aead::Error;
use super::cipher::{
    aead_subkey, psk_hash16, random, session_subkey_2022, AeadAlg, AeadCipher, AesBlock, Kind,
    Method, TAG_LEN,
};
use super::ota;
use super::ss2022::{check_time, now, TYPE_CLIENT, TYPE_SERVER};
use super::stream_cipher::{StreamCrypt, OTA_FLAG};
use crate::common::addr::socks;
use crate::common::{ct, Destination};

fn parse_addr(b: &[u8]) -> Result<(Destination, usize), Error> {
    // Stream/AEAD receivers mask the OTA bit (Xray masks the low nibble).
    let mut tmp = [0u8; 1];
    let first = *b.first().ok_or(Error::Truncated)?;
    tmp[0] = first & 0x0F;
    if first & 0x0F != first {
        let mut v = b.to_vec();
        v[0] = tmp[0];
        return socks::decode(&v)
            .map_err(|_| Error::Header("bad address"))?
            .ok_or(Error::Truncated);
    }
    socks::decode(b)
        .map_err(|_| Error::Header("bad address"))?
        .ok_or(Error::Truncated)
}

/// Encodes one stream/AEAD/none packet: `salt || AE(addr || payload)`.
pub fn encode_simple(m: Method, key: &[u8], addr: &Destination, payload: &[u8], out: &mut Vec<u8>) {
    encode_simple_ota(m, key, addr, payload, false, out)
}

/// [`encode_simple`], with one-time auth (§4: flagged ATYP, trailing MAC) when `ota` and `m` is
/// a stream cipher.
pub fn encode_simple_ota(
    m: Method,
    key: &[u8],
    addr: &Destination,
    payload: &[u8],
    ota: bool,
    out: &mut Vec<u8>,
) {
    let sl = m.salt_len();
    let at = out.len();
    out.resize(at + sl, 0);
    random(&mut out[at..]);
    let body = out.len();
    socks::encode(addr, out);
    out.extend_from_slice(payload);
    if ota && m.kind() == Kind::Stream {
        out[body] |= OTA_FLAG;
        let mut tail = out.split_off(body);
        ota::udp_seal(&out[at..body], key, &mut tail);
        out.extend_from_slice(&tail);
    }
    let (salt, rest) = out[at..].split_at_mut(sl);
    match m.kind() {
        Kind::Aead => {
            let sub = aead_subkey(key, salt);
            let Some(alg) = AeadAlg::of(m) else { return };
            let Some(c) = AeadCipher::new(alg, &sub) else {
                return;
            };
            let tag = c.seal(&[0u8; 24][..alg.nonce_len()], rest);
            out.extend_from_slice(&tag);
        }
        Kind::Stream => {
            if let Some(mut c) = StreamCrypt::new(m, key, salt, true) {
                c.apply(rest);
            }
        }
        _ => {}
    }
}

/// A decoded stream/AEAD/none packet.
#[derive(Debug)]
pub struct Simple {
    pub dest: Destination,
    /// The payload, in the buffer the plaintext is in.
    pub payload: Range<usize>,
    /// The packet carried one-time auth (checked).
    pub ota: bool,
}

/// Decodes one stream/AEAD/none packet in place: target and payload range.
pub fn decode_simple(
    m: Method,
    key: &[u8],
    pkt: &mut [u8],
) -> Result<(Destination, Range<usize>), Error> {
    decode_simple_ota(m, key, pkt).map(|p| (p.dest, p.payload))
}

/// [`decode_simple`], checking and stripping one-time auth when the packet asks for it.
pub fn decode_simple_ota(m: Method, key: &[u8], pkt: &mut [u8]) -> Result<Simple, Error> {
    let sl = m.salt_len();
    if pkt.len() < sl {
        return Err(Error::Truncated);
    }
    let (salt, rest) = pkt.split_at_mut(sl);
    let mut body_len = match m.kind() {
        Kind::Aead => {
            let sub = aead_subkey(key, salt);
            let alg = AeadAlg::of(m).ok_or(Error::Auth)?;
            let c = AeadCipher::new(alg, &sub).ok_or(Error::Auth)?;
            c.open(&[0u8; 24][..alg.nonce_len()], rest)?;
            rest.len() - TAG_LEN
        }
        Kind::Stream => {
            let mut c = StreamCrypt::new(m, key, salt, false).ok_or(Error::Auth)?;
            c.apply(rest);
            rest.len()
        }
        _ => rest.len(),
    };
    let ota = m.kind() == Kind::Stream && rest.first().is_some_and(|a| a & OTA_FLAG != 0);
    if ota {
        body_len = ota::udp_open(salt, key, &rest[..body_len])?;
    }
    let (dest, n) = parse_addr(&rest[..body_len])?;
    Ok(Simple {
        dest,
        payload: sl + n..sl + body_len,
        ota,
    })
}

/// Tries an AEAD packet with one key without touching it: the plaintext (address and payload)
/// goes to `out` (at least the packet's size), the payload range is into `out`. For trying
/// several users' keys on one packet without copying it for each.
pub fn decode_aead_to(
    m: Method,
    key: &[u8],
    pkt: &[u8],
    out: &mut [u8],
) -> Result<(Destination, Range<usize>), Error> {
    let sl = m.salt_len();
    let (salt, rest) = pkt.split_at_checked(sl).ok_or(Error::Truncated)?;
    let alg = AeadAlg::of(m).ok_or(Error::Auth)?;
    let c = AeadCipher::new(alg, &aead_subkey(key, salt)).ok_or(Error::Auth)?;
    c.open_to(&[0u8; 24][..alg.nonce_len()], rest, out)?;
    let body_len = rest.len() - TAG_LEN;
    let (dest, n) = parse_addr(&out[..body_len])?;
    Ok((dest, n..body_len))
}

/// Per-client state (2022 sessions by client session, reply keys by address) that forgets
/// entries idle for longer than `idle`. Sweeps happen as entries are used, at most every
/// `idle / 2`.
pub struct SessionTable<V, K = SocketAddr> {
    map: HashMap<K, (V, Instant)>,
    idle: Duration,
    next_sweep: Option<Instant>,
}

impl<V, K: Hash + Eq> SessionTable<V, K> {
    pub fn new(idle: Duration) -> Self {
        SessionTable {
            map: HashMap::new(),
            idle: idle.max(Duration::from_secs(1)),
            next_sweep: None,
        }
    }

    pub fn set_idle(&mut self, idle: Duration) {
        self.idle = idle.max(Duration::from_secs(1));
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Drops the entries not used since `now - idle`.
    pub fn sweep(&mut self, now: Instant) {
        let idle = self.idle;
        self.map
            .retain(|_, (_, t)| now.saturating_duration_since(*t) < idle);
        self.next_sweep = Some(now + idle / 2);
    }

    fn maybe_sweep(&mut self, now: Instant) {
        if self.next_sweep.is_none_or(|t| now >= t) {
            self.sweep(now);
        }
    }

    /// The entry of `k` (made by `f` if absent), marked used at `now`.
    pub fn entry(&mut self, k: K, now: Instant, f: impl FnOnce() -> V) -> &mut V {
        self.maybe_sweep(now);
        let e = self.map.entry(k).or_insert_with(|| (f(), now));
        e.1 = now;
        &mut e.0
    }

    /// Sets the entry of `k`, marked used at `now`.
    pub fn insert(&mut self, k: K, v: V, now: Instant) {
        self.maybe_sweep(now);
        self.map.insert(k, (v, now));
    }

    /// The entry of `k`, marked used at `now`.
    pub fn get(&mut self, k: &K, now: Instant) -> Option<&V> {
        let e = self.map.get_mut(k)?;
        e.1 = now;
        Some(&e.0)
    }
}

/// A sliding window of seen packet ids (rejects repeats and ids too far behind).
#[derive(Clone, Default)]
pub struct Window {
    top: u64,
    bits: [u64; 16],
    any: bool,
}

const WINDOW: u64 = 16 * 64;

impl Window {
    /// Whether `id` would be accepted (does not record it).
    pub fn check(&self, id: u64) -> bool {
        if !self.any || id > self.top {
            return true;
        }
        let back = self.top - id;
        back < WINDOW && self.bits[(id % WINDOW / 64) as usize] & (1 << (id % 64)) == 0
    }

    /// Records `id` (call only after the packet authenticated and `check` passed).
    pub fn record(&mut self, id: u64) {
        if !self.any {
            self.any = true;
            self.top = id;
        } else if id > self.top {
            let shift = id - self.top;
            if shift >= WINDOW {
                self.bits = [0; 16];
            } else {
                for i in self.top + 1..=id {
                    self.bits[(i % WINDOW / 64) as usize] &= !(1 << (i % 64));
                }
            }
            self.top = id;
        }
        self.bits[(id % WINDOW / 64) as usize] |= 1 << (id % 64);
    }
}

/// A decoded 2022 packet.
#[derive(Debug)]
pub struct Packet2022 {
    pub session_id: u64,
    pub packet_id: u64,
    /// Server → client: the client session id echoed.
    pub client_session_id: Option<u64>,
    pub addr: Destination,
    pub payload: Range<usize>,
    /// Index of the user found through EIH (server with identity key).
    pub user: Option<usize>,
}

/// What one side of a 2022 UDP association sends with.
pub struct Sender2022<'a> {
    pub method: Method,
    /// Key that encrypts the separate header: first iPSK (client with EIH), else the uPSK / PSK.
    pub header_key: &'a [u8],
    /// Identity keys for EIH (client only), then the user key.
    pub ipsks: &'a [Vec<u8>],
    pub user_key: &'a [u8],
    pub session_id: u64,
    pub packet_id: u64,
    /// Server replies: the client session id.
    pub client_session_id: Option<u64>,
}

/// Encodes one 2022 packet.
pub fn encode_2022(s: &Sender2022<'_>, addr: &Destination, payload: &[u8], out: &mut Vec<u8>) {
    let mut body = Vec::with_capacity(32 + payload.len());
    body.push(if s.client_session_id.is_some() {
        TYPE_SERVER
    } else {
        TYPE_CLIENT
    });
    body.extend_from_slice(&now().to_be_bytes());
    if let Some(c) = s.client_session_id {
        body.extend_from_slice(&c.to_be_bytes());
    }
    body.extend_from_slice(&0u16.to_be_bytes());
    socks::encode(addr, &mut body);
    body.extend_from_slice(payload);
    let mut sep = [0u8; 16];
    sep[..8].copy_from_slice(&s.session_id.to_be_bytes());
    sep[8..].copy_from_slice(&s.packet_id.to_be_bytes());
    if s.method == Method::Blake3Chacha20Poly1305 {
        let at = out.len();
        out.resize(at + 24, 0);
        random(&mut out[at..]);
        let mut nonce = [0u8; 24];
        nonce.copy_from_slice(&out[at..at + 24]);
        let start = out.len();
        out.extend_from_slice(&sep);
        out.extend_from_slice(&body);
        if let Some(c) = AeadCipher::new(AeadAlg::XChaCha20Poly1305, s.user_key) {
            let tag = c.seal(&nonce, &mut out[start..]);
            out.extend_from_slice(&tag);
        }
        return;
    }
    let mut hdr = sep;
    if let Some(c) = AesBlock::new(s.header_key) {
        c.encrypt(&mut hdr);
    }
    out.extend_from_slice(&hdr);
    for (i, k) in s.ipsks.iter().enumerate() {
        let next = s
            .ipsks
            .get(i + 1)
            .map(|v| v.as_slice())
            .unwrap_or(s.user_key);
        let mut b = psk_hash16(next);
        b.iter_mut().zip(sep.iter()).for_each(|(x, y)| *x ^= y);
        if let Some(c) = AesBlock::new(k) {
            c.encrypt(&mut b);
        }
        out.extend_from_slice(&b);
    }
    let sub = session_subkey_2022(s.user_key, &sep[..8]);
    let Some(alg) = AeadAlg::of(s.method) else {
        return;
    };
    if let Some(c) = AeadCipher::new(alg, &sub) {
        let at = out.len();
        out.extend_from_slice(&body);
        let tag = c.seal(&sep[4..16], &mut out[at..]);
        out.extend_from_slice(&tag);
    }
}

/// How a receiver opens 2022 packets.
pub struct Receiver2022<'a> {
    pub method: Method,
    /// Key of the separate header: the server's iPSK / PSK, or the client's uPSK.
    pub header_key: &'a [u8],
    /// Server with identity key: user keys and their hashes (EIH lookup).
    pub users: &'a [(&'a [u8], [u8; 16])],
    /// Without EIH: the key that opens the body.
    pub key: &'a [u8],
    /// Expect server packets (client side).
    pub from_server: bool,
}

fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

/// Decodes one 2022 packet in place (header, EIH, body, time; the caller checks the window).
pub fn decode_2022(r: &Receiver2022<'_>, pkt: &mut [u8]) -> Result<Packet2022, Error> {
    let mut user = None;
    let (sep, body): ([u8; 16], Range<usize>) = if r.method == Method::Blake3Chacha20Poly1305 {
        if pkt.len() < 24 + 16 + TAG_LEN {
            return Err(Error::Truncated);
        }
        let (nonce, rest) = pkt.split_at_mut(24);
        let c = AeadCipher::new(AeadAlg::XChaCha20Poly1305, r.key).ok_or(Error::Auth)?;
        c.open(nonce, rest)?;
        let mut sep = [0u8; 16];
        sep.copy_from_slice(&rest[..16]);
        (sep, 40..pkt.len() - TAG_LEN)
    } else {
        let eih = !r.users.is_empty();
        let hl = 16 + if eih { 16 } else { 0 };
        if pkt.len() < hl + TAG_LEN {
            return Err(Error::Truncated);
        }
        let mut sep: [u8; 16] = pkt[..16].try_into().map_err(|_| Error::Truncated)?;
        AesBlock::new(r.header_key)
            .ok_or(Error::Auth)?
            .decrypt(&mut sep);
        let mut key = r.key;
        if eih {
            let mut b: [u8; 16] = pkt[16..32].try_into().map_err(|_| Error::Truncated)?;
            AesBlock::new(r.header_key)
                .ok_or(Error::Auth)?
                .decrypt(&mut b);
            b.iter_mut().zip(sep.iter()).for_each(|(x, y)| *x ^= y);
            let i = ct::position(r.users, |(_, h)| h, &b).ok_or(Error::UnknownUser)?;
            key = r.users[i].0;
            user = Some(i);
        }
        let sub = session_subkey_2022(key, &sep[..8]);
        let alg = AeadAlg::of(r.method).ok_or(Error::Auth)?;
        let c = AeadCipher::new(alg, &sub).ok_or(Error::Auth)?;
        c.open(&sep[4..16], &mut pkt[hl..])?;
        (sep, hl..pkt.len() - TAG_LEN)
    };
    let b = &pkt[body.clone()];
    let want = if r.from_server {
        TYPE_SERVER
    } else {
        TYPE_CLIENT
    };
    if b.len() < 1 + 8 + 2 || b[0] != want {
        return Err(Error::Header("wrong packet type"));
    }
    check_time(be64(&b[1..9]))?;
    let mut at = 9;
    let mut client_session_id = None;
    if r.from_server {
        client_session_id = Some(be64(b.get(9..17).ok_or(Error::Truncated)?));
        at = 17;
    }
    let p = b.get(at..at + 2).ok_or(Error::Truncated)?;
    let pad = u16::from_be_bytes([p[0], p[1]]) as usize;
    at += 2 + pad;
    let (addr, n) = parse_addr(b.get(at..).ok_or(Error::Truncated)?)?;
    at += n;
    Ok(Packet2022 {
        session_id: be64(&sep[..8]),
        packet_id: be64(&sep[8..]),
        client_session_id,
        addr,
        payload: body.start + at..body.end,
        user,
    })
}

/// A fresh random session id.
pub fn new_session_id() -> u64 {
    let mut b = [0u8; 8];
    random(&mut b);
    u64::from_be_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dest() -> Destination {
        Destination::parse("127.0.0.1:5353").unwrap()
    }

    #[test]
    fn simple_packets_round_trip() {
        for m in Method::ALL.iter().filter(|m| m.kind() != Kind::Aead2022) {
            let key = vec![1u8; m.key_len()];
            let mut out = Vec::new();
            encode_simple(*m, &key, &dest(), b"payload", &mut out);
            let (d, r) = decode_simple(*m, &key, &mut out).unwrap();
            assert_eq!(d, dest());
            assert_eq!(&out[r], b"payload");
            if m.kind() == Kind::Aead {
                let mut out = Vec::new();
                encode_simple(*m, &key, &dest(), b"payload", &mut out);
                assert_eq!(
                    decode_simple(*m, &[2u8; 32][..m.key_len()], &mut out).unwrap_err(),
                    Error::Auth
                );
                assert!(decode_simple(*m, &key, &mut out[..5]).is_err());
            }
        }
    }

    #[test]
    fn packets_2022_with_and_without_eih() {
        for m in [
            Method::Blake3Aes128Gcm,
            Method::Blake3Aes256Gcm,
            Method::Blake3Chacha20Poly1305,
        ] {
            let kl = m.key_len();
            let ipsk = vec![7u8; kl];
            let upsk = vec![8u8; kl];
            let eih = m != Method::Blake3Chacha20Poly1305;
            let ipsks = if eih { vec![ipsk.clone()] } else { vec![] };
            let s = Sender2022 {
                method: m,
                header_key: if eih { &ipsk } else { &upsk },
                ipsks: &ipsks,
                user_key: &upsk,
                session_id: 42,
                packet_id: 3,
                client_session_id: None,
            };
            let mut out = Vec::new();
            encode_2022(&s, &dest(), b"hello", &mut out);
            let users = [(&upsk[..], psk_hash16(&upsk))];
            let r = Receiver2022 {
                method: m,
                header_key: if eih { &ipsk } else { &upsk },
                users: if eih { &users } else { &[] },
                key: &upsk,
                from_server: false,
            };
            let p = decode_2022(&r, &mut out.clone()).unwrap();
            assert_eq!((p.session_id, p.packet_id, p.addr.clone()), (42, 3, dest()));
            assert_eq!(p.user, if eih { Some(0) } else { None });
            let mut o2 = out.clone();
            let p = decode_2022(&r, &mut o2).unwrap();
            assert_eq!(&o2[p.payload], b"hello");
            // Server reply, opened by the client with its user key.
            let reply = Sender2022 {
                method: m,
                header_key: &upsk,
                ipsks: &[],
                user_key: &upsk,
                session_id: 99,
                packet_id: 0,
                client_session_id: Some(42),
            };
            let mut out = Vec::new();
            encode_2022(&reply, &dest(), b"back", &mut out);
            let rc = Receiver2022 {
                method: m,
                header_key: &upsk,
                users: &[],
                key: &upsk,
                from_server: true,
            };
            let p = decode_2022(&rc, &mut out).unwrap();
            assert_eq!(p.client_session_id, Some(42));
            assert_eq!(&out[p.payload], b"back");
            // Random bytes are rejected.
            let mut junk = vec![0x5a; 80];
            assert!(decode_2022(&r, &mut junk).is_err());
        }
    }

    #[test]
    fn session_table_forgets_idle_entries() {
        let idle = Duration::from_secs(10);
        let mut t = SessionTable::new(idle);
        let t0 = Instant::now();
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:2".parse().unwrap();
        let c: SocketAddr = "127.0.0.1:3".parse().unwrap();
        *t.entry(a, t0, || 1) += 1;
        t.insert(b, 5, t0);
        assert_eq!(t.len(), 2);
        // b stays in use, a does not.
        assert_eq!(t.get(&b, t0 + Duration::from_secs(8)), Some(&5));
        // A new client after the idle time sweeps a out; b was used 4 s ago and stays.
        t.insert(c, 7, t0 + Duration::from_secs(12));
        assert_eq!(t.len(), 2);
        assert_eq!(t.get(&a, t0 + Duration::from_secs(12)), None);
        assert_eq!(t.get(&b, t0 + Duration::from_secs(12)), Some(&5));
        // No sweep before idle/2 has passed since the last one...
        t.insert(a, 1, t0 + Duration::from_secs(13));
        assert_eq!(t.len(), 3);
        // ...and everything unused goes eventually: c comes back as a fresh entry.
        *t.entry(c, t0 + Duration::from_secs(40), || 0) += 1;
        assert_eq!(t.len(), 1);
        assert_eq!(t.get(&c, t0 + Duration::from_secs(40)), Some(&1));
    }

    #[test]
    fn window_rejects_repeats() {
        let mut w = Window::default();
        for id in [0, 1, 5, 3] {
            assert!(w.check(id));
            w.record(id);
        }
        assert!(!w.check(3));
        assert!(!w.check(5));
        assert!(w.check(4));
        w.record(5000);
        assert!(!w.check(5));
        assert!(w.check(4999));
    }
}
