//! SOCKS5/SOCKS4a/HTTP inbounds and the socks/http outbounds, Ferry against itself: bytes
//! through, byte-exact, TCP and UDP.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::common;
use crate::proxy_clients;
use common::*;
use proxy_clients::*;

use std::io::{Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::time::Duration;

fn socks_server(port: u16, settings: &str, extra: &str) -> String {
    format!(
        r#"{{"inbounds":[{{"tag":"socks-in","listen":"127.0.0.1","port":{port},"protocol":"socks",
            "settings":{settings}}}],
            "outbounds":[{{"protocol":"freedom","tag":"direct","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}]{extra}}}"#
    )
}

#[test]
fn socks5_noauth_tcp_byte_exact() {
    let echo = echo_server();
    let port = free_port();
    let _f = ferry(&socks_server(port, r#"{"auth":"noauth"}"#, ""), &[port]);
    let s = socks5_connect(port, None, Target::Addr(echo)).unwrap();
    let data = pattern(1 << 20, 1);
    assert!(echo_through(s, &data) == data);
    // A domain destination is resolved by the outbound.
    let s = socks5_connect(port, None, Target::Host("localhost", echo.port())).unwrap();
    let data = pattern(100_000, 2);
    assert!(echo_through(s, &data) == data);
}

#[test]
fn socks5_password_and_user_in_access_log() {
    let echo = echo_server();
    let port = free_port();
    let dir = tempdir::Dir::new("access");
    let access = dir.path().join("access.log");
    let f = ferry(
        &socks_server(
            port,
            r#"{"auth":"password","accounts":[{"user":"alice","pass":"s3cret"}],"userLevel":0}"#,
            &format!(r#","log":{{"access":{:?}}}"#, access.to_str().unwrap()),
        ),
        &[port],
    );
    let s = socks5_connect(port, Some(("alice", "s3cret")), Target::Addr(echo)).unwrap();
    let data = pattern(300_000, 3);
    assert!(echo_through(s, &data) == data);

    // Wrong password: 01 FF, then the connection closes.
    let err = socks5_connect(port, Some(("alice", "wrong")), Target::Addr(echo)).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied, "{err}");
    // Unknown user likewise.
    assert!(socks5_connect(port, Some(("bob", "s3cret")), Target::Addr(echo)).is_err());
    // Offering only "no auth" to a password inbound: 05 FF.
    let mut s = connect(port);
    s.write_all(&[5, 1, 0]).unwrap();
    let mut r = [0u8; 2];
    s.read_exact(&mut r).unwrap();
    assert_eq!(r, [5, 0xff]);
    assert_eq!(s.read(&mut r).unwrap_or(0), 0, "connection must close");
    // SOCKS4 has no password: refused on a password inbound.
    assert_eq!(
        socks4_connect(port, [127, 0, 0, 1], echo.port(), None).unwrap_err(),
        0x5b
    );

    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let log = std::fs::read_to_string(&access).unwrap_or_default();
        if log.contains("email: alice") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "access log lacks the user: {log:?}\n{}",
            f.output()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn socks5_udp_associate_round_trip() {
    let echo = udp_echo_server();
    let port = free_port();
    let _f = ferry(
        &socks_server(port, r#"{"auth":"noauth","udp":true,"ip":"127.0.0.1"}"#, ""),
        &[port],
    );
    let (ctrl, relay, u) = socks5_udp(port, None);
    assert_eq!(relay.ip().to_string(), "127.0.0.1");
    let mut buf = vec![0u8; 70_000];
    for i in 0..20usize {
        let msg = pattern(10 + i * 700, i as u64);
        u.send_to(&udp_packet(echo, &msg), relay).unwrap();
        let (n, from) = u.recv_from(&mut buf).unwrap();
        assert_eq!(from, relay);
        // The reply carries the echo server's address in the SOCKS5 UDP header.
        assert_eq!(&buf[..10], &udp_packet(echo, &[])[..]);
        assert!(buf[10..n] == msg[..], "datagram {i} differs");
    }
    // Fragments are dropped, the association carries on.
    let mut frag = udp_packet(echo, b"frag");
    frag[2] = 1;
    u.send_to(&frag, relay).unwrap();
    u.send_to(&udp_packet(echo, b"after"), relay).unwrap();
    let (n, _) = u.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[10..n], b"after");

    // The association ends with its control connection.
    drop(ctrl);
    std::thread::sleep(Duration::from_millis(300));
    u.set_read_timeout(Some(Duration::from_millis(700)))
        .unwrap();
    u.send_to(&udp_packet(echo, b"late"), relay).unwrap();
    assert!(
        u.recv_from(&mut buf).is_err(),
        "relay still answers after close"
    );
}

#[test]
fn socks5_udp_refused_when_disabled() {
    let port = free_port();
    let _f = ferry(&socks_server(port, r#"{}"#, ""), &[port]);
    let mut s = socks5_auth(port, None).unwrap();
    s.write_all(&[5, 3, 0, 1, 0, 0, 0, 0, 0, 0]).unwrap();
    let (rep, _) = read_reply(&mut s).unwrap();
    assert_eq!(rep, 7);
    // BIND is not supported either.
    let mut s = socks5_auth(port, None).unwrap();
    s.write_all(&[5, 2, 0, 1, 127, 0, 0, 1, 0, 80]).unwrap();
    assert_eq!(read_reply(&mut s).unwrap().0, 7);
}

#[test]
fn socks4_and_socks4a() {
    let echo = echo_server();
    let port = free_port();
    let _f = ferry(&socks_server(port, r#"{"auth":"noauth"}"#, ""), &[port]);
    let s = socks4_connect(port, [127, 0, 0, 1], echo.port(), None).unwrap();
    let data = pattern(200_000, 4);
    assert!(echo_through(s, &data) == data);
    let s = socks4_connect(port, [0, 0, 0, 1], echo.port(), Some("localhost")).unwrap();
    let data = pattern(200_000, 5);
    assert!(echo_through(s, &data) == data);
}

fn http_server(port: u16, settings: &str) -> String {
    format!(
        r#"{{"inbounds":[{{"tag":"http-in","listen":"127.0.0.1","port":{port},"protocol":"http",
            "settings":{settings}}}],
            "outbounds":[{{"protocol":"freedom","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}]}}"#
    )
}

#[test]
fn http_connect_with_basic_auth() {
    let echo = echo_server();
    let port = free_port();
    let _f = ferry(
        &http_server(port, r#"{"accounts":[{"user":"user","pass":"pass"}]}"#),
        &[port],
    );
    // Missing and wrong credentials: 407 with a challenge.
    for auth in [None, Some("dXNlcjp3cm9uZw==")] {
        let head = http_connect(port, echo, auth).unwrap_err();
        assert!(head.starts_with("HTTP/1.1 407"), "{head}");
        assert!(head.contains("Proxy-Authenticate: Basic"), "{head}");
    }
    let s = http_connect(port, echo, Some("dXNlcjpwYXNz")).unwrap();
    let data = pattern(1 << 20, 6);
    assert!(echo_through(s, &data) == data);
}

#[test]
fn http_connect_forwards_bytes_sent_with_the_head() {
    let echo = echo_server();
    let port = free_port();
    let _f = ferry(&http_server(port, "{}"), &[port]);
    let mut s = connect(port);
    // The first payload rides in the same segment as the request head.
    write!(
        s,
        "CONNECT {echo} HTTP/1.1\r\nHost: {echo}\r\n\r\nearly-bytes"
    )
    .unwrap();
    let head = read_head(&mut s).unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut got = [0u8; 11];
    s.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"early-bytes");
}

#[test]
fn http_forward_proxy_rewrites_to_origin_form() {
    let origin = http_origin();
    let port = free_port();
    let _f = ferry(&http_server(port, "{}"), &[port]);
    let o = origin.addr;
    let mut s = connect(port);
    write!(
        s,
        "POST http://{o}/submit?x=1 HTTP/1.1\r\nHost: {o}\r\nUser-Agent: ferry-test\r\n\
         Proxy-Connection: keep-alive\r\nX-Custom:  kept  as is \r\nContent-Length: 5\r\n\r\nhello"
    )
    .unwrap();
    let resp = read_to_end(s);
    assert!(resp.starts_with("HTTP/1.1 200 OK"), "{resp}");
    assert!(resp.ends_with("path=/submit?x=1 body=hello"), "{resp}");
    let seen = origin.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0],
        format!(
            "POST /submit?x=1 HTTP/1.1\r\nHost: {o}\r\nUser-Agent: ferry-test\r\n\
             X-Custom:  kept  as is \r\nContent-Length: 5\r\nConnection: close\r\n\r\n"
        )
    );

    // Origin-form requests are refused unless allowTransparent is set.
    let mut s = connect(port);
    write!(s, "GET / HTTP/1.1\r\nHost: {o}\r\n\r\n").unwrap();
    assert!(read_to_end(s).starts_with("HTTP/1.1 400"));
}

#[test]
fn http_allow_transparent_uses_host() {
    let origin = http_origin();
    let port = free_port();
    let _f = ferry(&http_server(port, r#"{"allowTransparent":true}"#), &[port]);
    let mut s = connect(port);
    write!(s, "GET /plain HTTP/1.1\r\nHost: {}\r\n\r\n", origin.addr).unwrap();
    let resp = read_to_end(s);
    assert!(resp.ends_with("path=/plain body="), "{resp}");
}

#[test]
fn mixed_port_serves_socks5_socks4_and_http() {
    let echo = echo_server();
    let origin = http_origin();
    let port = free_port();
    let cfg = format!(
        r#"{{"inbounds":[{{"listen":"127.0.0.1","port":{port},"protocol":"mixed",
            "settings":{{"auth":"noauth","udp":true}}}}],"outbounds":[{{"protocol":"direct"}}]}}"#
    );
    let _f = ferry(&cfg, &[port]);
    let data = pattern(50_000, 8);
    let s = socks5_connect(port, None, Target::Addr(echo)).unwrap();
    assert!(echo_through(s, &data) == data);
    let s = socks4_connect(port, [127, 0, 0, 1], echo.port(), None).unwrap();
    assert!(echo_through(s, &data) == data);
    let s = http_connect(port, echo, None).unwrap();
    assert!(echo_through(s, &data) == data);
    let mut s = connect(port);
    write!(s, "GET http://{}/m HTTP/1.1\r\n\r\n", origin.addr).unwrap();
    assert!(read_to_end(s).ends_with("path=/m body="));
    // A connect-and-close health check is fine, and the port keeps serving.
    drop(TcpStream::connect(("127.0.0.1", port)).unwrap());
    let s = socks5_connect(port, None, Target::Addr(echo)).unwrap();
    assert!(echo_through(s, &data) == data);
}

#[test]
fn mixed_with_password_asks_http_clients_for_credentials() {
    let echo = echo_server();
    let port = free_port();
    let _f = ferry(
        &socks_server(
            port,
            r#"{"auth":"password","accounts":[{"user":"user","pass":"pass"}]}"#,
            "",
        ),
        &[port],
    );
    let head = http_connect(port, echo, None).unwrap_err();
    assert!(head.starts_with("HTTP/1.1 407"), "{head}");
    let s = http_connect(port, echo, Some("dXNlcjpwYXNz")).unwrap();
    let data = pattern(10_000, 9);
    assert!(echo_through(s, &data) == data);
}

/// Ferry A (dokodemo -> socks outbound) -> Ferry B (socks inbound -> freedom).
#[test]
fn chain_socks_outbound_to_socks_inbound_100mb() {
    let echo = echo_server();
    let uecho = udp_echo_server();
    let b_port = free_port();
    let a_port = free_port();
    let a_udp = free_port();
    let _b = ferry(
        &socks_server(
            b_port,
            r#"{"auth":"password","accounts":[{"user":"u","pass":"p"}],"udp":true,"ip":"127.0.0.1"}"#,
            "",
        ),
        &[b_port],
    );
    let a_cfg = format!(
        r#"{{"inbounds":[
              {{"listen":"127.0.0.1","port":{a_port},"protocol":"dokodemo-door",
                "settings":{{"address":"127.0.0.1","port":{},"network":"tcp"}}}},
              {{"listen":"127.0.0.1","port":{a_udp},"protocol":"dokodemo-door",
                "settings":{{"address":"127.0.0.1","port":{},"network":"udp"}}}}],
            "outbounds":[{{"protocol":"socks","settings":{{"servers":[{{"address":"127.0.0.1","port":{b_port},
                "users":[{{"user":"u","pass":"p"}}]}}]}}}}]}}"#,
        echo.port(),
        uecho.port()
    );
    let _a = ferry(&a_cfg, &[a_port]);
    let data = pattern(100 << 20, 10);
    let got = echo_through(TcpStream::connect(("127.0.0.1", a_port)).unwrap(), &data);
    assert!(got.len() == data.len() && got == data, "100 MB differ");

    // UDP through the chain: socks outbound UDP ASSOCIATE -> socks inbound relay.
    let u = UdpSocket::bind("127.0.0.1:0").unwrap();
    u.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = vec![0u8; 65536];
    for i in 0..10usize {
        let msg = pattern(1 + i * 1000, 20 + i as u64);
        u.send_to(&msg, ("127.0.0.1", a_udp)).unwrap();
        let (n, _) = u.recv_from(&mut buf).unwrap();
        assert!(buf[..n] == msg[..], "datagram {i} differs");
    }
}

