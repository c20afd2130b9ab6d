//! The VLESS request and response headers, sans-IO (Xray's `proxy/vless/encoding`).
//!
//! Request: `00 | UUID(16) | M | Addons(M) | Cmd | Port(2) ATYP Addr` (no address for Mux);
//! response: `00 | N | Addons(N)` (Xray always sends `00 00`).

use bytes::BufMut;

use crate::common::addr::{v2ray, AddrError};
use crate::common::Destination;

/// The only VLESS version.
pub const VERSION: u8 = 0;
pub const CMD_TCP: u8 = 1;
pub const CMD_UDP: u8 = 2;
pub const CMD_MUX: u8 = 3;
pub const CMD_RVS: u8 = 4;
/// The response a server sends before its first byte.
pub const RESPONSE: [u8; 2] = [VERSION, 0];
/// The flow of XTLS Vision as it travels in the addons.
pub const FLOW_VISION: &str = "xtls-rprx-vision";

/// Why a request header is invalid.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    #[error("version {0} (only 0 exists)")]
    Version(u8),
    #[error("addons: {0}")]
    Addons(&'static str),
    #[error("unknown command {0}")]
    Command(u8),
    #[error("address: {0}")]
    Addr(#[from] AddrError),
}

/// A decoded request header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub uuid: [u8; 16],
    /// The addons' flow ("" when none).
    pub flow: String,
    pub cmd: u8,
    /// The target (none for Mux and reverse).
    pub dest: Option<Destination>,
}

/// Decodes a request at the start of `buf`: `Ok(None)` asks for more bytes, `Ok(Some((r, n)))`
/// took `n` bytes.
pub fn decode_request(buf: &[u8]) -> Result<Option<(Request, usize)>, Error> {
    let Some(&v) = buf.first() else {
        return Ok(None);
    };
    if v != VERSION {
        return Err(Error::Version(v));
    }
    if buf.len() < 18 {
        return Ok(None);
    }
    let mut uuid = [0u8; 16];
    uuid.copy_from_slice(&buf[1..17]);
    let m = buf[17] as usize;
    let Some(addons) = buf.get(18..18 + m) else {
        return Ok(None);
    };
    let flow = decode_flow(addons)?;
    let Some(&cmd) = buf.get(18 + m) else {
        return Ok(None);
    };
    let at = 19 + m;
    match cmd {
        CMD_TCP | CMD_UDP => match v2ray::decode(&buf[at..])? {
            None => Ok(None),
            Some((dest, n)) => Ok(Some((
                Request {
                    uuid,
                    flow,
                    cmd,
                    dest: Some(dest),
                },
                at + n,
            ))),
        },
        CMD_MUX | CMD_RVS => Ok(Some((
            Request {
                uuid,
                flow,
                cmd,
                dest: None,
            },
            at,
        ))),
        c => Err(Error::Command(c)),
    }
}

/// Reads field 1 (Flow, a string) of the Addons protobuf, skipping any other field.
fn decode_flow(mut b: &[u8]) -> Result<String, Error> {
    let mut flow = String::new();
    while let Some(&tag) = b.first() {
        let (field, wire) = (tag >> 3, tag & 7);
        b = &b[1..];
        match wire {
            0 => {
                // varint
                let n = b
                    .iter()
                    .position(|x| x & 0x80 == 0)
                    .ok_or(Error::Addons("varint"))?;
                b = &b[n + 1..];
            }
            2 => {
                let len = *b.first().ok_or(Error::Addons("length"))? as usize;
                if len >= 0x80 {
                    return Err(Error::Addons("field too long"));
                }
                let v = b.get(1..1 + len).ok_or(Error::Addons("truncated field"))?;
                if field == 1 {
                    flow = String::from_utf8(v.to_vec()).map_err(|_| Error::Addons("flow"))?;
                }
                b = &b[1 + len..];
            }
            _ => return Err(Error::Addons("wire type")),
        }
    }
    Ok(flow)
}

/// Appends a request header (no addons: Xray writes them only for Vision).
pub fn encode_request(uuid: &[u8; 16], cmd: u8, dest: Option<&Destination>, out: &mut Vec<u8>) {
    encode_request_flow(uuid, "", cmd, dest, out)
}

