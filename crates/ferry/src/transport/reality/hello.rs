//! The ClientHello: parsed by the server (everything REALITY authenticates), built by the
//! client from a browser [`Template`](super::fingerprint::Template).

use std::ops::Range;

/// Handshake message types.
pub const CLIENT_HELLO: u8 = 1;
pub const SERVER_HELLO: u8 = 2;
pub const ENCRYPTED_EXTENSIONS: u8 = 8;
pub const CERTIFICATE: u8 = 11;
pub const CERTIFICATE_VERIFY: u8 = 15;
pub const FINISHED: u8 = 20;
pub use crate::transport::tls13::record::{message, KEY_UPDATE, NEW_SESSION_TICKET};

/// Extension types.
pub const EXT_SERVER_NAME: u16 = 0;
pub const EXT_SUPPORTED_GROUPS: u16 = 10;
pub const EXT_SIGNATURE_ALGORITHMS: u16 = 13;
pub const EXT_ALPN: u16 = 16;
pub const EXT_SUPPORTED_VERSIONS: u16 = 43;
pub const EXT_KEY_SHARE: u16 = 51;

/// Named groups.
pub const X25519: u16 = 0x001d;
pub const X25519MLKEM768: u16 = 0x11ec;
/// ML-KEM-768 encapsulation key (1184) + X25519 (32), the client's hybrid share.
pub const MLKEM_CLIENT_SHARE: usize = 1184 + 32;
/// ML-KEM-768 ciphertext (1088) + X25519 (32), the server's hybrid share.
pub const MLKEM_SERVER_SHARE: usize = 1088 + 32;

pub const TLS13: u16 = 0x0304;
/// Offset of the 32-byte session id in a ClientHello message (type, length, version, random,
/// session id length).
pub const SESSION_ID_AT: usize = 1 + 3 + 2 + 32 + 1;

/// A GREASE value (RFC 8701): 0x?A?A with both bytes equal.
pub fn is_grease(v: u16) -> bool {
    v & 0x0f0f == 0x0a0a && v >> 8 == v & 0xff
}

/// A byte reader over a message.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn new(b: &'a [u8]) -> Self {
        Reader { b, at: 0 }
    }
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn u16(&mut self) -> Option<u16> {
        let s = self.take(2)?;
        Some(u16::from_be_bytes([s[0], s[1]]))
    }
    fn u24(&mut self) -> Option<usize> {
        let s = self.take(3)?;
        Some((s[0] as usize) << 16 | (s[1] as usize) << 8 | s[2] as usize)
    }
    fn vec8(&mut self) -> Option<&'a [u8]> {
        let n = self.u8()? as usize;
        self.take(n)
    }
    fn vec16(&mut self) -> Option<&'a [u8]> {
        let n = self.u16()? as usize;
        self.take(n)
    }
    fn done(&self) -> bool {
        self.at == self.b.len()
    }
}

/// What a server needs of a ClientHello.
#[derive(Debug, Default, Clone)]
pub struct ClientHello {
    /// The whole handshake message, header included.
    pub raw: Vec<u8>,
    pub random: [u8; 32],
    pub session_id: Vec<u8>,
    pub cipher_suites: Vec<u16>,
    /// The host name of `server_name`, if any.
    pub sni: Option<String>,
    pub versions: Vec<u16>,
    /// (group, where its key exchange data lies in `raw`), in the client's order.
    pub key_shares: Vec<(u16, Range<usize>)>,
    pub groups: Vec<u16>,
    pub alpn: Vec<Vec<u8>>,
    pub signature_algorithms: Vec<u16>,
}

/// Why a ClientHello was refused.
#[derive(Debug, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "malformed ClientHello: {}", self.0)
    }
}

