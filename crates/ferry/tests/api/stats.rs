//! Stats and metrics through the real binary: counters equal the bytes moved, and are live.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::common;
use common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// GETs `path` from the metrics endpoint with a plain HTTP/1.1 request; returns the body.
fn http_get(port: u16, path: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let (head, body) = resp.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_string()
}

fn vars(port: u16) -> serde_json::Value {
    serde_json::from_str(&http_get(port, "/debug/vars")).unwrap()
}

/// (inbound up, inbound down, outbound up, outbound down) from /debug/vars.
fn counters(port: u16, inb: &str, outb: &str) -> [u64; 4] {
    let v = vars(port);
    let g = |kind: &str, tag: &str, dir: &str| v["stats"][kind][tag][dir].as_u64().unwrap_or(0);
    [
        g("inbound", inb, "uplink"),
        g("inbound", inb, "downlink"),
        g("outbound", outb, "uplink"),
        g("outbound", outb, "downlink"),
    ]
}

/// Polls until the counters equal `want` (the last chunk may be counted just after the client
/// read it); fails with the last values after 10 s.
fn wait_counters(port: u16, want: [u64; 4], f: &Proc) {
    let t = Instant::now();
    loop {
        let got = counters(port, "in", "direct");
        if got == want {
            return;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "counters {got:?}, want {want:?}\n{}",
            f.output()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn config(port: u16, mport: u16, to: u16) -> String {
    format!(
        r#"{{"stats":{{}},
            "policy":{{"system":{{"statsInboundUplink":true,"statsInboundDownlink":true,
                                 "statsOutboundUplink":true,"statsOutboundDownlink":true}}}},
            "metrics":{{"tag":"metrics","listen":"127.0.0.1:{mport}"}},
            "inbounds":[{{"tag":"in","listen":"127.0.0.1","port":{port},"protocol":"dokodemo-door",
                "settings":{{"address":"127.0.0.1","port":{to}}}}}],
            "outbounds":[{{"protocol":"freedom","tag":"direct","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}]}}"#
    )
}

#[test]
fn counters_equal_bytes_moved() {
    let echo = echo_server();
    let (port, mport) = (free_port(), free_port());
    let f = ferry(&config(port, mport, echo.port()), &[port, mport]);
    const N: usize = 10 << 20;
    let data = pattern(N, 11);
    let got = echo_through(TcpStream::connect(("127.0.0.1", port)).unwrap(), &data);
    assert!(got == data, "echo differs");
    let n = N as u64;
    wait_counters(mport, [n, n, n, n], &f);
    let prom = http_get(mport, "/metrics");
    for (kind, tag, dir) in [
        ("inbound", "in", "uplink"),
        ("inbound", "in", "downlink"),
        ("outbound", "direct", "uplink"),
        ("outbound", "direct", "downlink"),
    ] {
        let line = format!(
            "ferry_traffic_bytes_total{{kind=\"{kind}\",tag=\"{tag}\",direction=\"{dir}\"}} {n}\n"
        );
        assert!(prom.contains(&line), "missing {line:?} in\n{prom}");
    }
    // A second connection adds to the same counters.
    let small = pattern(1000, 12);
    let got = echo_through(TcpStream::connect(("127.0.0.1", port)).unwrap(), &small);
    assert!(got == small);
    wait_counters(mport, [n + 1000, n + 1000, n + 1000, n + 1000], &f);
}

#[test]
fn counters_are_live_mid_transfer() {
    // A server that reads everything and answers nothing: the relay stays open.
    let sink = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let sink_port = sink.local_addr().unwrap().port();
    let (tx, rx) = std::sync::mpsc::channel::<TcpStream>();
    // Readiness probes also reach it, so it hands over the connection that carried our bytes.
    std::thread::spawn(move || {
        for s in sink.incoming().flatten() {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let (mut r, mut total, mut sent) = (s.try_clone().unwrap(), 0, Some(s));
                let mut buf = [0u8; 65536];
                while let Ok(n @ 1..) = r.read(&mut buf) {
                    total += n;
                    if total >= 300_000 {
                        if let Some(s) = sent.take() {
                            let _ = tx.send(s);
                        }
                    }
                }
            });
        }
    });
    let (port, mport) = (free_port(), free_port());
    let f = ferry(&config(port, mport, sink_port), &[port, mport]);
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let first = pattern(300_000, 5);
    c.write_all(&first).unwrap();
    // The client now waits; the connection is open and the relay has not finished.
    wait_counters(mport, [300_000, 0, 300_000, 0], &f);
    // The server answers part-way; the downlink is counted while everything is still open.
    let mut server = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    server.write_all(&pattern(12_345, 6)).unwrap();
    let mut back = vec![0u8; 12_345];
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.read_exact(&mut back).unwrap();
    wait_counters(mport, [300_000, 12_345, 300_000, 12_345], &f);
    c.write_all(&first[..1000]).unwrap();
    wait_counters(mport, [301_000, 12_345, 301_000, 12_345], &f);
}

/// SOCKS and HTTP password users count as users (`user>>>NAME>>>traffic>>>...`), with the
/// counters their level's policy asks for.
#[test]
fn socks_and_http_password_users_have_counters() {
    let echo = echo_server();
    let (sport, hport, mport) = (free_port(), free_port(), free_port());
    let cfg = format!(
        r#"{{"stats":{{}},
            "policy":{{"levels":{{"1":{{"statsUserUplink":true,"statsUserDownlink":true}}}}}},
            "metrics":{{"listen":"127.0.0.1:{mport}"}},
            "inbounds":[
              {{"listen":"127.0.0.1","port":{sport},"protocol":"socks",
                "settings":{{"auth":"password","userLevel":1,"accounts":[{{"user":"sam","pass":"pw"}}]}}}},
              {{"listen":"127.0.0.1","port":{hport},"protocol":"http",
                "settings":{{"userLevel":1,"accounts":[{{"user":"hal","pass":"pw"}}]}}}}],
            "outbounds":[{{"protocol":"freedom","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}]}}"#
    );
    let f = ferry(&cfg, &[sport, hport, mport]);
    let data = pattern(300_000, 5);
    let mut s = TcpStream::connect(("127.0.0.1", sport)).unwrap();
    s.write_all(&[5, 1, 2]).unwrap();
    let mut b = [0u8; 2];
    s.read_exact(&mut b).unwrap();
    s.write_all(&[1, 3, b's', b'a', b'm', 2, b'p', b'w'])
        .unwrap();
    s.read_exact(&mut b).unwrap();
    assert_eq!(b, [1, 0]);
    let mut req = vec![5, 1, 0, 1, 127, 0, 0, 1];
    req.extend_from_slice(&echo.port().to_be_bytes());
    s.write_all(&req).unwrap();
    let mut rep = [0u8; 10];
    s.read_exact(&mut rep).unwrap();
    assert!(echo_through(s, &data) == data);
    let mut h = TcpStream::connect(("127.0.0.1", hport)).unwrap();
    // "hal:pw" in base64.
    write!(
        h,
        "CONNECT 127.0.0.1:{p} HTTP/1.1\r\nHost: 127.0.0.1:{p}\r\nProxy-Authorization: Basic aGFsOnB3\r\n\r\n",
        p = echo.port()
    )
    .unwrap();
    let mut head = Vec::new();
    let mut c = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        h.read_exact(&mut c).unwrap();
        head.push(c[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 200"));
    let half = &data[..150_000];
    assert!(echo_through(h, half) == half);
    let n = data.len() as u64;
    let t = Instant::now();
    loop {
        let v = vars(mport);
        let g = |u: &str, d: &str| v["stats"]["user"][u][d].as_u64().unwrap_or(0);
        let got = [
            g("sam", "uplink"),
            g("sam", "downlink"),
            g("hal", "uplink"),
            g("hal", "downlink"),
        ];
        if got == [n, n, n / 2, n / 2] {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "user counters {got:?}\n{}",
            f.output()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
