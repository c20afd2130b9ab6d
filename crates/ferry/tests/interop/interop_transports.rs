//! The WebSocket, HTTPUpgrade and gRPC transports, and raw TCP dressed as HTTP, against the real peers: Xray and sing-box (and
//! v2ray 4.34 for WebSocket), each as client and as server against Ferry, under VMess, VLESS
//! and Trojan, with TLS and without, with early data in the TLS cases where the server has it
//! (Xray's `?ed=2048`, sing-box's `max_early_data`; v2ray 4.34 predates early data). Every chain
//! is entry -> client -> transport -> server -> direct -> an echo server; 50 MB go through
//! byte-exact (`FERRY_TRANSPORT_BYTES` shrinks them).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::common;
use common::*;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

const ID: &str = "4c4f7e2a-7d7b-4b43-9d0f-6f1d8b3c2a10";
const PW: &str = "transport password";
const SNI: &str = "ferry.test";
const BIG: usize = 50 << 20;

fn big() -> usize {
    std::env::var("FERRY_TRANSPORT_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(BIG)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Imp {
    Ferry,
    Xray,
    SingBox,
    V2ray,
}
use Imp::*;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Proto {
    Vmess,
    Vless,
    Trojan,
}
use Proto::*;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Net {
    Ws,
    Hu,
    Grpc,
    /// gRPC with `multiMode` on the client (TunMulti).
    GrpcMulti,
    /// Raw TCP with `tcpSettings.header` `type: "http"`.
    HttpHeader,
}
use Net::*;

#[derive(Clone, Copy, Debug)]
struct Case {
    proto: Proto,
    net: Net,
    tls: bool,
    /// Early data (in the TLS cases).
    ed: bool,
}

struct Tls {
    cert: String,
    key: String,
    pin: String,
}

const XRAY_FREEDOM: &str =
    r#"{"protocol":"freedom","settings":{"finalRules":[{"action":"allow","ip":["127.0.0.0/8"]}]}}"#;
const FREEDOM: &str = r#"{"protocol":"freedom","settings":{"finalRules":[{"action":"allow","ip":["127.0.0.0/8","::1"]}]}}"#;

fn path(c: &Case) -> &'static str {
    match c.net {
        Ws => "/ray",
        Hu => "/hu",
        Grpc | GrpcMulti => "gsvc",
        HttpHeader => "/index.html",
    }
}

/// `streamSettings` in Xray's JSON (Ferry, Xray, v2ray).
fn xray_stream(imp: Imp, c: &Case, tls: &Tls, server: bool) -> String {
    let p = path(c);
    let net = match (c.net, imp, c.ed) {
        (Ws, V2ray, true) => format!(
            r#""network":"ws","wsSettings":{{"path":"{p}","maxEarlyData":2048,
                "earlyDataHeaderName":"Sec-WebSocket-Protocol"}}"#
        ),
        (Ws, _, true) => format!(r#""network":"ws","wsSettings":{{"path":"{p}?ed=2048"}}"#),
        (Ws, _, false) => format!(r#""network":"ws","wsSettings":{{"path":"{p}"}}"#),
        (Hu, _, true) => {
            format!(r#""network":"httpupgrade","httpupgradeSettings":{{"path":"{p}?ed=2048"}}"#)
        }
        (Hu, _, false) => {
            format!(r#""network":"httpupgrade","httpupgradeSettings":{{"path":"{p}"}}"#)
        }
        (HttpHeader, ..) => format!(
            r#""network":"tcp","tcpSettings":{{"header":{{"type":"http",
                "request":{{"path":["/", "{p}"],"headers":{{"Host":["www.example.com","cdn.example.com"]}}}},
                "response":{{"status":"200","reason":"OK","headers":{{"Content-Type":"video/mp4"}}}}}}}}"#
        ),
        (Grpc, ..) => format!(r#""network":"grpc","grpcSettings":{{"serviceName":"{p}"}}"#),
        (GrpcMulti, ..) => format!(
            r#""network":"grpc","grpcSettings":{{"serviceName":"{p}","multiMode":{}}}"#,
            !server
        ),
    };
    let sec = match (c.tls, server, imp) {
        (false, ..) => r#""security":"none""#.to_string(),
        (true, true, _) => format!(
            r#""security":"tls","tlsSettings":{{"certificates":[{{"certificateFile":"{}","keyFile":"{}"}}]}}"#,
            tls.cert, tls.key
        ),
        (true, false, V2ray) => {
            format!(
                r#""security":"tls","tlsSettings":{{"serverName":"{SNI}","allowInsecure":true}}"#
            )
        }
        (true, false, _) => format!(
            r#""security":"tls","tlsSettings":{{"serverName":"{SNI}","pinnedPeerCertSha256":"{}"}}"#,
            tls.pin
        ),
    };
    format!("{{{net},{sec}}}")
}

