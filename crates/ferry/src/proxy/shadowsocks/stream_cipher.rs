//! Historic stream ciphers (§3) and one-time auth (§4). Broken by design; kept for legacy
//! interop only. Each direction is one keystream keyed by the master key and that direction's IV.

use aes::cipher::{KeyIvInit, StreamCipher};
use hmac::{KeyInit, Mac};
use md5::Digest;

use super::cipher::Method;

/// One direction of a stream cipher, positioned in its keystream.
pub enum StreamCrypt {
    None,
    Cfb128E(Box<cfb_mode::BufEncryptor<aes::Aes128>>),
    Cfb128D(Box<cfb_mode::BufDecryptor<aes::Aes128>>),
    Cfb192E(Box<cfb_mode::BufEncryptor<aes::Aes192>>),
    Cfb192D(Box<cfb_mode::BufDecryptor<aes::Aes192>>),
    Cfb256E(Box<cfb_mode::BufEncryptor<aes::Aes256>>),
    Cfb256D(Box<cfb_mode::BufDecryptor<aes::Aes256>>),
    Ctr128(Box<ctr::Ctr128BE<aes::Aes128>>),
    Ctr192(Box<ctr::Ctr128BE<aes::Aes192>>),
    Ctr256(Box<ctr::Ctr128BE<aes::Aes256>>),
    ChaCha(Box<chacha20::ChaCha20>),
    Rc4(Box<rc4::Rc4>),
}

impl StreamCrypt {
    /// Keys one direction. `encrypt` picks the CFB direction (the other modes are symmetric).
    /// `None` when key or IV lengths do not fit the method.
    pub fn new(method: Method, key: &[u8], iv: &[u8], encrypt: bool) -> Option<StreamCrypt> {
        use StreamCrypt as S;
        Some(match (method, encrypt) {
            (Method::None, _) => S::None,
            (Method::Aes128Cfb, true) => {
                S::Cfb128E(Box::new(KeyIvInit::new_from_slices(key, iv).ok()?))
            }
            (Method::Aes128Cfb, false) => {
                S::Cfb128D(Box::new(KeyIvInit::new_from_slices(key, iv).ok()?))
            }
            (Method::Aes192Cfb, true) => {
                S::Cfb192E(Box::new(KeyIvInit::new_from_slices(key, iv).ok()?))
            }
            (Method::Aes192Cfb, false) => {
                S::Cfb192D(Box::new(KeyIvInit::new_from_slices(key, iv).ok()?))
            }
            (Method::Aes256Cfb, true) => {
                S::Cfb256E(Box::new(KeyIvInit::new_from_slices(key, iv).ok()?))
            }
            (Method::Aes256Cfb, false) => {
                S::Cfb256D(Box::new(KeyIvInit::new_from_slices(key, iv).ok()?))
            }
            (Method::Aes128Ctr, _) => {
                S::Ctr128(Box::new(KeyIvInit::new_from_slices(key, iv).ok()?))
            }
            (Method::Aes192Ctr, _) => {
                S::Ctr192(Box::new(KeyIvInit::new_from_slices(key, iv).ok()?))
            }
            (Method::Aes256Ctr, _) => {
                S::Ctr256(Box::new(KeyIvInit::new_from_slices(key, iv).ok()?))
            }
            (Method::Chacha20Ietf, _) => {
                S::ChaCha(Box::new(KeyIvInit::new_from_slices(key, iv).ok()?))
            }
            (Method::Rc4Md5, _) => {
                let mut h = md5::Md5::new();
                h.update(key);
                h.update(iv);
                let k = h.finalize();
                S::Rc4(Box::new(rc4::Rc4::new_from_slice(&k).ok()?))
            }
            _ => return None,
        })
    }

    /// Encrypts or decrypts `buf` in place, advancing the keystream.
    pub fn apply(&mut self, buf: &mut [u8]) {
        use StreamCrypt as S;
        match self {
            S::None => {}
            S::Cfb128E(c) => c.encrypt(buf),
            S::Cfb128D(c) => c.decrypt(buf),
            S::Cfb192E(c) => c.encrypt(buf),
            S::Cfb192D(c) => c.decrypt(buf),
            S::Cfb256E(c) => c.encrypt(buf),
            S::Cfb256D(c) => c.decrypt(buf),
            S::Ctr128(c) => c.apply_keystream(buf),
            S::Ctr192(c) => c.apply_keystream(buf),
            S::Ctr256(c) => c.apply_keystream(buf),
            S::ChaCha(c) => c.apply_keystream(buf),
            S::Rc4(c) => c.apply_keystream(buf),
        }
    }
}

/// The ATYP bit a client sets to ask for one-time auth.
pub const OTA_FLAG: u8 = 0x10;
/// Length of an OTA MAC (first 10 bytes of HMAC-SHA1).
pub const OTA_MAC_LEN: usize = 10;

