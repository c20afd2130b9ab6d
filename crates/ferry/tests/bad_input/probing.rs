//! Active probing: a prober must not tell a Ferry server from its reference implementation.
//!
//! Each case starts Ferry and the reference server (shadowsocks-rust for Shadowsocks AEAD and
//! 2022; Xray for VMess, VLESS, VLESS Encryption, Trojan and REALITY) with the same settings and a 1 s handshake
//! timeout,
//! then sends both the same probes, each on a fresh connection: nothing; random bytes of
//! several lengths; a valid client's first packet (recorded from the real client through a
//! recording relay) replayed once and twice; that packet truncated and with one byte flipped
//! at several offsets, on packets the server has seen and on unseen ones; an HTTP GET; a TLS
//! ClientHello. What a prober can observe is compared: whether bytes came back, FIN or RST,
//! and when the server closed (at once / at the handshake timeout / later / held open). Any
//! difference not listed as deliberate fails the case. Probes run in parallel.
//!
//! REALITY is answered by its `target` website (nginx here, with an RSA certificate so that
//! its records have the same lengths on every connection), so bytes do come back. For it the
//! comparison adds the answer's shape (its TLS records' types and lengths, or its length when
//! it is not TLS) and whether the answer is the target's own: a recording tap between each
//! server and nginx tells whether the prober got exactly the bytes the target sent on that
//! server's connection for the probe, or an answer of the server's own (a REALITY handshake).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::common;
mod probing_tls;
use common::*;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a probe watches its connection: past the 1 s handshake timeout, with margin.
const WATCH: Duration = Duration::from_millis(2500);
/// The handshake timeout both servers get (seconds).
const HANDSHAKE: u64 = 1;
const UUID: &str = "b831381d-6324-4d53-ad4f-8cda48b30811";
const PASSWORD: &str = "probe-pass-1234";
const KEY_2022: &str = "AAECAwQFBgcICQoLDA0ODw==";
/// REALITY: the target's name and the key pair of interop_reality.rs.
const SNI: &str = "reality.test";
const PRIVATE_KEY: &str = "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA";
const PUBLIC_KEY: &str = "B6N8vBQgk8i3VdwbEOhstCY3StFqqFPtC9_AsrhtHHw";
const SHORT_ID: &str = "0123456789abcdef";
/// 1700 and 1800 bracket Xray's VMess drain size for [`UUID`] (1745 to 1763 bytes).
const RANDOM_LENGTHS: [usize; 14] = [
    1, 7, 16, 32, 50, 64, 100, 221, 1000, 1700, 1800, 2049, 4096, 8193,
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Fin,
    Rst,
    Open,
}

/// What an answer looks like, up to what differs per connection (randoms, keys): its TLS
/// records as (type, length) when it starts as TLS (a last cut record with what is there,
/// type 0 for bytes that are not a record), else its length.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Shape {
    Nothing,
    Tls(Vec<(u8, usize)>),
    Raw(usize),
}

fn shape(b: &[u8]) -> Shape {
    if b.is_empty() {
        return Shape::Nothing;
    }
    if b.len() < 5 || !(20..=23).contains(&b[0]) || b[1] != 3 {
        return Shape::Raw(b.len());
    }
    let mut v = Vec::new();
    let mut rest = b;
    while rest.len() >= 5 && (20..=23).contains(&rest[0]) {
        let n = (5 + u16::from_be_bytes([rest[3], rest[4]]) as usize).min(rest.len());
        v.push((rest[0], n));
        rest = &rest[n..];
    }
    if !rest.is_empty() {
        v.push((0, rest.len()));
    }
    Shape::Tls(v)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum When {
    /// Within 0.5 s.
    AtOnce,
    /// Around the handshake timeout.
    Handshake,
    /// Closed, but at neither of those times.
    Other,
    /// Still open when the watch ended.
    Held,
}

/// What a prober observes of one probe.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Reaction {
    answered: bool,
    end: End,
    when: When,
    /// With a website behind the server (REALITY), what its answer looks like (elsewhere an
    /// answer is a served client's, whose length varies: VMess pads) ...
    shape: Option<Shape>,
    /// ... and whether it is, byte for byte, what the website sent on the server's
    /// connection for this probe.
    targets: Option<bool>,
}

/// One observation with its raw figures (for the printed table).
#[derive(Debug, Clone)]
struct Seen {
    r: Reaction,
    bytes: usize,
    secs: f64,
    data: Vec<u8>,
}

fn bucket(t: Duration) -> When {
    let hs = Duration::from_secs(HANDSHAKE);
    if t < Duration::from_millis(500) {
        When::AtOnce
    } else if t >= hs.mul_f64(0.8) && t <= hs + Duration::from_millis(800) {
        When::Handshake
    } else {
        When::Other
    }
}

/// Sends `data` on a fresh connection and watches what comes back for [`WATCH`].
fn probe(port: u16, data: &[u8]) -> Seen {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    let t0 = Instant::now();
    s.set_nodelay(true).ok();
    // A server may reset before everything was written: what it does is read below.
    let _ = s.write_all(data);
    let mut got = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let end = loop {
        let left = WATCH.saturating_sub(t0.elapsed());
        if left.is_zero() {
            break End::Open;
        }
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut buf) {
            Ok(0) => break End::Fin,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => break End::Rst,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => panic!("probe read: {e}"),
        }
    };
    let t = t0.elapsed();
    let when = match end {
        End::Open => When::Held,
        _ => bucket(t),
    };
    Seen {
        r: Reaction {
            answered: !got.is_empty(),
            end,
            when,
            shape: None,
            targets: None,
        },
        bytes: got.len(),
        secs: t.as_secs_f64(),
        data: got,
    }
}

