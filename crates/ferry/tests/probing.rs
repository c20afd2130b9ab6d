//! Active probing: a prober must not tell a Ferry server from its reference implementation.
//!
//! Each case starts Ferry and the reference server (shadowsocks-rust for Shadowsocks AEAD and
//! 2022; Xray for VMess, VLESS and Trojan) with the same settings and a 1 s handshake timeout,
//! then sends both the same probes, each on a fresh connection: nothing; random bytes of
//! several lengths; a valid client's first packet (recorded from the real client through a
//! recording relay) replayed once and twice; that packet truncated and with one byte flipped
//! at several offsets, on packets the server has seen and on unseen ones; an HTTP GET; a TLS
//! ClientHello. What a prober can observe is compared: whether bytes came back, FIN or RST,
//! and when the server closed (at once / at the handshake timeout / later / held open). Any
//! difference not listed as deliberate fails the case. Probes run in parallel.

mod common;
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Reaction {
    answered: bool,
    end: End,
    when: When,
}

/// One observation with its raw figures (for the printed table).
#[derive(Debug, Clone, Copy)]
struct Seen {
    r: Reaction,
    bytes: usize,
    secs: f64,
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
    let mut bytes = 0;
    let mut buf = vec![0u8; 64 * 1024];
    let end = loop {
        let left = WATCH.saturating_sub(t0.elapsed());
        if left.is_zero() {
            break End::Open;
        }
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut buf) {
            Ok(0) => break End::Fin,
            Ok(n) => bytes += n,
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
            answered: bytes > 0,
            end,
            when,
        },
        bytes,
        secs: t.as_secs_f64(),
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
    /// reference serves it. Ferry's reaction to them must then be its reaction to garbage, so
    /// the refusal is not observable in a new way.
    deliberate: &'static [&'static str],
    ferry_inbound: String,
    /// Whether Ferry's inbound counts its rejections (VLESS and Trojan do not yet).
    counts_rejections: bool,
    /// Starts the reference server on a port.
    reference: fn(u16) -> Proc,
    /// Starts the real client: entry port, recorder port, echo target.
    client: fn(u16, u16, SocketAddr) -> Proc,
}

fn ferry_server(port: u16, metrics: u16, inbound: &str) -> Proc {
    let cfg = format!(
        r#"{{"log":{{"loglevel":"info"}},"stats":{{}},"metrics":{{"listen":"127.0.0.1:{metrics}"}},
        "policy":{{"levels":{{"0":{{"handshake":{HANDSHAKE}}}}}}},
        "inbounds":[{{"tag":"probed","listen":"127.0.0.1","port":{port},{inbound}}}],
        "outbounds":[{{"protocol":"freedom"}}]}}"#
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

