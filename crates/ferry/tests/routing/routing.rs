//! Routing through the real binary: inbound tags, domains, ports pick blackhole or freedom.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::common;
use common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Sends `msg` and reads until EOF (or 10 s); returns what came back.
fn send_and_read_all(port: u16, msg: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(msg).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return got,
            Err(e) => panic!("read from {port}: {e} (got {} bytes so far)", got.len()),
        }
    }
}

fn dokodemo(tag: &str, port: u16, addr: &str, to: u16) -> String {
    format!(
        r#"{{"tag":"{tag}","listen":"127.0.0.1","port":{port},"protocol":"dokodemo-door",
            "settings":{{"address":"{addr}","port":{to}}}}}"#
    )
}

#[test]
fn inbound_tag_picks_blackhole_or_freedom() {
    let echo = echo_server();
    let (pa, pb, ph) = (free_port(), free_port(), free_port());
    let cfg = format!(
        r#"{{"inbounds":[{},{},{}],
            "outbounds":[{{"protocol":"freedom","tag":"direct","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}},
                         {{"protocol":"blackhole","tag":"block"}},
                         {{"protocol":"blackhole","tag":"block-http","settings":{{"response":{{"type":"http"}}}}}}],
            "routing":{{"rules":[
                {{"type":"field","inboundTag":["A"],"outboundTag":"block"}},
                {{"inboundTag":["H"],"outboundTag":"block-http"}},
                {{"inboundTag":["B"],"outboundTag":"direct"}}]}}}}"#,
        dokodemo("A", pa, "127.0.0.1", echo.port()),
        dokodemo("B", pb, "127.0.0.1", echo.port()),
        dokodemo("H", ph, "127.0.0.1", echo.port()),
    );
    let f = ferry(&cfg, &[pa, pb, ph]);
    // B goes direct: the echo comes back.
    let data = pattern(64 * 1024, 3);
    let got = echo_through(TcpStream::connect(("127.0.0.1", pb)).unwrap(), &data);
    assert!(got == data, "echo through B differs\n{}", f.output());
    // A is blackholed: the connection is closed and nothing comes back.
    let got = send_and_read_all(pa, b"hello, anyone?");
    assert!(got.is_empty(), "blackhole returned {got:?}\n{}", f.output());
    // H answers Xray's 403 and closes.
    let got = send_and_read_all(ph, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(
        String::from_utf8_lossy(&got),
        "HTTP/1.1 403 Forbidden\r\nConnection: close\r\nCache-Control: max-age=3600, public\r\nContent-Length: 0\r\n\r\n"
    );
}

/// A rule naming an outbound no outbound has: Ferry starts (with a warning) and closes what
/// the rule matches, as Xray's "non existing outTag" does, instead of sending it to the
/// default outbound; other inbounds are untouched.
#[test]
fn a_rule_naming_no_outbound_closes_what_it_matches() {
    let echo = echo_server();
    let (pa, pb) = (free_port(), free_port());
    let cfg = format!(
        r#"{{"inbounds":[{},{}],
            "outbounds":[{{"protocol":"freedom","tag":"direct","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8"]}}]}}}}],
            "routing":{{"rules":[{{"inboundTag":["A"],"outboundTag":"later"}}]}}}}"#,
        dokodemo("A", pa, "127.0.0.1", echo.port()),
        dokodemo("B", pb, "127.0.0.1", echo.port()),
    );
    let f = ferry(&cfg, &[pa, pb]);
    let got = send_and_read_all(pa, b"to the default outbound?");
    assert!(got.is_empty(), "echoed {got:?}\n{}", f.output());
    let data = pattern(4096, 5);
    let got = echo_through(TcpStream::connect(("127.0.0.1", pb)).unwrap(), &data);
    assert!(got == data, "echo through B differs\n{}", f.output());
    let log = f.output();
    assert!(log.contains("non existing outTag: later"), "{log}");
}

