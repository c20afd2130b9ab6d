//! tls1.2_ticket_auth / tls1.2_ticket_fastauth (shadowsocksr.md §5.3): a TLS 1.2 handshake
//! with session tickets, authenticated by HMAC-SHA1, then application data records.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::super::util::{
    hmac_sha1, now_u32, rand_u16, rand_u8, random_bytes, Error, ReplayWindow, Result,
};
use super::{pick, Info, Side};
use crate::common::ct;

/// What the TLS obfs of one outbound shares: its client id and session tickets (§5.3).
pub struct TlsClientShared {
    client_id: [u8; 32],
    tickets: Mutex<HashMap<String, Vec<u8>>>,
}

impl Default for TlsClientShared {
    fn default() -> Self {
        let mut id = [0u8; 32];
        crate::common::rand::fill(&mut id);
        TlsClientShared {
            client_id: id,
            tickets: Mutex::default(),
        }
    }
}

/// What the TLS obfs of one inbound shares: the hello randoms seen and the start time.
pub struct TlsServerShared {
    replay: Mutex<ReplayWindow>,
    startup: u32,
}

impl Default for TlsServerShared {
    fn default() -> Self {
        TlsServerShared {
            replay: Mutex::new(ReplayWindow::new(86400)),
            startup: now_u32().wrapping_sub(1800),
        }
    }
}
pub struct Tls {
    info: Info,
    side: Side,
    /// Client: 0 before the hello, 1 waiting for the server flight, 8 established.
    /// Server: 0 before the hello, 1 waiting for Finished, 4 established.
    state: u8,
    /// Server: the client's session id.
    client_id: Vec<u8>,
    /// Client: records queued during the handshake.
    queue: Vec<u8>,
    recv: Vec<u8>,
}

/// Application data records: a write over 2048 bytes is cut into random-sized records.
fn app_records(mut data: &[u8], out: &mut Vec<u8>) {
    while data.len() > 2048 {
        let n =
            ((u16::from_be_bytes(rand_u16().to_le_bytes()) % 4096) as usize + 100).min(data.len());
        record(0x17, &data[..n], out);
        data = &data[n..];
    }
    if !data.is_empty() {
        record(0x17, data, out);
    }
}

fn record(t: u8, data: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&[t, 3, 3]);
    out.extend_from_slice(&(data.len() as u16).to_be_bytes());
    out.extend_from_slice(data);
}

/// Strips `17 03 03` records from `buf` into `out`; `Err` at any other record.
fn open_records(buf: &mut Vec<u8>, out: &mut Vec<u8>, strict: bool) -> Result<()> {
    let mut at = 0;
    while buf.len() - at > 5 {
        let b = &buf[at..];
        if b[0] != 0x17 || (strict && (b[1] != 3 || b[2] != 3)) {
            return Err(Error::Obfs);
        }
        let n = u16::from_be_bytes([b[3], b[4]]) as usize;
        if b.len() < n + 5 {
            break;
        }
        out.extend_from_slice(&b[5..5 + n]);
        at += 5 + n;
    }
    buf.drain(..at);
    Ok(())
}

impl Tls {
    pub(super) fn new(info: Info, side: Side) -> Tls {
        Tls {
            info,
            side,
            state: 0,
            client_id: Vec::new(),
            queue: Vec::new(),
            recv: Vec::new(),
        }
    }

    fn k(&self, client_id: &[u8]) -> Vec<u8> {
        [&self.info.key[..], client_id].concat()
    }

    fn auth32(&self, client_id: &[u8]) -> [u8; 32] {
        let mut a = [0u8; 32];
        a[..4].copy_from_slice(&now_u32().to_be_bytes());
        crate::common::rand::fill(&mut a[4..22]);
        let m = hmac_sha1(&self.k(client_id), &[&a[..22]]);
        a[22..].copy_from_slice(&m[..10]);
        a
    }

