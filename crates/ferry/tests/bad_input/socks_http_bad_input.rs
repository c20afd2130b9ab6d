//! Bad input on the socks/mixed and http inbounds: truncated and garbled handshakes, silent
//! clients, huge headers. Each gets a clean close (with the protocol's error reply where there
//! is one), within the handshake timeout, while good connections keep working.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::common;
use crate::proxy_clients;
use common::*;
use proxy_clients::*;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Sends `bytes` (then half-closes when `eof`), and reads until the server closes. Fails if the
/// server keeps the connection open past 10 s. Returns what the server sent.
fn send_expect_close(port: u16, bytes: &[u8], eof: bool) -> Vec<u8> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut w = s.try_clone().unwrap();
    let data = bytes.to_vec();
    // Written on a thread: the server may stop reading (and reset) before a big write ends.
    let writer = std::thread::spawn(move || {
        let _ = w.write_all(&data);
        if eof {
            let _ = w.shutdown(std::net::Shutdown::Write);
        }
    });
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::TimedOut => {
                panic!(
                    "server kept the connection open after {:?}…",
                    &bytes[..bytes.len().min(16)]
                )
            }
            Err(_) => break, // reset: closed too
        }
    }
    let _ = writer.join();
    got
}

fn config(socks: u16, http: u16) -> String {
    format!(
        r#"{{"policy":{{"levels":{{"0":{{"handshake":1}}}}}},
          "inbounds":[
            {{"tag":"socks","listen":"127.0.0.1","port":{socks},"protocol":"socks",
              "settings":{{"auth":"password","accounts":[{{"user":"u","pass":"p"}}],"udp":true}}}},
            {{"tag":"http","listen":"127.0.0.1","port":{http},"protocol":"http","settings":{{}}}}],
          "outbounds":[{{"protocol":"freedom","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}]}}"#
    )
}

fn good_connection(port: u16, echo: SocketAddr, seed: u64) {
    let s = socks5_connect(port, Some(("u", "p")), Target::Addr(echo)).unwrap();
    let data = pattern(200_000, seed);
    assert!(echo_through(s, &data) == data, "good connection broken");
}

#[test]
fn garbled_and_truncated_handshakes_close_cleanly() {
    let echo = echo_server();
    let socks = free_port();
    let http = free_port();
    let mut f = ferry(&config(socks, http), &[socks, http]);

    // Silent clients (nothing at all, or one byte) held open while everything else runs.
    let silent: Vec<_> = [
        (socks, &b""[..]),
        (socks, &b"\x05"[..]),
        (http, &b""[..]),
        (http, &b"GET "[..]),
    ]
    .into_iter()
    .map(|(port, first)| {
        let first = first.to_vec();
        std::thread::spawn(move || {
            let t = Instant::now();
            send_expect_close(port, &first, false);
            t.elapsed()
        })
    })
    .collect();

    let auth_ok: &[u8] = b"\x05\x01\x02\x01\x01u\x01p";
    let with_auth = |rest: &[u8]| {
        let mut v = auth_ok.to_vec();
        v.extend_from_slice(rest);
        v
    };
    let mut socks4_huge = vec![4u8, 1, 0, 80, 127, 0, 0, 1];
    socks4_huge.extend(std::iter::repeat_n(b'a', 1 << 20));
    let mut garbage = vec![5u8, 255];
    garbage.extend(pattern(100_000, 77));
    let cases: Vec<(&str, u16, Vec<u8>, &[u8])> = vec![
        ("truncated greeting", socks, b"\x05\x01".to_vec(), b""),
        ("no methods", socks, b"\x05\x00".to_vec(), b""),
        ("greeting then garbage", socks, garbage, b""),
        (
            "truncated user/pass",
            socks,
            b"\x05\x01\x02\x01\x05ab".to_vec(),
            b"\x05\x02",
        ),
        (
            "wrong password",
            socks,
            b"\x05\x01\x02\x01\x01u\x01x".to_vec(),
            b"\x05\x02\x01\xff",
        ),
        (
            "bad address type",
            socks,
            with_auth(b"\x05\x01\x00\x09\x00\x00"),
            b"\x05\x02\x01\x00\x05\x08",
        ),
        (
            "empty domain",
            socks,
            with_auth(b"\x05\x01\x00\x03\x00\x00\x50"),
            b"\x05\x02\x01\x00",
        ),
        (
            "truncated request",
            socks,
            with_auth(b"\x05\x01\x00\x03\x20abc"),
            b"\x05\x02\x01\x00",
        ),
        (
            "socks4 on a password inbound",
            socks,
            b"\x04\x01\x00\x50\x7f\x00\x00\x01\x00".to_vec(),
            b"\x00\x5b",
        ),
        ("socks4 1 MB user id", socks, socks4_huge, b""),
        (
            "http garbage on mixed",
            socks,
            b"\x00\x01\x02\r\n\r\n".to_vec(),
            b"HTTP/1.1 400",
        ),
        (
            "http no target",
            http,
            b"GET\r\n\r\n".to_vec(),
            b"HTTP/1.1 400",
        ),
        (
            "http bad authority",
            http,
            b"CONNECT [zz]:80 HTTP/1.1\r\n\r\n".to_vec(),
            b"HTTP/1.1 400",
        ),
        (
            "http bad header line",
            http,
            b"GET http://a/ HTTP/1.1\r\nnocolon\r\n\r\n".to_vec(),
            b"HTTP/1.1 400",
        ),
        (
            "http truncated head",
            http,
            b"CONNECT a:1 HTTP/1.1\r\nHo".to_vec(),
            b"",
        ),
        ("http binary", http, pattern(5000, 3), b""),
    ];
    for (i, (name, port, bytes, reply_prefix)) in cases.into_iter().enumerate() {
        let got = send_expect_close(port, &bytes, true);
        assert!(
            got.starts_with(reply_prefix),
            "{name}: got {:02x?}",
            &got[..got.len().min(40)]
        );
        good_connection(socks, echo, i as u64);
    }

    // A 1 MB header never ends: 431 (or a reset while we still write), then close.
    for port in [http, socks] {
        let mut huge = b"GET http://a/ HTTP/1.1\r\nX-Big: ".to_vec();
        huge.extend(std::iter::repeat_n(b'x', 1 << 20));
        let got = send_expect_close(port, &huge, false);
        assert!(
            got.is_empty() || got.starts_with(b"HTTP/1.1 431"),
            "{:?}",
            String::from_utf8_lossy(&got)
        );
        good_connection(socks, echo, 100);
    }

    for (i, h) in silent.into_iter().enumerate() {
        let took = h.join().unwrap();
        // Closed by the 1 s handshake timeout, not by anything the client did.
        assert!(
            took >= Duration::from_millis(800),
            "silent client {i} closed after {took:?}"
        );
    }
    good_connection(socks, echo, 200);
    assert!(
        f.child.try_wait().unwrap().is_none(),
        "ferry exited\n{}",
        f.output()
    );
    assert!(!f.output().contains("panicked"), "{}", f.output());
}

/// A half-open flood: hundreds of connections that send nothing or stop mid-greeting. Good
/// connections keep flowing while they are held, and every flood connection is closed by the
/// handshake timeout.
#[test]
fn half_open_flood_is_timed_out_and_good_connections_flow() {
    let echo = echo_server();
    let socks = free_port();
    let http = free_port();
    let _f = ferry(&config(socks, http), &[socks, http]);
    let mut flood = Vec::new();
    for i in 0..400 {
        let mut s =
            TcpStream::connect(("127.0.0.1", if i % 2 == 0 { socks } else { http })).unwrap();
        match i % 4 {
            0 => {}
            1 => s.write_all(b"CONNECT ").unwrap(),
            2 => s.write_all(b"\x05\x02\x00").unwrap(),
            _ => s.write_all(b"GET http://x/ HTTP/1.1\r\nHost").unwrap(),
        }
        flood.push(s);
    }
    for seed in 0..5 {
        good_connection(socks, echo, seed);
    }
    let t = Instant::now();
    for mut s in flood {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = [0u8; 512];
        loop {
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(_) => continue, // an error reply, then the close
                Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::TimedOut => {
                    panic!("a flood connection was still open after {:?}", t.elapsed())
                }
                Err(_) => break,
            }
        }
    }
    good_connection(socks, echo, 99);
}
