//! What stands in front of Ferry and what stands behind it, with real peers: nginx `stream`
//! forwarding to Ferry over TCP, a unix socket, and TCP with PROXY protocol (Ferry's access
//! log shows the original client); the report's fallback chain (a Trojan+TLS inbound falling
//! back to a VLESS inbound on a TCP port, a unix socket, `@abstract` and `@@padded`, with an
//! Xray VLESS client sending through the Trojan port); and malformed PROXY headers.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::common;
use common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const ID: &str = "27848739-7e62-4138-9fd3-098a63964b6b";

/// Sends `len` bytes through an echo chain (a small first write, then the rest) and checks
/// they come back unchanged.
fn echo_ok(s: TcpStream, len: usize, seed: u64) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let data = pattern(len, seed);
    let mut w = s.try_clone().unwrap();
    let out = data.clone();
    let t = std::thread::spawn(move || {
        let _ = w.write_all(&out[..100]);
        std::thread::sleep(Duration::from_millis(100));
        let _ = w.write_all(&out[100..]);
    });
    let mut got = vec![0u8; len];
    let mut r = s;
    let ok = r.read_exact(&mut got).is_ok() && got == data;
    let _ = t.join();
    ok
}

/// A TCP connection from a chosen loopback source address.
fn connect_from(src: &str, port: u16) -> TcpStream {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let from: std::net::SocketAddr = format!("{src}:0").parse().unwrap();
    sock.bind(&from.into()).unwrap();
    let to: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    sock.connect(&to.into()).unwrap();
    sock.into()
}

