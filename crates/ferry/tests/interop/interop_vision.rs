//! XTLS Vision (`flow: "xtls-rprx-vision"`) against the real peers: Xray (the reference) and
//! sing-box, each as client and as server against Ferry, and Ferry against itself. Every chain
//! is entry (dokodemo-door / direct) -> client -> VLESS + Vision over TLS 1.3 -> server ->
//! direct -> an inner server in this test. The inner traffic is what decides Vision's course:
//! - TLS 1.3 (records of 1K, 2K, 4K and 16K): padding, then both sides switch to the bare
//!   socket; Ferry's relay log must say both directions were spliced;
//! - TLS 1.2: padding ends with "End", the outer TLS carries the rest (nothing spliced);
//! - not TLS: the same, once the filter has seen its packets.
//!
//! Each case moves 100 MB through an inner echo, byte-exact. The inner TLS is rustls in this
//! process (an echo server and a client that writes and reads at once), trusted by its own
//! self-signed certificate; the outer TLS uses another, pinned (Xray, Ferry) or trusted as the
//! only root (sing-box).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::common;
use common::*;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, ServerConfig, ServerConnection};

const ID: &str = "b831381d-6324-4d53-ad4f-8cda48b30811";
const SNI: &str = "ferry.test";
const INNER_NAME: &str = "inner.test";
const BIG: usize = 100 << 20;

fn big() -> usize {
    std::env::var("FERRY_VISION_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(BIG)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Imp {
    Ferry,
    Xray,
    SingBox,
}
use Imp::*;

/// The tunnelled traffic.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Inner {
    /// TLS 1.3 with records of this much plaintext at most.
    Tls13(usize),
    Tls12,
    Plain,
}

// ---------------------------------------------------------------------------------------
// Certificates

struct Cert {
    cert_pem: String,
    key_pem: String,
    pin: String,
}

fn cert(name: &str) -> Cert {
    let g = ferry::transport::tls::generate_self_signed(&[name.to_string()], 2).unwrap();
    Cert {
        cert_pem: g.cert_pem,
        key_pem: g.key_pem,
        pin: g.pin.iter().map(|b| format!("{b:02x}")).collect(),
    }
}

// ---------------------------------------------------------------------------------------
// The inner TLS: an echo server and a client, both rustls, in this process

/// The inner TLS exchanges keys with X25519 alone. With the post-quantum X25519MLKEM768
/// (rustls's first choice) the ServerHello is about 1.2 KB: in records of 1K it is cut in
/// two, its supported_versions extension lands in the second record, and Vision's filter
/// (Xray's and Ferry's alike) reads the first as a complete TLS 1.2 ServerHello, so nothing
/// is spliced. Browsers send their handshake in 16K records, where this does not happen.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    let mut p = rustls::crypto::aws_lc_rs::default_provider();
    p.kx_groups = vec![rustls::crypto::aws_lc_rs::kx_group::X25519];
    Arc::new(p)
}