impl ClientHello {
    /// Parses a ClientHello handshake message (header included).
    pub fn parse(msg: &[u8]) -> Result<ClientHello, Malformed> {
        let bad = Malformed;
        let mut r = Reader::new(msg);
        if r.u8() != Some(CLIENT_HELLO) {
            return Err(bad("not a ClientHello"));
        }
        let len = r.u24().ok_or(bad("truncated"))?;
        if len + 4 != msg.len() {
            return Err(bad("length"));
        }
        let mut ch = ClientHello {
            raw: msg.to_vec(),
            ..Default::default()
        };
        r.u16().ok_or(bad("truncated"))?;
        ch.random
            .copy_from_slice(r.take(32).ok_or(bad("truncated random"))?);
        let sid = r.vec8().ok_or(bad("session id"))?;
        if sid.len() > 32 {
            return Err(bad("session id longer than 32"));
        }
        ch.session_id = sid.to_vec();
        let suites = r.vec16().ok_or(bad("cipher suites"))?;
        if suites.len() % 2 != 0 {
            return Err(bad("cipher suites"));
        }
        ch.cipher_suites = suites
            .chunks(2)
            .map(|c| u16::from_be_bytes([c[0], c[1]]))
            .collect();
        r.vec8().ok_or(bad("compression methods"))?;
        if r.done() {
            return Ok(ch);
        }
        let exts_at = r.at + 2;
        let exts = r.vec16().ok_or(bad("extensions"))?;
        if !r.done() {
            return Err(bad("bytes after the extensions"));
        }
        let mut e = Reader::new(exts);
        let mut seen = Vec::new();
        while !e.done() {
            let ty = e.u16().ok_or(bad("extension"))?;
            let data_at = exts_at + e.at + 2;
            let data = e.vec16().ok_or(bad("extension length"))?;
            if seen.contains(&ty) {
                return Err(bad("duplicate extension"));
            }
            seen.push(ty);
            let mut d = Reader::new(data);
            match ty {
                EXT_SERVER_NAME => {
                    let mut l = Reader::new(d.vec16().ok_or(bad("server_name"))?);
                    while !l.done() {
                        let kind = l.u8().ok_or(bad("server_name"))?;
                        let name = l.vec16().ok_or(bad("server_name"))?;
                        if kind == 0 && ch.sni.is_none() {
                            let s = std::str::from_utf8(name).map_err(|_| bad("server_name"))?;
                            ch.sni = Some(s.to_string());
                        }
                    }
                }
                EXT_SUPPORTED_VERSIONS => {
                    let l = d.vec8().ok_or(bad("supported_versions"))?;
                    ch.versions = pairs(l).ok_or(bad("supported_versions"))?;
                }
                EXT_SUPPORTED_GROUPS => {
                    let l = d.vec16().ok_or(bad("supported_groups"))?;
                    ch.groups = pairs(l).ok_or(bad("supported_groups"))?;
                }
                EXT_SIGNATURE_ALGORITHMS => {
                    let l = d.vec16().ok_or(bad("signature_algorithms"))?;
                    ch.signature_algorithms = pairs(l).ok_or(bad("signature_algorithms"))?;
                }
                EXT_ALPN => {
                    let mut l = Reader::new(d.vec16().ok_or(bad("alpn"))?);
                    while !l.done() {
                        ch.alpn.push(l.vec8().ok_or(bad("alpn"))?.to_vec());
                    }
                }
                EXT_KEY_SHARE => {
                    let list_at = data_at + 2;
                    let mut l = Reader::new(d.vec16().ok_or(bad("key_share"))?);
                    while !l.done() {
                        let group = l.u16().ok_or(bad("key_share"))?;
                        let at = list_at + l.at + 2;
                        let k = l.vec16().ok_or(bad("key_share"))?;
                        if ch.key_shares.iter().any(|(g, _)| *g == group) {
                            return Err(bad("duplicate key share"));
                        }
                        ch.key_shares.push((group, at..at + k.len()));
                    }
                }
                _ => continue,
            }
            if !d.done() {
                return Err(bad("extension has trailing bytes"));
            }
        }
        Ok(ch)
    }