/// A relay a real client connects to: it records what the client sends first (everything up
/// to a pause of 300 ms), and either forwards the connection to a server (the packet is then
/// seen by that server) or keeps it to itself (an unseen packet).
struct Recorder {
    port: u16,
    forward: Arc<Mutex<Option<u16>>>,
    records: Mutex<mpsc::Receiver<Vec<u8>>>,
}

impl Recorder {
    fn start() -> Recorder {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let forward: Arc<Mutex<Option<u16>>> = Arc::default();
        let (tx, rx) = mpsc::channel();
        let fw = forward.clone();
        std::thread::spawn(move || {
            for c in l.incoming() {
                let Ok(c) = c else { continue };
                let to = *fw.lock().unwrap();
                let tx = tx.clone();
                std::thread::spawn(move || record_conn(c, to, tx));
            }
        });
        Recorder {
            port,
            forward,
            records: Mutex::new(rx),
        }
    }

    /// Sends `payload` through the client listening on `entry` and returns the first packet
    /// the client sent for it; with `to`, the relay forwards it to that server, and the echo
    /// coming back proves the packet valid.
    fn record(&self, entry: u16, to: Option<u16>, payload: &[u8]) -> Vec<u8> {
        *self.forward.lock().unwrap() = to;
        let mut c = TcpStream::connect(("127.0.0.1", entry)).unwrap();
        c.write_all(payload).unwrap();
        let rec = self
            .records
            .lock()
            .unwrap()
            .recv_timeout(Duration::from_secs(10))
            .expect("the client sent nothing to the recording relay");
        if to.is_some() {
            c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut back = vec![0u8; payload.len()];
            c.read_exact(&mut back).expect("echo through the server");
            assert_eq!(back, payload, "echo through the server");
        }
        rec
    }

    /// `n` unseen packets, recorded in parallel.
    fn unseen(&self, entry: u16, n: usize, payload: &[u8]) -> Vec<Vec<u8>> {
        *self.forward.lock().unwrap() = None;
        let conns: Vec<TcpStream> = (0..n)
            .map(|_| {
                let mut c = TcpStream::connect(("127.0.0.1", entry)).unwrap();
                c.write_all(payload).unwrap();
                c
            })
            .collect();
        let rx = self.records.lock().unwrap();
        let got = (0..n)
            .map(|_| {
                rx.recv_timeout(Duration::from_secs(10))
                    .expect("the client sent nothing to the recording relay")
            })
            .collect();
        drop(conns);
        got
    }

    /// Discards what arrives until nothing has for `quiet`: a client that failed its
    /// handshake with the relay may dial again (Xray's REALITY client retries), and those
    /// packets must not be taken for later recordings, nor be forwarded.
    fn drain(&self, quiet: Duration) {
        let rx = self.records.lock().unwrap();
        while rx.recv_timeout(quiet).is_ok() {}
    }
}

fn record_conn(mut c: TcpStream, to: Option<u16>, tx: mpsc::Sender<Vec<u8>>) {
    let up = to.map(|p| TcpStream::connect(("127.0.0.1", p)).unwrap());
    if let Some(up) = &up {
        let mut from = up.try_clone().unwrap();
        let mut back = c.try_clone().unwrap();
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut from, &mut back);
            let _ = back.shutdown(Shutdown::Write);
        });
    }
    let mut rec = Vec::new();
    let mut sent = false;
    let mut buf = vec![0u8; 64 * 1024];
    c.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    loop {
        match c.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if !sent {
                    rec.extend_from_slice(&buf[..n]);
                }
                if let Some(mut up) = up.as_ref() {
                    if up.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                if !sent && !rec.is_empty() {
                    let _ = tx.send(std::mem::take(&mut rec));
                    sent = true;
                    if up.is_none() {
                        return;
                    }
                    c.set_read_timeout(None).unwrap();
                }
            }
            Err(_) => break,
        }
    }
    if !sent && !rec.is_empty() {
        let _ = tx.send(rec);
    }
    if let Some(up) = up {
        let _ = up.shutdown(Shutdown::Write);
    }
}

/// A TLS 1.3 ClientHello as a browser-like client would send first.
fn client_hello() -> Vec<u8> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let mut c =
        rustls::ClientConnection::new(Arc::new(cfg), "example.com".try_into().unwrap()).unwrap();
    let mut out = Vec::new();
    while c.wants_write() {
        c.write_tls(&mut out).unwrap();
    }
    assert_eq!(out[0], 0x16, "a handshake record");
    out
}

fn flip(p: &[u8], at: usize) -> Vec<u8> {
    let mut v = p.to_vec();
    v[at] ^= 0x01;
    v
}

/// A server protocol under test: how to start both servers and a real client.
struct Case {
    name: &'static str,
    /// Truncation offsets and flipped-byte offsets (`usize::MAX` = the last byte). Offsets
    /// that would redirect a request to another address are left out.
    truncs: &'static [usize],
    flips: &'static [usize],
    /// Probes (by name prefix) that may differ deliberately: Ferry refuses a replay where the
    /// reference serves it. Ferry's reaction to them must then be its reaction to garbage (with
    /// a website behind: the website's own answer), so the refusal is not observable in a new
    /// way.
    deliberate: &'static [&'static str],
    ferry_inbound: String,
    /// Whether Ferry's inbound counts its rejections (checked on its metrics endpoint).
    counts_rejections: bool,
    /// Starts the reference server on a port.
    reference: Box<dyn Fn(u16) -> Proc>,
    /// Starts the real client: entry port, recorder port, echo target.
    client: Box<dyn Fn(u16, u16, SocketAddr) -> Proc>,
    /// The packet a prober takes from what the client sent first (REALITY: its ClientHello
    /// record; the rest of a served client's first flight answers that server alone).
    packet: fn(Vec<u8>) -> Vec<u8>,
    /// REALITY: the website both servers hand what is not theirs to, with a tap for each.
    behind: Option<Behind>,
}

