//! VLESS over TCP against real Xray: Ferry client -> Xray server and Xray client -> Ferry
//! server, TCP (byte-exact 50 MB through an echo server) and UDP (command 2), plus Ferry to
//! Ferry with a custom-string id and a user added at run time.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::common;
use common::*;
use std::net::{TcpStream, UdpSocket};
use std::time::Duration;

const ID: &str = "b831381d-6324-4d53-ad4f-8cda48b30811";
const BIG: usize = 50 << 20;

fn xray(cfg: &str, wait: &[u16]) -> Proc {
    // Default settings: Xray's client sends UDP as XUDP (Mux.Cool, full-cone).
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

fn vless_out(server: u16, id: &str) -> String {
    format!(
        r#"{{"protocol":"vless","settings":{{"vnext":[{{"address":"127.0.0.1","port":{server},
            "users":[{{"id":"{id}","encryption":"none"}}]}}]}}}}"#
    )
}

fn vless_in(port: u16, id: &str) -> String {
    format!(
        r#"{{"listen":"127.0.0.1","port":{port},"protocol":"vless",
            "settings":{{"clients":[{{"id":"{id}","email":"v@t"}}],"decryption":"none"}}}}"#
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

/// Entry (dokodemo) -> VLESS client -> VLESS server -> freedom -> target. Returns the entry
/// port and the processes (server first).
fn chain(ferry_client: bool, target: u16, net: &str) -> (u16, Vec<Proc>) {
    let (entry, server, probe) = (free_port(), free_port(), free_port());
    let client_cfg = config(
        &[dokodemo(entry, target, net), dokodemo(probe, target, "tcp")],
        &vless_out(server, ID),
    );
    if ferry_client {
        let s = xray(&config(&[vless_in(server, ID)], XRAY_FREEDOM), &[server]);
        let c = ferry(&client_cfg, &[probe]);
        (entry, vec![s, c])
    } else {
        let s = ferry(&config(&[vless_in(server, ID)], FREEDOM), &[server]);
        let c = xray(&client_cfg, &[probe]);
        (entry, vec![s, c])
    }
}

