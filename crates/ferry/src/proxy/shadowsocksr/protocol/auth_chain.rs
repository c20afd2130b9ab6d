//! auth_chain_a … _e (shadowsocksr.md §4.5–§4.7): an AES-sealed first packet, then RC4 data
//! packets chained by their HMACs, padded by each variant's length rule.

use super::super::util::{
    aes128_block, b64, head_size, hmac_md5, md5, rand_range, rand_u32, random_bytes, Error, Result,
    XorShift,
};
use super::{Info, Kind, Side, SsrUser};
use crate::common::ct;

pub struct AuthChain {
    kind: Kind,
    info: Info,
    side: Side,
    pub(super) recv_iv: Vec<u8>,
    user_key: Vec<u8>,
    pub(super) user: Option<SsrUser>,
    sent_header: bool,
    recv_header: bool,
    last_client: [u8; 16],
    last_server: [u8; 16],
    rng_client: XorShift,
    rng_server: XorShift,
    enc: Option<rc4::Rc4>,
    dec: Option<rc4::Rc4>,
    pack_id: u32,
    recv_id: u32,
    recv: Vec<u8>,
    /// auth_chain_b: L1, L2; c–e: L0 (in `list1`).
    list1: Vec<u16>,
    list2: Vec<u16>,
    /// Server: the client's overhead, sets the server's unit size.
    client_overhead: usize,
    unit_len: usize,
}

impl AuthChain {
    pub(super) fn new(kind: Kind, info: Info, side: Side) -> AuthChain {
        let mut c = AuthChain {
            kind,
            recv_iv: Vec::new(),
            user_key: Vec::new(),
            user: None,
            sent_header: false,
            recv_header: false,
            last_client: [0; 16],
            last_server: [0; 16],
            rng_client: XorShift::default(),
            rng_server: XorShift::default(),
            enc: None,
            dec: None,
            pack_id: 1,
            recv_id: 1,
            recv: Vec::new(),
            list1: Vec::new(),
            list2: Vec::new(),
            client_overhead: 4,
            unit_len: 2800,
            info,
            side,
        };
        c.init_lists();
        c
    }

