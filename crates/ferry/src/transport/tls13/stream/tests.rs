//! Two streams over a pipe: bytes both ways, one-record mode, KeyUpdate.

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::super::record;
use super::*;

fn pair() -> (Tls13Stream, Tls13Stream) {
    let (a, b) = tokio::io::duplex(1 << 20);
    let s = Suite::Aes128Gcm;
    let c2s = vec![1u8; 32];
    let s2c = vec![2u8; 32];
    let client = Tls13Stream::new(
        Box::new(a),
        &[],
        s,
        Direction::new(s, s2c.clone()),
        Direction::new(s, c2s.clone()),
    );
    let server = Tls13Stream::new(
        Box::new(b),
        &[],
        s,
        Direction::new(s, c2s),
        Direction::new(s, s2c),
    );
    (client, server)
}

#[tokio::test]
async fn bytes_cross_both_ways_and_close_notify_ends_the_stream() {
    let (mut c, mut s) = pair();
    let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7) as u8).collect();
    let d = data.clone();
    let w = tokio::spawn(async move {
        c.write_all(&d).await.unwrap();
        c.shutdown().await.unwrap();
        c
    });
    let mut got = Vec::new();
    s.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, data);
    let mut c = w.await.unwrap();
    s.write_all(b"back").await.unwrap();
    s.flush().await.unwrap();
    let mut b = [0u8; 4];
    c.read_exact(&mut b).await.unwrap();
    assert_eq!(&b, b"back");
}

#[tokio::test]
async fn one_record_mode_leaves_the_rest_undecrypted_for_a_switch_to_raw() {
    let (mut c, mut s) = pair();
    c.write_all(b"first").await.unwrap();
    c.write_all(b"second").await.unwrap();
    c.flush().await.unwrap();
    // Then raw bytes, as a Vision peer writes after its switch.
    c.write_raw();
    c.write_all(b"raw!").await.unwrap();
    c.flush().await.unwrap();
    s.set_record_at_a_time(true);
    let mut b = [0u8; 3];
    s.read_exact(&mut b).await.unwrap();
    assert_eq!(&b, b"fir");
    assert_eq!(s.decrypted().unwrap(), b"st");
    let mut b = [0u8; 6];
    s.read_exact(&mut b).await.unwrap();
    assert_eq!(&b, b"second");
    let held = s.read_raw().unwrap();
    let mut rest = vec![0u8; 4 - held.len()];
    s.read_exact(&mut rest).await.unwrap();
    assert_eq!([held, rest].concat(), b"raw!");
}

#[tokio::test]
async fn a_key_update_from_the_peer_is_followed() {
    let (mut c, mut s) = pair();
    // The client asks for an update (update_requested = 1) and moves its own key on.
    let mut m = Vec::new();
    record::message(record::KEY_UPDATE, &[1], &mut m);
    record::seal(&mut c.write.key, record::HANDSHAKE, &m, 0, &mut c.tx);
    c.write.update(Suite::Aes128Gcm);
    c.write_all(b"after update").await.unwrap();
    c.flush().await.unwrap();
    let mut b = [0u8; 12];
    s.read_exact(&mut b).await.unwrap();
    assert_eq!(&b, b"after update");
    // The server answers with its own update before its next data.
    s.write_all(b"reply").await.unwrap();
    s.flush().await.unwrap();
    let mut b = [0u8; 5];
    c.read_exact(&mut b).await.unwrap();
    assert_eq!(&b, b"reply");
}
