//! VLESS Encryption (`decryption` / `encryption`: `mlkem768x25519plus`) against the real
//! peers: Xray v26.3.27 as server and as client of Ferry, mihomo (v1.19.23) as a client of
//! Ferry. Each chain is entry (dokodemo-door / tunnel) -> client -> VLESS over VLESS
//! Encryption -> server -> freedom -> an echo in this test, two connections in a row (with
//! `0rtt` the second resumes the ticket of the first: a Ferry server's log says so).
//!
//! The keys come from Ferry's own generator (`ferry vlessenc`), so Xray also proves that
//! Ferry's ML-KEM-768 seeds and encapsulation keys are the ones FIPS 203 derives.
//! Cases: X25519 `native`, ML-KEM-768 `xorpub`, a two-key chain in `random` with custom
//! padding (Xray's example `1b`), over XHTTP, without tickets (`0s`), and XTLS Vision over
//! the encryption on a bare TCP stream (`native`: Ferry splices its writer's direction;
//! `random`: the header XOR stays, nothing is spliced).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::common;
use crate::interop_vision::{inner_server, tls_echo_through, Inner};
use common::*;

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

const ID: &str = "94864c32-f48b-47a9-9823-887b54413317";
const LEN: usize = 1 << 20;
const FREEDOM: &str =
    r#"{"protocol":"freedom","settings":{"finalRules":[{"action":"allow","ip":["127.0.0.0/8"]}]}}"#;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Imp {
    Ferry,
    Xray,
    Mihomo,
}
use Imp::*;

/// The last block (the key) of each string `ferry vlessenc` would print: X25519 server and
/// client, ML-KEM-768 server and client.
fn fresh_keys() -> [String; 4] {
    let [x, m] = ferry::transport::vlessenc::generate();
    let key = |s: &str| s.rsplit('.').next().unwrap().to_string();
    [key(&x.1), key(&x.2), key(&m.1), key(&m.2)]
}

/// A server's `decryption` and a client's `encryption`.
struct Strings {
    dec: String,
    enc: String,
}

/// `keys`: which keys chain (`x` X25519, `m` ML-KEM-768), in order.
fn strings(mode: &str, tickets: &str, rtt: &str, pad: (&str, &str), keys: &str) -> Strings {
    let [xs, xc, ms, mc] = fresh_keys();
    let (mut sk, mut ck) = (Vec::new(), Vec::new());
    for k in keys.chars() {
        match k {
            'x' => {
                sk.push(xs.clone());
                ck.push(xc.clone());
            }
            _ => {
                sk.push(ms.clone());
                ck.push(mc.clone());
            }
        }
    }
    let join = |p: &str, k: &[String]| match p {
        "" => k.join("."),
        p => format!("{p}.{}", k.join(".")),
    };
    Strings {
        dec: format!("mlkem768x25519plus.{mode}.{tickets}.{}", join(pad.0, &sk)),
        enc: format!("mlkem768x25519plus.{mode}.{rtt}.{}", join(pad.1, &ck)),
    }
}

fn stream(network: &str) -> String {
    match network {
        "xhttp" => r#"{"network":"xhttp","xhttpSettings":{"path":"/venc"}}"#.into(),
        _ => r#"{"network":"raw","security":"none"}"#.into(),
    }
}

fn server_config(port: u16, dec: &str, flow: &str, network: &str) -> String {
    format!(
        r#"{{"log":{{"loglevel":"debug"}},
            "inbounds":[{{"listen":"127.0.0.1","port":{port},"protocol":"vless",
              "settings":{{"clients":[{{"id":"{ID}","flow":"{flow}","email":"v@t"}}],
                           "decryption":"{dec}"}},
              "streamSettings":{}}}],
            "outbounds":[{FREEDOM}]}}"#,
        stream(network)
    )
}

fn client_config(
    entry: u16,
    server: u16,
    enc: &str,
    flow: &str,
    network: &str,
    target: SocketAddr,
) -> String {
    format!(
        r#"{{"log":{{"loglevel":"debug"}},
            "inbounds":[{{"listen":"127.0.0.1","port":{entry},"protocol":"dokodemo-door",
                "settings":{{"address":"127.0.0.1","port":{},"network":"tcp"}}}}],
            "outbounds":[{{"protocol":"vless","settings":{{"address":"127.0.0.1","port":{server},
                "id":"{ID}","flow":"{flow}","encryption":"{enc}"}},
              "streamSettings":{}}}]}}"#,
        target.port(),
        stream(network)
    )
}