fn tcp_case(ferry_client: bool) {
    let echo = echo_server();
    let (entry, procs) = chain(ferry_client, echo.port(), "tcp");
    let data = pattern(BIG, 0x71e55 ^ ferry_client as u64);
    let got = echo_through(TcpStream::connect(("127.0.0.1", entry)).unwrap(), &data);
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
        // Xray's XUDP writer drops datagrams with len + 666 > 8192.
        let msg = pattern(1 + (i as usize * 271) % 7500, i as u64);
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
fn ferry_to_ferry_with_a_string_id_and_bad_clients_refused() {
    let echo = echo_server();
    let (entry, server) = (free_port(), free_port());
    let srv = ferry(
        &config(&[vless_in(server, "my-string-id")], FREEDOM),
        &[server],
    );
    let cli = ferry(
        &config(
            &[dokodemo(entry, echo.port(), "tcp")],
            &vless_out(server, "my-string-id"),
        ),
        &[entry],
    );
    let data = pattern(8 << 20, 3);
    let got = echo_through(TcpStream::connect(("127.0.0.1", entry)).unwrap(), &data);
    assert!(got == data);
    // After the header both sides are plain sockets: both relays splice both ways (the
    // server once its response went out, the client once the response was read).
    let t = std::time::Instant::now();
    while !(srv.output().contains("spliced true/true")
        && cli.output().contains("spliced true/true"))
    {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "no splice
{}
{}",
            srv.output(),
            cli.output()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // A wrong user, a wrong version and a reverse-proxy request are closed without an answer.
    use std::io::{Read, Write};
    let other = ferry::common::uuid::parse_id("another-id").unwrap();
    let mut wrong_user = vec![0u8];
    wrong_user.extend_from_slice(&other);
    wrong_user.extend_from_slice(&[0, 1, 0x1f, 0x90, 1, 127, 0, 0, 1]);
    let mut bad_version = wrong_user.clone();
    bad_version[0] = 1;
    let id = ferry::common::uuid::parse_id("my-string-id").unwrap();
    let mut reverse = vec![0u8];
    reverse.extend_from_slice(&id);
    reverse.extend_from_slice(&[0, 4]);
    for probe in [wrong_user, bad_version, reverse] {
        let mut s = TcpStream::connect(("127.0.0.1", server)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(&probe).unwrap();
        let mut b = [0u8; 16];
        let n = s.read(&mut b).unwrap_or(0);
        assert_eq!(n, 0, "no answer to a refused request");
    }
}

// sing-box, VLESS over plain TCP, each way: TCP byte-exact 50 MB and UDP as sing-box sends it
// by default (XUDP packet encoding).

fn singbox(cfg: &str, wait: &[u16]) -> Proc {
    let p = spawn_with_config(
        &peer("sing-box"),
        "sing-box",
        cfg,
        &["run", "-c", "{config}"],
    );
    for port in wait {
        wait_listening(*port, &p);
    }
    p
}

fn singbox_chain(ferry_client: bool, target: u16, net: &str) -> (u16, Vec<Proc>) {
    let (entry, server, probe) = (free_port(), free_port(), free_port());
    if ferry_client {
        let s = singbox(
            &format!(
                r#"{{"log":{{"level":"debug"}},
                    "inbounds":[{{"type":"vless","listen":"127.0.0.1","listen_port":{server},
                                 "users":[{{"name":"v","uuid":"{ID}"}}]}}],
                    "outbounds":[{{"type":"direct"}}]}}"#
            ),
            &[server],
        );
        let c = ferry(
            &config(
                &[dokodemo(entry, target, net), dokodemo(probe, target, "tcp")],
                &vless_out(server, ID),
            ),
            &[probe],
        );
        (entry, vec![s, c])
    } else {
        let s = ferry(&config(&[vless_in(server, ID)], FREEDOM), &[server]);
        let c = singbox(
            &format!(
                r#"{{"log":{{"level":"debug"}},
                    "inbounds":[{{"type":"direct","listen":"127.0.0.1","listen_port":{entry},
                                 "network":"{net}","override_address":"127.0.0.1","override_port":{target}}},
                                {{"type":"direct","listen":"127.0.0.1","listen_port":{probe},
                                 "network":"tcp","override_address":"127.0.0.1","override_port":{target}}}],
                    "outbounds":[{{"type":"vless","server":"127.0.0.1","server_port":{server},
                                  "uuid":"{ID}"}}]}}"#
            ),
            &[probe],
        );
        (entry, vec![s, c])
    }
}

fn singbox_tcp(ferry_client: bool) {
    let echo = echo_server();
    let (entry, procs) = singbox_chain(ferry_client, echo.port(), "tcp");
    let data = pattern(BIG, 0x5b0c ^ ferry_client as u64);
    let got = echo_through(TcpStream::connect(("127.0.0.1", entry)).unwrap(), &data);
    assert!(
        got == data,
        "ferry_client={ferry_client}: bytes differ\n{}\n{}",
        procs[0].output(),
        procs[1].output()
    );
}

fn singbox_udp(ferry_client: bool) {
    let echo = udp_echo_server();
    let (entry, procs) = singbox_chain(ferry_client, echo.port(), "udp");
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut buf = [0u8; 65536];
    let mut ok = 0;
    for i in 0..30u16 {
        let msg = pattern(1 + (i as usize * 271) % 7500, i as u64 + 99);
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
fn singbox_client_to_ferry_server_tcp_50mb() {
    singbox_tcp(false);
}

#[test]
fn ferry_client_to_singbox_server_tcp_50mb() {
    singbox_tcp(true);
}

#[test]
fn singbox_client_to_ferry_server_udp_xudp() {
    singbox_udp(false);
}

#[test]
fn ferry_client_to_singbox_server_udp() {
    singbox_udp(true);
}
