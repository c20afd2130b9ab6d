//! v2ray's legacy primitives, shared by the legacy (alterId > 0) header and the legacy body
//! security (`aes-128-cfb`): the AES-128-CFB streams and the FNV-1a checksum. Both the header and
//! the body build on this module, so neither imports the other for them.

use aes::cipher::KeyIvInit;
use aes::Aes128;

/// AES-128-CFB, kept across calls (the legacy header and legacy body are one stream).
pub type CfbEnc = cfb_mode::BufEncryptor<Aes128>;
pub type CfbDec = cfb_mode::BufDecryptor<Aes128>;

pub fn cfb_enc(key: &[u8; 16], iv: &[u8; 16]) -> CfbEnc {
    CfbEnc::new(key.into(), iv.into())
}

pub fn cfb_dec(key: &[u8; 16], iv: &[u8; 16]) -> CfbDec {
    CfbDec::new(key.into(), iv.into())
}

/// 32-bit FNV-1a. The hash is one serial chain (xor then multiply per byte), so the loop is
/// bounded by the multiply's latency; it is unrolled by 8 so loads and bounds checks overlap.
#[inline]
pub fn fnv1a32(data: &[u8]) -> u32 {
    fnv1a32_from(0x811c_9dc5, data)
}

#[inline]
fn fnv1a32_from(mut h: u32, data: &[u8]) -> u32 {
    const P: u32 = 0x0100_0193;
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        h = (h ^ (w & 0xff) as u32).wrapping_mul(P);
        h = (h ^ ((w >> 8) & 0xff) as u32).wrapping_mul(P);
        h = (h ^ ((w >> 16) & 0xff) as u32).wrapping_mul(P);
        h = (h ^ ((w >> 24) & 0xff) as u32).wrapping_mul(P);
        h = (h ^ ((w >> 32) & 0xff) as u32).wrapping_mul(P);
        h = (h ^ ((w >> 40) & 0xff) as u32).wrapping_mul(P);
        h = (h ^ ((w >> 48) & 0xff) as u32).wrapping_mul(P);
        h = (h ^ (w >> 56) as u32).wrapping_mul(P);
    }
    for b in chunks.remainder() {
        h = (h ^ *b as u32).wrapping_mul(P);
    }
    h
}

/// FNV-1a of several buffers at once: the chains are independent, so interleaving them lets
/// the CPU overlap their multiplies (about N times the single-chain rate for N ≤ 4).
#[allow(clippy::needless_range_loop)]
pub fn fnv1a32_many<const N: usize>(bufs: [&[u8]; N]) -> [u32; N] {
    const P: u32 = 0x0100_0193;
    let common = bufs.iter().map(|b| b.len()).min().unwrap_or(0);
    let mut h = [0x811c_9dc5u32; N];
    for i in 0..common {
        for k in 0..N {
            h[k] = (h[k] ^ bufs[k][i] as u32).wrapping_mul(P);
        }
    }
    for k in 0..N {
        h[k] = fnv1a32_from(h[k], &bufs[k][common..]);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_vectors_and_many() {
        assert_eq!(fnv1a32(b""), 0x811c9dc5);
        assert_eq!(fnv1a32(b"a"), 0xe40c292c);
        assert_eq!(fnv1a32(b"foobar"), 0xbf9cf968);
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        let slow = |d: &[u8]| {
            d.iter().fold(0x811c9dc5u32, |h, b| {
                (h ^ *b as u32).wrapping_mul(0x01000193)
            })
        };
        for n in [0, 1, 7, 8, 9, 999, 1000] {
            assert_eq!(fnv1a32(&data[..n]), slow(&data[..n]));
        }
        let got = fnv1a32_many([&data[..], &data[..500], &data[3..], b"foobar"]);
        assert_eq!(
            got,
            [
                slow(&data),
                slow(&data[..500]),
                slow(&data[3..]),
                0xbf9cf968
            ]
        );
    }
}
