use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use crate::transport::BoxStream;

fn pair(server: &str, client: &str) -> (Arc<Server>, Arc<Client>) {
    let s = ServerConfig::parse(server).unwrap().unwrap();
    let c = ClientConfig::parse(client).unwrap().unwrap();
    (Arc::new(Server::new(s)), Client::new(c))
}

/// One connection: the client writes `up`, the server echoes what it reads back.
async fn echo(server: &Arc<Server>, client: &Arc<Client>, up: &[u8]) -> Vec<u8> {
    let (a, b) = tokio::io::duplex(1 << 16);
    let server = server.clone();
    let n = up.len();
    let srv = tokio::spawn(async move {
        let mut s = server
            .handshake(Box::new(b) as BoxStream, false)
            .await
            .unwrap();
        let mut got = vec![0u8; n];
        s.read_exact(&mut got).await.unwrap();
        s.write_all(&got).await.unwrap();
        s.flush().await.unwrap();
        s
    });
    let mut c = client
        .handshake(Box::new(a) as BoxStream, false)
        .await
        .unwrap();
    c.write_all(up).await.unwrap();
    c.flush().await.unwrap();
    let mut back = vec![0u8; n];
    c.read_exact(&mut back).await.unwrap();
    drop(srv.await.unwrap());
    back
}

fn keys() -> (String, String, String, String) {
    let [x, m] = generate();
    let tail = |s: &str| s.rsplit('.').next().unwrap().to_string();
    (tail(&x.1), tail(&x.2), tail(&m.1), tail(&m.2))
}

#[tokio::test]
async fn every_mode_carries_bytes_both_ways_with_1rtt_then_0rtt() {
    let (xs, xc, ms, mc) = keys();
    let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
    for mode in ["native", "xorpub", "random"] {
        for (s, c) in [(&xs, &xc), (&ms, &mc)] {
            let (server, client) = pair(
                &format!("mlkem768x25519plus.{mode}.600s.{s}"),
                &format!("mlkem768x25519plus.{mode}.0rtt.{c}"),
            );
            assert!(!client.has_ticket());
            assert_eq!(echo(&server, &client, &data).await, data, "{mode} 1-RTT");
            assert!(client.has_ticket(), "{mode}: a ticket after 1-RTT");
            assert_eq!(server.sessions(), 1);
            assert_eq!(echo(&server, &client, &data).await, data, "{mode} 0-RTT");
            assert_eq!(
                echo(&server, &client, b"x").await,
                b"x",
                "{mode} 0-RTT again"
            );
            assert_eq!(server.sessions(), 1, "0-RTT issues no ticket");
        }
    }
}

#[tokio::test]
async fn a_chain_of_keys_and_custom_padding_work_and_1rtt_keeps_no_ticket() {
    let (xs, xc, ms, mc) = keys();
    let (server, client) = pair(
        &format!("mlkem768x25519plus.random.300-600s.100-40-60.50-0-5.80-10-20.{ms}.{xs}"),
        &format!("mlkem768x25519plus.random.1rtt.100-35-36.{mc}.{xc}"),
    );
    assert_eq!(echo(&server, &client, b"hello").await, b"hello");
    assert!(!client.has_ticket());
    // The chain's keys in another order do not match.
    let (server2, _) = pair(
        &format!("mlkem768x25519plus.random.600s.{xs}.{ms}"),
        &format!("mlkem768x25519plus.random.1rtt.{mc}.{xc}"),
    );
    let (a, b) = tokio::io::duplex(1 << 16);
    let srv = tokio::spawn(async move { server2.handshake(Box::new(b), false).await.err() });
    let _ = client.handshake(Box::new(a), false).await;
    assert!(srv.await.unwrap().is_some());
}

