//! Small pieces the plugins share: MACs, checksums, the xorshift128+ generator, random numbers,
//! the replay window, and the error every codec returns.

use hmac::{Hmac, KeyInit, Mac};
use md5::Digest;

/// Why a codec refused its input (short stable names for the rejection counters).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// The obfs disguise does not match (not this obfs, or a bad HMAC in the TLS hello).
    Obfs,
    /// The protocol's first packet does not authenticate (wrong password or method, random).
    Auth,
    /// A later frame fails its MAC/checksum or has an impossible length.
    Frame,
    /// A first packet seen before within the time window.
    Replay,
    /// A first packet outside the time window.
    Time,
    /// A uid the server does not know (multi-user).
    UnknownUser,
    /// The decrypted request does not start with an address.
    Address,
}

impl Error {
    pub fn reason(self) -> &'static str {
        match self {
            Error::Obfs => "bad_obfs",
            Error::Auth => "auth",
            Error::Frame => "bad_frame",
            Error::Replay => "replay",
            Error::Time => "time",
            Error::UnknownUser => "unknown_user",
            Error::Address => "bad_request",
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Error::Obfs => "the obfs disguise does not match",
            Error::Auth => "the first packet does not authenticate",
            Error::Frame => "a frame fails its check or length",
            Error::Replay => "replayed first packet",
            Error::Time => "first packet outside the time window",
            Error::UnknownUser => "unknown user id",
            Error::Address => "no valid address",
        })
    }
}

impl std::error::Error for Error {}

impl From<Error> for std::io::Error {
    fn from(e: Error) -> Self {
        std::io::Error::new(std::io::ErrorKind::InvalidData, e)
    }
}

/// The codec error inside an I/O error, if it is one.
pub fn codec_error(e: &std::io::Error) -> Option<Error> {
    e.get_ref()?.downcast_ref::<Error>().copied()
}

pub type Result<T> = std::result::Result<T, Error>;

#[allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "HMAC takes a key of any length"
)]
pub fn hmac_md5(key: &[u8], parts: &[&[u8]]) -> [u8; 16] {
    let mut m = <Hmac<md5::Md5> as KeyInit>::new_from_slice(key).expect("HMAC takes any key");
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().into()
}

#[allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "HMAC takes a key of any length"
)]
pub fn hmac_sha1(key: &[u8], parts: &[&[u8]]) -> [u8; 20] {
    let mut m = <Hmac<sha1::Sha1> as KeyInit>::new_from_slice(key).expect("HMAC takes any key");
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().into()
}

pub fn md5(parts: &[&[u8]]) -> [u8; 16] {
    let mut h = md5::Md5::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().into()
}

pub fn sha1(data: &[u8]) -> [u8; 20] {
    sha1::Sha1::digest(data).into()
}

pub fn crc32(parts: &[&[u8]]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    for p in parts {
        h.update(p);
    }
    h.finalize()
}

pub fn adler32(data: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for chunk in data.chunks(5552) {
        for &x in chunk {
            a += x as u32;
            b += a;
        }
        a %= 65521;
        b %= 65521;
    }
    (b << 16) | a
}

/// Standard base64 with `=` padding (what SSR hashes into its RC4 and AES keys).
pub fn b64(data: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(data)
}

pub fn random_bytes(n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    crate::common::rand::fill(&mut v);
    v
}

pub fn rand_u8() -> u8 {
    let mut b = [0u8; 1];
    crate::common::rand::fill(&mut b);
    b[0]
}

pub fn rand_u16() -> u16 {
    let mut b = [0u8; 2];
    crate::common::rand::fill(&mut b);
    u16::from_le_bytes(b)
}

pub fn rand_u32() -> u32 {
    let mut b = [0u8; 4];
    crate::common::rand::fill(&mut b);
    u32::from_le_bytes(b)
}

/// Uniform in [0, 1).
pub fn rand_f64() -> f64 {
    let mut b = [0u8; 8];
    crate::common::rand::fill(&mut b);
    (u64::from_le_bytes(b) >> 11) as f64 / (1u64 << 53) as f64
}

/// Uniform in [lo, hi].
pub fn rand_range(lo: usize, hi: usize) -> usize {
    lo + (rand_u32() as usize) % (hi - lo + 1)
}

/// Seconds since the epoch, as the 32-bit field SSR sends.
pub fn now_u32() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as u32)
        .unwrap_or(0)
}

/// `|int32(a − b)|`: a time difference across the 32-bit wrap.
pub fn time_diff(a: u32, b: u32) -> i64 {
    (a.wrapping_sub(b) as i32 as i64).abs()
}

/// xorshift128+ as SSR's auth_chain uses it.
#[derive(Clone, Default)]
pub struct XorShift {
    s0: u64,
    s1: u64,
}