/// A TCP proxy to `to` that records each connection's bytes both ways.
struct Tap {
    port: u16,
    flows: Arc<Mutex<Vec<Arc<Flow>>>>,
}

#[derive(Default)]
struct Flow {
    c2s: Mutex<Vec<u8>>,
    s2c: Mutex<Vec<u8>>,
    /// Directions finished (2 = both).
    ended: std::sync::atomic::AtomicUsize,
}

impl Flow {
    fn done(&self) -> bool {
        self.ended.load(std::sync::atomic::Ordering::SeqCst) >= 2
    }
}

fn tap_half(mut from: TcpStream, mut to: TcpStream, rec: Arc<Flow>, up: bool) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) => {
                let _ = to.shutdown(Shutdown::Write);
                break;
            }
            Ok(n) => {
                // Recorded before it is passed on: what a prober got is here by then.
                let side = if up { &rec.c2s } else { &rec.s2c };
                side.lock().unwrap().extend_from_slice(&buf[..n]);
                if to.write_all(&buf[..n]).is_err() {
                    let _ = from.shutdown(Shutdown::Both);
                    let _ = to.shutdown(Shutdown::Both);
                    break;
                }
            }
            Err(_) => {
                let _ = from.shutdown(Shutdown::Both);
                let _ = to.shutdown(Shutdown::Both);
                break;
            }
        }
    }
    rec.ended.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

impl Tap {
    fn new(to: u16) -> Tap {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let flows: Arc<Mutex<Vec<Arc<Flow>>>> = Arc::default();
        let fl = flows.clone();
        std::thread::spawn(move || {
            for c in l.incoming() {
                let Ok(c) = c else { continue };
                let rec = Arc::new(Flow::default());
                fl.lock().unwrap().push(rec.clone());
                let Ok(s) = TcpStream::connect(("127.0.0.1", to)) else {
                    rec.ended.store(2, std::sync::atomic::Ordering::SeqCst);
                    continue;
                };
                let _ = s.set_nodelay(true);
                let _ = c.set_nodelay(true);
                let (c2, s2, r2) = (c.try_clone().unwrap(), s.try_clone().unwrap(), rec.clone());
                std::thread::spawn(move || tap_half(c, s, rec, true));
                std::thread::spawn(move || tap_half(s2, c2, r2, false));
            }
        });
        Tap { port, flows }
    }

    fn count(&self) -> usize {
        self.flows.lock().unwrap().len()
    }

    /// Whether `got`, a prober's answer to `sent`, is exactly what the website sent on one
    /// of the connections since the `since`-th that carried (a beginning of) `sent`.
    fn answered_by_target(&self, since: usize, sent: &[u8], got: &[u8]) -> bool {
        let t = Instant::now();
        loop {
            let flows: Vec<Arc<Flow>> = self.flows.lock().unwrap()[since..].to_vec();
            let carried: Vec<&Arc<Flow>> = flows
                .iter()
                .filter(|f| sent.starts_with(&f.c2s.lock().unwrap()))
                .collect();
            if carried
                .iter()
                .any(|f| f.done() && *f.s2c.lock().unwrap() == got)
            {
                return true;
            }
            if carried.iter().all(|f| f.done()) || t.elapsed() > Duration::from_secs(5) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The REALITY target: nginx with HTTPS (TLS 1.2 and 1.3) for [`SNI`] on a loopback port, with
/// an RSA certificate (RSA signatures have one length: so have its records) and a 2 s
/// `client_header_timeout` (it also ends Xray's record probe at start, as in
/// interop_reality.rs), and a tap in front of it for each server.
struct Behind {
    ferry: Tap,
    reference: Tap,
    _nginx: Proc,
    _dir: tempdir::Dir,
}

impl Behind {
    fn start() -> Behind {
        let dir = tempdir::Dir::new("probe-target");
        let d = dir.path();
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_RSA_SHA256).unwrap();
        let cert = rcgen::CertificateParams::new(vec![SNI.to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        std::fs::write(d.join("cert.pem"), cert.pem()).unwrap();
        std::fs::write(d.join("key.pem"), key.serialize_pem()).unwrap();
        let port = free_port();
        let body = tls_site(
            port,
            SNI,
            &d.join("cert.pem"),
            &d.join("key.pem"),
            "probe target page",
        );
        let nginx = nginx(d, Nginx::Http(&body), &[port]);
        Behind {
            ferry: Tap::new(port),
            reference: Tap::new(port),
            _nginx: nginx,
            _dir: dir,
        }
    }
}

fn ferry_server(port: u16, metrics: u16, inbound: &str) -> Proc {
    let cfg = format!(
        r#"{{"log":{{"loglevel":"info"}},"stats":{{}},"metrics":{{"listen":"127.0.0.1:{metrics}"}},
        "policy":{{"levels":{{"0":{{"handshake":{HANDSHAKE}}}}}}},
        "inbounds":[{{"tag":"probed","listen":"127.0.0.1","port":{port},{inbound}}}],
        "outbounds":[{{"protocol":"freedom","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}]}}"#
    );
    ferry(&cfg, &[port, metrics])
}

fn xray_server(port: u16, inbound: &str) -> Proc {
    let cfg = format!(
        r#"{{"log":{{"loglevel":"warning"}},
        "policy":{{"levels":{{"0":{{"handshake":{HANDSHAKE}}}}}}},
        "inbounds":[{{"listen":"127.0.0.1","port":{port},{inbound}}}],
        "outbounds":[{{"protocol":"freedom","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8"]}}]}}}}]}}"#
    );
    let p = spawn_with_config(&peer("xray"), "xray", &cfg, &["run", "-c", "{config}"]);
    wait_listening(port, &p);
    p
}