/// An echo server speaking `inner` (TLS 1.3 / 1.2 / plain TCP); returns its address and the
/// client config that trusts it.
pub(crate) fn inner_server(inner: Inner) -> (SocketAddr, Option<Arc<ClientConfig>>) {
    let Some(version) = (match inner {
        Inner::Tls13(_) => Some(&rustls::version::TLS13),
        Inner::Tls12 => Some(&rustls::version::TLS12),
        Inner::Plain => None,
    }) else {
        return (echo_server(), None);
    };
    let record = match inner {
        Inner::Tls13(r) => Some(r),
        _ => None,
    };
    let c = cert(INNER_NAME);
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(c.cert_pem.as_bytes())
        .collect::<Result<_, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(c.key_pem.as_bytes()).unwrap();
    let mut sc = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[version])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain.clone(), key)
        .unwrap();
    sc.max_fragment_size = record;
    let sc = Arc::new(sc);
    let mut roots = rustls::RootCertStore::empty();
    roots.add(chain[0].clone()).unwrap();
    let mut cc = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[version])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cc.max_fragment_size = record;
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { continue };
            let sc = sc.clone();
            std::thread::spawn(move || {
                let conn = ServerConnection::new(sc).unwrap();
                let mut t = rustls::StreamOwned::new(conn, s);
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    match t.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            if t.write_all(&buf[..n]).and_then(|_| t.flush()).is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    (addr, Some(Arc::new(cc)))
}

/// Sends `data` over inner TLS on `sock` while reading the echo; calls `midway` once half of
/// it came back (the connection still open).
pub(crate) fn tls_echo_through(
    sock: TcpStream,
    cfg: Arc<ClientConfig>,
    data: &[u8],
    midway: &mut dyn FnMut(),
) -> Vec<u8> {
    let name = ServerName::try_from(INNER_NAME).unwrap();
    let mut conn = ClientConnection::new(cfg, name).unwrap();
    // Whole chunks are encrypted at once (the socket write happens outside the lock).
    conn.set_buffer_limit(None);
    let mut s = sock;
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    while conn.is_handshaking() {
        conn.complete_io(&mut s).unwrap();
    }
    let conn = Arc::new(Mutex::new(conn));
    let mut w = s.try_clone().unwrap();
    let (c2, out) = (conn.clone(), data.to_vec());
    let writer = std::thread::spawn(move || {
        for chunk in out.chunks(256 * 1024) {
            let mut wire = Vec::new();
            {
                let mut c = c2.lock().unwrap();
                c.writer().write_all(chunk).unwrap();
                while c.wants_write() {
                    c.write_tls(&mut wire).unwrap();
                }
            }
            w.write_all(&wire).unwrap();
        }
    });
    let mut got = Vec::with_capacity(data.len());
    let mut buf = vec![0u8; 64 * 1024];
    let mut called = false;
    while got.len() < data.len() {
        let n = s.read(&mut buf).unwrap();
        assert!(
            n > 0,
            "inner TLS: EOF after {} of {} bytes",
            got.len(),
            data.len()
        );
        let mut c = conn.lock().unwrap();
        let mut rd = &buf[..n];
        while !rd.is_empty() {
            c.read_tls(&mut rd).unwrap();
            c.process_new_packets().unwrap();
            let _ = c.reader().read_to_end(&mut got);
        }
        drop(c);
        if !called && got.len() >= data.len() / 2 {
            called = true;
            midway();
        }
    }
    writer.join().unwrap();
    got
}

// ---------------------------------------------------------------------------------------
// Configs

const XRAY_FREEDOM: &str =
    r#"{"protocol":"freedom","settings":{"finalRules":[{"action":"allow","ip":["127.0.0.0/8"]}]}}"#;
const FREEDOM: &str = r#"{"protocol":"freedom","settings":{"finalRules":[{"action":"allow","ip":["127.0.0.0/8","::1"]}]}}"#;

struct Files {
    dir: tempdir::Dir,
}

impl Files {
    fn write(&self, name: &str, body: &str) -> String {
        let p = self.dir.path().join(name);
        std::fs::write(&p, body).unwrap();
        p.to_str().unwrap().to_string()
    }
}

/// A Ferry or Xray server (the same Xray JSON); Ferry's also counts the user's traffic and
/// serves it on `metrics`.
fn xray_server(imp: Imp, port: u16, cert: &str, key: &str, metrics: u16) -> String {
    let freedom = if imp == Xray { XRAY_FREEDOM } else { FREEDOM };
    let extra = if imp == Ferry {
        format!(
            r#""stats":{{}},"policy":{{"levels":{{"0":{{"statsUserUplink":true,"statsUserDownlink":true}}}}}},
               "metrics":{{"listen":"127.0.0.1:{metrics}"}},"#
        )
    } else {
        String::new()
    };
    format!(
        r#"{{"log":{{"loglevel":"debug"}},{extra}
            "inbounds":[{{"listen":"127.0.0.1","port":{port},"protocol":"vless",
              "settings":{{"clients":[{{"id":"{ID}","flow":"xtls-rprx-vision","email":"v@t"}}],
                           "decryption":"none"}},
              "streamSettings":{{"network":"tcp","security":"tls","tlsSettings":{{
                "certificates":[{{"certificateFile":"{cert}","keyFile":"{key}"}}]}}}}}}],
            "outbounds":[{freedom}]}}"#
    )
}

