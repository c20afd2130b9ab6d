//! Obfs plugins (shadowsocksr.md §5): the outermost layer, a disguise around the encrypted
//! stream. Sans-IO codecs like the protocols: `*_decode` returns whether this side must send
//! `*_encode(&[])` now (the TLS server flight, the client Finished, random_head's answer).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::util::{
    crc32, hmac_sha1, now_u32, rand_u16, rand_u32, rand_u8, random_bytes, Error, ReplayWindow,
    Result,
};
use crate::common::ct;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Plain,
    HttpSimple,
    HttpPost,
    RandomHead,
    TlsTicketAuth,
    TlsTicketFastauth,
}

impl Kind {
    pub const ALL: &'static [Kind] = &[
        Kind::Plain,
        Kind::HttpSimple,
        Kind::HttpPost,
        Kind::RandomHead,
        Kind::TlsTicketAuth,
        Kind::TlsTicketFastauth,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Plain => "plain",
            Kind::HttpSimple => "http_simple",
            Kind::HttpPost => "http_post",
            Kind::RandomHead => "random_head",
            Kind::TlsTicketAuth => "tls1.2_ticket_auth",
            Kind::TlsTicketFastauth => "tls1.2_ticket_fastauth",
        }
    }

    pub fn parse(name: &str) -> Option<Kind> {
        let n = name.to_ascii_lowercase();
        let n = if n.is_empty() { "plain" } else { n.as_str() };
        Kind::ALL.iter().copied().find(|k| k.name() == n)
    }

    pub fn overhead(self) -> usize {
        match self {
            Kind::TlsTicketAuth | Kind::TlsTicketFastauth => 5,
            _ => 0,
        }
    }
}

/// Per-connection facts the obfs needs.
#[derive(Clone)]
pub struct Info {
    /// Client: the configured server host and port (Host header, SNI fallback).
    pub host: String,
    pub port: u16,
    /// `obfsParam`.
    pub param: String,
    pub key: Arc<[u8]>,
    /// Client: IV length plus the size of the request head (how much goes into the URL).
    pub head_size: usize,
}

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

pub enum Side {
    Client(Arc<TlsClientShared>),
    Server(Arc<TlsServerShared>),
}

pub enum Obfs {
    Plain,
    Http(Box<Http>),
    RandomHead(Box<RandomHead>),
    Tls(Box<Tls>),
}

impl Obfs {
    pub fn new(kind: Kind, info: Info, side: Side) -> Obfs {
        match kind {
            Kind::Plain => Obfs::Plain,
            Kind::HttpSimple | Kind::HttpPost => Obfs::Http(Box::new(Http {
                post: kind == Kind::HttpPost,
                info,
                sent: false,
                recv_done: false,
                recv: Vec::new(),
            })),
            Kind::RandomHead => Obfs::RandomHead(Box::default()),
            Kind::TlsTicketAuth | Kind::TlsTicketFastauth => Obfs::Tls(Box::new(Tls {
                info,
                side,
                state: 0,
                client_id: Vec::new(),
                queue: Vec::new(),
                recv: Vec::new(),
            })),
        }
    }

    pub fn client_encode(&mut self, data: &[u8], out: &mut Vec<u8>) {
        match self {
            Obfs::Plain => out.extend_from_slice(data),
            Obfs::Http(h) => h.client_encode(data, out),
            Obfs::RandomHead(r) => r.client_encode(data, out),
            Obfs::Tls(t) => t.client_encode(data, out),
        }
    }

    pub fn client_decode(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        match self {
            Obfs::Plain => {
                out.extend_from_slice(data);
                Ok(false)
            }
            Obfs::Http(h) => h.client_decode(data, out),
            Obfs::RandomHead(r) => Ok(r.client_decode(data, out)),
            Obfs::Tls(t) => t.client_decode(data, out),
        }
    }

    pub fn server_encode(&mut self, data: &[u8], out: &mut Vec<u8>) {
        match self {
            Obfs::Plain => out.extend_from_slice(data),
            Obfs::Http(h) => h.server_encode(data, out),
            Obfs::RandomHead(r) => r.server_encode(data, out),
            Obfs::Tls(t) => t.server_encode(data, out),
        }
    }