fn xray_server(imp: Imp, c: &Case, port: u16, tls: &Tls) -> String {
    let settings = match c.proto {
        Vmess => format!(r#"{{"clients":[{{"id":"{ID}","alterId":0,"email":"u@t"}}]}}"#),
        Vless => format!(r#"{{"clients":[{{"id":"{ID}","email":"u@t"}}],"decryption":"none"}}"#),
        Trojan => format!(r#"{{"clients":[{{"password":"{PW}","email":"u@t"}}]}}"#),
    };
    let proto = format!("{:?}", c.proto).to_lowercase();
    let freedom = if imp == Xray { XRAY_FREEDOM } else { FREEDOM };
    format!(
        r#"{{"log":{{"loglevel":"debug"}},
            "inbounds":[{{"listen":"127.0.0.1","port":{port},"protocol":"{proto}",
              "settings":{settings},"streamSettings":{}}}],
            "outbounds":[{freedom}]}}"#,
        xray_stream(imp, c, tls, true)
    )
}

fn xray_client(imp: Imp, c: &Case, server: u16, entry: u16, target: u16, tls: &Tls) -> String {
    let settings = match c.proto {
        Vmess => format!(
            r#"{{"vnext":[{{"address":"127.0.0.1","port":{server},
                "users":[{{"id":"{ID}","alterId":0,"security":"aes-128-gcm"}}]}}]}}"#
        ),
        Vless => format!(
            r#"{{"vnext":[{{"address":"127.0.0.1","port":{server},
                "users":[{{"id":"{ID}","encryption":"none"}}]}}]}}"#
        ),
        Trojan => format!(
            r#"{{"servers":[{{"address":"127.0.0.1","port":{server},"password":"{PW}"}}]}}"#
        ),
    };
    let proto = format!("{:?}", c.proto).to_lowercase();
    format!(
        r#"{{"log":{{"loglevel":"debug"}},
            "inbounds":[{{"listen":"127.0.0.1","port":{entry},"protocol":"dokodemo-door",
              "settings":{{"address":"127.0.0.1","port":{target},"network":"tcp"}}}}],
            "outbounds":[{{"protocol":"{proto}","settings":{settings},
              "streamSettings":{}}}]}}"#,
        xray_stream(imp, c, tls, false)
    )
}

