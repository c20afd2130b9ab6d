//! VMess request and response headers, sans-IO: the AEAD header (alterId 0) and the legacy
//! MD5/CFB header (alterId > 0), the instruction section both carry, and the response headers.

use aes::cipher::{BlockCipherDecrypt, BlockCipherEncrypt, KeyInit};
use aes::Aes128;
use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM};
use bytes::BufMut;
use hmac::{Hmac, Mac};
use md5::{Digest, Md5};

use super::kdf::{self, kdf12, kdf16};
use super::legacy::fnv1a32;
use crate::common::addr::{self, AddrError};
use crate::common::{Address, Destination};

pub use super::legacy::{cfb_dec, cfb_enc, CfbDec, CfbEnc};

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

// ---------------------------------------------------------------- AEAD request header

/// Bytes before the sealed instruction: EAuID, sealed length, nonce.
pub const AEAD_PREFIX: usize = 16 + 18 + 8;

/// Seals an AEAD request header (`EAuID || ALength || Nonce || AHeader`) onto `out`.
pub fn seal_aead_request(
    cmd_key: &[u8; 16],
    eauid: &[u8; 16],
    nonce: &[u8; 8],
    instruction: &[u8],
    out: &mut Vec<u8>,
) {
    out.extend_from_slice(eauid);
    let mut len = (instruction.len() as u16).to_be_bytes().to_vec();
    let lk = kdf16(cmd_key, &[kdf::REQ_LEN_KEY, eauid, nonce]);
    let ln = kdf12(cmd_key, &[kdf::REQ_LEN_NONCE, eauid, nonce]);
    seal_gcm(&lk, ln, eauid, &mut len);
    out.extend_from_slice(&len);
    out.extend_from_slice(nonce);
    let hk = kdf16(cmd_key, &[kdf::REQ_KEY, eauid, nonce]);
    let hn = kdf12(cmd_key, &[kdf::REQ_NONCE, eauid, nonce]);
    let mut body = instruction.to_vec();
    seal_gcm(&hk, hn, eauid, &mut body);
    out.extend_from_slice(&body);
}

/// Opens the 18-byte sealed length of an AEAD request; returns the instruction length `L`.
pub fn open_aead_length(
    cmd_key: &[u8; 16],
    eauid: &[u8; 16],
    sealed: &[u8; 18],
    nonce: &[u8; 8],
) -> Result<usize> {
    let lk = kdf16(cmd_key, &[kdf::REQ_LEN_KEY, eauid, nonce]);
    let ln = kdf12(cmd_key, &[kdf::REQ_LEN_NONCE, eauid, nonce]);
    let mut b = *sealed;
    let p = open_gcm(&lk, ln, eauid, &mut b)?;
    Ok(u16::from_be_bytes([p[0], p[1]]) as usize)
}

/// Opens the sealed instruction (`L + 16` bytes, in place) and parses it.
pub fn open_aead_instruction(
    cmd_key: &[u8; 16],
    eauid: &[u8; 16],
    nonce: &[u8; 8],
    sealed: &mut [u8],
) -> Result<Request> {
    let hk = kdf16(cmd_key, &[kdf::REQ_KEY, eauid, nonce]);
    let hn = kdf12(cmd_key, &[kdf::REQ_NONCE, eauid, nonce]);
    let plain = open_gcm(&hk, hn, eauid, sealed)?;
    match decode_instruction(plain)? {
        Some((r, _)) => Ok(r),
        None => Err(HeaderError::Truncated),
    }
}

// ---------------------------------------------------------------- legacy request header

/// The alter ids derived from a primary UUID (`alterId` of them).
pub fn alter_ids(primary: &[u8; 16], count: usize) -> Vec<[u8; 16]> {
    let mut out = Vec::with_capacity(count);
    let mut prev = *primary;
    for _ in 0..count {
        let mut h = Md5::new();
        h.update(prev);
        h.update(b"16167dc8-16b6-4e6d-b8bb-65dd68113a81");
        let next = loop {
            let d: [u8; 16] = h.clone().finalize().into();
            if d != prev {
                break d;
            }
            h.update(b"533eff8a-4113-4b10-b5ce-0f5d76b98cd2");
        };
        out.push(next);
        prev = next;
    }
    out
}