#[test]
fn domain_ip_and_port_rules_and_domain_strategy() {
    let echo = echo_server();
    let other = echo_server();
    let (p1, p2, p3, p4) = (free_port(), free_port(), free_port(), free_port());
    // Default outbound is the blackhole; rules must pick "direct".
    let cfg = format!(
        r#"{{"inbounds":[{},{},{},{}],
            "outbounds":[{{"protocol":"blackhole","tag":"block"}},{{"protocol":"freedom","tag":"direct","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}],
            "routing":{{"domainStrategy":"IPIfNonMatch","rules":[
                {{"domain":["full:localhost"],"port":"{}","outboundTag":"direct"}},
                {{"ip":["127.0.0.0/8"],"port":"{}","outboundTag":"direct"}}]}}}}"#,
        // domain rule: localhost + echo port -> direct
        dokodemo("d", p1, "localhost", echo.port()),
        // IP literal meets the ip rule -> direct
        dokodemo("i", p2, "127.0.0.1", other.port()),
        // a domain resolved by IPIfNonMatch meets the ip rule -> direct
        dokodemo("r", p3, "localhost", other.port()),
        // port not listed -> default blackhole
        dokodemo("n", p4, "127.0.0.1", echo.port()),
        echo.port(),
        other.port(),
    );
    let f = ferry(&cfg, &[p1, p2, p3, p4]);
    for p in [p1, p2, p3] {
        let data = pattern(4096, p as u64);
        let got = echo_through(TcpStream::connect(("127.0.0.1", p)).unwrap(), &data);
        assert!(got == data, "port {p}: echo differs\n{}", f.output());
    }
    let got = send_and_read_all(p4, b"x");
    assert!(got.is_empty(), "default blackhole returned {got:?}");
}

#[test]
fn network_rule_splits_udp_from_tcp() {
    let echo = echo_server();
    let uecho = udp_echo_server();
    let (pt, pu, pu2) = (free_port(), free_port(), free_port());
    let cfg = format!(
        r#"{{"inbounds":[
              {{"tag":"u","listen":"127.0.0.1","port":{pu},"protocol":"dokodemo-door",
                "settings":{{"address":"127.0.0.1","port":{},"network":"udp"}}}},
              {{"tag":"u2","listen":"127.0.0.1","port":{pu2},"protocol":"dokodemo-door",
                "settings":{{"address":"127.0.0.1","port":{},"network":"udp"}}}},
              {{"tag":"t","listen":"127.0.0.1","port":{pt},"protocol":"dokodemo-door",
                "settings":{{"address":"127.0.0.1","port":{},"network":"tcp"}}}}],
            "outbounds":[{{"protocol":"freedom","tag":"direct","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}},{{"protocol":"blackhole","tag":"block"}}],
            "routing":{{"rules":[{{"network":"udp","inboundTag":["u"],"outboundTag":"block"}}]}}}}"#,
        uecho.port(),
        uecho.port(),
        echo.port()
    );
    // Inbounds are bound in order: once the TCP one (last) listens, the UDP ones are bound.
    let f = ferry(&cfg, &[pt]);
    let data = pattern(5000, 1);
    let got = echo_through(TcpStream::connect(("127.0.0.1", pt)).unwrap(), &data);
    assert!(got == data);
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 100];
    // u2 goes direct (proves the UDP path works at all)...
    s.send_to(b"ping", ("127.0.0.1", pu2)).unwrap();
    let (n, _) = s
        .recv_from(&mut buf)
        .unwrap_or_else(|e| panic!("{e}\n{}", f.output()));
    assert_eq!(&buf[..n], b"ping");
    // ...u is blackholed: nothing comes back.
    s.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    for _ in 0..3 {
        s.send_to(b"ping", ("127.0.0.1", pu)).unwrap();
    }
    assert!(
        s.recv_from(&mut buf).is_err(),
        "blackholed UDP got an answer"
    );
}