/// Runs `probes` against both servers in parallel: (name, ferry, reference) per probe.
fn run_probes(
    ferry: u16,
    reference: u16,
    probes: Vec<(String, Vec<u8>, Vec<u8>)>,
) -> Vec<(String, Seen, Seen)> {
    let handles: Vec<_> = probes
        .into_iter()
        .map(|(name, a, b)| {
            let fa = std::thread::spawn(move || probe(ferry, &a));
            let fb = std::thread::spawn(move || probe(reference, &b));
            (name, fa, fb)
        })
        .collect();
    handles
        .into_iter()
        .map(|(n, a, b)| (n, a.join().unwrap(), b.join().unwrap()))
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
    let mut unseen = rec.unseen(entry, fresh, &payload).into_iter();
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
    for &o in case.truncs {
        probes.push((
            format!("unseen truncated at {}", label(o)),
            trunc(next(), o),
            trunc(next(), o),
        ));
    }
    for &o in case.flips {
        probes.push((
            format!("unseen byte {} flipped", label(o)),
            flipped(next(), o),
            flipped(next(), o),
        ));
    }
    let mut results = run_probes(fport, rport, probes);

    // A packet each server has seen (forwarded by the recorder, echo checked), replayed.
    let pf = rec.record(entry, Some(fport), &payload);
    let pr = rec.record(entry, Some(rport), &payload);
    results.extend(run_probes(
        fport,
        rport,
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
    results.extend(run_probes(fport, rport, seen));

    let mut table = format!(
        "{}: packet {len} bytes\n{:<28} {:<34} {:<34}\n",
        case.name, "probe", "ferry", "reference"
    );
    // Ferry's reaction to garbage: what a deliberate difference must look like.
    let garbage = results
        .iter()
        .find(|(n, ..)| n == "random 1000")
        .map(|(_, f, _)| f.r)
        .expect("random 1000 probed");
    let mut diffs = Vec::new();
    for (name, f, r) in &results {
        let fmt = |s: &Seen| format!("{:?} {:?} {}B {:.2}s", s.r.end, s.r.when, s.bytes, s.secs);
        let deliberate = case
            .deliberate
            .iter()
            .any(|prefix| name.starts_with(prefix) && f.r == garbage);
        let mark = match (f.r == r.r, deliberate) {
            (true, _) => "",
            (false, true) => "  <- differs (deliberate)",
            (false, false) => "  <- differs",
        };
        table.push_str(&format!("{name:<28} {:<34} {:<34}{mark}\n", fmt(f), fmt(r)));
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
        reference: if is2022 {
            |p| ssserver(p, "2022-blake3-aes-128-gcm", KEY_2022)
        } else {
            |p| ssserver(p, "aes-128-gcm", PASSWORD)
        },
        client: if is2022 {
            |e, s, t| sslocal(e, s, t, "2022-blake3-aes-128-gcm", KEY_2022)
        } else {
            |e, s, t| sslocal(e, s, t, "aes-128-gcm", PASSWORD)
        },
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
    case.client = |e, s, t| {
        xray_client(
            e,
            &format!(
                r#"{{"protocol":"shadowsocks","settings":{{"servers":[{{"address":"127.0.0.1","port":{s},"method":"aes-128-gcm","password":"{PASSWORD}"}}]}}}}"#
            ),
            t,
        )
    };
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
        reference: |p| {
            xray_server(
                p,
                &format!(r#""protocol":"vmess","settings":{{"clients":[{{"id":"{UUID}"}}]}}"#),
            )
        },
        client: |e, s, t| {
            xray_client(
                e,
                &format!(
                    r#"{{"protocol":"vmess","settings":{{"vnext":[{{"address":"127.0.0.1","port":{s},"users":[{{"id":"{UUID}","security":"aes-128-gcm"}}]}}]}}}}"#
                ),
                t,
            )
        },
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
        counts_rejections: false,
        ferry_inbound: inbound,
        reference: |p| {
            xray_server(
                p,
                &format!(
                    r#""protocol":"vless","settings":{{"clients":[{{"id":"{UUID}"}}],"decryption":"none"}}"#
                ),
            )
        },
        client: |e, s, t| {
            xray_client(
                e,
                &format!(
                    r#"{{"protocol":"vless","settings":{{"vnext":[{{"address":"127.0.0.1","port":{s},"users":[{{"id":"{UUID}","encryption":"none"}}]}}]}}}}"#
                ),
                t,
            )
        },
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
        counts_rejections: false,
        ferry_inbound: format!(
            r#""protocol":"trojan","settings":{{"clients":[{{"password":"{PASSWORD}"}}]}}"#
        ),
        reference: |p| {
            xray_server(
                p,
                &format!(
                    r#""protocol":"trojan","settings":{{"clients":[{{"password":"{PASSWORD}"}}]}}"#
                ),
            )
        },
        client: |e, s, t| {
            xray_client(
                e,
                &format!(
                    r#"{{"protocol":"trojan","settings":{{"servers":[{{"address":"127.0.0.1","port":{s},"password":"{PASSWORD}"}}]}}}}"#
                ),
                t,
            )
        },
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
