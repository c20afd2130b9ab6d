//! REALITY (XTLS's TLS camouflage, specs/transports2.md §1) against the real peers: Xray
//! v26.3.27 and sing-box v1.14.1 (built with `with_utls`) as client and as server against
//! Ferry, Ferry against itself, and the peers against each other (so the harness is known good
//! before Ferry is in it).
//!
//! The camouflage target is a real web server: nginx, started here with HTTPS (TLS 1.2 and
//! 1.3, a self-signed certificate for `reality.test`) on a loopback port, serving one small
//! page. Every REALITY server in this file mirrors its clients' ClientHellos to it.
//!
//! - Transfers: entry (dokodemo-door / sing-box direct) -> client -> VLESS + Vision, plain
//!   VLESS or Trojan over REALITY -> server -> direct -> an echo server here; 50 MB byte-exact.
//!   Vision carries inner TLS 1.3 (rustls in this process, records of 16K), so its raw
//!   switch runs over REALITY's record layer.
//! - Probing: whatever is not an authenticated REALITY client (curl, a wrong shortId, an
//!   unlisted SNI, a replayed ClientHello) must get the target's own answer. The oracle is a
//!   pair of recording TCP taps, one between client and server and one between server and
//!   target: a connection was spliced to the target exactly when the bytes the client got
//!   equal the bytes the target sent (and the target got every byte the client sent).
//! - Bad input: ClientHellos cut short, sent one byte per TCP segment, garbage, a target that
//!   is down: every connection ends within a few seconds, and a good client is served after.
//!
//! Peer quirks that matter here (details in the helpers below):
//! - Xray's server dials the target for *every* connection before reading a byte, and at
//!   listener start probes the target to learn its post-handshake record sizes; its first
//!   client waits (5 s sleeps) until that is known. nginx's `client_header_timeout 2s` ends
//!   the probe after 2 s, and the tests wait that long after starting an Xray server.
//! - Xray v26 freedom refuses loopback targets unless `finalRules` allows them.
//! - sing-box's REALITY server takes one SNI (`tls.server_name`) and `reality.short_id` as a
//!   list; its client needs `tls.utls.enabled` and sends version 1.8.1 with an X25519 key
//!   share only (no X25519MLKEM768), which Xray v26.3.27 still accepts (no `minClientVer`
//!   default before v26.7.11).
//! - Xray's Trojan client fails on a first payload over ~8 KiB: plain transfers say "hello"
//!   first.
//! - Xray keeps no replay cache: a replayed, authenticated ClientHello gets a REALITY
//!   handshake, not the target's answer (asserted for Xray below; Ferry must do better).
//!
//! `FERRY_REALITY_STANDIN=xray` puts Xray where a case says Ferry, to check the harness;
//! `FERRY_REALITY_BYTES` changes the 50 MB of the transfers.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::common;
use common::*;

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, ServerConfig, ServerConnection};

const ID: &str = "5c6f2a1e-9b0d-4e3f-8a7c-2d1b0e9f8a7c";
const PW: &str = "a reality trojan password";
const SNI: &str = "reality.test";
const INNER_NAME: &str = "inner.test";
/// The fixed test key pair: `xray x25519 -i PRIVATE_KEY` prints PUBLIC_KEY as "Password
/// (PublicKey)" (checked by `the_key_pair_is_xrays`). The private key is the vector of
/// specs/transports2.md §1.2 (bytes 01..20, not clamped; X25519 clamps it).
const PRIVATE_KEY: &str = "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA";
const PUBLIC_KEY: &str = "B6N8vBQgk8i3VdwbEOhstCY3StFqqFPtC9_AsrhtHHw";
const SHORT_ID: &str = "0123456789abcdef";
const PAGE: &str = "reality target page";
const BIG: usize = 50 << 20;
/// How long a connection that is refused or probing may stay open after the prober is done.
const PROMPT: Duration = Duration::from_secs(5);
/// How long an Xray client may take to give up on a server that refuses it (it retries its
/// dial five times, 3 s of back-off in all).
const GIVE_UP: Duration = Duration::from_secs(10);

fn big() -> usize {
    std::env::var("FERRY_REALITY_BYTES")
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

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Proto {
    /// VLESS with flow xtls-rprx-vision, inner TLS 1.3.
    Vision,
    /// VLESS with flow "".
    Vless,
    Trojan,
    /// VLESS over gRPC over REALITY.
    Grpc,
}

/// `network` and its settings in Xray's streamSettings.
fn xray_network(proto: Proto) -> &'static str {
    match proto {
        Proto::Grpc => r#""network":"grpc","grpcSettings":{"serviceName":"rgrpc"}"#,
        _ => r#""network":"raw""#,
    }
}

/// sing-box's `transport` member (with its comma), if any.
fn singbox_transport(proto: Proto) -> &'static str {
    match proto {
        Proto::Grpc => r#""transport":{"type":"grpc","service_name":"rgrpc"},"#,
        _ => "",
    }
}

// ---------------------------------------------------------------------------------------
// Processes

/// `FERRY_REALITY_STANDIN=xray` runs Xray wherever a case says Ferry: a check of the harness
/// itself (every Ferry case then passes but the replay one, as Xray keeps no replay cache).
fn real(imp: Imp) -> Imp {
    match std::env::var("FERRY_REALITY_STANDIN").as_deref() {
        Ok("xray") if imp == Ferry => Xray,
        _ => imp,
    }
}

fn spawn(imp: Imp, cfg: &str, ports: &[u16]) -> Proc {
    let (bin, name) = match imp {
        Ferry => (
            Path::new(env!("CARGO_BIN_EXE_ferry")).to_path_buf(),
            "ferry",
        ),
        Xray => (peer("xray"), "xray"),
        SingBox => (peer("sing-box"), "sing-box"),
    };
    up(
        spawn_with_config(&bin, name, cfg, &["run", "-c", "{config}"]),
        ports,
    )
}

// ---------------------------------------------------------------------------------------
// The target: nginx with HTTPS

struct Target {
    port: u16,
    /// DER of the certificate nginx serves.
    cert_der: Vec<u8>,
    proc: Option<Proc>,
    dir: tempdir::Dir,
}

impl Target {
    /// nginx on `port` (a free one when None); `start: false` only prepares it (a target
    /// that is down until `start()`).
    fn new(port: Option<u16>, start: bool) -> Target {
        Target::with_names(port, start, &[SNI.to_string()])
    }

    /// A target whose certificate is over 3,500 bytes (many names): what REALITY's ML-DSA-65
    /// certificate needs to fit in the target's Certificate record, as Xray's docs advise.
    fn big() -> Target {
        let mut names = vec![SNI.to_string()];
        names.extend(
            (0..60).map(|i| format!("filler-name-{i:02}-for-a-certificate-over-3500-bytes.{SNI}")),
        );
        Target::with_names(None, true, &names)
    }

    fn with_names(port: Option<u16>, start: bool, names: &[String]) -> Target {
        let dir = tempdir::Dir::new("reality-target");
        let g = ferry::transport::tls::generate_self_signed(names, 2).unwrap();
        std::fs::write(dir.path().join("cert.pem"), &g.cert_pem).unwrap();
        std::fs::write(dir.path().join("key.pem"), &g.key_pem).unwrap();
        let cert_der = CertificateDer::pem_slice_iter(g.cert_pem.as_bytes())
            .next()
            .unwrap()
            .unwrap()
            .to_vec();
        let mut t = Target {
            port: port.unwrap_or_else(free_port),
            cert_der,
            proc: None,
            dir,
        };
        if start {
            t.start();
        }
        t
    }

    fn start(&mut self) {
        let d = self.dir.path();
        let server = tls_site(
            self.port,
            SNI,
            &d.join("cert.pem"),
            &d.join("key.pem"),
            PAGE,
        );
        self.proc = Some(nginx(d, Nginx::Http(&server), &[self.port]));
    }

    fn logs(&self) -> String {
        nginx_logs(self.dir.path())
    }
}

// ---------------------------------------------------------------------------------------
// Configs: Xray's JSON (read by Xray and Ferry alike) and sing-box's

const XRAY_FREEDOM: &str =
    r#"{"protocol":"freedom","settings":{"finalRules":[{"action":"allow","ip":["127.0.0.0/8"]}]}}"#;
const FREEDOM: &str = r#"{"protocol":"freedom","settings":{"finalRules":[{"action":"allow","ip":["127.0.0.0/8","::1"]}]}}"#;