    pub fn server_decode(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        match self {
            Obfs::Plain => {
                out.extend_from_slice(data);
                Ok(false)
            }
            Obfs::Http(h) => h.server_decode(data, out),
            Obfs::RandomHead(r) => r.server_decode(data, out),
            Obfs::Tls(t) => t.server_decode(data, out),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// http_simple / http_post (§5.1)

const USER_AGENTS: &[&str] = &[
    "Mozilla/5.0 (Windows NT 6.3; WOW64; rv:40.0) Gecko/20100101 Firefox/40.0",
    "Mozilla/5.0 (Windows NT 6.3; WOW64; rv:40.0) Gecko/20100101 Firefox/44.0",
    "Mozilla/5.0 (Windows NT 6.1) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/41.0.2228.0 Safari/537.36",
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/535.11 (KHTML, like Gecko) Ubuntu/11.10 Chromium/27.0.1453.93 Chrome/27.0.1453.93 Safari/537.36",
    "Mozilla/5.0 (X11; Ubuntu; Linux x86_64; rv:35.0) Gecko/20100101 Firefox/35.0",
    "Mozilla/5.0 (compatible; WOW64; MSIE 10.0; Windows NT 6.2)",
    "Mozilla/5.0 (Windows; U; Windows NT 6.1; en-US) AppleWebKit/533.20.25 (KHTML, like Gecko) Version/5.0.4 Safari/533.20.27",
    "Mozilla/4.0 (compatible; MSIE 7.0; Windows NT 6.3; Trident/7.0; .NET4.0E; .NET4.0C)",
    "Mozilla/5.0 (Windows NT 6.3; Trident/7.0; rv:11.0) like Gecko",
    "Mozilla/5.0 (Linux; Android 4.4; Nexus 5 Build/BuildID) AppleWebKit/537.36 (KHTML, like Gecko) Version/4.0 Chrome/30.0.0.0 Mobile Safari/537.36",
    "Mozilla/5.0 (iPad; CPU OS 5_0 like Mac OS X) AppleWebKit/534.46 (KHTML, like Gecko) Version/5.1 Mobile/9A334 Safari/7534.48.3",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 5_0 like Mac OS X) AppleWebKit/534.46 (KHTML, like Gecko) Version/5.1 Mobile/9A334 Safari/7534.48.3",
];

/// Largest request head a server buffers before giving up.
const HTTP_MAX_HEAD: usize = 65536;

pub struct Http {
    post: bool,
    info: Info,
    sent: bool,
    recv_done: bool,
    recv: Vec<u8>,
}

fn pick<'a>(list: &[&'a str]) -> &'a str {
    list[rand_u32() as usize % list.len()]
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

impl Http {
    fn client_encode(&mut self, data: &[u8], out: &mut Vec<u8>) {
        if self.sent {
            out.extend_from_slice(data);
            return;
        }
        self.sent = true;
        let head = self.info.head_size;
        let n = if data.len() > head + 64 {
            head + (rand_u8() as usize % 65)
        } else {
            data.len()
        };
        let (url, rest) = data.split_at(n);
        let param = if self.info.param.is_empty() {
            self.info.host.clone()
        } else {
            self.info.param.clone()
        };
        let (hosts, custom) = match param.split_once('#') {
            Some((h, c)) => (h.to_string(), Some(c.to_string())),
            None => (param, None),
        };
        let hosts: Vec<&str> = hosts.split(',').collect();
        let host = pick(&hosts);
        let mut h = String::with_capacity(512 + 3 * url.len());
        h.push_str(if self.post { "POST /" } else { "GET /" });
        for b in url {
            h.push_str(&format!("%{b:02x}"));
        }
        h.push_str(" HTTP/1.1\r\nHost: ");
        h.push_str(host);
        if self.info.port != 80 {
            h.push_str(&format!(":{}", self.info.port));
        }
        h.push_str("\r\n");
        match custom {
            Some(c) => {
                let c = c.replace("\\n", "\r\n");
                let c = if self.post {
                    c
                } else {
                    c.replace("\r\n", "\n").replace('\n', "\r\n")
                };
                h.push_str(&c);
                h.push_str("\r\n\r\n");
            }
            None => {
                h.push_str("User-Agent: ");
                h.push_str(pick(USER_AGENTS));
                h.push_str("\r\nAccept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8\r\nAccept-Language: en-US,en;q=0.8\r\nAccept-Encoding: gzip, deflate\r\n");
                if self.post {
                    const ALNUM: &[u8] =
                        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
                    let b: String = random_bytes(32)
                        .iter()
                        .map(|x| ALNUM[*x as usize % ALNUM.len()] as char)
                        .collect();
                    h.push_str("Content-Type: multipart/form-data; boundary=");
                    h.push_str(&b);
                    h.push_str("\r\n");
                }
                h.push_str("DNT: 1\r\nConnection: keep-alive\r\n\r\n");
            }
        }
        out.extend_from_slice(h.as_bytes());
        out.extend_from_slice(rest);
    }