fn singbox_transport(c: &Case) -> String {
    let p = path(c);
    match (c.net, c.ed) {
        (Ws, true) => format!(
            r#"{{"type":"ws","path":"{p}","max_early_data":2048,
                "early_data_header_name":"Sec-WebSocket-Protocol"}}"#
        ),
        (Ws, false) => format!(r#"{{"type":"ws","path":"{p}"}}"#),
        (Hu, _) => format!(r#"{{"type":"httpupgrade","path":"{p}"}}"#),
        // sing-box calls Tun only (its multi mode is not Xray's).
        (Grpc | GrpcMulti, _) => format!(r#"{{"type":"grpc","service_name":"{p}"}}"#),
        (HttpHeader, _) => unreachable!("sing-box has no HTTP header on raw TCP"),
    }
}

fn singbox_server(c: &Case, port: u16, tls: &Tls) -> String {
    let users = match c.proto {
        Vmess => format!(r#"[{{"name":"u","uuid":"{ID}","alterId":0}}]"#),
        Vless => format!(r#"[{{"name":"u","uuid":"{ID}"}}]"#),
        Trojan => format!(r#"[{{"name":"u","password":"{PW}"}}]"#),
    };
    let proto = format!("{:?}", c.proto).to_lowercase();
    let t = if c.tls {
        format!(
            r#","tls":{{"enabled":true,"certificate_path":"{}","key_path":"{}"}}"#,
            tls.cert, tls.key
        )
    } else {
        String::new()
    };
    format!(
        r#"{{"log":{{"level":"debug"}},
            "inbounds":[{{"type":"{proto}","listen":"127.0.0.1","listen_port":{port},
              "users":{users},"transport":{}{t}}}],
            "outbounds":[{{"type":"direct"}}]}}"#,
        singbox_transport(c)
    )
}

fn singbox_client(c: &Case, server: u16, entry: u16, target: u16, tls: &Tls) -> String {
    let cred = match c.proto {
        Vmess => format!(r#""uuid":"{ID}","security":"aes-128-gcm","alter_id":0"#),
        Vless => format!(r#""uuid":"{ID}""#),
        Trojan => format!(r#""password":"{PW}""#),
    };
    let proto = format!("{:?}", c.proto).to_lowercase();
    let t = if c.tls {
        format!(
            r#","tls":{{"enabled":true,"server_name":"{SNI}","certificate_path":"{}"}}"#,
            tls.cert
        )
    } else {
        String::new()
    };
    format!(
        r#"{{"log":{{"level":"debug"}},
            "inbounds":[{{"type":"direct","listen":"127.0.0.1","listen_port":{entry},
              "network":"tcp","override_address":"127.0.0.1","override_port":{target}}}],
            "outbounds":[{{"type":"{proto}","server":"127.0.0.1","server_port":{server},
              {cred},"transport":{}{t}}}]}}"#,
        singbox_transport(c)
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
        V2ray => spawn_with_config(&peer("v2ray"), "v2ray", cfg, &["-config", "{config}"]),
    };
    wait_listening(wait, &p);
    p
}

/// A TCP forwarder to `target` that holds every chunk for `delay` each way: a link with a
/// round trip, as any real one has. sing-box's HTTPUpgrade server answers 101 and only then
/// hijacks the connection from Go's http server, whose background read takes the first byte
/// a client sends within that window and keeps it in a buffer the hijack discards. Over a real
/// link the client's bytes arrive a round trip after the answer left; over bare loopback a
/// fast client (Ferry) hits the window.
fn delayed_forwarder(target: u16, delay: Duration) -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(c) = c else { continue };
            let Ok(s) = TcpStream::connect(("127.0.0.1", target)) else {
                continue;
            };
            for (mut from, mut to) in [(c.try_clone().unwrap(), s.try_clone().unwrap()), (s, c)] {
                let (tx, rx) = std::sync::mpsc::channel::<(std::time::Instant, Vec<u8>)>();
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 256 * 1024];
                    loop {
                        match from.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => {
                                let due = std::time::Instant::now() + delay;
                                if tx.send((due, buf[..n].to_vec())).is_err() {
                                    return;
                                }
                            }
                        }
                    }
                });
                std::thread::spawn(move || {
                    for (due, chunk) in rx {
                        std::thread::sleep(
                            due.saturating_duration_since(std::time::Instant::now()),
                        );
                        if to.write_all(&chunk).is_err() {
                            return;
                        }
                    }
                    let _ = to.shutdown(std::net::Shutdown::Write);
                });
            }
        }
    });
    port
}

