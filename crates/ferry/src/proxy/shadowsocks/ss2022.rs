//! Shadowsocks 2022 (SIP022) TCP headers and identity headers (SIP023), sans-IO.

use std::ops::Range;
use std::time::{SystemTime, UNIX_EPOCH};

use super::aead::{ChunkSealer, Error, FirstCheck, SS2022_MAX_CHUNK};
use super::cipher::{identity_subkey_2022, psk_hash16, random, AesBlock, TAG_LEN};
use crate::common::addr::socks;
use crate::common::Destination;

/// Header type of a client request stream / packet.
pub const TYPE_CLIENT: u8 = 0;
/// Header type of a server response stream / packet.
pub const TYPE_SERVER: u8 = 1;
/// Largest allowed difference between a header's time and ours, in seconds.
pub const MAX_SKEW: i64 = 30;
/// Largest padding a sender adds.
pub const MAX_PADDING: usize = 900;
/// Fixed request header: type, time, variable header length.
pub const FIXED_LEN: usize = 1 + 8 + 2;

/// Unix time in seconds.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Checks a header timestamp against the local clock (±30 s).
pub fn check_time(t: u64) -> Result<(), Error> {
    // i128: any u64 from the wire must not overflow (found by the fuzzer).
    let skew = t as i128 - now() as i128;
    if skew.abs() > MAX_SKEW as i128 {
        return Err(Error::ClockSkew(
            skew.clamp(i64::MIN as i128, i64::MAX as i128) as i64,
        ));
    }
    Ok(())
}

fn be_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

/// Parses an opened fixed request header: returns the variable header length.
pub fn parse_fixed(h: &[u8]) -> Result<usize, Error> {
    if h.len() < FIXED_LEN {
        return Err(Error::Truncated);
    }
    if h[0] != TYPE_CLIENT {
        return Err(Error::Header("not a client stream header"));
    }
    check_time(be_u64(&h[1..9]))?;
    let l = u16::from_be_bytes([h[9], h[10]]) as usize;
    if l == 0 {
        return Err(Error::Header("empty variable header"));
    }
    Ok(l)
}

/// Parses an opened variable request header: target and the initial payload's range.
pub fn parse_variable(v: &[u8]) -> Result<(Destination, Range<usize>), Error> {
    let (dest, n) = socks::decode(v)
        .map_err(|_| Error::Header("bad address"))?
        .ok_or(Error::Header("address past the header"))?;
    let p = v
        .get(n..n + 2)
        .ok_or(Error::Header("padding length past the header"))?;
    let pad = u16::from_be_bytes([p[0], p[1]]) as usize;
    let body = n + 2 + pad;
    if body > v.len() {
        return Err(Error::Header("padding past the header"));
    }
    if pad == 0 && body == v.len() {
        return Err(Error::Header("neither padding nor payload"));
    }
    Ok((dest, body..v.len()))
}

/// Seals the fixed and variable request headers with as much of `payload` as fits; returns
/// the payload bytes taken. Pads (1..=900 random bytes) only when there is no payload.
pub fn seal_request(s: &mut ChunkSealer, addr: &[u8], payload: &[u8], out: &mut Vec<u8>) -> usize {
    let pad = if payload.is_empty() {
        let mut r = [0u8; 2];
        random(&mut r);
        1 + (u16::from_be_bytes(r) as usize % MAX_PADDING)
    } else {
        0
    };
    let room = SS2022_MAX_CHUNK.saturating_sub(addr.len() + 2 + pad);
    let k = payload.len().min(room);
    let mut var = Vec::with_capacity(addr.len() + 2 + pad + k);
    var.extend_from_slice(addr);
    var.extend_from_slice(&(pad as u16).to_be_bytes());
    var.resize(var.len() + pad, 0);
    var.extend_from_slice(&payload[..k]);
    let mut fixed = [0u8; FIXED_LEN];
    fixed[0] = TYPE_CLIENT;
    fixed[1..9].copy_from_slice(&now().to_be_bytes());
    fixed[9..11].copy_from_slice(&(var.len() as u16).to_be_bytes());
    s.seal_block(&fixed, out);
    s.seal_block(&var, out);
    k
}

/// The bytes a server puts before the first response length: type, time, request salt.
pub fn response_prefix(request_salt: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(9 + request_salt.len());
    p.push(TYPE_SERVER);
    p.extend_from_slice(&now().to_be_bytes());
    p.extend_from_slice(request_salt);
    p
}

/// Validates a response header (before its length) against the salt the client sent.
pub fn response_check(request_salt: Vec<u8>) -> FirstCheck {
    Box::new(move |h: &[u8]| {
        if h.len() != 9 + request_salt.len() {
            return Err(Error::Truncated);
        }
        if h[0] != TYPE_SERVER {
            return Err(Error::Header("not a server stream header"));
        }
        check_time(be_u64(&h[1..9]))?;
        if h[9..] != request_salt[..] {
            return Err(Error::Header("response for another request salt"));
        }
        Ok(())
    })
}

/// Length of the response header in front of the first length (type, time, salt).
pub fn response_extra(salt_len: usize) -> usize {
    9 + salt_len
}

/// Client EIH blocks for keys `ipsks` (in order) ending at `upsk` (TCP, §6.6).
pub fn eih_tcp(ipsks: &[Vec<u8>], upsk: &[u8], salt: &[u8], out: &mut Vec<u8>) {
    for (i, k) in ipsks.iter().enumerate() {
        let next = ipsks.get(i + 1).map(|v| v.as_slice()).unwrap_or(upsk);
        let mut block = psk_hash16(next);
        if let Some(c) = AesBlock::new(&identity_subkey_2022(k, salt)) {
            c.encrypt(&mut block);
        }
        out.extend_from_slice(&block);
    }
}