fn xray_client(entry: u16, outbound: &str, target: SocketAddr) -> Proc {
    let cfg = format!(
        r#"{{"log":{{"loglevel":"warning"}},
        "inbounds":[{{"listen":"127.0.0.1","port":{entry},"protocol":"dokodemo-door","settings":{{"address":"127.0.0.1","port":{},"network":"tcp"}}}}],
        "outbounds":[{outbound}]}}"#,
        target.port()
    );
    let p = spawn_with_config(
        &peer("xray"),
        "xray-client",
        &cfg,
        &["run", "-c", "{config}"],
    );
    wait_listening(entry, &p);
    p
}

fn ssserver(port: u16, method: &str, password: &str) -> Proc {
    let cfg = format!(
        r#"{{"server":"127.0.0.1","server_port":{port},"method":"{method}","password":"{password}"}}"#
    );
    let p = spawn_with_config(&peer("ssserver"), "ssserver", &cfg, &["-c", "{config}"]);
    wait_listening(port, &p);
    p
}

fn sslocal(entry: u16, server: u16, target: SocketAddr, method: &str, password: &str) -> Proc {
    let cfg = format!(
        r#"{{"locals":[{{"local_address":"127.0.0.1","local_port":{entry},"protocol":"tunnel",
             "forward_address":"127.0.0.1","forward_port":{}}}],
           "server":"127.0.0.1","server_port":{server},"method":"{method}","password":"{password}"}}"#,
        target.port()
    );
    let p = spawn_with_config(&peer("sslocal"), "sslocal", &cfg, &["-c", "{config}"]);
    wait_listening(entry, &p);
    p
}

