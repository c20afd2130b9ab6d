//! Balancers through the binary: the observatory probes two outbounds (freedom redirects to
//! local HTTP sinks); when one sink stops, traffic moves to the other, and when both are down
//! it goes to the balancer's fallbackTag.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::common;

use common::*;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// An HTTP sink answering every connection with `X-Sink: NAME`, until stopped (then its port
/// refuses connections).
struct HttpSink {
    port: u16,
    stop: Arc<AtomicBool>,
}

fn http_sink(name: &'static str) -> HttpSink {
    slow_http_sink(name, &[0])
}

/// An HTTP sink like [`http_sink`] that answers its n-th connection after `delays_ms[n]`
/// (cycling): a slow outbound as the observatory measures it.
fn slow_http_sink(name: &'static str, delays_ms: &'static [u64]) -> HttpSink {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    let port = l.local_addr().unwrap().port();
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    let mut n = 0;
    std::thread::spawn(move || loop {
        if s2.load(Ordering::Relaxed) {
            return;
        }
        match l.accept() {
            Ok((s, _)) => {
                let delay = Duration::from_millis(delays_ms[n % delays_ms.len()]);
                n += 1;
                std::thread::spawn(move || answer(s, name, delay));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    });
    HttpSink { port, stop }
}

/// Reads the request's head, then answers after `delay` and closes. (Answering before the
/// request is read leaves it unread, so the close is a reset, which can beat the answer to
/// the client: Xray's observatory then counts a failure.)
fn answer(mut s: TcpStream, name: &str, delay: Duration) {
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let mut head = Vec::new();
    let mut b = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut b) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&b[..n]),
        }
    }
    std::thread::sleep(delay);
    let _ = s.write_all(
        format!("HTTP/1.1 200 OK\r\nX-Sink: {name}\r\nContent-Length: 0\r\n\r\n").as_bytes(),
    );
    let _ = s.shutdown(std::net::Shutdown::Write);
}

fn which(port: u16) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut got = Vec::new();
    let mut b = [0u8; 512];
    while let Ok(n) = s.read(&mut b) {
        if n == 0 {
            break;
        }
        got.extend_from_slice(&b[..n]);
        if got.windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    let t = String::from_utf8_lossy(&got);
    t.lines()
        .find_map(|l| l.strip_prefix("X-Sink: "))
        .unwrap_or("none")
        .to_string()
}

/// Asks until `want` answers `n` times in a row (or 10 s pass).
fn settles_on(port: u16, want: &str, n: usize, f: &Proc) {
    let t = Instant::now();
    let mut run = 0;
    let mut last = Vec::new();
    while run < n {
        let got = which(port);
        run = if got == want { run + 1 } else { 0 };
        last.push(got);
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "never settled on {want}: {last:?}\n{}",
            f.output()
        );
        if run == 0 {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[test]
fn least_ping_moves_to_the_healthy_outbound_then_the_fallback() {
    let (a, b, c) = (http_sink("a"), http_sink("b"), http_sink("c"));
    let port = free_port();
    let cfg = format!(
        r#"{{"inbounds":[{{"tag":"in","listen":"127.0.0.1","port":{port},"protocol":"dokodemo-door",
                         "settings":{{"address":"127.0.0.1","port":9}}}}],
            "outbounds":[
              {{"tag":"direct-c","protocol":"freedom","settings":{{"redirect":"127.0.0.1:{}"}}}},
              {{"tag":"proxy-a","protocol":"freedom","settings":{{"redirect":"127.0.0.1:{}"}}}},
              {{"tag":"proxy-b","protocol":"freedom","settings":{{"redirect":"127.0.0.1:{}"}}}}],
            "routing":{{"rules":[{{"inboundTag":["in"],"balancerTag":"bal"}}],
              "balancers":[{{"tag":"bal","selector":["proxy-"],"strategy":{{"type":"leastPing"}},
                             "fallbackTag":"direct-c"}}]}},
            "observatory":{{"subjectSelector":["proxy-"],"probeUrl":"http://probe.invalid/generate_204",
                            "probeInterval":"200ms","enableConcurrency":true}}}}"#,
        c.port, a.port, b.port
    );
    let f = ferry(&cfg, &[port]);
    std::thread::sleep(Duration::from_millis(600));
    for _ in 0..5 {
        let got = which(port);
        assert!(got == "a" || got == "b", "{got}\n{}", f.output());
    }
    a.stop.store(true, Ordering::Relaxed);
    settles_on(port, "b", 10, &f);
    b.stop.store(true, Ordering::Relaxed);
    settles_on(port, "c", 5, &f);
}

