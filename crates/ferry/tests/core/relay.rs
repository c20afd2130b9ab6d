//! The relay through the real binary: big byte-exact transfers, many connections, half-close in
//! both directions, and every timeout.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::common;
use common::*;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::time::{Duration, Instant};

fn dokodemo_config(port: u16, target: u16, policy: &str) -> String {
    format!(
        r#"{{"policy": {{"levels": {{"0": {{{policy}}}}}}},
            "inbounds":[{{"tag":"in","listen":"127.0.0.1","port":{port},"protocol":"dokodemo-door",
            "settings":{{"address":"127.0.0.1","port":{target}}}}}],
            "outbounds":[{{"protocol":"freedom","tag":"direct","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}]}}"#
    )
}

#[test]
fn hundred_megabytes_byte_exact() {
    let echo = echo_server();
    let port = free_port();
    let _f = ferry(&dokodemo_config(port, echo.port(), ""), &[port]);
    let data = pattern(100 << 20, 42);
    let got = echo_through(TcpStream::connect(("127.0.0.1", port)).unwrap(), &data);
    assert!(got == data, "100 MB echoed through ferry differ");
}

#[test]
fn two_hundred_concurrent_connections() {
    let echo = echo_server();
    let port = free_port();
    let _f = ferry(&dokodemo_config(port, echo.port(), ""), &[port]);
    let handles: Vec<_> = (0..200u64)
        .map(|i| {
            std::thread::spawn(move || {
                let data = pattern(64 * 1024 + i as usize * 97, i);
                let got = echo_through(TcpStream::connect(("127.0.0.1", port)).unwrap(), &data);
                got == data
            })
        })
        .collect();
    let ok = handles
        .into_iter()
        .map(|h| h.join().unwrap())
        .filter(|b| *b)
        .count();
    assert_eq!(ok, 200);
}

/// A server that reads everything until EOF, then answers with the byte count and a tail.
fn count_then_answer_server() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            std::thread::spawn(move || {
                let mut all = Vec::new();
                s.read_to_end(&mut all).unwrap();
                let _ = s.write_all(format!("got {} bytes", all.len()).as_bytes());
            });
        }
    });
    port
}

#[test]
fn client_half_close_still_gets_the_answer() {
    let port = free_port();
    let target = count_then_answer_server();
    let _f = ferry(&dokodemo_config(port, target, ""), &[port]);
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(&pattern(300_000, 1)).unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    let mut answer = String::new();
    c.read_to_string(&mut answer).unwrap();
    assert_eq!(answer, "got 300000 bytes");
}

#[test]
fn server_half_close_client_still_delivers() {
    // The server says hello and shuts its write side at once, then keeps reading.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let target = l.local_addr().unwrap().port();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.write_all(b"hello").unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        let mut all = Vec::new();
        let _ = s.read_to_end(&mut all);
        tx.send(all).unwrap();
    });
    let port = free_port();
    // uplinkOnly is how long the client may keep sending after the server finished.
    let _f = ferry(
        &dokodemo_config(port, target, r#""uplinkOnly": 10"#),
        &[port],
    );
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut hello = Vec::new();
    c.read_to_end(&mut hello).unwrap();
    assert_eq!(hello, b"hello");
    let data = pattern(200_000, 3);
    c.write_all(&data).unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    let got = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(
        got == data,
        "server received {} bytes, want {}",
        got.len(),
        data.len()
    );
}

/// Waits for EOF or error on `s`; returns how long it took.
fn time_to_close(s: &mut TcpStream, limit: Duration) -> Duration {
    s.set_read_timeout(Some(limit)).unwrap();
    let t = Instant::now();
    let mut buf = [0u8; 64];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return t.elapsed(),
            Ok(_) => continue,
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                panic!("not closed within {limit:?}")
            }
            Err(_) => return t.elapsed(),
        }
    }
}

