//! auth_sha1_v4 (shadowsocksr.md §4.3): a CRC- and HMAC-SHA1-checked first packet, then
//! Adler-32-checked data packets.

use super::super::util::{
    adler32, crc32, head_size, hmac_sha1, rand_range, rand_u16, rand_u8, random_bytes, Error,
    Result,
};
use super::{Info, Side, AUTH_UNIT};
use crate::common::ct;

pub struct AuthSha1V4 {
    info: Info,
    side: Side,
    sent_header: bool,
    recv_header: bool,
    recv: Vec<u8>,
}

const SHA1V4_SALT: &[u8] = b"auth_sha1_v4";

impl AuthSha1V4 {
    pub(super) fn new(info: Info, side: Side) -> AuthSha1V4 {
        AuthSha1V4 {
            info,
            side,
            sent_header: false,
            recv_header: false,
            recv: Vec::new(),
        }
    }

    pub(super) fn info_recv_iv(&mut self, iv: &[u8]) {
        // The server keys the first packet's HMAC with the client's IV: keep it in `iv`
        // (the server's own send IV is not used by this protocol).
        self.info.iv = iv.to_vec();
    }

    /// `R(n)` for a buffer of `s` bytes.
    fn rnd(s: usize, out: &mut Vec<u8>) {
        let n = if s > 1200 {
            0
        } else if s > 400 {
            rand_u8() as usize
        } else {
            (u16::from_be_bytes(rand_u16().to_le_bytes()) % 512) as usize
        };
        if n < 128 {
            out.push(n as u8 + 1);
        } else {
            out.push(0xff);
            out.extend_from_slice(&((n + 3) as u16).to_be_bytes());
        }
        out.extend_from_slice(&random_bytes(n));
    }

    fn pack_data(chunk: &[u8], out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&[0; 4]);
        Self::rnd(chunk.len(), out);
        out.extend_from_slice(chunk);
        let l = (out.len() - start + 4) as u16;
        out[start..start + 2].copy_from_slice(&l.to_be_bytes());
        let crc = crc32(&[&l.to_be_bytes()]) as u16;
        out[start + 2..start + 4].copy_from_slice(&crc.to_le_bytes());
        let a = adler32(&out[start..]);
        out.extend_from_slice(&a.to_le_bytes());
    }

    /// Data packets of `data`; a server packs an empty one too (its answer to a first packet
    /// or an empty client packet, §4.1), a client never sends empty ones.
    pub(super) fn pack_all(&mut self, mut data: &[u8], out: &mut Vec<u8>) {
        while data.len() > AUTH_UNIT {
            Self::pack_data(&data[..AUTH_UNIT], out);
            data = &data[AUTH_UNIT..];
        }
        if !data.is_empty() || matches!(self.side, Side::Server(_)) {
            Self::pack_data(data, out);
        }
    }

    pub(super) fn client_encode(&mut self, mut data: &[u8], out: &mut Vec<u8>) {
        if !self.sent_header {
            let Side::Client(c) = &self.side else { return };
            let n = data.len().min(rand_range(0, 31) + head_size(data, 30));
            let mut body = Vec::with_capacity(n + 12);
            body.extend_from_slice(&c.auth_data());
            body.extend_from_slice(&data[..n]);
            data = &data[n..];
            let start = out.len();
            out.extend_from_slice(&[0; 6]);
            Self::rnd(body.len(), out);
            out.extend_from_slice(&body);
            let l = (out.len() - start + 10) as u16;
            out[start..start + 2].copy_from_slice(&l.to_be_bytes());
            let crc = crc32(&[&l.to_be_bytes(), SHA1V4_SALT, &self.info.key]);
            out[start + 2..start + 6].copy_from_slice(&crc.to_le_bytes());
            let mac = hmac_sha1(
                &[&self.info.iv[..], &self.info.key].concat(),
                &[&out[start..]],
            );
            out.extend_from_slice(&mac[..10]);
            self.sent_header = true;
        }
        self.pack_all(data, out);
    }

    /// Data packets (both directions); `true` when one carried no data.
    pub(super) fn decode_data(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.recv.extend_from_slice(data);
        let mut empty = false;
        let mut at = 0;
        while self.recv.len() - at > 4 {
            let b = &self.recv[at..];
            let crc = crc32(&[&b[..2]]) as u16;
            if crc.to_le_bytes() != b[2..4] {
                return Err(Error::Frame);
            }
            let l = u16::from_be_bytes([b[0], b[1]]) as usize;
            if !(7..8192).contains(&l) {
                return Err(Error::Frame);
            }
            if l > b.len() {
                break;
            }
            if adler32(&b[..l - 4]).to_le_bytes() != b[l - 4..l] {
                return Err(Error::Frame);
            }
            let pos = if b[4] < 255 {
                4 + b[4] as usize
            } else {
                4 + u16::from_be_bytes([b[5], b[6]]) as usize
            };
            if pos > l - 4 {
                return Err(Error::Frame);
            }
            empty |= pos == l - 4;
            out.extend_from_slice(&b[pos..l - 4]);
            at += l;
        }
        self.recv.drain(..at);
        Ok(empty)
    }

    pub(super) fn server_decode(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        if self.recv_header {
            return self.decode_data(data, out);
        }
        let Side::Server(shared) = &self.side else {
            return Err(Error::Auth);
        };
        self.recv.extend_from_slice(data);
        let b = &self.recv;
        if b.len() <= 6 {
            return Ok(false);
        }
        let crc = crc32(&[&b[..2], SHA1V4_SALT, &self.info.key]);
        if crc.to_le_bytes() != b[2..6] {
            return Err(Error::Auth);
        }
        let l = u16::from_be_bytes([b[0], b[1]]) as usize;
        if l < 6 + 1 + 12 + 10 {
            return Err(Error::Auth);
        }
        if l > b.len() {
            return Ok(false);
        }
        let mac = hmac_sha1(
            &[&self.info.iv[..], &self.info.key].concat(),
            &[&b[..l - 10]],
        );
        if !ct::eq(&mac[..10], &b[l - 10..l]) {
            return Err(Error::Auth);
        }
        let pos = if b[6] < 255 {
            6 + b[6] as usize
        } else {
            6 + u16::from_be_bytes([b[7], b[8]]) as usize
        };
        if pos + 12 > l - 10 {
            return Err(Error::Auth);
        }
        let auth = &b[pos..pos + 12];
        let utc = u32::from_le_bytes(crate::common::array(&auth[..4]));
        shared.admit(utc, &[b"s1v4", &auth[4..12]].concat())?;
        out.extend_from_slice(&b[pos + 12..l - 10]);
        self.recv.drain(..l);
        self.recv_header = true;
        self.decode_data(&[], out)?;
        Ok(true)
    }
}