/// `HMAC-MD5(id, BE64(ts))`: the first 16 bytes of a legacy request.
pub fn legacy_user_hash(id: &[u8; 16], ts: i64) -> [u8; 16] {
    let mut m = <Hmac<Md5> as KeyInit>::new_from_slice(id).unwrap_or_else(|_| {
        // HMAC accepts any key length.
        unreachable!()
    });
    m.update(&ts.to_be_bytes());
    m.finalize().into_bytes().into()
}

/// IV of the legacy header's CFB: `MD5(ts8 × 4)`.
pub fn legacy_iv(ts: i64) -> [u8; 16] {
    let t = ts.to_be_bytes();
    md5(&[&t, &t, &t, &t])
}

/// Seals a legacy request header: user hash of `id` (an alter id) then the CFB instruction.
pub fn seal_legacy_request(
    primary_cmd_key: &[u8; 16],
    id: &[u8; 16],
    ts: i64,
    instruction: &[u8],
    out: &mut Vec<u8>,
) {
    out.extend_from_slice(&legacy_user_hash(id, ts));
    let start = out.len();
    out.extend_from_slice(instruction);
    cfb_enc(primary_cmd_key, &legacy_iv(ts)).encrypt(&mut out[start..]);
}

/// Decrypts and parses a legacy instruction from the bytes after the user hash.
/// `Ok(None)` when more bytes are needed.
pub fn open_legacy_instruction(
    primary_cmd_key: &[u8; 16],
    ts: i64,
    buf: &[u8],
) -> Result<Option<(Request, usize)>> {
    let n = buf.len().min(MAX_INSTRUCTION);
    let mut plain = [0u8; MAX_INSTRUCTION];
    plain[..n].copy_from_slice(&buf[..n]);
    cfb_dec(primary_cmd_key, &legacy_iv(ts)).decrypt(&mut plain[..n]);
    decode_instruction(&plain[..n])
}

// ---------------------------------------------------------------- response header

/// Response body key and IV in AEAD header mode.
pub fn response_keys_aead(key: &[u8; 16], iv: &[u8; 16]) -> ([u8; 16], [u8; 16]) {
    let k = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, key);
    let i = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, iv);
    let mut rk = [0u8; 16];
    let mut ri = [0u8; 16];
    rk.copy_from_slice(&k.as_ref()[..16]);
    ri.copy_from_slice(&i.as_ref()[..16]);
    (rk, ri)
}

/// Response body key and IV in legacy header mode.
pub fn response_keys_legacy(key: &[u8; 16], iv: &[u8; 16]) -> ([u8; 16], [u8; 16]) {
    (md5(&[key]), md5(&[iv]))
}

/// Length of the AEAD response header with the 4-byte plaintext Xray and Ferry send.
pub const AEAD_RESPONSE_LEN: usize = 18 + 4 + 16;

/// Seals the AEAD response header `V 00 00 00` onto `out`.
pub fn seal_aead_response(rkey: &[u8; 16], riv: &[u8; 16], v: u8, out: &mut Vec<u8>) {
    let plain = [v, 0, 0, 0];
    let mut len = (plain.len() as u16).to_be_bytes().to_vec();
    seal_gcm(
        &kdf16(rkey, &[kdf::RESP_LEN_KEY]),
        kdf12(riv, &[kdf::RESP_LEN_NONCE]),
        &[],
        &mut len,
    );
    out.extend_from_slice(&len);
    let mut body = plain.to_vec();
    seal_gcm(
        &kdf16(rkey, &[kdf::RESP_KEY]),
        kdf12(riv, &[kdf::RESP_NONCE]),
        &[],
        &mut body,
    );
    out.extend_from_slice(&body);
}

/// Opens the 18-byte length of an AEAD response header.
pub fn open_aead_response_length(rkey: &[u8; 16], riv: &[u8; 16], sealed: &[u8]) -> Result<usize> {
    let mut b = [0u8; 18];
    if sealed.len() < 18 {
        return Err(HeaderError::Truncated);
    }
    b.copy_from_slice(&sealed[..18]);
    let p = open_gcm(
        &kdf16(rkey, &[kdf::RESP_LEN_KEY]),
        kdf12(riv, &[kdf::RESP_LEN_NONCE]),
        &[],
        &mut b,
    )?;
    Ok(u16::from_be_bytes([p[0], p[1]]) as usize)
}