    pub(super) fn client_encode(&mut self, data: &[u8], out: &mut Vec<u8>) {
        let Side::Client(shared) = &self.side else {
            return;
        };
        let shared = shared.clone();
        if self.state == 8 {
            return app_records(data, out);
        }
        for c in data.chunks(16384) {
            record(0x17, c, &mut self.queue);
        }
        if self.state == 0 {
            self.state = 1;
            let cid = shared.client_id;
            let mut hello = Vec::with_capacity(512);
            hello.extend_from_slice(&[3, 3]);
            hello.extend_from_slice(&self.auth32(&cid));
            hello.push(0x20);
            hello.extend_from_slice(&cid);
            hello.extend_from_slice(&[
                0x00, 0x1c, 0xc0, 0x2b, 0xc0, 0x2f, 0xcc, 0xa9, 0xcc, 0xa8, 0xcc, 0x14, 0xcc, 0x13,
                0xc0, 0x0a, 0xc0, 0x14, 0xc0, 0x09, 0xc0, 0x13, 0x00, 0x9c, 0x00, 0x35, 0x00, 0x2f,
                0x00, 0x0a, 0x01, 0x00,
            ]);
            let mut ext = vec![0xff, 0x01, 0x00, 0x01, 0x00];
            let hosts = if self.info.param.is_empty() {
                self.info.host.clone()
            } else {
                self.info.param.clone()
            };
            let host = if hosts.ends_with(|c: char| c.is_ascii_digit()) {
                String::new()
            } else {
                let v: Vec<&str> = hosts.split(',').collect();
                pick(&v).to_string()
            };
            let h = host.as_bytes();
            ext.extend_from_slice(&[0, 0]);
            ext.extend_from_slice(&((h.len() + 5) as u16).to_be_bytes());
            ext.extend_from_slice(&((h.len() + 3) as u16).to_be_bytes());
            ext.push(0);
            ext.extend_from_slice(&(h.len() as u16).to_be_bytes());
            ext.extend_from_slice(h);
            ext.extend_from_slice(&[0x00, 0x17, 0x00, 0x00]);
            let ticket = {
                let mut g = shared.tickets.lock().unwrap_or_else(|e| e.into_inner());
                if g.len() > 256 {
                    g.clear();
                }
                g.entry(host.clone())
                    .or_insert_with(|| {
                        random_bytes(
                            (u16::from_be_bytes(rand_u16().to_le_bytes()) % 17 + 8) as usize * 16,
                        )
                    })
                    .clone()
            };
            ext.extend_from_slice(&[0x00, 0x23]);
            ext.extend_from_slice(&(ticket.len() as u16).to_be_bytes());
            ext.extend_from_slice(&ticket);
            ext.extend_from_slice(&[
                0x00, 0x0d, 0x00, 0x16, 0x00, 0x14, 0x06, 0x01, 0x06, 0x03, 0x05, 0x01, 0x05, 0x03,
                0x04, 0x01, 0x04, 0x03, 0x03, 0x01, 0x03, 0x03, 0x02, 0x01, 0x02, 0x03,
            ]);
            ext.extend_from_slice(&[0x00, 0x05, 0x00, 0x05, 0x01, 0x00, 0x00, 0x00, 0x00]);
            ext.extend_from_slice(&[0x00, 0x12, 0x00, 0x00]);
            ext.extend_from_slice(&[0x75, 0x50, 0x00, 0x00]);
            ext.extend_from_slice(&[0x00, 0x0b, 0x00, 0x02, 0x01, 0x00]);
            ext.extend_from_slice(&[0x00, 0x0a, 0x00, 0x06, 0x00, 0x04, 0x00, 0x17, 0x00, 0x18]);
            hello.extend_from_slice(&(ext.len() as u16).to_be_bytes());
            hello.extend_from_slice(&ext);
            out.extend_from_slice(&[0x16, 3, 1]);
            out.extend_from_slice(&((hello.len() + 4) as u16).to_be_bytes());
            out.extend_from_slice(&[1, 0]);
            out.extend_from_slice(&(hello.len() as u16).to_be_bytes());
            out.extend_from_slice(&hello);
            return;
        }
        if self.state == 2 {
            // The flight was verified: Finished, then what was queued.
            let start = out.len();
            out.extend_from_slice(&[0x14, 3, 3, 0, 1, 1, 0x16, 3, 3, 0, 0x20]);
            out.extend_from_slice(&random_bytes(22));
            let m = hmac_sha1(&self.k(&shared.client_id), &[&out[start..]]);
            out.extend_from_slice(&m[..10]);
            out.append(&mut self.queue);
            self.state = 8;
        }
    }