/// GETs `path` from Ferry's metrics endpoint.
fn metrics(port: u16, path: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// Runs `probes` against both servers in parallel: (name, ferry, reference) per probe. With
/// a website `behind`, each answer is also checked against what the website sent.
fn run_probes(
    ferry: u16,
    reference: u16,
    behind: Option<&Behind>,
    probes: Vec<(String, Vec<u8>, Vec<u8>)>,
) -> Vec<(String, Seen, Seen)> {
    let since = behind.map(|b| (b.ferry.count(), b.reference.count()));
    let handles: Vec<_> = probes
        .into_iter()
        .map(|(name, a, b)| {
            let (a2, b2) = (a.clone(), b.clone());
            let fa = std::thread::spawn(move || probe(ferry, &a));
            let fb = std::thread::spawn(move || probe(reference, &b));
            (name, a2, b2, fa, fb)
        })
        .collect();
    handles
        .into_iter()
        .map(|(n, a, b, fa, fb)| {
            let (mut f, mut r) = (fa.join().unwrap(), fb.join().unwrap());
            if let (Some(bh), Some((sf, sr))) = (behind, since) {
                f.r.shape = Some(shape(&f.data));
                r.r.shape = Some(shape(&r.data));
                f.r.targets = Some(bh.ferry.answered_by_target(sf, &a, &f.data));
                r.r.targets = Some(bh.reference.answered_by_target(sr, &b, &r.data));
            }
            (n, f, r)
        })
        .collect()
}

fn run_case(case: Case) {
    let echo = echo_server();
    let (fport, mport, rport, entry) = (free_port(), free_port(), free_port(), free_port());
    let fe = ferry_server(fport, mport, &case.ferry_inbound);
    let re = (case.reference)(rport);
    let rec = Recorder::start();
    let cl = (case.client)(entry, rec.port, echo);
    let payload = pattern(100, 7);
    let behind = case.behind.as_ref();

    // Probes on packets no server has seen: each gets a fresh packet per server.
    let mut probes: Vec<(String, Vec<u8>, Vec<u8>)> = vec![("nothing".into(), vec![], vec![])];
    for n in RANDOM_LENGTHS {
        let r = pattern(n, n as u64 * 31 + 1);
        probes.push((format!("random {n}"), r.clone(), r));
    }
    let get =
        b"GET / HTTP/1.1\r\nHost: example.com\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\n\r\n";
    probes.push(("http get".into(), get.to_vec(), get.to_vec()));
    let hello = client_hello();
    probes.push(("tls clienthello".into(), hello.clone(), hello));
    let fresh = 2 * (1 + case.truncs.len() + case.flips.len());
    let mut unseen = rec
        .unseen(entry, fresh, &payload)
        .into_iter()
        .map(case.packet)
        .collect::<Vec<_>>()
        .into_iter();
    rec.drain(Duration::from_millis(1500));
    let mut next = || unseen.next().unwrap();
    // Packets may differ in length (VMess pads): the last byte is each packet's own.
    let at = |o: usize, p: &[u8]| o.min(p.len() - 1);
    let label = |o: usize| match o {
        usize::MAX => "last".to_string(),
        o => o.to_string(),
    };
    let trunc = |p: Vec<u8>, o: usize| p[..at(o, &p)].to_vec();
    let flipped = |p: Vec<u8>, o: usize| flip(&p, at(o, &p));
    let first = next();
    let len = first.len();
    probes.push(("unseen whole packet".into(), first, next()));
    // How each cut or flipped unseen probe is made from a fresh packet (to rerun it below).
    type Remake<'a> = Box<dyn Fn(Vec<u8>) -> Vec<u8> + 'a>;
    let mut remake: Vec<(String, Remake<'_>)> = Vec::new();
    for &o in case.truncs {
        remake.push((
            format!("unseen truncated at {}", label(o)),
            Box::new(move |p| trunc(p, o)),
        ));
    }
    for &o in case.flips {
        remake.push((
            format!("unseen byte {} flipped", label(o)),
            Box::new(move |p| flipped(p, o)),
        ));
    }
    for (name, make) in &remake {
        probes.push((name.clone(), make(next()), make(next())));
    }
    // Probes that are the same bytes for both servers, kept to rerun below.
    let fixed: Vec<(String, Vec<u8>, Vec<u8>)> = probes.clone();
    let mut results = run_probes(fport, rport, behind, probes);
    // An unseen packet's content is the client's random choice, and with it what a cut or a
    // flip hits: VMess pads each chunk with 0 to 63 random bytes no tag covers, so the last
    // byte of one packet is padding (the chunk still opens) and of another the tag's. A probe
    // whose two packets drew different reactions is rerun on fresh pairs; one agreement in
    // RETRIES settles it, and a server that differs on every pair still fails.
    const RETRIES: usize = 4;
    for (name, f, r) in results.iter_mut() {
        let Some((_, make)) = remake.iter().find(|(n, _)| n == name) else {
            continue;
        };
        for _ in 0..RETRIES {
            if f.r == r.r {
                break;
            }
            let mut fresh = rec.unseen(entry, 2, &payload).into_iter().map(case.packet);
            let (a, b) = (fresh.next().unwrap(), fresh.next().unwrap());
            rec.drain(Duration::from_millis(300));
            let again = run_probes(fport, rport, behind, vec![(name.clone(), make(a), make(b))]);
            let (_, f2, r2) = again.into_iter().next().unwrap();
            (*f, *r) = (f2, r2);
        }
    }
    // A fixed probe's reaction can hang on a race the servers do not decide: whether the
    // last bytes of a burst were read before the target's close came back (unread bytes
    // turn the close into an RST). Rerun on the same bytes; a steady difference still fails.
    for (name, f, r) in results.iter_mut() {
        let Some((_, pf, pr)) = fixed.iter().find(|(n, ..)| n == name) else {
            continue;
        };
        for _ in 0..RETRIES {
            if f.r == r.r {
                break;
            }
            let again = run_probes(
                fport,
                rport,
                behind,
                vec![(name.clone(), pf.clone(), pr.clone())],
            );
            let (_, f2, r2) = again.into_iter().next().unwrap();
            (*f, *r) = (f2, r2);
        }
    }

    // A packet each server has seen (forwarded by the recorder, echo checked), replayed.
    let pf = (case.packet)(rec.record(entry, Some(fport), &payload));
    let pr = (case.packet)(rec.record(entry, Some(rport), &payload));
    results.extend(run_probes(
        fport,
        rport,
        behind,
        vec![("replayed once".into(), pf.clone(), pr.clone())],
    ));
    let mut seen = vec![("replayed twice".to_string(), pf.clone(), pr.clone())];
    for &o in case.truncs {
        seen.push((
            format!("seen truncated at {}", label(o)),
            trunc(pf.clone(), o),
            trunc(pr.clone(), o),
        ));
    }
    for &o in case.flips {
        seen.push((
            format!("seen byte {} flipped", label(o)),
            flipped(pf.clone(), o),
            flipped(pr.clone(), o),
        ));
    }
    results.extend(run_probes(fport, rport, behind, seen));

    let mut table = format!(
        "{}: packet {len} bytes\n{:<28} {:<34} {:<34}\n",
        case.name, "probe", "ferry", "reference"
    );
    // Ferry's reaction to garbage: what a deliberate difference must look like.
    let garbage = results
        .iter()
        .find(|(n, ..)| n == "random 1000")
        .map(|(_, f, _)| f.r.clone())
        .expect("random 1000 probed");
    let mut diffs = Vec::new();
    for (name, f, r) in &results {
        let fmt = |s: &Seen| {
            let own = match s.r.targets {
                None => "",
                Some(true) => " target's",
                Some(false) => " OWN",
            };
            format!(
                "{:?} {:?} {}B{own} {:.2}s",
                s.r.end, s.r.when, s.bytes, s.secs
            )
        };
        let deliberate = case.deliberate.iter().any(|prefix| {
            name.starts_with(prefix)
                && match behind {
                    None => f.r == garbage,
                    Some(_) => f.r.targets == Some(true),
                }
        });
        let mark = match (f.r == r.r, deliberate) {
            (true, _) => "",
            (false, true) => "  <- differs (deliberate)",
            (false, false) => "  <- differs",
        };
        table.push_str(&format!("{name:<28} {:<34} {:<34}{mark}\n", fmt(f), fmt(r)));
        if f.r.shape != r.r.shape {
            table.push_str(&format!(
                "{:<28} shapes {:?} vs {:?}\n",
                "", f.r.shape, r.r.shape
            ));
        }
        if f.r != r.r && !deliberate {
            diffs.push(name.clone());
        }
    }
    eprintln!("{table}");
    assert!(
        diffs.is_empty(),
        "{}: Ferry reacts differently from the reference to {diffs:?}\n{table}\n{}",
        case.name,
        fe.output()
    );

    // Every rejection was counted on the inbound, visible on the metrics endpoint.
    if !case.counts_rejections {
        return;
    }
    let prom = metrics(mport, "/metrics");
    assert!(
        prom.contains("ferry_rejected_handshakes_total{inbound=\"probed\""),
        "no rejections counted\n{prom}"
    );
    let vars = metrics(mport, "/debug/vars");
    assert!(vars.contains("\"rejected\":{\"probed\":{"), "{vars}");
    drop((cl, re));
}

fn ss_case(name: &'static str, method: &'static str, password: &'static str) -> Case {
    let is2022 = method.starts_with("2022");
    Case {
        name,
        truncs: if is2022 {
            &[1, 15, 16, 42, 43, 60, usize::MAX]
        } else {
            &[1, 15, 16, 33, 34, 40, usize::MAX]
        },
        flips: if is2022 {
            &[0, 16, 30, 42, 43, 60, usize::MAX]
        } else {
            &[0, 15, 16, 33, 34, 40, usize::MAX]
        },
        // Ferry serves no replayed AEAD salt (shadowsocks-rust relays it, and goes on to read
        // a seen packet's later chunks): such a connection is drained and held open as
        // garbage is, so it looks like garbage.
        deliberate: if is2022 { &[] } else { &["replayed ", "seen "] },
        ferry_inbound: format!(
            r#""protocol":"shadowsocks","settings":{{"method":"{method}","password":"{password}","network":"tcp"}}"#
        ),
        counts_rejections: true,
        reference: Box::new(move |p| match is2022 {
            true => ssserver(p, "2022-blake3-aes-128-gcm", KEY_2022),
            false => ssserver(p, "aes-128-gcm", PASSWORD),
        }),
        client: Box::new(move |e, s, t| match is2022 {
            true => sslocal(e, s, t, "2022-blake3-aes-128-gcm", KEY_2022),
            false => sslocal(e, s, t, "aes-128-gcm", PASSWORD),
        }),
        packet: |p| p,
        behind: None,
    }
}

#[test]
fn shadowsocks_aead_as_ssserver() {
    run_case(ss_case("shadowsocks aes-128-gcm", "aes-128-gcm", PASSWORD));
}

#[test]
fn shadowsocks_2022_as_ssserver() {
    run_case(ss_case(
        "shadowsocks 2022-blake3-aes-128-gcm",
        "2022-blake3-aes-128-gcm",
        KEY_2022,
    ));
}

/// Xray's client sends the address in a chunk of its own: a flip there, or in the length chunk
/// after it, is what tells a server that drains the decrypting stream (not the socket) apart.
#[test]
fn shadowsocks_aead_xray_client_as_ssserver() {
    let mut case = ss_case(
        "shadowsocks aes-128-gcm (xray client)",
        "aes-128-gcm",
        PASSWORD,
    );
    case.truncs = &[1, 16, 34, 57, 75, usize::MAX];
    case.flips = &[0, 16, 34, 40, 56, 57, 60, 74, 75, usize::MAX];
    case.client = Box::new(|e, s, t| {
        xray_client(
            e,
            &format!(
                r#"{{"protocol":"shadowsocks","settings":{{"servers":[{{"address":"127.0.0.1","port":{s},"method":"aes-128-gcm","password":"{PASSWORD}"}}]}}}}"#
            ),
            t,
        )
    });
    run_case(case);
}

#[test]
fn vmess_as_xray() {
    run_case(Case {
        name: "vmess aes-128-gcm",
        truncs: &[1, 15, 16, 17, 41, 42, 80, usize::MAX],
        flips: &[0, 15, 16, 34, 41, 42, 80, usize::MAX],
        deliberate: &[],
        counts_rejections: true,
        ferry_inbound: format!(
            r#""protocol":"vmess","settings":{{"clients":[{{"id":"{UUID}"}}]}}"#
        ),
        reference: Box::new(|p| {
            xray_server(
                p,
                &format!(r#""protocol":"vmess","settings":{{"clients":[{{"id":"{UUID}"}}]}}"#),
            )
        }),
        client: Box::new(|e, s, t| {
            xray_client(
                e,
                &format!(
                    r#"{{"protocol":"vmess","settings":{{"vnext":[{{"address":"127.0.0.1","port":{s},"users":[{{"id":"{UUID}","security":"aes-128-gcm"}}]}}]}}}}"#
                ),
                t,
            )
        }),
        packet: |p| p,
        behind: None,
    });
}

#[test]
fn vless_as_xray() {
    let inbound = format!(
        r#""protocol":"vless","settings":{{"clients":[{{"id":"{UUID}"}}],"decryption":"none"}}"#
    );
    run_case(Case {
        name: "vless",
        // 19..26 is the port and address: a flip there would dial elsewhere.
        truncs: &[1, 16, 17, 18, 21, 26, 30, usize::MAX],
        flips: &[0, 1, 16, 17, 18, 30, usize::MAX],
        deliberate: &[],
        counts_rejections: true,
        ferry_inbound: inbound,
        reference: Box::new(|p| {
            xray_server(
                p,
                &format!(
                    r#""protocol":"vless","settings":{{"clients":[{{"id":"{UUID}"}}],"decryption":"none"}}"#
                ),
            )
        }),
        client: Box::new(|e, s, t| {
            xray_client(
                e,
                &format!(
                    r#"{{"protocol":"vless","settings":{{"vnext":[{{"address":"127.0.0.1","port":{s},"users":[{{"id":"{UUID}","encryption":"none"}}]}}]}}}}"#
                ),
                t,
            )
        }),
        packet: |p| p,
        behind: None,
    });
}

/// VLESS Encryption's keys (`ferry vlessenc`, X25519): the server's `decryption` and the
/// client's `encryption`, a 1-RTT client so that its first flight is the whole key exchange.
const VENC_DEC: &str = "mlkem768x25519plus.native.600s.6KNNcsY7Me8psBRSoYS_DzwAKAxxxbMHGoIgn3CEknk";
const VENC_ENC: &str = "mlkem768x25519plus.native.1rtt.yijf5EwNWSnuIB4vJoRszP0Y5NdvFeN3OE0Dk9lcPU8";

#[test]
fn vless_encryption_as_xray() {
    let inbound = format!(
        r#""protocol":"vless","settings":{{"clients":[{{"id":"{UUID}"}}],"decryption":"{VENC_DEC}"}}"#
    );
    let reference = inbound.clone();
    run_case(Case {
        name: "vless encryption",
        // 0: the IV; 16..48 the X25519 relay (47: its top bit); 48..66 the first length;
        // 66.. the key exchange; the last byte ends the padding.
        truncs: &[1, 16, 47, 48, 66, 100, 1298, usize::MAX],
        flips: &[0, 16, 47, 48, 65, 66, 1000, usize::MAX],
        deliberate: &[],
        counts_rejections: true,
        ferry_inbound: inbound,
        reference: Box::new(move |p| xray_server(p, &reference)),
        client: Box::new(|e, s, t| {
            xray_client(
                e,
                &format!(
                    r#"{{"protocol":"vless","settings":{{"address":"127.0.0.1","port":{s},"id":"{UUID}","encryption":"{VENC_ENC}"}}}}"#
                ),
                t,
            )
        }),
        packet: |p| p,
        behind: None,
    });
}

#[test]
fn trojan_as_xray() {
    run_case(Case {
        name: "trojan",
        // 60..66 is the address and port: a flip there would dial elsewhere.
        truncs: &[1, 30, 56, 58, 60, 66, 68, 80, usize::MAX],
        flips: &[0, 30, 55, 56, 57, 58, 59, 66, 67, 80, usize::MAX],
        deliberate: &[],
        counts_rejections: true,
        ferry_inbound: format!(
            r#""protocol":"trojan","settings":{{"clients":[{{"password":"{PASSWORD}"}}]}}"#
        ),
        reference: Box::new(|p| {
            xray_server(
                p,
                &format!(
                    r#""protocol":"trojan","settings":{{"clients":[{{"password":"{PASSWORD}"}}]}}"#
                ),
            )
        }),
        client: Box::new(|e, s, t| {
            xray_client(
                e,
                &format!(
                    r#"{{"protocol":"trojan","settings":{{"servers":[{{"address":"127.0.0.1","port":{s},"password":"{PASSWORD}"}}]}}}}"#
                ),
                t,
            )
        }),
        packet: |p| p,
        behind: None,
    });
}

fn reality_inbound(target: u16) -> String {
    format!(
        r#""protocol":"vless","settings":{{"clients":[{{"id":"{UUID}"}}],"decryption":"none"}},
        "streamSettings":{{"network":"raw","security":"reality","realitySettings":{{
          "target":"127.0.0.1:{target}","serverNames":["{SNI}"],"privateKey":"{PRIVATE_KEY}",
          "shortIds":["{SHORT_ID}"],"maxTimeDiff":600000}}}}"#
    )
}

/// The first TLS record of what a client sent: a REALITY client's ClientHello.
fn first_record(p: Vec<u8>) -> Vec<u8> {
    assert!(
        p.len() > 5 && p[0] == 0x16,
        "not a TLS record: {:02x?}",
        &p[..p.len().min(8)]
    );
    let n = 5 + u16::from_be_bytes([p[3], p[4]]) as usize;
    p[..n.min(p.len())].to_vec()
}

/// VLESS over REALITY, nginx behind both. Xray's REALITY client's ClientHello is the packet:
/// unseen, it is a valid client's (both servers answer with a REALITY handshake, whose records
/// have the target's lengths); truncated or flipped it is not (both hand it to nginx), but for
/// a flip in the record header (byte 2), which the authentication does not cover.
#[test]
fn reality_as_xray() {
    let behind = Behind::start();
    let (ft, rt) = (behind.ferry.port, behind.reference.port);
    run_case(Case {
        name: "reality (vless)",
        // 43: within the random; 76: the session id ends; the ClientHello is ~1,700 bytes.
        truncs: &[1, 5, 43, 76, 200, 1000, usize::MAX],
        // Record type and version, handshake type, random, session id, the first cipher suite
        // after GREASE (0x1301). Not within the extensions: Chrome's come in a random order,
        // so a flip at one offset would hit different ones in Ferry's and Xray's packets.
        flips: &[0, 2, 5, 11, 44, 81, usize::MAX],
        // Xray v26.3.27 keeps no record of the ClientHellos it served, so it answers a replay
        // (and a replay with its record header changed) with a REALITY handshake; Ferry hands
        // them to the target, which answers as it answers any stranger.
        deliberate: &["replayed ", "seen byte 2 flipped"],
        counts_rejections: true,
        ferry_inbound: reality_inbound(ft),
        reference: Box::new(move |p| {
            let x = xray_server(p, &reality_inbound(rt));
            // Xray first learns the target's post-handshake records (nginx ends that after
            // 2 s); a client arriving before waits 5 s.
            std::thread::sleep(Duration::from_millis(2500));
            x
        }),
        client: Box::new(|e, s, t| {
            xray_client(
                e,
                &format!(
                    r#"{{"protocol":"vless","settings":{{"vnext":[{{"address":"127.0.0.1","port":{s},"users":[{{"id":"{UUID}","encryption":"none"}}]}}]}},
                    "streamSettings":{{"network":"raw","security":"reality","realitySettings":{{
                      "serverName":"{SNI}","fingerprint":"chrome","password":"{PUBLIC_KEY}","shortId":"{SHORT_ID}"}}}}}}"#
                ),
                t,
            )
        }),
        packet: first_record,
        behind: Some(behind),
    });
}

// The three reactions that told Ferry apart (issue 22), each pinned on its own.

fn expect(port: u16, data: &[u8], want: (End, When), what: &str, p: &Proc) {
    let s = probe(port, data);
    assert_eq!(
        (s.r.end, s.r.when, s.bytes),
        (want.0, want.1, 0),
        "{what}: {s:?}\n{}",
        p.output()
    );
}

fn ss_inbound(method: &str, password: &str) -> String {
    format!(
        r#""protocol":"shadowsocks","settings":{{"method":"{method}","password":"{password}","network":"tcp"}}"#
    )
}

/// Shadowsocks AEAD: a bad chunk after a good salt and length is not closed at once with a FIN
/// (the drain reads the socket, not the decrypting stream); past the address, a bad chunk
/// closes at once as ssserver does: RST with bytes past it, FIN without.
#[test]
fn ss_aead_bad_chunk_after_a_good_header() {
    let echo = echo_server();
    let (port, mport, e1, e2) = (free_port(), free_port(), free_port(), free_port());
    let fe = ferry_server(port, mport, &ss_inbound("aes-128-gcm", PASSWORD));
    let rec = Recorder::start();
    let _ss = sslocal(e1, rec.port, echo, "aes-128-gcm", PASSWORD);
    let p = rec.unseen(e1, 1, &pattern(100, 1)).remove(0);
    // salt 16, length 18, then the one chunk holding address and payload.
    expect(
        port,
        &flip(&p, 40),
        (End::Open, When::Held),
        "address chunk flipped",
        &fe,
    );
    let _xc = xray_client(
        e2,
        &format!(
            r#"{{"protocol":"shadowsocks","settings":{{"servers":[{{"address":"127.0.0.1","port":{},"method":"aes-128-gcm","password":"{PASSWORD}"}}]}}}}"#,
            rec.port
        ),
        echo,
    );
    let mut ps = rec.unseen(e2, 2, &pattern(100, 2)).into_iter();
    // Xray: salt 16, length 18, address chunk 7+16, length 18, payload.
    let (a, b) = (ps.next().unwrap(), ps.next().unwrap());
    expect(
        port,
        &flip(&a, 60),
        (End::Rst, When::AtOnce),
        "second length flipped",
        &fe,
    );
    let last = b.len() - 1;
    expect(
        port,
        &flip(&b, last),
        (End::Fin, When::AtOnce),
        "payload flipped",
        &fe,
    );
}

/// Shadowsocks 2022: one byte of garbage is reset at once (it was held open until idle).
#[test]
fn ss_2022_garbage_is_reset_at_once() {
    let (port, mport) = (free_port(), free_port());
    let fe = ferry_server(
        port,
        mport,
        &ss_inbound("2022-blake3-aes-128-gcm", KEY_2022),
    );
    expect(port, &[0x42], (End::Rst, When::AtOnce), "1 byte", &fe);
    expect(
        port,
        &client_hello(),
        (End::Rst, When::AtOnce),
        "ClientHello",
        &fe,
    );
    let prom = metrics(mport, "/metrics");
    assert!(
        prom.contains(
            "ferry_rejected_handshakes_total{inbound=\"probed\",reason=\"short_header\"} 1\n"
        ) && prom
            .contains("ferry_rejected_handshakes_total{inbound=\"probed\",reason=\"auth\"} 1\n"),
        "{prom}"
    );
    assert!(
        fe.output().contains("shadowsocks: rejected 127.0.0.1:"),
        "rejections are logged with their source\n{}",
        fe.output()
    );
}

/// VMess: bursts up to 8 KiB get a FIN as from Xray (the drain read 2 KiB at a time and left
/// bytes unread: RST), and Xray's drain size decides at once vs at the handshake timeout.
#[test]
fn vmess_bursts_close_as_xray() {
    let (port, mport) = (free_port(), free_port());
    let fe = ferry_server(
        port,
        mport,
        &format!(r#""protocol":"vmess","settings":{{"clients":[{{"id":"{UUID}"}}]}}"#),
    );
    for (n, want) in [
        (2049, (End::Fin, When::AtOnce)),
        (4096, (End::Fin, When::AtOnce)),
        (8192, (End::Fin, When::AtOnce)),
        (8193, (End::Rst, When::AtOnce)),
        (1700, (End::Fin, When::Handshake)),
        (1800, (End::Fin, When::AtOnce)),
    ] {
        expect(
            port,
            &pattern(n, n as u64),
            want,
            &format!("{n} bytes"),
            &fe,
        );
    }
}

/// When a fallback ends, Xray holds a raw TCP client `uplinkOnly` (1 s) with no FIN, then
/// closes it (its writer on a raw socket cannot close; over TLS it closes at once, see
/// `probing_tls`): Ferry's VLESS and Trojan fallbacks hold the client the same.
#[test]
fn a_raw_fallback_s_client_is_held_uplink_only_as_xray() {
    let target = probing_tls::answer_and_close();
    for (name, settings) in [
        (
            "vless",
            format!(r#"{{"clients":[{{"id":"{UUID}"}}],"decryption":"none""#),
        ),
        (
            "trojan",
            format!(r#"{{"clients":[{{"password":"{PASSWORD}"}}]"#),
        ),
    ] {
        let inbound = format!(
            r#""protocol":"{name}","settings":{settings},"fallbacks":[{{"dest":{target}}}]}}"#
        );
        let (port, mport, xport) = (free_port(), free_port(), free_port());
        let fe = ferry_server(port, mport, &inbound);
        let _xr = xray_server(xport, &inbound);
        let mut held = Vec::new();
        for (who, p) in [("ferry", port), ("xray", xport)] {
            let mut s = TcpStream::connect(("127.0.0.1", p)).unwrap();
            s.write_all(b"GET / HTTP/1.1\r\nHost: probe.test\r\n\r\n")
                .unwrap();
            s.set_read_timeout(Some(WATCH)).unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            let mut first = None;
            let end = loop {
                match s.read(&mut buf) {
                    Ok(0) => break "fin",
                    Ok(n) => {
                        first.get_or_insert_with(Instant::now);
                        got.extend_from_slice(&buf[..n]);
                    }
                    Err(e) if e.kind() == ErrorKind::ConnectionReset => break "rst",
                    Err(e) => panic!("{name} {who}: {e} after {got:?}\n{}", fe.output()),
                }
            };
            assert!(
                got.starts_with(b"HTTP/1.1 400"),
                "{name} {who}: {got:?}\n{}",
                fe.output()
            );
            let open = first.unwrap().elapsed();
            eprintln!("{name} {who}: {end} {open:?} after the fallback's answer");
            held.push((end, open));
        }
        for (who, (end, open)) in ["ferry", "xray"].iter().zip(&held) {
            assert!(
                *end == "fin"
                    && *open >= Duration::from_millis(800)
                    && *open < Duration::from_millis(1800),
                "{name} {who}: {held:?}"
            );
        }
    }
}
