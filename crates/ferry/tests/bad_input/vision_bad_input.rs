//! A Ferry VLESS + Vision server fed hostile or odd Vision streams by a hand-driven client
//! (rustls for the outer TLS, Vision blocks written byte by byte): malformed padding, unknown
//! commands, a switch at the wrong time, truncated blocks, inner "TLS" that stops looking
//! like TLS, a client that never sends its inner ClientHello. Each connection ends cleanly or
//! keeps copying as Xray does; the server never falls over, and a normal connection works
//! after every case.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::common;
use common::*;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry::proxy::vless::vision::Unpadder;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection};

const ID: &str = "b831381d-6324-4d53-ad4f-8cda48b30811";
const UUID: [u8; 16] = [
    0xb8, 0x31, 0x38, 0x1d, 0x63, 0x24, 0x4d, 0x53, 0xad, 0x4f, 0x8c, 0xda, 0x48, 0xb3, 0x08, 0x11,
];
const SNI: &str = "ferry.test";

struct Server {
    proc: Proc,
    port: u16,
    target: SocketAddr,
    tls: Arc<ClientConfig>,
    _dir: tempdir::Dir,
}

fn server() -> Server {
    let dir = tempdir::Dir::new("vision-bad");
    let g = ferry::transport::tls::generate_self_signed(&[SNI.to_string()], 2).unwrap();
    let cert = dir.path().join("c.pem");
    let key = dir.path().join("k.pem");
    std::fs::write(&cert, &g.cert_pem).unwrap();
    std::fs::write(&key, &g.key_pem).unwrap();
    let port = free_port();
    let cfg = format!(
        r#"{{"log":{{"loglevel":"debug"}},
            "policy":{{"levels":{{"0":{{"handshake":2,"connIdle":4}}}}}},
            "inbounds":[{{"listen":"127.0.0.1","port":{port},"protocol":"vless",
              "settings":{{"clients":[{{"id":"{ID}","flow":"xtls-rprx-vision"}}],"decryption":"none"}},
              "streamSettings":{{"security":"tls","tlsSettings":{{"certificates":[
                {{"certificateFile":"{}","keyFile":"{}"}}]}}}}}}],
            "outbounds":[{{"protocol":"freedom","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}]}}"#,
        cert.display(),
        key.display()
    );
    let proc = ferry(&cfg, &[port]);
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(g.cert_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let tls = ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13])
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    Server {
        proc,
        port,
        target: echo_server(),
        tls: Arc::new(tls),
        _dir: dir,
    }
}

/// A VLESS + Vision client driven by hand.
struct Client {
    sock: TcpStream,
    conn: ClientConnection,
    unpadder: Unpadder,
    response_seen: bool,
}

impl Client {
    fn connect(s: &Server) -> Client {
        let mut sock = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(8))).unwrap();
        let name = ServerName::try_from(SNI).unwrap();
        let mut conn = ClientConnection::new(s.tls.clone(), name).unwrap();
        while conn.is_handshaking() {
            conn.complete_io(&mut sock).unwrap();
        }
        Client {
            sock,
            conn,
            unpadder: Unpadder::new(UUID),
            response_seen: false,
        }
    }

    /// The VLESS request header (flow xtls-rprx-vision, TCP to `target`).
    fn header(target: SocketAddr) -> Vec<u8> {
        let mut h = vec![0];
        h.extend_from_slice(&UUID);
        h.push(18);
        h.extend_from_slice(&[0x0a, 0x10]);
        h.extend_from_slice(b"xtls-rprx-vision");
        h.push(1);
        h.extend_from_slice(&target.port().to_be_bytes());
        h.push(1);
        h.extend_from_slice(&[127, 0, 0, 1]);
        h
    }

    /// Sends `data` as one outer TLS record.
    fn send(&mut self, data: &[u8]) {
        self.conn.writer().write_all(data).unwrap();
        let mut wire = Vec::new();
        while self.conn.wants_write() {
            self.conn.write_tls(&mut wire).unwrap();
        }
        self.sock.write_all(&wire).unwrap();
    }

    /// Sends `data` on the bare socket, under the outer TLS.
    fn send_raw(&mut self, data: &[u8]) {
        self.sock.write_all(data).unwrap();
    }

    /// Reads what the server sends back (response stripped, blocks unpadded) until `want`
    /// bytes came or the connection ends; `None` if it ended first.
    fn recv(&mut self, want: usize) -> Option<Vec<u8>> {
        let mut plain = Vec::new();
        let mut content = Vec::new();
        let mut buf = vec![0u8; 65536];
        while content.len() < want {
            let n = match self.sock.read(&mut buf) {
                Ok(0) | Err(_) => return None,
                Ok(n) => n,
            };
            let mut rd = &buf[..n];
            while !rd.is_empty() {
                self.conn.read_tls(&mut rd).unwrap();
                if self.conn.process_new_packets().is_err() {
                    return None;
                }
                let _ = self.conn.reader().read_to_end(&mut plain);
            }
            if !self.response_seen && plain.len() >= 2 {
                assert_eq!(&plain[..2], &[0, 0], "VLESS response");
                plain.drain(..2);
                self.response_seen = true;
            }
            if self.response_seen && !plain.is_empty() {
                self.unpadder.unpad(&plain, &mut content);
                self.unpadder.end_batch();
                plain.clear();
            }
        }
        Some(content)
    }

    /// The server closed the connection (EOF or reset) within `within`.
    fn closed_within(&mut self, within: Duration) -> bool {
        self.sock.set_read_timeout(Some(within)).unwrap();
        let mut buf = [0u8; 4096];
        let t = Instant::now();
        loop {
            match self.sock.read(&mut buf) {
                Ok(0) => return true,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
                Err(_) => return false,
            }
            if t.elapsed() > within {
                return false;
            }
        }
    }
}

