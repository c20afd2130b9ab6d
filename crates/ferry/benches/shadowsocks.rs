//! Micro-benchmarks (no harness): Shadowsocks chunk codec throughput per AEAD, and the cost of
//! finding the user of a multi-user AEAD connection (key trial) for 1, 10 and 100 users.
//! Run with `cargo bench -p ferry --bench shadowsocks`.

use std::time::{Duration, Instant};

use ferry::proxy::shadowsocks::aead::{ChunkOpener, ChunkSealer, Open, AEAD_MAX_CHUNK};
use ferry::proxy::shadowsocks::cipher::{aead_subkey, AeadAlg, AeadCipher, Method};
use ferry::proxy::shadowsocks::inbound::try_users;
use ferry::proxy::shadowsocks::Account;
use ferry::proxy::User;

fn codec(alg: AeadAlg, name: &str) {
    let kl = if alg == AeadAlg::Aes128Gcm { 16 } else { 32 };
    let key = vec![3u8; kl];
    let mut s = ChunkSealer::new(
        AeadCipher::new(alg, &key).unwrap(),
        alg.nonce_len(),
        AEAD_MAX_CHUNK,
    );
    let mut o = ChunkOpener::new(
        AeadCipher::new(alg, &key).unwrap(),
        alg.nonce_len(),
        AEAD_MAX_CHUNK,
    );
    let data = vec![0x5au8; 32 * 1024];
    let mut wire = Vec::with_capacity(40 * 1024);
    let (mut bytes, t) = (0u64, Instant::now());
    while t.elapsed() < Duration::from_secs(1) {
        wire.clear();
        s.seal_all(&data, &mut wire);
        let mut at = 0;
        while at < wire.len() {
            match o.open(&mut wire[at..]).unwrap() {
                Open::Data { consumed, .. } => at += consumed,
                Open::Need(_) => unreachable!(),
            }
        }
        bytes += data.len() as u64;
    }
    let gbs = bytes as f64 / t.elapsed().as_secs_f64() / 1e9;
    println!("{name:<26} seal+open {gbs:6.2} GB/s (one core)");
}

fn key_trial(n: usize) {
    let users: Vec<Account> = (0..n)
        .map(|i| Account {
            method: Method::Aes128Gcm,
            key: vec![i as u8; 16],
            user: User {
                email: format!("u{i}").into(),
                level: 0,
            },
            hash: [0; 16],
        })
        .collect();
    // A request from the last user: the worst case.
    let salt = [9u8; 16];
    let c = AeadCipher::new(AeadAlg::Aes128Gcm, &aead_subkey(&users[n - 1].key, &salt)).unwrap();
    let mut head = salt.to_vec();
    let mut lb = vec![0u8, 10];
    lb.extend_from_slice(&[0; 16]);
    c.seal_with_tag(&[0; 12], &mut lb);
    head.extend_from_slice(&lb);
    let (mut k, t) = (0u32, Instant::now());
    while t.elapsed() < Duration::from_millis(500) {
        assert!(try_users(&users, &head).is_some());
        k += 1;
    }
    let us = t.elapsed().as_secs_f64() * 1e6 / k as f64;
    println!("multi-user AEAD, {n:>3} users: {us:8.1} µs per new connection (worst case)");
}

fn main() {
    codec(AeadAlg::Aes128Gcm, "aes-128-gcm (aws-lc-rs)");
    codec(AeadAlg::Aes256Gcm, "aes-256-gcm (aws-lc-rs)");
    codec(AeadAlg::ChaCha20Poly1305, "chacha20-poly1305 (aws-lc)");
    codec(AeadAlg::XChaCha20Poly1305, "xchacha20-poly1305 (Rust)");
    for n in [1, 10, 100] {
        key_trial(n);
    }
}
