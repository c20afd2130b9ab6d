//! VMess request and response headers, sans-IO: the AEAD header (alterId 0) and the legacy
//! MD5/CFB header (alterId > 0), the instruction section both carry, and the response headers.
//!
//! `request.rs` holds the AEAD and legacy request headers, `response.rs` the response header.

mod request;
mod response;

use aes::cipher::{BlockCipherDecrypt, BlockCipherEncrypt, KeyInit};
use aes::Aes128;
use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM};
use bytes::BufMut;
use md5::{Digest, Md5};

use super::kdf::{self, kdf16};
use super::legacy::fnv1a32;
use crate::common::addr::{self, AddrError};
use crate::common::{Address, Destination};

pub use super::legacy::{cfb_dec, cfb_enc, CfbDec, CfbEnc};
pub use request::{
    alter_ids, legacy_iv, legacy_user_hash, open_aead_instruction, open_aead_length,
    open_legacy_instruction, seal_aead_request, seal_legacy_request, AEAD_PREFIX,
};
pub use response::{
    open_aead_response, open_aead_response_length, response_keys_aead, response_keys_legacy,
    seal_aead_response, AEAD_RESPONSE_LEN,
};

/// Why a header was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HeaderError {
    #[error("no user matches the auth id")]
    NoUser,
    #[error("timestamp {0} s away from now")]
    Expired(i64),
    #[error("replayed auth id or session")]
    Replay,
    #[error("header length or payload fails authentication")]
    Auth,
    #[error("header checksum mismatch")]
    Checksum,
    #[error("bad address: {0}")]
    Address(String),
    #[error("unsupported security type {0}")]
    Security(u8),
    #[error("unsupported command {0}")]
    Command(u8),
    #[error("header too short")]
    Truncated,
    #[error("response auth byte mismatch")]
    ResponseAuth,
}

impl HeaderError {
    /// A short stable name for counting rejections by kind (the metrics' `reason` label).
    pub fn reason(&self) -> &'static str {
        match self {
            HeaderError::NoUser => "auth",
            HeaderError::Expired(_) => "clock_skew",
            HeaderError::Replay => "replay",
            HeaderError::Auth | HeaderError::Checksum | HeaderError::ResponseAuth => "bad_header",
            HeaderError::Address(_) => "bad_address",
            HeaderError::Security(_) | HeaderError::Command(_) => "unsupported",
            HeaderError::Truncated => "truncated",
        }
    }
}

pub type Result<T> = std::result::Result<T, HeaderError>;

/// `CmdKey = MD5(UUID || magic)`.
pub fn cmd_key(uuid: &[u8; 16]) -> [u8; 16] {
    let mut h = Md5::new();
    h.update(uuid);
    h.update(b"c48619fe-8f02-49e0-b9e9-edf763e17e21");
    h.finalize().into()
}

fn md5(parts: &[&[u8]]) -> [u8; 16] {
    let mut h = Md5::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().into()
}

/// The AES block cipher that hides a user's AuthID.
#[derive(Clone)]
pub struct AuthIdCipher(Aes128);

impl AuthIdCipher {
    pub fn new(cmd_key: &[u8; 16]) -> Self {
        let k = kdf16(cmd_key, &[kdf::AUTH_ID_KEY]);
        AuthIdCipher(Aes128::new(&k.into()))
    }

    /// `EAuID` for time `ts` and 4 random bytes.
    pub fn seal(&self, ts: i64, rand: [u8; 4]) -> [u8; 16] {
        let mut p = [0u8; 16];
        p[..8].copy_from_slice(&ts.to_be_bytes());
        p[8..12].copy_from_slice(&rand);
        let crc = crc32fast::hash(&p[..12]);
        p[12..].copy_from_slice(&crc.to_be_bytes());
        let mut b = aes::Block::from(p);
        self.0.encrypt_block(&mut b);
        b.into()
    }

