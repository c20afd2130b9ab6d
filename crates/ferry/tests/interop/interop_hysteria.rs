//! Hysteria 2 (Xray's `hysteria` protocol over `network: "hysteria"`, QUIC + HTTP/3 auth, quic.md
//! §1-§2) against the real peers: Xray v26.3.27 and sing-box v1.14.1 (built `with_quic`), each
//! as client and as server against Ferry, and Ferry to Ferry. Every chain is
//! SOCKS5 entry (Xray/Ferry `socks`, sing-box `mixed`) -> hysteria client -> QUIC ->
//! hysteria server -> freedom/direct -> loopback echo: TCP byte-exact both ways (4 MB at once
//! each way) and UDP datagrams byte-exact through the SOCKS5 UDP relay.
//!
//! Ferry reads the Xray configs as they are (quic.md §2.2): Salamander in
//! `streamSettings.finalmask.udp`, congestion and Brutal rates in `finalmask.quicParams`; only
//! its freedom gets a `finalRules` allow for loopback (hysteria users may not reach private
//! ranges by default). An ECDSA P-256 certificate for "hy.test" is made per chain with
//! `openssl` (Ed25519 would trip sing-box 1.14's Chrome-parrot client); Xray and Ferry pin it
//! (`pinnedPeerCertSha256`), sing-box trusts it as its only root.
//!
//! UDP sizes: Xray v26.3.27 corrupts every UDP message it has to reassemble from fragments
//! (quic.md §1.7, fixed in v26.5.3), so chains with an Xray end keep payloads to what both
//! ends send as one QUIC datagram: quic-go fits 1197 bytes of message in one, quinn (Ferry)
//! 1191 (its bound for the frame header is 9 bytes), so 1160 bytes of payload with the 24-byte
//! header here; sing-box and Ferry chains go to 4000.
//!
//! The `ref_*` tests run the same peer configs peer to peer, without Ferry: when a Ferry case
//! fails and its `ref_` case passes, Ferry is at fault, not the peer's config.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::common;
use crate::proxy_clients;
use common::*;
use proxy_clients::{socks5_connect, socks5_udp, udp_packet, Target};
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub(crate) const AUTH: &str = "hy-pass-1";
const OBFS: &str = "obfs-pass";
const SNI: &str = "hy.test";
/// Each way, written while the echo is read back.
const TCP_LEN: usize = 4 << 20;
/// Payloads an Xray v26.3.27 end carries intact (one datagram each, no reassembly).
const XRAY_UDP: &[usize] = &[1, 64, 512, 1000, 1100, 1160];
/// Past one datagram: fragmented by every sender, reassembled by sing-box and Ferry.
const FULL_UDP: &[usize] = &[1, 100, 1000, 1170, 1197, 1198, 1200, 1500, 2000, 3000, 4000];
/// Both sides of the boundaries: a message of 1197 bytes per datagram (24-byte header for
/// "127.0.0.1:port" here, so 1173 payload bytes per fragment for a Go sender), 2 and 3
/// fragments, and Ferry's own (lower while quinn's path MTU is still 1200) somewhere below.
const FRAG_UDP: &[usize] = &[
    1, 2, 64, 500, 1000, 1150, 1173, 1174, 1196, 1197, 1198, 1199, 1200, 1500, 2000, 2346, 2347,
    3000, 3519, 3520, 3999, 4000,
];

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Imp {
    Ferry,
    Xray,
    SingBox,
}
use Imp::*;

/// What `finalmask` carries: Salamander on or off, and the congestion control.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Mask {
    salamander: bool,
    congestion: &'static str,
}

/// quic.md §2.2 as verified: Salamander + Brutal (server up 200/down 100, client up 50/down 100).
pub(crate) const SALAMANDER_BRUTAL: Mask = Mask {
    salamander: true,
    congestion: "brutal",
};
const PLAIN_BBR: Mask = Mask {
    salamander: false,
    congestion: "bbr",
};

// ---------------------------------------------------------------------------------------
// Certificate

/// A self-signed ECDSA P-256 certificate for "hy.test" and its pin, made with `openssl`.
pub(crate) struct Certs {
    _dir: tempdir::Dir,
    pub(crate) cert: String,
    pub(crate) key: String,
    /// Lowercase hex SHA-256 of the DER certificate (what `sha256sum` prints).
    pub(crate) pin: String,
}