    fn salt(&self) -> &'static [u8] {
        match self.kind {
            Kind::AuthChainB => b"auth_chain_b",
            Kind::AuthChainC => b"auth_chain_c",
            Kind::AuthChainD => b"auth_chain_d",
            Kind::AuthChainE => b"auth_chain_e",
            _ => b"auth_chain_a",
        }
    }

    fn init_lists(&mut self) {
        let mut r = XorShift::default();
        r.init_from_bin(&self.info.key);
        let size = |r: &mut XorShift| (r.next_u64() % 2340 % 2040 % 1440) as u16;
        match self.kind {
            Kind::AuthChainB => {
                let n = r.next_u64() % 8 + 4;
                self.list1 = (0..n).map(|_| size(&mut r)).collect();
                self.list1.sort_unstable();
                let n = r.next_u64() % 16 + 8;
                self.list2 = (0..n).map(|_| size(&mut r)).collect();
                self.list2.sort_unstable();
            }
            Kind::AuthChainC | Kind::AuthChainD | Kind::AuthChainE => {
                let n = r.next_u64() % 24 + 12;
                self.list1 = (0..n).map(|_| size(&mut r)).collect();
                self.list1.sort_unstable();
                if self.kind != Kind::AuthChainC {
                    let old = self.list1.len();
                    while self.list1.last().is_some_and(|&l| l < 1300) && self.list1.len() < 64 {
                        self.list1.push(size(&mut r));
                    }
                    if old != self.list1.len() {
                        self.list1.sort_unstable();
                    }
                }
            }
            _ => {}
        }
    }

    /// The random length of a packet carrying `n` bytes (the variant's rule).
    fn rnd_len(&self, n: usize, h: &[u8; 16], rng: &mut XorShift) -> usize {
        let ladder = |v: usize, rng: &mut XorShift| -> usize {
            (if v > 1300 {
                rng.next_u64() % 31
            } else if v > 900 {
                rng.next_u64() % 127
            } else if v > 400 {
                rng.next_u64() % 521
            } else {
                rng.next_u64() % 1021
            }) as usize
        };
        let bisect = |l: &[u16], t: usize| l.partition_point(|&x| (x as usize) < t);
        let t = n + self.info.overhead;
        match self.kind {
            Kind::AuthChainA => {
                if n > 1440 {
                    return 0;
                }
                rng.init_from_bin_len(h, n);
                ladder(n, rng)
            }
            Kind::AuthChainB => {
                if n >= 1440 {
                    return 0;
                }
                rng.init_from_bin_len(h, n);
                let (l1, l2) = (&self.list1, &self.list2);
                let pos = bisect(l1, t);
                let f = pos + (rng.next_u64() % l1.len() as u64) as usize;
                if f < l1.len() {
                    return (l1[f] as usize).saturating_sub(t);
                }
                let pos = bisect(l2, t);
                let f = pos + (rng.next_u64() % l2.len() as u64) as usize;
                if f < l2.len() {
                    return (l2[f] as usize).saturating_sub(t);
                }
                if f < pos + l2.len() - 1 {
                    return 0;
                }
                ladder(n, rng)
            }
            Kind::AuthChainC => {
                rng.init_from_bin_len(h, n);
                let l0 = &self.list1;
                let last = *l0.last().unwrap_or(&0) as usize;
                if t >= last {
                    if t >= 1440 {
                        return 0;
                    }
                    return ladder(t, rng);
                }
                let pos = bisect(l0, t);
                let f = pos + (rng.next_u64() % (l0.len() - pos) as u64) as usize;
                l0[f] as usize - t
            }
            Kind::AuthChainD => {
                let l0 = &self.list1;
                let last = *l0.last().unwrap_or(&0) as usize;
                if t >= last {
                    return 0;
                }
                rng.init_from_bin_len(h, n);
                let pos = bisect(l0, t);
                let f = pos + (rng.next_u64() % (l0.len() - pos) as u64) as usize;
                l0[f] as usize - t
            }
            _ => {
                rng.init_from_bin_len(h, n);
                let l0 = &self.list1;
                let last = *l0.last().unwrap_or(&0) as usize;
                if t >= last {
                    return 0;
                }
                l0[bisect(l0, t)] as usize - t
            }
        }
    }

    /// One data packet of `chunk` (client: `LCH`, server: `LSH`).
    fn pack(&mut self, chunk: &[u8], client: bool, out: &mut Vec<u8>) {
        let mut e = chunk.to_vec();
        if let Some(c) = self.enc.as_mut() {
            use aes::cipher::StreamCipher;
            c.apply_keystream(&mut e);
        }
        let (h, mut rng) = if client {
            (self.last_client, std::mem::take(&mut self.rng_client))
        } else {
            (self.last_server, std::mem::take(&mut self.rng_server))
        };
        let r = self.rnd_len(e.len(), &h, &mut rng);
        let start = out.len();
        let len = e.len() as u16 ^ u16::from_le_bytes([h[14], h[15]]);
        out.extend_from_slice(&len.to_le_bytes());
        if e.is_empty() {
            out.extend_from_slice(&random_bytes(r));
        } else if r > 0 {
            let p = (rng.next_u64() % 8589934609 % r as u64) as usize;
            let pad = random_bytes(r);
            out.extend_from_slice(&pad[..p]);
            out.extend_from_slice(&e);
            out.extend_from_slice(&pad[p..]);
        } else {
            out.extend_from_slice(&e);
        }
        let k = [&self.user_key[..], &self.pack_id.to_le_bytes()].concat();
        let mac = hmac_md5(&k, &[&out[start..]]);
        out.extend_from_slice(&mac[..2]);
        self.pack_id = self.pack_id.wrapping_add(1);
        if client {
            self.last_client = mac;
            self.rng_client = rng;
        } else {
            self.last_server = mac;
            self.rng_server = rng;
        }
    }

    fn rc4_for(&self, h: &[u8]) -> Option<rc4::Rc4> {
        super::super::cipher::rc4_new(&md5(&[b64(&self.user_key).as_bytes(), b64(h).as_bytes()]))
    }

    pub(super) fn client_encode(&mut self, mut data: &[u8], out: &mut Vec<u8>) {
        if !self.sent_header {
            let Side::Client(c) = &self.side else { return };
            let c = c.clone();
            let n = data.len().min(rand_range(0, 31) + head_size(data, 30));
            let mut block = [0u8; 16];
            block[..12].copy_from_slice(&c.auth_data());
            block[12..14].copy_from_slice(&(self.info.overhead as u16).to_le_bytes());
            let mac_key = [&self.info.iv[..], &self.info.key].concat();
            let check = random_bytes(4);
            self.last_client = hmac_md5(&mac_key, &[&check]);
            let (uid, uk) = match &c.login {
                Some((uid, pw)) => (*uid, pw.clone()),
                None => (rand_u32(), self.info.key.to_vec()),
            };
            self.user_key = uk;
            aes128_block(
                &md5(&[b64(&self.user_key).as_bytes(), self.salt()]),
                &mut block,
                true,
            );
            let lc = self.last_client;
            let uidx = uid ^ u32::from_le_bytes(crate::common::array(&lc[8..12]));
            let mut d = Vec::with_capacity(20);
            d.extend_from_slice(&uidx.to_le_bytes());
            d.extend_from_slice(&block);
            self.last_server = hmac_md5(&self.user_key, &[&d]);
            out.extend_from_slice(&check);
            out.extend_from_slice(&lc[..8]);
            out.extend_from_slice(&d);
            out.extend_from_slice(&self.last_server[..4]);
            self.enc = self.rc4_for(&lc);
            self.dec = self.rc4_for(&lc);
            self.sent_header = true;
            self.pack(&data[..n], true, out);
            data = &data[n..];
        }
        while data.len() > self.unit_len {
            self.pack(&data[..self.unit_len], true, out);
            data = &data[self.unit_len..];
        }
        if !data.is_empty() {
            self.pack(data, true, out);
        }
    }

    /// Data packets from the other side; `Ok(true)` when one carried no data.
    fn decode_data(&mut self, client: bool, data: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.recv.extend_from_slice(data);
        let mut empty = false;
        let mut at = 0;
        while self.recv.len() - at > 4 {
            let b = &self.recv[at..];
            // The packets we receive: a client reads the server's, a server the client's.
            let (h, mut rng) = if client {
                (self.last_server, self.rng_server.clone())
            } else {
                (self.last_client, self.rng_client.clone())
            };
            let n =
                (u16::from_le_bytes([b[0], b[1]]) ^ u16::from_le_bytes([h[14], h[15]])) as usize;
            let r = self.rnd_len(n, &h, &mut rng);
            let l = n + r;
            if l >= 4096 {
                return Err(Error::Frame);
            }
            if l + 4 > b.len() {
                break;
            }
            let k = [&self.user_key[..], &self.recv_id.to_le_bytes()].concat();
            let mac = hmac_md5(&k, &[&b[..l + 2]]);
            if !ct::eq(&mac[..2], &b[l + 2..l + 4]) {
                return Err(Error::Frame);
            }
            let pos = if n > 0 && r > 0 {
                2 + (rng.next_u64() % 8589934609 % r as u64) as usize
            } else {
                2
            };
            let mut e = b[pos..pos + n].to_vec();
            if let Some(d) = self.dec.as_mut() {
                use aes::cipher::StreamCipher;
                d.apply_keystream(&mut e);
            }
            if client && self.recv_id == 1 {
                // The server's first packet starts with its TCP MSS.
                e.drain(..e.len().min(2));
            }
            empty |= n == 0;
            out.extend_from_slice(&e);
            self.recv_id = self.recv_id.wrapping_add(1);
            if client {
                self.last_server = mac;
                self.rng_server = rng;
            } else {
                self.last_client = mac;
                self.rng_client = rng;
            }
            at += l + 4;
        }
        self.recv.drain(..at);
        Ok(empty)
    }

    pub(super) fn client_decode(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<()> {
        self.decode_data(true, data, out).map(|_| ())
    }

    pub(super) fn server_encode(&mut self, data: &[u8], out: &mut Vec<u8>) {
        let mut buf;
        let mut data = data;
        if self.pack_id == 1 {
            let mss = self.info.tcp_mss.min(1500);
            buf = (mss as u16).to_le_bytes().to_vec();
            buf.extend_from_slice(data);
            data = &buf;
            self.unit_len = mss.saturating_sub(self.client_overhead).max(100);
        }
        while data.len() > self.unit_len {
            self.pack(&data[..self.unit_len], false, out);
            data = &data[self.unit_len..];
        }
        self.pack(data, false, out);
    }

    pub(super) fn server_decode(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        if self.recv_header {
            return self.decode_data(false, data, out);
        }
        let Side::Server(shared) = &self.side else {
            return Err(Error::Auth);
        };
        let shared = shared.clone();
        self.recv.extend_from_slice(data);
        let b = &self.recv;
        let mac_key = [&self.recv_iv[..], &self.info.key].concat();
        if b.len() >= 5 {
            let lc = hmac_md5(&mac_key, &[&b[..4]]);
            let n = b.len().min(12);
            if lc[..n - 4] != b[4..n] {
                return Err(Error::Auth);
            }
        }
        if b.len() < 36 {
            return Ok(false);
        }
        let lc = hmac_md5(&mac_key, &[&b[..4]]);
        let uid = u32::from_le_bytes(crate::common::array(&b[12..16]))
            ^ u32::from_le_bytes(crate::common::array(&lc[8..12]));
        let user = shared.user_of(uid).ok_or(Error::UnknownUser)?;
        let uk = match &user {
            Some(u) => u.password.clone(),
            None => self.info.key.to_vec(),
        };
        let ls = hmac_md5(&uk, &[&b[12..32]]);
        if ls[..4] != b[32..36] {
            return Err(Error::Auth);
        }
        let mut block = [0u8; 16];
        block.copy_from_slice(&b[16..32]);
        aes128_block(&md5(&[b64(&uk).as_bytes(), self.salt()]), &mut block, false);
        let utc = u32::from_le_bytes(crate::common::array(&block[..4]));
        let id = [&b"chain"[..], &uid.to_le_bytes(), &block[4..12]].concat();
        shared.admit(utc, &id)?;
        self.client_overhead = u16::from_le_bytes([block[12], block[13]]) as usize;
        self.last_client = lc;
        self.last_server = ls;
        self.user_key = uk;
        self.user = user;
        self.enc = self.rc4_for(&lc);
        self.dec = self.rc4_for(&lc);
        self.recv.drain(..36);
        self.recv_header = true;
        self.decode_data(false, &[], out)?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::{ClientShared, TCP_MSS};
    use super::*;
    use crate::common::testutil::hex;

    fn info(key: &[u8], overhead: usize) -> Info {
        Info {
            key: key.into(),
            iv: (0..16).collect(),
            overhead,
            tcp_mss: TCP_MSS,
        }
    }

    #[test]
    fn auth_chain_vectors() {
        // §8 #3 and #4.
        let key = crate::proxy::shadowsocks::cipher::evp_bytes_to_key(b"password", 16);
        let a = AuthChain::new(
            Kind::AuthChainA,
            info(&key, 4),
            Side::Client(Arc::new(ClientShared::new(""))),
        );
        let h: [u8; 16] = hex("900150983cd24fb0d6963f7d28e17f72").try_into().unwrap();
        let mut r = XorShift::default();
        for (n, want) in [
            (0, 191),
            (100, 257),
            (500, 21),
            (1000, 82),
            (1350, 22),
            (1440, 20),
            (1441, 0),
        ] {
            assert_eq!(a.rnd_len(n, &h, &mut r), want, "n={n}");
        }
        let b = AuthChain::new(
            Kind::AuthChainB,
            info(&key, 4),
            Side::Client(Arc::new(ClientShared::new(""))),
        );
        assert_eq!(b.list1, [28, 142, 220, 301]);
        assert_eq!(
            b.list2,
            [
                82, 105, 201, 214, 244, 308, 310, 407, 420, 477, 498, 591, 691, 700, 878, 890, 909,
                1209, 1356
            ]
        );
    }
}
