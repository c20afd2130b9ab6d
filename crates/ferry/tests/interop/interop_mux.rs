//! Mux.Cool and XUDP (VLESS and VMess command 3) against real Xray, with Xray's default client
//! settings (full-cone UDP on): Xray client -> Ferry server and Ferry client -> Xray server,
//! UDP to two destinations over one session (XUDP, replies carry their source), TCP sessions
//! sharing connections (`mux.enabled`, byte-exact, concurrent), Ferry to Ferry, and a bad
//! frame that closes only its own connection.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::common;
use crate::proxy_clients;
use crate::route_helpers;
use common::*;
use proxy_clients::{socks5_udp, udp_packet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

const ID: &str = "b831381d-6324-4d53-ad4f-8cda48b30811";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Proto {
    Vless,
    Vmess,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Side {
    Xray,
    Ferry,
}

fn start(side: Side, cfg: &str, wait: &[u16]) -> Proc {
    match side {
        Side::Ferry => ferry(cfg, wait),
        Side::Xray => {
            let p = spawn_with_config(&peer("xray"), "xray", cfg, &["run", "-c", "{config}"]);
            for port in wait {
                wait_listening(*port, &p);
            }
            p
        }
    }
}

fn server_in(proto: Proto, port: u16) -> String {
    let clients = match proto {
        Proto::Vless => {
            format!(r#"{{"clients":[{{"id":"{ID}","email":"v@t"}}],"decryption":"none"}}"#)
        }
        Proto::Vmess => format!(r#"{{"clients":[{{"id":"{ID}","email":"v@t"}}]}}"#),
    };
    format!(
        r#"{{"tag":"in","listen":"127.0.0.1","port":{port},"protocol":"{}","settings":{clients}}}"#,
        name(proto)
    )
}

fn name(p: Proto) -> &'static str {
    match p {
        Proto::Vless => "vless",
        Proto::Vmess => "vmess",
    }
}

/// The client's outbound; `mux` is the `mux` object or "".
fn client_out(proto: Proto, server: u16, mux: &str) -> String {
    let user = match proto {
        Proto::Vless => format!(r#"{{"id":"{ID}","encryption":"none"}}"#),
        Proto::Vmess => format!(r#"{{"id":"{ID}","security":"aes-128-gcm"}}"#),
    };
    let mux = if mux.is_empty() {
        String::new()
    } else {
        format!(r#","mux":{mux}"#)
    };
    format!(
        r#"{{"tag":"proxy","protocol":"{}","settings":{{"vnext":[{{"address":"127.0.0.1","port":{server},
            "users":[{user}]}}]}}{mux}}}"#,
        name(proto)
    )
}

fn freedom(side: Side) -> &'static str {
    match side {
        // Xray v26 freedom refuses loopback targets for proxied connections unless allowed.
        Side::Xray => {
            r#"{"tag":"direct","protocol":"freedom","settings":{"finalRules":[{"action":"allow","ip":["127.0.0.0/8"]}]}}"#
        }
        Side::Ferry => {
            r#"{"tag":"direct","protocol":"freedom","settings":{"finalRules":[{"action":"allow","ip":["127.0.0.0/8","::1"]}]}}"#
        }
    }
}

fn socks_in(port: u16) -> String {
    format!(
        r#"{{"tag":"socks","listen":"127.0.0.1","port":{port},"protocol":"socks",
            "settings":{{"auth":"noauth","udp":true,"ip":"127.0.0.1"}}}}"#
    )
}

fn dokodemo(port: u16, target: u16) -> String {
    format!(
        r#"{{"tag":"entry","listen":"127.0.0.1","port":{port},"protocol":"dokodemo-door",
            "settings":{{"address":"127.0.0.1","port":{target},"network":"tcp"}}}}"#
    )
}

fn config(extra: &str, inbounds: &[String], outbound: &str) -> String {
    format!(
        r#"{{"log":{{"loglevel":"debug"}},{extra}"inbounds":[{}],"outbounds":[{outbound}]}}"#,
        inbounds.join(",")
    )
}

/// Ferry's server with stats on, so the user's counters can be read from the metrics port.
fn ferry_server_stats(mport: u16) -> String {
    format!(
        r#""stats":{{}},"policy":{{"levels":{{"0":{{"statsUserUplink":true,"statsUserDownlink":true}}}}}},
           "metrics":{{"tag":"metrics","listen":"127.0.0.1:{mport}"}},"#
    )
}

