//! Fuzz entry points for the AEAD, OTA and 2022 decoders: plain functions that must never panic on
//! any input. The `fuzz/` crate at the repository root calls them from cargo-fuzz targets; a
//! unit test below feeds them random inputs so they are exercised without nightly.

use super::aead::{ChunkOpener, Open, AEAD_MAX_CHUNK, SS2022_MAX_CHUNK};
use super::cipher::{psk_hash16, AeadAlg, AeadCipher, Method};
use super::stream_cipher::{StreamCrypt, OTA_FLAG, OTA_MAC_LEN};
use super::{ota, ss2022, udp, Account};
use crate::proxy::User;

fn opener(alg: AeadAlg, max: usize) -> Option<ChunkOpener> {
    let k = [0x11u8; 32];
    let kl = if alg == AeadAlg::Aes128Gcm { 16 } else { 32 };
    Some(ChunkOpener::new(
        AeadCipher::new(alg, &k[..kl])?,
        alg.nonce_len(),
        max,
    ))
}

/// Drives a chunk opener over `data` as a reader would (pieces sized by the first byte).
fn drive(mut o: ChunkOpener, data: &[u8]) {
    let Some((&step, rest)) = data.split_first() else {
        return;
    };
    let step = step as usize + 1;
    let mut buf = rest.to_vec();
    let (mut start, mut avail) = (0usize, 0usize);
    for _ in 0..10_000 {
        match o.open(&mut buf[start..avail]) {
            Err(_) => return,
            Ok(Open::Data { consumed, plain }) => {
                assert!(plain.end <= consumed && start + consumed <= avail);
                start += consumed;
            }
            Ok(Open::Need(n)) => {
                assert!(n > avail - start);
                if avail == buf.len() {
                    return;
                }
                avail = (avail + step).min(buf.len());
            }
        }
    }
}

/// AEAD edition: the chunk decoder, the multi-user key trial and the UDP packet decoder.
pub fn aead(data: &[u8]) {
    for alg in [
        AeadAlg::Aes128Gcm,
        AeadAlg::ChaCha20Poly1305,
        AeadAlg::XChaCha20Poly1305,
    ] {
        if let Some(o) = opener(alg, AEAD_MAX_CHUNK) {
            drive(o, data);
        }
    }
    let users: Vec<Account> = [
        Method::Aes128Gcm,
        Method::Aes256Gcm,
        Method::Chacha20Poly1305,
    ]
    .iter()
    .map(|m| Account {
        method: *m,
        key: vec![7; m.key_len()],
        user: User::new("f", 0),
        hash: [0; 16],
    })
    .collect();
    let _ = super::inbound::try_users(&users, data);
    for m in [
        Method::Aes128Gcm,
        Method::XChacha20Poly1305,
        Method::Aes128Cfb,
        Method::None,
    ] {
        let mut p = data.to_vec();
        if let Ok((_, r)) = udp::decode_simple(m, &vec![7; m.key_len()], &mut p) {
            assert!(r.end <= p.len());
        }
    }
    let mut scratch = vec![0u8; data.len()];
    if let Ok((_, r)) = udp::decode_aead_to(Method::Aes128Gcm, &[7; 16], data, &mut scratch) {
        assert!(r.end <= scratch.len());
    }
    // One-time auth chunks (stream ciphers).
    let mut d = super::ota::ChunkDecoder::new(&[1; 16]);
    let mut at = 0;
    while let Ok(Some((consumed, r))) = d.decode(&data[at..]) {
        assert!(r.end <= consumed);
        at += consumed;
    }
}

