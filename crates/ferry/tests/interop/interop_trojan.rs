//! Trojan over TCP (TLS arrives in its own step) against real Xray: Ferry client -> Xray
//! server and Xray client -> Ferry server, TCP (byte-exact 50 MB through an echo server) and
//! UDP (frames), plus Ferry to Ferry and what is not Trojan closed unanswered.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::common;
use common::*;
use std::net::{TcpStream, UdpSocket};
use std::time::Duration;

const ID: &str = "a trojan password";
const BIG: usize = 50 << 20;

fn xray(cfg: &str, wait: &[u16]) -> Proc {
    // Default settings (full-cone mode only changes VLESS and VMess clients).
    let p = spawn_with_config(&peer("xray"), "xray", cfg, &["run", "-c", "{config}"]);
    for port in wait {
        wait_listening(*port, &p);
    }
    p
}

fn dokodemo(port: u16, target: u16, net: &str) -> String {
    format!(
        r#"{{"listen":"127.0.0.1","port":{port},"protocol":"dokodemo-door",
            "settings":{{"address":"127.0.0.1","port":{target},"network":"{net}"}}}}"#
    )
}

fn trojan_out(server: u16, pw: &str) -> String {
    format!(
        r#"{{"protocol":"trojan","settings":{{"servers":[{{"address":"127.0.0.1","port":{server},
            "password":"{pw}"}}]}}}}"#
    )
}

fn trojan_in(port: u16, pw: &str) -> String {
    format!(
        r#"{{"listen":"127.0.0.1","port":{port},"protocol":"trojan",
            "settings":{{"clients":[{{"password":"{pw}","email":"t@t"}}]}}}}"#
    )
}

/// Xray v26 freedom refuses loopback targets for proxied connections unless allowed.
const XRAY_FREEDOM: &str =
    r#"{"protocol":"freedom","settings":{"finalRules":[{"action":"allow","ip":["127.0.0.0/8"]}]}}"#;
const FREEDOM: &str = r#"{"protocol":"freedom","settings":{"finalRules":[{"action":"allow","ip":["127.0.0.0/8","::1"]}]}}"#;

fn config(inbounds: &[String], outbound: &str) -> String {
    format!(
        r#"{{"log":{{"loglevel":"debug"}},"inbounds":[{}],"outbounds":[{outbound}]}}"#,
        inbounds.join(",")
    )
}

/// Entry (dokodemo) -> Trojan client -> Trojan server -> freedom -> target. Returns the entry
/// port and the processes (server first).
fn chain(ferry_client: bool, target: u16, net: &str) -> (u16, Vec<Proc>) {
    let (entry, server, probe) = (free_port(), free_port(), free_port());
    let client_cfg = config(
        &[dokodemo(entry, target, net), dokodemo(probe, target, "tcp")],
        &trojan_out(server, ID),
    );
    if ferry_client {
        let s = xray(&config(&[trojan_in(server, ID)], XRAY_FREEDOM), &[server]);
        let c = ferry(&client_cfg, &[probe]);
        (entry, vec![s, c])
    } else {
        let s = ferry(&config(&[trojan_in(server, ID)], FREEDOM), &[server]);
        let c = xray(&client_cfg, &[probe]);
        (entry, vec![s, c])
    }
}

fn tcp_case(ferry_client: bool) {
    let echo = echo_server();
    let (entry, procs) = chain(ferry_client, echo.port(), "tcp");
    let data = pattern(BIG, 0x71e55 ^ ferry_client as u64);
    // Xray's Trojan client fails when the first payload it reads is larger than about 8 KiB
    // (PEERS.md): a few bytes go first.
    let mut s = TcpStream::connect(("127.0.0.1", entry)).unwrap();
    {
        use std::io::{Read, Write};
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"hello").unwrap();
        let mut b = [0u8; 5];
        s.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"hello");
    }
    let got = echo_through(s, &data);
    assert!(
        got == data,
        "ferry_client={ferry_client}: bytes differ\n{}\n{}",
        procs[0].output(),
        procs[1].output()
    );
}

fn udp_case(ferry_client: bool) {
    let echo = udp_echo_server();
    let (entry, procs) = chain(ferry_client, echo.port(), "udp");
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut buf = [0u8; 65536];
    let mut ok = 0;
    for i in 0..30u16 {
        let msg = pattern(1 + (i as usize * 271) % 8000, i as u64);
        s.send_to(&msg, ("127.0.0.1", entry)).unwrap();
        if let Ok((n, _)) = s.recv_from(&mut buf) {
            assert_eq!(&buf[..n], &msg[..], "datagram {i} differs");
            ok += 1;
        }
    }
    assert!(
        ok >= 28,
        "ferry_client={ferry_client}: only {ok}/30 datagrams came back\n{}\n{}",
        procs[0].output(),
        procs[1].output()
    );
}

#[test]
fn xray_client_to_ferry_server_tcp_50mb() {
    tcp_case(false);
}

#[test]
fn ferry_client_to_xray_server_tcp_50mb() {
    tcp_case(true);
}

#[test]
fn xray_client_to_ferry_server_udp() {
    udp_case(false);
}

#[test]
fn ferry_client_to_xray_server_udp() {
    udp_case(true);
}

#[test]
fn ferry_to_ferry_splices_and_what_is_not_trojan_gets_no_answer() {
    let echo = echo_server();
    let (entry, server) = (free_port(), free_port());
    let srv = ferry(&config(&[trojan_in(server, "pw")], FREEDOM), &[server]);
    let cli = ferry(
        &config(
            &[dokodemo(entry, echo.port(), "tcp")],
            &trojan_out(server, "pw"),
        ),
        &[entry],
    );
    let data = pattern(8 << 20, 3);
    let got = echo_through(TcpStream::connect(("127.0.0.1", entry)).unwrap(), &data);
    assert!(got == data);
    // No response in Trojan: the server splices from the start, the client once its request
    // went out with the first payload.
    let t = std::time::Instant::now();
    while !(srv.output().contains("spliced true/true")
        && cli.output().contains("spliced true/true"))
    {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "no splice\n{}\n{}",
            srv.output(),
            cli.output()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    use std::io::{Read, Write};
    let mut wrong = ferry::proxy::trojan::codec::password_hash("wrong").to_vec();
    wrong.extend_from_slice(b"\r\n\x01\x01\x7f\x00\x00\x01\x1f\x90\r\n");
    let http = b"GET / HTTP/1.1\r\nHost: example.com\r\nUser-Agent: curl/8\r\nAccept: */*\r\n\r\n"
        .to_vec();
    for probe in [wrong, http] {
        let mut s = TcpStream::connect(("127.0.0.1", server)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(&probe).unwrap();
        let mut b = [0u8; 16];
        let n = s.read(&mut b).unwrap_or(0);
        assert_eq!(
            n, 0,
            "no answer to what is not Trojan (no fallback configured)"
        );
    }
    let t = std::time::Instant::now();
    while !srv.output().contains("closed (no fallbacks)") {
        assert!(t.elapsed() < Duration::from_secs(5), "{}", srv.output());
        std::thread::sleep(Duration::from_millis(50));
    }
}