#[test]
fn strings_parse_as_xray_reads_them() {
    let (xs, xc, ms, mc) = keys();
    let s = ServerConfig::parse(&format!("mlkem768x25519plus.xorpub.300-600s.{xs}"))
        .unwrap()
        .unwrap();
    assert_eq!((s.mode, s.seconds), (Mode::Xorpub, (300, 600)));
    let s = ServerConfig::parse(&format!("mlkem768x25519plus.native.0.{ms}"))
        .unwrap()
        .unwrap();
    assert_eq!(s.seconds, (0, 0));
    assert!(ServerConfig::parse("none").unwrap().is_none());
    assert!(ServerConfig::parse("").unwrap_err().contains("\"none\""));
    // A client key on the server, a server key on the client, an unknown mode: unsupported.
    for bad in [
        format!("mlkem768x25519plus.native.600s.{mc}"),
        format!("mlkem768x25519plus.plain.600s.{xs}"),
        "mlkem768x25519plus.native.600s".to_string(),
        "mlkem768".into(),
    ] {
        let e = ServerConfig::parse(&bad).unwrap_err();
        assert!(e.starts_with("unsupported \"decryption\""), "{bad}: {e}");
    }
    let e = ClientConfig::parse(&format!("mlkem768x25519plus.native.600s.{xc}")).unwrap_err();
    assert!(e.starts_with("unsupported \"encryption\""), "{e}");
    let e = ClientConfig::parse(&format!("mlkem768x25519plus.native.0rtt.{ms}")).unwrap_err();
    assert!(e.starts_with("unsupported \"encryption\""), "{e}");
    let e =
        ServerConfig::parse(&format!("mlkem768x25519plus.native.600s.100-20-30.{xs}")).unwrap_err();
    assert_eq!(e, "first padding length must not be smaller than 35");
    let e = ServerConfig::parse(&format!("mlkem768x25519plus.native.600s.100-40-65600.{xs}"))
        .unwrap_err();
    assert_eq!(e, "total padding length must not be larger than 65553");
    // Go's lax base64: a key whose last character carries non-zero trailing bits.
    let mut lax = xc.clone();
    let last = lax.pop().unwrap();
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let i = alphabet.iter().position(|&c| c as char == last).unwrap();
    lax.push(alphabet[i | 1] as char);
    assert!(ClientConfig::parse(&format!("mlkem768x25519plus.native.0rtt.{lax}")).is_ok());
}

#[tokio::test]
async fn strangers_get_refused_and_an_unknown_ticket_gets_noise() {
    let (xs, xc, _, _) = keys();
    let (server, client) = pair(
        &format!("mlkem768x25519plus.native.600s.{xs}"),
        &format!("mlkem768x25519plus.native.0rtt.{xc}"),
    );
    // Random bytes: the first length does not open.
    let (mut a, b) = tokio::io::duplex(1 << 16);
    let mut junk = vec![0u8; 200];
    crate::common::rand::fill(&mut junk);
    junk[47] &= 0x7f;
    a.write_all(&junk).await.unwrap();
    let e = server.handshake(Box::new(b), false).await.err().unwrap();
    assert_eq!(e.kind, "auth", "{e}");
    // A top bit set in the X25519 relay.
    let (mut a, b) = tokio::io::duplex(1 << 16);
    junk[47] |= 0x80;
    a.write_all(&junk).await.unwrap();
    let e = server.handshake(Box::new(b), false).await.err().unwrap();
    assert!(e.why.contains("highest bit"), "{e}");
    // A client with a ticket this server never issued (another server's): noise, then the
    // client drops its ticket and fails with "new handshake needed".
    let other = Arc::new(Server::new(
        ServerConfig::parse(&format!("mlkem768x25519plus.native.600s.{xs}"))
            .unwrap()
            .unwrap(),
    ));
    let _ = echo(&other, &client, b"a").await;
    assert!(client.has_ticket());
    let (a, b) = tokio::io::duplex(1 << 16);
    let srv = {
        let server = server.clone();
        tokio::spawn(async move { server.handshake(Box::new(b), false).await.err() })
    };
    let mut c = client.handshake(Box::new(a), false).await.unwrap();
    c.write_all(b"first").await.unwrap();
    c.flush().await.unwrap();
    let mut buf = [0u8; 16];
    let e = c.read(&mut buf).await.unwrap_err();
    assert!(e.to_string().contains("new handshake needed"), "{e}");
    assert_eq!(srv.await.unwrap().unwrap().kind, "expired");
    assert!(!client.has_ticket());
    // Next time: 1-RTT with this server works.
    assert_eq!(echo(&server, &client, b"b").await, b"b");
}

#[tokio::test]
async fn a_replayed_0rtt_flight_is_refused() {
    let (xs, xc, _, _) = keys();
    let (server, client) = pair(
        &format!("mlkem768x25519plus.native.600s.{xs}"),
        &format!("mlkem768x25519plus.native.0rtt.{xc}"),
    );
    let _ = echo(&server, &client, b"a").await;
    // Capture a 0-RTT flight as it leaves the client.
    let (a, mut b) = tokio::io::duplex(1 << 16);
    let mut c = client.handshake(Box::new(a), false).await.unwrap();
    c.write_all(b"data").await.unwrap();
    c.flush().await.unwrap();
    let mut flight = vec![0u8; 4096];
    let n = b.read(&mut flight).await.unwrap();
    flight.truncate(n);
    for (i, want) in [(0, None), (1, Some("replay"))] {
        let (mut x, y) = tokio::io::duplex(1 << 16);
        x.write_all(&flight).await.unwrap();
        let r = server.handshake(Box::new(y), false).await;
        assert_eq!(r.err().map(|e| e.kind), want, "sending {i}");
    }
}
