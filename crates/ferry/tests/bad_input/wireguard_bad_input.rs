//! What hostile datagrams do to a WireGuard inbound: garbage of every message type and length,
//! data for indices nobody holds, and a flood of initiations that pass mac1 (the MAC anyone who
//! knows the server's public key can compute) get no answer but cookie replies under load; the
//! established peer's traffic and a new connection of it go on through all of it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use std::time::{Duration, Instant};

use blake2::digest::consts::U16;
use blake2::digest::{Digest, KeyInit, Mac};
use serde_json::json;

use crate::common::{echo_server, echo_through, free_port, pattern, start_instance};
use crate::proxy_clients::{socks5_connect, Target};

const SERVER_KEY: &str = "UG+dU5EFwwVt6jsZ3f4AT06YDBWDqfBYqTjfk/jn+WE=";
const SERVER_PUB: [u8; 32] = [
    0x04, 0x9b, 0x77, 0x2b, 0x05, 0x61, 0x11, 0x8b, 0x67, 0xcb, 0xbe, 0x38, 0xf9, 0x8a, 0xce, 0x27,
    0x14, 0x93, 0x6a, 0x56, 0x23, 0x99, 0xc4, 0x83, 0x8d, 0x73, 0xc3, 0xd3, 0x3b, 0xa5, 0xfc, 0x28,
];
const CLIENT_KEY: &str = "cITpcmD49xrzKowCX7a984l4DsWXLz6n1jN7EhkYekk=";
const CLIENT_PUB: &str = "F5W7kWjx06QvHqNDmu8M+NZP0LDG6lcOcOOcG8x3Yww=";

/// mac1 over an initiation's first 116 bytes, keyed with HASH("mac1----" || server public).
fn with_mac1(mut m: [u8; 148]) -> [u8; 148] {
    let mut h = blake2::Blake2s256::new();
    h.update(b"mac1----");
    h.update(SERVER_PUB);
    let key = h.finalize();
    let mut mac = <blake2::Blake2sMac<U16> as KeyInit>::new_from_slice(&key).unwrap();
    mac.update(&m[..116]);
    m[116..132].copy_from_slice(&mac.finalize().into_bytes());
    m[132..].fill(0);
    m
}

struct Rng(u32);

impl Rng {
    fn byte(&mut self) -> u8 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 17;
        self.0 ^= self.0 << 5;
        self.0 as u8
    }
    fn fill(&mut self, b: &mut [u8]) {
        for x in b {
            *x = self.byte();
        }
    }
}

fn through(socks: u16, echo: std::net::SocketAddr, n: usize) -> bool {
    let data = pattern(n, 11);
    let Ok(s) = socks5_connect(socks, None, Target::Addr(echo)) else {
        return false;
    };
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    echo_through(s, &data) == data
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn floods_get_cookies_at_most_and_the_peer_goes_on() {
    let echo = echo_server();
    let (wg, socks) = (free_port(), free_port());
    let _server = start_instance(json!({
        "inbounds": [{"tag": "wg-in", "listen": "127.0.0.1", "port": wg, "protocol": "wireguard",
            "settings": {"secretKey": SERVER_KEY, "address": ["10.66.0.1/32"],
                "peers": [{"publicKey": CLIENT_PUB, "allowedIPs": ["10.66.0.2/32"]}]}}],
        // The client asks for a documentation address; the server's freedom sends it to the echo.
        "outbounds": [{"protocol": "freedom", "settings": {"redirect": echo.to_string(),
            "finalRules": [{"action": "allow", "ip": ["127.0.0.0/8"]}]}}]
    }))
    .await;
    let _client = start_instance(json!({
        "inbounds": [{"listen": "127.0.0.1", "port": socks, "protocol": "socks",
            "settings": {"auth": "noauth"}}],
        "outbounds": [{"protocol": "wireguard", "settings": {"secretKey": CLIENT_KEY,
            "address": ["10.66.0.2/32"],
            "peers": [{"publicKey": "BJt3KwVhEYtny744+YrOJxSTalYjmcSDjXPD0zul/Cg=",
                "endpoint": format!("127.0.0.1:{wg}")}]}}]
    }))
    .await;
    let target: std::net::SocketAddr = "192.0.2.7:7".parse().unwrap();
    let ok = tokio::task::spawn_blocking(move || through(socks, target, 256 << 10))
        .await
        .unwrap();
    assert!(ok, "the peer's first connection");
    // A long-lived connection of the peer, open across the flood.
    let held = tokio::task::spawn_blocking(move || {
        let s = socks5_connect(socks, None, Target::Addr(target)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    })
    .await
    .unwrap();

    let u = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut rng = Rng(0x9e37_79b9);
    let mut sent = 0;
    // Garbage: every type at its size and off it, empty, huge.
    for i in 0..3000usize {
        let len = match i % 6 {
            0 => 148,
            1 => 92,
            2 => 64,
            3 => 32 + i % 1400,
            4 => i % 8,
            _ => 60000,
        };
        let mut d = vec![0u8; len];
        rng.fill(&mut d);
        if let Some(t) = d.first_mut() {
            *t = (i % 5) as u8;
        }
        u.send_to(&d, ("127.0.0.1", wg)).await.unwrap();
        sent += 1;
    }
    // Initiations that pass mac1: beyond 100 a second the server wants a cookie.
    for _ in 0..1500 {
        let mut m = [0u8; 148];
        rng.fill(&mut m);
        m[..4].copy_from_slice(&[1, 0, 0, 0]);
        u.send_to(&with_mac1(m), ("127.0.0.1", wg)).await.unwrap();
        sent += 1;
    }
    let mut buf = vec![0u8; 65536];
    let (mut cookies, mut other) = (0, 0);
    while let Ok(Ok((n, _))) =
        tokio::time::timeout(Duration::from_millis(700), u.recv_from(&mut buf)).await
    {
        if n == 64 && buf[0] == 3 {
            cookies += 1;
        } else {
            other += 1;
        }
    }
    assert_eq!(
        other, 0,
        "{sent} datagrams got {other} answers that are not cookies"
    );
    assert!(cookies > 0, "a flood of initiations got no cookie reply");
    assert!(cookies <= 1500);

    // The held connection and a new one still carry bytes.
    let t0 = Instant::now();
    let ok = tokio::task::spawn_blocking(move || {
        let data = pattern(64 << 10, 3);
        echo_through(held, &data) == data && through(socks, target, 256 << 10)
    })
    .await
    .unwrap();
    assert!(ok, "the peer's traffic after the flood");
    assert!(t0.elapsed() < Duration::from_secs(20));
}
