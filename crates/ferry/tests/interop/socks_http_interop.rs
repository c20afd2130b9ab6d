//! SOCKS/HTTP interop with real peers: curl as a client of Ferry's inbounds, Xray's socks
//! outbound through Ferry's socks inbound, and Ferry's socks outbound through Xray's.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::common;
use crate::proxy_clients;
use common::*;
use proxy_clients::*;

use std::net::{TcpStream, UdpSocket};
use std::process::Command;
use std::time::Duration;

fn curl(args: &[&str]) -> (String, String) {
    let out = Command::new(peer("curl"))
        .args(["-sS", "--max-time", "20"])
        .args(args)
        .output()
        .unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn curl_through_socks5_socks4a_and_http() {
    let origin = http_origin();
    let socks = free_port();
    let http = free_port();
    let cfg = format!(
        r#"{{"inbounds":[
            {{"listen":"127.0.0.1","port":{socks},"protocol":"socks","settings":{{"auth":"noauth"}}}},
            {{"listen":"127.0.0.1","port":{http},"protocol":"http",
              "settings":{{"accounts":[{{"user":"user","pass":"pass"}}]}}}}],
          "outbounds":[{{"protocol":"freedom","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}]}}"#
    );
    let f = ferry(&cfg, &[socks, http]);
    let url = format!("http://{}/hello?a=b", origin.addr);
    let url_local = format!("http://localhost:{}/by-name", origin.addr.port());
    let socks_addr = format!("127.0.0.1:{socks}");
    let http_ok = format!("http://user:pass@127.0.0.1:{http}");

    let (out, err) = curl(&["--socks5-hostname", &socks_addr, &url_local]);
    assert_eq!(out, "path=/by-name body=", "{err}\n{}", f.output());
    let (out, err) = curl(&["--socks5", &socks_addr, &url]);
    assert_eq!(out, "path=/hello?a=b body=", "{err}");
    let (out, err) = curl(&["--socks4a", &socks_addr, &url_local]);
    assert_eq!(out, "path=/by-name body=", "{err}");
    // Plain forward request, and a CONNECT tunnel (-p), with Basic auth; a POST body too.
    let (out, err) = curl(&["-x", &http_ok, "-d", "payload", &url]);
    assert_eq!(out, "path=/hello?a=b body=payload", "{err}\n{}", f.output());
    let (out, err) = curl(&["-p", "-x", &http_ok, &url]);
    assert_eq!(out, "path=/hello?a=b body=", "{err}");
    // Wrong credentials: 407.
    let (out, _) = curl(&[
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "-x",
        &format!("http://user:nope@127.0.0.1:{http}"),
        &url,
    ]);
    assert_eq!(out, "407");
    // The origin saw origin-form requests without proxy headers.
    for head in origin.seen.lock().unwrap().iter() {
        assert!(
            head.starts_with("GET /") || head.starts_with("POST /"),
            "{head}"
        );
        assert!(!head.to_ascii_lowercase().contains("proxy-"), "{head}");
    }
}

fn xray(cfg: &str, wait: &[u16]) -> Proc {
    let p = spawn_with_config(&peer("xray"), "xray", cfg, &["run", "-c", "{config}"]);
    for port in wait {
        wait_listening(*port, &p);
    }
    p
}

/// Xray (dokodemo -> socks outbound) -> Ferry (socks inbound, password, UDP) -> freedom.
#[test]
fn xray_socks_outbound_through_ferry_socks_inbound() {
    let echo = echo_server();
    let uecho = udp_echo_server();
    let fport = free_port();
    let xport = free_port();
    let xudp = free_port();
    let f = ferry(
        &format!(
            r#"{{"inbounds":[{{"listen":"127.0.0.1","port":{fport},"protocol":"socks",
                "settings":{{"auth":"password","accounts":[{{"user":"u","pass":"p"}}],"udp":true,"ip":"127.0.0.1"}}}}],
              "outbounds":[{{"protocol":"freedom","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}]}}"#
        ),
        &[fport],
    );
    let x = xray(
        &format!(
            r#"{{"log":{{"loglevel":"warning"}},
              "inbounds":[
                {{"listen":"127.0.0.1","port":{xport},"protocol":"dokodemo-door",
                  "settings":{{"address":"127.0.0.1","port":{},"network":"tcp"}}}},
                {{"listen":"127.0.0.1","port":{xudp},"protocol":"dokodemo-door",
                  "settings":{{"address":"127.0.0.1","port":{},"network":"udp"}}}}],
              "outbounds":[{{"protocol":"socks","settings":{{"servers":[{{"address":"127.0.0.1","port":{fport},
                  "users":[{{"user":"u","pass":"p"}}]}}]}}}}]}}"#,
            echo.port(),
            uecho.port()
        ),
        &[xport],
    );
    tcp_and_udp_through(xport, xudp, (31, 40), &[&f, &x]);
}

/// Ferry (dokodemo -> socks outbound) -> Xray (socks inbound, password, UDP) -> freedom.
#[test]
fn ferry_socks_outbound_through_xray_socks_inbound() {
    let echo = echo_server();
    let uecho = udp_echo_server();
    let xport = free_port();
    let fport = free_port();
    let fudp = free_port();
    let x = xray(
        &format!(
            r#"{{"log":{{"loglevel":"warning"}},
              "inbounds":[{{"listen":"127.0.0.1","port":{xport},"protocol":"socks",
                "settings":{{"auth":"password","accounts":[{{"user":"u","pass":"p"}}],"udp":true,"ip":"127.0.0.1"}}}}],
              "outbounds":[{{"protocol":"freedom",
                "settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8"]}}]}}}}]}}"#
        ),
        &[xport],
    );
    let f = ferry(
        &format!(
            r#"{{"inbounds":[
                {{"listen":"127.0.0.1","port":{fport},"protocol":"dokodemo-door",
                  "settings":{{"address":"127.0.0.1","port":{},"network":"tcp"}}}},
                {{"listen":"127.0.0.1","port":{fudp},"protocol":"dokodemo-door",
                  "settings":{{"address":"127.0.0.1","port":{},"network":"udp"}}}}],
              "outbounds":[{{"protocol":"socks","settings":{{"servers":[{{"address":"127.0.0.1","port":{xport},
                  "users":[{{"user":"u","pass":"p"}}]}}]}}}}]}}"#,
            echo.port(),
            uecho.port()
        ),
        &[fport],
    );
    tcp_and_udp_through(fport, fudp, (32, 50), &[&f, &x]);
}

