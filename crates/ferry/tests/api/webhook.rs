//! A routing rule's `webhook` (#24: Remnawave's torrent blocker): the same config under Xray
//! v26.3.27 and Ferry, one connection each, and the POST each sends to a unix socket compared
//! field by field.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::common;
use common::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixListener;
use std::sync::mpsc;
use std::time::Duration;

/// One POST as received: the request line, the headers (lower-case names) and the JSON body.
struct Post {
    line: String,
    headers: Vec<(String, String)>,
    body: serde_json::Value,
}

/// A web server on a unix socket that answers every request 200 and hands it to the test.
fn hook_server(path: &std::path::Path) -> mpsc::Receiver<Post> {
    let l = UnixListener::bind(path).unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { continue };
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut line = String::new();
            if r.read_line(&mut line).is_err() {
                continue;
            }
            let mut headers = Vec::new();
            let mut len = 0;
            loop {
                let mut h = String::new();
                if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                    break;
                }
                if let Some((k, v)) = h.trim_end().split_once(':') {
                    let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_string());
                    if k == "content-length" {
                        len = v.parse().unwrap_or(0);
                    }
                    headers.push((k, v));
                }
            }
            let mut body = vec![0u8; len];
            let _ = r.read_exact(&mut body);
            let mut w = s;
            let _ =
                w.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            let body = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
            let _ = tx.send(Post {
                line: line.trim_end().to_string(),
                headers,
                body,
            });
        }
    });
    rx
}

/// Runs `bin` with a tunnel inbound routed to freedom by a rule with a webhook, makes one
/// connection through it, and returns the POST it sent.
fn post_of(bin: &std::path::Path, name: &str) -> Post {
    let dir = tempdir::Dir::new("webhook");
    let sock = dir.path().join("hook.sock");
    let posts = hook_server(&sock);
    let echo = echo_server();
    let port = free_port();
    let cfg = format!(
        r#"{{"log":{{"loglevel":"debug"}},
  "inbounds":[{{"tag":"in-tag","listen":"127.0.0.1","port":{port},"protocol":"tunnel",
                "settings":{{"address":"127.0.0.1","port":{},"network":"tcp"}}}}],
  "outbounds":[{{"tag":"first","protocol":"blackhole"}},{{"tag":"out-tag","protocol":"freedom","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}],
  "routing":{{"rules":[{{"type":"field","inboundTag":["in-tag"],"outboundTag":"out-tag",
    "webhook":{{"url":"{}:/hook?token=t1","deduplication":5,"headers":{{"X-Token":"abc"}}}}}}]}}}}"#,
        echo.port(),
        sock.display()
    );
    let p = spawn_with_config(bin, name, &cfg, &["run", "-c", "{config}"]);
    wait_listening(port, &p);
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"ping").unwrap();
    let mut b = [0u8; 4];
    s.read_exact(&mut b)
        .unwrap_or_else(|e| panic!("{name}: {e}\n{}", p.output()));
    assert_eq!(&b, b"ping", "{name}: routed to the blackhole?");
    posts
        .recv_timeout(Duration::from_secs(10))
        .unwrap_or_else(|_| panic!("{name} sent no POST\n{}", p.output()))
}

#[test]
fn webhook_posts_what_xray_posts() {
    let x = post_of(&peer("xray"), "xray");
    let f = post_of(std::path::Path::new(env!("CARGO_BIN_EXE_ferry")), "ferry");
    assert_eq!(f.line, x.line);
    assert_eq!(f.line, "POST /hook?token=t1 HTTP/1.1");
    for h in ["host", "content-type", "x-token"] {
        let get = |p: &Post| {
            p.headers
                .iter()
                .find(|(k, _)| k == h)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(get(&f), get(&x), "header {h}");
        assert!(get(&f).is_some(), "header {h} missing");
    }
    let keys = |v: &serde_json::Value| {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(keys(&f.body), keys(&x.body), "{}\n{}", f.body, x.body);
    for k in [
        "email",
        "level",
        "protocol",
        "network",
        "inboundTag",
        "outboundTag",
        "routeTarget",
        "inboundName",
    ] {
        assert_eq!(
            f.body[k], x.body[k],
            "{k}: ferry {} xray {}",
            f.body, x.body
        );
    }
    // The addresses: the same shape (the ports differ between the two runs).
    for k in ["source", "destination", "inboundLocal", "originalTarget"] {
        // (originalTarget is "tcp:127.0.0.1:PORT")
        let host = |v: &serde_json::Value| {
            v.as_str().map(|s| {
                s.rsplit_once(':')
                    .map(|(h, _)| h.to_string())
                    .unwrap_or_default()
            })
        };
        assert_eq!(
            host(&f.body[k]),
            host(&x.body[k]),
            "{k}: ferry {} xray {}",
            f.body,
            x.body
        );
    }
    assert_eq!(f.body["outboundTag"], "out-tag");
    assert!(f.body["ts"].as_u64().unwrap() > 1_700_000_000);
}