/// A client (socks + proto outbound) and a server (proto inbound + freedom).
struct Chain {
    entry: u16,
    sport: u16,
    procs: Vec<Proc>,
    mport: u16,
}

impl Chain {
    fn new(
        proto: Proto,
        client: Side,
        server: Side,
        mux: &str,
        entry_in: impl Fn(u16) -> String,
    ) -> Chain {
        let (entry, sport, mport) = (free_port(), free_port(), free_port());
        let extra = if server == Side::Ferry {
            ferry_server_stats(mport)
        } else {
            String::new()
        };
        let mut wait = vec![sport];
        if server == Side::Ferry {
            wait.push(mport);
        }
        let s = start(
            server,
            &config(&extra, &[server_in(proto, sport)], freedom(server)),
            &wait,
        );
        let c = start(
            client,
            &config("", &[entry_in(entry)], &client_out(proto, sport, mux)),
            &[entry],
        );
        Chain {
            entry,
            sport,
            procs: vec![s, c],
            mport,
        }
    }

    fn logs(&self) -> String {
        format!("{}\n{}", self.procs[0].output(), self.procs[1].output())
    }

    fn server_log(&self) -> String {
        self.procs[0].output()
    }
}

/// UDP through the client's SOCKS inbound to two echo servers over one association: every
/// reply must come back from the server it was sent to (full-cone: the server sends each
/// reply with its source address) and equal what was sent.
fn udp_two_destinations(proto: Proto, client: Side, server: Side, mux: &str) -> Chain {
    let (e1, e2) = (udp_echo_server(), udp_echo_server());
    let chain = Chain::new(proto, client, server, mux, socks_in);
    let (_ctrl, relay, u) = socks5_udp(chain.entry, None);
    let mut buf = vec![0u8; 70_000];
    let mut ok = 0;
    for i in 0..40usize {
        let to: SocketAddr = if i % 2 == 0 { e1 } else { e2 };
        // Up to 7000 bytes: Xray's XUDP writer drops datagrams with len + 666 > 8192.
        let msg = pattern(1 + (i * 331) % 7000, i as u64);
        u.send_to(&udp_packet(to, &msg), relay).unwrap();
        match u.recv_from(&mut buf) {
            Ok((n, _)) => {
                assert_eq!(
                    &buf[..10],
                    &udp_packet(to, &[])[..],
                    "{proto:?} {client:?}->{server:?}: datagram {i} came back from elsewhere\n{}",
                    chain.logs()
                );
                assert!(buf[10..n] == msg[..], "datagram {i} differs");
                ok += 1;
            }
            Err(_) => continue,
        }
    }
    assert!(
        ok >= 36,
        "{proto:?} {client:?}->{server:?}: only {ok}/40 datagrams came back\n{}",
        chain.logs()
    );
    chain
}

/// `n` concurrent TCP connections through the client's dokodemo entry, `each` bytes apiece,
/// echoed byte-exact.
fn tcp_concurrent(chain: &Chain, n: usize, each: usize) {
    let threads: Vec<_> = (0..n)
        .map(|i| {
            let entry = chain.entry;
            std::thread::spawn(move || {
                let data = pattern(each, 0x6d75 + i as u64);
                let got = echo_through(TcpStream::connect(("127.0.0.1", entry)).unwrap(), &data);
                got == data
            })
        })
        .collect();
    for (i, t) in threads.into_iter().enumerate() {
        assert!(
            t.join().unwrap_or(false),
            "stream {i} differs or failed\n{}",
            chain.logs()
        );
    }
}

fn mux_tcp(proto: Proto, client: Side, server: Side) -> Chain {
    let echo = echo_server();
    let chain = Chain::new(
        proto,
        client,
        server,
        r#"{"enabled":true,"concurrency":4}"#,
        |p| dokodemo(p, echo.port()),
    );
    // 6 streams at once over connections of at most 4 sessions: 48 MB in all.
    tcp_concurrent(&chain, 6, 8 << 20);
    chain
}

fn count(log: &str, needle: &str) -> usize {
    log.matches(needle).count()
}