fn xray_client(
    server: u16,
    pin: &str,
    tcp: u16,
    udp: u16,
    target: SocketAddr,
    udp_target: SocketAddr,
) -> String {
    format!(
        r#"{{"log":{{"loglevel":"debug"}},
            "inbounds":[
              {{"listen":"127.0.0.1","port":{tcp},"protocol":"dokodemo-door",
                "settings":{{"address":"127.0.0.1","port":{},"network":"tcp"}}}},
              {{"listen":"127.0.0.1","port":{udp},"protocol":"dokodemo-door",
                "settings":{{"address":"127.0.0.1","port":{},"network":"udp"}}}}],
            "outbounds":[{{"protocol":"vless","settings":{{"vnext":[{{"address":"127.0.0.1",
                "port":{server},"users":[{{"id":"{ID}","encryption":"none",
                "flow":"xtls-rprx-vision"}}]}}]}},
              "streamSettings":{{"network":"tcp","security":"tls","tlsSettings":{{
                "serverName":"{SNI}","pinnedPeerCertSha256":"{pin}"}}}}}}]}}"#,
        target.port(),
        udp_target.port()
    )
}

fn singbox_server(port: u16, cert: &str, key: &str) -> String {
    format!(
        r#"{{"log":{{"level":"debug"}},
            "inbounds":[{{"type":"vless","listen":"127.0.0.1","listen_port":{port},
              "users":[{{"name":"v","uuid":"{ID}","flow":"xtls-rprx-vision"}}],
              "tls":{{"enabled":true,"certificate_path":"{cert}","key_path":"{key}"}}}}],
            "outbounds":[{{"type":"direct"}}]}}"#
    )
}

fn singbox_client(server: u16, cert: &str, tcp: u16, target: SocketAddr) -> String {
    format!(
        r#"{{"log":{{"level":"debug"}},
            "inbounds":[{{"type":"direct","listen":"127.0.0.1","listen_port":{tcp},
              "network":"tcp","override_address":"127.0.0.1","override_port":{}}}],
            "outbounds":[{{"type":"vless","server":"127.0.0.1","server_port":{server},
              "uuid":"{ID}","flow":"xtls-rprx-vision",
              "tls":{{"enabled":true,"server_name":"{SNI}","certificate_path":"{cert}"}}}}]}}"#,
        target.port()
    )
}

fn spawn(imp: Imp, cfg: &str, wait: u16) -> Proc {
    let p = match imp {
        Ferry => return ferry(cfg, &[wait]),
        Xray => spawn_with_config(&peer("xray"), "xray", cfg, &["run", "-c", "{config}"]),
        SingBox => spawn_with_config(
            &peer("sing-box"),
            "sing-box",
            cfg,
            &["run", "-c", "{config}"],
        ),
    };
    wait_listening(wait, &p);
    p
}

// ---------------------------------------------------------------------------------------
// Chains

struct Chain {
    entry: u16,
    udp_entry: u16,
    /// Metrics port of a Ferry server.
    metrics: u16,
    server: Proc,
    client: Proc,
    _files: Files,
}

impl Chain {
    fn logs(&self) -> String {
        format!("{}\n{}", self.server.output(), self.client.output())
    }

    /// The Ferry process of the chain whose relay ends at the inner target (the server) or
    /// at the entry (the client).
    fn ferry(&self) -> Vec<&Proc> {
        [&self.server, &self.client]
            .into_iter()
            .filter(|p| p.name == "ferry")
            .collect()
    }
}

