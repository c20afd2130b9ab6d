//! Users added and removed at run time (the user manager the management API calls), on a
//! VMess and a Shadowsocks inbound, while other users' transfers run: no live connection
//! drops, a removed user's new connections are refused, an added user's work, and every
//! user's counters are exact. In process: a Ferry server and a Ferry client instance.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::common;
use common::{echo_server_async, free_port, start_instance};

use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const VA: &str = "6fd4b5a2-0c3e-4a8e-9d6c-1b2a3c4d5e6f";
const VB: &str = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2654435761).to_le_bytes()[1] ^ seed)
        .collect()
}

/// Sends `data` in `pieces` with a pause after each, reading the echo alongside; returns
/// what came back (the transfer takes about `pieces * pause`).
async fn slow_echo(port: u16, data: Vec<u8>, pieces: usize, pause: Duration) -> Vec<u8> {
    let s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let (mut r, mut w) = s.into_split();
    let len = data.len();
    let writer = tokio::spawn(async move {
        for c in data.chunks(len.div_ceil(pieces)) {
            w.write_all(c).await.unwrap();
            tokio::time::sleep(pause).await;
        }
        w
    });
    let mut got = vec![0u8; len];
    tokio::time::timeout(Duration::from_secs(30), r.read_exact(&mut got))
        .await
        .expect("echo in time")
        .unwrap();
    drop(writer.await.unwrap());
    got
}

