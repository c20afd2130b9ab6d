//! Hostile or broken input to the WebSocket, HTTPUpgrade and gRPC inbounds: each is answered
//! as the spec (and Xray) prescribe — an HTTP error, a gRPC status, or a close — and logged;
//! nothing panics, and a good client going through the same inbounds afterwards and at the
//! same time is served.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::common;
mod limits;
use common::*;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

const ID: &str = "0f7d3b5e-2a61-4c8e-9b14-5e6a7c8d9e01";

struct Setup {
    ws: u16,
    hu: u16,
    grpc: u16,
    entries: [u16; 3],
    echo: u16,
    server: Proc,
    _client: Proc,
}

fn setup() -> Setup {
    let echo = echo_server().port();
    let (ws, hu, grpc) = (free_port(), free_port(), free_port());
    let vless = |port: u16, stream: &str| {
        format!(
            r#"{{"listen":"127.0.0.1","port":{port},"protocol":"vless","settings":{{"clients":[{{"id":"{ID}"}}],
                "decryption":"none"}},"streamSettings":{stream}}}"#
        )
    };
    let server = ferry(
        &format!(
            r#"{{"log":{{"loglevel":"debug"}},"inbounds":[{},{},{}],"outbounds":[{{"protocol":"freedom","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}]}}"#,
            vless(
                ws,
                r#"{"network":"ws","wsSettings":{"path":"/ray","host":"good.test"}}"#
            ),
            vless(
                hu,
                r#"{"network":"httpupgrade","httpupgradeSettings":{"path":"/hu"}}"#
            ),
            vless(
                grpc,
                r#"{"network":"grpc","grpcSettings":{"serviceName":"gsvc"}}"#
            ),
        ),
        &[ws, hu, grpc],
    );
    let entries = [free_port(), free_port(), free_port()];
    let out = |tag: &str, port: u16, net: &str| {
        format!(
            r#"{{"tag":"{tag}","protocol":"vless","settings":{{"vnext":[{{"address":"127.0.0.1",
                "port":{port},"users":[{{"id":"{ID}","encryption":"none"}}]}}]}},
                "streamSettings":{{{net}}}}}"#
        )
    };
    let entry = |tag: &str, port: u16| {
        format!(
            r#"{{"tag":"{tag}","listen":"127.0.0.1","port":{port},"protocol":"dokodemo-door",
                "settings":{{"address":"127.0.0.1","port":{echo},"network":"tcp"}}}}"#
        )
    };
    let client = ferry(
        &format!(
            r#"{{"inbounds":[{},{},{}],"outbounds":[{},{},{}],"routing":{{"rules":[
                {{"inboundTag":["a"],"outboundTag":"ws"}},{{"inboundTag":["b"],"outboundTag":"hu"}},
                {{"inboundTag":["c"],"outboundTag":"grpc"}}]}}}}"#,
            entry("a", entries[0]),
            entry("b", entries[1]),
            entry("c", entries[2]),
            out(
                "ws",
                ws,
                r#""network":"ws","wsSettings":{"path":"/ray?ed=2048","host":"good.test"}"#
            ),
            out(
                "hu",
                hu,
                r#""network":"httpupgrade","httpupgradeSettings":{"path":"/hu"}"#
            ),
            out(
                "grpc",
                grpc,
                r#""network":"grpc","grpcSettings":{"serviceName":"gsvc"}"#
            ),
        ),
        &entries,
    );
    Setup {
        ws,
        hu,
        grpc,
        entries,
        echo,
        server,
        _client: client,
    }
}

/// Sends `req`, reads until the server closes (or 5 s), returns what came back.
fn exchange(port: u16, req: &[u8]) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.write_all(req);
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

fn upgrade(path: &str, host: &str, extra: &str) -> Vec<u8> {
    format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n"
    )
    .into_bytes()
}

fn good_clients_still_served(s: &Setup) {
    for (i, port) in s.entries.into_iter().enumerate() {
        let data = pattern(2 << 20, i as u64);
        let c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        assert!(
            echo_through(c, &data) == data,
            "entry {i}\n{}",
            s.server.output()
        );
    }
}