    /// The timestamp inside `eauid` when its CRC matches (i.e. it is this user's).
    pub fn open(&self, eauid: &[u8; 16]) -> Option<i64> {
        let mut b = aes::Block::from(*eauid);
        self.0.decrypt_block(&mut b);
        let p: [u8; 16] = b.into();
        let crc = u32::from_be_bytes([p[12], p[13], p[14], p[15]]);
        if crc32fast::hash(&p[..12]) != crc {
            return None;
        }
        let mut ts = [0u8; 8];
        ts.copy_from_slice(&p[..8]);
        Some(i64::from_be_bytes(ts))
    }
}

/// Checks a timestamp against the ±120 s window.
pub fn check_time(ts: i64, now: i64) -> Result<()> {
    if ts < 0 || (ts - now).abs() > 120 {
        return Err(HeaderError::Expired(ts.saturating_sub(now)));
    }
    Ok(())
}

fn gcm(key: &[u8; 16]) -> LessSafeKey {
    // A 16-byte key is always valid for AES-128-GCM.
    #[allow(clippy::unwrap_used)]
    LessSafeKey::new(UnboundKey::new(&AES_128_GCM, key).unwrap())
}

fn seal_gcm(key: &[u8; 16], nonce: [u8; 12], aad: &[u8], data: &mut Vec<u8>) {
    // Sealing with a valid key and a buffer under 64 GiB cannot fail.
    let _ = gcm(key).seal_in_place_append_tag(
        Nonce::assume_unique_for_key(nonce),
        Aad::from(aad),
        data,
    );
}

fn open_gcm<'a>(
    key: &[u8; 16],
    nonce: [u8; 12],
    aad: &[u8],
    data: &'a mut [u8],
) -> Result<&'a mut [u8]> {
    gcm(key)
        .open_in_place(Nonce::assume_unique_for_key(nonce), Aad::from(aad), data)
        .map_err(|_| HeaderError::Auth)
}

/// The `Cmd` byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    Tcp = 1,
    Udp = 2,
    Mux = 3,
}

/// The instruction section: what the client asks for and the body keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub iv: [u8; 16],
    pub key: [u8; 16],
    /// Response auth byte the server echoes.
    pub v: u8,
    pub opt: u8,
    /// Security as on the wire (1, 3, 4, 5).
    pub security: u8,
    pub cmd: Command,
    /// Target (`v1.mux.cool:0` for Mux).
    pub dest: Destination,
}

/// Longest instruction section: 41 fixed + 1 + 255 domain + 15 padding + 4 checksum.
pub const MAX_INSTRUCTION: usize = 41 + 1 + 255 + 15 + 4;

/// Encodes the instruction section with `padding` (0..=15 random bytes) and its checksum.
pub fn encode_instruction(r: &Request, padding: &[u8], out: &mut Vec<u8>) {
    let p = padding.len().min(15);
    let start = out.len();
    out.put_u8(1);
    out.put_slice(&r.iv);
    out.put_slice(&r.key);
    out.put_u8(r.v);
    out.put_u8(r.opt);
    out.put_u8(((p as u8) << 4) | (r.security & 0x0f));
    out.put_u8(0);
    out.put_u8(r.cmd as u8);
    if r.cmd != Command::Mux {
        addr::v2ray::encode(&r.dest, out);
    }
    out.put_slice(&padding[..p]);
    let sum = fnv1a32(&out[start..]);
    out.put_u32(sum);
}

fn valid_domain(d: &str) -> bool {
    d.bytes()
        .all(|c| c.is_ascii_alphanumeric() || c == b'.' || c == b'-' || c == b'_')
}

