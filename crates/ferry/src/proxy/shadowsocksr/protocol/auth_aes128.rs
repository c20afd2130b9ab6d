//! auth_aes128_md5 / auth_aes128_sha1 (shadowsocksr.md §4.4): an AES-sealed first packet
//! naming the user, then HMAC-checked data packets with random padding.

use super::super::util::{
    aes128_block, b64, head_size, hmac_md5, hmac_sha1, md5, rand_f64, rand_range, rand_u16,
    rand_u32, rand_u8, random_bytes, sha1, Error, Result,
};
use super::{Info, Side, SsrUser, AUTH_UNIT, BUFFER_SIZE};
use crate::common::ct;

pub struct AuthAes128 {
    sha1: bool,
    info: Info,
    side: Side,
    pub(super) recv_iv: Vec<u8>,
    user_key: Option<Vec<u8>>,
    pub(super) user: Option<SsrUser>,
    sent_header: bool,
    recv_header: bool,
    pack_id: u32,
    recv_id: u32,
    recv: Vec<u8>,
    /// Server: the first packet's decrypted block, user key and user once its head checked out.
    head: Option<Box<Aes128Head>>,
}

type Aes128Head = ([u8; 16], Vec<u8>, Option<SsrUser>);

impl AuthAes128 {
    pub(super) fn new(sha1: bool, info: Info, side: Side) -> AuthAes128 {
        AuthAes128 {
            sha1,
            info,
            side,
            recv_iv: Vec::new(),
            user_key: None,
            user: None,
            sent_header: false,
            recv_header: false,
            pack_id: 1,
            recv_id: 1,
            recv: Vec::new(),
            head: None,
        }
    }