impl XorShift {
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.s0;
        let y = self.s1;
        self.s0 = y;
        x ^= x << 23;
        x ^= y ^ (x >> 17) ^ (y >> 26);
        self.s1 = x;
        x.wrapping_add(y)
    }

    /// Seeds from the first 16 bytes of `b` (zero-padded).
    pub fn init_from_bin(&mut self, b: &[u8]) {
        let mut k = [0u8; 16];
        let n = b.len().min(16);
        k[..n].copy_from_slice(&b[..n]);
        self.s0 = u64::from_le_bytes(crate::common::array(&k[..8]));
        self.s1 = u64::from_le_bytes(crate::common::array(&k[8..]));
    }

    /// Seeds from `h` with bytes 0..2 replaced by LE16(n), then discards four outputs.
    pub fn init_from_bin_len(&mut self, h: &[u8], n: usize) {
        let mut k = [0u8; 16];
        let m = h.len().min(16);
        k[..m].copy_from_slice(&h[..m]);
        k[..2].copy_from_slice(&(n as u16).to_le_bytes());
        self.init_from_bin(&k);
        for _ in 0..4 {
            self.next_u64();
        }
    }
}

/// AES-128-ECB of one block (SSR's "AES-128-CBC with a zero IV" of 16 bytes).
pub fn aes128_block(key: &[u8; 16], block: &mut [u8; 16], encrypt: bool) {
    use aes::cipher::{BlockCipherDecrypt, BlockCipherEncrypt};
    let c = aes::Aes128::new(key.into());
    let mut b = aes::Block::from(*block);
    if encrypt {
        c.encrypt_block(&mut b);
    } else {
        c.decrypt_block(&mut b);
    }
    block.copy_from_slice(&b);
}

/// The sizes of the head of a request (`ATYP|ADDR|PORT`): how SSR clients split the first write.
pub fn head_size(buf: &[u8], default: usize) -> usize {
    match buf.first().map(|b| b & 7) {
        Some(1) => 7,
        Some(4) => 19,
        Some(3) => buf.get(1).map_or(default, |&n| 4 + n as usize),
        _ => default,
    }
}

/// First packets seen within the time window, so a replay is refused as long as its time
/// field is acceptable (entries older than the window would fail the time check anyway).
pub struct ReplayWindow {
    window: u32,
    seen: std::collections::HashMap<Vec<u8>, u32>,
    last_sweep: u32,
}

impl ReplayWindow {
    pub fn new(window: u32) -> ReplayWindow {
        ReplayWindow {
            window,
            seen: Default::default(),
            last_sweep: 0,
        }
    }

    /// Records `id` (sent at `time`); false when it was seen already.
    pub fn check_and_insert(&mut self, id: &[u8], time: u32) -> bool {
        let now = now_u32();
        if now.wrapping_sub(self.last_sweep) > 60 || self.seen.len() > 1 << 20 {
            let w = self.window as i64;
            self.seen
                .retain(|_, t| (now.wrapping_sub(*t) as i32 as i64) <= w + 60);
            self.last_sweep = now;
        }
        if self.seen.contains_key(id) {
            return false;
        }
        self.seen.insert(id.to_vec(), time);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::testutil::hex;

    #[test]
    fn xorshift_vectors() {
        // §8 #1, #2.
        let mut r = XorShift::default();
        r.init_from_bin(&hex("000102030405060708090a0b0c0d0e0f"));
        assert_eq!((r.s0, r.s1), (0x0706050403020100, 0x0f0e0d0c0b0a0908));
        let got: Vec<u64> = (0..4).map(|_| r.next_u64()).collect();
        assert_eq!(
            got,
            [
                0x9917d89494931393,
                0x8d0bd2afca7eb0af,
                0x505136340cf1299f,
                0x2b3c49c7c03b5292
            ]
        );
        r.init_from_bin_len(&hex("900150983cd24fb0d6963f7d28e17f72"), 100);
        assert_eq!((r.s0, r.s1), (0xe29ba56dbfebdb60, 0x26276cbd5f8d1f84));
        assert_eq!(r.next_u64(), 0x988a82d4518b0bca);
    }

    #[test]
    fn adler_matches_zlib() {
        assert_eq!(adler32(b"Wikipedia"), 0x11E60398);
        // The modulo handling on long input, against a plain computation.
        let big = vec![0xffu8; 100_000];
        let (mut x, mut y) = (1u64, 0u64);
        for &b in &big {
            x = (x + b as u64) % 65521;
            y = (y + x) % 65521;
        }
        assert_eq!(adler32(&big), ((y << 16) | x) as u32);
    }

    #[test]
    fn replay_window_refuses_a_second_sight() {
        let mut w = ReplayWindow::new(86400);
        let t = now_u32();
        assert!(w.check_and_insert(b"a", t));
        assert!(!w.check_and_insert(b"a", t));
        assert!(w.check_and_insert(b"b", t));
    }
}