    fn client_decode(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        if self.recv_done {
            out.extend_from_slice(data);
            return Ok(false);
        }
        self.recv.extend_from_slice(data);
        if let Some(p) = find(&self.recv, b"\r\n\r\n") {
            out.extend_from_slice(&self.recv[p + 4..]);
            self.recv = Vec::new();
            self.recv_done = true;
        } else if self.recv.len() > HTTP_MAX_HEAD {
            return Err(Error::Obfs);
        }
        Ok(false)
    }

    fn server_encode(&mut self, data: &[u8], out: &mut Vec<u8>) {
        if !self.sent {
            self.sent = true;
            out.extend_from_slice(
                format!(
                    "HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nContent-Encoding: gzip\r\nContent-Type: text/html\r\nDate: {}\r\nServer: nginx\r\nVary: Accept-Encoding\r\n\r\n",
                    http_date(std::time::SystemTime::now())
                )
                .as_bytes(),
            );
        }
        out.extend_from_slice(data);
    }

    fn server_decode(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        if self.recv_done {
            out.extend_from_slice(data);
            return Ok(false);
        }
        self.recv.extend_from_slice(data);
        let b = &self.recv;
        let n = b.len().min(5);
        if !(b"GET "[..n.min(4)] == b[..n.min(4)] || b"POST "[..n] == b[..n]) {
            return Err(Error::Obfs);
        }
        let Some(end) = find(b, b"\r\n\r\n") else {
            if b.len() > HTTP_MAX_HEAD {
                return Err(Error::Obfs);
            }
            return Ok(false);
        };
        let head = &b[..end];
        let first = head.split(|&c| c == b'\r').next().unwrap_or_default();
        let mut got = Vec::new();
        for item in first.split(|&c| c == b'%').skip(1) {
            let hex = |h: &[u8]| -> Result<u8> {
                let s = std::str::from_utf8(h).map_err(|_| Error::Obfs)?;
                u8::from_str_radix(s, 16).map_err(|_| Error::Obfs)
            };
            match item.len() {
                0 => return Err(Error::Obfs),
                1 => {
                    got.push(hex(item)?);
                    break;
                }
                2 => got.push(hex(item)?),
                _ => {
                    got.push(hex(&item[..2])?);
                    break;
                }
            }
        }
        if !self.info.param.is_empty() {
            let hosts: Vec<&str> = self
                .info
                .param
                .split('#')
                .next()
                .unwrap_or_default()
                .split(',')
                .map(str::trim)
                .collect();
            let host = head
                .split(|&c| c == b'\n')
                .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
                .find_map(|l| l.strip_prefix(b"Host: "))
                .map(|h| String::from_utf8_lossy(h).to_string());
            if let Some(h) = host {
                let h = match h.rsplit_once(':') {
                    Some((a, p)) if p.bytes().all(|c| c.is_ascii_digit()) => a.to_string(),
                    _ => h,
                };
                if !hosts.iter().any(|x| *x == h) {
                    return Err(Error::Obfs);
                }
            }
        }
        if got.len() < 4 {
            return Err(Error::Obfs);
        }
        got.extend_from_slice(&b[end + 4..]);
        if got.len() < 13 {
            return Err(Error::Obfs);
        }
        out.extend_from_slice(&got);
        self.recv = Vec::new();
        self.recv_done = true;
        Ok(false)
    }
}