fn block(first: bool, cmd: u8, content: &[u8], pad: u16) -> Vec<u8> {
    let mut v = Vec::new();
    if first {
        v.extend_from_slice(&UUID);
    }
    v.push(cmd);
    v.extend_from_slice(&(content.len() as u16).to_be_bytes());
    v.extend_from_slice(&pad.to_be_bytes());
    v.extend_from_slice(content);
    v.resize(v.len() + pad as usize, 0);
    v
}

/// A normal Vision connection still works (the server is alive and unaffected).
fn still_serves(s: &Server, case: &str) {
    let mut c = Client::connect(s);
    let mut first = Client::header(s.target);
    first.extend(block(true, 0, b"ping", 100));
    c.send(&first);
    let got = c.recv(4);
    assert_eq!(
        got.as_deref(),
        Some(&b"ping"[..]),
        "after {case}\n{}",
        s.proc.output()
    );
}

#[test]
fn hostile_vision_streams_end_cleanly_or_keep_copying() {
    let s = server();
    let t = s.target;

    // An unknown command ends the blocks; what follows passes as it is (as Xray).
    let mut c = Client::connect(&s);
    let mut m = Client::header(t);
    m.extend(block(true, 7, b"odd", 20));
    m.extend_from_slice(b" then plain");
    c.send(&m);
    assert_eq!(c.recv(14).as_deref(), Some(&b"odd then plain"[..]));
    still_serves(&s, "an unknown command");

    // A first buffer that is not a Vision block at all passes through unparsed (as Xray).
    let mut c = Client::connect(&s);
    let mut m = Client::header(t);
    m.extend_from_slice(b"no blocks here, just bytes");
    c.send(&m);
    assert_eq!(
        c.recv(26).as_deref(),
        Some(&b"no blocks here, just bytes"[..])
    );
    still_serves(&s, "no blocks");

    // Direct before any inner TLS: the server reads the bare socket from there (as Xray).
    let mut c = Client::connect(&s);
    let mut m = Client::header(t);
    m.extend(block(true, 2, b"early ", 10));
    c.send(&m);
    c.send_raw(b"switch");
    assert_eq!(
        c.recv(12).as_deref(),
        Some(&b"early switch"[..]),
        "{}",
        s.proc.output()
    );
    still_serves(&s, "an early switch");

    // A block announcing more than arrives, then EOF: the connection just ends.
    let mut c = Client::connect(&s);
    let mut m = Client::header(t);
    let mut b = block(true, 0, &[7u8; 300], 0);
    b.truncate(100);
    b[17..19].copy_from_slice(&5000u16.to_be_bytes());
    m.extend(b);
    c.send(&m);
    c.sock.shutdown(std::net::Shutdown::Write).unwrap();
    assert!(c.closed_within(Duration::from_secs(5)), "truncated block");
    still_serves(&s, "a truncated block");

    // Padding lengths past the block limit are read and dropped, nothing else.
    let mut c = Client::connect(&s);
    let mut m = Client::header(t);
    m.extend(block(true, 0, b"big pad", 9000));
    m.extend(block(false, 1, b"!", 0));
    c.send(&m);
    assert_eq!(c.recv(8).as_deref(), Some(&b"big pad!"[..]));
    still_serves(&s, "long padding");

    // Inner "TLS" that stops looking like TLS: a ClientHello start, then garbage; padding
    // ends when the filter gives up and the bytes keep flowing.
    let mut c = Client::connect(&s);
    let mut m = Client::header(t);
    let hello = [0x16, 0x03, 0x01, 0x00, 0x05, 0x01, 1, 2, 3, 4];
    m.extend(block(true, 0, &hello, 500));
    c.send(&m);
    assert_eq!(c.recv(hello.len()).as_deref(), Some(&hello[..]));
    for i in 0..10u8 {
        let junk = vec![0xee ^ i; 700];
        c.send(&block(false, 0, &junk, 30));
        assert_eq!(c.recv(700).as_deref(), Some(&junk[..]), "junk {i}");
    }
    still_serves(&s, "inner TLS that stops being TLS");

    // A client that never sends its inner ClientHello (header and an empty padded block
    // only) is held until the idle timeout (4 s here), then closed.
    let mut c = Client::connect(&s);
    let mut m = Client::header(t);
    m.extend(block(true, 0, b"", 1000));
    c.send(&m);
    assert!(!c.closed_within(Duration::from_secs(2)), "closed too early");
    assert!(c.closed_within(Duration::from_secs(6)), "never closed");
    still_serves(&s, "a silent client");

    // A garbage request flow and a Vision request from plain VLESS are refused.
    let mut c = Client::connect(&s);
    let mut m = Client::header(t);
    m[20..36].copy_from_slice(b"xtls-rprx-direct");
    c.send(&m);
    assert!(c.closed_within(Duration::from_secs(3)), "unknown flow");
    let mut c = Client::connect(&s);
    let mut m = vec![0];
    m.extend_from_slice(&UUID);
    m.extend_from_slice(&[0, 1]);
    m.extend_from_slice(&t.port().to_be_bytes());
    m.extend_from_slice(&[1, 127, 0, 0, 1]);
    m.extend_from_slice(b"plain vless for a vision user");
    c.send(&m);
    assert!(c.closed_within(Duration::from_secs(3)), "empty flow");
    still_serves(&s, "refused requests");
    let log = s.proc.output();
    assert!(log.contains("unknown request flow"), "{log}");
    assert!(log.contains("client flow is empty"), "{log}");
    assert!(!log.contains("panicked"), "{log}");
}