/// Server side of TCP EIH: the user hash named by `block` under identity key `ipsk`.
pub fn eih_tcp_open(ipsk: &[u8], salt: &[u8], block: &[u8]) -> Option<[u8; 16]> {
    let mut b: [u8; 16] = block.get(..16)?.try_into().ok()?;
    AesBlock::new(&identity_subkey_2022(ipsk, salt))?.decrypt(&mut b);
    Some(b)
}

/// Encrypted size of a variable header of `l` plaintext bytes.
pub fn sealed_len(l: usize) -> usize {
    l + TAG_LEN
}

#[cfg(test)]
mod tests {
    use super::super::aead::{ChunkOpener, Open};
    use super::super::cipher::{session_subkey_2022, AeadAlg, AeadCipher};
    use super::*;

    fn cipher(k: &[u8]) -> AeadCipher {
        AeadCipher::new(AeadAlg::Aes128Gcm, k).unwrap()
    }

    #[test]
    fn request_headers_round_trip() {
        let psk = [5u8; 16];
        let salt = [6u8; 16];
        let key = session_subkey_2022(&psk, &salt);
        let addr = socks::to_bytes(&Destination::parse("example.com:443").unwrap());
        for payload in [&b""[..], b"GET / HTTP/1.1\r\n"] {
            let mut s = ChunkSealer::new(cipher(&key), 12, SS2022_MAX_CHUNK);
            let mut wire = Vec::new();
            assert_eq!(
                seal_request(&mut s, &addr, payload, &mut wire),
                payload.len()
            );
            let mut o = ChunkOpener::new(cipher(&key), 12, SS2022_MAX_CHUNK);
            let (fixed, rest) = wire.split_at_mut(FIXED_LEN + TAG_LEN);
            o.open_block(fixed).unwrap();
            let l = parse_fixed(fixed).unwrap();
            assert_eq!(rest.len(), sealed_len(l));
            o.open_block(rest).unwrap();
            let (dest, body) = parse_variable(&rest[..l]).unwrap();
            assert_eq!(dest.to_string(), "example.com:443");
            assert_eq!(&rest[body], payload);
        }
    }

    #[test]
    fn worked_size_example() {
        // §6.9: aes-256-gcm, example.com:443, no payload, P = 100 -> var header 117 bytes.
        let addr = socks::to_bytes(&Destination::parse("example.com:443").unwrap());
        assert_eq!(addr.len() + 2 + 100, 117);
        assert_eq!(32 + FIXED_LEN + TAG_LEN + sealed_len(117), 192);
    }

    #[test]
    fn bad_headers_are_rejected() {
        let t = now().to_be_bytes();
        let mut h = [0u8; 11];
        h[1..9].copy_from_slice(&t);
        h[10] = 5;
        assert_eq!(parse_fixed(&h), Ok(5));
        h[0] = 1;
        assert!(parse_fixed(&h).is_err());
        h[0] = 0;
        h[1..9].copy_from_slice(&(now() - 31).to_be_bytes());
        assert!(matches!(parse_fixed(&h), Err(Error::ClockSkew(_))));
        h[1..9].copy_from_slice(&u64::MAX.to_be_bytes());
        assert!(matches!(parse_fixed(&h), Err(Error::ClockSkew(_))));
        // Address, padding 0, no payload.
        assert!(parse_variable(&[1, 1, 2, 3, 4, 0, 80, 0, 0]).is_err());
        // Padding running past the header.
        assert!(parse_variable(&[1, 1, 2, 3, 4, 0, 80, 0, 9, 1]).is_err());
        assert!(parse_variable(&[1, 1, 2, 3, 4, 0, 80, 0, 1, 7]).is_ok());
        assert!(parse_variable(&[9]).is_err());
    }

    #[test]
    fn response_header_checks_salt() {
        let key = [1u8; 16];
        let req_salt = vec![3u8; 16];
        let mut s = ChunkSealer::new(cipher(&key), 12, SS2022_MAX_CHUNK)
            .with_first_prefix(response_prefix(&req_salt));
        let mut wire = Vec::new();
        s.seal_chunk(b"hi", &mut wire);
        let mut ok = ChunkOpener::new(cipher(&key), 12, SS2022_MAX_CHUNK)
            .with_first_header(response_extra(16), response_check(req_salt));
        let mut w = wire.clone();
        assert!(matches!(
            ok.open(&mut w),
            Ok(Open::Data { consumed: 43, .. })
        ));
        let mut bad = ChunkOpener::new(cipher(&key), 12, SS2022_MAX_CHUNK)
            .with_first_header(response_extra(16), response_check(vec![4u8; 16]));
        assert!(bad.open(&mut wire).is_err());
    }

    #[test]
    fn eih_names_the_user() {
        let ipsk = vec![1u8; 16];
        let upsk = vec![2u8; 16];
        let salt = [9u8; 16];
        let mut out = Vec::new();
        eih_tcp(std::slice::from_ref(&ipsk), &upsk, &salt, &mut out);
        assert_eq!(out.len(), 16);
        assert_eq!(eih_tcp_open(&ipsk, &salt, &out), Some(psk_hash16(&upsk)));
        assert_ne!(eih_tcp_open(&upsk, &salt, &out), Some(psk_hash16(&upsk)));
    }
}