/// Appends a request header whose addons carry `flow` (none when empty).
pub fn encode_request_flow(
    uuid: &[u8; 16],
    flow: &str,
    cmd: u8,
    dest: Option<&Destination>,
    out: &mut Vec<u8>,
) {
    out.put_u8(VERSION);
    out.put_slice(uuid);
    if flow.is_empty() {
        out.put_u8(0);
    } else {
        // Addons { Flow (field 1, a string) }: short flows only, as Xray's.
        let f = &flow.as_bytes()[..flow.len().min(0x7f)];
        out.put_u8(2 + f.len() as u8);
        out.put_u8(0x0a);
        out.put_u8(f.len() as u8);
        out.put_slice(f);
    }
    out.put_u8(cmd);
    if let Some(d) = dest {
        v2ray::encode(d, out);
    }
}

/// Reads a response header: `Ok(None)` asks for more, `Ok(Some(n))` its length; a version
/// other than the request's is an error.
pub fn decode_response(buf: &[u8]) -> Result<Option<usize>, Error> {
    let Some(&v) = buf.first() else {
        return Ok(None);
    };
    if v != VERSION {
        return Err(Error::Version(v));
    }
    let Some(&n) = buf.get(1) else {
        return Ok(None);
    };
    let n = 2 + n as usize;
    Ok((buf.len() >= n).then_some(n))
}

/// Xray (since v1.250905.0) ignores bytes 6 and 7 of a received id when it looks up the user.
pub fn lookup_key(uuid: &[u8; 16]) -> [u8; 16] {
    let mut k = *uuid;
    k[6] = 0;
    k[7] = 0;
    k
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::Address;

    #[test]
    fn request_round_trip_and_partial_input() {
        let uuid = [7u8; 16];
        let d = Destination::new(Address::Domain("example.com".into()), 443);
        let mut b = Vec::new();
        encode_request(&uuid, CMD_TCP, Some(&d), &mut b);
        // 00 | uuid | 00 | 01 | 01bb 02 0b "example.com"
        assert_eq!(b.len(), 1 + 16 + 1 + 1 + 2 + 1 + 1 + 11);
        assert_eq!(&b[17..22], &[0, 1, 0x01, 0xbb, 2]);
        for cut in 0..b.len() {
            assert_eq!(decode_request(&b[..cut]), Ok(None), "cut {cut}");
        }
        b.extend_from_slice(b"payload");
        let (r, n) = decode_request(&b).unwrap().unwrap();
        assert_eq!(&b[n..], b"payload");
        assert_eq!(r.uuid, uuid);
        assert_eq!(r.dest, Some(d));
        assert_eq!(r.flow, "");
    }

    #[test]
    fn vision_addons_and_bad_headers() {
        // The fixed Vision addons of the spec (§1.3).
        let mut b = vec![0u8];
        b.extend_from_slice(&[1; 16]);
        b.push(18);
        b.extend_from_slice(&[0x0a, 0x10]);
        b.extend_from_slice(FLOW_VISION.as_bytes());
        b.push(CMD_MUX);
        let (r, n) = decode_request(&b).unwrap().unwrap();
        assert_eq!(
            (r.flow.as_str(), r.cmd, r.dest, n),
            (FLOW_VISION, CMD_MUX, None, b.len())
        );
        assert_eq!(decode_request(&[1]), Err(Error::Version(1)));
        let mut bad = vec![0u8; 18];
        bad.push(9);
        assert_eq!(decode_request(&bad), Err(Error::Command(9)));
        let mut bad = vec![0u8; 17];
        bad.extend_from_slice(&[2, 0x0a, 5, 1]);
        assert_eq!(decode_request(&bad), Err(Error::Addons("truncated field")));
        // Addons announced longer than what arrived: wait for more.
        let mut short = vec![0u8; 17];
        short.extend_from_slice(&[5, 0x0a]);
        assert_eq!(decode_request(&short), Ok(None));
        let mut bad = vec![0u8; 17];
        bad.extend_from_slice(&[2, 0x0b, 0, 1]);
        assert_eq!(decode_request(&bad), Err(Error::Addons("wire type")));
    }

    #[test]
    fn response_prefix() {
        assert_eq!(decode_response(&[0]), Ok(None));
        assert_eq!(decode_response(&RESPONSE), Ok(Some(2)));
        assert_eq!(decode_response(&[0, 2, 9]), Ok(None));
        assert_eq!(decode_response(&[0, 2, 9, 9, 1]), Ok(Some(4)));
        assert_eq!(decode_response(&[1, 0]), Err(Error::Version(1)));
    }

    #[test]
    fn user_lookup_ignores_bytes_6_and_7() {
        let mut a = [3u8; 16];
        let k = lookup_key(&a);
        a[6] = 0xff;
        a[7] = 0x12;
        assert_eq!(lookup_key(&a), k);
    }
}