    fn salt(&self) -> &'static [u8] {
        if self.sha1 {
            b"auth_aes128_sha1"
        } else {
            b"auth_aes128_md5"
        }
    }

    fn hash(&self, d: &[u8]) -> Vec<u8> {
        if self.sha1 {
            sha1(d).to_vec()
        } else {
            md5(&[d]).to_vec()
        }
    }

    fn mac(&self, key: &[u8], parts: &[&[u8]]) -> [u8; 20] {
        if self.sha1 {
            hmac_sha1(key, parts)
        } else {
            let m = hmac_md5(key, parts);
            let mut o = [0u8; 20];
            o[..16].copy_from_slice(&m);
            o
        }
    }

    fn aes_key(&self, user_key: &[u8]) -> [u8; 16] {
        md5(&[b64(user_key).as_bytes(), self.salt()])
    }

    fn rnd_len(&self, s: usize, full: usize) -> usize {
        let mss = self.info.tcp_mss as i64;
        if full >= BUFFER_SIZE - self.info.overhead {
            return 0;
        }
        let rev = mss - s as i64 - 9;
        if rev == 0 {
            return 0;
        }
        if rev < 0 {
            if rev > -mss {
                return trapezoid((rev + mss) as usize);
            }
            return rand_u8() as usize % 32;
        }
        if s > 900 {
            return (u16::from_be_bytes(rand_u16().to_le_bytes()) as i64 % rev) as usize;
        }
        trapezoid(rev as usize)
    }

    fn pack_data(&mut self, chunk: &[u8], full: usize, out: &mut Vec<u8>) {
        let Some(uk) = self.user_key.clone() else {
            return;
        };
        let n = self.rnd_len(chunk.len(), full);
        let start = out.len();
        out.extend_from_slice(&[0; 4]);
        if n < 128 {
            out.push(n as u8 + 1);
            out.extend_from_slice(&random_bytes(n));
        } else {
            out.push(0xff);
            out.extend_from_slice(&((n + 1) as u16).to_le_bytes());
            out.extend_from_slice(&random_bytes(n - 2));
        }
        out.extend_from_slice(chunk);
        let l = (out.len() - start + 4) as u16;
        let k = [&uk[..], &self.pack_id.to_le_bytes()].concat();
        out[start..start + 2].copy_from_slice(&l.to_le_bytes());
        let m = self.mac(&k, &[&l.to_le_bytes()]);
        out[start + 2..start + 4].copy_from_slice(&m[..2]);
        let m = self.mac(&k, &[&out[start..]]);
        out.extend_from_slice(&m[..4]);
        self.pack_id = self.pack_id.wrapping_add(1);
    }

    pub(super) fn pack_all(&mut self, mut data: &[u8], out: &mut Vec<u8>) {
        let full = data.len();
        while data.len() > AUTH_UNIT {
            self.pack_data(&data[..AUTH_UNIT], full, out);
            data = &data[AUTH_UNIT..];
        }
        // A server answers with an empty packet too (§4.1); a client never sends empty ones.
        if !data.is_empty() || matches!(self.side, Side::Server(_)) {
            self.pack_data(data, full, out);
        }
    }

    pub(super) fn client_encode(&mut self, mut data: &[u8], out: &mut Vec<u8>) {
        if !self.sent_header {
            let Side::Client(c) = &self.side else { return };
            let c = c.clone();
            let n = data.len().min(rand_range(0, 31) + head_size(data, 30));
            let chunk = &data[..n];
            let rnd_len = (rand_u16() % if n > 400 { 512 } else { 1024 }) as usize;
            let l = 31 + rnd_len + n + 4;
            let (uid, uk) = match &c.login {
                Some((uid, pw)) => (*uid, self.hash(pw)),
                None => (rand_u32(), self.info.key.to_vec()),
            };
            let mut block = [0u8; 16];
            block[..12].copy_from_slice(&c.auth_data());
            block[12..14].copy_from_slice(&(l as u16).to_le_bytes());
            block[14..].copy_from_slice(&(rnd_len as u16).to_le_bytes());
            aes128_block(&self.aes_key(&uk), &mut block, true);
            let mac_key = [&self.info.iv[..], &self.info.key].concat();
            let start = out.len();
            let check = rand_u8();
            out.push(check);
            out.extend_from_slice(&self.mac(&mac_key, &[&[check]])[..6]);
            out.extend_from_slice(&uid.to_le_bytes());
            out.extend_from_slice(&block);
            let m = self.mac(&mac_key, &[&out[start + 7..]]);
            out.extend_from_slice(&m[..4]);
            out.extend_from_slice(&random_bytes(rnd_len));
            out.extend_from_slice(chunk);
            let m = self.mac(&uk, &[&out[start..]]);
            out.extend_from_slice(&m[..4]);
            self.user_key = Some(uk);
            self.sent_header = true;
            data = &data[n..];
        }
        self.pack_all(data, out);
    }

    /// Data packets (both directions); `true` when one carried no data.
    pub(super) fn decode_data(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.recv.extend_from_slice(data);
        let Some(uk) = self.user_key.clone() else {
            return Err(Error::Frame);
        };
        let mut empty = false;
        let mut at = 0;
        while self.recv.len() - at > 4 {
            let k = [&uk[..], &self.recv_id.to_le_bytes()].concat();
            let b = &self.recv[at..];
            if !ct::eq(&self.mac(&k, &[&b[..2]])[..2], &b[2..4]) {
                return Err(Error::Frame);
            }
            let l = u16::from_le_bytes([b[0], b[1]]) as usize;
            if !(7..8192).contains(&l) {
                return Err(Error::Frame);
            }
            if l > b.len() {
                break;
            }
            if !ct::eq(&self.mac(&k, &[&b[..l - 4]])[..4], &b[l - 4..l]) {
                return Err(Error::Frame);
            }
            self.recv_id = self.recv_id.wrapping_add(1);
            let pos = if b[4] < 255 {
                4 + b[4] as usize
            } else {
                4 + u16::from_le_bytes([b[5], b[6]]) as usize
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
        let shared = shared.clone();
        self.recv.extend_from_slice(data);
        let b = &self.recv;
        // The head checked once: later pieces only wait for the whole packet.
        if self.head.is_none() {
            let mac_key = [&self.recv_iv[..], &self.info.key].concat();
            if b.len() >= 2 {
                let n = b.len().min(7);
                if !ct::eq(&self.mac(&mac_key, &[&b[..1]])[..n - 1], &b[1..n]) {
                    return Err(Error::Auth);
                }
            }
            if b.len() < 31 {
                return Ok(false);
            }
            if !ct::eq(&self.mac(&mac_key, &[&b[7..27]])[..4], &b[27..31]) {
                return Err(Error::Auth);
            }
            let uid = u32::from_le_bytes(crate::common::array(&b[7..11]));
            let user = shared.user_of(uid).ok_or(Error::UnknownUser)?;
            let uk = match &user {
                Some(u) => self.hash(&u.password),
                None => self.info.key.to_vec(),
            };
            let mut block = [0u8; 16];
            block.copy_from_slice(&b[11..27]);
            aes128_block(&self.aes_key(&uk), &mut block, false);
            let l = u16::from_le_bytes([block[12], block[13]]) as usize;
            let rnd_len = u16::from_le_bytes([block[14], block[15]]) as usize;
            if l < 35 || 31 + rnd_len > l - 4 {
                return Err(Error::Auth);
            }
            self.head = Some(Box::new((block, uk, user)));
        }
        let Some(head) = self.head.as_ref() else {
            return Err(Error::Auth);
        };
        let (block, uk, user) = (head.0, head.1.clone(), head.2.clone());
        let l = u16::from_le_bytes([block[12], block[13]]) as usize;
        let rnd_len = u16::from_le_bytes([block[14], block[15]]) as usize;
        if b.len() < l {
            return Ok(false);
        }
        if !ct::eq(&self.mac(&uk, &[&b[..l - 4]])[..4], &b[l - 4..l]) {
            return Err(Error::Auth);
        }
        let utc = u32::from_le_bytes(crate::common::array(&block[..4]));
        let id = [&b"a128"[..], &b[7..11], &block[4..12]].concat();
        shared.admit(utc, &id)?;
        out.extend_from_slice(&b[31 + rnd_len..l - 4]);
        self.recv.drain(..l);
        self.user_key = Some(uk);
        self.user = user;
        self.recv_header = true;
        self.decode_data(&[], out)?;
        Ok(true)
    }
}

/// `int(m · (sqrt(1.69 − 1.2·u) − 1.3) / −0.6)`: small values more likely.
fn trapezoid(m: usize) -> usize {
    let d = -0.3f64;
    let a = 1.0 - d;
    let v = ((a * a + 4.0 * d * rand_f64()).sqrt() - a) / (2.0 * d);
    ((v * m as f64) as usize).min(m)
}
