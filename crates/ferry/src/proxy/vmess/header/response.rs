//! The response header: the body keys of the server's direction and the AEAD response header.

use super::super::kdf::{self, kdf12, kdf16};
use super::{md5, open_gcm, seal_gcm, HeaderError, Result};

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
