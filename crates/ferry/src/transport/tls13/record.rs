//! TLS 1.3 records (RFC 8446 §5): the plaintext header, and protection of one record in place
//! with its inner content type and zero padding.

use std::ops::Range;

use super::keys::TrafficKey;

pub const HEADER: usize = 5;
/// Largest plaintext of one record.
pub const MAX_PLAIN: usize = 16384;
/// Largest protected record body TLS 1.3 allows (2^14 + 256).
pub const MAX_BODY: usize = MAX_PLAIN + 256;
pub const TAG: usize = 16;

pub const CHANGE_CIPHER_SPEC: u8 = 20;
pub const ALERT: u8 = 21;
pub const HANDSHAKE: u8 = 22;
pub const APPLICATION_DATA: u8 = 23;

/// Handshake message types that follow a TLS 1.3 handshake.
pub const NEW_SESSION_TICKET: u8 = 4;
pub const KEY_UPDATE: u8 = 24;

/// Appends a handshake message: type, 24-bit length, body.
pub fn message(ty: u8, body: &[u8], out: &mut Vec<u8>) {
    out.push(ty);
    out.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    out.extend_from_slice(body);
}

/// The header of the record at the start of `buf`: (type, body length), if 5 bytes are there.
pub fn header(buf: &[u8]) -> Option<(u8, usize)> {
    let h = buf.get(..HEADER)?;
    Some((h[0], u16::from_be_bytes([h[3], h[4]]) as usize))
}

/// The length of the whole record at the start of `buf`, if all of it is there.
pub fn complete(buf: &[u8]) -> Option<usize> {
    let (_, len) = header(buf)?;
    (buf.len() >= HEADER + len).then_some(HEADER + len)
}

/// Appends one protected record: `content` of type `ty`, then `pad` zero bytes inside the
/// encryption (so the record is `HEADER + content + 1 + pad + TAG` bytes long).
pub fn seal(key: &mut TrafficKey, ty: u8, content: &[u8], pad: usize, out: &mut Vec<u8>) {
    let body = content.len() + 1 + pad + TAG;
    let start = out.len();
    out.extend_from_slice(&[APPLICATION_DATA, 3, 3]);
    out.extend_from_slice(&(body as u16).to_be_bytes());
    out.extend_from_slice(content);
    out.push(ty);
    out.resize(out.len() + pad, 0);
    let (head, rest) = out[start..].split_at_mut(HEADER);
    let tag = key.seal(head, rest);
    out.extend_from_slice(&tag);
}

/// Why a protected record could not be read.
#[derive(Debug, PartialEq, Eq)]
pub enum OpenError {
    /// Not an application_data record, or a body longer than TLS 1.3 allows.
    Malformed,
    /// Authentication failed (wrong key, altered bytes).
    BadRecordMac,
}

/// Opens the whole record `rec` (header and body) in place: its inner content type and where
/// the content lies in `rec`.
pub fn open(key: &mut TrafficKey, rec: &mut [u8]) -> Result<(u8, Range<usize>), OpenError> {
    let (ty, len) = header(rec).ok_or(OpenError::Malformed)?;
    if ty != APPLICATION_DATA || !(TAG + 1..=MAX_BODY).contains(&len) || rec.len() != HEADER + len {
        return Err(OpenError::Malformed);
    }
    let (head, body) = rec.split_at_mut(HEADER);
    let n = key.open(head, body).ok_or(OpenError::BadRecordMac)?;
    // The inner type is the last non-zero byte; all zero is not a record.
    let Some(last) = body[..n].iter().rposition(|b| *b != 0) else {
        return Err(OpenError::Malformed);
    };
    Ok((body[last], HEADER..HEADER + last))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::tls13::keys::Suite;

    #[test]
    fn a_sealed_record_opens_with_its_type_and_padding_gone() {
        for suite in [Suite::Aes128Gcm, Suite::Aes256Gcm, Suite::Chacha20Poly1305] {
            let secret = [7u8; 48];
            let mut w = TrafficKey::new(suite, &secret[..suite.hash().size()]);
            let mut r = TrafficKey::new(suite, &secret[..suite.hash().size()]);
            let mut out = Vec::new();
            seal(&mut w, HANDSHAKE, b"hello", 10, &mut out);
            seal(&mut w, APPLICATION_DATA, b"", 0, &mut out);
            assert_eq!(out.len(), 5 + 5 + 1 + 10 + 16 + 5 + 1 + 16);
            let n = complete(&out).unwrap();
            let (first, second) = out.split_at_mut(n);
            let (ty, range) = open(&mut r, first).unwrap();
            assert_eq!((ty, &first[range]), (HANDSHAKE, &b"hello"[..]));
            let (ty, range) = open(&mut r, second).unwrap();
            assert_eq!((ty, range.len()), (APPLICATION_DATA, 0));
        }
    }

    #[test]
    fn an_altered_or_replayed_record_is_refused() {
        let mut w = TrafficKey::new(Suite::Aes128Gcm, &[1u8; 32]);
        let mut r = TrafficKey::new(Suite::Aes128Gcm, &[1u8; 32]);
        let mut out = Vec::new();
        seal(&mut w, APPLICATION_DATA, b"data", 0, &mut out);
        let mut bad = out.clone();
        bad[7] ^= 1;
        assert_eq!(open(&mut r, &mut bad), Err(OpenError::BadRecordMac));
        // The sequence number moved on: the good copy no longer opens either.
        assert_eq!(open(&mut r, &mut out.clone()), Err(OpenError::BadRecordMac));
        let mut r = TrafficKey::new(Suite::Aes128Gcm, &[1u8; 32]);
        assert!(open(&mut r, &mut out.clone()).is_ok());
        let mut short = vec![23, 3, 3, 0, 3, 1, 2, 3];
        assert_eq!(open(&mut r, &mut short), Err(OpenError::Malformed));
    }
}