    /// The key exchange data the client sent for `group`.
    pub fn share(&self, group: u16) -> Option<&[u8]> {
        let (_, r) = self.key_shares.iter().find(|(g, _)| *g == group)?;
        self.raw.get(r.clone())
    }

    /// The message with its session id zeroed: REALITY's AAD.
    pub fn zeroed_session_id(&self) -> Option<Vec<u8>> {
        if self.session_id.len() != 32 {
            return None;
        }
        let mut a = self.raw.clone();
        a[SESSION_ID_AT..SESSION_ID_AT + 32].fill(0);
        Some(a)
    }
}

fn pairs(b: &[u8]) -> Option<Vec<u16>> {
    b.len().is_multiple_of(2).then(|| {
        b.chunks(2)
            .map(|c| u16::from_be_bytes([c[0], c[1]]))
            .collect()
    })
}

/// Collects a handshake message that may span several plaintext handshake records (the
/// ClientHello, the target's ServerHello): `records` is the bytes read so far. Returns the
/// message and the number of bytes of `records` it used, or `Ok(None)` when more is needed.
pub fn message_from_records(
    records: &[u8],
    max: usize,
) -> Result<Option<(Vec<u8>, usize)>, Malformed> {
    let mut msg = Vec::new();
    let mut at = 0;
    loop {
        let Some((ty, len)) = super::record::header(&records[at..]) else {
            return Ok(None);
        };
        if ty != super::record::HANDSHAKE || records[at + 1] != 3 {
            return Err(Malformed("not a handshake record"));
        }
        if len == 0 || len > super::record::MAX_PLAIN {
            return Err(Malformed("record length"));
        }
        let Some(body) = records.get(at + 5..at + 5 + len) else {
            return Ok(None);
        };
        msg.extend_from_slice(body);
        at += 5 + len;
        if msg.len() >= 4 {
            let want = 4 + ((msg[1] as usize) << 16 | (msg[2] as usize) << 8 | msg[3] as usize);
            if want > max {
                return Err(Malformed("message too long"));
            }
            if msg.len() == want {
                return Ok(Some((msg, at)));
            }
            if msg.len() > want {
                return Err(Malformed("a second message after it"));
            }
        }
    }
}

/// What a client needs of a ServerHello (and what the server copies of the target's).
#[derive(Debug, Clone)]
pub struct ServerHello {
    pub raw: Vec<u8>,
    pub random: [u8; 32],
    pub session_id: Vec<u8>,
    pub suite: u16,
    pub version: Option<u16>,
    pub group: u16,
    /// Where the key exchange data lies in `raw`.
    pub share: Range<usize>,
}

/// The random of a HelloRetryRequest (RFC 8446 §4.1.3).
pub const HRR_RANDOM: [u8; 32] = [
    0xcf, 0x21, 0xad, 0x74, 0xe5, 0x9a, 0x61, 0x11, 0xbe, 0x1d, 0x8c, 0x02, 0x1e, 0x65, 0xb8, 0x91,
    0xc2, 0xa2, 0x11, 0x16, 0x7a, 0xbb, 0x8c, 0x5e, 0x07, 0x9e, 0x09, 0xe2, 0xc8, 0xa8, 0x33, 0x9c,
];