#[test]
fn conn_idle_closes_a_silent_connection() {
    let echo = echo_server();
    let port = free_port();
    let _f = ferry(
        &dokodemo_config(port, echo.port(), r#""connIdle": 1"#),
        &[port],
    );
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    // Activity keeps it open past the limit...
    for _ in 0..3 {
        c.write_all(b"ping").unwrap();
        let mut b = [0u8; 4];
        c.read_exact(&mut b).unwrap();
        std::thread::sleep(Duration::from_millis(500));
    }
    // ...silence closes it.
    let took = time_to_close(&mut c, Duration::from_secs(10));
    assert!(
        took >= Duration::from_millis(300),
        "closed too early: {took:?}"
    );
}

#[test]
fn downlink_only_closes_after_the_client_finished() {
    // The server never answers and never closes.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let target = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let held: Vec<_> = l.incoming().take(1).collect();
        std::thread::sleep(Duration::from_secs(30));
        drop(held);
    });
    let port = free_port();
    let _f = ferry(
        &dokodemo_config(port, target, r#""downlinkOnly": 1, "connIdle": 100"#),
        &[port],
    );
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.write_all(b"request").unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    let took = time_to_close(&mut c, Duration::from_secs(10));
    assert!(took < Duration::from_secs(8), "{took:?}");
}

#[test]
fn uplink_only_closes_after_the_server_finished() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let target = l.local_addr().unwrap().port();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        // Ferry must close our read side once uplinkOnly passes without client data.
        let t = Instant::now();
        let mut buf = [0u8; 16];
        let _ = s.read(&mut buf);
        tx.send(t.elapsed()).unwrap();
    });
    let port = free_port();
    let _f = ferry(
        &dokodemo_config(port, target, r#""uplinkOnly": 1, "connIdle": 100"#),
        &[port],
    );
    let _c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let took = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("server side closed by ferry");
    assert!(took < Duration::from_secs(8), "{took:?}");
}

#[test]
fn unreachable_target_closes_the_client_and_others_keep_flowing() {
    let dead = free_port(); // nothing listens here
    let echo = echo_server();
    let (p1, p2) = (free_port(), free_port());
    let cfg = format!(
        r#"{{"inbounds":[
            {{"tag":"dead","listen":"127.0.0.1","port":{p1},"protocol":"dokodemo-door","settings":{{"address":"127.0.0.1","port":{dead}}}}},
            {{"tag":"live","listen":"127.0.0.1","port":{p2},"protocol":"dokodemo-door","settings":{{"address":"127.0.0.1","port":{}}}}}],
            "outbounds":[{{"protocol":"freedom","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}]}}"#,
        echo.port()
    );
    let _f = ferry(&cfg, &[p1, p2]);
    let live = TcpStream::connect(("127.0.0.1", p2)).unwrap();
    for _ in 0..20 {
        let mut c = TcpStream::connect(("127.0.0.1", p1)).unwrap();
        let _ = c.write_all(b"x");
        time_to_close(&mut c, Duration::from_secs(10));
    }
    let got = echo_through(live.try_clone().unwrap(), b"still here");
    assert_eq!(got, b"still here");
    live.shutdown(Shutdown::Both).unwrap();
}

/// Descriptors a process has open.
fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// An idle spliced connection holds its two sockets and no pipe: after 600 connections each
/// moved bytes both ways (so each direction spliced through a pipe), Ferry's descriptors are
/// two per connection plus a small pooled remainder (with a pipe pair kept per direction it
/// was six per connection: the descriptor limit ran out near 3,300 connections). Closing them
/// brings the count back to its idle level.
#[test]
fn idle_spliced_connections_hold_no_pipes() {
    let echo = echo_server();
    let port = free_port();
    let f = ferry(&dokodemo_config(port, echo.port(), ""), &[port]);
    let pid = f.child.id();
    let idle = fds(pid);
    const N: usize = 600;
    let mut conns = Vec::new();
    for i in 0..N {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let data = pattern(3000, i as u64);
        s.write_all(&data).unwrap();
        let mut got = vec![0u8; data.len()];
        s.read_exact(&mut got).unwrap();
        assert!(got == data, "connection {i} echoed other bytes");
        conns.push(s);
    }
    // Let the relays see their sockets drained (they hand the pipes back then).
    std::thread::sleep(Duration::from_millis(300));
    let busy = fds(pid);
    assert!(
        busy <= idle + 2 * N + 80,
        "{busy} descriptors for {N} idle connections (idle level {idle}): pipes kept"
    );
    assert!(
        busy >= idle + 2 * N,
        "{busy} descriptors: the connections are not all open"
    );
    // Every connection still works.
    for (i, s) in conns.iter_mut().enumerate().step_by(50) {
        s.write_all(b"again").unwrap();
        let mut got = [0u8; 5];
        s.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"again", "connection {i}");
    }
    drop(conns);
    let t = Instant::now();
    while fds(pid) > idle + 40 && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        fds(pid) <= idle + 40,
        "{} descriptors after every connection closed (idle level {idle})",
        fds(pid)
    );
}