/// Whether a connection through `port` echoes a few bytes within a second.
async fn echoes(port: u16) -> bool {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    s.write_all(&[7u8; 1000]).await.unwrap();
    let mut b = [0u8; 1000];
    matches!(
        tokio::time::timeout(Duration::from_secs(1), s.read_exact(&mut b)).await,
        Ok(Ok(_))
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_come_and_go_while_others_transfer() {
    let echo = echo_server_async().await;
    let (vport, sport) = (free_port(), free_port());
    let server = start_instance(json!({
        "stats": {},
        "policy": {"levels": {"0": {"statsUserUplink": true, "statsUserDownlink": true}}},
        "inbounds": [
            {"tag": "vm", "listen": "127.0.0.1", "port": vport, "protocol": "vmess",
             "settings": {"clients": [{"id": VA, "email": "va"}]}},
            {"tag": "ss", "listen": "127.0.0.1", "port": sport, "protocol": "shadowsocks",
             "settings": {"clients": [{"method": "aes-128-gcm", "password": "pa", "email": "sa"}]}}
        ],
        "outbounds": [{"protocol": "freedom","settings":{"finalRules":[{"action":"allow","ip":["127.0.0.0/8","::1"]}]}}]
    }))
    .await;
    let ports: Vec<u16> = (0..4).map(|_| free_port()).collect();
    let (pva, pvb, psa, psb) = (ports[0], ports[1], ports[2], ports[3]);
    let doko = |tag: &str, port: u16| {
        json!({"tag": tag, "listen": "127.0.0.1", "port": port, "protocol": "dokodemo-door",
               "settings": {"address": "127.0.0.1", "port": echo.port()}})
    };
    let vm = |tag: &str, id: &str| {
        json!({"tag": tag, "protocol": "vmess",
               "settings": {"address": "127.0.0.1", "port": vport, "id": id, "security": "aes-128-gcm"}})
    };
    let ss = |tag: &str, pw: &str| {
        json!({"tag": tag, "protocol": "shadowsocks",
               "settings": {"address": "127.0.0.1", "port": sport, "method": "aes-128-gcm", "password": pw}})
    };
    let rule = |i: &str, o: &str| json!({"inboundTag": [i], "outboundTag": o});
    let _client = start_instance(json!({
        "inbounds": [doko("va", pva), doko("vb", pvb), doko("sa", psa), doko("sb", psb)],
        "outbounds": [vm("va", VA), vm("vb", VB), ss("sa", "pa"), ss("sb", "pb")],
        "routing": {"rules": [rule("va", "va"), rule("vb", "vb"), rule("sa", "sa"), rule("sb", "sb")]}
    }))
    .await;

    // Not users yet.
    assert!(!echoes(pvb).await, "an unknown VMess user must be refused");
    assert!(
        !echoes(psb).await,
        "an unknown Shadowsocks user must be refused"
    );

    // Long transfers of the first users run while users are added and removed.
    let (la, lb) = (pattern(6 << 20, 1), pattern(6 << 20, 2));
    let pause = Duration::from_millis(50);
    let va_long = tokio::spawn(slow_echo(pva, la.clone(), 40, pause));
    let sa_long = tokio::spawn(slow_echo(psa, lb.clone(), 40, pause));
    tokio::time::sleep(Duration::from_millis(300)).await;

    let vin = server.inbound("vm").expect("vmess inbound");
    let sin = server.inbound("ss").expect("shadowsocks inbound");
    let vu = vin.handler.users().expect("vmess has users");
    let su = sin.handler.users().expect("shadowsocks has users");
    vu.add_user(&json!({"id": VB, "email": "vb"})).unwrap();
    su.add_user(&json!({"password": "pb", "email": "sb", "method": "aes-128-gcm"}))
        .unwrap();
    assert!(vu.add_user(&json!({"id": VB, "email": "other"})).is_err());
    let emails = |u: &dyn ferry::proxy::UserManager| {
        let mut v: Vec<String> = u.list_users().iter().map(|u| u.email.to_string()).collect();
        v.sort();
        v
    };
    assert_eq!(emails(vu), ["va", "vb"]);
    assert_eq!(emails(su), ["sa", "sb"]);

    let (b1, b2) = (pattern(1 << 20, 3), pattern(1 << 20, 4));
    assert!(slow_echo(pvb, b1.clone(), 4, Duration::ZERO).await == b1);
    assert!(slow_echo(psb, b2.clone(), 4, Duration::ZERO).await == b2);

    // Remove the first users while their transfers still run.
    assert!(vu.remove_user("va"));
    assert!(su.remove_user("sa"));
    assert!(!vu.remove_user("va"));
    assert!(!va_long.is_finished() && !sa_long.is_finished());
    assert!(!echoes(pva).await, "a removed VMess user must be refused");
    assert!(
        !echoes(psa).await,
        "a removed Shadowsocks user must be refused"
    );
    assert!(
        va_long.await.unwrap() == la,
        "the live VMess transfer went on"
    );
    assert!(
        sa_long.await.unwrap() == lb,
        "the live Shadowsocks transfer went on"
    );

    tokio::time::sleep(Duration::from_millis(300)).await;
    let st = server.stats.clone().expect("stats on");
    let get = |email: &str, dir: &str| {
        st.get(&format!("user>>>{email}>>>traffic>>>{dir}"))
            .unwrap_or(u64::MAX)
    };
    for (email, n) in [
        ("va", la.len()),
        ("sa", lb.len()),
        ("vb", b1.len()),
        ("sb", b2.len()),
    ] {
        assert_eq!(get(email, "uplink"), n as u64, "{email} uplink");
        assert_eq!(get(email, "downlink"), n as u64, "{email} downlink");
    }
}

/// Whether the server keeps a connection open (neither data nor EOF) for `wait` after it was
/// sent `junk`: the drain a failed handshake gets instead of a telling close.
async fn kept_open(port: u16, junk: &[u8], wait: Duration) -> bool {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    s.write_all(junk).await.unwrap();
    let mut b = [0u8; 16];
    tokio::time::timeout(wait, s.read(&mut b)).await.is_err()
}

/// Marzban's inbound shapes: a Shadowsocks inbound with `"clients": []` and no server-level
/// method, and a VMess inbound with no clients, start with nobody; the panel then adds users
/// (each Shadowsocks user with its own method), and their bytes go through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inbounds_that_start_empty_serve_users_added_later() {
    let echo = echo_server_async().await;
    let (sport, vport) = (free_port(), free_port());
    let server = start_instance(json!({
        "inbounds": [
            {"tag": "ss", "listen": "127.0.0.1", "port": sport, "protocol": "shadowsocks",
             "settings": {"clients": [], "network": "tcp,udp"}},
            {"tag": "vm", "listen": "127.0.0.1", "port": vport, "protocol": "vmess",
             "settings": {"clients": []}}
        ],
        "outbounds": [{"protocol": "freedom","settings":{"finalRules":[{"action":"allow","ip":["127.0.0.0/8","::1"]}]}}]
    }))
    .await;
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let doko = |tag: &str, port: u16| {
        json!({"tag": tag, "listen": "127.0.0.1", "port": port, "protocol": "tunnel",
               "settings": {"rewriteAddress": "127.0.0.1", "rewritePort": echo.port()}})
    };
    let ss = |tag: &str, method: &str, pw: &str| {
        json!({"tag": tag, "protocol": "shadowsocks",
               "settings": {"address": "127.0.0.1", "port": sport, "method": method, "password": pw}})
    };
    let rule = |t: &str| json!({"inboundTag": [t], "outboundTag": t});
    let _client = start_instance(json!({
        "inbounds": [doko("a", ports[0]), doko("b", ports[1]), doko("v", ports[2])],
        "outbounds": [
            ss("a", "aes-128-gcm", "pa"),
            ss("b", "chacha20-ietf-poly1305", "pb"),
            {"tag": "v", "protocol": "vmess",
             "settings": {"address": "127.0.0.1", "port": vport, "id": VA}}
        ],
        "routing": {"rules": [rule("a"), rule("b"), rule("v")]}
    }))
    .await;

    let (sin, vin) = (server.inbound("ss").unwrap(), server.inbound("vm").unwrap());
    let su = sin.handler.users().unwrap();
    let vu = vin.handler.users().unwrap();
    assert!(su.list_users().is_empty() && vu.list_users().is_empty());
    // With nobody to match, a handshake fails the way a wrong key does: drained, not closed.
    assert!(!echoes(ports[0]).await, "no Shadowsocks user yet");
    assert!(!echoes(ports[2]).await, "no VMess user yet");
    assert!(kept_open(sport, &[0x55; 100], Duration::from_millis(500)).await);

    su.add_user(&json!({"method": "aes-128-gcm", "password": "pa", "email": "a"}))
        .unwrap();
    let d = pattern(1 << 20, 5);
    assert!(slow_echo(ports[0], d.clone(), 4, Duration::ZERO).await == d);
    assert!(!echoes(ports[1]).await, "b is not a user yet");
    su.add_user(&json!({"method": "chacha20-ietf-poly1305", "password": "pb", "email": "b"}))
        .unwrap();
    assert!(slow_echo(ports[1], d.clone(), 4, Duration::ZERO).await == d);
    assert!(
        su.add_user(&json!({"password": "pc", "email": "c"}))
            .is_err(),
        "no server-level method: a user must name one"
    );

    vu.add_user(&json!({"id": VA, "email": "v"})).unwrap();
    assert!(slow_echo(ports[2], d.clone(), 4, Duration::ZERO).await == d);
}