/// What a client puts in its REALITY settings.
#[derive(Clone, Copy)]
struct Auth {
    sni: &'static str,
    short_id: &'static str,
}

const GOOD: Auth = Auth {
    sni: SNI,
    short_id: SHORT_ID,
};

fn flow(proto: Proto) -> &'static str {
    if proto == Proto::Vision {
        "xtls-rprx-vision"
    } else {
        ""
    }
}

fn xray_inbound(proto: Proto, port: u16, target: &str) -> String {
    let (protocol, settings) = match proto {
        Proto::Trojan => (
            "trojan",
            format!(r#"{{"clients":[{{"password":"{PW}","email":"t@t"}}]}}"#),
        ),
        _ => (
            "vless",
            format!(
                r#"{{"clients":[{{"id":"{ID}","flow":"{}","email":"v@t"}}],"decryption":"none"}}"#,
                flow(proto)
            ),
        ),
    };
    format!(
        r#"{{"listen":"127.0.0.1","port":{port},"protocol":"{protocol}","settings":{settings},
            "streamSettings":{{{},"security":"reality","realitySettings":{{
              "target":"{target}","serverNames":["{SNI}"],"privateKey":"{PRIVATE_KEY}",
              "shortIds":["","{SHORT_ID}"],"maxTimeDiff":600000}}}}}}"#,
        xray_network(proto)
    )
}

fn xray_outbound(proto: Proto, server: u16, auth: Auth) -> String {
    let (protocol, settings) = match proto {
        Proto::Trojan => (
            "trojan",
            format!(
                r#"{{"servers":[{{"address":"127.0.0.1","port":{server},"password":"{PW}"}}]}}"#
            ),
        ),
        _ => (
            "vless",
            format!(
                r#"{{"vnext":[{{"address":"127.0.0.1","port":{server},
                    "users":[{{"id":"{ID}","encryption":"none","flow":"{}"}}]}}]}}"#,
                flow(proto)
            ),
        ),
    };
    format!(
        r#"{{"protocol":"{protocol}","settings":{settings},
            "streamSettings":{{{},"security":"reality","realitySettings":{{
              "serverName":"{}","fingerprint":"chrome","password":"{PUBLIC_KEY}",
              "shortId":"{}"}}}}}}"#,
        xray_network(proto),
        auth.sni,
        auth.short_id
    )
}

fn singbox_inbound(proto: Proto, port: u16, target: SocketAddr) -> String {
    let (ty, users) = match proto {
        Proto::Trojan => ("trojan", format!(r#"[{{"name":"t","password":"{PW}"}}]"#)),
        _ => (
            "vless",
            format!(r#"[{{"name":"v","uuid":"{ID}","flow":"{}"}}]"#, flow(proto)),
        ),
    };
    format!(
        r#"{{"type":"{ty}","listen":"127.0.0.1","listen_port":{port},"users":{users},{}
            "tls":{{"enabled":true,"server_name":"{SNI}","reality":{{"enabled":true,
              "handshake":{{"server":"{}","server_port":{}}},
              "private_key":"{PRIVATE_KEY}","short_id":["","{SHORT_ID}"]}}}}}}"#,
        singbox_transport(proto),
        target.ip(),
        target.port()
    )
}

fn singbox_outbound(proto: Proto, server: u16, auth: Auth) -> String {
    let cred = match proto {
        Proto::Trojan => format!(r#""password":"{PW}""#),
        _ => format!(r#""uuid":"{ID}","flow":"{}""#, flow(proto)),
    };
    let ty = if proto == Proto::Trojan {
        "trojan"
    } else {
        "vless"
    };
    format!(
        r#"{{"type":"{ty}","server":"127.0.0.1","server_port":{server},{cred},{}
            "tls":{{"enabled":true,"server_name":"{}",
              "utls":{{"enabled":true,"fingerprint":"chrome"}},
              "reality":{{"enabled":true,"public_key":"{PUBLIC_KEY}","short_id":"{}"}}}}}}"#,
        singbox_transport(proto),
        auth.sni,
        auth.short_id
    )
}

/// A REALITY server of `imp` on `port` with `target` behind it.
fn server(imp: Imp, proto: Proto, port: u16, target: SocketAddr) -> Proc {
    server_windowed(imp, proto, port, target, "")
}

/// [`server`] with more `realitySettings` (`window`: `"minClientVer":...` members, each
/// with a leading comma).
fn server_windowed(imp: Imp, proto: Proto, port: u16, target: SocketAddr, window: &str) -> Proc {
    let imp = real(imp);
    let cfg = match imp {
        Ferry | Xray => format!(
            r#"{{"log":{{"loglevel":"debug"}},"inbounds":[{}],"outbounds":[{}]}}"#,
            xray_inbound(proto, port, &target.to_string()).replace(
                r#""maxTimeDiff":600000"#,
                &format!(r#""maxTimeDiff":600000{window}"#)
            ),
            if imp == Xray { XRAY_FREEDOM } else { FREEDOM }
        ),
        SingBox => format!(
            r#"{{"log":{{"level":"debug"}},"inbounds":[{}],"outbounds":[{{"type":"direct"}}]}}"#,
            singbox_inbound(proto, port, target)
        ),
    };
    let p = spawn(imp, &cfg, &[port]);
    if imp == Xray && listening(target.port()) {
        // Xray's listener probes the target's post-handshake records first (2 s with this
        // nginx); a client arriving before that waits 5 s.
        std::thread::sleep(Duration::from_millis(2500));
    }
    p
}

/// A client of `imp` whose entry on `entry` leads to `dest` through the REALITY server on
/// `server_port`.
fn client(imp: Imp, proto: Proto, entry: u16, server_port: u16, dest: u16, auth: Auth) -> Proc {
    let imp = real(imp);
    let cfg = match imp {
        Ferry | Xray => format!(
            r#"{{"log":{{"loglevel":"debug"}},
                "inbounds":[{{"listen":"127.0.0.1","port":{entry},"protocol":"dokodemo-door",
                  "settings":{{"address":"127.0.0.1","port":{dest},"network":"tcp"}}}}],
                "outbounds":[{}]}}"#,
            xray_outbound(proto, server_port, auth)
        ),
        SingBox => format!(
            r#"{{"log":{{"level":"debug"}},
                "inbounds":[{{"type":"direct","listen":"127.0.0.1","listen_port":{entry},
                  "network":"tcp","override_address":"127.0.0.1","override_port":{dest}}}],
                "outbounds":[{}]}}"#,
            singbox_outbound(proto, server_port, auth)
        ),
    };
    spawn(imp, &cfg, &[entry])
}

fn logs(ps: &[&Proc]) -> String {
    ps.iter().map(|p| p.output()).collect::<Vec<_>>().join("\n")
}

// ---------------------------------------------------------------------------------------
// Inner TLS 1.3 for Vision: an echo server and a client, both rustls, in this process

/// X25519 only: with X25519MLKEM768 the inner ServerHello is long enough to be cut across
/// records, which Vision's filter misreads (see interop_vision.rs).
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    let mut p = rustls::crypto::aws_lc_rs::default_provider();
    p.kx_groups = vec![rustls::crypto::aws_lc_rs::kx_group::X25519];
    Arc::new(p)
}

fn inner_tls_server() -> (SocketAddr, Arc<ClientConfig>) {
    let g = ferry::transport::tls::generate_self_signed(&[INNER_NAME.to_string()], 2).unwrap();
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(g.cert_pem.as_bytes())
        .collect::<Result<_, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(g.key_pem.as_bytes()).unwrap();
    let tls13 = [&rustls::version::TLS13];
    let sc = Arc::new(
        ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&tls13)
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain.clone(), key)
            .unwrap(),
    );
    let mut roots = rustls::RootCertStore::empty();
    roots.add(chain[0].clone()).unwrap();
    let cc = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&tls13)
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { continue };
            let sc = sc.clone();
            std::thread::spawn(move || {
                let mut t = rustls::StreamOwned::new(ServerConnection::new(sc).unwrap(), s);
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
    (addr, Arc::new(cc))
}

/// Sends `data` over inner TLS on `sock` while reading the echo.
fn tls_echo_through(mut s: TcpStream, cfg: Arc<ClientConfig>, data: &[u8]) -> Vec<u8> {
    let mut conn = ClientConnection::new(cfg, ServerName::try_from(INNER_NAME).unwrap()).unwrap();
    conn.set_buffer_limit(None);
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
    }
    writer.join().unwrap();
    got
}