impl ServerHello {
    pub fn parse(msg: &[u8]) -> Result<ServerHello, Malformed> {
        let bad = Malformed;
        let mut r = Reader::new(msg);
        if r.u8() != Some(SERVER_HELLO) {
            return Err(bad("not a ServerHello"));
        }
        if r.u24().map(|l| l + 4) != Some(msg.len()) {
            return Err(bad("length"));
        }
        if r.u16() != Some(0x0303) {
            return Err(bad("legacy version"));
        }
        let mut random = [0u8; 32];
        random.copy_from_slice(r.take(32).ok_or(bad("random"))?);
        if random == HRR_RANDOM {
            return Err(bad("HelloRetryRequest"));
        }
        let session_id = r.vec8().ok_or(bad("session id"))?.to_vec();
        let suite = r.u16().ok_or(bad("suite"))?;
        if r.u8() != Some(0) {
            return Err(bad("compression"));
        }
        let exts_at = r.at + 2;
        let exts = r.vec16().ok_or(bad("extensions"))?;
        let mut e = Reader::new(exts);
        let (mut version, mut group, mut share) = (None, 0, 0..0);
        while !e.done() {
            let ty = e.u16().ok_or(bad("extension"))?;
            let data_at = exts_at + e.at + 2;
            let data = e.vec16().ok_or(bad("extension"))?;
            let mut d = Reader::new(data);
            match ty {
                EXT_SUPPORTED_VERSIONS => version = Some(d.u16().ok_or(bad("version"))?),
                EXT_KEY_SHARE => {
                    group = d.u16().ok_or(bad("key_share"))?;
                    let k = d.vec16().ok_or(bad("key_share"))?;
                    share = data_at + 4..data_at + 4 + k.len();
                }
                _ => continue,
            }
            if !d.done() {
                return Err(bad("extension has trailing bytes"));
            }
        }
        if !r.done() {
            return Err(bad("trailing bytes"));
        }
        Ok(ServerHello {
            raw: msg.to_vec(),
            random,
            session_id,
            suite,
            version,
            group,
            share,
        })
    }
}

/// The private halves of the key shares a built ClientHello carries.
pub struct ClientKeys {
    /// The stand-alone X25519 share (REALITY's auth key is agreed with it).
    pub x25519: Option<[u8; 32]>,
    /// The X25519MLKEM768 share: ML-KEM decapsulation key and its own X25519 key.
    pub hybrid: Option<(
        aws_lc_rs::kem::DecapsulationKey<aws_lc_rs::kem::AlgorithmId>,
        [u8; 32],
    )>,
}

impl ClientKeys {
    /// The X25519 key REALITY authenticates with: the stand-alone share, else the hybrid's.
    pub fn auth_private(&self) -> Option<&[u8; 32]> {
        self.x25519
            .as_ref()
            .or(self.hybrid.as_ref().map(|(_, x)| x))
    }

    /// The shared secret for the group and share the server chose.
    pub fn agree(&self, group: u16, server_share: &[u8]) -> Option<Vec<u8>> {
        match group {
            X25519 => Some(super::keys::x25519(self.x25519.as_ref()?, server_share)?.to_vec()),
            X25519MLKEM768 => {
                let (dk, x) = self.hybrid.as_ref()?;
                if server_share.len() != MLKEM_SERVER_SHARE {
                    return None;
                }
                let ct = aws_lc_rs::kem::Ciphertext::from(&server_share[..1088]);
                let ss = dk.decapsulate(ct).ok()?;
                let mut out = ss.as_ref().to_vec();
                out.extend_from_slice(&super::keys::x25519(x, &server_share[1088..])?);
                Some(out)
            }
            _ => None,
        }
    }
}

/// Per-connection GREASE values, as BoringSSL draws them: one per use, the two GREASE
/// extensions never equal, the key share's the same as the group list's.
struct Grease {
    suite: u16,
    group: u16,
    ext1: u16,
    ext2: u16,
    version: u16,
}

fn grease_value(b: u8) -> u16 {
    let v = (b & 0xf0) | 0x0a;
    u16::from_be_bytes([v, v])
}

impl Grease {
    fn new() -> Grease {
        let mut r = [0u8; 5];
        crate::common::rand::fill(&mut r);
        let ext1 = grease_value(r[2]);
        let mut ext2 = grease_value(r[3]);
        if ext2 == ext1 {
            ext2 ^= 0x1010;
        }
        Grease {
            suite: grease_value(r[0]),
            group: grease_value(r[1]),
            ext1,
            ext2,
            version: grease_value(r[4]),
        }
    }
}