/// Parses an instruction section; `Ok(None)` when more bytes are needed.
pub fn decode_instruction(buf: &[u8]) -> Result<Option<(Request, usize)>> {
    if buf.len() < 38 {
        return Ok(None);
    }
    let mut iv = [0u8; 16];
    let mut key = [0u8; 16];
    iv.copy_from_slice(&buf[1..17]);
    key.copy_from_slice(&buf[17..33]);
    let v = buf[33];
    let opt = buf[34];
    let padding = (buf[35] >> 4) as usize;
    let security = buf[35] & 0x0f;
    let cmd = match buf[37] {
        1 => Command::Tcp,
        2 => Command::Udp,
        3 => Command::Mux,
        c => return Err(HeaderError::Command(c)),
    };
    let (dest, mut pos) = if cmd == Command::Mux {
        (
            Destination::new(Address::Domain("v1.mux.cool".into()), 0),
            38,
        )
    } else {
        match addr::v2ray::decode(&buf[38..]) {
            Ok(None) => return Ok(None),
            Ok(Some((d, n))) => {
                if let Address::Domain(name) = &d.addr {
                    if !valid_domain(name) {
                        return Err(HeaderError::Address(format!("invalid domain {name:?}")));
                    }
                }
                (d, 38 + n)
            }
            Err(AddrError::BadType(t)) => {
                return Err(HeaderError::Address(format!("unknown address type {t}")))
            }
            Err(e) => return Err(HeaderError::Address(e.to_string())),
        }
    };
    pos += padding;
    if buf.len() < pos + 4 {
        return Ok(None);
    }
    let want = u32::from_be_bytes([buf[pos], buf[pos + 1], buf[pos + 2], buf[pos + 3]]);
    if fnv1a32(&buf[..pos]) != want {
        return Err(HeaderError::Checksum);
    }
    Ok(Some((
        Request {
            iv,
            key,
            v,
            opt,
            security,
            cmd,
            dest,
        },
        pos + 4,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn req(cmd: Command, dest: &str) -> Request {
        Request {
            iv: [1; 16],
            key: [2; 16],
            v: 0x5a,
            opt: 0x0d,
            security: 3,
            cmd,
            dest: Destination::parse(dest).unwrap(),
        }
    }

    #[test]
    fn instruction_layout_matches_spec_example() {
        let r = req(Command::Tcp, "example.com:443");
        let mut out = Vec::new();
        encode_instruction(&r, &[], &mut out);
        assert_eq!(out.len(), 57);
        assert_eq!(&out[33..38], &[0x5a, 0x0d, 0x03, 0x00, 0x01]);
        assert_eq!(&out[38..42], &[0x01, 0xbb, 0x02, 0x0b]);
        let (back, n) = decode_instruction(&out).unwrap().unwrap();
        assert_eq!((back, n), (r, 57));
        for cut in 0..out.len() {
            assert_eq!(decode_instruction(&out[..cut]), Ok(None), "cut {cut}");
        }
        out[40] = 9;
        assert!(decode_instruction(&out).is_err());
    }

    #[test]
    fn instruction_padding_mux_and_checksum() {
        for (cmd, d) in [(Command::Udp, "[::1]:53"), (Command::Mux, "v1.mux.cool:0")] {
            let r = req(cmd, d);
            let mut out = Vec::new();
            encode_instruction(&r, &[9; 11], &mut out);
            let (back, n) = decode_instruction(&out).unwrap().unwrap();
            assert_eq!(n, out.len());
            assert_eq!(back, r);
            out[n - 1] ^= 1;
            assert_eq!(decode_instruction(&out), Err(HeaderError::Checksum));
        }
        let mut out = Vec::new();
        encode_instruction(&req(Command::Tcp, "bad\nname:80"), &[], &mut out);
        assert!(matches!(
            decode_instruction(&out),
            Err(HeaderError::Address(_))
        ));
    }

    #[test]
    fn auth_id_round_trip_and_other_user() {
        let a = AuthIdCipher::new(&cmd_key(&[7; 16]));
        let b = AuthIdCipher::new(&cmd_key(&[8; 16]));
        let e = a.seal(1_700_000_000, [1, 2, 3, 4]);
        assert_eq!(a.open(&e), Some(1_700_000_000));
        assert_eq!(b.open(&e), None);
        assert!(check_time(100, 220).is_ok());
        assert!(check_time(99, 220).is_err());
        assert!(check_time(-1, 0).is_err());
    }
}
