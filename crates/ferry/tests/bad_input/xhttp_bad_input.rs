//! Requests an XHTTP server must refuse, answered with the status codes Xray's `hub.go` gives
//! (404 path/host, 400 padding or mode, 409 a second stream-up, 413 an oversized packet, 500
//! a bad or out-of-window sequence number), the 30 s reaper for a session whose GET never
//! comes, and the session table back at zero: each followed by a good client served, so a
//! bad request never hurts another.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::common;
use common::*;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

const ID: &str = "4c4f7e2a-7d7b-4b43-9d0f-6f1d8b3c2a10";
const SID: &str = "0b1ad2f4-54b1-4a6e-8d0e-3f0e8c1f2a3b";

struct Setup {
    server: Proc,
    _client: Proc,
    port: u16,
    entry: u16,
}

fn setup(extra: &str) -> Setup {
    let port = free_port();
    let entry = free_port();
    let echo = echo_server();
    let server = ferry(
        &format!(
            r#"{{"log":{{"loglevel":"debug"}},
            "inbounds":[{{"listen":"127.0.0.1","port":{port},"protocol":"vless",
              "settings":{{"clients":[{{"id":"{ID}"}}],"decryption":"none"}},
              "streamSettings":{{"network":"xhttp","xhttpSettings":{{"path":"/xh"{extra}}}}}}}],
            "outbounds":[{{"protocol":"freedom","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}]}}"#
        ),
        &[port],
    );
    let client = ferry(
        &format!(
            r#"{{"inbounds":[{{"listen":"127.0.0.1","port":{entry},"protocol":"dokodemo-door",
              "settings":{{"address":"127.0.0.1","port":{},"network":"tcp"}}}}],
            "outbounds":[{{"protocol":"vless","settings":{{"vnext":[{{"address":"127.0.0.1","port":{port},
              "users":[{{"id":"{ID}","encryption":"none"}}]}}]}},
              "streamSettings":{{"network":"xhttp","xhttpSettings":{{"path":"/xh","mode":"packet-up"{extra}}}}}}}]}}"#,
            echo.port()
        ),
        &[entry],
    );
    Setup {
        server,
        _client: client,
        port,
        entry,
    }
}

