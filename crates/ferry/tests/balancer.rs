//! Balancers through the binary: the observatory probes two outbounds (freedom redirects to
//! local HTTP sinks); when one sink stops, traffic moves to the other, and when both are down
//! it goes to the balancer's fallbackTag.

mod common;

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
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    let port = l.local_addr().unwrap().port();
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    std::thread::spawn(move || loop {
        if s2.load(Ordering::Relaxed) {
            return;
        }
        match l.accept() {
            Ok((mut s, _)) => {
                let _ = s.write_all(
                    format!("HTTP/1.1 200 OK\r\nX-Sink: {name}\r\nContent-Length: 0\r\n\r\n")
                        .as_bytes(),
                );
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    });
    HttpSink { port, stop }
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
            r#"{"outbounds":[{"protocol":"freedom","tag":"p"}],"routing":{"rules":[{"port":1,"balancerTag":"nope"}]}}"#,
            "routing.rules[0].balancerTag",
        ),
        (
            r#"{"outbounds":[{"protocol":"freedom","tag":"p"}],"routing":{"rules":[{"port":1,"balancerTag":"b"}],
               "balancers":[{"tag":"b","selector":["p"],"strategy":{"type":"leastPing"}}]}}"#,
            "routing.balancers[0]",
        ),
    ] {
        let mut p = spawn_with_config(bin, "ferry-test", cfg, &["test", "-c", "{config}"]);
        let st = p.wait_exit(Instant::now(), Duration::from_secs(20));
        assert!(!st.success() && p.output().contains(want), "{}", p.output());
    }
}