#[test]
fn nginx_stream_in_front_over_tcp_unix_and_proxy_protocol() {
    let d = tempdir::Dir::new("front");
    let echo = echo_server();
    let (f_tcp, f_pp) = (free_port(), free_port());
    let sock = d.path().join("ferry.sock");
    let fwd = |listen: String, extra: &str| {
        format!(
            r#"{{{listen},"protocol":"dokodemo-door","settings":{{"address":"127.0.0.1",
                "port":{},"network":"tcp"}}{extra}}}"#,
            echo.port()
        )
    };
    let cfg = format!(
        r#"{{"log":{{"loglevel":"debug"}},"inbounds":[{},{},{}],"outbounds":[{{"protocol":"freedom","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}]}}"#,
        fwd(format!(r#""listen":"127.0.0.1","port":{f_tcp}"#), ""),
        fwd(format!(r#""listen":"{}""#, sock.display()), ""),
        fwd(
            format!(r#""listen":"127.0.0.1","port":{f_pp}"#),
            r#","streamSettings":{"tcpSettings":{"acceptProxyProtocol":true}}"#
        ),
    );
    let f = ferry(&cfg, &[f_tcp, f_pp]);
    let (a, b, c) = (free_port(), free_port(), free_port());
    let _n = nginx(
        d.path(),
        Nginx::Stream(&format!(
            "server {{ listen 127.0.0.1:{a}; proxy_pass 127.0.0.1:{f_tcp}; }}\n\
             server {{ listen 127.0.0.1:{b}; proxy_pass unix:{}; }}\n\
             server {{ listen 127.0.0.1:{c}; proxy_pass 127.0.0.1:{f_pp}; proxy_protocol on; }}",
            sock.display()
        )),
        &[a, b, c],
    );
    for (i, port) in [a, b, c].into_iter().enumerate() {
        assert!(
            echo_ok(connect_from("127.0.0.9", port), 20 << 20, i as u64),
            "through nginx port {port}\n{}",
            f.output()
        );
    }
    // Behind PROXY protocol Ferry sees (and logs) the client nginx saw.
    let t = Instant::now();
    while !f.output().contains("from 127.0.0.9:") {
        assert!(t.elapsed() < Duration::from_secs(5), "{}", f.output());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn malformed_or_missing_proxy_headers_are_closed_and_logged() {
    let echo = echo_server();
    let port = free_port();
    let cfg = format!(
        r#"{{"log":{{"loglevel":"debug"}},"policy":{{"levels":{{"0":{{"handshake":2}}}}}},
            "inbounds":[{{"listen":"127.0.0.1","port":{port},"protocol":"dokodemo-door",
              "settings":{{"address":"127.0.0.1","port":{},"network":"tcp"}},
              "streamSettings":{{"sockopt":{{"acceptProxyProtocol":true}}}}}}],
            "outbounds":[{{"protocol":"freedom","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}]}}"#,
        echo.port()
    );
    let f = ferry(&cfg, &[port]);
    let sig: &[u8] = &[
        0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A,
    ];
    let closed_unanswered = |bytes: &[u8], close_write: bool| {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(bytes).unwrap();
        if close_write {
            s.shutdown(std::net::Shutdown::Write).unwrap();
        }
        let mut got = Vec::new();
        let _ = s.read_to_end(&mut got);
        got.is_empty()
    };
    // No header at all; a wrong v2 signature; an oversized v2 length; a truncated v2 header
    // (then the client closes); a v1 line that never ends.
    assert!(closed_unanswered(b"hello there, no header\r\n", false));
    let mut wrong = sig.to_vec();
    wrong[3] = 0x0B;
    wrong.extend_from_slice(&[0x21, 0x11, 0, 12, 1, 2, 3, 4, 5, 6, 7, 8, 0, 1, 0, 2]);
    assert!(closed_unanswered(&wrong, false));
    let mut big = sig.to_vec();
    big.extend_from_slice(&[0x21, 0x11, 0xff, 0xff]);
    assert!(closed_unanswered(&big, false));
    let mut cut = sig.to_vec();
    cut.extend_from_slice(&[0x21, 0x11, 0, 12, 1, 2]);
    assert!(closed_unanswered(&cut, true));
    assert!(closed_unanswered(
        &[b'P', b'R', b'O', b'X', b'Y', b' ', b'T', b'C', b'P', b'4', b' ']
            .iter()
            .chain([b'9'; 120].iter())
            .copied()
            .collect::<Vec<u8>>(),
        false
    ));
    // A header that arrives slowly (never completes): closed after the handshake timeout.
    let mut slow = TcpStream::connect(("127.0.0.1", port)).unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    slow.write_all(b"PROXY TCP4 ").unwrap();
    let t = Instant::now();
    let mut b = [0u8; 8];
    assert_eq!(slow.read(&mut b).unwrap_or(0), 0);
    assert!(
        t.elapsed() >= Duration::from_millis(1500),
        "{:?}",
        t.elapsed()
    );
    // A good header still works, and the address in it is the one logged.
    let mut good = TcpStream::connect(("127.0.0.1", port)).unwrap();
    good.write_all(b"PROXY TCP4 198.51.100.4 127.0.0.1 4444 443\r\n")
        .unwrap();
    assert!(echo_ok(good, 1 << 20, 5));
    let t = Instant::now();
    while !f.output().contains("198.51.100.4:4444") {
        assert!(t.elapsed() < Duration::from_secs(5), "{}", f.output());
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = f.output();
    assert!(out.contains("not a PROXY protocol header"), "{out}");
    assert!(out.contains("PROXY v2 header too long"), "{out}");
    assert!(out.contains("PROXY v1 line too long"), "{out}");
}

fn ferry_cert(dir: &Path) -> (String, String, String) {
    let prefix = dir.join("srv");
    let out = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(["tls", "cert", "--domain", "ferry.test", "--file"])
        .arg(&prefix)
        .output()
        .unwrap();
    assert!(out.status.success());
    let p = prefix.to_str().unwrap();
    (
        format!("{p}.crt"),
        format!("{p}.key"),
        String::from_utf8(out.stdout).unwrap().trim().to_string(),
    )
}

#[test]
fn trojan_falls_back_to_vless_over_tcp_unix_abstract_and_padded() {
    let d = tempdir::Dir::new("fbchain");
    let c = ferry_cert(d.path());
    let echo = echo_server();
    let n = std::process::id();
    let vless_port = free_port();
    let modes = [
        format!(r#""listen":"127.0.0.1","port":{vless_port}"#),
        format!(r#""listen":"{}""#, d.path().join("vless.sock").display()),
        format!(r#""listen":"@ferry-vless-{n}""#),
        format!(r#""listen":"@@ferry-vless-pad-{n}""#),
    ];
    let dests = [
        vless_port.to_string(),
        format!("\"{}\"", d.path().join("vless.sock").display()),
        format!("\"@ferry-vless-{n}\""),
        format!("\"@@ferry-vless-pad-{n}\""),
    ];
    let trojan_ports: Vec<u16> = (0..4).map(|_| free_port()).collect();
    let mut inbounds = Vec::new();
    for (i, m) in modes.iter().enumerate() {
        inbounds.push(format!(
            r#"{{{m},"protocol":"vless","settings":{{"clients":[{{"id":"{ID}"}}],"decryption":"none"}}}}"#
        ));
        inbounds.push(format!(
            r#"{{"listen":"127.0.0.1","port":{},"protocol":"trojan",
                "settings":{{"clients":[{{"password":"not used here"}}],"fallbacks":[{{"dest":{}}}]}},
                "streamSettings":{{"security":"tls","tlsSettings":{{"alpn":["http/1.1"],
                  "certificates":[{{"certificateFile":"{}","keyFile":"{}"}}]}}}}}}"#,
            trojan_ports[i], dests[i], c.0, c.1
        ));
    }
    let server = format!(
        r#"{{"log":{{"loglevel":"info"}},"inbounds":[{}],"outbounds":[{{"protocol":"freedom","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}]}}"#,
        inbounds.join(",")
    );
    let f = ferry(&server, &trojan_ports);
    // An Xray VLESS+TLS client per Trojan port.
    let entries: Vec<u16> = (0..4).map(|_| free_port()).collect();
    let mut ins = Vec::new();
    let mut outs = Vec::new();
    let mut rules = Vec::new();
    for i in 0..4 {
        ins.push(format!(
            r#"{{"tag":"e{i}","listen":"127.0.0.1","port":{},"protocol":"dokodemo-door",
                "settings":{{"address":"127.0.0.1","port":{},"network":"tcp"}}}}"#,
            entries[i],
            echo.port()
        ));
        outs.push(format!(
            r#"{{"tag":"o{i}","protocol":"vless","settings":{{"vnext":[{{"address":"127.0.0.1",
                "port":{},"users":[{{"id":"{ID}","encryption":"none"}}]}}]}},
                "streamSettings":{{"security":"tls","tlsSettings":{{"serverName":"ferry.test",
                  "pinnedPeerCertSha256":"{}"}}}}}}"#,
            trojan_ports[i], c.2
        ));
        rules.push(format!(r#"{{"inboundTag":["e{i}"],"outboundTag":"o{i}"}}"#));
    }
    let client = format!(
        r#"{{"log":{{"loglevel":"warning"}},"inbounds":[{}],"outbounds":[{}],"routing":{{"rules":[{}]}}}}"#,
        ins.join(","),
        outs.join(","),
        rules.join(",")
    );
    let x = spawn_with_config(&peer("xray"), "xray", &client, &["run", "-c", "{config}"]);
    for e in &entries {
        wait_listening(*e, &x);
    }
    for (i, e) in entries.iter().enumerate() {
        let s = TcpStream::connect(("127.0.0.1", *e)).unwrap();
        assert!(
            echo_ok(s, 50 << 20, i as u64 + 11),
            "mode {i}\n{}\n{}",
            f.output(),
            x.output()
        );
    }
    // Each VLESS inbound is this Ferry's own: every fallback went to it in-process.
    let log = f.output();
    assert_eq!(log.matches("(in-process)").count(), 4, "{log}");
}