/// 2022: header parsers, the response check, the chunk decoder and the UDP decoder.
pub fn ss2022(data: &[u8]) {
    let _ = ss2022::parse_fixed(data);
    if let Ok((_, r)) = ss2022::parse_variable(data) {
        assert!(r.end <= data.len());
    }
    if let Some(o) = opener(AeadAlg::Aes128Gcm, SS2022_MAX_CHUNK) {
        drive(
            o.with_first_header(
                ss2022::response_extra(16),
                ss2022::response_check(vec![0; 16]),
            ),
            data,
        );
    }
    let _ = ss2022::eih_tcp_open(
        &[1; 16],
        data.get(..16).unwrap_or(&[]),
        data.get(16..).unwrap_or(&[]),
    );
    let upsk = [2u8; 16];
    let users = [(&upsk[..], psk_hash16(&upsk))];
    for (m, eih) in [
        (Method::Blake3Aes128Gcm, true),
        (Method::Blake3Aes128Gcm, false),
        (Method::Blake3Chacha20Poly1305, false),
    ] {
        let key = vec![2u8; m.key_len()];
        for from_server in [false, true] {
            let r = udp::Receiver2022 {
                method: m,
                header_key: &key,
                users: if eih { &users } else { &[] },
                key: &key,
                from_server,
            };
            let mut p = data.to_vec();
            if let Ok(pk) = udp::decode_2022(&r, &mut p) {
                assert!(pk.payload.end <= p.len());
            }
        }
    }
}

const STREAM_METHODS: [Method; 9] = [
    Method::None,
    Method::Aes128Cfb,
    Method::Aes192Cfb,
    Method::Aes256Cfb,
    Method::Aes128Ctr,
    Method::Aes192Ctr,
    Method::Aes256Ctr,
    Method::Chacha20Ietf,
    Method::Rc4Md5,
];

/// Makes every one-time auth MAC of a client's plaintext right (the flagged address's and each
/// whole chunk's), so that hostile bytes reach the chunk reader behind them. Returns the data
/// the server should hand on: the chunks' data, or what follows an unflagged address.
fn fix_macs(iv: &[u8], key: &[u8], plain: &mut [u8]) -> Option<Vec<u8>> {
    let first = *plain.first()?;
    let mut probe = plain.to_vec();
    probe[0] &= 0x0F;
    let (_, n) = crate::common::addr::socks::decode(&probe).ok()??;
    if first & OTA_FLAG == 0 {
        return Some(plain[n..].to_vec());
    }
    let head = plain.get_mut(..n + OTA_MAC_LEN)?;
    head.copy_from_slice(&ota::request_header(iv, key, &probe[..n]));
    let (mut at, mut id, mut data) = (n + OTA_MAC_LEN, 0u32, Vec::new());
    while let Some(h) = plain.get(at..at + ota::CHUNK_HEAD) {
        let end = at + ota::CHUNK_HEAD + u16::from_be_bytes([h[0], h[1]]) as usize;
        let Some(body) = plain.get(at + ota::CHUNK_HEAD..end) else {
            break;
        };
        let mut c = Vec::new();
        ota::encode_chunk(iv, id, body, &mut c);
        data.extend_from_slice(body);
        plain[at..end].copy_from_slice(&c);
        (at, id) = (end, id + 1);
    }
    Some(data)
}

/// A stream that gives `wire` in reads of at most `step` bytes, then EOF (writes are taken).
fn trickle(wire: Vec<u8>, step: usize) -> crate::transport::BoxStream {
    use tokio::io::AsyncWriteExt;
    let (a, b) = tokio::io::duplex(step.max(1));
    tokio::spawn(async move {
        let (mut r, mut w) = tokio::io::split(b);
        let write = async {
            let _ = w.write_all(&wire).await;
            let _ = w.shutdown().await;
        };
        let mut sink = tokio::io::sink();
        let _ = tokio::join!(write, tokio::io::copy(&mut r, &mut sink));
    });
    Box::new(a)
}

/// Reads `s` to its end or first error, in reads of `size`; at most `limit` reads.
async fn read_all(s: &mut crate::transport::BoxStream, size: usize, limit: usize) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let (mut out, mut buf) = (Vec::new(), vec![0u8; size]);
    for _ in 0..limit {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return out,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
    panic!("no end after {limit} reads");
}