#[test]
fn round_robin_alternates_and_balancer_errors_name_the_path() {
    let (a, b) = (http_sink("a"), http_sink("b"));
    let port = free_port();
    let cfg = format!(
        r#"{{"inbounds":[{{"tag":"in","listen":"127.0.0.1","port":{port},"protocol":"dokodemo-door",
                         "settings":{{"address":"127.0.0.1","port":9}}}}],
            "outbounds":[
              {{"tag":"proxy-a","protocol":"freedom","settings":{{"redirect":"127.0.0.1:{}"}}}},
              {{"tag":"proxy-b","protocol":"freedom","settings":{{"redirect":"127.0.0.1:{}"}}}}],
            "routing":{{"rules":[{{"inboundTag":["in"],"balancerTag":"rr"}}],
              "balancers":[{{"tag":"rr","selector":["proxy-"],"strategy":{{"type":"roundRobin"}}}}]}}}}"#,
        a.port, b.port
    );
    let f = ferry(&cfg, &[port]);
    let got: Vec<String> = (0..4).map(|_| which(port)).collect();
    assert_eq!(got, ["a", "b", "a", "b"], "{}", f.output());
    drop(f);
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_ferry"));
    for (cfg, want) in [
        (
            r#"{"outbounds":[{"protocol":"freedom","tag":"p","settings":{"finalRules":[{"action":"allow","ip":["127.0.0.0/8","::1"]}]}}],"routing":{"rules":[{"port":1,"balancerTag":"nope"}]}}"#,
            "routing.rules[0].balancerTag",
        ),
        (
            r#"{"outbounds":[{"protocol":"freedom","tag":"p","settings":{"finalRules":[{"action":"allow","ip":["127.0.0.0/8","::1"]}]}}],"routing":{"rules":[{"port":1,"balancerTag":"b"}],
               "balancers":[{"tag":"b","selector":["p"],"strategy":{"type":"leastPing"}}]}}"#,
            "routing.balancers[0]",
        ),
    ] {
        let mut p = spawn_with_config(bin, "ferry-test", cfg, &["test", "-c", "{config}"]);
        let st = p.wait_exit(Instant::now(), Duration::from_secs(20));
        assert!(!st.success() && p.output().contains(want), "{}", p.output());
    }
}

/// A leastLoad balancer over three outbounds, fed by a burstObservatory whose first round
/// runs at start (routing.md §5.2, §5.4): "proxy-a" answers after 60 ms, "proxy-b" after
/// 300 ms, "proxy-d" refuses (its sink is down); "direct-c" is the fallback. With one sample
/// each, an outbound's cost is its deviation (half its round trip, ~30 ms and ~150 ms) times
/// the square root of its weight. Returns what 30 connections reached. The interval is a day:
/// Xray also schedules its `sampling` pings of each window at random times from the start, and
/// with a window of minutes one of them now and then landed during the test and gave an
/// outbound its second sample (a CI run saw Xray's "a" pass the 10 ms baseline that way).
fn least_load_picks(
    settings: &str,
    b_tag: &str,
) -> (std::collections::BTreeMap<String, usize>, Proc) {
    least_load_picks_on(false, settings, b_tag)
}

