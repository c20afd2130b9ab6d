//! SIGHUP reloads the config without dropping connections; SIGTERM lets a transfer in flight
//! finish byte-exact.
//!
//! Xray v26.3.27 handles only SIGINT and SIGTERM (`main/run.go`); SIGHUP keeps Go's default
//! action and ends the process (checked in `xray_ends_on_sighup`). Ferry reads its configs
//! again instead: an inbound whose object is unchanged keeps its listener, its connections and
//! its API-added users; a changed one stops accepting while its live connections finish on the
//! old settings; new connections get the new outbounds, routing and policy at once.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::common;
use common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_ferry")
}

/// Connects to `port` and reads the greeting.
fn open(port: u16) -> (TcpStream, Vec<u8>) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut hello = [0u8; 3];
    s.read_exact(&mut hello)
        .unwrap_or_else(|e| panic!("greeting through {port}: {e}"));
    (s, hello.to_vec())
}

/// One round trip of `msg` on an open connection.
fn round_trip(s: &mut TcpStream, msg: &[u8]) -> std::io::Result<()> {
    s.write_all(msg)?;
    let mut got = vec![0u8; msg.len()];
    s.read_exact(&mut got)?;
    assert_eq!(got, msg);
    Ok(())
}

fn tunnel(tag: &str, port: u16, to: u16) -> String {
    format!(
        r#"{{"tag":"{tag}","listen":"127.0.0.1","port":{port},"protocol":"tunnel",
            "settings":{{"address":"127.0.0.1","port":{to}}}}}"#
    )
}

