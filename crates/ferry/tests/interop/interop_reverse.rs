//! VLESS Reverse and the legacy `reverse` object against Xray v26.3.27, in both roles. A
//! portal (the public side) gives a dokodemo-door entry whose connections it routes to its
//! reverse outbound; a bridge (which has no inbound at all: only its tunnel to the portal)
//! routes the sessions that come out of the tunnel to a freedom outbound that may reach the
//! loopback echo (a `finalRules` allow: the bridge's sessions reach nothing else). So the echo
//! is reached only through the tunnel the bridge opened. Each case moves a MiB each way twice,
//! and UDP once, byte-exact.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::common;
use common::*;

use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

const ID: &str = "ac04551d-6ebf-4685-86e2-17c12491f7f4";
const OTHER: &str = "94864c32-f48b-47a9-9823-887b54413317";
const DOMAIN: &str = "reverse.tunnel.internal";
const LEN: usize = 1 << 20;
/// The portal's own freedom (forward users of the portal reach the echo too).
const DIRECT: &str = r#"{"tag":"direct","protocol":"freedom","settings":{"finalRules":[{"action":"allow","ip":["127.0.0.0/8"]}]}}"#;
const LAN: &str = r#"{"tag":"lan","protocol":"freedom","settings":{"finalRules":[{"action":"allow","ip":["127.0.0.0/8"]}]}}"#;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Imp {
    Ferry,
    Xray,
}
use Imp::*;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Style {
    /// VLESS Reverse, plain VLESS.
    Vless,
    /// VLESS Reverse over VLESS Encryption with XTLS Vision (Xray's example 2a).
    VlessEncVision,
    /// The top-level `reverse` object.
    Legacy,
}
use Style::*;

/// `(decryption, encryption)` for a style.
fn enc(style: Style) -> (String, String) {
    match style {
        VlessEncVision => {
            let [x, _] = ferry::transport::vlessenc::generate();
            (x.1, x.2)
        }
        _ => ("none".into(), "none".into()),
    }
}

fn portal_config(
    style: Style,
    port: u16,
    entry: u16,
    tcp: SocketAddr,
    udp: SocketAddr,
    dec: &str,
) -> String {
    let flow = if style == VlessEncVision {
        "xtls-rprx-vision"
    } else {
        ""
    };
    let entries = format!(
        r#"{{"tag":"public","listen":"127.0.0.1","port":{entry},"protocol":"dokodemo-door",
            "settings":{{"address":"127.0.0.1","port":{},"network":"tcp"}}}},
           {{"tag":"public-udp","listen":"127.0.0.1","port":{entry},"protocol":"dokodemo-door",
            "settings":{{"address":"127.0.0.1","port":{},"network":"udp"}}}}"#,
        tcp.port(),
        udp.port()
    );
    match style {
        Legacy => format!(
            r#"{{"log":{{"loglevel":"debug"}},
              "reverse":{{"portals":[{{"tag":"portal","domain":"{DOMAIN}"}}]}},
              "inbounds":[{entries},
                {{"tag":"interconn","listen":"127.0.0.1","port":{port},"protocol":"vless",
                  "settings":{{"clients":[{{"id":"{OTHER}"}}],"decryption":"none"}}}}],
              "routing":{{"rules":[
                {{"inboundTag":["public","public-udp"],"outboundTag":"portal"}},
                {{"inboundTag":["interconn"],"domain":["full:{DOMAIN}"],"outboundTag":"portal"}}]}},
              "outbounds":[{{"protocol":"freedom"}}]}}"#
        ),
        _ => format!(
            r#"{{"log":{{"loglevel":"debug"}},
              "inbounds":[{entries},
                {{"tag":"vless-in","listen":"127.0.0.1","port":{port},"protocol":"vless",
                  "settings":{{"decryption":"{dec}","clients":[
                    {{"id":"{ID}","email":"bridge@home","flow":"{flow}","reverse":{{"tag":"r-out"}}}},
                    {{"id":"{OTHER}","flow":"{flow}"}}]}}}}],
              "routing":{{"rules":[{{"inboundTag":["public","public-udp"],"outboundTag":"r-out"}}]}},
              "outbounds":[{DIRECT}]}}"#
        ),
    }
}

fn bridge_config(style: Style, portal: u16, enc: &str) -> String {
    let flow = if style == VlessEncVision {
        "xtls-rprx-vision"
    } else {
        ""
    };
    match style {
        Legacy => format!(
            r#"{{"log":{{"loglevel":"debug"}},
              "reverse":{{"bridges":[{{"tag":"bridge","domain":"{DOMAIN}"}}]}},
              "routing":{{"rules":[
                {{"inboundTag":["bridge"],"domain":["full:{DOMAIN}"],"outboundTag":"interconn"}},
                {{"inboundTag":["bridge"],"outboundTag":"lan"}}]}},
              "outbounds":[{LAN},
                {{"tag":"interconn","protocol":"vless","settings":{{"address":"127.0.0.1",
                  "port":{portal},"id":"{OTHER}","encryption":"none"}}}}]}}"#
        ),
        _ => format!(
            r#"{{"log":{{"loglevel":"debug"}},
              "routing":{{"rules":[{{"inboundTag":["r-in"],"outboundTag":"lan"}}]}},
              "outbounds":[{{"tag":"direct","protocol":"freedom"}},{LAN},
                {{"tag":"to-portal","protocol":"vless","settings":{{"address":"127.0.0.1",
                  "port":{portal},"id":"{ID}","flow":"{flow}","encryption":"{enc}",
                  "reverse":{{"tag":"r-in","sniffing":{{"enabled":true,"destOverride":["http","tls"]}}}}}}}}]}}"#
        ),
    }
}