/// `%a, %d %b %Y %H:%M:%S GMT`.
fn http_date(t: std::time::SystemTime) -> String {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = (secs / 86400) as i64;
    let rem = secs % 86400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    const WD: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MON: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{}, {:02} {} {} {:02}:{:02}:{:02} GMT",
        WD[days.rem_euclid(7) as usize],
        d,
        MON[(m - 1) as usize],
        y,
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

// ---------------------------------------------------------------------------------------------
// random_head (§5.2)

#[derive(Default)]
pub struct RandomHead {
    sent_head: bool,
    raw_sent: bool,
    raw_recv: bool,
    recv_head: bool,
    queue: Vec<u8>,
}

impl RandomHead {
    fn head(out: &mut Vec<u8>) {
        let d = random_bytes(rand_u8() as usize % 96 + 4);
        let crc = 0xffff_ffffu32.wrapping_sub(crc32(&[&d]));
        out.extend_from_slice(&d);
        out.extend_from_slice(&crc.to_le_bytes());
    }

    fn client_encode(&mut self, data: &[u8], out: &mut Vec<u8>) {
        if self.raw_sent {
            out.extend_from_slice(data);
            return;
        }
        self.queue.extend_from_slice(data);
        if !self.sent_head {
            self.sent_head = true;
            Self::head(out);
            return;
        }
        if self.raw_recv {
            out.append(&mut self.queue);
            self.raw_sent = true;
        }
    }

    fn client_decode(&mut self, data: &[u8], out: &mut Vec<u8>) -> bool {
        if self.raw_recv {
            out.extend_from_slice(data);
            return false;
        }
        self.raw_recv = true;
        true
    }

    fn server_encode(&mut self, data: &[u8], out: &mut Vec<u8>) {
        if !self.sent_head {
            self.sent_head = true;
            out.extend_from_slice(&random_bytes(rand_u8() as usize % 96 + 4));
        }
        out.extend_from_slice(data);
    }

    fn server_decode(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        if self.recv_head {
            out.extend_from_slice(data);
            return Ok(false);
        }
        self.recv_head = true;
        if crc32(&[data]) != 0xffff_ffff {
            return Err(Error::Obfs);
        }
        Ok(true)
    }
}

// ---------------------------------------------------------------------------------------------
// tls1.2_ticket_auth / tls1.2_ticket_fastauth (§5.3)

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

    fn client_encode(&mut self, data: &[u8], out: &mut Vec<u8>) {
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

    fn client_decode(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<bool> {
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

    fn server_encode(&mut self, data: &[u8], out: &mut Vec<u8>) {
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

    fn server_decode(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<bool> {
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
                && (super::util::time_diff(now_u32(), t) > max
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
    use super::*;

    fn info(param: &str) -> Info {
        Info {
            host: "www.example.com".into(),
            port: 8388,
            param: param.into(),
            key: vec![5u8; 16].into(),
            head_size: 16 + 7,
        }
    }

    fn pair(kind: Kind, param: &str) {
        let cs = Arc::new(TlsClientShared::default());
        let ss = Arc::new(TlsServerShared::default());
        let mut c = Obfs::new(kind, info(""), Side::Client(cs));
        let mut s = Obfs::new(kind, info(param), Side::Server(ss));
        let req: Vec<u8> = (0..5000u32).map(|i| (i * 3) as u8).collect();
        // Client → server, with the sendbacks each side asks for.
        let mut wire = Vec::new();
        c.client_encode(&req[..100], &mut wire);
        let mut got = Vec::new();
        let mut sb = Vec::new();
        if s.server_decode(&wire, &mut got).unwrap() {
            s.server_encode(&[], &mut sb);
        }
        let mut cgot = Vec::new();
        let mut wire = Vec::new();
        if !sb.is_empty() && c.client_decode(&sb, &mut cgot).unwrap() {
            c.client_encode(&[], &mut wire);
        }
        c.client_encode(&req[100..], &mut wire);
        for p in wire.chunks(97) {
            assert!(!s.server_decode(p, &mut got).unwrap());
        }
        assert_eq!(got, req, "{kind:?}");
        let mut back = Vec::new();
        s.server_encode(&req, &mut back);
        for p in back.chunks(1000) {
            c.client_decode(p, &mut cgot).unwrap();
        }
        assert_eq!(cgot, req, "{kind:?}");
    }

    #[test]
    fn every_obfs_round_trips() {
        for &k in Kind::ALL {
            pair(k, "");
        }
        pair(Kind::HttpSimple, "www.example.com,b.example");
        pair(Kind::TlsTicketAuth, "3600");
    }

    #[test]
    fn http_simple_refuses_a_foreign_host_and_short_url() {
        let mut s = Obfs::new(
            Kind::HttpSimple,
            info("only.example"),
            Side::Server(Default::default()),
        );
        let mut out = Vec::new();
        let req = b"GET /%00%01%02%03%04%05%06%07%08%09%0a%0b%0c%0d HTTP/1.1\r\nHost: www.example.com\r\n\r\n";
        assert_eq!(s.server_decode(req, &mut out), Err(Error::Obfs));
        let mut s = Obfs::new(Kind::HttpSimple, info(""), Side::Server(Default::default()));
        assert_eq!(
            s.server_decode(b"GET /%00%01 HTTP/1.1\r\nHost: a\r\n\r\n", &mut out),
            Err(Error::Obfs)
        );
        let mut s = Obfs::new(Kind::HttpSimple, info(""), Side::Server(Default::default()));
        assert_eq!(s.server_decode(b"\x16\x03\x01", &mut out), Err(Error::Obfs));
    }

    #[test]
    fn http_date_format() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1700000000);
        assert_eq!(http_date(t), "Tue, 14 Nov 2023 22:13:20 GMT");
    }

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
