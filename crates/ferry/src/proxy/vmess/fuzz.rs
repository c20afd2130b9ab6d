//! Fuzz entry points for the header and chunk decoders: plain functions that must never panic
//! on any input (a unit test drives them with random inputs; a cargo-fuzz target can call them).

use super::body::{BodyParams, Opened, OpenedInto, Opener, Security};
use super::header;

/// Runs every header decoder on `data`.
pub fn header_decoders(data: &[u8]) {
    let _ = header::decode_instruction(data);
    let ck = header::cmd_key(&[1; 16]);
    let _ = header::open_legacy_instruction(&ck, 1_700_000_000, data);
    let auth = header::AuthIdCipher::new(&ck);
    if data.len() >= header::AEAD_PREFIX {
        let mut e = [0u8; 16];
        e.copy_from_slice(&data[..16]);
        let _ = auth.open(&e);
        let mut l = [0u8; 18];
        l.copy_from_slice(&data[16..34]);
        let mut n = [0u8; 8];
        n.copy_from_slice(&data[34..42]);
        let _ = header::open_aead_length(&ck, &e, &l, &n);
        let mut rest = data[header::AEAD_PREFIX..].to_vec();
        let _ = header::open_aead_instruction(&ck, &e, &n, &mut rest);
    }
    let _ = header::open_aead_response_length(&[2; 16], &[3; 16], data);
    let mut d = data.to_vec();
    let _ = header::open_aead_response(&[2; 16], &[3; 16], 0, &mut d);
}

/// Feeds `data[2..]` to a chunk opener whose security and options come from `data[0..2]`,
/// in pieces whose sizes come from the data too.
pub fn chunk_decoder(data: &[u8]) {
    let (Some(&a), Some(&b)) = (data.first(), data.get(1)) else {
        return;
    };
    let security = match a % 4 {
        0 => Security::Aes128Gcm,
        1 => Security::Chacha20Poly1305,
        2 => Security::None,
        _ => Security::Legacy,
    };
    let p = BodyParams {
        security,
        opt: b & 0x1d,
        packet: a & 0x80 != 0,
        key: [4; 16],
        iv: [5; 16],
        req_key: [6; 16],
        req_iv: [7; 16],
    };
    let Ok(mut o) = Opener::new(&p, Some(header::cfb_dec(&p.key, &p.iv))) else {
        return;
    };
    if a & 0x40 != 0 {
        o.tolerate_empty_first();
    }
    let wire = &data[2..];
    let mut buf: Vec<u8> = Vec::new();
    let mut fed = 0;
    let step = 1 + (a as usize >> 2);
    // Bits of `b` the options do not use pick a destination for `open_into` (none: `open`).
    let mut dst = vec![0u8; [0usize, 1, 7, 100, 8000, 8192, 16_384, 70_000][(b >> 5) as usize]];
    for _ in 0..100_000 {
        let r = if dst.is_empty() {
            o.open(&mut buf).map(|r| match r {
                Opened::NeedMore(n) => OpenedInto::NeedMore(n),
                Opened::Eof => OpenedInto::Eof,
                Opened::Data {
                    start,
                    end,
                    consumed,
                } => OpenedInto::InPlace {
                    start,
                    end,
                    consumed,
                },
            })
        } else {
            o.open_into(&mut buf, &mut dst)
        };
        match r {
            Err(_) | Ok(OpenedInto::Eof) => return,
            Ok(OpenedInto::InPlace {
                start,
                end,
                consumed,
            }) => {
                assert!(start <= end && end <= consumed && consumed <= buf.len());
                buf.drain(..consumed);
            }
            Ok(OpenedInto::Copied { len, consumed }) => {
                assert!(len <= dst.len() && consumed <= buf.len());
                buf.drain(..consumed);
            }
            Ok(OpenedInto::NeedMore(n)) => {
                assert!(n > buf.len());
                if fed == wire.len() {
                    return;
                }
                let k = step.min(wire.len() - fed);
                let at = buf.len();
                buf.extend_from_slice(&wire[fed..fed + k]);
                o.on_read(&mut buf[at..]);
                fed += k;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rng(seed: &mut u64) -> u64 {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        *seed
    }

    #[test]
    fn random_inputs_never_panic() {
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..3000 {
            let len = (rng(&mut s) % 600) as usize;
            let mut d: Vec<u8> = (0..len).map(|_| rng(&mut s) as u8).collect();
            // Small size fields now and then, so chunk bodies get reached.
            if i % 3 == 0 && d.len() > 4 {
                d[2] = 0;
                d[3] %= 64;
            }
            header_decoders(&d);
            chunk_decoder(&d);
        }
    }
}