/// Ferry A (dokodemo -> http outbound with auth and headers) -> Ferry B (http inbound).
#[test]
fn chain_http_outbound_to_http_inbound() {
    let echo = echo_server();
    let b_port = free_port();
    let a_port = free_port();
    let _b = ferry(
        &http_server(b_port, r#"{"accounts":[{"user":"user","pass":"pass"}]}"#),
        &[b_port],
    );
    let a_cfg = format!(
        r#"{{"inbounds":[{{"listen":"127.0.0.1","port":{a_port},"protocol":"dokodemo-door",
                "settings":{{"address":"127.0.0.1","port":{}}}}}],
            "outbounds":[{{"protocol":"http","settings":{{"servers":[{{"address":"127.0.0.1","port":{b_port},
                "users":[{{"user":"user","pass":"pass"}}]}}],"headers":{{"X-Via":"ferry"}}}}}}]}}"#,
        echo.port()
    );
    let _a = ferry(&a_cfg, &[a_port]);
    let data = pattern(5 << 20, 11);
    let got = echo_through(TcpStream::connect(("127.0.0.1", a_port)).unwrap(), &data);
    assert!(got == data);
}

#[test]
fn default_config_is_a_valid_mixed_inbound() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(["run", "--test"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("Configuration OK"), "{text}");
}

#[test]
fn example_configs_are_valid() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    for name in ["socks.json", "http.json", "chain-socks.json"] {
        let p = root.join(name);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_ferry"))
            .args(["test", "-c", p.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{name}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