/// Polls Ferry's user counters until both directions equal `want`.
fn wait_user_counters(chain: &Chain, want: u64) {
    let t = Instant::now();
    loop {
        let mut s = TcpStream::connect(("127.0.0.1", chain.mport)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(
            s,
            "GET /debug/vars HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut resp = String::new();
        s.read_to_string(&mut resp).unwrap();
        let body = resp.split_once("\r\n\r\n").map(|x| x.1).unwrap_or("{}");
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        let g = |d: &str| v["stats"]["user"]["v@t"][d].as_u64().unwrap_or(0);
        let got = (g("uplink"), g("downlink"));
        if got == (want, want) {
            return;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "user counters {got:?}, want {want} both ways\n{}",
            chain.logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn xray_vless_client_xudp_to_ferry_two_destinations() {
    let c = udp_two_destinations(Proto::Vless, Side::Xray, Side::Ferry, "");
    assert!(c.server_log().contains("Mux.Cool"), "no mux\n{}", c.logs());
}

#[test]
fn xray_vmess_client_xudp_to_ferry_two_destinations() {
    let c = udp_two_destinations(Proto::Vmess, Side::Xray, Side::Ferry, "");
    assert!(c.server_log().contains("Mux.Cool"), "no mux\n{}", c.logs());
}

#[test]
fn ferry_vless_client_xudp_to_xray_two_destinations() {
    udp_two_destinations(Proto::Vless, Side::Ferry, Side::Xray, "");
}

#[test]
fn ferry_vmess_client_xudp_to_xray_two_destinations() {
    udp_two_destinations(Proto::Vmess, Side::Ferry, Side::Xray, "");
}

#[test]
fn xray_vless_mux_client_tcp_to_ferry_and_user_counters() {
    let c = mux_tcp(Proto::Vless, Side::Xray, Side::Ferry);
    let conns = count(&c.server_log(), "Mux.Cool connection");
    assert!(
        (1..6).contains(&conns),
        "{conns} mux connections for 6 streams\n{}",
        c.logs()
    );
    wait_user_counters(&c, 6 * (8 << 20));
}

#[test]
fn xray_vmess_mux_client_tcp_to_ferry() {
    let c = mux_tcp(Proto::Vmess, Side::Xray, Side::Ferry);
    let conns = count(&c.server_log(), "Mux.Cool connection");
    assert!(
        (1..6).contains(&conns),
        "{conns} mux connections for 6 streams\n{}",
        c.logs()
    );
}

#[test]
fn ferry_vless_mux_client_tcp_to_xray() {
    let c = mux_tcp(Proto::Vless, Side::Ferry, Side::Xray);
    let conns = count(&c.procs[1].output(), "new Mux.Cool connection");
    assert!(
        (1..6).contains(&conns),
        "{conns} mux connections for 6 streams\n{}",
        c.logs()
    );
}

#[test]
fn ferry_vmess_mux_client_tcp_to_xray() {
    mux_tcp(Proto::Vmess, Side::Ferry, Side::Xray);
}

#[test]
fn ferry_mux_client_udp_to_xray() {
    // xudpConcurrency 0: UDP sessions share the TCP connections.
    let mux = r#"{"enabled":true,"concurrency":4,"xudpConcurrency":0}"#;
    udp_two_destinations(Proto::Vless, Side::Ferry, Side::Xray, mux);
    let mux = r#"{"enabled":true,"concurrency":-1,"xudpConcurrency":2}"#;
    udp_two_destinations(Proto::Vmess, Side::Ferry, Side::Xray, mux);
}

#[test]
fn ferry_to_ferry_mux_tcp_udp_and_xudp() {
    for proto in [Proto::Vless, Proto::Vmess] {
        let c = mux_tcp(proto, Side::Ferry, Side::Ferry);
        let conns = count(&c.server_log(), "Mux.Cool connection");
        assert!((1..6).contains(&conns), "{conns} connections\n{}", c.logs());
        wait_user_counters(&c, 6 * (8 << 20));
        udp_two_destinations(proto, Side::Ferry, Side::Ferry, "");
        udp_two_destinations(proto, Side::Ferry, Side::Ferry, r#"{"enabled":true}"#);
    }
}

#[test]
fn a_bad_frame_closes_only_its_connection() {
    let echo = echo_server();
    let chain = Chain::new(
        Proto::Vless,
        Side::Ferry,
        Side::Ferry,
        r#"{"enabled":true}"#,
        |p| dokodemo(p, echo.port()),
    );
    let sport = chain.sport;
    // A long transfer through a healthy mux connection runs while bad ones arrive.
    let entry = chain.entry;
    let good = std::thread::spawn(move || {
        let data = pattern(16 << 20, 77);
        let got = echo_through(TcpStream::connect(("127.0.0.1", entry)).unwrap(), &data);
        got == data
    });
    let id = ferry::common::uuid::parse_id(ID).unwrap();
    let mut head = vec![0u8];
    head.extend_from_slice(&id);
    head.extend_from_slice(&[0, 3]);
    let bad_frames: [&[u8]; 3] = [
        // Metadata longer than 512.
        &[0xff, 0xff, 0, 1, 1, 0],
        // Unknown status.
        &[0, 4, 0, 1, 9, 0],
        // A New with an unknown address type.
        &[0, 9, 0, 1, 1, 0, 1, 0, 80, 9, 1],
    ];
    for bad in bad_frames {
        let mut s = TcpStream::connect(("127.0.0.1", sport)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut req = head.clone();
        req.extend_from_slice(bad);
        s.write_all(&req).unwrap();
        let mut b = [0u8; 64];
        let t = Instant::now();
        let n = s.read(&mut b);
        assert!(
            matches!(n, Ok(0)) || n.is_err() && t.elapsed() < Duration::from_secs(4),
            "the server kept a connection with a bad frame open: {n:?}\n{}",
            chain.logs()
        );
    }
    assert!(
        good.join().unwrap(),
        "the healthy connection broke\n{}",
        chain.logs()
    );
    let log = chain.server_log();
    assert_eq!(count(&log, "bad frame"), 3, "{log}");
    assert!(!log.contains("panicked"), "{log}");
}

/// The server inbound's sniffing applies to each Mux sub-connection as to a connection of its
/// own: an Xray client muxes a CONNECT to an IP, the HTTP request inside names a host, and
/// Ferry's server routes that sub-connection by it (`destOverride` http).
#[test]
fn xray_mux_sub_connections_are_sniffed_by_ferry() {
    let sniffed = route_helpers::sink("sniffed");
    let other = route_helpers::sink("other");
    let (entry, sport) = (free_port(), free_port());
    let server_in = server_in(Proto::Vless, sport).replace(
        r#""tag":"in","#,
        r#""tag":"in","sniffing":{"enabled":true,"destOverride":["http"]},"#,
    );
    let server = format!(
        r#"{{"log":{{"loglevel":"debug"}},"inbounds":[{server_in}],
            "outbounds":[{},{}],
            "routing":{{"rules":[{{"type":"field","domain":["full:mux.example"],"outboundTag":"sniffed"}}]}}}}"#,
        route_helpers::to_sink("other", other.port),
        route_helpers::to_sink("sniffed", sniffed.port)
    );
    let s = start(Side::Ferry, &server, &[sport]);
    let c = start(
        Side::Xray,
        &config(
            "",
            &[socks_in(entry)],
            &client_out(Proto::Vless, sport, r#"{"enabled":true,"concurrency":8}"#),
        ),
        &[entry],
    );
    let req = b"GET / HTTP/1.1\r\nHost: mux.example\r\n\r\n";
    for _ in 0..3 {
        let line = route_helpers::socks_line(entry, "127.0.0.1", "127.0.0.1", 80, req)
            .unwrap_or_else(|e| panic!("{e}\n{}\n{}", s.output(), c.output()));
        assert_eq!(line, "sniffed", "{}", s.output());
    }
    let line = route_helpers::socks_line(entry, "127.0.0.1", "127.0.0.1", 80, b"hello\n").unwrap();
    assert_eq!(line, "other", "{}", s.output());
    assert!(s.output().contains("Mux.Cool"), "not muxed\n{}", s.output());
    assert_eq!(
        sniffed
            .got
            .lock()
            .unwrap()
            .first()
            .map(|g| g.starts_with(req)),
        Some(true),
        "the sniffed request reached the sink untouched"
    );
}
