//! Historic stream ciphers (§3); one-time auth (§4) is in `ota.rs`. Broken by design; kept for legacy
//! interop only. Each direction is one keystream keyed by the master key and that direction's IV.

use aes::cipher::{KeyIvInit, StreamCipher};
use hmac::KeyInit;
use md5::Digest;

use super::cipher::Method;

/// CFB128 encryption is inherently serial; aws-lc's is twice as fast as RustCrypto's here
/// (measured 0.81 vs 0.42 GB/s, `cargo bench -p ferry --bench shadowsocks`).
pub struct CfbEncrypt {
    key: aws_lc_rs::cipher::StreamingEncryptingKey,
    scratch: Vec<u8>,
}

impl CfbEncrypt {
    fn new(key: &[u8], iv: &[u8]) -> Option<CfbEncrypt> {
        use aws_lc_rs::cipher::{self as c, EncryptionContext, StreamingEncryptingKey};
        let alg = match key.len() {
            16 => &c::AES_128,
            24 => &c::AES_192,
            32 => &c::AES_256,
            _ => return None,
        };
        let iv: [u8; 16] = iv.try_into().ok()?;
        let k = c::UnboundCipherKey::new(alg, key).ok()?;
        let key = StreamingEncryptingKey::less_safe_cfb128(k, EncryptionContext::Iv128(iv.into()))
            .ok()?;
        Some(CfbEncrypt {
            key,
            scratch: Vec::new(),
        })
    }

    /// Encrypts `src` into `dst[..src.len()]`. CFB is a stream mode (output length = input
    /// length), but aws-lc-rs asks for block-size slack in the output: with less room than
    /// `src.len() + 15` this goes through a scratch buffer.
    fn apply_to(&mut self, src: &[u8], dst: &mut [u8]) {
        if dst.len() >= src.len() + CFB_SLACK {
            let _ = self.key.update(src, dst);
            return;
        }
        self.scratch.resize(src.len() + CFB_SLACK, 0);
        if self.key.update(src, &mut self.scratch).is_ok() {
            if let Some(d) = dst.get_mut(..src.len()) {
                d.copy_from_slice(&self.scratch[..src.len()]);
            }
        }
    }
}

/// Output room beyond the input that aws-lc-rs's streaming update wants.
pub const CFB_SLACK: usize = 15;

/// CFB128 decryption: whole blocks are independent given the previous ciphertext block, so they
/// go through RustCrypto's parallel block decryptor; partial blocks at write boundaries are
/// handled here with the keystream of the current block.
pub struct CfbDecrypt<C: aes::cipher::BlockCipherEncrypt + Clone> {
    cipher: C,
    /// Ciphertext of the current block so far (all of it once `pos == 16`).
    ct: [u8; 16],
    /// Keystream of the current block (valid while `pos < 16`).
    ks: [u8; 16],
    /// Bytes of the current block already processed.
    pos: usize,
}

impl<C> CfbDecrypt<C>
where
    C: aes::cipher::BlockCipherEncrypt<BlockSize = aes::cipher::consts::U16>
        + aes::cipher::KeyInit
        + Clone,
{
    fn new(key: &[u8], iv: &[u8]) -> Option<Self> {
        let cipher = C::new_from_slice(key).ok()?;
        let ct: [u8; 16] = iv.try_into().ok()?;
        // The IV plays the previous ciphertext block; `pos == 16` means "block complete".
        Some(CfbDecrypt {
            cipher,
            ct,
            ks: [0; 16],
            pos: 16,
        })
    }

    fn next_keystream(&mut self) {
        let mut b = aes::Block::from(self.ct);
        self.cipher.encrypt_block(&mut b);
        self.ks.copy_from_slice(&b);
        self.pos = 0;
    }

    /// Decrypts `src` into `dst[..src.len()]`.
    fn apply_to(&mut self, src: &[u8], dst: &mut [u8]) {
        let Some(dst) = dst.get_mut(..src.len()) else {
            return;
        };
        let mut i = 0;
        while i < src.len() {
            if self.pos == 16 {
                let whole = (src.len() - i) / 16 * 16;
                if whole > 0 {
                    let (s, d) = (&src[i..i + whole], &mut dst[i..i + whole]);
                    let iv = aes::Block::from(self.ct);
                    let dec = <cfb_mode::Decryptor<C> as aes::cipher::InnerIvInit>::inner_iv_init(
                        self.cipher.clone(),
                        &iv,
                    );
                    self.ct.copy_from_slice(&s[whole - 16..]);
                    let _ = dec.decrypt_b2b(s, d);
                    i += whole;
                    continue;
                }
                self.next_keystream();
            }
            let c = src[i];
            dst[i] = c ^ self.ks[self.pos];
            self.ct[self.pos] = c;
            self.pos += 1;
            i += 1;
        }
    }
}