fn put_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_be_bytes());
}

fn put_list16(out: &mut Vec<u8>, vals: &[u16], grease: u16) {
    put_u16(out, (vals.len() * 2) as u16);
    for v in vals {
        put_u16(
            out,
            if *v == super::fingerprint::G {
                grease
            } else {
                *v
            },
        );
    }
}

/// Builds a ClientHello handshake message from `t` with a zero session id (REALITY fills it in
/// afterwards), and the private keys of its shares.
pub fn build(t: &super::fingerprint::Template, sni: Option<&str>) -> (Vec<u8>, ClientKeys) {
    build_with_alpn(t, sni, t.alpn)
}

/// [`build`] offering `alpn` instead of the template's (none: no ALPN extension, and no ALPS
/// without h2).
#[allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "key generation from the system generator, which rand::fill already treats as fatal"
)]
pub fn build_with_alpn(
    t: &super::fingerprint::Template,
    sni: Option<&str>,
    alpn: &[&str],
) -> (Vec<u8>, ClientKeys) {
    use super::fingerprint::{Ext, Order};
    let g = Grease::new();
    let mut keys = ClientKeys {
        x25519: None,
        hybrid: None,
    };
    let mut exts: Vec<(Ext, Vec<u8>, u16)> = Vec::new();
    for e in t.extensions {
        let mut d = Vec::new();
        let ty = match *e {
            Ext::Grease => g.ext1,
            Ext::GreaseOne => {
                d.push(0);
                g.ext2
            }
            Ext::Sni => {
                let Some(name) = sni else { continue };
                put_u16(&mut d, (name.len() + 3) as u16);
                d.push(0);
                put_u16(&mut d, name.len() as u16);
                d.extend_from_slice(name.as_bytes());
                EXT_SERVER_NAME
            }
            Ext::Raw(ty, data) => {
                d.extend_from_slice(data);
                ty
            }
            Ext::Groups(list) => {
                put_list16(&mut d, list, g.group);
                EXT_SUPPORTED_GROUPS
            }
            Ext::SigAlgs(list) => {
                put_list16(&mut d, list, 0);
                EXT_SIGNATURE_ALGORITHMS
            }
            Ext::Alpn => {
                if alpn.is_empty() {
                    continue;
                }
                let mut l = Vec::new();
                for p in alpn {
                    l.push(p.len() as u8);
                    l.extend_from_slice(p.as_bytes());
                }
                put_u16(&mut d, l.len() as u16);
                d.extend_from_slice(&l);
                EXT_ALPN
            }
            Ext::Alps(cp) => {
                if !alpn.contains(&"h2") {
                    continue;
                }
                put_u16(&mut d, 3);
                d.push(2);
                d.extend_from_slice(b"h2");
                cp
            }
            Ext::KeyShares(groups) => {
                let mut l = Vec::new();
                for grp in groups {
                    match *grp {
                        super::fingerprint::G => {
                            put_u16(&mut l, g.group);
                            put_u16(&mut l, 1);
                            l.push(0);
                        }
                        X25519 => {
                            let k = match (&keys.hybrid, t.reuse_hybrid_x25519) {
                                (Some((_, k)), true) => *k,
                                _ => {
                                    let mut k = [0u8; 32];
                                    crate::common::rand::fill(&mut k);
                                    k
                                }
                            };
                            put_u16(&mut l, X25519);
                            put_u16(&mut l, 32);
                            l.extend_from_slice(&super::keys::x25519_public(&k));
                            keys.x25519 = Some(k);
                        }
                        0x0017 => {
                            use aws_lc_rs::agreement::{PrivateKey, ECDH_P256};
                            let k = PrivateKey::generate(&ECDH_P256).expect("P-256 key");
                            let p = k.compute_public_key().expect("P-256 public key");
                            put_u16(&mut l, 0x0017);
                            put_u16(&mut l, p.as_ref().len() as u16);
                            l.extend_from_slice(p.as_ref());
                        }
                        X25519MLKEM768 => {
                            use aws_lc_rs::kem::{DecapsulationKey, ML_KEM_768};
                            let dk = DecapsulationKey::generate(&ML_KEM_768).expect("ML-KEM key");
                            let ek = dk
                                .encapsulation_key()
                                .and_then(|e| e.key_bytes())
                                .expect("ML-KEM encapsulation key");
                            let mut k = [0u8; 32];
                            crate::common::rand::fill(&mut k);
                            put_u16(&mut l, X25519MLKEM768);
                            put_u16(&mut l, MLKEM_CLIENT_SHARE as u16);
                            l.extend_from_slice(ek.as_ref());
                            l.extend_from_slice(&super::keys::x25519_public(&k));
                            keys.hybrid = Some((dk, k));
                        }
                        other => {
                            // A group the template lists but Ferry cannot use: an empty
                            // share would be malformed, so it is left out.
                            let _ = other;
                        }
                    }
                }
                put_u16(&mut d, l.len() as u16);
                d.extend_from_slice(&l);
                EXT_KEY_SHARE
            }
            Ext::Versions(list) => {
                d.push((list.len() * 2) as u8);
                for v in list {
                    put_u16(
                        &mut d,
                        if *v == super::fingerprint::G {
                            g.version
                        } else {
                            *v
                        },
                    );
                }
                EXT_SUPPORTED_VERSIONS
            }
            Ext::EchGrease { aeads, payloads } => {
                let mut r = [0u8; 3];
                crate::common::rand::fill(&mut r);
                d.push(0); // outer
                put_u16(&mut d, 0x0001); // HKDF-SHA256
                put_u16(&mut d, aeads[r[0] as usize % aeads.len()]);
                d.push(r[1]); // config id
                              // enc: a real X25519 public key, as an HPKE sender's would be.
                let mut k = [0u8; 32];
                crate::common::rand::fill(&mut k);
                put_u16(&mut d, 32);
                d.extend_from_slice(&super::keys::x25519_public(&k));
                let len = payloads[r[2] as usize % payloads.len()];
                let mut p = vec![0u8; len];
                crate::common::rand::fill(&mut p);
                put_u16(&mut d, len as u16);
                d.extend_from_slice(&p);
                0xfe0d
            }
            Ext::Padding => 0x0015, // sized below, once the rest is known
        };
        exts.push((*e, d, ty));
    }
    if t.order == Order::ChromeShuffle {
        // Fisher-Yates over every extension but GREASE and padding, which keep their places.
        let movable: Vec<usize> = (0..exts.len())
            .filter(|i| !matches!(exts[*i].0, Ext::Grease | Ext::GreaseOne | Ext::Padding))
            .collect();
        let mut r = vec![0u8; movable.len() * 2];
        crate::common::rand::fill(&mut r);
        for k in (1..movable.len()).rev() {
            let j = u16::from_be_bytes([r[2 * k], r[2 * k + 1]]) as usize % (k + 1);
            exts.swap(movable[k], movable[j]);
        }
    }
    let mut body = Vec::with_capacity(2048);
    put_u16(&mut body, 0x0303);
    let mut random = [0u8; 32];
    crate::common::rand::fill(&mut random);
    body.extend_from_slice(&random);
    body.push(32);
    body.extend_from_slice(&[0u8; 32]);
    put_list16(&mut body, t.suites, g.suite);
    body.extend_from_slice(&[1, 0]);
    let ext_len: usize = exts
        .iter()
        .filter(|(e, _, _)| !matches!(e, Ext::Padding))
        .map(|(_, d, _)| 4 + d.len())
        .sum();
    let mut ext_bytes = Vec::with_capacity(ext_len + 512);
    for (e, d, ty) in &exts {
        if matches!(e, Ext::Padding) {
            // BoringSSL: a hello of 256..511 bytes (record payload) is padded to 512.
            let unpadded = 4 + body.len() + 2 + ext_len;
            if unpadded > 256 && unpadded < 512 {
                let pad = (512 - unpadded).saturating_sub(4).max(1);
                put_u16(&mut ext_bytes, 0x0015);
                put_u16(&mut ext_bytes, pad as u16);
                ext_bytes.resize(ext_bytes.len() + pad, 0);
            }
            continue;
        }
        put_u16(&mut ext_bytes, *ty);
        put_u16(&mut ext_bytes, d.len() as u16);
        ext_bytes.extend_from_slice(d);
    }
    put_u16(&mut body, ext_bytes.len() as u16);
    body.extend_from_slice(&ext_bytes);
    let mut msg = Vec::with_capacity(body.len() + 4);
    message(CLIENT_HELLO, &body, &mut msg);
    (msg, keys)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::reality::fingerprint::{CHROME, EDGE, FIREFOX, IOS, SAFARI};

    #[test]
    fn every_template_builds_a_hello_the_parser_reads_back() {
        for t in [&CHROME, &FIREFOX, &SAFARI, &IOS, &EDGE] {
            let (msg, keys) = build(t, Some("reality.test"));
            let ch = ClientHello::parse(&msg).unwrap();
            assert_eq!(ch.sni.as_deref(), Some("reality.test"));
            assert_eq!(ch.session_id, vec![0u8; 32]);
            assert!(ch.versions.contains(&TLS13));
            assert!(ch.share(X25519).is_some_and(|s| s.len() == 32));
            assert!(keys.auth_private().is_some());
            assert_eq!(ch.alpn, vec![b"h2".to_vec(), b"http/1.1".to_vec()]);
        }
        // Chrome: the hybrid share comes before X25519, GREASE first in the suites.
        let (msg, _) = build(&CHROME, None);
        let ch = ClientHello::parse(&msg).unwrap();
        assert_eq!(ch.sni, None);
        let groups: Vec<u16> = ch.key_shares.iter().map(|(g, _)| *g).collect();
        assert_eq!(&groups[1..], &[X25519MLKEM768, X25519]);
        assert!(is_grease(groups[0]) && is_grease(ch.cipher_suites[0]));
        assert_eq!(ch.share(X25519MLKEM768).unwrap().len(), MLKEM_CLIENT_SHARE);
        // uTLS Chrome 133 without SNI: 1552 bytes plus an ECH payload of 144 to 240.
        assert!(
            [144, 176, 208, 240].contains(&(msg.len() - 1552)),
            "{}",
            msg.len()
        );
    }

    #[test]
    fn chrome_shuffles_its_extensions_but_keeps_grease_at_both_ends() {
        let order = |msg: &[u8]| -> Vec<u16> {
            let ch = ClientHello::parse(msg).unwrap();
            let mut r = Reader::new(&ch.raw[4..]);
            r.take(2 + 32).unwrap();
            r.vec8().unwrap();
            r.vec16().unwrap();
            r.vec8().unwrap();
            let mut e = Reader::new(r.vec16().unwrap());
            let mut v = Vec::new();
            while !e.done() {
                v.push(e.u16().unwrap());
                e.vec16().unwrap();
            }
            v
        };
        let orders: Vec<Vec<u16>> = (0..8)
            .map(|_| order(&build(&CHROME, Some("a.b")).0))
            .collect();
        for o in &orders {
            assert!(is_grease(o[0]) && is_grease(*o.last().unwrap()));
            assert_ne!(o[0], *o.last().unwrap());
            assert_eq!(o.len(), 18);
        }
        assert!(orders.iter().any(|o| o[1..17] != orders[0][1..17]));
    }

    /// Rewrites the key_share extension of a built hello with `shares`, fixing the lengths.
    fn with_key_share(msg: &[u8], shares: &[u8]) -> Vec<u8> {
        let ch = ClientHello::parse(msg).unwrap();
        // key_share's data begins 2 bytes (its list length) before the first share.
        let first = ch.key_shares[0].1.start - 4;
        let list_at = first - 2;
        let ext_at = list_at - 4;
        let old_len = u16::from_be_bytes([msg[ext_at + 2], msg[ext_at + 3]]) as usize;
        let mut data = (shares.len() as u16).to_be_bytes().to_vec();
        data.extend_from_slice(shares);
        let mut out = msg[..ext_at + 2].to_vec();
        out.extend_from_slice(&(data.len() as u16).to_be_bytes());
        out.extend_from_slice(&data);
        out.extend_from_slice(&msg[ext_at + 4 + old_len..]);
        let grow = data.len() as isize - old_len as isize;
        // The extensions block length and the message length.
        let body_len = out.len() - 4;
        out[1..4].copy_from_slice(&(body_len as u32).to_be_bytes()[1..]);
        let mut r = Reader::new(&out[4..]);
        r.take(34).unwrap();
        r.vec8().unwrap();
        r.vec16().unwrap();
        r.vec8().unwrap();
        let exts_len_at = 4 + r.at;
        let old = u16::from_be_bytes([out[exts_len_at], out[exts_len_at + 1]]) as isize;
        out[exts_len_at..exts_len_at + 2].copy_from_slice(&((old + grow) as u16).to_be_bytes());
        out
    }

    #[test]
    fn duplicate_key_shares_and_oversized_extensions_are_refused() {
        let (msg, _) = build(&EDGE, Some("reality.test"));
        let mut x = vec![0x00, 0x1d, 0x00, 0x20];
        x.extend_from_slice(&[9u8; 32]);
        let one = with_key_share(&msg, &x);
        assert_eq!(ClientHello::parse(&one).unwrap().key_shares.len(), 1);
        let two = with_key_share(&msg, &[x.clone(), x.clone()].concat());
        assert_eq!(
            ClientHello::parse(&two).unwrap_err(),
            Malformed("duplicate key share")
        );
        // A share that claims more bytes than the extension holds.
        let mut long = x.clone();
        long[3] = 0xff;
        assert!(ClientHello::parse(&with_key_share(&msg, &long)).is_err());
        // An extension whose length runs past the message: the first one's, made 0xffff.
        let mut bad = one.clone();
        let mut r = Reader::new(&bad[4..]);
        r.take(34).unwrap();
        r.vec8().unwrap();
        r.vec16().unwrap();
        r.vec8().unwrap();
        let first_len_at = 4 + r.at + 2 + 2;
        bad[first_len_at..first_len_at + 2].copy_from_slice(&[0xff, 0xff]);
        assert!(ClientHello::parse(&bad).is_err());
    }

    #[test]
    fn hellos_split_across_records_are_joined_and_bad_ones_refused() {
        let (msg, _) = build(&CHROME, Some("reality.test"));
        let mut recs = Vec::new();
        for part in msg.chunks(700) {
            recs.extend_from_slice(&[22, 3, 1]);
            recs.extend_from_slice(&(part.len() as u16).to_be_bytes());
            recs.extend_from_slice(part);
        }
        for cut in [0, 3, 5, 700, recs.len() - 1] {
            assert_eq!(message_from_records(&recs[..cut], 1 << 16), Ok(None));
        }
        let (got, used) = message_from_records(&recs, 1 << 16).unwrap().unwrap();
        assert_eq!((got, used), (msg.clone(), recs.len()));
        assert!(message_from_records(b"GET / HTTP/1.1\r\n", 1 << 16).is_err());
        // Every truncation of the message itself is refused by the parser, never a panic.
        for cut in 0..msg.len() {
            assert!(ClientHello::parse(&msg[..cut]).is_err());
        }
    }
}