fn case(client: Imp, server: Imp, c: Case) {
    let dir = tempdir::Dir::new("transports");
    let g = ferry::transport::tls::generate_self_signed(&[SNI.to_string()], 2).unwrap();
    let write = |name: &str, body: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, body).unwrap();
        p.to_str().unwrap().to_string()
    };
    let tls = Tls {
        cert: write("cert.pem", &g.cert_pem),
        key: write("key.pem", &g.key_pem),
        pin: g.pin.iter().map(|b| format!("{b:02x}")).collect(),
    };
    let echo = echo_server();
    let (sport, entry) = (free_port(), free_port());
    let scfg = match server {
        SingBox => singbox_server(&c, sport, &tls),
        _ => xray_server(server, &c, sport, &tls),
    };
    let sp = spawn(server, &scfg, sport);
    // The client dials the server through a link with a round trip where the server is
    // sing-box's HTTPUpgrade (see `delayed_forwarder`).
    let dial = if server == SingBox && c.net == Hu {
        delayed_forwarder(sport, Duration::from_millis(5))
    } else {
        sport
    };
    let ccfg = match client {
        SingBox => singbox_client(&c, dial, entry, echo.port(), &tls),
        _ => xray_client(client, &c, dial, entry, echo.port(), &tls),
    };
    let cp = spawn(client, &ccfg, entry);
    let what = format!("{client:?} -> {server:?}, {c:?}");
    let logs = || format!("--- server\n{}\n--- client\n{}", sp.output(), cp.output());
    let mut s = TcpStream::connect(("127.0.0.1", entry)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // A small first write: it is what rides as early data, and Xray's Trojan client fails on
    // a first payload above about 8 KiB (PEERS.md).
    s.write_all(b"hello").unwrap();
    let mut b = [0u8; 5];
    if let Err(e) = s.read_exact(&mut b) {
        panic!("{what}: no echo of the first bytes: {e}\n{}", logs());
    }
    assert_eq!(&b, b"hello");
    let len = big();
    let data = pattern(len, 0x7a5 ^ len as u64);
    let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| echo_through(s, &data)))
        .unwrap_or_else(|_| panic!("{what}: transfer failed\n{}", logs()));
    assert!(got == data, "{what}: bytes differ\n{}", logs());
    // A Ferry server knows the user and the path the connection came on.
    if server == Ferry {
        let out = sp.output();
        assert!(out.contains("email: u@t"), "{what}: {out}");
    }
}

macro_rules! cases {
    ($($name:ident: $client:expr, $server:expr, $proto:expr, $net:expr, $tls:expr;)*) => {
        $(
            #[test]
            fn $name() {
                // Early data where the server has it: v2ray 4.34 has none, and sing-box's
                // HTTPUpgrade server loses what a client sends before its answer (Go's http
                // server keeps it in a buffer the hijack drops).
                let ed = $tls
                    && matches!($net, Ws | Hu)
                    && $server != V2ray
                    && !($server == SingBox && $net == Hu);
                case($client, $server, Case { proto: $proto, net: $net, tls: $tls, ed });
            }
        )*
    };
}