/// Xray's HTTP outbound (CONNECT with Basic auth) through Ferry's HTTP inbound.
#[test]
fn xray_http_outbound_through_ferry_http_inbound() {
    let echo = echo_server();
    let fport = free_port();
    let xport = free_port();
    let f = ferry(
        &format!(
            r#"{{"inbounds":[{{"listen":"127.0.0.1","port":{fport},"protocol":"http",
                "settings":{{"accounts":[{{"user":"u","pass":"p"}}]}}}}],
              "outbounds":[{{"protocol":"freedom","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}]}}"#
        ),
        &[fport],
    );
    let x = xray(
        &format!(
            r#"{{"log":{{"loglevel":"warning"}},
              "inbounds":[{{"listen":"127.0.0.1","port":{xport},"protocol":"dokodemo-door",
                  "settings":{{"address":"127.0.0.1","port":{},"network":"tcp"}}}}],
              "outbounds":[{{"protocol":"http","settings":{{"servers":[{{"address":"127.0.0.1","port":{fport},
                  "users":[{{"user":"u","pass":"p"}}]}}]}}}}]}}"#,
            echo.port()
        ),
        &[xport],
    );
    let data = pattern(4 << 20, 33);
    let got = echo_through(TcpStream::connect(("127.0.0.1", xport)).unwrap(), &data);
    assert!(got == data, "bytes differ\n{}\n{}", f.output(), x.output());
}

/// Ferry's HTTP outbound through Xray's HTTP inbound.
#[test]
fn ferry_http_outbound_through_xray_http_inbound() {
    let echo = echo_server();
    let xport = free_port();
    let fport = free_port();
    let x = xray(
        &format!(
            r#"{{"log":{{"loglevel":"warning"}},
              "inbounds":[{{"listen":"127.0.0.1","port":{xport},"protocol":"http",
                "settings":{{"accounts":[{{"user":"u","pass":"p"}}]}}}}],
              "outbounds":[{{"protocol":"freedom",
                "settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8"]}}]}}}}]}}"#
        ),
        &[xport],
    );
    let f = ferry(
        &format!(
            r#"{{"inbounds":[{{"listen":"127.0.0.1","port":{fport},"protocol":"dokodemo-door",
                  "settings":{{"address":"127.0.0.1","port":{}}}}}],
              "outbounds":[{{"protocol":"http","settings":{{"servers":[{{"address":"127.0.0.1","port":{xport},
                  "users":[{{"user":"u","pass":"p"}}]}}]}}}}]}}"#,
            echo.port()
        ),
        &[fport],
    );
    let data = pattern(4 << 20, 34);
    let got = echo_through(TcpStream::connect(("127.0.0.1", fport)).unwrap(), &data);
    assert!(got == data, "bytes differ\n{}\n{}", f.output(), x.output());
}

/// 10 MB echoed through the TCP entry and ten datagrams through the UDP entry, byte-exact;
/// `seeds` pick the TCP and UDP patterns; failures show `who`'s logs.
fn tcp_and_udp_through(tcp: u16, udp: u16, seeds: (u64, u64), who: &[&Proc]) {
    let logs = || {
        who.iter()
            .map(|p| p.output())
            .collect::<Vec<_>>()
            .join("\n")
    };
    let data = pattern(10 << 20, seeds.0);
    let got = echo_through(TcpStream::connect(("127.0.0.1", tcp)).unwrap(), &data);
    assert!(got == data, "tcp bytes differ\n{}", logs());

    // Xray's SOCKS server sends the UDP ASSOCIATE reply before it adds the client to its UDP
    // filter (proxy/socks/server.go), so a datagram sent right after the reply may be dropped
    // as unauthorized: resend after a second of silence, five times at most.
    let u = UdpSocket::bind("127.0.0.1:0").unwrap();
    u.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let to = std::net::SocketAddr::from(([127, 0, 0, 1], udp));
    let mut sent: Vec<Vec<u8>> = Vec::new();
    for i in 0..10usize {
        let msg = pattern(1 + i * 900, seeds.1 + i as u64);
        let got = udp_ask(&u, to, &msg, 5, |d| sent.iter().any(|m| m == d))
            .unwrap_or_else(|| panic!("udp {i}: no echo after 5 tries\n{}", logs()));
        assert!(got == msg, "datagram {i} differs");
        sent.push(msg);
    }
}