fn openssl(args: &[&str], stdin: Option<&Path>) -> std::process::Output {
    let mut cmd = Command::new("openssl");
    cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    match stdin {
        Some(f) => cmd.stdin(std::fs::File::open(f).unwrap()),
        None => cmd.stdin(Stdio::null()),
    };
    cmd.output()
        .unwrap_or_else(|e| panic!("openssl: {e} (install it: scripts/peers.sh debian)"))
}

pub(crate) fn certs() -> Certs {
    let dir = tempdir::Dir::new("hy-certs");
    let cert = dir.path().join("cert.pem").to_str().unwrap().to_string();
    let key = dir.path().join("key.pem").to_str().unwrap().to_string();
    let subj = format!("/CN={SNI}");
    let san = format!("subjectAltName=DNS:{SNI}");
    let out = openssl(
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &cert,
            "-days",
            "30",
            "-subj",
            &subj,
            "-addext",
            &san,
        ],
        None,
    );
    assert!(
        out.status.success(),
        "openssl req: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // `openssl x509 -in cert.pem -outform DER | sha256sum`, in two steps.
    let der = dir.path().join("cert.der");
    let der_s = der.to_str().unwrap();
    let out = openssl(
        &["x509", "-in", &cert, "-outform", "DER", "-out", der_s],
        None,
    );
    assert!(out.status.success());
    let out = openssl(&["dgst", "-sha256", "-r"], Some(&der));
    assert!(out.status.success());
    let pin = String::from_utf8(out.stdout).unwrap();
    let pin = pin.split_whitespace().next().unwrap().to_ascii_lowercase();
    assert_eq!(pin.len(), 64, "{pin}");
    Certs {
        _dir: dir,
        cert,
        key,
        pin,
    }
}

// ---------------------------------------------------------------------------------------
// Configs. Ferry and Xray read the very same Xray JSON (only freedom differs, below).

/// Xray v26.3.27's freedom has no private-address block yet; the allow documents intent.
pub(crate) const XRAY_FREEDOM: &str = r#"{"tag":"direct","protocol":"freedom","settings":{"finalRules":[{"action":"allow","ip":["127.0.0.0/8"]}]}}"#;
pub(crate) const FREEDOM: &str = r#"{"tag":"direct","protocol":"freedom","settings":{"finalRules":[{"action":"allow","ip":["127.0.0.0/8","::1"]}]}}"#;

pub(crate) fn config(inbounds: &[String], outbound: &str) -> String {
    format!(
        r#"{{"log":{{"loglevel":"debug"}},"inbounds":[{}],"outbounds":[{outbound}]}}"#,
        inbounds.join(",")
    )
}

pub(crate) fn socks_in(port: u16) -> String {
    format!(
        r#"{{"tag":"socks-in","listen":"127.0.0.1","port":{port},"protocol":"socks",
            "settings":{{"auth":"noauth","udp":true,"ip":"127.0.0.1"}}}}"#
    )
}

/// `streamSettings.finalmask`; `rates` are the quicParams Brutal members (and more) of the side.
fn finalmask(mask: Mask, rates: &str) -> String {
    let udp = if mask.salamander {
        format!(r#""udp":[{{"type":"salamander","settings":{{"password":"{OBFS}"}}}}],"#)
    } else {
        String::new()
    };
    format!(
        r#"{{{udp}"quicParams":{{"congestion":"{}",{rates}}}}}"#,
        mask.congestion
    )
}

/// The hysteria inbound of quic.md §2.2 (v26.3.27 spellings: `clients`, `network`).
pub(crate) fn hy_in(port: u16, c: &Certs, mask: Mask) -> String {
    format!(
        r#"{{"tag":"hy-in","listen":"127.0.0.1","port":{port},"protocol":"hysteria",
            "settings":{{"version":2,"clients":[{{"auth":"{AUTH}","email":"u1@ferry.test","level":0}}]}},
            "streamSettings":{{"network":"hysteria","security":"tls",
              "tlsSettings":{{"alpn":["h3"],
                "certificates":[{{"certificateFile":"{}","keyFile":"{}"}}]}},
              "hysteriaSettings":{{"version":2,"udpIdleTimeout":60,
                "masquerade":{{"type":"string","content":"hello","headers":{{"server":"nginx"}},"statusCode":200}}}},
              "finalmask":{}}}}}"#,
        c.cert,
        c.key,
        finalmask(mask, r#""brutalUp":"200 mbps","brutalDown":"100 mbps""#)
    )
}