cases! {
    ferry_to_xray_vmess_ws: Ferry, Xray, Vmess, Ws, false;
    ferry_to_xray_vmess_ws_tls_ed: Ferry, Xray, Vmess, Ws, true;
    ferry_to_xray_vless_ws: Ferry, Xray, Vless, Ws, false;
    ferry_to_xray_vless_ws_tls_ed: Ferry, Xray, Vless, Ws, true;
    ferry_to_xray_trojan_ws: Ferry, Xray, Trojan, Ws, false;
    ferry_to_xray_trojan_ws_tls_ed: Ferry, Xray, Trojan, Ws, true;
    ferry_to_xray_vmess_hu: Ferry, Xray, Vmess, Hu, false;
    ferry_to_xray_vmess_hu_tls_ed: Ferry, Xray, Vmess, Hu, true;
    ferry_to_xray_vless_hu: Ferry, Xray, Vless, Hu, false;
    ferry_to_xray_vless_hu_tls_ed: Ferry, Xray, Vless, Hu, true;
    ferry_to_xray_trojan_hu: Ferry, Xray, Trojan, Hu, false;
    ferry_to_xray_trojan_hu_tls_ed: Ferry, Xray, Trojan, Hu, true;
    xray_to_ferry_vmess_ws: Xray, Ferry, Vmess, Ws, false;
    xray_to_ferry_vmess_ws_tls_ed: Xray, Ferry, Vmess, Ws, true;
    xray_to_ferry_vless_ws: Xray, Ferry, Vless, Ws, false;
    xray_to_ferry_vless_ws_tls_ed: Xray, Ferry, Vless, Ws, true;
    xray_to_ferry_trojan_ws: Xray, Ferry, Trojan, Ws, false;
    xray_to_ferry_trojan_ws_tls_ed: Xray, Ferry, Trojan, Ws, true;
    xray_to_ferry_vmess_hu: Xray, Ferry, Vmess, Hu, false;
    xray_to_ferry_vmess_hu_tls_ed: Xray, Ferry, Vmess, Hu, true;
    xray_to_ferry_vless_hu: Xray, Ferry, Vless, Hu, false;
    xray_to_ferry_vless_hu_tls_ed: Xray, Ferry, Vless, Hu, true;
    xray_to_ferry_trojan_hu: Xray, Ferry, Trojan, Hu, false;
    xray_to_ferry_trojan_hu_tls_ed: Xray, Ferry, Trojan, Hu, true;
    ferry_to_singbox_vmess_ws: Ferry, SingBox, Vmess, Ws, false;
    ferry_to_singbox_vmess_ws_tls_ed: Ferry, SingBox, Vmess, Ws, true;
    ferry_to_singbox_vless_ws: Ferry, SingBox, Vless, Ws, false;
    ferry_to_singbox_vless_ws_tls_ed: Ferry, SingBox, Vless, Ws, true;
    ferry_to_singbox_trojan_ws: Ferry, SingBox, Trojan, Ws, false;
    ferry_to_singbox_trojan_ws_tls_ed: Ferry, SingBox, Trojan, Ws, true;
    ferry_to_singbox_vmess_hu: Ferry, SingBox, Vmess, Hu, false;
    ferry_to_singbox_vmess_hu_tls: Ferry, SingBox, Vmess, Hu, true;
    ferry_to_singbox_vless_hu: Ferry, SingBox, Vless, Hu, false;
    ferry_to_singbox_vless_hu_tls: Ferry, SingBox, Vless, Hu, true;
    ferry_to_singbox_trojan_hu: Ferry, SingBox, Trojan, Hu, false;
    ferry_to_singbox_trojan_hu_tls: Ferry, SingBox, Trojan, Hu, true;
    singbox_to_ferry_vmess_ws: SingBox, Ferry, Vmess, Ws, false;
    singbox_to_ferry_vmess_ws_tls_ed: SingBox, Ferry, Vmess, Ws, true;
    singbox_to_ferry_vless_ws: SingBox, Ferry, Vless, Ws, false;
    singbox_to_ferry_vless_ws_tls_ed: SingBox, Ferry, Vless, Ws, true;
    singbox_to_ferry_trojan_ws: SingBox, Ferry, Trojan, Ws, false;
    singbox_to_ferry_trojan_ws_tls_ed: SingBox, Ferry, Trojan, Ws, true;
    singbox_to_ferry_vmess_hu: SingBox, Ferry, Vmess, Hu, false;
    singbox_to_ferry_vmess_hu_tls: SingBox, Ferry, Vmess, Hu, true;
    singbox_to_ferry_vless_hu: SingBox, Ferry, Vless, Hu, false;
    singbox_to_ferry_vless_hu_tls: SingBox, Ferry, Vless, Hu, true;
    singbox_to_ferry_trojan_hu: SingBox, Ferry, Trojan, Hu, false;
    singbox_to_ferry_trojan_hu_tls: SingBox, Ferry, Trojan, Hu, true;
    ferry_to_v2ray_vmess_ws: Ferry, V2ray, Vmess, Ws, false;
    ferry_to_v2ray_vmess_ws_tls: Ferry, V2ray, Vmess, Ws, true;
    ferry_to_v2ray_vless_ws: Ferry, V2ray, Vless, Ws, false;
    ferry_to_v2ray_vless_ws_tls: Ferry, V2ray, Vless, Ws, true;
    ferry_to_v2ray_trojan_ws: Ferry, V2ray, Trojan, Ws, false;
    ferry_to_v2ray_trojan_ws_tls: Ferry, V2ray, Trojan, Ws, true;
    v2ray_to_ferry_vmess_ws: V2ray, Ferry, Vmess, Ws, false;
    v2ray_to_ferry_vmess_ws_tls: V2ray, Ferry, Vmess, Ws, true;
    v2ray_to_ferry_vless_ws: V2ray, Ferry, Vless, Ws, false;
    v2ray_to_ferry_vless_ws_tls: V2ray, Ferry, Vless, Ws, true;
    v2ray_to_ferry_trojan_ws: V2ray, Ferry, Trojan, Ws, false;
    v2ray_to_ferry_trojan_ws_tls: V2ray, Ferry, Trojan, Ws, true;
    ferry_to_xray_vless_grpc: Ferry, Xray, Vless, Grpc, false;
    ferry_to_xray_vless_grpc_tls: Ferry, Xray, Vless, Grpc, true;
    ferry_to_xray_vmess_grpc_multi_tls: Ferry, Xray, Vmess, GrpcMulti, true;
    ferry_to_xray_trojan_grpc_tls: Ferry, Xray, Trojan, Grpc, true;
    ferry_to_xray_trojan_grpc_multi: Ferry, Xray, Trojan, GrpcMulti, false;
    xray_to_ferry_vless_grpc: Xray, Ferry, Vless, Grpc, false;
    xray_to_ferry_vless_grpc_tls: Xray, Ferry, Vless, Grpc, true;
    xray_to_ferry_vmess_grpc_multi_tls: Xray, Ferry, Vmess, GrpcMulti, true;
    xray_to_ferry_vmess_grpc: Xray, Ferry, Vmess, Grpc, false;
    xray_to_ferry_trojan_grpc_tls: Xray, Ferry, Trojan, Grpc, true;
    xray_to_ferry_trojan_grpc_multi: Xray, Ferry, Trojan, GrpcMulti, false;
    ferry_to_singbox_vless_grpc: Ferry, SingBox, Vless, Grpc, false;
    ferry_to_singbox_vless_grpc_tls: Ferry, SingBox, Vless, Grpc, true;
    ferry_to_singbox_vmess_grpc_tls: Ferry, SingBox, Vmess, Grpc, true;
    ferry_to_singbox_trojan_grpc_tls: Ferry, SingBox, Trojan, Grpc, true;
    singbox_to_ferry_vless_grpc: SingBox, Ferry, Vless, Grpc, false;
    singbox_to_ferry_vless_grpc_tls: SingBox, Ferry, Vless, Grpc, true;
    singbox_to_ferry_vmess_grpc_tls: SingBox, Ferry, Vmess, Grpc, true;
    singbox_to_ferry_trojan_grpc_tls: SingBox, Ferry, Trojan, Grpc, true;
    ferry_to_xray_vmess_http_header: Ferry, Xray, Vmess, HttpHeader, false;
    ferry_to_xray_vless_http_header_tls: Ferry, Xray, Vless, HttpHeader, true;
    xray_to_ferry_vmess_http_header: Xray, Ferry, Vmess, HttpHeader, false;
    xray_to_ferry_vless_http_header_tls: Xray, Ferry, Vless, HttpHeader, true;
    ferry_to_v2ray_vmess_http_header: Ferry, V2ray, Vmess, HttpHeader, false;
    v2ray_to_ferry_vmess_http_header: V2ray, Ferry, Vmess, HttpHeader, false;
    v2ray_to_ferry_trojan_http_header_tls: V2ray, Ferry, Trojan, HttpHeader, true;
    ferry_to_ferry_trojan_grpc_multi_tls: Ferry, Ferry, Trojan, GrpcMulti, true;
    ferry_to_ferry_vless_ws_tls_ed: Ferry, Ferry, Vless, Ws, true;
    ferry_to_ferry_vmess_hu_tls_ed: Ferry, Ferry, Vmess, Hu, true;
}