    pub(super) fn client_decode(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        let Side::Client(shared) = &self.side else {
            return Err(Error::Obfs);
        };
        self.recv.extend_from_slice(data);
        if self.state >= 2 {
            open_records(&mut self.recv, out, false)?;
            return Ok(false);
        }
        // The flight: records up to the Finished after the ChangeCipherSpec.
        let b = &self.recv;
        let (mut at, mut ccs, mut end) = (0, false, None);
        while b.len() >= at + 5 {
            let n = u16::from_be_bytes([b[at + 3], b[at + 4]]) as usize;
            if b.len() < at + 5 + n {
                break;
            }
            let t = b[at];
            at += 5 + n;
            if t == 0x14 {
                ccs = true;
            } else if t == 0x16 && ccs {
                end = Some(at);
                break;
            } else if t != 0x16 {
                return Err(Error::Obfs);
            }
        }
        if b.len() > 8192 && end.is_none() {
            return Err(Error::Obfs);
        }
        let Some(end) = end else {
            return Ok(false);
        };
        let f = &b[..end];
        let k = self.k(&shared.client_id);
        if f.len() < 76
            || !ct::eq(&hmac_sha1(&k, &[&f[11..33]])[..10], &f[33..43])
            || !ct::eq(&hmac_sha1(&k, &[&f[..end - 10]])[..10], &f[end - 10..])
        {
            return Err(Error::Obfs);
        }
        self.recv.drain(..end);
        self.state = 2;
        let mut rest = std::mem::take(&mut self.recv);
        open_records(&mut rest, out, false)?;
        self.recv = rest;
        Ok(true)
    }

    pub(super) fn server_encode(&mut self, data: &[u8], out: &mut Vec<u8>) {
        if self.state & 8 == 8 {
            return app_records(data, out);
        }
        self.state |= 8;
        let start = out.len();
        let mut sh = vec![3, 3];
        sh.extend_from_slice(&self.auth32(&self.client_id.clone()));
        sh.push(0x20);
        sh.extend_from_slice(&self.client_id);
        sh.extend_from_slice(&[0xc0, 0x2f, 0x00, 0x00, 0x05, 0xff, 0x01, 0x00, 0x01, 0x00]);
        let mut hs = vec![2, 0];
        hs.extend_from_slice(&(sh.len() as u16).to_be_bytes());
        hs.extend_from_slice(&sh);
        record(0x16, &hs, out);
        if rand_u8().is_multiple_of(9) {
            let t = (u16::from_be_bytes(rand_u16().to_le_bytes()) % 164) as usize * 2 + 64;
            let mut tk = vec![4, 0];
            tk.extend_from_slice(&(t as u16).to_be_bytes());
            tk.extend_from_slice(&random_bytes(t));
            record(0x16, &tk, out);
        }
        out.extend_from_slice(&[0x14, 3, 3, 0, 1, 1]);
        let f = if rand_u8() & 1 == 0 { 32 } else { 40 };
        out.extend_from_slice(&[0x16, 3, 3, 0, f as u8]);
        out.extend_from_slice(&random_bytes(f - 10));
        let m = hmac_sha1(&self.k(&self.client_id), &[&out[start..]]);
        out.extend_from_slice(&m[..10]);
        app_records(data, out);
    }