/// The hysteria outbound of quic.md §2.2: the server's certificate pinned, SNI "hy.test".
pub(crate) fn hy_out(server: u16, pin: &str, mask: Mask) -> String {
    format!(
        r#"{{"tag":"hy-out","protocol":"hysteria",
            "settings":{{"version":2,"address":"127.0.0.1","port":{server}}},
            "streamSettings":{{"network":"hysteria","security":"tls",
              "tlsSettings":{{"serverName":"{SNI}","alpn":["h3"],"pinnedPeerCertSha256":"{pin}"}},
              "hysteriaSettings":{{"version":2,"auth":"{AUTH}"}},
              "finalmask":{}}}}}"#,
        finalmask(
            mask,
            r#""brutalUp":"50 mbps","brutalDown":"100 mbps","keepAlivePeriod":10"#
        )
    )
}

/// sing-box's hysteria2 inbound (quic.md §2.5): Salamander, Brutal up 200 / down 100.
fn singbox_server(port: u16, c: &Certs) -> String {
    format!(
        r#"{{"log":{{"level":"info"}},
            "inbounds":[{{"type":"hysteria2","tag":"hy2-in","listen":"127.0.0.1","listen_port":{port},
              "up_mbps":200,"down_mbps":100,
              "obfs":{{"type":"salamander","password":"{OBFS}"}},
              "users":[{{"name":"u1","password":"{AUTH}"}}],
              "ignore_client_bandwidth":false,
              "masquerade":{{"type":"string","status_code":200,"headers":{{"server":"nginx"}},"content":"hello"}},
              "tls":{{"enabled":true,"alpn":["h3"],"certificate_path":"{}","key_path":"{}"}}}}],
            "outbounds":[{{"type":"direct","tag":"direct"}}]}}"#,
        c.cert, c.key
    )
}

/// sing-box's hysteria2 outbound behind a `mixed` (SOCKS5 + HTTP) inbound; it verifies the
/// certificate with the file as its only root and "hy.test" as the name.
fn singbox_client(entry: u16, server: u16, c: &Certs) -> String {
    format!(
        r#"{{"log":{{"level":"info"}},
            "inbounds":[{{"type":"mixed","tag":"mixed-in","listen":"127.0.0.1","listen_port":{entry}}}],
            "outbounds":[{{"type":"hysteria2","tag":"hy2-out","server":"127.0.0.1","server_port":{server},
              "up_mbps":50,"down_mbps":100,
              "obfs":{{"type":"salamander","password":"{OBFS}"}},
              "password":"{AUTH}",
              "tls":{{"enabled":true,"server_name":"{SNI}","alpn":["h3"],"certificate_path":"{}"}}}}]}}"#,
        c.cert
    )
}

// ---------------------------------------------------------------------------------------
// Processes

/// Whether some socket is bound to UDP `port` (read from /proc/net/udp{,6}: a hysteria server
/// listens on UDP only, and a probe datagram would be an Initial it has to discard). `None`
/// without /proc.
fn udp_bound_in_proc(port: u16) -> Option<bool> {
    let mut seen = false;
    for f in ["/proc/net/udp", "/proc/net/udp6"] {
        let Ok(t) = std::fs::read_to_string(f) else {
            continue;
        };
        seen = true;
        for line in t.lines().skip(1) {
            let p = line
                .split_whitespace()
                .nth(1)
                .and_then(|local| local.rsplit_once(':'))
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            if p == Some(port) {
                return Some(true);
            }
        }
    }
    seen.then_some(false)
}

