//! What changes at run time without a restart: inbounds added and removed, the outbound
//! registry (a replaced outbound takes the next connection; live ones go on).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::common;
use common::free_port;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ferry::app::instance::Instance;
use ferry::config::{Config, Diagnostics};
use ferry::registry::OutboundEntry;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

async fn echo_server() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.into_split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

fn config(v: serde_json::Value) -> Config {
    Config::from_value(&v, &Diagnostics::default()).unwrap()
}

/// Whether `port` accepts a connection that echoes `msg`.
async fn echoes(port: u16, msg: &[u8]) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)).await else {
        return false;
    };
    if s.write_all(msg).await.is_err() {
        return false;
    }
    let mut b = vec![0u8; msg.len()];
    matches!(
        tokio::time::timeout(Duration::from_secs(2), s.read_exact(&mut b)).await,
        Ok(Ok(_))
    ) && b == msg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inbounds_and_outbounds_change_while_connections_live() {
    let echo = echo_server().await;
    let p1 = free_port();
    let doko = |tag: &str, port: u16| {
        json!({"tag": tag, "listen": "127.0.0.1", "port": port, "protocol": "dokodemo-door",
               "settings": {"address": "127.0.0.1", "port": echo.port()}})
    };
    let inst = Instance::start(config(json!({
        "inbounds": [doko("a", p1)],
        "outbounds": [{"tag": "out", "protocol": "freedom","settings":{"finalRules":[{"action":"allow","ip":["127.0.0.0/8","::1"]}]}}]
    })))
    .await
    .unwrap();
    assert!(echoes(p1, b"one").await);

    // A connection that stays open across every change below.
    let mut live = TcpStream::connect(("127.0.0.1", p1)).await.unwrap();
    live.write_all(b"x").await.unwrap();
    let mut b = [0u8; 1];
    live.read_exact(&mut b).await.unwrap();

    // A new inbound from config JSON, added while running.
    let p2 = free_port();
    let extra = config(json!({"inbounds": [doko("b", p2)]}))
        .inbounds
        .remove(0);
    inst.add_inbound(extra).await.unwrap();
    assert!(echoes(p2, b"two").await);
    let dup = config(json!({"inbounds": [doko("b", free_port())]}))
        .inbounds
        .remove(0);
    assert!(inst.add_inbound(dup).await.is_err(), "tags stay unique");

    // Replace the outbound "out" with a blackhole: new connections are dropped.
    let bh = config(json!({"outbounds": [{"tag": "out", "protocol": "blackhole"}]}));
    let o = &bh.outbounds[0];
    inst.dispatcher.outbounds.add(OutboundEntry {
        tag: Arc::from("out"),
        protocol: o.protocol.clone(),
        handler: o.handler.clone(),
        traffic: Default::default(),
    });
    assert!(!echoes(p2, b"three").await);
    // The live connection still reaches its freedom-dialed echo server.
    live.write_all(b"y").await.unwrap();
    live.read_exact(&mut b).await.unwrap();
    assert_eq!(&b, b"y");

    // Remove inbound "a": it stops accepting, its live connection goes on.
    assert!(inst.remove_inbound("a").await);
    assert!(!inst.remove_inbound("a").await);
    // The port is free once the removal returns.
    assert!(TcpStream::connect(("127.0.0.1", p1)).await.is_err());
    live.write_all(b"z").await.unwrap();
    live.read_exact(&mut b).await.unwrap();
    assert_eq!(&b, b"z");
    assert_eq!(inst.bound().iter().filter(|(t, _, _)| t == "a").count(), 0);
}