fn spawn(imp: Imp, cfg: &str, wait: &[u16]) -> Proc {
    match imp {
        Ferry => ferry(cfg, wait),
        Xray => up(
            spawn_with_config(&peer("xray"), "xray", cfg, &["run", "-c", "{config}"]),
            wait,
        ),
    }
}

struct Pair {
    entry: u16,
    portal: Proc,
    bridge: Proc,
}

impl Pair {
    fn logs(&self) -> String {
        format!(
            "--- portal\n{}\n--- bridge\n{}",
            self.portal.output(),
            self.bridge.output()
        )
    }
}

fn pair(portal: Imp, bridge: Imp, style: Style, tcp: SocketAddr, udp: SocketAddr) -> Pair {
    let (dec, enc) = enc(style);
    let (port, entry) = (free_port(), free_port());
    let portal = spawn(
        portal,
        &portal_config(style, port, entry, tcp, udp, &dec),
        &[port, entry],
    );
    let bridge = spawn(bridge, &bridge_config(style, port, &enc), &[]);
    Pair {
        entry,
        portal,
        bridge,
    }
}

/// An echo through the tunnel, retried while the bridge has not connected yet (it waits 2 s
/// after its start, then dials).
fn first_echo(p: &Pair) {
    let t = Instant::now();
    loop {
        let sock = TcpStream::connect(("127.0.0.1", p.entry))
            .unwrap_or_else(|e| panic!("entry: {e}\n{}", p.logs()));
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        match try_echo_through(sock, b"hello through the tunnel") {
            Ok(v) if v == b"hello through the tunnel" => return,
            _ if t.elapsed() < Duration::from_secs(15) => {
                std::thread::sleep(Duration::from_millis(300))
            }
            r => panic!("no echo through the tunnel: {r:?}\n{}", p.logs()),
        }
    }
}

fn case(portal: Imp, bridge: Imp, style: Style) -> Pair {
    let (tcp, udp) = (echo_server(), udp_echo_server());
    let p = pair(portal, bridge, style, tcp, udp);
    let what = format!("portal {portal:?}, bridge {bridge:?}, {style:?}");
    first_echo(&p);
    let mut sources = Vec::new();
    for i in 0..2 {
        let data = pattern(LEN, 0x7e5e + i);
        let sock = TcpStream::connect(("127.0.0.1", p.entry)).unwrap();
        sources.push(sock.local_addr().unwrap().port());
        let got = try_echo_through(sock, &data)
            .unwrap_or_else(|e| panic!("{what}: connection {i}: {e}\n{}", p.logs()));
        assert!(
            got == data,
            "{what}: connection {i}: bytes differ\n{}",
            p.logs()
        );
    }
    let u = UdpSocket::bind("127.0.0.1:0").unwrap();
    u.set_read_timeout(Some(Duration::from_millis(700)))
        .unwrap();
    let msg = pattern(1200, 0x0d9);
    let back = udp_ask(&u, ([127, 0, 0, 1], p.entry).into(), &msg, 10, |b| {
        b != msg.as_slice()
    });
    assert_eq!(
        back.as_deref(),
        Some(msg.as_slice()),
        "{what}: UDP\n{}",
        p.logs()
    );
    if bridge == Ferry && style != Legacy {
        // The portal sent each session's real source (Xray's reverse-mux extension), and the
        // bridge gave it to the session.
        let logs = p.bridge.output();
        for port in sources {
            assert!(
                logs.contains(&format!(
                    "from 127.0.0.1:{port} via the portal's 127.0.0.1:{}",
                    p.entry
                )),
                "{what}: the bridge did not see source port {port}\n{}",
                p.logs()
            );
        }
    }
    if portal == Ferry {
        assert!(
            p.portal.output().contains("a bridge connected"),
            "{}",
            p.logs()
        );
    }
    if bridge == Ferry {
        assert!(
            p.bridge.output().contains("reverse bridge: tunnel open"),
            "{}",
            p.logs()
        );
    }
    p
}

#[test]
fn ferry_portal_xray_bridge() {
    case(Ferry, Xray, Vless);
}

#[test]
fn xray_portal_ferry_bridge() {
    case(Xray, Ferry, Vless);
}

#[test]
fn ferry_portal_xray_bridge_encryption_vision() {
    case(Ferry, Xray, VlessEncVision);
}

#[test]
fn xray_portal_ferry_bridge_encryption_vision() {
    case(Xray, Ferry, VlessEncVision);
}

