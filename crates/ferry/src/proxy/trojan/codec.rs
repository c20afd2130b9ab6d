//! The Trojan request and UDP frames, sans-IO (trojan-gfw's protocol page; Xray's
//! `proxy/trojan/protocol.go`).
//!
//! Request: `hex(SHA224(password))(56) CRLF CMD ATYP ADDR PORT CRLF`; no response. UDP frames:
//! `ATYP ADDR PORT LEN(2) CRLF PAYLOAD`, both ways (the server writes the datagram's source).

use crate::common::addr::{socks, AddrError};
use crate::common::Destination;

pub const CMD_CONNECT: u8 = 1;
pub const CMD_UDP: u8 = 3;
/// The length of the hex password hash.
pub const HASH_LEN: usize = 56;
/// Xray's readers refuse UDP frames larger than this.
pub const MAX_UDP: usize = 8192;

/// Why a request is not Trojan's (a fallback takes such connections once it exists).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    #[error("no CRLF after a 56-byte password hash")]
    NotTrojan,
    #[error("missing CRLF after the address")]
    Crlf,
    #[error("address: {0}")]
    Addr(#[from] AddrError),
    #[error("frame of {0} bytes (at most 8192)")]
    TooLong(usize),
}

/// `hex(SHA224(password))`, lowercase.
pub fn password_hash(password: &str) -> [u8; HASH_LEN] {
    let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA224, password.as_bytes());
    let mut out = [0u8; HASH_LEN];
    for (i, b) in d.as_ref().iter().enumerate() {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        out[2 * i] = HEX[(b >> 4) as usize];
        out[2 * i + 1] = HEX[(b & 15) as usize];
    }
    out
}

/// A decoded request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub hash: [u8; HASH_LEN],
    /// CONNECT or UDP (any other command is taken as CONNECT, as Xray does).
    pub cmd: u8,
    pub dest: Destination,
}

/// Decodes a request at the start of `buf` (as Xray: exactly 56 bytes, then CR; the byte
/// after the CR and the two after the address are skipped unread, as Xray's reader skips
/// them, so a prober flipping them sees Xray's reaction).
pub fn decode_request(buf: &[u8]) -> Result<Option<(Request, usize)>, Error> {
    // Anything that cannot start a hash is not Trojan's, as early as we can tell.
    if buf.len() > HASH_LEN && buf[HASH_LEN] != b'\r' {
        return Err(Error::NotTrojan);
    }
    if buf.len() < HASH_LEN + 3 {
        return Ok(None);
    }
    let mut hash = [0u8; HASH_LEN];
    hash.copy_from_slice(&buf[..HASH_LEN]);
    let cmd = buf[HASH_LEN + 2];
    let at = HASH_LEN + 3;
    let Some((dest, n)) = socks::decode(&buf[at..])? else {
        return Ok(None);
    };
    let end = at + n;
    if buf.len() < end + 2 {
        return Ok(None);
    }
    Ok(Some((Request { hash, cmd, dest }, end + 2)))
}

/// Appends a request.
pub fn encode_request(hash: &[u8; HASH_LEN], cmd: u8, dest: &Destination, out: &mut Vec<u8>) {
    out.extend_from_slice(hash);
    out.extend_from_slice(b"\r\n");
    out.push(cmd);
    socks::encode(dest, out);
    out.extend_from_slice(b"\r\n");
}

/// Appends one UDP frame.
pub fn encode_udp(addr: &Destination, payload: &[u8], out: &mut Vec<u8>) {
    socks::encode(addr, out);
    out.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(payload);
}

/// Decodes one UDP frame at the start of `buf`: the address, the payload range, and the frame
/// length; `Ok(None)` asks for more bytes.
pub fn decode_udp(
    buf: &[u8],
) -> Result<Option<(Destination, std::ops::Range<usize>, usize)>, Error> {
    let Some((addr, n)) = socks::decode(buf)? else {
        return Ok(None);
    };
    let Some(h) = buf.get(n..n + 4) else {
        return Ok(None);
    };
    let len = u16::from_be_bytes([h[0], h[1]]) as usize;
    if len > MAX_UDP {
        return Err(Error::TooLong(len));
    }
    if &h[2..4] != b"\r\n" {
        return Err(Error::Crlf);
    }
    let start = n + 4;
    if buf.len() < start + len {
        return Ok(None);
    }
    Ok(Some((addr, start..start + len, start + len)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::Address;

    #[test]
    fn password_hash_is_lowercase_hex_sha224() {
        // SHA-224("password"), as `printf password | sha224sum` gives it.
        assert_eq!(
            &password_hash("password"),
            b"d63dc919e201d7bc4c825630d2cf25fdc93d4b2f0d46706d29038d01"
        );
    }

    #[test]
    fn request_and_udp_round_trip() {
        let h = password_hash("pw");
        let d = Destination::new(Address::Domain("example.com".into()), 443);
        let mut b = Vec::new();
        encode_request(&h, CMD_CONNECT, &d, &mut b);
        assert_eq!(b.len(), 56 + 2 + 1 + 1 + 1 + 11 + 2 + 2);
        for cut in 0..b.len() {
            assert_eq!(decode_request(&b[..cut]), Ok(None), "cut {cut}");
        }
        b.extend_from_slice(b"GET /");
        let (r, n) = decode_request(&b).unwrap().unwrap();
        assert_eq!((r.hash, r.cmd, &r.dest), (h, CMD_CONNECT, &d));
        assert_eq!(&b[n..], b"GET /");
        let mut u = Vec::new();
        encode_udp(&d, b"dns?", &mut u);
        for cut in 0..u.len() {
            assert_eq!(decode_udp(&u[..cut]), Ok(None), "cut {cut}");
        }
        let (a, p, n) = decode_udp(&u).unwrap().unwrap();
        assert_eq!((a, &u[p], n), (d, &b"dns?"[..], u.len()));
    }

    #[test]
    fn not_trojan_is_told_early() {
        assert_eq!(decode_request(b"GET / HTTP/1.1\r\n"), Ok(None));
        let mut http =
            b"GET / HTTP/1.1\r\nHost: example.com\r\nUser-Agent: x\r\nAccept: */*\r\n\r\n".to_vec();
        assert_eq!(decode_request(&http), Err(Error::NotTrojan));
        http.truncate(57);
        assert_eq!(decode_request(&http), Err(Error::NotTrojan));
        // As Xray: the byte after the CR and the two after the address are not checked.
        let mut lax = password_hash("pw").to_vec();
        lax.extend_from_slice(b"\rX\x01\x01\x7f\x00\x00\x01\x00\x50XX");
        let (r, n) = decode_request(&lax).unwrap().unwrap();
        assert_eq!((r.dest.port, n), (80, lax.len()));
        let mut bad = password_hash("pw").to_vec();
        bad.extend_from_slice(b"\n\r\x01");
        assert_eq!(decode_request(&bad), Err(Error::NotTrojan));
        let mut u = Vec::new();
        encode_udp(
            &Destination::new(Address::Domain("a".into()), 1),
            &[0; 9000],
            &mut u,
        );
        assert_eq!(decode_udp(&u), Err(Error::TooLong(9000)));
    }
}