    pub(super) fn server_decode(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        let Side::Server(shared) = &self.side else {
            return Err(Error::Obfs);
        };
        let shared = shared.clone();
        self.recv.extend_from_slice(data);
        if self.state & 4 == 4 {
            open_records(&mut self.recv, out, true)?;
            return Ok(false);
        }
        let mut sendback = false;
        if self.state & 1 == 0 {
            let b = &self.recv;
            let n = b.len().min(3);
            if b[..n] != [0x16, 3, 1][..n] {
                return Err(Error::Obfs);
            }
            if b.len() < 5 {
                return Ok(false);
            }
            let len = u16::from_be_bytes([b[3], b[4]]) as usize;
            if b.len() < len + 5 {
                return Ok(false);
            }
            let h = &b[5..5 + len];
            if h.len() < 4 + 2 + 32 + 1 || h[..2] != [1, 0] {
                return Err(Error::Obfs);
            }
            if u16::from_be_bytes([h[2], h[3]]) as usize != len - 4 || h[4..6] != [3, 3] {
                return Err(Error::Obfs);
            }
            let random = &h[6..38];
            let sid_len = h[38] as usize;
            if sid_len < 32 || h.len() < 39 + sid_len {
                return Err(Error::Obfs);
            }
            let sid = &h[39..39 + sid_len];
            if !ct::eq(
                &hmac_sha1(&self.k(sid), &[&random[..22]])[..10],
                &random[22..],
            ) {
                return Err(Error::Obfs);
            }
            let max: i64 = if self.info.param.is_empty() {
                86400
            } else {
                self.info.param.trim().parse().unwrap_or(86400)
            };
            let t = u32::from_be_bytes(crate::common::array(&random[..4]));
            if max > 0
                && (super::super::util::time_diff(now_u32(), t) > max
                    || (t.wrapping_sub(shared.startup) as i32 as i64) < -max / 2)
            {
                return Err(Error::Time);
            }
            if !shared
                .replay
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .check_and_insert(&random[..22], t)
            {
                return Err(Error::Replay);
            }
            self.client_id = sid.to_vec();
            self.recv.drain(..len + 5);
            self.state = 1;
            sendback = true;
        }
        // ChangeCipherSpec and Finished (may already be here: fastauth clients).
        let b = &self.recv;
        let n = b.len().min(6);
        if b[..n] != [0x14, 3, 3, 0, 1, 1][..n] {
            return Err(Error::Obfs);
        }
        if b.len() < 11 {
            return Ok(sendback);
        }
        if b[6..9] != [0x16, 3, 3] {
            return Err(Error::Obfs);
        }
        let f = u16::from_be_bytes([b[9], b[10]]) as usize;
        if !(10..=256).contains(&f) {
            return Err(Error::Obfs);
        }
        let vl = f + 1;
        if b.len() < vl + 10 {
            return Ok(sendback);
        }
        if !ct::eq(
            &hmac_sha1(&self.k(&self.client_id), &[&b[..vl]])[..10],
            &b[vl..vl + 10],
        ) {
            return Err(Error::Obfs);
        }
        self.recv.drain(..vl + 10);
        self.state |= 4;
        open_records(&mut self.recv, out, true)?;
        Ok(sendback)
    }
}

/// A fresh TLS client side (one per outbound).
pub fn tls_client() -> Side {
    Side::Client(Arc::new(TlsClientShared::default()))
}

#[cfg(test)]
mod tests {
    use super::super::tests::info;
    use super::super::{Kind, Obfs};
    use super::*;

    #[test]
    fn tls_hello_replay_and_bad_hmac_are_refused() {
        let cs = Arc::new(TlsClientShared::default());
        let ss = Arc::new(TlsServerShared::default());
        let mut c = Obfs::new(Kind::TlsTicketAuth, info(""), Side::Client(cs));
        let mut hello = Vec::new();
        c.client_encode(b"data", &mut hello);
        let mut out = Vec::new();
        let mut s = Obfs::new(Kind::TlsTicketAuth, info(""), Side::Server(ss.clone()));
        assert!(s.server_decode(&hello, &mut out).unwrap());
        let mut s = Obfs::new(Kind::TlsTicketAuth, info(""), Side::Server(ss.clone()));
        assert_eq!(s.server_decode(&hello, &mut out), Err(Error::Replay));
        let mut bad = hello.clone();
        bad[11 + 25] ^= 1;
        let mut s = Obfs::new(Kind::TlsTicketAuth, info(""), Side::Server(ss));
        assert_eq!(s.server_decode(&bad, &mut out), Err(Error::Obfs));
    }
}