/// [`least_load_picks`] on Ferry or (`xray`) on Xray.
fn least_load_picks_on(
    xray: bool,
    settings: &str,
    b_tag: &str,
) -> (std::collections::BTreeMap<String, usize>, Proc) {
    let (a, b, c) = (
        slow_http_sink("a", &[60]),
        slow_http_sink("b", &[300]),
        http_sink("c"),
    );
    let dead = free_port();
    let port = free_port();
    let cfg = format!(
        r#"{{"inbounds":[{{"tag":"in","listen":"127.0.0.1","port":{port},"protocol":"dokodemo-door",
                         "settings":{{"address":"127.0.0.1","port":9}}}}],
            "outbounds":[
              {{"tag":"direct-c","protocol":"freedom","settings":{{"redirect":"127.0.0.1:{}"LOOP}}}},
              {{"tag":"proxy-a","protocol":"freedom","settings":{{"redirect":"127.0.0.1:{}"LOOP}}}},
              {{"tag":"{b_tag}","protocol":"freedom","settings":{{"redirect":"127.0.0.1:{}"LOOP}}}},
              {{"tag":"proxy-d","protocol":"freedom","settings":{{"redirect":"127.0.0.1:{dead}"LOOP}}}}],
            "routing":{{"rules":[{{"inboundTag":["in"],"balancerTag":"ll"}}],
              "balancers":[{{"tag":"ll","selector":["proxy-"],
                             "strategy":{{"type":"leastLoad","settings":{settings}}},
                             "fallbackTag":"direct-c"}}]}},
            "burstObservatory":{{"subjectSelector":["proxy-"],
              "pingConfig":{{"destination":"http://probe.invalid/generate_204","interval":"24h",
                             "sampling":2,"timeout":"2s"}}}}}}"#,
        c.port, a.port, b.port
    );
    let f = if xray {
        // Xray v26's freedom refuses loopback destinations unless told otherwise.
        let cfg = cfg
            .replace(
                "LOOP",
                r#","finalRules":[{"action":"allow","ip":["127.0.0.0/8"]}]"#,
            )
            .replacen('{', r#"{"log":{"loglevel":"debug"},"#, 1);
        let p = spawn_with_config(&peer("xray"), "xray", &cfg, &["run", "-c", "{config}"]);
        wait_listening(port, &p);
        p
    } else {
        ferry(&cfg.replace("LOOP", ""), &[port])
    };
    // The first round: a, b and d one after the other (~0.4 s).
    std::thread::sleep(Duration::from_millis(1500));
    let mut seen = std::collections::BTreeMap::new();
    for _ in 0..30 {
        *seen.entry(which(port)).or_insert(0) += 1;
    }
    drop((a, b, c));
    (seen, f)
}

fn only(picks: &std::collections::BTreeMap<String, usize>, tags: &[&str]) -> bool {
    picks.keys().map(String::as_str).eq(tags.iter().copied())
}