fn chain(client: Imp, server: Imp, target: SocketAddr, udp_target: SocketAddr) -> Chain {
    let files = Files {
        dir: tempdir::Dir::new("vision"),
    };
    let outer = cert(SNI);
    let cert_path = files.write("cert.pem", &outer.cert_pem);
    let key_path = files.write("key.pem", &outer.key_pem);
    let sport = free_port();
    let metrics = free_port();
    let scfg = match server {
        Ferry | Xray => xray_server(server, sport, &cert_path, &key_path, metrics),
        SingBox => singbox_server(sport, &cert_path, &key_path),
    };
    let server_p = spawn(server, &scfg, sport);
    let (entry, udp_entry) = (free_port(), free_port());
    let ccfg = match client {
        Ferry | Xray => xray_client(sport, &outer.pin, entry, udp_entry, target, udp_target),
        SingBox => singbox_client(sport, &cert_path, entry, target),
    };
    let client_p = spawn(client, &ccfg, entry);
    Chain {
        entry,
        udp_entry,
        metrics,
        server: server_p,
        client: client_p,
        _files: files,
    }
}

/// The relay summary lines Ferry logged ("done: up N down N spliced U/D ...").
fn relay_lines(p: &Proc) -> Vec<String> {
    p.output()
        .lines()
        .filter(|l| l.contains(" done: up "))
        .map(str::to_string)
        .collect()
}