// ---------------------------------------------------------------------------------------
// Transfers

/// "hello" there and back (a first small payload, see Xray's Trojan client) within `within`.
fn hello(entry: u16, within: Duration) -> std::io::Result<TcpStream> {
    let mut s = TcpStream::connect(("127.0.0.1", entry))?;
    s.set_read_timeout(Some(within))?;
    s.write_all(b"hello")?;
    let mut b = [0u8; 5];
    s.read_exact(&mut b)?;
    if &b != b"hello" {
        return Err(std::io::Error::other(format!("got {b:?} back")));
    }
    Ok(s)
}

fn case(client_imp: Imp, server_imp: Imp, proto: Proto) {
    let target = Target::new(None, true);
    let (dest, inner) = match proto {
        Proto::Vision => {
            let (a, c) = inner_tls_server();
            (a, Some(c))
        }
        _ => (echo_server(), None),
    };
    let (sport, entry) = (free_port(), free_port());
    let s = server(
        server_imp,
        proto,
        sport,
        ([127, 0, 0, 1], target.port).into(),
    );
    let c = client(client_imp, proto, entry, sport, dest.port(), GOOD);
    let what = format!("{client_imp:?} -> {server_imp:?}, {proto:?}");
    let all = || format!("{}\n{}", logs(&[&s, &c]), target.logs());
    let len = big();
    let data = pattern(len, 0x4ea1 ^ len as u64 ^ proto as u64);
    let t = Instant::now();
    let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match &inner {
        Some(cc) => {
            let sock = TcpStream::connect(("127.0.0.1", entry)).unwrap();
            tls_echo_through(sock, cc.clone(), &data)
        }
        None => {
            let sock = hello(entry, Duration::from_secs(20)).unwrap();
            echo_through(sock, &data)
        }
    }))
    .unwrap_or_else(|_| panic!("{what}: transfer failed\n{}", all()));
    assert!(got == data, "{what}: bytes differ\n{}", all());
    eprintln!("{what}: {} MB echoed in {:?}", len >> 20, t.elapsed());
    if proto == Proto::Vision {
        // Inner TLS 1.3 under Vision: Ferry's own writer switches to the bare socket once the
        // inner handshake is through (uplink for a client, downlink for a server), over
        // REALITY as over TLS (interop_vision.rs); against itself both directions do.
        for (p, ours) in [(&c, 0), (&s, 1)] {
            if p.name != "ferry" {
                continue;
            }
            let flags = spliced(p, len, &all);
            let both = client_imp == Ferry && server_imp == Ferry;
            assert!(
                flags[ours] && (!both || flags[1 - ours]),
                "{what}: {} spliced up/down {flags:?}\n{}",
                if ours == 0 { "client" } else { "server" },
                all()
            );
        }
    }
}