/// The stream-cipher editions with one-time auth, as a server and a client read hostile bytes.
/// Input: a control byte (method, OTA policy, whether MACs are made right, read sizes), the IV,
/// then the plaintext a client sends (encrypted here, so the bytes after the cipher are the
/// input's). The server's handshake, address, OTA header check and chunk reader: never a
/// panic, and what it hands on is the data sent, in order. The client reads the raw input as
/// the server's answer. Returns what the server handed on, if it took the request.
pub fn stream_ota(data: &[u8]) -> Option<Vec<u8>> {
    let [ctl, step, rest @ ..] = data else {
        return None;
    };
    let m = STREAM_METHODS[*ctl as usize % STREAM_METHODS.len()];
    let ota = [None, Some(true), Some(false)][(*ctl as usize >> 4) % 3];
    let key = vec![7u8; m.key_len()];
    let il = m.salt_len().min(rest.len());
    let (iv, plain) = rest.split_at(il);
    let mut plain = plain.to_vec();
    let expect = if ctl & 0x80 != 0 {
        fix_macs(iv, &key, &mut plain)
    } else {
        None
    };
    let mut wire = iv.to_vec();
    if let Some(mut c) = StreamCrypt::new(m, &key, iv, true) {
        c.apply(&mut plain);
    }
    wire.extend_from_slice(&plain);
    let step = *step as usize + 1;
    let size = [7, 4096][(*ctl as usize >> 6) & 1];
    let limit = wire.len() + 4;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    rt.block_on(async {
        let ib = super::inbound::Inbound::new(super::ServerConfig {
            method: m,
            ipsk: None,
            users: vec![Account {
                method: m,
                key: key.clone(),
                user: User::new("f", 0),
                hash: [0; 16],
            }],
            networks: vec![crate::common::Network::Tcp],
            ota,
            default_method: None,
            key_while_empty: None,
        });
        let mut served = None;
        if let Some((_, mut s)) = ib.handshake_for_fuzz(trickle(wire.clone(), step)).await {
            let out = read_all(&mut s, size, limit).await;
            assert!(out.len() <= wire.len());
            if let Some(e) = expect {
                assert!(e.starts_with(&out), "handed on bytes that were not sent");
            }
            served = Some(out);
        }
        // The client: the raw input is the server's IV and answer.
        let cfg = super::ClientConfig {
            server: crate::common::Destination::new(crate::common::Address::parse("a.test"), 1),
            method: m,
            key,
            ipsks: Vec::new(),
            ota: ctl & 8 != 0,
        };
        let dest = cfg.server.clone();
        if let Ok(mut s) = super::outbound::connect(trickle(rest.to_vec(), step), &cfg, &dest) {
            use tokio::io::AsyncWriteExt;
            let _ = s.write_all(b"x").await;
            let _ = s.flush().await;
            let out = read_all(&mut s, size, rest.len() + 4).await;
            assert!(out.len() <= rest.len());
        }
        served
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn decoders_survive_random_input() {
        let mut x = 0x9e3779b97f4a7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for i in 0..3000 {
            let len = (next() % 600) as usize;
            let mut d: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            // Some inputs look like real headers: small lengths, valid address types.
            if i % 3 == 0 && d.len() > 4 {
                d[0] = [1, 3, 4][(i / 3) % 3];
            }
            super::aead(&d);
            super::ss2022(&d);
            if i % 10 == 0 {
                let _ = super::stream_ota(&d);
            }
        }
    }

    #[test]
    fn stream_ota_reaches_the_chunk_reader() {
        // aes-128-cfb, OTA accepted or not, MACs made right; a flagged address then two chunks.
        let mut d = vec![0x80 | 0x10 | 1, 2];
        d.extend_from_slice(&[9; 16]);
        d.extend_from_slice(&[0x11, 127, 0, 0, 1, 0, 80]);
        d.extend_from_slice(&[0; 10]);
        for c in [&b"hello"[..], b" world"] {
            d.extend_from_slice(&(c.len() as u16).to_be_bytes());
            d.extend_from_slice(&[0; 10]);
            d.extend_from_slice(c);
        }
        assert_eq!(super::stream_ota(&d).as_deref(), Some(&b"hello world"[..]));
        // The same method and policy with the MACs left wrong: refused.
        d[0] = 1;
        assert_eq!(super::stream_ota(&d), None);
    }
}
