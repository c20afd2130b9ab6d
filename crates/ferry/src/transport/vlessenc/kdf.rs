//! The primitives of VLESS Encryption: BLAKE3 `derive_key` with a binary context (the
//! `blake3` crate takes contexts as `&str` only; Xray's are IVs, public keys and tickets),
//! the AEAD with its big-endian counter nonce, and the AES-256-CTR keystream of the XOR modes.

use aws_lc_rs::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use ctr::cipher::{KeyIvInit, StreamCipher};

const IV: [u32; 8] = [
    0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A, 0x510E527F, 0x9B05688C, 0x1F83D9AB, 0x5BE0CD19,
];
const PERMUTATION: [usize; 16] = [2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8];
const CHUNK_START: u32 = 1;
const CHUNK_END: u32 = 2;
const PARENT: u32 = 4;
const ROOT: u32 = 8;
const DERIVE_KEY_CONTEXT: u32 = 32;
const DERIVE_KEY_MATERIAL: u32 = 64;
const CHUNK: usize = 1024;
const BLOCK: usize = 64;

fn g(s: &mut [u32; 16], a: usize, b: usize, c: usize, d: usize, x: u32, y: u32) {
    s[a] = s[a].wrapping_add(s[b]).wrapping_add(x);
    s[d] = (s[d] ^ s[a]).rotate_right(16);
    s[c] = s[c].wrapping_add(s[d]);
    s[b] = (s[b] ^ s[c]).rotate_right(12);
    s[a] = s[a].wrapping_add(s[b]).wrapping_add(y);
    s[d] = (s[d] ^ s[a]).rotate_right(8);
    s[c] = s[c].wrapping_add(s[d]);
    s[b] = (s[b] ^ s[c]).rotate_right(7);
}

/// The BLAKE3 compression function; returns the first eight words of its output.
fn compress(cv: &[u32; 8], block: &[u8], counter: u64, flags: u32) -> [u32; 8] {
    let mut m = [0u32; 16];
    let mut padded = [0u8; BLOCK];
    padded[..block.len()].copy_from_slice(block);
    for (i, w) in m.iter_mut().enumerate() {
        *w = u32::from_le_bytes([
            padded[4 * i],
            padded[4 * i + 1],
            padded[4 * i + 2],
            padded[4 * i + 3],
        ]);
    }
    let mut s = [
        cv[0],
        cv[1],
        cv[2],
        cv[3],
        cv[4],
        cv[5],
        cv[6],
        cv[7],
        IV[0],
        IV[1],
        IV[2],
        IV[3],
        counter as u32,
        (counter >> 32) as u32,
        block.len() as u32,
        flags,
    ];
    for round in 0..7 {
        g(&mut s, 0, 4, 8, 12, m[0], m[1]);
        g(&mut s, 1, 5, 9, 13, m[2], m[3]);
        g(&mut s, 2, 6, 10, 14, m[4], m[5]);
        g(&mut s, 3, 7, 11, 15, m[6], m[7]);
        g(&mut s, 0, 5, 10, 15, m[8], m[9]);
        g(&mut s, 1, 6, 11, 12, m[10], m[11]);
        g(&mut s, 2, 7, 8, 13, m[12], m[13]);
        g(&mut s, 3, 4, 9, 14, m[14], m[15]);
        if round < 6 {
            let old = m;
            for (i, w) in m.iter_mut().enumerate() {
                *w = old[PERMUTATION[i]];
            }
        }
    }
    let mut out = [0u32; 8];
    for (i, o) in out.iter_mut().enumerate() {
        *o = s[i] ^ s[i + 8];
    }
    out
}

