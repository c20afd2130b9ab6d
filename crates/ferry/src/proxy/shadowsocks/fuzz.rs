//! Fuzz entry points for the AEAD, OTA and 2022 decoders: plain functions that must never panic on
//! any input. The `fuzz/` crate at the repository root calls them from cargo-fuzz targets; a
//! unit test below feeds them random inputs so they are exercised without nightly.

use super::aead::{ChunkOpener, Open, AEAD_MAX_CHUNK, SS2022_MAX_CHUNK};
use super::cipher::{psk_hash16, AeadAlg, AeadCipher, Method};
use super::{ss2022, udp, Account};
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
        }
    }
}