#[test]
fn ferry_portal_ferry_bridge() {
    case(Ferry, Ferry, VlessEncVision);
}

#[test]
fn legacy_ferry_portal_xray_bridge() {
    case(Ferry, Xray, Legacy);
}

#[test]
fn legacy_xray_portal_ferry_bridge() {
    case(Xray, Ferry, Legacy);
}

/// The tunnel comes back after the portal restarts (the bridge dials again every 2 s).
#[test]
fn the_tunnel_is_reopened_after_the_portal_restarts() {
    let (tcp, udp) = (echo_server(), udp_echo_server());
    let (port, entry) = (free_port(), free_port());
    let pcfg = portal_config(Vless, port, entry, tcp, udp, "none");
    let portal = spawn(Xray, &pcfg, &[port, entry]);
    let bridge = spawn(Ferry, &bridge_config(Vless, port, "none"), &[]);
    let mut p = Pair {
        entry,
        portal,
        bridge,
    };
    first_echo(&p);
    // The old portal goes first (its ports are the new one's).
    p.portal = spawn(Xray, "{}", &[]);
    std::thread::sleep(Duration::from_millis(500));
    p.portal = spawn(Xray, &pcfg, &[port, entry]);
    first_echo(&p);
    let opened = p
        .bridge
        .output()
        .matches("reverse bridge: tunnel open")
        .count();
    assert!(opened >= 2, "{}", p.logs());
}

/// A portal user with `reverse` may not proxy forward (Xray's "for safety reasons"), and a
/// user without it may not open a tunnel: Xray as the client of a Ferry portal.
#[test]
fn reverse_users_cannot_proxy_forward_nor_others_open_tunnels() {
    let (tcp, udp) = (echo_server(), udp_echo_server());
    let (port, entry) = (free_port(), free_port());
    let portal = spawn(
        Ferry,
        &portal_config(Vless, port, entry, tcp, udp, "none"),
        &[port, entry],
    );
    for (id, refused) in [(ID, true), (OTHER, false)] {
        let client_entry = free_port();
        let cfg = format!(
            r#"{{"inbounds":[{{"listen":"127.0.0.1","port":{client_entry},"protocol":"dokodemo-door",
                 "settings":{{"address":"127.0.0.1","port":{},"network":"tcp"}}}}],
               "outbounds":[{{"protocol":"vless","settings":{{"address":"127.0.0.1","port":{port},
                 "id":"{id}","encryption":"none"}}}}]}}"#,
            tcp.port()
        );
        let client = spawn(Xray, &cfg, &[client_entry]);
        let sock = TcpStream::connect(("127.0.0.1", client_entry)).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let r = try_echo_through(sock, b"forward?");
        if refused {
            assert!(r.map(|v| v.is_empty()).unwrap_or(true), "{id}: got an echo");
        } else {
            assert_eq!(r.unwrap(), b"forward?", "{id}\n{}", portal.output());
        }
        drop(client);
        let logs = portal.output();
        assert_eq!(
            logs.contains(&format!("user {id} is not allowed to use forward proxy")),
            refused,
            "{id}\n{logs}"
        );
    }
    // A bridge with a user that has no `reverse`: refused with Xray's words.
    let bridge = spawn(
        Xray,
        &bridge_config(Vless, port, "none").replace(ID, OTHER),
        &[],
    );
    let t = Instant::now();
    while !portal
        .output()
        .contains("is not allowed to create reverse proxy")
    {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{}\n{}",
            portal.output(),
            bridge.output()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// After 256 sessions the portal drains a tunnel (its control session says `DRAIN`) and the
/// bridge opens another one; sessions go on through the new one.
fn drains(portal: Imp, bridge: Imp) {
    let (tcp, udp) = (echo_server(), udp_echo_server());
    let p = pair(portal, bridge, Vless, tcp, udp);
    first_echo(&p);
    // 270 sessions, ten at a time (each ends with the mux's End frames, ~0.2 s).
    std::thread::scope(|sc| {
        for t in 0..10 {
            let p = &p;
            sc.spawn(move || {
                for i in 0..27 {
                    let sock = TcpStream::connect(("127.0.0.1", p.entry)).unwrap();
                    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                    let got = try_echo_through(sock, b"one of many")
                        .unwrap_or_else(|e| panic!("session {t}/{i}: {e}\n{}", p.logs()));
                    assert_eq!(got, b"one of many", "session {t}/{i}\n{}", p.logs());
                }
            });
        }
    });
    let tunnels = || match bridge {
        Ferry => p
            .bridge
            .output()
            .matches("reverse bridge: tunnel open")
            .count(),
        Xray => p.portal.output().matches("a bridge connected").count(),
    };
    let t = Instant::now();
    while tunnels() < 2 {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "no second tunnel\n{}",
            p.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    first_echo(&p);
}

#[test]
fn a_ferry_portal_drains_and_xray_opens_another_tunnel() {
    drains(Ferry, Xray);
}

#[test]
fn an_xray_portal_drains_and_ferry_opens_another_tunnel() {
    drains(Xray, Ferry);
}