#[test]
fn least_load_takes_the_cheapest_expected_outbounds_and_never_a_dead_one() {
    // expected 1, no baselines: the cheapest alone.
    let (p, f) = least_load_picks(r#"{"expected":1}"#, "proxy-b");
    assert!(only(&p, &["a"]), "expected 1: {p:?}\n{}", f.output());
    // expected 2: the two cheapest, picked at random; the dead one never.
    let (p, f) = least_load_picks(r#"{"expected":2}"#, "proxy-b");
    assert!(only(&p, &["a", "b"]), "expected 2: {p:?}\n{}", f.output());
    // expected 5 > the 2 alive: all alive ones.
    let (p, f) = least_load_picks(r#"{"expected":5}"#, "proxy-b");
    assert!(only(&p, &["a", "b"]), "expected 5: {p:?}\n{}", f.output());
    // maxRTT leaves b (300 ms) out: only a is left.
    let (p, f) = least_load_picks(r#"{"expected":2,"maxRTT":"150ms"}"#, "proxy-b");
    assert!(only(&p, &["a"]), "maxRTT: {p:?}\n{}", f.output());
}

#[test]
fn least_load_baselines_and_costs() {
    // No node costs under 10 ms and expected is 0: none, so the fallback.
    let (p, f) = least_load_picks(r#"{"baselines":["10ms"]}"#, "proxy-b");
    assert!(only(&p, &["c"]), "baselines 10ms: {p:?}\n{}", f.output());
    // The walk stops at the first baseline that has a node under it (a at ~30 ms).
    let (p, f) = least_load_picks(r#"{"baselines":["10ms","100ms","1s"]}"#, "proxy-b");
    assert!(
        only(&p, &["a"]),
        "baselines to 100ms: {p:?}\n{}",
        f.output()
    );
    // Under 1 s both are.
    let (p, f) = least_load_picks(r#"{"baselines":["10ms","1s"]}"#, "proxy-b");
    assert!(
        only(&p, &["a", "b"]),
        "baselines to 1s: {p:?}\n{}",
        f.output()
    );
    // A weight of 0.01 (the number in the tag, matched by a regexp with value 0) makes b's
    // ~150 ms cost ~15 ms: b is the cheapest now.
    let (p, f) = least_load_picks(
        r#"{"expected":1,"costs":[{"regexp":true,"match":"[0-9.]+x$","value":0}]}"#,
        "proxy-b-0.01x",
    );
    assert!(only(&p, &["b"]), "costs by regexp: {p:?}\n{}", f.output());
    // The same weight as a substring match with its value.
    let (p, f) = least_load_picks(
        r#"{"expected":1,"costs":[{"match":"proxy-b","value":0.01},{"match":"proxy-","value":1}]}"#,
        "proxy-b",
    );
    assert!(only(&p, &["b"]), "costs by value: {p:?}\n{}", f.output());
}

/// After a failed burst ping an outbound stays alive (alive = not every sample failed), so
/// leastLoad keeps it unless `tolerance` is below its failure ratio (1 of 2 here). b answers
/// its pings after 300 then 100 ms: its cost (the deviation, 100 ms) stays above a's (half of
/// a's one good ping, ~10 ms), so only the tolerance moves traffic off a.
#[test]
fn least_load_tolerance_leaves_an_outbound_whose_pings_fail() {
    let (a, b) = (slow_http_sink("a", &[20]), slow_http_sink("b", &[300, 100]));
    let (strict, lax) = (free_port(), free_port());
    let cfg = format!(
        r#"{{"inbounds":[
              {{"tag":"strict","listen":"127.0.0.1","port":{strict},"protocol":"dokodemo-door",
                "settings":{{"address":"127.0.0.1","port":9}}}},
              {{"tag":"lax","listen":"127.0.0.1","port":{lax},"protocol":"dokodemo-door",
                "settings":{{"address":"127.0.0.1","port":9}}}}],
            "outbounds":[
              {{"tag":"proxy-a","protocol":"freedom","settings":{{"redirect":"127.0.0.1:{}"}}}},
              {{"tag":"proxy-b","protocol":"freedom","settings":{{"redirect":"127.0.0.1:{}"}}}}],
            "routing":{{"rules":[{{"inboundTag":["strict"],"balancerTag":"strict"}},
                                 {{"inboundTag":["lax"],"balancerTag":"lax"}}],
              "balancers":[
                {{"tag":"strict","selector":["proxy-"],
                  "strategy":{{"type":"leastLoad","settings":{{"expected":1,"tolerance":0.4}}}}}},
                {{"tag":"lax","selector":["proxy-"],
                  "strategy":{{"type":"leastLoad","settings":{{"expected":1}}}}}}]}},
            "burstObservatory":{{"subjectSelector":["proxy-"],
              "pingConfig":{{"destination":"http://probe.invalid/generate_204","interval":"10s",
                             "sampling":2,"timeout":"2s"}}}}}}"#,
        a.port, b.port
    );
    let f = ferry(&cfg, &[strict, lax]);
    std::thread::sleep(Duration::from_millis(1000));
    for _ in 0..5 {
        assert_eq!(which(strict), "a", "{}", f.output());
        assert_eq!(which(lax), "a", "{}", f.output());
    }
    // a goes down; its next ping (10 s after the first round) fails.
    a.stop.store(true, Ordering::Relaxed);
    let t = Instant::now();
    while which(strict) != "b" {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the strict balancer never left a\n{}",
            f.output()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // The lax balancer still picks a (its one good sample keeps it cheapest): a's sink is
    // down, so nothing answers.
    for _ in 0..5 {
        assert_eq!(which(strict), "b", "{}", f.output());
        assert_eq!(which(lax), "none", "{}", f.output());
    }
}

/// Xray v26.3.27 makes the same picks from the same configs: the rules the tests above check
/// are Xray's.
#[test]
fn least_load_picks_as_xray_does() {
    for (settings, b_tag) in [
        (r#"{"expected":1}"#, "proxy-b"),
        (r#"{"expected":2}"#, "proxy-b"),
        (r#"{"expected":2,"maxRTT":"150ms"}"#, "proxy-b"),
        (r#"{"baselines":["10ms"]}"#, "proxy-b"),
        (r#"{"baselines":["10ms","100ms","1s"]}"#, "proxy-b"),
        (
            r#"{"expected":1,"costs":[{"regexp":true,"match":"[0-9.]+x$","value":0}]}"#,
            "proxy-b-0.01x",
        ),
    ] {
        let (f, fp) = least_load_picks_on(false, settings, b_tag);
        let (x, xp) = least_load_picks_on(true, settings, b_tag);
        assert!(
            f.keys().eq(x.keys()),
            "{settings}: Ferry reached {f:?}, Xray {x:?}\n{}\n{}",
            fp.output(),
            xp.output()
        );
    }
}