/// HMAC-SHA1(key1 || key2, msg)[..10].
pub fn ota_mac(key1: &[u8], key2: &[u8], msg: &[u8]) -> [u8; OTA_MAC_LEN] {
    let mut k = Vec::with_capacity(key1.len() + key2.len());
    k.extend_from_slice(key1);
    k.extend_from_slice(key2);
    let mut m = <hmac::Hmac<sha1::Sha1> as KeyInit>::new_from_slice(&k).unwrap_or_else(|_| {
        <hmac::Hmac<sha1::Sha1> as KeyInit>::new_from_slice(&[0]).expect("HMAC takes any key")
    });
    m.update(msg);
    let out = m.finalize().into_bytes();
    let mut o = [0u8; OTA_MAC_LEN];
    o.copy_from_slice(&out[..OTA_MAC_LEN]);
    o
}

/// MAC of an OTA request header (flagged ATYP .. PORT): key = IV || master key.
pub fn ota_header_mac(iv: &[u8], key: &[u8], header: &[u8]) -> [u8; OTA_MAC_LEN] {
    ota_mac(iv, key, header)
}

/// MAC of the OTA data chunk number `id`: key = IV || BE32(id).
pub fn ota_chunk_mac(iv: &[u8], id: u32, data: &[u8]) -> [u8; OTA_MAC_LEN] {
    ota_mac(iv, &id.to_be_bytes(), data)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn run(m: Method, key: &str, iv: &str, pt: &[u8], ct: &str) {
        let (key, iv) = (hex(key), hex(iv));
        let mut e = StreamCrypt::new(m, &key, &iv, true).unwrap();
        let mut buf = pt.to_vec();
        // Uneven pieces: the keystream must continue across calls.
        let (a, b) = buf.split_at_mut(pt.len() / 3);
        e.apply(a);
        e.apply(b);
        assert_eq!(buf, hex(ct), "{m:?}");
        let mut d = StreamCrypt::new(m, &key, &iv, false).unwrap();
        for c in buf.chunks_mut(5) {
            d.apply(c);
        }
        assert_eq!(buf, pt);
    }

    #[test]
    fn nist_aes_cfb128_and_ctr() {
        run(
            Method::Aes128Cfb,
            "2b7e151628aed2a6abf7158809cf4f3c",
            "000102030405060708090a0b0c0d0e0f",
            &hex("6bc1bee22e409f96e93d7e117393172aae2d8a571e03ac9c9eb76fac45af8e5130c81c46a35ce411e5fbc1191a0a52eff69f24"),
            "3b3fd92eb72dad20333449f8e83cfb4ac8a64537a0b3a93fcde3cdad9f1ce58b26751f67a3cbb140b1808cf187a4f4dfc04b05",
        );
        run(
            Method::Aes128Ctr,
            "2b7e151628aed2a6abf7158809cf4f3c",
            "f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff",
            &hex("6bc1bee22e409f96e93d7e117393172a"),
            "874d6191b620e3261bef6864990db6ce",
        );
    }

    #[test]
    fn rc4_known_answers() {
        for (k, p, c) in [
            ("Key", "Plaintext", "bbf316e8d940af0ad3"),
            ("Wiki", "pedia", "1021bf0420"),
            ("Secret", "Attack at dawn", "45a01f645fc35b383552544b9bf5"),
        ] {
            let mut r = rc4::Rc4::new_from_slice(k.as_bytes()).unwrap();
            let mut b = p.as_bytes().to_vec();
            r.apply_keystream(&mut b);
            assert_eq!(b, hex(c));
        }
        // rc4-md5 keys RC4 with MD5(key || iv).
        let mut a = StreamCrypt::new(Method::Rc4Md5, &[1; 16], &[2; 16], true).unwrap();
        let mut b = StreamCrypt::new(Method::Rc4Md5, &[1; 16], &[2; 16], false).unwrap();
        let mut x = b"round trip".to_vec();
        a.apply(&mut x);
        assert_ne!(&x, b"round trip");
        b.apply(&mut x);
        assert_eq!(&x, b"round trip");
    }

    #[test]
    fn every_stream_method_round_trips() {
        for m in Method::ALL
            .iter()
            .filter(|m| m.kind() == super::super::cipher::Kind::Stream)
        {
            let key = vec![3u8; m.key_len()];
            let iv = vec![4u8; m.salt_len()];
            let mut e = StreamCrypt::new(*m, &key, &iv, true).unwrap();
            let mut d = StreamCrypt::new(*m, &key, &iv, false).unwrap();
            let pt: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
            let mut b = pt.clone();
            e.apply(&mut b);
            assert_ne!(b, pt, "{m:?}");
            d.apply(&mut b);
            assert_eq!(b, pt, "{m:?}");
        }
    }

    #[test]
    fn ota_macs_are_hmac_sha1_prefixes() {
        // HMAC-SHA1 RFC 2202 test case 2: key "Jefe", data "what do ya want for nothing?".
        let m = ota_mac(b"Je", b"fe", b"what do ya want for nothing?");
        assert_eq!(
            m.to_vec(),
            hex("effcdf6ae5eb2fa2d27416d5f184df9c259a7c79")[..10]
        );
    }
}
