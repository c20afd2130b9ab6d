//! The request headers around an instruction section: AEAD (alterId 0) and legacy MD5/CFB.

use aes::cipher::KeyInit;
use hmac::{Hmac, Mac};
use md5::{Digest, Md5};

use super::super::kdf::{self, kdf12, kdf16};
use super::{
    cfb_dec, cfb_enc, decode_instruction, md5, open_gcm, seal_gcm, HeaderError, Request, Result,
    MAX_INSTRUCTION,
};

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

#[cfg(test)]
mod tests {
    use super::super::tests::req;
    use super::super::{cmd_key, encode_instruction, AuthIdCipher, Command};
    use super::*;

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
}