fn mihomo_config(entry: u16, server: u16, enc: &str, flow: &str, target: SocketAddr) -> String {
    let flow = match flow {
        "" => String::new(),
        f => format!("    flow: {f}\n"),
    };
    format!(
        "log-level: debug\n\
         listeners:\n  - name: in\n    type: tunnel\n    port: {entry}\n    listen: 127.0.0.1\n\
         \x20   network: [tcp]\n    target: 127.0.0.1:{}\n\
         proxies:\n  - name: v\n    type: vless\n    server: 127.0.0.1\n    port: {server}\n\
         \x20   uuid: {ID}\n    network: tcp\n    udp: true\n    encryption: \"{enc}\"\n{flow}\
         rules:\n  - MATCH,v\n",
        target.port()
    )
}

fn spawn(imp: Imp, cfg: &str, wait: u16) -> Proc {
    let p = match imp {
        Ferry => return ferry(cfg, &[wait]),
        Xray => spawn_with_config(&peer("xray"), "xray", cfg, &["run", "-c", "{config}"]),
        Mihomo => {
            let home = tempdir::Dir::new("mihomo-home");
            let home_path = home.path().to_str().unwrap().to_string();
            std::mem::forget(home);
            spawn_with_config(
                &peer("mihomo-xhttp"),
                "mihomo",
                cfg,
                &["-d", &home_path, "-f", "{config}"],
            )
        }
    };
    let p = up(p, &[wait]);
    if imp == Mihomo {
        // mihomo listens before the rest of its config applies.
        let t = Instant::now();
        while !p.output().contains("Start initial compatible provider") {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "mihomo did not start\n{}",
                p.output()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        // Its tunnel takes connections a moment before its proxies are in place (one in
        // between is closed at once), as interop_xhttp.rs found.
        std::thread::sleep(Duration::from_millis(500));
    }
    p
}

struct Chain {
    entry: u16,
    server: Proc,
    client: Proc,
}

impl Chain {
    fn logs(&self) -> String {
        format!("{}\n{}", self.server.output(), self.client.output())
    }
}

fn chain(
    client: Imp,
    server: Imp,
    s: &Strings,
    flow: &str,
    network: &str,
    target: SocketAddr,
) -> Chain {
    let sport = free_port();
    let server_p = spawn(server, &server_config(sport, &s.dec, flow, network), sport);
    let entry = free_port();
    let ccfg = match client {
        Mihomo => mihomo_config(entry, sport, &s.enc, flow, target),
        _ => client_config(entry, sport, &s.enc, flow, network, target),
    };
    let client_p = spawn(client, &ccfg, entry);
    Chain {
        entry,
        server: server_p,
        client: client_p,
    }
}

/// How many times a Ferry server's log says it resumed a 0-RTT ticket / ran a 1-RTT handshake.
fn handshakes(p: &Proc) -> (usize, usize) {
    let out = p.output();
    (
        out.matches("vless encryption: 0-RTT").count(),
        out.matches("vless encryption: 1-RTT").count(),
    )
}

/// Two echoes of [`LEN`] bytes, one connection after the other; with a Ferry server, checks
/// that the second resumed when `resumes`.
fn case(client: Imp, server: Imp, s: Strings, network: &str, resumes: bool) {
    let target = echo_server();
    let ch = chain(client, server, &s, "", network, target);
    let what = format!(
        "{client:?} -> {server:?} ({network}, {} / {})",
        short(&s.dec),
        short(&s.enc)
    );
    for i in 0..2 {
        let data = pattern(LEN, 0x5e1c + i);
        let sock = TcpStream::connect(("127.0.0.1", ch.entry)).unwrap();
        let got = try_echo_through(sock, &data)
            .unwrap_or_else(|e| panic!("{what}: connection {i}: {e}\n{}", ch.logs()));
        assert!(
            got == data,
            "{what}: connection {i}: bytes differ\n{}",
            ch.logs()
        );
    }
    if server == Ferry {
        let want = if resumes { (1, 1) } else { (0, 2) };
        let t = Instant::now();
        while handshakes(&ch.server) != want && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(
            handshakes(&ch.server),
            want,
            "{what}: (0-RTT, 1-RTT)\n{}",
            ch.logs()
        );
    }
}

fn short(s: &str) -> String {
    s.split('.').take(3).collect::<Vec<_>>().join(".")
}

fn native() -> Strings {
    strings("native", "600s", "0rtt", ("", ""), "x")
}
fn mlkem_xorpub() -> Strings {
    strings("xorpub", "300-600s", "0rtt", ("", ""), "m")
}
/// Xray's example `1b`: `random`, a ticket window, padding of its own on each side, two keys.
fn chain_random() -> Strings {
    strings(
        "random",
        "300-600s",
        "0rtt",
        ("100-200-800.50-10-50.100-0-400", "100-64-256"),
        "xm",
    )
}

#[test]
fn ferry_to_xray_x25519_native() {
    case(Ferry, Xray, native(), "raw", true);
}

#[test]
fn xray_to_ferry_x25519_native() {
    case(Xray, Ferry, native(), "raw", true);
}

#[test]
fn ferry_to_xray_mlkem_xorpub() {
    case(Ferry, Xray, mlkem_xorpub(), "raw", true);
}

#[test]
fn xray_to_ferry_mlkem_xorpub() {
    case(Xray, Ferry, mlkem_xorpub(), "raw", true);
}

#[test]
fn ferry_to_xray_chain_random_padding() {
    case(Ferry, Xray, chain_random(), "raw", true);
}

#[test]
fn xray_to_ferry_chain_random_padding() {
    case(Xray, Ferry, chain_random(), "raw", true);
}

#[test]
fn ferry_to_xray_random_over_xhttp() {
    case(Ferry, Xray, chain_random(), "xhttp", true);
}

#[test]
fn xray_to_ferry_random_over_xhttp() {
    case(Xray, Ferry, chain_random(), "xhttp", true);
}

#[test]
fn xray_to_ferry_without_tickets_always_1rtt() {
    case(
        Xray,
        Ferry,
        strings("native", "0s", "0rtt", ("", ""), "x"),
        "raw",
        false,
    );
}

#[test]
fn xray_to_ferry_1rtt_client_never_resumes() {
    case(
        Xray,
        Ferry,
        strings("xorpub", "600s", "1rtt", ("", ""), "x"),
        "raw",
        false,
    );
}

#[test]
fn mihomo_to_ferry_x25519_native() {
    case(Mihomo, Ferry, native(), "raw", true);
}

#[test]
fn mihomo_to_ferry_mlkem_random() {
    case(
        Mihomo,
        Ferry,
        strings("random", "600s", "0rtt", ("", ""), "m"),
        "raw",
        true,
    );
}

/// XTLS Vision over VLESS Encryption on a bare TCP stream, inner TLS 1.3: the bytes come back
/// and Ferry's writer direction is spliced in `native`, not in `random`.
fn vision_case(client: Imp, server: Imp, mode: &str) {
    let (target, cc) = inner_server(Inner::Tls13(16384));
    let s = strings(mode, "600s", "0rtt", ("", ""), "x");
    let ch = chain(client, server, &s, "xtls-rprx-vision", "raw", target);
    let what = format!("{client:?} -> {server:?} Vision over {mode}");
    let data = pattern(4 * LEN, 0x7154);
    let sock = TcpStream::connect(("127.0.0.1", ch.entry)).unwrap();
    let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        tls_echo_through(sock, cc.clone().unwrap(), &data, &mut || {})
    }))
    .unwrap_or_else(|_| panic!("{what}: transfer failed\n{}", ch.logs()));
    assert!(got == data, "{what}: bytes differ\n{}", ch.logs());
    let ferry_p = if server == Ferry {
        &ch.server
    } else {
        &ch.client
    };
    let t = Instant::now();
    let line = loop {
        let out = ferry_p.output();
        if let Some(l) = out.lines().find(|l| l.contains(" done: up ")) {
            break l.to_string();
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{what}: no relay line\n{}",
            ch.logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let flags = line
        .split("spliced ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_default()
        .to_string();
    let (up, down) = flags.split_once('/').unwrap_or_default();
    let ours = if server == Ferry { down } else { up };
    let want = (mode != "random").to_string();
    assert_eq!(ours, want, "{what}: Ferry's writer: {line}\n{}", ch.logs());
}

#[test]
fn ferry_to_xray_vision_native() {
    vision_case(Ferry, Xray, "native");
}

#[test]
fn xray_to_ferry_vision_native() {
    vision_case(Xray, Ferry, "native");
}

#[test]
fn ferry_to_xray_vision_random() {
    vision_case(Ferry, Xray, "random");
}

#[test]
fn xray_to_ferry_vision_random() {
    vision_case(Xray, Ferry, "random");
}

#[test]
fn mihomo_to_ferry_vision_native() {
    vision_case(Mihomo, Ferry, "native");
}