/// The chaining value of a subtree of `input` whose first chunk is number `chunk`; `root`
/// marks the last compression of the whole tree.
fn subtree(key: &[u32; 8], input: &[u8], chunk: u64, flags: u32, root: bool) -> [u32; 8] {
    let root_flag = if root { ROOT } else { 0 };
    if input.len() <= CHUNK {
        let mut cv = *key;
        let blocks = input.len().div_ceil(BLOCK).max(1);
        for b in 0..blocks {
            let block = &input[b * BLOCK..input.len().min((b + 1) * BLOCK)];
            let mut f = flags;
            if b == 0 {
                f |= CHUNK_START;
            }
            if b == blocks - 1 {
                f |= CHUNK_END | root_flag;
            }
            cv = compress(&cv, block, chunk, f);
        }
        return cv;
    }
    // The left subtree holds the largest power-of-two number of chunks that leaves the right
    // one non-empty.
    let chunks = input.len().div_ceil(CHUNK) as u64;
    let left_chunks = 1u64 << (63 - (chunks - 1).leading_zeros());
    let split = left_chunks as usize * CHUNK;
    let l = subtree(key, &input[..split], chunk, flags, false);
    let r = subtree(key, &input[split..], chunk + left_chunks, flags, false);
    let mut block = [0u8; BLOCK];
    for (i, w) in l.iter().chain(r.iter()).enumerate() {
        block[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
    }
    compress(key, &block, 0, flags | PARENT | root_flag)
}

fn bytes(words: [u32; 8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    for (i, w) in words.iter().enumerate() {
        out[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
    }
    out
}

/// BLAKE3 `derive_key(context, material)` with the context as raw bytes, 32 bytes out (what
/// Go's `blake3.DeriveKey(out, string(ctx), key)` computes).
pub fn derive_key(context: &[u8], material: &[u8]) -> [u8; 32] {
    let ctx_key = subtree(&IV, context, 0, DERIVE_KEY_CONTEXT, true);
    bytes(subtree(&ctx_key, material, 0, DERIVE_KEY_MATERIAL, true))
}

/// A 96-bit big-endian counter nonce, incremented before each use (the first is `00..01`).
const NONCE_MAX: u128 = (1 << 96) - 1;

/// A record, length or key exchange that does not open (a wrong key, or changed bytes).
#[derive(Debug, PartialEq, Eq)]
pub struct Unopened;

/// One direction's AEAD: AES-256-GCM or ChaCha20-Poly1305 keyed with `derive_key(ctx, key)`.
pub struct Aead {
    key: LessSafeKey,
    counter: u128,
}

impl Aead {
    #[allow(clippy::expect_used, reason = "a 32-byte key fits both algorithms")]
    pub fn new(ctx: &[u8], key: &[u8], aes: bool) -> Aead {
        let k = derive_key(ctx, key);
        let alg = match aes {
            true => &aead::AES_256_GCM,
            false => &aead::CHACHA20_POLY1305,
        };
        Aead {
            key: LessSafeKey::new(UnboundKey::new(alg, &k).expect("32-byte key")),
            counter: 0,
        }
    }

    /// The counter is at its last value: the record sealed or opened next rekeys (Xray's
    /// `MaxNonce` check, made before the increment).
    pub fn at_max(&self) -> bool {
        self.counter == NONCE_MAX
    }

    fn next(&mut self) -> Nonce {
        self.counter = (self.counter + 1) & NONCE_MAX;
        nonce(self.counter)
    }

    /// Seals `buf` in place with the next nonce and appends the tag.
    pub fn seal(&mut self, aad: &[u8], buf: &mut Vec<u8>, from: usize) {
        let n = self.next();
        self.seal_with(n, aad, buf, from);
    }

    /// Seals `buf[from..]` with the explicit nonce `ff * 12` (the server's key exchange).
    pub fn seal_max(&self, buf: &mut Vec<u8>, from: usize) {
        self.seal_with(nonce(NONCE_MAX), &[], buf, from);
    }

    #[allow(
        clippy::expect_used,
        reason = "sealing fails only past the AEAD's size limit"
    )]
    fn seal_with(&self, n: Nonce, aad: &[u8], buf: &mut Vec<u8>, from: usize) {
        let tag = self
            .key
            .seal_in_place_separate_tag(n, Aad::from(aad), &mut buf[from..])
            .expect("record within the AEAD's limits");
        buf.extend_from_slice(tag.as_ref());
    }

    /// Opens `buf` (ciphertext and tag) in place with the next nonce; the plaintext is the
    /// first `buf.len() - 16` bytes.
    pub fn open(&mut self, aad: &[u8], buf: &mut [u8]) -> Result<usize, Unopened> {
        let n = self.next();
        self.open_with(n, aad, buf)
    }

    /// Opens with the explicit nonce `ff * 12`.
    pub fn open_max(&self, buf: &mut [u8]) -> Result<usize, Unopened> {
        self.open_with(nonce(NONCE_MAX), &[], buf)
    }

    fn open_with(&self, n: Nonce, aad: &[u8], buf: &mut [u8]) -> Result<usize, Unopened> {
        self.key
            .open_in_place(n, Aad::from(aad), buf)
            .map(|p| p.len())
            .map_err(|_| Unopened)
    }
}

fn nonce(counter: u128) -> Nonce {
    let mut n = [0u8; 12];
    n.copy_from_slice(&counter.to_be_bytes()[4..]);
    Nonce::assume_unique_for_key(n)
}

/// AES-256-CTR keyed with BLAKE3 `derive_key("VLESS", key)`, starting at counter block `iv`.
pub struct Ctr(Box<ctr::Ctr128BE<aes::Aes256>>);

impl Ctr {
    #[allow(clippy::expect_used, reason = "32-byte key, 16-byte IV")]
    pub fn new(key: &[u8], iv: &[u8; 16]) -> Ctr {
        let k = blake3::derive_key("VLESS", key);
        Ctr(Box::new(
            KeyIvInit::new_from_slices(&k, iv).expect("AES-256 key and IV sizes"),
        ))
    }

    pub fn xor(&mut self, buf: &mut [u8]) {
        self.0.apply_keystream(buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derive_key_matches_blake3_for_text_contexts_of_every_tree_shape() {
        // One block, one chunk, a chunk and a bit, several levels of parents.
        for len in [
            0usize, 1, 63, 64, 65, 1023, 1024, 1025, 2048, 2049, 3000, 5000,
        ] {
            let ctx: String = (0..len).map(|i| (b'a' + (i % 26) as u8) as char).collect();
            for material in [&b""[..], b"k", &[7u8; 96][..], &[9u8; 1500][..]] {
                assert_eq!(
                    derive_key(ctx.as_bytes(), material),
                    blake3::derive_key(&ctx, material),
                    "context of {len} bytes, material of {}",
                    material.len()
                );
            }
        }
    }

    #[test]
    fn the_counter_starts_at_one_and_wraps_at_the_top() {
        let mut a = Aead::new(b"ctx", &[1; 32], true);
        let mut b = Aead::new(b"ctx", &[1; 32], true);
        let mut m = b"hello".to_vec();
        a.seal(b"h", &mut m, 0);
        assert_eq!(b.open(b"h", &mut m), Ok(5));
        assert_eq!(&m[..5], b"hello");
        // The explicit maximum nonce is not the counter's.
        let mut m = b"x".to_vec();
        a.seal_max(&mut m, 0);
        assert!(b.open(&[], &mut m.clone()).is_err());
        assert_eq!(b.open_max(&mut m), Ok(1));
        a.counter = NONCE_MAX;
        assert!(a.at_max());
        let _ = a.next();
        assert_eq!(a.counter, 0);
        // Another algorithm does not open it.
        let mut c = Aead::new(b"ctx", &[1; 32], false);
        let mut m = b"hello".to_vec();
        Aead::new(b"ctx", &[1; 32], true).seal(&[], &mut m, 0);
        assert!(c.open(&[], &mut m).is_err());
    }
}
