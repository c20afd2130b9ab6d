//! The VMess KDF: a tower of HMACs where each level uses the HMAC of the level below as its hash
//! (not HKDF). Level 0 is HMAC-SHA256 keyed with `"VMess AEAD KDF"`.

use std::sync::LazyLock;

use aws_lc_rs::hmac;

/// Key of the level-0 HMAC.
const BASE_KEY: &[u8] = b"VMess AEAD KDF";
/// Block size of every level's "hash" (SHA-256's).
const BLOCK: usize = 64;

pub const AUTH_ID_KEY: &[u8] = b"AES Auth ID Encryption";
pub const REQ_LEN_KEY: &[u8] = b"VMess Header AEAD Key_Length";
pub const REQ_LEN_NONCE: &[u8] = b"VMess Header AEAD Nonce_Length";
pub const REQ_KEY: &[u8] = b"VMess Header AEAD Key";
pub const REQ_NONCE: &[u8] = b"VMess Header AEAD Nonce";
pub const RESP_LEN_KEY: &[u8] = b"AEAD Resp Header Len Key";
pub const RESP_LEN_NONCE: &[u8] = b"AEAD Resp Header Len IV";
pub const RESP_KEY: &[u8] = b"AEAD Resp Header Key";
pub const RESP_NONCE: &[u8] = b"AEAD Resp Header IV";
pub const AUTH_LEN: &[u8] = b"auth_len";

static BASE: LazyLock<hmac::Key> = LazyLock::new(|| hmac::Key::new(hmac::HMAC_SHA256, BASE_KEY));

/// `H_n(a || b)` where `path` holds the keys of levels 1..=n.
fn level(path: &[&[u8]], a: &[u8], b: &[u8]) -> [u8; 32] {
    let Some((key, below)) = path.split_last() else {
        let mut ctx = hmac::Context::with_key(&BASE);
        ctx.update(a);
        ctx.update(b);
        let mut out = [0u8; 32];
        out.copy_from_slice(ctx.sign().as_ref());
        return out;
    };
    let mut k = [0u8; BLOCK];
    if key.len() > BLOCK {
        k[..32].copy_from_slice(&level(below, key, &[]));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let mut ipad = [0x36u8; BLOCK];
    let mut opad = [0x5cu8; BLOCK];
    for i in 0..BLOCK {
        ipad[i] ^= k[i];
        opad[i] ^= k[i];
    }
    // `b` is only non-empty at the top level when called from `level` itself; fold it into
    // the inner message.
    let inner = if b.is_empty() {
        level(below, &ipad, a)
    } else {
        let mut m = Vec::with_capacity(a.len() + b.len());
        m.extend_from_slice(a);
        m.extend_from_slice(b);
        level(below, &ipad, &m)
    };
    level(below, &opad, &inner)
}

/// `KDF(key, path...)`: 32 bytes.
pub fn kdf(key: &[u8], path: &[&[u8]]) -> [u8; 32] {
    level(path, key, &[])
}

/// The first 16 bytes of [`kdf`].
pub fn kdf16(key: &[u8], path: &[&[u8]]) -> [u8; 16] {
    let mut out = [0u8; 16];
    out.copy_from_slice(&kdf(key, path)[..16]);
    out
}

/// The first 12 bytes of [`kdf`] (an AEAD nonce).
pub fn kdf12(key: &[u8], path: &[&[u8]]) -> [u8; 12] {
    let mut out = [0u8; 12];
    out.copy_from_slice(&kdf(key, path)[..12]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn v2fly_vector() {
        let out = kdf(
            b"Demo Key for KDF Value Test",
            &[
                b"Demo Path for KDF Value Test",
                b"Demo Path for KDF Value Test2",
                b"Demo Path for KDF Value Test3",
            ],
        );
        assert_eq!(
            hex(&out),
            "53e9d7e1bd7bd25022b71ead07d8a596efc8a845c7888652fd684b4903dc8892"
        );
    }

    #[test]
    fn level_zero_is_plain_hmac_sha256() {
        let k = hmac::Key::new(hmac::HMAC_SHA256, BASE_KEY);
        let want = hmac::sign(&k, b"x");
        assert_eq!(&kdf(b"x", &[])[..], want.as_ref());
    }

    #[test]
    fn long_path_element_is_hashed_and_differs() {
        let long = [7u8; 100];
        let a = kdf(b"k", &[&long]);
        let b = kdf(b"k", &[&long[..64]]);
        assert_ne!(a, b);
    }
}