/// Waits (up to 20 s) until `p` has bound UDP `port`, failing at once with its output when it
/// exits first. Without /proc it only waits a second: `first_contact` retries anyway.
pub(crate) fn udp_up(mut p: Proc, port: u16) -> Proc {
    let t = Instant::now();
    loop {
        match udp_bound_in_proc(port) {
            Some(true) => return p,
            None if t.elapsed() > Duration::from_secs(1) => return p,
            _ => {}
        }
        if let Some(st) = p.child.try_wait().unwrap() {
            panic!(
                "{} exited ({st}) before binding UDP {port}\n{}",
                p.name,
                p.output()
            );
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "{} never bound UDP {port}\n{}",
            p.name,
            p.output()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn spawn(imp: Imp, cfg: &str) -> Proc {
    match imp {
        Ferry => ferry(cfg, &[]),
        Xray => spawn_with_config(&peer("xray"), "xray", cfg, &["run", "-c", "{config}"]),
        SingBox => spawn_with_config(
            &peer("sing-box"),
            "sing-box",
            cfg,
            &["run", "-c", "{config}"],
        ),
    }
}

/// Entry (SOCKS5 on the client) -> hysteria client -> hysteria server -> direct -> loopback.
struct Chain {
    entry: u16,
    /// Server first. Declared before the certificate: the processes end before its files go.
    procs: Vec<Proc>,
    _certs: Certs,
}

impl Chain {
    /// sing-box ends always use Salamander + Brutal (the §2.5 shapes): `mask` must say so.
    fn new(client: Imp, server: Imp, mask: Mask) -> Chain {
        assert!(
            mask == SALAMANDER_BRUTAL || (client != SingBox && server != SingBox),
            "the sing-box configs here are Salamander + Brutal only"
        );
        let c = certs();
        let (sport, entry) = (free_port(), free_port());
        let server_cfg = match server {
            Ferry => config(&[hy_in(sport, &c, mask)], FREEDOM),
            Xray => config(&[hy_in(sport, &c, mask)], XRAY_FREEDOM),
            SingBox => singbox_server(sport, &c),
        };
        let s = udp_up(spawn(server, &server_cfg), sport);
        let client_cfg = match client {
            Ferry | Xray => config(&[socks_in(entry)], &hy_out(sport, &c.pin, mask)),
            SingBox => singbox_client(entry, sport, &c),
        };
        let cl = up(spawn(client, &client_cfg), &[entry]);
        let chain = Chain {
            entry,
            procs: vec![s, cl],
            _certs: c,
        };
        chain.first_contact();
        chain
    }

    fn logs(&self) -> String {
        let logs: Vec<String> = self.procs.iter().map(|p| p.output()).collect();
        logs.join("\n")
    }

    /// The first proxied connection dials QUIC and authenticates: retried for up to 10 s with a
    /// 16-byte echo, so a server that bound its socket a moment before it serves does not fail
    /// the test (and a missing /proc costs nothing).
    fn first_contact(&self) {
        let echo = echo_server();
        let t = Instant::now();
        let mut last = String::new();
        while t.elapsed() < Duration::from_secs(10) {
            let attempt = socks5_connect(self.entry, None, Target::Addr(echo)).and_then(|mut s| {
                s.set_read_timeout(Some(Duration::from_secs(3)))?;
                s.write_all(b"hysteria, hello!")?;
                let mut b = [0u8; 16];
                s.read_exact(&mut b)?;
                Ok(b)
            });
            match attempt {
                Ok(b) if &b == b"hysteria, hello!" => return,
                Ok(b) => panic!("first echo came back as {b:02x?}\n{}", self.logs()),
                Err(e) => last = e.to_string(),
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!(
            "no TCP echo through the chain within 10 s ({last})\n{}",
            self.logs()
        );
    }

    /// TCP_LEN bytes through a SOCKS5 CONNECT to a loopback echo, byte-exact.
    fn tcp_echo(&self, seed: u64) {
        let echo = echo_server();
        let s = socks5_connect(self.entry, None, Target::Addr(echo))
            .unwrap_or_else(|e| panic!("SOCKS5 CONNECT: {e}\n{}", self.logs()));
        let data = pattern(TCP_LEN, seed);
        let got = try_echo_through(s, &data)
            .unwrap_or_else(|e| panic!("echo of {TCP_LEN} bytes: {e}\n{}", self.logs()));
        if got != data {
            let pos = got.iter().zip(&data).position(|(a, b)| a != b);
            panic!("TCP echo differs at {pos:?}\n{}", self.logs());
        }
    }

    /// One datagram of each size through one SOCKS5 UDP association (one hysteria UDP
    /// session) to a loopback echo, each answered byte-exact; up to 4 sends per size.
    fn udp_echo(&self, sizes: &[usize], seed: u64) {
        let target = udp_echo_server();
        let (_ctrl, relay, u) = socks5_udp(self.entry, None);
        u.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut sent: Vec<Vec<u8>> = Vec::new();
        let mut buf = vec![0u8; 65536];
        for (i, &len) in sizes.iter().enumerate() {
            let msg = pattern(len, seed + i as u64);
            let mut ok = false;
            'tries: for _ in 0..4 {
                u.send_to(&udp_packet(target, &msg), relay).unwrap();
                while let Ok((n, _)) = u.recv_from(&mut buf) {
                    let got = socks_udp_payload(&buf[..n]);
                    if got == &msg[..] {
                        ok = true;
                        break 'tries;
                    }
                    // A late answer to an earlier size's resend.
                    if sent.iter().any(|m| m[..] == *got) {
                        continue;
                    }
                    let pos = got.iter().zip(&msg).position(|(a, b)| a != b);
                    panic!(
                        "UDP payload of {len} bytes came back as {} bytes, first difference at \
                         {pos:?}\n{}",
                        got.len(),
                        self.logs()
                    );
                }
            }
            assert!(
                ok,
                "UDP payload of {len} bytes lost (4 sends)\n{}",
                self.logs()
            );
            sent.push(msg);
        }
    }
}

/// The data of a SOCKS5 UDP datagram (`RSV RSV FRAG ATYP ADDR PORT DATA`).
fn socks_udp_payload(d: &[u8]) -> &[u8] {
    let head = match d.get(3) {
        Some(1) => 10,
        Some(4) => 22,
        Some(3) => 7 + *d.get(4).unwrap_or(&0) as usize,
        _ => panic!("not a SOCKS5 UDP datagram: {d:02x?}"),
    };
    assert!(d.len() >= head, "short SOCKS5 UDP datagram: {d:02x?}");
    &d[head..]
}

fn run(client: Imp, server: Imp, mask: Mask, udp: &[usize]) {
    let chain = Chain::new(client, server, mask);
    chain.tcp_echo(0x4879 ^ ((client as u64) << 8) ^ server as u64);
    chain.udp_echo(udp, 0x5544 + client as u64 * 16 + server as u64);
    if mask == SALAMANDER_BRUTAL && client != SingBox && server != SingBox {
        // Brutal as both ends negotiated it (Xray's and Ferry's debug lines say it alike): the
        // client sends at its 50 mbps (under the server's 100 mbps down), the server at the
        // client's 100 mbps down (under its own 200 mbps up), in Xray's 1024-based units.
        let logs = chain.logs();
        for rate in [6_553_600, 13_107_200] {
            assert!(
                logs.contains(&format!("congestion brutal bytes per second {rate}")),
                "no Brutal at {rate} B/s:\n{logs}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// Tests

#[test]
fn xray_client_to_ferry_server() {
    run(Xray, Ferry, SALAMANDER_BRUTAL, XRAY_UDP);
}

#[test]
fn xray_client_to_ferry_server_plain() {
    run(Xray, Ferry, PLAIN_BBR, XRAY_UDP);
}

#[test]
fn ferry_client_to_xray_server() {
    run(Ferry, Xray, SALAMANDER_BRUTAL, XRAY_UDP);
}

#[test]
fn ferry_client_to_xray_server_plain() {
    run(Ferry, Xray, PLAIN_BBR, XRAY_UDP);
}

#[test]
fn singbox_client_to_ferry_server() {
    run(SingBox, Ferry, SALAMANDER_BRUTAL, FULL_UDP);
}

#[test]
fn ferry_client_to_singbox_server() {
    run(Ferry, SingBox, SALAMANDER_BRUTAL, FULL_UDP);
}

/// Fragmentation and reassembly on both of Ferry's ends, across every size boundary.
#[test]
fn ferry_to_ferry_udp_fragments() {
    let chain = Chain::new(Ferry, Ferry, SALAMANDER_BRUTAL);
    chain.udp_echo(FRAG_UDP, 0xf7a6);
    chain.tcp_echo(0xf7a7);
    let plain = Chain::new(Ferry, Ferry, PLAIN_BBR);
    plain.udp_echo(FRAG_UDP, 0xf7a8);
}

/// Calibration: the Xray configs above, Xray to Xray.
#[test]
fn ref_xray_hysteria_pair() {
    run(Xray, Xray, SALAMANDER_BRUTAL, XRAY_UDP);
    run(Xray, Xray, PLAIN_BBR, XRAY_UDP);
}

/// Calibration: the sing-box configs above, sing-box to sing-box, fragmented UDP included.
#[test]
fn ref_singbox_hysteria_pair() {
    run(SingBox, SingBox, SALAMANDER_BRUTAL, FULL_UDP);
}