/// The classic layout: VLESS over TLS on one port, a path fallback to a WebSocket inbound on
/// a unix socket (with PROXY protocol, so the ws inbound sees the real client), an Xray
/// client speaking VLESS over ws+TLS to that one port.
#[test]
fn xray_ws_client_through_a_path_fallback_to_a_ws_inbound_on_a_unix_socket() {
    let dir = tempdir::Dir::new("ws-fallback");
    let g = ferry::transport::tls::generate_self_signed(&[SNI.to_string()], 2).unwrap();
    let cert = dir.path().join("cert.pem");
    let key = dir.path().join("key.pem");
    std::fs::write(&cert, &g.cert_pem).unwrap();
    std::fs::write(&key, &g.key_pem).unwrap();
    let pin: String = g.pin.iter().map(|b| format!("{b:02x}")).collect();
    let sock = dir.path().join("ws.sock");
    let echo = echo_server();
    let (front, entry) = (free_port(), free_port());
    let server = ferry(
        &format!(
            r#"{{"log":{{"loglevel":"debug"}},"inbounds":[
              {{"listen":"127.0.0.1","port":{front},"protocol":"vless",
                "settings":{{"clients":[{{"id":"{ID}","email":"tcp@t"}}],"decryption":"none",
                  "fallbacks":[{{"path":"/ws","dest":"{sock}","xver":1}}]}},
                "streamSettings":{{"network":"tcp","security":"tls","tlsSettings":{{
                  "alpn":["http/1.1"],
                  "certificates":[{{"certificateFile":"{cert}","keyFile":"{key}"}}]}}}}}},
              {{"listen":"{sock}","protocol":"vless",
                "settings":{{"clients":[{{"id":"{ID}","email":"ws@t"}}],"decryption":"none"}},
                "streamSettings":{{"network":"ws","wsSettings":{{"path":"/ws","acceptProxyProtocol":true}}}}}}],
              "outbounds":[{{"protocol":"freedom","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}]}}"#,
            sock = sock.display(),
            cert = cert.display(),
            key = key.display()
        ),
        &[front],
    );
    let client = spawn(
        Xray,
        &format!(
            r#"{{"log":{{"loglevel":"debug"}},
              "inbounds":[{{"listen":"127.0.0.1","port":{entry},"protocol":"dokodemo-door",
                "settings":{{"address":"127.0.0.1","port":{},"network":"tcp"}}}}],
              "outbounds":[{{"protocol":"vless","settings":{{"vnext":[{{"address":"127.0.0.1",
                "port":{front},"users":[{{"id":"{ID}","encryption":"none"}}]}}]}},
                "streamSettings":{{"network":"ws","wsSettings":{{"path":"/ws?ed=2048"}},
                  "security":"tls","tlsSettings":{{"serverName":"{SNI}","pinnedPeerCertSha256":"{pin}"}}}}}}]}}"#,
            echo.port()
        ),
        entry,
    );
    let mut s = TcpStream::connect(("127.0.0.1", entry)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"hello").unwrap();
    let mut b = [0u8; 5];
    s.read_exact(&mut b)
        .unwrap_or_else(|e| panic!("{e}\n{}\n{}", server.output(), client.output()));
    let data = pattern(20 << 20, 7);
    assert!(echo_through(s, &data) == data);
    let out = server.output();
    // The ws inbound served the user, and knew the client's address from the PROXY header.
    assert!(out.contains("from 127.0.0.1:"), "{out}");
    assert!(out.contains("email: ws@t"), "{out}");
    assert!(out.contains("to fallback"), "{out}");
}