fn config(inbounds: &[String], metrics: u16, extra: &str) -> String {
    format!(
        r#"{{"log":{{"loglevel":"info"}},"stats":{{}},"metrics":{{"listen":"127.0.0.1:{metrics}"}},
            "policy":{{"system":{{"statsInboundUplink":true,"statsInboundDownlink":true}}}},
            "inbounds":[{}],
            "outbounds":[{{"tag":"direct","protocol":"freedom","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}},{{"tag":"block","protocol":"blackhole"}}]{extra}}}"#,
        inbounds.join(",")
    )
}

fn uplink(metrics: u16, tag: &str) -> u64 {
    let mut s = TcpStream::connect(("127.0.0.1", metrics)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET /debug/vars HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let body = resp.split_once("\r\n\r\n").expect("an HTTP response").1;
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    v["stats"]["inbound"][tag]["uplink"].as_u64().unwrap_or(0)
}

/// Waits until inbound `tag`'s uplink counter reaches `least` (the last chunk is counted just
/// after it is written); returns it.
fn wait_uplink(metrics: u16, tag: &str, least: u64, f: &Proc) -> u64 {
    let t = Instant::now();
    loop {
        let n = uplink(metrics, tag);
        if n >= least {
            return n;
        }
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "uplink of {tag}: {n}, not {least}\n{}",
            f.output()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends SIGHUP and waits for the `needle` it should log (the n-th time it appears).
fn hup_and_wait(f: &mut Proc, needle: &str, n: usize) -> String {
    f.signal(libc::SIGHUP);
    let t = Instant::now();
    loop {
        let out = f.output();
        if out.matches(needle).count() >= n {
            return out;
        }
        assert!(
            f.child.try_wait().unwrap().is_none(),
            "ferry ended on SIGHUP\n{out}"
        );
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "no {needle:?} after SIGHUP\n{out}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sighup_reloads_without_dropping_connections() {
    let (one, two) = (echo_server_greeting(b"one"), echo_server_greeting(b"two"));
    let (pa, pb, pc, metrics) = (free_port(), free_port(), free_port(), free_port());
    let first = config(
        &[tunnel("a", pa, one.port()), tunnel("b", pb, one.port())],
        metrics,
        "",
    );
    let mut f = ferry(&first, &[pa, pb]);
    let (mut la, ha) = open(pa);
    let (mut lb, hb) = open(pb);
    assert_eq!((ha.as_slice(), hb.as_slice()), (&b"one"[..], &b"one"[..]));
    round_trip(&mut la, &[1; 1000]).unwrap();
    round_trip(&mut lb, &[2; 1000]).unwrap();
    let before = wait_uplink(metrics, "a", 1000, &f);

    // "a" stays as it is, but a new rule sends its new connections to the blackhole (routing
    // reaches the new connections of a kept inbound); "b" now leads to the other server; "c"
    // is new.
    let cfg_path = f.dir.path().join("config.json");
    let second = config(
        &[
            tunnel("a", pa, one.port()),
            tunnel("b", pb, two.port()),
            tunnel("c", pc, two.port()),
        ],
        metrics,
        r#","routing":{"rules":[{"type":"field","inboundTag":["a"],"outboundTag":"block"}]}"#,
    );
    std::fs::write(&cfg_path, &second).unwrap();
    let out = hup_and_wait(&mut f, "reloaded", 1);
    assert!(
        out.contains("1 inbound(s) kept, 1 replaced, 1 added, 0 removed, 0 failed"),
        "{out}"
    );

    // The connections opened before go on, on their old settings, byte-exact.
    round_trip(&mut la, &pattern(300_000, 1)).unwrap_or_else(|e| panic!("a: {e}\n{}", f.output()));
    round_trip(&mut lb, &pattern(300_000, 2)).unwrap_or_else(|e| panic!("b: {e}\n{}", f.output()));
    // New connections see the new config: b and c reach the second server...
    wait_listening(pc, &f);
    for p in [pb, pc] {
        let (mut s, h) = open(p);
        assert_eq!(h, b"two", "port {p}\n{}", f.output());
        round_trip(&mut s, &pattern(100_000, 3)).unwrap();
    }
    // ...and the new rule sends a's to the blackhole (closed without a greeting).
    let mut s = TcpStream::connect(("127.0.0.1", pa)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut b = [0u8; 3];
    assert!(
        !matches!(s.read(&mut b), Ok(n) if n > 0),
        "a's new connection was not blocked\n{}",
        f.output()
    );
    // The counters go on from where they were (the same stats across the reload).
    wait_uplink(metrics, "a", before + 300_000, &f);

    // A config that does not load leaves everything running as it was.
    std::fs::write(&cfg_path, second.replace("\"tunnel\"", "\"tunnle\"")).unwrap();
    let out = hup_and_wait(&mut f, "still running the previous config", 1);
    assert!(out.contains("inbounds[0].protocol"), "{out}");
    round_trip(&mut la, b"still here").unwrap();
    let (_, h) = open(pc);
    assert_eq!(h, b"two");

    // Removing an inbound closes its listener; its live connection goes on.
    std::fs::write(
        &cfg_path,
        config(&[tunnel("a", pa, one.port())], metrics, ""),
    )
    .unwrap();
    let out = hup_and_wait(&mut f, "reloaded", 2);
    assert!(
        out.contains("1 inbound(s) kept, 0 replaced, 0 added, 2 removed, 0 failed"),
        "{out}"
    );
    assert!(
        TcpStream::connect(("127.0.0.1", pb)).is_err(),
        "b still accepts"
    );
    round_trip(&mut lb, b"after removal").unwrap();
    // The rule is gone: a serves again.
    let (_, h) = open(pa);
    assert_eq!(h, b"one");
}

#[test]
fn sighup_names_what_needs_a_restart() {
    let one = echo_server_greeting(b"one");
    let (pa, metrics) = (free_port(), free_port());
    let first = config(&[tunnel("a", pa, one.port())], metrics, "");
    let mut f = ferry(&first, &[pa]);
    let (mut la, _) = open(pa);
    let moved = first.replace(&format!("127.0.0.1:{metrics}"), "127.0.0.1:1");
    std::fs::write(f.dir.path().join("config.json"), moved).unwrap();
    let out = hup_and_wait(&mut f, "reloaded", 1);
    assert!(
        out.contains("\"metrics\" changed; it takes effect at the next start"),
        "{out}"
    );
    // The metrics listener stays where it was, and counts on.
    round_trip(&mut la, b"kept").unwrap();
    wait_uplink(metrics, "a", 4, &f);
}

/// SIGTERM while a transfer is in flight: no new connections, and the transfer finishes
/// byte-exact within the grace period.
#[test]
fn sigterm_lets_a_transfer_in_flight_finish_byte_exact() {
    let echo = echo_server();
    let port = free_port();
    let cfg = format!(
        r#"{{"inbounds":[{}],"outbounds":[{{"protocol":"freedom","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}]}}"#,
        tunnel("in", port, echo.port())
    );
    let mut f = spawn_with_config(
        Path::new(bin()),
        "ferry",
        &cfg,
        &["run", "-c", "{config}", "--grace", "20"],
    );
    wait_listening(port, &f);
    let data = pattern(64 << 20, 7);
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut w = s.try_clone().unwrap();
    let out = data.clone();
    // The writer sends the first MiB, waits for the signal, then the rest.
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let writer = std::thread::spawn(move || {
        w.write_all(&out[..1 << 20]).unwrap();
        rx.recv().unwrap();
        w.write_all(&out[1 << 20..]).unwrap();
        w.shutdown(std::net::Shutdown::Write).unwrap();
    });
    let mut r = s;
    r.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut got = vec![0u8; 1 << 20];
    r.read_exact(&mut got).unwrap();
    let t0 = Instant::now();
    f.signal(libc::SIGTERM);
    wait_refused(port, t0, Duration::from_secs(2), &f);
    tx.send(()).unwrap();
    let mut rest = Vec::new();
    r.read_to_end(&mut rest).unwrap();
    writer.join().unwrap();
    got.extend_from_slice(&rest);
    assert!(
        got == data,
        "{} of {} bytes, not byte-exact",
        got.len(),
        data.len()
    );
    // The last connection ended, so the process ends before the grace period.
    let status = f.wait_exit(t0, Duration::from_secs(15));
    assert!(status.success(), "{status:?}\n{}", f.output());
}

/// What the reference does with SIGHUP (see the module doc). Ferry installs its own handler, so
/// an inherited "ignore" does not matter to it.
#[test]
fn xray_ends_on_sighup() {
    let xray = peer("xray");
    let port = free_port();
    let cfg = format!(
        r#"{{"inbounds":[{}],"outbounds":[{{"protocol":"freedom","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}]}}"#,
        tunnel("in", port, 9)
    );
    // SIGHUP at its default action in the child: a runner started under nohup passes it on
    // ignored, and Go keeps an inherited "ignore" (then Xray would not see it at all).
    let xray = xray.to_str().unwrap().to_string();
    let mut x = spawn_with_config(
        Path::new("/usr/bin/env"),
        "xray",
        &cfg,
        &["--default-signal=HUP", &xray, "run", "-c", "{config}"],
    );
    wait_listening(port, &x);
    let t0 = Instant::now();
    x.signal(libc::SIGHUP);
    let status = x.wait_exit(t0, Duration::from_secs(10));
    assert!(!status.success(), "{status:?}");
}