/// Opens the sealed response payload (in place) and checks the auth byte.
pub fn open_aead_response(rkey: &[u8; 16], riv: &[u8; 16], v: u8, sealed: &mut [u8]) -> Result<()> {
    let p = open_gcm(
        &kdf16(rkey, &[kdf::RESP_KEY]),
        kdf12(riv, &[kdf::RESP_NONCE]),
        &[],
        sealed,
    )?;
    match p.first() {
        Some(b) if *b == v => Ok(()),
        Some(_) => Err(HeaderError::ResponseAuth),
        None => Err(HeaderError::Truncated),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(cmd: Command, dest: &str) -> Request {
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

    #[test]
    fn aead_request_round_trip_and_tamper() {
        let ck = cmd_key(&[3; 16]);
        let eauid = AuthIdCipher::new(&ck).seal(1000, [0; 4]);
        let nonce = [4u8; 8];
        let r = req(Command::Tcp, "1.2.3.4:80");
        let mut ins = Vec::new();
        encode_instruction(&r, &[0; 3], &mut ins);
        let mut wire = Vec::new();
        seal_aead_request(&ck, &eauid, &nonce, &ins, &mut wire);
        assert_eq!(wire.len(), AEAD_PREFIX + ins.len() + 16);
        let sealed_len: [u8; 18] = wire[16..34].try_into().unwrap();
        let l = open_aead_length(&ck, &eauid, &sealed_len, &nonce).unwrap();
        assert_eq!(l, ins.len());
        let mut body = wire[AEAD_PREFIX..].to_vec();
        assert_eq!(
            open_aead_instruction(&ck, &eauid, &nonce, &mut body).unwrap(),
            r
        );
        // Flipping any byte of the first 61 makes opening fail (as upstream's test).
        for i in 0..61.min(wire.len()) {
            let mut w = wire.clone();
            w[i] ^= 0x80;
            let e: [u8; 16] = w[..16].try_into().unwrap();
            let sl: [u8; 18] = w[16..34].try_into().unwrap();
            let n: [u8; 8] = w[34..42].try_into().unwrap();
            let ok = open_aead_length(&ck, &e, &sl, &n).is_ok_and(|l| {
                let mut b = w[AEAD_PREFIX..AEAD_PREFIX + l + 16].to_vec();
                open_aead_instruction(&ck, &e, &n, &mut b).is_ok()
            });
            assert!(!ok, "byte {i}");
        }
    }

    #[test]
    fn legacy_request_round_trip() {
        let primary = [5u8; 16];
        let ids = alter_ids(&primary, 4);
        assert_eq!(ids.len(), 4);
        assert!(ids.iter().all(|i| *i != primary));
        assert_ne!(ids[0], ids[1]);
        let ck = cmd_key(&primary);
        let r = req(Command::Tcp, "example.com:8080");
        let mut ins = Vec::new();
        encode_instruction(&r, &[1, 2], &mut ins);
        let mut wire = Vec::new();
        seal_legacy_request(&ck, &ids[2], 1234, &ins, &mut wire);
        assert_eq!(&wire[..16], &legacy_user_hash(&ids[2], 1234));
        for cut in 0..ins.len() {
            assert_eq!(
                open_legacy_instruction(&ck, 1234, &wire[16..16 + cut]),
                Ok(None)
            );
        }
        let (back, n) = open_legacy_instruction(&ck, 1234, &wire[16..])
            .unwrap()
            .unwrap();
        assert_eq!((back, n), (r.clone(), ins.len()));
        // A wrong timestamp decrypts to garbage that does not parse to the same request.
        assert!(
            !matches!(open_legacy_instruction(&ck, 1235, &wire[16..]), Ok(Some((b, _))) if b == r)
        );
    }

    #[test]
    fn aead_response_round_trip() {
        let (rk, ri) = response_keys_aead(&[1; 16], &[2; 16]);
        let mut out = Vec::new();
        seal_aead_response(&rk, &ri, 0x33, &mut out);
        assert_eq!(out.len(), AEAD_RESPONSE_LEN);
        assert_eq!(open_aead_response_length(&rk, &ri, &out).unwrap(), 4);
        let mut body = out[18..].to_vec();
        open_aead_response(&rk, &ri, 0x33, &mut body).unwrap();
        let mut body = out[18..].to_vec();
        assert_eq!(
            open_aead_response(&rk, &ri, 0x34, &mut body),
            Err(HeaderError::ResponseAuth)
        );
        let mut bad = out.clone();
        bad[20] ^= 1;
        assert!(open_aead_response(&rk, &ri, 0x33, &mut bad[18..]).is_err());
    }
}
