//! Parsing: the ClientHello (everything REALITY authenticates), the ServerHello, and a
//! handshake message spread over records.

use std::ops::Range;

use super::reader::Reader;
use super::{
    CLIENT_HELLO, EXT_ALPN, EXT_KEY_SHARE, EXT_SERVER_NAME, EXT_SIGNATURE_ALGORITHMS,
    EXT_SUPPORTED_GROUPS, EXT_SUPPORTED_VERSIONS, SERVER_HELLO, SESSION_ID_AT,
};
use crate::transport::tls13::record;

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
        let Some((ty, len)) = record::header(&records[at..]) else {
            return Ok(None);
        };
        if ty != record::HANDSHAKE || records[at + 1] != 3 {
            return Err(Malformed("not a handshake record"));
        }
        if len == 0 || len > record::MAX_PLAIN {
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
