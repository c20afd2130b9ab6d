//! Micro-benchmarks (no harness): Shadowsocks chunk codec throughput per AEAD, the speed of
//! in-place vs out-of-place sealing and opening of one chunk, and the cost of finding the user of
//! a multi-user AEAD connection (key trial) for 1, 10 and 100 users.
//! Run with `cargo bench -p ferry --bench shadowsocks`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

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
            user: User::new(format!("u{i}"), 0),
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
    stream_speed();
    seal_variants(AeadAlg::Aes128Gcm, "aes-128-gcm");
    seal_variants(AeadAlg::ChaCha20Poly1305, "chacha20-poly1305");
    for n in [1, 10, 100] {
        key_trial(n);
    }
}

/// One 0x3FFF chunk sealed/opened in place (after a copy, as a relay must) or out of place.
fn seal_variants(alg: AeadAlg, name: &str) {
    let kl = if alg == AeadAlg::Aes128Gcm { 16 } else { 32 };
    let c = AeadCipher::new(alg, &vec![3u8; kl]).unwrap();
    let nonce = [0u8; 24];
    let n = &nonce[..alg.nonce_len()];
    let src = vec![0x5au8; AEAD_MAX_CHUNK];
    let mut sealed = vec![0u8; AEAD_MAX_CHUNK + 16];
    c.seal_to(n, &src, &mut sealed).unwrap();
    let mut work = sealed.clone();
    let mut plain = vec![0u8; AEAD_MAX_CHUNK];
    for variant in ["seal copy+in place", "seal_to", "open in place", "open_to"] {
        let (mut bytes, t) = (0u64, Instant::now());
        while t.elapsed() < Duration::from_millis(300) {
            for _ in 0..64 {
                match variant {
                    "seal copy+in place" => {
                        work[..src.len()].copy_from_slice(&src);
                        c.seal_with_tag(n, &mut work);
                    }
                    "seal_to" => c.seal_to(n, &src, &mut work).unwrap(),
                    "open in place" => {
                        work.copy_from_slice(&sealed);
                        c.open(n, &mut work).unwrap();
                    }
                    _ => c.open_to(n, &sealed, &mut plain).unwrap(),
                }
                bytes += src.len() as u64;
            }
        }
        let gbs = bytes as f64 / t.elapsed().as_secs_f64() / 1e9;
        println!("{name:<18} {variant:<19} {gbs:6.2} GB/s (one chunk, one core)");
    }
}

/// Stream ciphers, 32 KiB writes: our `StreamCrypt` for aes-128-cfb (aws-lc encryption,
/// RustCrypto's parallel block decryption) against RustCrypto's buffered CFB both ways, and
/// chacha20-ietf.
fn stream_speed() {
    use aes::cipher::KeyIvInit;
    use ferry::proxy::shadowsocks::stream_cipher::StreamCrypt;
    let key = [7u8; 32];
    let iv = [9u8; 16];
    let src = vec![0x5au8; 32 * 1024];
    let run = |name: &str, f: &mut dyn FnMut(&[u8], &mut [u8])| {
        let mut dst = vec![0u8; 32 * 1024 + 16];
        let (mut bytes, t) = (0u64, Instant::now());
        while t.elapsed() < Duration::from_millis(300) {
            f(&src, &mut dst);
            bytes += src.len() as u64;
        }
        let gbs = bytes as f64 / t.elapsed().as_secs_f64() / 1e9;
        println!("{name:<44} {gbs:6.2} GB/s (one core)");
    };
    for (m, name) in [
        (Method::Aes128Cfb, "aes-128-cfb"),
        (Method::Aes256Cfb, "aes-256-cfb"),
        (Method::Chacha20Ietf, "chacha20-ietf"),
        (Method::Rc4Md5, "rc4-md5"),
    ] {
        let (k, v) = (&key[..m.key_len()], &iv[..m.salt_len()]);
        for enc in [true, false] {
            let dir = if enc { "encrypt" } else { "decrypt" };
            let mut c = StreamCrypt::new(m, k, v, enc).unwrap();
            run(&format!("{name} StreamCrypt {dir}"), &mut |s, d| {
                c.apply_to(s, d)
            });
        }
    }
    let mut e = cfb_mode::BufEncryptor::<aes::Aes128>::new_from_slices(&key[..16], &iv).unwrap();
    run("aes-128-cfb RustCrypto BufEncryptor", &mut |s, d| {
        d[..s.len()].copy_from_slice(s);
        e.encrypt(&mut d[..s.len()]);
    });
    let mut dd = cfb_mode::BufDecryptor::<aes::Aes128>::new_from_slices(&key[..16], &iv).unwrap();
    run("aes-128-cfb RustCrypto BufDecryptor", &mut |s, d| {
        d[..s.len()].copy_from_slice(s);
        dd.decrypt(&mut d[..s.len()]);
    });
    // ShadowsocksR's auth_* protocols hash every byte (HMAC-MD5 or -SHA1 of each packet).
    use md5::Digest;
    run("md5 (RustCrypto), 32 KiB", &mut |s, d| {
        d[..16].copy_from_slice(&md5::Md5::digest(s));
    });
    run("sha1 (RustCrypto), 32 KiB", &mut |s, d| {
        d[..20].copy_from_slice(&sha1::Sha1::digest(s));
    });
}