/// Which directions (up, down) Ferry's relay of at least `len` bytes each way spliced, from
/// its "done: up N down N spliced U/D" line.
fn spliced(p: &Proc, len: usize, logs: &dyn Fn() -> String) -> [bool; 2] {
    let t = Instant::now();
    loop {
        for l in p.output().lines().filter(|l| l.contains(" done: up ")) {
            let n = |key: &str| -> usize {
                l.split(key)
                    .nth(1)
                    .and_then(|r| r.split_whitespace().next())
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0)
            };
            if n(" up ") >= len && n(" down ") >= len {
                let f = l
                    .split("spliced ")
                    .nth(1)
                    .and_then(|r| r.split_whitespace().next())
                    .unwrap_or_default();
                let (u, d) = f.split_once('/').unwrap_or_default();
                return [u == "true", d == "true"];
            }
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "no relay of {len} bytes logged\n{}",
            logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

macro_rules! cases {
    ($($name:ident: $client:expr, $server:expr, $proto:expr;)*) => {
        $(
            #[test]
            fn $name() {
                case($client, $server, $proto);
            }
        )*
    };
}

cases! {
    // The peers among themselves: the harness is good.
    xray_to_xray_vision: Xray, Xray, Proto::Vision;
    xray_to_xray_vless: Xray, Xray, Proto::Vless;
    xray_to_xray_trojan: Xray, Xray, Proto::Trojan;
    singbox_to_singbox_vision: SingBox, SingBox, Proto::Vision;
    singbox_to_singbox_vless: SingBox, SingBox, Proto::Vless;
    singbox_to_singbox_trojan: SingBox, SingBox, Proto::Trojan;
    xray_to_singbox_vision: Xray, SingBox, Proto::Vision;
    xray_to_singbox_vless: Xray, SingBox, Proto::Vless;
    xray_to_singbox_trojan: Xray, SingBox, Proto::Trojan;
    singbox_to_xray_vision: SingBox, Xray, Proto::Vision;
    singbox_to_xray_vless: SingBox, Xray, Proto::Vless;
    singbox_to_xray_trojan: SingBox, Xray, Proto::Trojan;
    // Ferry.
    xray_to_ferry_vision: Xray, Ferry, Proto::Vision;
    xray_to_ferry_vless: Xray, Ferry, Proto::Vless;
    xray_to_ferry_trojan: Xray, Ferry, Proto::Trojan;
    ferry_to_xray_vision: Ferry, Xray, Proto::Vision;
    ferry_to_xray_vless: Ferry, Xray, Proto::Vless;
    ferry_to_xray_trojan: Ferry, Xray, Proto::Trojan;
    ferry_to_ferry_vision: Ferry, Ferry, Proto::Vision;
    ferry_to_ferry_vless: Ferry, Ferry, Proto::Vless;
    ferry_to_ferry_trojan: Ferry, Ferry, Proto::Trojan;
    singbox_to_ferry_vision: SingBox, Ferry, Proto::Vision;
    singbox_to_ferry_vless: SingBox, Ferry, Proto::Vless;
    singbox_to_ferry_trojan: SingBox, Ferry, Proto::Trojan;
    ferry_to_singbox_vision: Ferry, SingBox, Proto::Vision;
    ferry_to_singbox_vless: Ferry, SingBox, Proto::Vless;
    ferry_to_singbox_trojan: Ferry, SingBox, Proto::Trojan;
    // gRPC over REALITY (Xray allows raw, gRPC and XHTTP under it).
    xray_to_xray_grpc: Xray, Xray, Proto::Grpc;
    xray_to_ferry_grpc: Xray, Ferry, Proto::Grpc;
    ferry_to_xray_grpc: Ferry, Xray, Proto::Grpc;
    ferry_to_ferry_grpc: Ferry, Ferry, Proto::Grpc;
    singbox_to_ferry_grpc: SingBox, Ferry, Proto::Grpc;
    ferry_to_singbox_grpc: Ferry, SingBox, Proto::Grpc;
}

#[test]
fn the_key_pair_is_xrays() {
    let out = Command::new(peer("xray"))
        .args(["x25519", "-i", PRIVATE_KEY])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    // Xray v26 prints "PrivateKey: …", "Password (PublicKey): …", "Hash32: …".
    assert!(
        text.lines()
            .any(|l| l.trim() == format!("Password (PublicKey): {PUBLIC_KEY}")),
        "{text}"
    );
}

// ---------------------------------------------------------------------------------------
// Recording taps and raw probes

#[derive(Default)]
struct Flow {
    c2s: Mutex<Vec<u8>>,
    s2c: Mutex<Vec<u8>>,
    /// Directions finished (2 = both).
    ended: AtomicUsize,
}

impl Flow {
    fn c2s(&self) -> Vec<u8> {
        self.c2s.lock().unwrap().clone()
    }
    fn s2c(&self) -> Vec<u8> {
        self.s2c.lock().unwrap().clone()
    }
    fn done(&self) -> bool {
        self.ended.load(Ordering::SeqCst) >= 2
    }
}

/// A TCP proxy on a free port to `to` that records each connection's bytes both ways. The
/// first `trickle` client bytes go out one per TCP segment.
struct Tap {
    port: u16,
    flows: Arc<Mutex<Vec<Arc<Flow>>>>,
}

fn copy_half(mut from: TcpStream, mut to: TcpStream, rec: Arc<Flow>, up: bool, mut trickle: usize) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) => {
                let _ = to.shutdown(Shutdown::Write);
                break;
            }
            Ok(n) => {
                let d = &buf[..n];
                if up {
                    rec.c2s.lock().unwrap().extend_from_slice(d);
                } else {
                    rec.s2c.lock().unwrap().extend_from_slice(d);
                }
                let mut ok = true;
                let mut rest = d;
                while trickle > 0 && !rest.is_empty() && ok {
                    ok = to.write_all(&rest[..1]).is_ok();
                    std::thread::sleep(Duration::from_micros(200));
                    rest = &rest[1..];
                    trickle -= 1;
                }
                if !ok || to.write_all(rest).is_err() {
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
    rec.ended.fetch_add(1, Ordering::SeqCst);
}

impl Tap {
    fn new(to: SocketAddr, trickle: usize) -> Tap {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let flows: Arc<Mutex<Vec<Arc<Flow>>>> = Arc::default();
        let fl = flows.clone();
        std::thread::spawn(move || {
            for c in l.incoming() {
                let Ok(c) = c else { continue };
                let rec = Arc::new(Flow::default());
                fl.lock().unwrap().push(rec.clone());
                let Ok(s) = TcpStream::connect(to) else {
                    rec.ended.store(2, Ordering::SeqCst);
                    continue;
                };
                let _ = s.set_nodelay(true);
                let _ = c.set_nodelay(true);
                let (c2, s2) = (c.try_clone().unwrap(), s.try_clone().unwrap());
                let r2 = rec.clone();
                std::thread::spawn(move || copy_half(c, s, rec, true, trickle));
                std::thread::spawn(move || copy_half(s2, c2, r2, false, 0));
            }
        });
        Tap { port, flows }
    }

    fn flows(&self) -> Vec<Arc<Flow>> {
        self.flows.lock().unwrap().clone()
    }

    /// The connections whose client bytes start with `prefix`, oldest first, once they are
    /// over (waits up to 10 s).
    fn finished_with(&self, prefix: &[u8]) -> Vec<Arc<Flow>> {
        let t = Instant::now();
        loop {
            let found: Vec<_> = self
                .flows()
                .into_iter()
                .filter(|f| f.c2s().starts_with(prefix))
                .collect();
            if !found.is_empty() && found.iter().all(|f| f.done()) {
                return found;
            }
            if t.elapsed() > Duration::from_secs(10) {
                return found;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The first connection once it is over (up to 10 s).
    fn first(&self) -> Arc<Flow> {
        let t = Instant::now();
        loop {
            if let Some(f) = self.flows().first() {
                if f.done() || t.elapsed() > Duration::from_secs(10) {
                    return f.clone();
                }
            }
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "nothing came through the tap"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The TLS records in `b` as (type, total length incl. header); a cut last record counts
/// with what is there.
fn records(mut b: &[u8]) -> Vec<(u8, usize)> {
    let mut v = Vec::new();
    while b.len() >= 5 {
        let n = (5 + u16::from_be_bytes([b[3], b[4]]) as usize).min(b.len());
        v.push((b[0], n));
        b = &b[n..];
    }
    v
}

/// The first TLS record of a client's bytes: its ClientHello.
fn client_hello(c2s: &[u8]) -> Vec<u8> {
    assert!(
        c2s.len() > 5 && c2s[0] == 0x16 && c2s[5] == 0x01,
        "not a ClientHello record: {:02x?}",
        &c2s[..c2s.len().min(16)]
    );
    let n = 5 + u16::from_be_bytes([c2s[3], c2s[4]]) as usize;
    assert!(
        c2s.len() >= n,
        "ClientHello cut: {} of {n} bytes",
        c2s.len()
    );
    c2s[..n].to_vec()
}

/// Whether `b` starts like a TLS server's first flight: a ServerHello record.
fn starts_with_server_hello(b: &[u8]) -> bool {
    b.len() > 5 && b[0] == 0x16 && b[1] == 0x03 && b[5] == 0x02
}

/// Reads what arrives until `idle` passes without a byte, EOF, or 10 s.
fn read_until_idle(s: &mut TcpStream, idle: Duration) -> Vec<u8> {
    s.set_read_timeout(Some(idle)).unwrap();
    let (t, mut out, mut buf) = (Instant::now(), Vec::new(), [0u8; 16384]);
    while t.elapsed() < Duration::from_secs(10) {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => break,
            Err(_) => break,
        }
    }
    out
}

/// Reads until EOF or a reset; Err(elapsed) when the peer kept the connection open past
/// `within`.
fn ends_within(s: &mut TcpStream, within: Duration) -> Result<Duration, Duration> {
    let t = Instant::now();
    let mut buf = [0u8; 16384];
    loop {
        let left = within.saturating_sub(t.elapsed());
        if left.is_zero() {
            return Err(t.elapsed());
        }
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut buf) {
            Ok(0) => return Ok(t.elapsed()),
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(t.elapsed())
            }
            Err(_) => return Ok(t.elapsed()),
        }
    }
}

/// A ClientHello as an Xray REALITY client (VLESS, the good key and shortId) sends it,
/// caught by a listener that closes after reading it.
fn xray_client_hello() -> Vec<u8> {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let sink = l.local_addr().unwrap().port();
    let entry = free_port();
    let c = client(Xray, Proto::Vless, entry, sink, 9, GOOD);
    let _ = TcpStream::connect(("127.0.0.1", entry)).and_then(|mut s| s.write_all(b"hello"));
    l.set_nonblocking(true).unwrap();
    let t = Instant::now();
    let mut s = loop {
        match l.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                assert!(
                    t.elapsed() < Duration::from_secs(10),
                    "the Xray client never dialed\n{}",
                    c.output()
                );
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("{e}"),
        }
    };
    s.set_nonblocking(false).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut head = [0u8; 5];
    s.read_exact(&mut head).unwrap();
    let mut body = vec![0u8; u16::from_be_bytes([head[3], head[4]]) as usize];
    s.read_exact(&mut body).unwrap();
    drop(c);
    let mut ch = head.to_vec();
    ch.extend_from_slice(&body);
    client_hello(&ch)
}

// ---------------------------------------------------------------------------------------
// Probing: what is not an authenticated REALITY client meets the target

fn curl(port: u16, name: &str, extra: &[&str]) -> (String, Vec<Vec<u8>>, String) {
    let dir = tempdir::Dir::new("reality-curl");
    let body = dir.path().join("body");
    let out = Command::new(peer("curl"))
        .args(["-sSk", "--max-time", "10", "--resolve"])
        .arg(format!("{name}:{port}:127.0.0.1"))
        .args(extra)
        .arg("-o")
        .arg(&body)
        .args(["-w", "%{certs}"])
        .arg(format!("https://{name}:{port}/"))
        .output()
        .unwrap();
    let certs = CertificateDer::pem_slice_iter(&out.stdout)
        .filter_map(|c| c.ok())
        .map(|c| c.to_vec())
        .collect();
    (
        std::fs::read_to_string(&body).unwrap_or_default(),
        certs,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn sha256_hex(b: &[u8]) -> String {
    aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, b)
        .as_ref()
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

/// (a) curl through the REALITY server's port gets nginx's page and nginx's own
/// certificate, for the listed SNI, an unlisted one, and TLS 1.2: none of them is a REALITY
/// client.
fn curl_probes(server_imp: Imp) {
    let target = Target::new(None, true);
    let sport = free_port();
    let s = server(
        server_imp,
        Proto::Vless,
        sport,
        ([127, 0, 0, 1], target.port).into(),
    );
    let (page, certs, err) = curl(target.port, SNI, &[]);
    assert_eq!(page.trim(), PAGE, "nginx alone: {err}\n{}", target.logs());
    assert_eq!(certs, vec![target.cert_der.clone()], "nginx alone: {err}");
    for (name, extra) in [
        (SNI, &[][..]),
        (SNI, &["--http1.1"][..]),
        ("unlisted.test", &[][..]),
        (SNI, &["--tls-max", "1.2"][..]),
    ] {
        let (page, certs, err) = curl(sport, name, extra);
        let what = format!("{server_imp:?}: curl {name} {extra:?}");
        assert_eq!(
            page.trim(),
            PAGE,
            "{what}: {err}\n{}\n{}",
            s.output(),
            target.logs()
        );
        let got: Vec<String> = certs.iter().map(|c| sha256_hex(c)).collect();
        assert_eq!(
            got,
            vec![sha256_hex(&target.cert_der)],
            "{what}: not nginx's certificate\n{}",
            s.output()
        );
    }
}

#[test]
fn curl_gets_the_targets_page_and_certificate_from_xray() {
    curl_probes(Xray);
}

#[test]
fn curl_gets_the_targets_page_and_certificate_from_singbox() {
    curl_probes(SingBox);
}

#[test]
fn curl_gets_the_targets_page_and_certificate_from_ferry() {
    curl_probes(Ferry);
}

/// A REALITY server in front of nginx with a tap on each side.
struct Tapped {
    target: Target,
    /// Between the server and nginx.
    behind: Tap,
    /// Between clients and the server.
    front: Tap,
    sport: u16,
    server: Proc,
}

impl Tapped {
    fn new(server_imp: Imp, trickle: usize) -> Tapped {
        Tapped::windowed(server_imp, trickle, "")
    }

    fn windowed(server_imp: Imp, trickle: usize, window: &str) -> Tapped {
        let target = Target::new(None, true);
        let behind = Tap::new(([127, 0, 0, 1], target.port).into(), 0);
        let sport = free_port();
        let front = Tap::new(([127, 0, 0, 1], sport).into(), trickle);
        let server = server_windowed(
            server_imp,
            Proto::Vless,
            sport,
            ([127, 0, 0, 1], behind.port).into(),
            window,
        );
        Tapped {
            target,
            behind,
            front,
            sport,
            server,
        }
    }

    fn logs(&self, more: &[&Proc]) -> String {
        format!(
            "{}\n{}\n{}",
            self.server.output(),
            logs(more),
            self.target.logs()
        )
    }

    /// Checks that the (finished) client connection `c` was spliced to the target: the
    /// target got every byte the client sent and the client got exactly what the target
    /// answered.
    fn assert_spliced(&self, what: &str, c: &Flow, more: &[&Proc]) {
        let c2s = c.c2s();
        let ch = client_hello(&c2s);
        let t = self.behind.finished_with(&ch);
        assert_eq!(
            t.len(),
            1,
            "{what}: {} target connections began with the ClientHello\n{}",
            t.len(),
            self.logs(more)
        );
        let t = &t[0];
        assert!(
            starts_with_server_hello(&t.s2c()),
            "{what}: the target did not answer with a ServerHello: {:02x?}\n{}",
            &t.s2c()[..t.s2c().len().min(16)],
            self.logs(more)
        );
        assert!(
            t.c2s() == c2s,
            "{what}: the target did not get every client byte ({} of {})\n{}",
            t.c2s().len(),
            c2s.len(),
            self.logs(more)
        );
        assert!(
            t.s2c() == c.s2c(),
            "{what}: the client got {} bytes, records {:?}; the target sent {}, records {:?}; {}\n{}",
            c.s2c().len(),
            records(&c.s2c()),
            t.s2c().len(),
            records(&t.s2c()),
            first_difference(&c.s2c(), &t.s2c()),
            self.logs(more)
        );
    }
}

/// A client with the wrong `auth` is a probe: it is not served and sees the target.
fn refused_client(server_imp: Imp, auth: Auth) {
    refused_client_of(Xray, server_imp, auth, "")
}

/// [`refused_client`] with a client of `client_imp` and a server with `window`.
fn refused_client_of(client_imp: Imp, server_imp: Imp, auth: Auth, window: &str) {
    let tp = Tapped::windowed(server_imp, 0, window);
    let entry = free_port();
    let echo = echo_server();
    let c = client(
        client_imp,
        Proto::Vless,
        entry,
        tp.front.port,
        echo.port(),
        auth,
    );
    let what = format!(
        "{server_imp:?}, Xray client with SNI {} shortId {}",
        auth.sni, auth.short_id
    );
    match hello(entry, GIVE_UP) {
        Ok(_) => panic!("{what}: served\n{}", tp.logs(&[&c])),
        Err(e) => assert!(
            !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
            "{what}: neither served nor closed\n{}",
            tp.logs(&[&c])
        ),
    }
    let f = tp.front.first();
    tp.assert_spliced(&what, &f, &[&c]);
}

/// REALITY's client version window. Xray v26.3.27 clients say 26.3.27; Ferry's client says
/// 26.7.28 (Xray's newest), so it passes the default minimum of servers since v26.7.11
/// (`minClientVer` 26.3.27) and a server's `maxClientVer` below it sends it to the target.
fn windowed_served(client_imp: Imp, server_imp: Imp, window: &str) {
    let target = Target::new(None, true);
    let (sport, entry) = (free_port(), free_port());
    let echo = echo_server();
    let s = server_windowed(
        server_imp,
        Proto::Vless,
        sport,
        ([127, 0, 0, 1], target.port).into(),
        window,
    );
    let c = client(client_imp, Proto::Vless, entry, sport, echo.port(), GOOD);
    let data = pattern(256 << 10, 0x5e5);
    let sock = hello(entry, Duration::from_secs(20)).unwrap_or_else(|e| {
        panic!(
            "{client_imp:?} -> {server_imp:?} {window}: {e}\n{}",
            logs(&[&s, &c])
        )
    });
    assert!(echo_through(sock, &data) == data, "{}", logs(&[&s, &c]));
}

#[test]
fn ferry_client_passes_xrays_window_from_v26_7_11() {
    windowed_served(Ferry, Xray, r#","minClientVer":"26.3.27""#);
}

#[test]
fn ferry_client_above_xrays_max_client_ver_meets_the_target() {
    refused_client_of(Ferry, Xray, GOOD, r#","maxClientVer":"26.3.27""#);
}

#[test]
fn ferry_enforces_its_window_on_xray_clients() {
    windowed_served(
        Xray,
        Ferry,
        r#","minClientVer":"26.3.27","maxClientVer":"26.3.27""#,
    );
    refused_client_of(Xray, Ferry, GOOD, r#","minClientVer":"26.3.28""#);
    refused_client_of(Xray, Ferry, GOOD, r#","maxClientVer":"26.3""#);
}

#[test]
fn a_wrong_short_id_meets_the_target_behind_xray() {
    refused_client(
        Xray,
        Auth {
            sni: SNI,
            short_id: "fedcba9876543210",
        },
    );
}

#[test]
fn a_wrong_short_id_meets_the_target_behind_ferry() {
    refused_client(
        Ferry,
        Auth {
            sni: SNI,
            short_id: "fedcba9876543210",
        },
    );
}

#[test]
fn an_unlisted_sni_meets_the_target_behind_xray() {
    refused_client(
        Xray,
        Auth {
            sni: "unlisted.test",
            short_id: SHORT_ID,
        },
    );
}

#[test]
fn an_unlisted_sni_meets_the_target_behind_ferry() {
    refused_client(
        Ferry,
        Auth {
            sni: "unlisted.test",
            short_id: SHORT_ID,
        },
    );
}

/// curl through the taps: spliced both ways, byte for byte.
fn curl_spliced(server_imp: Imp) {
    let tp = Tapped::new(server_imp, 0);
    let (page, certs, err) = curl(tp.front.port, SNI, &["--http1.1"]);
    assert_eq!(page.trim(), PAGE, "{server_imp:?}: {err}\n{}", tp.logs(&[]));
    assert_eq!(certs, vec![tp.target.cert_der.clone()]);
    let f = tp.front.first();
    tp.assert_spliced(&format!("{server_imp:?}, curl"), &f, &[]);
}

#[test]
fn curl_is_spliced_to_the_target_byte_for_byte_by_xray() {
    curl_spliced(Xray);
}

#[test]
fn curl_is_spliced_to_the_target_byte_for_byte_by_ferry() {
    curl_spliced(Ferry);
}

/// A good Xray client through the taps: served; the target saw its ClientHello and nothing
/// after; the server's answer is its own (not the target's bytes) but in the target's record
/// types and sizes up to the target's Finished (specs/transports2.md §1.3 step 6). Returns
/// the ClientHello.
fn good_client(tp: &Tapped, server_imp: Imp) -> Vec<u8> {
    let entry = free_port();
    let echo = echo_server();
    let c = client(Xray, Proto::Vless, entry, tp.front.port, echo.port(), GOOD);
    let what = format!("{server_imp:?}, good Xray client");
    let s = hello(entry, Duration::from_secs(15))
        .unwrap_or_else(|e| panic!("{what}: not served: {e}\n{}", tp.logs(&[&c])));
    let data = pattern(1 << 20, 77);
    assert!(echo_through(s, &data) == data, "{what}: bytes differ");
    let f = tp.front.flows()[0].clone();
    let ch = client_hello(&f.c2s());
    let t = tp.behind.finished_with(&ch);
    assert_eq!(
        t.len(),
        1,
        "{what}: {} target connections began with the ClientHello\n{}",
        t.len(),
        tp.logs(&[&c])
    );
    assert!(
        t[0].c2s() == ch,
        "{what}: the target got {} bytes, the ClientHello is {}\n{}",
        t[0].c2s().len(),
        ch.len(),
        tp.logs(&[&c])
    );
    let (theirs, ours) = (t[0].s2c(), f.s2c());
    assert!(
        starts_with_server_hello(&theirs),
        "{what}: target answer {:02x?}",
        &theirs[..theirs.len().min(16)]
    );
    assert!(
        !ours.starts_with(&theirs),
        "{what}: the client got the target's bytes"
    );
    let (tr, or) = (records(&theirs), records(&ours));
    eprintln!("{what}: target records {tr:?}, server records {or:?}");
    assert!(
        or.len() >= tr.len() && or[..tr.len()] == tr[..],
        "{what}: handshake records differ from the target's:\n  target {tr:?}\n  server {or:?}"
    );
    // The ServerHello is the target's (random, session id, suite, extensions in its order)
    // but for its key share: the bytes that differ lie within one share (X25519: 32 bytes).
    let n = tr[0].1;
    let diff: Vec<usize> = (0..n).filter(|i| ours[*i] != theirs[*i]).collect();
    assert!(
        !diff.is_empty() && diff.last().unwrap() - diff[0] < 32,
        "{what}: ServerHello differs from the target's at {diff:?}"
    );
    drop(c);
    ch
}

#[test]
fn a_good_client_gets_the_targets_record_sizes_from_xray() {
    let tp = Tapped::new(Xray, 0);
    good_client(&tp, Xray);
}

#[test]
fn a_good_client_gets_the_targets_record_sizes_from_ferry() {
    let tp = Tapped::new(Ferry, 0);
    good_client(&tp, Ferry);
}

/// ML-DSA-65 (`mldsa65Seed` on the server, `mldsa65Verify` on the client): the certificate
/// carries a signature over both hellos, checked by the client. Xray and Ferry both ways.
fn mldsa65(client_imp: Imp, server_imp: Imp) {
    // `xray mldsa65 -i AQID...` printed this pair's Verify (checked in the_key_pair_is_xrays's
    // twin below).
    let seed = "BQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQU";
    let verify = ferry::config::reality::b64(
        &ferry::transport::reality::cert::mldsa65_public(
            &ferry::config::reality::key32(seed).unwrap(),
        )
        .unwrap(),
    );
    let target = Target::big();
    assert!(target.cert_der.len() > 3500, "{}", target.cert_der.len());
    let echo = echo_server();
    let (sport, entry) = (free_port(), free_port());
    let inbound = xray_inbound(Proto::Vless, sport, &format!("127.0.0.1:{}", target.port)).replace(
        r#""maxTimeDiff":600000"#,
        &format!(r#""maxTimeDiff":600000,"mldsa65Seed":"{seed}""#),
    );
    let scfg = format!(
        r#"{{"log":{{"loglevel":"debug"}},"inbounds":[{inbound}],"outbounds":[{XRAY_FREEDOM}]}}"#
    );
    let s = spawn(server_imp, &scfg, &[sport]);
    if server_imp == Xray {
        std::thread::sleep(Duration::from_millis(2500));
    }
    let outbound = xray_outbound(Proto::Vless, sport, GOOD).replace(
        r#""password":"#,
        &format!(r#""mldsa65Verify":"{verify}","password":"#),
    );
    let ccfg = |entry: u16, outbound: &str| {
        format!(
            r#"{{"log":{{"loglevel":"debug"}},
                "inbounds":[{{"listen":"127.0.0.1","port":{entry},"protocol":"dokodemo-door",
                  "settings":{{"address":"127.0.0.1","port":{},"network":"tcp"}}}}],
                "outbounds":[{outbound}]}}"#,
            echo.port()
        )
    };
    let c = spawn(client_imp, &ccfg(entry, &outbound), &[entry]);
    let what = format!("{client_imp:?} -> {server_imp:?} with ML-DSA-65");
    let sock = hello(entry, Duration::from_secs(15)).unwrap_or_else(|e| {
        panic!(
            "{what}: not served: {e}\n{}\n{}",
            logs(&[&s, &c]),
            target.logs()
        )
    });
    let data = pattern(4 << 20, 65);
    assert!(echo_through(sock, &data) == data, "{what}: bytes differ");
    // A client expecting another ML-DSA key is refused.
    let other = ferry::config::reality::b64(
        &ferry::transport::reality::cert::mldsa65_public(&[4u8; 32]).unwrap(),
    );
    let entry2 = free_port();
    let c2 = spawn(
        client_imp,
        &ccfg(entry2, &outbound.replace(&verify, &other)),
        &[entry2],
    );
    assert!(
        hello(entry2, Duration::from_secs(3)).is_err(),
        "{what}: a client with another mldsa65Verify was served\n{}",
        logs(&[&s, &c2])
    );
}

#[test]
fn mldsa65_xray_to_ferry() {
    mldsa65(Xray, Ferry);
}

#[test]
fn mldsa65_ferry_to_xray() {
    mldsa65(Ferry, Xray);
}

#[test]
fn mldsa65_ferry_to_ferry() {
    mldsa65(Ferry, Ferry);
}

#[test]
fn ferry_mldsa65_prints_what_xray_prints() {
    let seed = "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA";
    let run = |bin: &Path| {
        let o = Command::new(bin)
            .args(["mldsa65", "-i", seed])
            .output()
            .unwrap();
        assert!(o.status.success());
        String::from_utf8(o.stdout).unwrap()
    };
    let ferry = run(Path::new(env!("CARGO_BIN_EXE_ferry")));
    let xray = run(&peer("xray"));
    assert!(ferry.contains("Verify: ") && ferry.len() > 2000);
    assert_eq!(ferry, xray);
}

/// `ferry link -c SERVER --host` prints a `vless://` link per user of a REALITY inbound;
/// `ferry link LINK` turns it into an outbound; Xray and Ferry clients built from that outbound
/// carry bytes through the server.
#[test]
fn share_links_of_a_reality_inbound_connect() {
    let target = Target::new(None, true);
    let echo = echo_server();
    let sport = free_port();
    let inbound = xray_inbound(Proto::Vision, sport, &format!("127.0.0.1:{}", target.port));
    let scfg = format!(
        r#"{{"log":{{"loglevel":"debug"}},"inbounds":[{inbound}],"outbounds":[{FREEDOM}]}}"#
    );
    let dir = tempdir::Dir::new("reality-link");
    let path = dir.path().join("server.json");
    std::fs::write(&path, &scfg).unwrap();
    let ferry = Path::new(env!("CARGO_BIN_EXE_ferry"));
    let o = Command::new(ferry)
        .args(["link", "-c", path.to_str().unwrap(), "--host", "127.0.0.1"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let link = out
        .split_whitespace()
        .find(|w| w.starts_with("vless://"))
        .unwrap_or_else(|| panic!("no vless:// link in {out:?}"))
        .to_string();
    assert!(
        link.contains(&format!("pbk={PUBLIC_KEY}")) && link.contains("security=reality"),
        "{link}"
    );
    let o = Command::new(ferry).args(["link", &link]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let outbound = String::from_utf8_lossy(&o.stdout).to_string();
    let s = spawn(Ferry, &scfg, &[sport]);
    for imp in [Xray, Ferry] {
        let entry = free_port();
        let ccfg = format!(
            r#"{{"log":{{"loglevel":"debug"}},
                "inbounds":[{{"listen":"127.0.0.1","port":{entry},"protocol":"dokodemo-door",
                  "settings":{{"address":"127.0.0.1","port":{},"network":"tcp"}}}}],
                "outbounds":[{outbound}]}}"#,
            echo.port()
        );
        let c = spawn(imp, &ccfg, &[entry]);
        let sock = hello(entry, Duration::from_secs(15))
            .unwrap_or_else(|e| panic!("{imp:?} client from {link}: {e}\n{}", logs(&[&s, &c])));
        let data = pattern(2 << 20, 9);
        assert!(echo_through(sock, &data) == data, "{imp:?}: bytes differ");
    }
}

/// A ClientHello sealed for the server's key but an hour old (`maxTimeDiff` is ten minutes):
/// a prober's, spliced to the target byte for byte.
fn stale_clock(server_imp: Imp) {
    use ferry::transport::reality::{fingerprint, hello as rh, keys};
    let tp = Tapped::new(server_imp, 0);
    let (mut ch, k) = rh::build(&fingerprint::CHROME, Some(SNI));
    let random: [u8; 32] = ch[6..38].try_into().unwrap();
    let public = ferry::config::reality::key32(PUBLIC_KEY).unwrap();
    let shared = keys::x25519(k.auth_private().unwrap(), &public).unwrap();
    let auth = keys::auth_key(&shared, &random);
    let then = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as u32
        - 3600;
    let mut plain = [0u8; 16];
    plain[..3].copy_from_slice(&[26, 7, 28]);
    plain[4..8].copy_from_slice(&then.to_be_bytes());
    // SHORT_ID, listed on the server.
    plain[8..].copy_from_slice(&[1, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef]);
    let sid = keys::seal_session_id(&auth, &random, &plain, &ch);
    ch[rh::SESSION_ID_AT..rh::SESSION_ID_AT + 32].copy_from_slice(&sid);
    let mut rec = vec![22, 3, 1];
    rec.extend_from_slice(&(ch.len() as u16).to_be_bytes());
    rec.extend_from_slice(&ch);
    let mut s = TcpStream::connect(("127.0.0.1", tp.front.port)).unwrap();
    s.write_all(&rec).unwrap();
    let got = read_until_idle(&mut s, Duration::from_millis(1500));
    drop(s);
    assert!(
        starts_with_server_hello(&got),
        "{server_imp:?}: no ServerHello for a stale hello"
    );
    let t = Instant::now();
    let f = loop {
        let f = tp.front.flows().last().cloned().unwrap();
        if f.done() || t.elapsed() > PROMPT {
            break f;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    tp.assert_spliced(&format!("{server_imp:?}, an hour-old hello"), &f, &[]);
    if server_imp == Ferry {
        let log = tp.server.output();
        assert!(
            log.contains("reality: rejected") && log.contains("(clock)") && log.contains("ms off"),
            "Ferry did not log the clock:\n{log}"
        );
    }
}

#[test]
fn a_stale_clock_meets_the_target_behind_xray() {
    stale_clock(Xray);
}

#[test]
fn a_stale_clock_meets_the_target_behind_ferry() {
    stale_clock(Ferry);
}

/// §1.3 step 7: after the handshake the server sends records of the lengths the target sends
/// after its own (nginx's session tickets, and its HTTP/2 SETTINGS for an h2 client), measured
/// in the background. (Xray v26.3.27 sends none behind this nginx: its probe finds nothing, so
/// there is no Xray twin of this test.)
fn post_handshake_records(server_imp: Imp) {
    let tp = Tapped::new(server_imp, 0);
    // What nginx sends after a handshake with a Chrome-like client (ALPN h2 first).
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dest = ferry::common::Destination::new(
        ferry::common::Address::Ip([127, 0, 0, 1].into()),
        tp.target.port,
    );
    let want = rt
        .block_on(ferry::transport::reality::server::measure_post_handshake(
            &dest, 0, SNI, 2,
        ))
        .unwrap();
    assert!(
        !want.is_empty() && want.iter().all(|l| *l > 5 + 16),
        "nginx sends {want:?} after its handshake"
    );
    // The first connection starts the server's own measurement; the second gets it.
    good_client(&tp, server_imp);
    std::thread::sleep(Duration::from_secs(3));
    let entry = free_port();
    let echo = echo_server();
    let c = client(Xray, Proto::Vless, entry, tp.front.port, echo.port(), GOOD);
    let what = format!("{server_imp:?}, second good Xray client");
    let s = hello(entry, Duration::from_secs(15))
        .unwrap_or_else(|e| panic!("{what}: not served: {e}\n{}", tp.logs(&[&c])));
    let data = pattern(64 << 10, 78);
    assert!(echo_through(s, &data) == data, "{what}: bytes differ");
    let f = tp.front.flows().last().unwrap().clone();
    let ch = client_hello(&f.c2s());
    let t = tp.behind.finished_with(&ch);
    assert_eq!(t.len(), 1, "{what}\n{}", tp.logs(&[&c]));
    let tr = records(&t[0].s2c());
    let or = records(&f.s2c());
    let post: Vec<(u8, usize)> = want.iter().map(|l| (23u8, *l)).collect();
    eprintln!("{what}: target handshake {tr:?}, server {or:?}, target's post-handshake {want:?}");
    assert!(
        or.len() >= tr.len() + post.len() && or[tr.len()..tr.len() + post.len()] == post[..],
        "{what}: after the handshake records {:?}, expected {post:?} first\n{}",
        &or[tr.len().min(or.len())..],
        tp.logs(&[&c])
    );
}

#[test]
fn the_targets_post_handshake_records_follow_from_ferry() {
    post_handshake_records(Ferry);
}

/// (c) A raw prober replays a good client's ClientHello (recorded by the front tap) after
/// that connection was served. Returns what the prober received, what the target sent on the
/// server's connection to it for the replay, and the setup (for its logs).
fn replay(server_imp: Imp) -> (Vec<u8>, Vec<u8>, Tapped) {
    let tp = Tapped::new(server_imp, 0);
    let ch = good_client(&tp, server_imp);
    let mut p = TcpStream::connect(("127.0.0.1", tp.sport)).unwrap();
    p.write_all(&ch).unwrap();
    let got = read_until_idle(&mut p, Duration::from_millis(1500));
    drop(p);
    let t = tp.behind.finished_with(&ch);
    assert_eq!(
        t.len(),
        2,
        "{server_imp:?}: the replay did not reach the target\n{}",
        tp.logs(&[])
    );
    let theirs = t[1].s2c();
    assert!(
        starts_with_server_hello(&theirs),
        "{server_imp:?}: target answer {:02x?}",
        &theirs[..theirs.len().min(16)]
    );
    (got, theirs, tp)
}

/// The replay is a probe: the prober gets the target's ServerHello and certificate flight,
/// byte for byte, not a REALITY handshake. (Beyond Xray: this needs a cache of the
/// ClientHellos already accepted.)
#[test]
fn a_replayed_client_hello_meets_the_target_behind_ferry() {
    let (got, theirs, tp) = replay(Ferry);
    assert!(
        got == theirs,
        "the prober got {} bytes, records {:?}; the target sent {}, records {:?}; {}\n{}",
        got.len(),
        records(&got),
        theirs.len(),
        records(&theirs),
        first_difference(&got, &theirs),
        tp.logs(&[])
    );
}

/// Where two byte strings first differ, for messages.
fn first_difference(a: &[u8], b: &[u8]) -> String {
    match a.iter().zip(b).position(|(x, y)| x != y) {
        Some(i) => format!(
            "first difference at byte {i} ({:02x?} vs {:02x?}): a REALITY answer",
            &a[i..a.len().min(i + 8)],
            &b[i..b.len().min(i + 8)]
        ),
        None => "one is a prefix of the other".to_string(),
    }
}

/// Xray keeps no replay cache: the same check shows its own handshake (the oracle tells the
/// two apart).
#[test]
fn a_replayed_client_hello_gets_a_reality_handshake_from_xray() {
    let (got, theirs, _tp) = replay(Xray);
    eprintln!(
        "replay: Xray sent records {:?}, the target {:?}",
        records(&got),
        records(&theirs)
    );
    assert!(
        starts_with_server_hello(&got),
        "{:02x?}",
        &got[..got.len().min(16)]
    );
    assert!(
        got != theirs,
        "Xray now answers a replay with the target's bytes"
    );
    assert_eq!(records(&got), records(&theirs), "sizes differ");
}

// ---------------------------------------------------------------------------------------
// Bad input against the server: nothing hangs, a good client is served afterwards

fn served_after(tp: &Tapped, what: &str) {
    let entry = free_port();
    let echo = echo_server();
    let c = client(Xray, Proto::Vless, entry, tp.sport, echo.port(), GOOD);
    let s = hello(entry, Duration::from_secs(15)).unwrap_or_else(|e| {
        panic!(
            "{what}: a good client is not served after: {e}\n{}",
            tp.logs(&[&c])
        )
    });
    let data = pattern(4 << 20, 78);
    assert!(echo_through(s, &data) == data, "{what}: bytes differ after");
}

/// Sends `bytes`, half-closes, and requires the server to end the connection within PROMPT.
fn must_end(port: u16, bytes: &[u8], what: &str, logs: &dyn Fn() -> String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let _ = s.write_all(bytes);
    let _ = s.shutdown(Shutdown::Write);
    match ends_within(&mut s, PROMPT) {
        Ok(t) => eprintln!("{what}: ended after {t:?}"),
        Err(t) => panic!("{what}: still open after {t:?}\n{}", logs()),
    }
}

fn cut_client_hellos(server_imp: Imp) {
    let tp = Tapped::new(server_imp, 0);
    let ch = xray_client_hello();
    let l = ch.len();
    let logs = || tp.logs(&[]);
    for cut in [1, 3, 5, 6, 9, 11, 43, 44, 75, 76, 200, l / 2, l - 33, l - 1] {
        must_end(
            tp.sport,
            &ch[..cut],
            &format!("{server_imp:?}: ClientHello cut at {cut} of {l}"),
            &logs,
        );
    }
    // Cut and closed outright (no half-close): nothing to see but the server's health.
    for cut in [5, 76, l - 1] {
        let mut s = TcpStream::connect(("127.0.0.1", tp.sport)).unwrap();
        s.write_all(&ch[..cut]).unwrap();
        drop(s);
    }
    // Silent connections: opened and half-closed.
    must_end(tp.sport, b"", &format!("{server_imp:?}: empty"), &logs);
    served_after(&tp, &format!("{server_imp:?}: cut ClientHellos"));
}

#[test]
fn cut_client_hellos_end_promptly_on_xray() {
    cut_client_hellos(Xray);
}

#[test]
fn cut_client_hellos_end_promptly_on_ferry() {
    cut_client_hellos(Ferry);
}

fn garbage(server_imp: Imp) {
    let tp = Tapped::new(server_imp, 0);
    let ch = xray_client_hello();
    let logs = || tp.logs(&[]);
    let mut inputs: Vec<(&str, Vec<u8>)> = vec![
        ("random bytes", pattern(3000, 5)),
        (
            "plain HTTP",
            b"GET / HTTP/1.1\r\nHost: reality.test\r\n\r\n".to_vec(),
        ),
        (
            "a huge record length",
            [&[0x16, 3, 1, 0xff, 0xff][..], &pattern(100, 6)].concat(),
        ),
        ("an empty handshake record", vec![0x16, 3, 1, 0, 0]),
        (
            "an SSLv2 hello",
            [&[0x80, 0x2e, 0x01, 0x03, 0x01][..], &pattern(0x2e - 3, 7)].concat(),
        ),
        (
            "application data first",
            [&[0x17, 3, 3, 0, 64][..], &pattern(64, 8)].concat(),
        ),
        ("an alert", vec![0x15, 3, 3, 0, 2, 2, 40]),
    ];
    let mut bad_len = ch.clone();
    bad_len[6..9].copy_from_slice(&[0xff, 0xff, 0xff]);
    inputs.push((
        "a ClientHello with a handshake length past its record",
        bad_len,
    ));
    let mut bad_sid = ch.clone();
    bad_sid[43] = 0xff;
    inputs.push(("a ClientHello with session id length 255", bad_sid));
    let mut flipped = ch.clone();
    flipped[50] ^= 0x80;
    inputs.push(("a ClientHello with a flipped session id bit", flipped));
    let mut two = ch.clone();
    two.extend_from_slice(&ch);
    inputs.push(("two ClientHellos", two));
    for (name, bytes) in &inputs {
        must_end(tp.sport, bytes, &format!("{server_imp:?}: {name}"), &logs);
    }
    // Plain HTTP reaches nginx, which says so.
    let mut s = TcpStream::connect(("127.0.0.1", tp.sport)).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: reality.test\r\n\r\n")
        .unwrap();
    let got =
        String::from_utf8_lossy(&read_until_idle(&mut s, Duration::from_secs(2))).into_owned();
    assert!(
        got.starts_with("HTTP/1.1 400") && got.contains("HTTPS port"),
        "{server_imp:?}: plain HTTP got {got:?}\n{}",
        logs()
    );
    served_after(&tp, &format!("{server_imp:?}: garbage"));
}

#[test]
fn garbage_ends_promptly_on_xray() {
    garbage(Xray);
}

#[test]
fn garbage_ends_promptly_on_ferry() {
    garbage(Ferry);
}

/// Every client byte in its own TCP segment up to and past the ClientHello: a good client is
/// still recognised and served, and curl still gets the page.
fn one_byte_writes(server_imp: Imp) {
    let tp = Tapped::new(server_imp, 4096);
    let entry = free_port();
    let echo = echo_server();
    let c = client(Xray, Proto::Vless, entry, tp.front.port, echo.port(), GOOD);
    let t = Instant::now();
    let s = hello(entry, Duration::from_secs(15)).unwrap_or_else(|e| {
        panic!(
            "{server_imp:?}: a trickled good client is not served: {e}\n{}",
            tp.logs(&[&c])
        )
    });
    eprintln!(
        "{server_imp:?}: trickled good client served after {:?}",
        t.elapsed()
    );
    let data = pattern(4 << 20, 79);
    assert!(
        echo_through(s, &data) == data,
        "{server_imp:?}: bytes differ"
    );
    let (page, certs, err) = curl(tp.front.port, SNI, &["--http1.1"]);
    assert_eq!(
        page.trim(),
        PAGE,
        "{server_imp:?}: trickled curl: {err}\n{}",
        tp.logs(&[&c])
    );
    assert_eq!(certs, vec![tp.target.cert_der.clone()]);
}

#[test]
fn one_byte_segments_are_served_by_xray() {
    one_byte_writes(Xray);
}

#[test]
fn one_byte_segments_are_served_by_ferry() {
    one_byte_writes(Ferry);
}

/// The target is down: clients and probers are closed promptly; once it is up, both are
/// served.
fn target_down(server_imp: Imp) {
    let mut target = Target::new(None, false);
    let sport = free_port();
    let s = server(
        server_imp,
        Proto::Vless,
        sport,
        ([127, 0, 0, 1], target.port).into(),
    );
    let entry = free_port();
    let echo = echo_server();
    let c = client(Xray, Proto::Vless, entry, sport, echo.port(), GOOD);
    let logs = || logs(&[&s, &c]);
    match hello(entry, GIVE_UP) {
        Ok(_) => panic!("{server_imp:?}: served with the target down\n{}", logs()),
        Err(e) => assert!(
            !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
            "{server_imp:?}: a client hangs with the target down\n{}",
            logs()
        ),
    }
    let ch = xray_client_hello();
    must_end(
        sport,
        &ch,
        &format!("{server_imp:?}: ClientHello, target down"),
        &logs,
    );
    let mut p = TcpStream::connect(("127.0.0.1", sport)).unwrap();
    p.write_all(&ch).unwrap();
    assert!(
        ends_within(&mut p, PROMPT).is_ok(),
        "{server_imp:?}: a prober hangs (no half-close)\n{}",
        logs()
    );
    let t = Instant::now();
    let (page, _, _) = curl(sport, SNI, &[]);
    assert!(
        page.is_empty() && t.elapsed() < PROMPT,
        "{server_imp:?}: curl {page:?} after {:?}",
        t.elapsed()
    );
    target.start();
    let (page, certs, err) = curl(sport, SNI, &[]);
    assert_eq!(
        page.trim(),
        PAGE,
        "{server_imp:?}: once the target is up: {err}\n{}",
        logs()
    );
    assert_eq!(certs, vec![target.cert_der.clone()]);
    let s2 = hello(entry, Duration::from_secs(15)).unwrap_or_else(|e| {
        panic!(
            "{server_imp:?}: not served once the target is up: {e}\n{}",
            logs()
        )
    });
    let data = pattern(4 << 20, 80);
    assert!(echo_through(s2, &data) == data);
}

#[test]
fn a_target_that_is_down_closes_promptly_on_xray() {
    target_down(Xray);
}

#[test]
fn a_target_that_is_down_closes_promptly_on_ferry() {
    target_down(Ferry);
}