/// One direction of a stream cipher, positioned in its keystream.
pub enum StreamCrypt {
    None,
    CfbE(Box<CfbEncrypt>),
    Cfb128D(Box<CfbDecrypt<aes::Aes128>>),
    Cfb192D(Box<CfbDecrypt<aes::Aes192>>),
    Cfb256D(Box<CfbDecrypt<aes::Aes256>>),
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
            (Method::Aes128Cfb | Method::Aes192Cfb | Method::Aes256Cfb, true) => {
                if key.len() != method.key_len() {
                    return None;
                }
                S::CfbE(Box::new(CfbEncrypt::new(key, iv)?))
            }
            (Method::Aes128Cfb, false) => S::Cfb128D(Box::new(CfbDecrypt::new(key, iv)?)),
            (Method::Aes192Cfb, false) => S::Cfb192D(Box::new(CfbDecrypt::new(key, iv)?)),
            (Method::Aes256Cfb, false) => S::Cfb256D(Box::new(CfbDecrypt::new(key, iv)?)),
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
            S::CfbE(_) | S::Cfb128D(_) | S::Cfb192D(_) | S::Cfb256D(_) => {
                let src = buf.to_vec();
                self.apply_to(&src, buf);
            }
            S::Ctr128(c) => c.apply_keystream(buf),
            S::Ctr192(c) => c.apply_keystream(buf),
            S::Ctr256(c) => c.apply_keystream(buf),
            S::ChaCha(c) => c.apply_keystream(buf),
            S::Rc4(c) => c.apply_keystream(buf),
        }
    }

    /// Encrypts or decrypts `src` into `dst[..src.len()]` (`dst` at least as long), advancing
    /// the keystream: the relay's copy and the cipher in one pass where the cipher allows.
    /// `dst` longer by [`CFB_SLACK`] saves CFB encryption a copy.
    pub fn apply_to(&mut self, src: &[u8], dst: &mut [u8]) {
        use StreamCrypt as S;
        if let S::CfbE(c) = self {
            return c.apply_to(src, dst);
        }
        let Some(d) = dst.get_mut(..src.len()) else {
            return;
        };
        match self {
            S::CfbE(_) => {}
            S::Cfb128D(c) => c.apply_to(src, d),
            S::Cfb192D(c) => c.apply_to(src, d),
            S::Cfb256D(c) => c.apply_to(src, d),
            _ => {
                d.copy_from_slice(src);
                self.apply(d);
            }
        }
    }
}

/// The ATYP bit a client sets to ask for one-time auth.
pub const OTA_FLAG: u8 = 0x10;
/// Length of an OTA MAC (first 10 bytes of HMAC-SHA1).
pub const OTA_MAC_LEN: usize = 10;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::testutil::hex;

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
    fn cfb_matches_reference_in_any_pieces() {
        use aes::cipher::KeyIvInit;
        let (key, iv) = ([0x2bu8; 16], [0x11u8; 16]);
        let pt: Vec<u8> = (0..5000u32).map(|i| (i * 7 + 3) as u8).collect();
        let mut want = pt.clone();
        cfb_mode::BufEncryptor::<aes::Aes128>::new_from_slices(&key, &iv)
            .unwrap()
            .encrypt(&mut want);
        for pieces in [
            &[1usize, 15, 16, 17, 100, 4096][..],
            &[3, 29, 64, 5],
            &[4999],
        ] {
            let mut e = StreamCrypt::new(Method::Aes128Cfb, &key, &iv, true).unwrap();
            let mut d = StreamCrypt::new(Method::Aes128Cfb, &key, &iv, false).unwrap();
            let (mut ct, mut back) = (vec![0u8; pt.len()], vec![0u8; pt.len()]);
            let mut at = 0;
            for &n in pieces.iter().cycle() {
                let end = (at + n).min(pt.len());
                e.apply_to(&pt[at..end], &mut ct[at..]);
                d.apply_to(&want[at..end], &mut back[at..]);
                at = end;
                if at == pt.len() {
                    break;
                }
            }
            assert_eq!(ct, want, "{pieces:?}");
            assert_eq!(back, pt, "{pieces:?}");
        }
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
}