/// Sends `req` on a fresh connection; the status code of the answer (0: none).
fn status(port: u16, req: &[u8]) -> u16 {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(req).unwrap();
    let mut buf = [0u8; 1024];
    let mut got = Vec::new();
    while !got.windows(2).any(|w| w == b"\r\n") {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    let line = String::from_utf8_lossy(&got);
    line.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

fn referer(n: usize) -> String {
    format!("Referer: http://h.test/xh/?x_padding={}\r\n", "X".repeat(n))
}

fn req(method: &str, path: &str, pad: usize, extra: &str, body: &[u8]) -> Vec<u8> {
    let mut r = format!(
        "{method} {path} HTTP/1.1\r\nHost: h.test\r\n{}Content-Length: {}\r\n{extra}\r\n",
        if pad > 0 { referer(pad) } else { String::new() },
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    r
}

fn good_client_served(s: &Setup) {
    let data = pattern(2 << 20, 7);
    let c = TcpStream::connect(("127.0.0.1", s.entry)).unwrap();
    assert!(
        echo_through(c, &data) == data,
        "a good client after the bad requests\n{}",
        s.server.output()
    );
}

/// Waits until the server's log has `needle`; the time it took.
fn wait_log(p: &Proc, needle: &str, within: Duration) -> Duration {
    let t = Instant::now();
    loop {
        if p.output().contains(needle) {
            return t.elapsed();
        }
        assert!(
            t.elapsed() < within,
            "no {needle:?} in the log within {within:?}\n{}",
            p.output()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn refused_requests_get_xrays_status_codes() {
    let s = setup(r#","scMaxEachPostBytes":100000"#);
    let p = s.port;
    assert_eq!(status(p, &req("GET", "/other/", 300, "", b"")), 404);
    assert_eq!(status(p, &req("GET", "/xh", 300, "", b"")), 404);
    // Padding missing, too short, too long.
    assert_eq!(
        status(p, &req("GET", &format!("/xh/{SID}"), 0, "", b"")),
        400
    );
    assert_eq!(
        status(p, &req("GET", &format!("/xh/{SID}"), 50, "", b"")),
        400
    );
    assert_eq!(
        status(p, &req("GET", &format!("/xh/{SID}"), 2000, "", b"")),
        400
    );
    // A sequence number that is not one.
    assert_eq!(
        status(p, &req("POST", &format!("/xh/{SID}/x7"), 300, "", b"abc")),
        500
    );
    // A packet over scMaxEachPostBytes: by its Content-Length, and chunked without one.
    assert_eq!(
        status(
            p,
            &req("POST", &format!("/xh/{SID}/0"), 300, "", &[7u8; 100_001])
        ),
        413
    );
    let mut chunked = format!(
        "POST /xh/{SID}/0 HTTP/1.1\r\nHost: h.test\r\n{}Transfer-Encoding: chunked\r\n\r\n",
        referer(300)
    )
    .into_bytes();
    for _ in 0..3 {
        chunked.extend_from_slice(b"9C40\r\n");
        chunked.extend_from_slice(&[1u8; 40_000]);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    assert_eq!(status(p, &chunked), 413);
    // CORS preflight.
    assert_eq!(
        status(
            p,
            b"OPTIONS /xh/ HTTP/1.1\r\nHost: h.test\r\nOrigin: https://a.test\r\n\r\n"
        ),
        200
    );
    // Not HTTP at all, and a header block over serverMaxHeaderBytes: closed or refused,
    // never served.
    let garbage = pattern(4096, 3);
    assert!(![200u16].contains(&status(p, &garbage)));
    let huge = format!(
        "GET /xh/{SID} HTTP/1.1\r\nHost: h.test\r\n{}X-Big: {}\r\n\r\n",
        referer(300),
        "a".repeat(200_000)
    );
    assert_ne!(status(p, huge.as_bytes()), 200);
    good_client_served(&s);
}

#[test]
fn a_second_stream_up_is_refused_with_409() {
    let s = setup("");
    let p = s.port;
    // The first stream-up POST stays open (chunked body never ended).
    let mut first = TcpStream::connect(("127.0.0.1", p)).unwrap();
    first
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    first
        .write_all(
            format!(
                "POST /xh/{SID} HTTP/1.1\r\nHost: h.test\r\n{}Transfer-Encoding: chunked\r\n\r\n",
                referer(300)
            )
            .as_bytes(),
        )
        .unwrap();
    let mut buf = [0u8; 64];
    let n = first.read(&mut buf).unwrap();
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&buf[..n])
    );
    let second = format!(
        "POST /xh/{SID} HTTP/1.1\r\nHost: h.test\r\n{}Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        referer(300)
    );
    assert_eq!(status(p, second.as_bytes()), 409);
    // So is a second GET of one session.
    let mut get = TcpStream::connect(("127.0.0.1", p)).unwrap();
    get.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    get.write_all(&req("GET", &format!("/xh/{SID}"), 300, "", b""))
        .unwrap();
    let n = get.read(&mut buf).unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    assert_eq!(
        status(p, &req("GET", &format!("/xh/{SID}"), 300, "", b"")),
        409
    );
    drop((first, get));
    good_client_served(&s);
}

#[test]
fn packets_too_far_ahead_end_their_session() {
    let s = setup(r#","scMaxBufferedPosts":5"#);
    let p = s.port;
    // Packet 0 never comes: five wait, the sixth overflows the reorder buffer.
    for seq in 1..=5 {
        assert_eq!(
            status(p, &req("POST", &format!("/xh/{SID}/{seq}"), 300, "", b"x")),
            200,
            "packet {seq}"
        );
    }
    assert_eq!(
        status(p, &req("POST", &format!("/xh/{SID}/99"), 300, "", b"x")),
        500
    );
    wait_log(
        &s.server,
        "too many packets out of order",
        Duration::from_secs(5),
    );
    wait_log(&s.server, "(0 open)", Duration::from_secs(5));
    good_client_served(&s);
}

/// Sessions that never GET, each holding as many packets as it may (30 of 1 MB): past the
/// budget of their address for such packets (32 MiB) the next packet ends its session, so
/// they cannot hold 30 MB each without end; clients that GET are still served.
#[test]
fn sessions_without_a_get_share_a_bounded_buffer() {
    let s = setup("");
    let p = s.port;
    let body = vec![7u8; 1_000_000];
    let mut refused = None;
    'sessions: for n in 0..8 {
        let sid = format!("0b1ad2f4-54b1-4a6e-8d0e-3f0e8c1f2a{n:02}");
        for seq in 0..30 {
            let code = status(p, &req("POST", &format!("/xh/{sid}/{seq}"), 300, "", &body));
            if code != 200 {
                assert_eq!(code, 500, "session {n} packet {seq}");
                refused = Some(n * 30 + seq);
                break 'sessions;
            }
        }
    }
    let at = refused.expect("every packet of 8 sessions (240 MB) was held");
    // 32 MiB of 1 MB packets: the 34th is refused.
    assert_eq!(at, 33, "refused at packet {at}");
    wait_log(
        &s.server,
        "this address's buffer for sessions not yet answered is full",
        Duration::from_secs(5),
    );
    good_client_served(&s);
}

#[test]
fn a_session_whose_get_never_comes_is_reaped_after_30s() {
    let s = setup("");
    let t = Instant::now();
    assert_eq!(
        status(
            s.port,
            &req("POST", &format!("/xh/{SID}/0"), 300, "", &[9u8; 5000])
        ),
        200
    );
    wait_log(
        &s.server,
        &format!("session {SID} opened (1 open)"),
        Duration::from_secs(5),
    );
    wait_log(
        &s.server,
        "reaped (no GET within 30s)",
        Duration::from_secs(40),
    );
    let took = t.elapsed();
    assert!(
        took >= Duration::from_secs(29) && took < Duration::from_secs(33),
        "reaped after {took:?}"
    );
    wait_log(
        &s.server,
        &format!("session {SID} closed (0 open)"),
        Duration::from_secs(2),
    );
    // A tunnel ends and leaves no session behind.
    good_client_served(&s);
    let before = s.server.output().matches("(0 open)").count();
    wait_log(&s.server, "done: up", Duration::from_secs(10));
    let t = Instant::now();
    while s.server.output().matches("(0 open)").count() <= before {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the tunnel's session stayed open\n{}",
            s.server.output()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_packet_up_tunnel_outlives_the_servers_keep_alive() {
    // HTTP/1.1 packets go on a kept upload connection, which the server closes after 4 s
    // idle: the next packet after a longer pause goes on a new one, nothing lost.
    let s = setup("");
    let mut c = TcpStream::connect(("127.0.0.1", s.entry)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    for round in 0..3u64 {
        let data = pattern(100_000, round + 1);
        c.write_all(&data).unwrap();
        let mut got = vec![0u8; data.len()];
        c.read_exact(&mut got).unwrap();
        assert!(got == data, "round {round}\n{}", s.server.output());
        if round < 2 {
            std::thread::sleep(Duration::from_secs(6));
        }
    }
}