/// Waits for `p` to log the end of a relay that moved at least `len` bytes each way and
/// returns its line.
fn relay_line(p: &Proc, len: usize, logs: &dyn Fn() -> String) -> String {
    let t = Instant::now();
    loop {
        let found = relay_lines(p).into_iter().find(|l| {
            let n = |key: &str| -> usize {
                l.split(key)
                    .nth(1)
                    .and_then(|r| r.split_whitespace().next())
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0)
            };
            n(" up ") >= len && n(" down ") >= len
        });
        if let Some(l) = found {
            return l;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "no relay of {len} bytes logged\n{}",
            logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The user's traffic counters on a Ferry server's metrics endpoint.
fn user_traffic(metrics: u16) -> (u64, u64) {
    let mut s = TcpStream::connect(("127.0.0.1", metrics)).unwrap();
    s.write_all(b"GET /debug/vars HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    let body = r.split("\r\n\r\n").nth(1).unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    let u = &v["stats"]["user"]["v@t"];
    (
        u["uplink"].as_u64().unwrap_or(0),
        u["downlink"].as_u64().unwrap_or(0),
    )
}

fn case(client: Imp, server: Imp, inner: Inner) {
    let (target, cc) = inner_server(inner);
    let ch = chain(client, server, target, udp_echo_server());
    let what = format!("{client:?} -> {server:?}, inner {inner:?}");
    let len = big();
    let data = pattern(len, 0x7154 ^ len as u64);
    let s = TcpStream::connect(("127.0.0.1", ch.entry)).unwrap();
    // A Ferry server counts the spliced bytes while the connection is open.
    let mut live = None;
    let mut midway = || {
        if server == Ferry && matches!(inner, Inner::Tls13(_)) {
            live = Some(user_traffic(ch.metrics));
        }
    };
    let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match cc {
        Some(cc) => tls_echo_through(s, cc, &data, &mut midway),
        None => echo_through(s, &data),
    }))
    .unwrap_or_else(|_| panic!("{what}: transfer failed\n{}", ch.logs()));
    assert!(got == data, "{what}: bytes differ\n{}", ch.logs());
    if let Some((up, down)) = live {
        assert!(
            up >= (len / 2) as u64 && down >= (len / 2) as u64,
            "{what}: the user's counters lag the spliced bytes: up {up} down {down}"
        );
    }
    // Ferry says how each direction went. Only inner TLS 1.3 is spliced: Ferry's own writer
    // always switches (uplink for a client, downlink for a server); the other direction
    // switches when the peer's writer does, which Xray's does only when one of its reads of
    // the inner stream ends exactly at a record boundary (BENCHMARKS.md, issue 14).
    let tls13 = matches!(inner, Inner::Tls13(_));
    let both = client == Ferry && server == Ferry;
    for p in ch.ferry() {
        let line = relay_line(p, len, &|| ch.logs());
        let flags = line
            .split("spliced ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or_default()
            .to_string();
        let (up, down) = flags.split_once('/').unwrap_or_default();
        let ours = if std::ptr::eq(p, &ch.client) {
            up
        } else {
            down
        };
        let theirs = if std::ptr::eq(p, &ch.client) {
            down
        } else {
            up
        };
        assert_eq!(
            ours,
            tls13.to_string(),
            "{what}: Ferry's writer: {line}\n{}",
            ch.logs()
        );
        if !tls13 || both {
            assert_eq!(theirs, tls13.to_string(), "{what}: {line}\n{}", ch.logs());
        }
    }
}

macro_rules! cases {
    ($($name:ident: $client:expr, $server:expr, $inner:expr;)*) => {
        $(
            #[test]
            fn $name() {
                case($client, $server, $inner);
            }
        )*
    };
}

cases! {
    ferry_to_xray_tls13_1k: Ferry, Xray, Inner::Tls13(1024);
    ferry_to_xray_tls13_2k: Ferry, Xray, Inner::Tls13(2048);
    ferry_to_xray_tls13_4k: Ferry, Xray, Inner::Tls13(4096);
    ferry_to_xray_tls13_16k: Ferry, Xray, Inner::Tls13(16384);
    ferry_to_xray_tls12: Ferry, Xray, Inner::Tls12;
    ferry_to_xray_plain: Ferry, Xray, Inner::Plain;
    xray_to_ferry_tls13_1k: Xray, Ferry, Inner::Tls13(1024);
    xray_to_ferry_tls13_2k: Xray, Ferry, Inner::Tls13(2048);
    xray_to_ferry_tls13_4k: Xray, Ferry, Inner::Tls13(4096);
    xray_to_ferry_tls13_16k: Xray, Ferry, Inner::Tls13(16384);
    xray_to_ferry_tls12: Xray, Ferry, Inner::Tls12;
    xray_to_ferry_plain: Xray, Ferry, Inner::Plain;
    ferry_to_singbox_tls13_1k: Ferry, SingBox, Inner::Tls13(1024);
    ferry_to_singbox_tls13_2k: Ferry, SingBox, Inner::Tls13(2048);
    ferry_to_singbox_tls13_4k: Ferry, SingBox, Inner::Tls13(4096);
    ferry_to_singbox_tls13_16k: Ferry, SingBox, Inner::Tls13(16384);
    ferry_to_singbox_tls12: Ferry, SingBox, Inner::Tls12;
    ferry_to_singbox_plain: Ferry, SingBox, Inner::Plain;
    singbox_to_ferry_tls13_1k: SingBox, Ferry, Inner::Tls13(1024);
    singbox_to_ferry_tls13_2k: SingBox, Ferry, Inner::Tls13(2048);
    singbox_to_ferry_tls13_4k: SingBox, Ferry, Inner::Tls13(4096);
    singbox_to_ferry_tls13_16k: SingBox, Ferry, Inner::Tls13(16384);
    singbox_to_ferry_tls12: SingBox, Ferry, Inner::Tls12;
    singbox_to_ferry_plain: SingBox, Ferry, Inner::Plain;
    ferry_to_ferry_tls13_16k: Ferry, Ferry, Inner::Tls13(16384);
    ferry_to_ferry_plain: Ferry, Ferry, Inner::Plain;
}

/// UDP under Vision: the client carries it as XUDP over Mux.Cool with Vision framing (Xray
/// does so for every port but 443); datagrams come back byte-exact.
fn udp_case(client: Imp, server: Imp) {
    let (target, _) = inner_server(Inner::Plain);
    let ch = chain(client, server, target, udp_echo_server());
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = vec![0u8; 65536];
    for i in 0..20u16 {
        let d = pattern(1 + i as usize * 199, i as u64);
        sock.send_to(&d, ("127.0.0.1", ch.udp_entry)).unwrap();
        let (n, _) = sock
            .recv_from(&mut buf)
            .unwrap_or_else(|e| panic!("datagram {i}: {e}\n{}", ch.logs()));
        assert_eq!(&buf[..n], &d[..], "datagram {i}");
    }
}

#[test]
fn udp_from_an_xray_vision_client() {
    udp_case(Xray, Ferry);
}

#[test]
fn udp_to_an_xray_vision_server() {
    udp_case(Ferry, Xray);
}
