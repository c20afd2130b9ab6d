//! Obfs plugins (shadowsocksr.md §5): the outermost layer, a disguise around the encrypted
//! stream. Sans-IO codecs like the protocols: `*_decode` returns whether this side must send
//! `*_encode(&[])` now (the TLS server flight, the client Finished, random_head's answer).
//!
//! * `http.rs`: http_simple, http_post; `random_head.rs`; `tls.rs`: tls1.2_ticket_auth and
//!   _fastauth, with what the TLS connections of one side share.

mod http;
mod random_head;
mod tls;

use std::sync::Arc;

use super::util::{rand_u32, Result};

pub use http::Http;
pub use random_head::RandomHead;
pub use tls::{tls_client, Tls, TlsClientShared, TlsServerShared};

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
            Kind::HttpSimple | Kind::HttpPost => {
                Obfs::Http(Box::new(Http::new(kind == Kind::HttpPost, info)))
            }
            Kind::RandomHead => Obfs::RandomHead(Box::default()),
            Kind::TlsTicketAuth | Kind::TlsTicketFastauth => {
                Obfs::Tls(Box::new(Tls::new(info, side)))
            }
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
/// One of `list`, at random (Host names, User-Agents).
fn pick<'a>(list: &[&'a str]) -> &'a str {
    list[rand_u32() as usize % list.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn info(param: &str) -> Info {
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
}