#[test]
fn websocket_requests_that_are_not_ours() {
    let s = setup();
    // A good client moves data while the bad ones come in.
    let busy = {
        let port = s.entries[0];
        std::thread::spawn(move || {
            let data = pattern(30 << 20, 99);
            let c = TcpStream::connect(("127.0.0.1", port)).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            echo_through(c, &data) == data
        })
    };
    let r = exchange(s.ws, b"GET /ray HTTP/1.1\r\nHost: good.test\r\n\r\n");
    assert!(r.starts_with("HTTP/1.1 400 "), "not an upgrade: {r:?}");
    let r = exchange(s.ws, &upgrade("/other", "good.test", ""));
    assert!(r.starts_with("HTTP/1.1 404 "), "wrong path: {r:?}");
    let r = exchange(s.ws, &upgrade("/ray", "evil.test", ""));
    assert!(r.starts_with("HTTP/1.1 404 "), "wrong host: {r:?}");
    let big = format!("X-Pad: {}\r\n", "a".repeat(20_000));
    let r = exchange(s.ws, &upgrade("/ray", "good.test", &big));
    assert!(r.starts_with("HTTP/1.1 431 "), "oversized request: {r:?}");
    let r = exchange(
        s.ws,
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\r\n\r\n",
    );
    assert!(r.starts_with("HTTP/1.1 400 "), "not HTTP: {r:?}");
    let r = exchange(s.ws, b"POST /ray HTTP/1.1\r\nHost: good.test\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n");
    assert!(r.starts_with("HTTP/1.1 405 "), "not GET: {r:?}");
    // Early-data garbage: no early data, the upgrade goes on without echoing it.
    let r = exchange(
        s.ws,
        &upgrade(
            "/ray",
            "good.test",
            "Sec-WebSocket-Protocol: !!not base64!!\r\n",
        ),
    );
    assert!(r.starts_with("HTTP/1.1 101 "), "{r:?}");
    assert!(!r.contains("Sec-WebSocket-Protocol"), "{r:?}");
    // Frames after a good upgrade: unmasked from a client, a control frame over 125 bytes, a
    // reserved opcode, a 2^62-byte frame cut short. Each connection is closed.
    for frame in [
        vec![0x82u8, 0x03, 1, 2, 3],
        vec![0x89u8, 0xfe, 0x00, 0xc8, 0, 0, 0, 0],
        vec![0x83u8, 0x80, 0, 0, 0, 0],
        vec![0x82u8, 0xff, 0x40, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 9, 9],
    ] {
        let mut req = upgrade("/ray", "good.test", "");
        req.extend_from_slice(&frame);
        let t = std::time::Instant::now();
        let r = exchange(s.ws, &req);
        assert!(r.starts_with("HTTP/1.1 101 "), "{r:?}");
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "frame {frame:02x?} kept the connection open"
        );
    }
    let out = s.server.output();
    for what in [
        "wrong path",
        "wrong host",
        "unmasked frame",
        "control frame",
    ] {
        assert!(out.contains(what), "no log of {what:?}\n{out}");
    }
    assert!(busy.join().unwrap(), "the good connection was hurt");
    good_clients_still_served(&s);
}

#[test]
fn httpupgrade_requests_that_are_not_ours_get_no_answer() {
    let s = setup();
    for req in [
        b"GET /hu HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        b"GET /nope HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
            .to_vec(),
        b"\x00\x01garbage\r\n\r\n".to_vec(),
    ] {
        let r = exchange(s.hu, &req);
        assert_eq!(r, "", "Xray closes without an answer");
    }
    let out = s.server.output();
    assert!(out.contains("HTTPUpgrade: wrong path"), "{out}");
    good_clients_still_served(&s);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_calls_that_are_not_ours() {
    let s = tokio::task::spawn_blocking(setup).await.unwrap();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", s.grpc))
        .await
        .unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    let call = |path: &str, ctype: &str| {
        http::Request::post(format!("http://x{path}"))
            .header("content-type", ctype)
            .body(())
            .unwrap()
    };
    // An unknown service: grpc-status 12 (UNIMPLEMENTED), as grpc-go answers.
    let mut c = client.clone().ready().await.unwrap();
    let (resp, _send) = c
        .send_request(call("/other/Tun", "application/grpc"), true)
        .unwrap();
    let resp = resp.await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["grpc-status"], "12");
    // Not gRPC at all: 415.
    let mut c = client.clone().ready().await.unwrap();
    let (resp, _send) = c
        .send_request(call("/gsvc/Tun", "text/plain"), true)
        .unwrap();
    assert_eq!(resp.await.unwrap().status(), 415);
    // A message with a bad length, a compressed message: the call is reset, the connection
    // lives on.
    for bad in [
        &[0u8, 0x7f, 0xff, 0xff, 0xff][..],
        &[1u8, 0, 0, 0, 1, 0x0a][..],
        &[0u8, 0, 0, 0, 2, 0x0a, 0x09][..],
    ] {
        let mut c = client.clone().ready().await.unwrap();
        let (resp, mut send) = c
            .send_request(call("/gsvc/Tun", "application/grpc"), false)
            .unwrap();
        send.send_data(bytes::Bytes::copy_from_slice(bad), true)
            .unwrap();
        let resp = tokio::time::timeout(Duration::from_secs(5), resp)
            .await
            .expect("answered")
            .unwrap();
        let mut body = resp.into_body();
        let end = tokio::time::timeout(Duration::from_secs(5), async {
            while let Some(d) = body.data().await {
                if d.is_err() {
                    return;
                }
            }
        })
        .await;
        assert!(end.is_ok(), "the bad call {bad:02x?} was not ended");
    }
    let out = s.server.output();
    assert!(out.contains("call to unknown /other/Tun"), "{out}");
    assert!(out.contains("not a gRPC call"), "{out}");
    let _ = s.echo;
    tokio::task::spawn_blocking(move || good_clients_still_served(&s))
        .await
        .unwrap();
}