/// Ferry's gRPC client puts every call to a server on one HTTP/2 connection, as grpc-go in
/// Xray does: five connections at once reach the server from one source port.
#[test]
fn grpc_calls_share_one_connection() {
    let echo = echo_server();
    let (sport, entry) = (free_port(), free_port());
    let server = ferry(
        &format!(
            r#"{{"log":{{"loglevel":"debug"}},"inbounds":[{{"listen":"127.0.0.1","port":{sport},
                "protocol":"vless","settings":{{"clients":[{{"id":"{ID}"}}],"decryption":"none"}},
                "streamSettings":{{"network":"grpc","grpcSettings":{{"serviceName":"one"}}}}}}],
              "outbounds":[{{"protocol":"freedom","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}]}}"#
        ),
        &[sport],
    );
    let _client = ferry(
        &format!(
            r#"{{"inbounds":[{{"listen":"127.0.0.1","port":{entry},"protocol":"dokodemo-door",
                "settings":{{"address":"127.0.0.1","port":{},"network":"tcp"}}}}],
              "outbounds":[{{"protocol":"vless","settings":{{"vnext":[{{"address":"127.0.0.1",
                "port":{sport},"users":[{{"id":"{ID}","encryption":"none"}}]}}]}},
                "streamSettings":{{"network":"grpc","grpcSettings":{{"serviceName":"one"}}}}}}]}}"#,
            echo.port()
        ),
        &[entry],
    );
    let threads: Vec<_> = (0..5u64)
        .map(|i| {
            std::thread::spawn(move || {
                let data = pattern(1 << 20, i);
                let s = TcpStream::connect(("127.0.0.1", entry)).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                echo_through(s, &data) == data
            })
        })
        .collect();
    for t in threads {
        assert!(t.join().unwrap());
    }
    let out = server.output();
    let sources: std::collections::BTreeSet<&str> = out
        .lines()
        .filter(|l| l.contains(" accepted "))
        .filter_map(|l| l.split("from ").nth(1)?.split_whitespace().next())
        .collect();
    assert_eq!(sources.len(), 1, "calls came from {sources:?}\n{out}");
    assert_eq!(out.matches(" accepted ").count(), 5, "{out}");
}
