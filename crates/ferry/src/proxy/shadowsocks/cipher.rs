//! Shadowsocks methods, key derivation, and our small AEAD enum.
//!
//! The AEAD is chosen per method behind [`AeadCipher`]: aws-lc-rs for AES-GCM and
//! ChaCha20-Poly1305 (the fastest here), RustCrypto for XChaCha20-Poly1305 (aws-lc-rs has none).

use aes::cipher::{Array, BlockCipherDecrypt, BlockCipherEncrypt, KeyInit};
use aws_lc_rs::aead::{self as awsaead, Aad, LessSafeKey, UnboundKey};
use chacha20poly1305::aead::AeadInOut;
use md5::Digest;

/// AEAD tag length of every Shadowsocks AEAD method.
pub const TAG_LEN: usize = 16;

/// Which Shadowsocks edition a method belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `none` / `plain`: no encryption (tests only).
    None,
    /// Historic stream ciphers (§3).
    Stream,
    /// AEAD edition, SIP004/SIP007 (§5).
    Aead,
    /// Shadowsocks 2022, SIP022 (§6).
    Aead2022,
}

/// A configured encryption method.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Method {
    None,
    Aes128Cfb,
    Aes192Cfb,
    Aes256Cfb,
    Aes128Ctr,
    Aes192Ctr,
    Aes256Ctr,
    Chacha20Ietf,
    Rc4Md5,
    Aes128Gcm,
    Aes256Gcm,
    Chacha20Poly1305,
    XChacha20Poly1305,
    Blake3Aes128Gcm,
    Blake3Aes256Gcm,
    Blake3Chacha20Poly1305,
}

impl Method {
    /// Every method, for tests and error messages.
    pub const ALL: &'static [Method] = &[
        Method::None,
        Method::Aes128Cfb,
        Method::Aes192Cfb,
        Method::Aes256Cfb,
        Method::Aes128Ctr,
        Method::Aes192Ctr,
        Method::Aes256Ctr,
        Method::Chacha20Ietf,
        Method::Rc4Md5,
        Method::Aes128Gcm,
        Method::Aes256Gcm,
        Method::Chacha20Poly1305,
        Method::XChacha20Poly1305,
        Method::Blake3Aes128Gcm,
        Method::Blake3Aes256Gcm,
        Method::Blake3Chacha20Poly1305,
    ];

    /// Parses a method name, with the aliases Xray and shadowsocks-rust accept.
    pub fn parse(name: &str) -> Option<Method> {
        Some(match name.to_ascii_lowercase().as_str() {
            "none" | "plain" => Method::None,
            "aes-128-cfb" => Method::Aes128Cfb,
            "aes-192-cfb" => Method::Aes192Cfb,
            "aes-256-cfb" => Method::Aes256Cfb,
            "aes-128-ctr" => Method::Aes128Ctr,
            "aes-192-ctr" => Method::Aes192Ctr,
            "aes-256-ctr" => Method::Aes256Ctr,
            "chacha20-ietf" => Method::Chacha20Ietf,
            "rc4-md5" => Method::Rc4Md5,
            "aes-128-gcm" | "aead_aes_128_gcm" => Method::Aes128Gcm,
            "aes-256-gcm" | "aead_aes_256_gcm" => Method::Aes256Gcm,
            "chacha20-ietf-poly1305" | "chacha20-poly1305" | "aead_chacha20_poly1305" => {
                Method::Chacha20Poly1305
            }
            "xchacha20-ietf-poly1305" | "xchacha20-poly1305" | "aead_xchacha20_poly1305" => {
                Method::XChacha20Poly1305
            }
            "2022-blake3-aes-128-gcm" => Method::Blake3Aes128Gcm,
            "2022-blake3-aes-256-gcm" => Method::Blake3Aes256Gcm,
            "2022-blake3-chacha20-poly1305" => Method::Blake3Chacha20Poly1305,
            _ => return None,
        })
    }

    /// The canonical name (as shadowsocks-rust prints it).
    pub fn name(self) -> &'static str {
        match self {
            Method::None => "none",
            Method::Aes128Cfb => "aes-128-cfb",
            Method::Aes192Cfb => "aes-192-cfb",
            Method::Aes256Cfb => "aes-256-cfb",
            Method::Aes128Ctr => "aes-128-ctr",
            Method::Aes192Ctr => "aes-192-ctr",
            Method::Aes256Ctr => "aes-256-ctr",
            Method::Chacha20Ietf => "chacha20-ietf",
            Method::Rc4Md5 => "rc4-md5",
            Method::Aes128Gcm => "aes-128-gcm",
            Method::Aes256Gcm => "aes-256-gcm",
            Method::Chacha20Poly1305 => "chacha20-ietf-poly1305",
            Method::XChacha20Poly1305 => "xchacha20-ietf-poly1305",
            Method::Blake3Aes128Gcm => "2022-blake3-aes-128-gcm",
            Method::Blake3Aes256Gcm => "2022-blake3-aes-256-gcm",
            Method::Blake3Chacha20Poly1305 => "2022-blake3-chacha20-poly1305",
        }
    }

    pub fn kind(self) -> Kind {
        match self {
            Method::None => Kind::None,
            Method::Aes128Cfb
            | Method::Aes192Cfb
            | Method::Aes256Cfb
            | Method::Aes128Ctr
            | Method::Aes192Ctr
            | Method::Aes256Ctr
            | Method::Chacha20Ietf
            | Method::Rc4Md5 => Kind::Stream,
            Method::Aes128Gcm
            | Method::Aes256Gcm
            | Method::Chacha20Poly1305
            | Method::XChacha20Poly1305 => Kind::Aead,
            Method::Blake3Aes128Gcm | Method::Blake3Aes256Gcm | Method::Blake3Chacha20Poly1305 => {
                Kind::Aead2022
            }
        }
    }

    /// Master key (or PSK) length in bytes.
    pub fn key_len(self) -> usize {
        match self {
            Method::None => 0,
            Method::Aes128Cfb | Method::Aes128Ctr | Method::Rc4Md5 | Method::Aes128Gcm => 16,
            Method::Blake3Aes128Gcm => 16,
            Method::Aes192Cfb | Method::Aes192Ctr => 24,
            _ => 32,
        }
    }

    /// Salt (AEAD, 2022) or IV (stream) length in bytes.
    pub fn salt_len(self) -> usize {
        match self.kind() {
            Kind::None => 0,
            Kind::Stream => match self {
                Method::Chacha20Ietf => 12,
                _ => 16,
            },
            Kind::Aead | Kind::Aead2022 => self.key_len(),
        }
    }

    /// AEAD nonce length (12, or 24 for XChaCha).
    pub fn nonce_len(self) -> usize {
        if self == Method::XChacha20Poly1305 {
            24
        } else {
            12
        }
    }

    /// The user key for a configured password: EVP_BytesToKey for stream/AEAD methods,
    /// standard base64 of exactly `key_len` bytes for 2022 methods.
    pub fn key_from_password(self, password: &str) -> Result<Vec<u8>, String> {
        match self.kind() {
            Kind::None => Ok(Vec::new()),
            Kind::Stream | Kind::Aead => Ok(evp_bytes_to_key(password.as_bytes(), self.key_len())),
            Kind::Aead2022 => decode_psk(password, self.key_len()),
        }
    }
}

/// Decodes one base64 2022 key and checks its length.
pub fn decode_psk(b64: &str, len: usize) -> Result<Vec<u8>, String> {
    use base64::Engine;
    let t = b64.trim();
    let key = base64::engine::general_purpose::STANDARD
        .decode(t)
        .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(t))
        .map_err(|_| format!("{t:?} is not base64"))?;
    if key.len() != len {
        return Err(format!(
            "the key must be {len} bytes (base64 of {len} random bytes, e.g. `openssl rand -base64 {len}`), found {}",
            key.len()
        ));
    }
    Ok(key)
}

/// OpenSSL's `EVP_BytesToKey` with MD5, one round, no salt (key part only).
pub fn evp_bytes_to_key(password: &[u8], key_len: usize) -> Vec<u8> {
    let mut key = Vec::with_capacity(key_len + 16);
    let mut prev: Option<[u8; 16]> = None;
    while key.len() < key_len {
        let mut h = md5::Md5::new();
        if let Some(p) = prev {
            h.update(p);
        }
        h.update(password);
        let d: [u8; 16] = h.finalize().into();
        key.extend_from_slice(&d);
        prev = Some(d);
    }
    key.truncate(key_len);
    key
}

/// HKDF-SHA1 (RFC 5869), output `len` bytes (≤ 255·20).
pub fn hkdf_sha1(ikm: &[u8], salt: &[u8], info: &[u8], out: &mut [u8]) {
    let hk = hkdf::Hkdf::<sha1::Sha1>::new(Some(salt), ikm);
    // Lengths used here (≤ 64) are far below the HKDF limit.
    let _ = hk.expand(info, out);
}

/// The AEAD-edition session subkey: HKDF-SHA1(master key, salt, "ss-subkey").
pub fn aead_subkey(master: &[u8], salt: &[u8]) -> Vec<u8> {
    let mut k = vec![0u8; master.len()];
    hkdf_sha1(master, salt, b"ss-subkey", &mut k);
    k
}

/// BLAKE3 `derive_key(context, a || b)`, first `len` (≤ 32) bytes.
pub fn blake3_derive(context: &str, a: &[u8], b: &[u8], len: usize) -> Vec<u8> {
    let mut h = blake3::Hasher::new_derive_key(context);
    h.update(a);
    h.update(b);
    let out = h.finalize();
    out.as_bytes()[..len.min(32)].to_vec()
}

/// The 2022 session subkey from a PSK and a salt (or UDP session id).
pub fn session_subkey_2022(psk: &[u8], salt: &[u8]) -> Vec<u8> {
    blake3_derive("shadowsocks 2022 session subkey", psk, salt, psk.len())
}

/// The 2022 identity subkey (EIH) from an iPSK and a salt.
pub fn identity_subkey_2022(ipsk: &[u8], salt: &[u8]) -> Vec<u8> {
    blake3_derive("shadowsocks 2022 identity subkey", ipsk, salt, ipsk.len())
}

/// First 16 bytes of BLAKE3(key): how EIH names the next key.
pub fn psk_hash16(key: &[u8]) -> [u8; 16] {
    let h = blake3::hash(key);
    let mut o = [0u8; 16];
    o.copy_from_slice(&h.as_bytes()[..16]);
    o
}

/// One AES block (ECB) with a 16- or 32-byte key: 2022 EIH and UDP separate headers.
#[derive(Clone)]
pub enum AesBlock {
    A128(Box<aes::Aes128>),
    A256(Box<aes::Aes256>),
}

impl AesBlock {
    /// `None` when the key is neither 16 nor 32 bytes.
    pub fn new(key: &[u8]) -> Option<AesBlock> {
        match key.len() {
            16 => aes::Aes128::new_from_slice(key)
                .ok()
                .map(|c| AesBlock::A128(Box::new(c))),
            32 => aes::Aes256::new_from_slice(key)
                .ok()
                .map(|c| AesBlock::A256(Box::new(c))),
            _ => None,
        }
    }

    pub fn encrypt(&self, block: &mut [u8; 16]) {
        let b: &mut Array<u8, _> = block.into();
        match self {
            AesBlock::A128(c) => c.encrypt_block(b),
            AesBlock::A256(c) => c.encrypt_block(b),
        }
    }

    pub fn decrypt(&self, block: &mut [u8; 16]) {
        let b: &mut Array<u8, _> = block.into();
        match self {
            AesBlock::A128(c) => c.decrypt_block(b),
            AesBlock::A256(c) => c.decrypt_block(b),
        }
    }
}

/// AEAD authentication failed (wrong key, tampered or truncated data).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("AEAD authentication failed")]
pub struct AuthError;

/// Our AEAD: one enum over the fastest implementation for each construction.
pub enum AeadCipher {
    /// AES-128/256-GCM and ChaCha20-Poly1305 from aws-lc-rs.
    Aws(LessSafeKey),
    /// XChaCha20-Poly1305 from RustCrypto.
    XChaCha(Box<chacha20poly1305::XChaCha20Poly1305>),
}

/// Which AEAD construction to key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AeadAlg {
    Aes128Gcm,
    Aes256Gcm,
    ChaCha20Poly1305,
    XChaCha20Poly1305,
}

impl AeadAlg {
    /// The TCP (and AEAD-edition UDP) construction of a method; `None` for non-AEAD methods.
    pub fn of(m: Method) -> Option<AeadAlg> {
        Some(match m {
            Method::Aes128Gcm | Method::Blake3Aes128Gcm => AeadAlg::Aes128Gcm,
            Method::Aes256Gcm | Method::Blake3Aes256Gcm => AeadAlg::Aes256Gcm,
            Method::Chacha20Poly1305 | Method::Blake3Chacha20Poly1305 => AeadAlg::ChaCha20Poly1305,
            Method::XChacha20Poly1305 => AeadAlg::XChaCha20Poly1305,
            _ => return None,
        })
    }

    pub fn nonce_len(self) -> usize {
        if self == AeadAlg::XChaCha20Poly1305 {
            24
        } else {
            12
        }
    }
}

impl AeadCipher {
    /// Keys `alg`; `None` when the key length is wrong for it.
    pub fn new(alg: AeadAlg, key: &[u8]) -> Option<AeadCipher> {
        let aws = |a: &'static awsaead::Algorithm| {
            UnboundKey::new(a, key)
                .ok()
                .map(|k| AeadCipher::Aws(LessSafeKey::new(k)))
        };
        match alg {
            AeadAlg::Aes128Gcm => aws(&awsaead::AES_128_GCM),
            AeadAlg::Aes256Gcm => aws(&awsaead::AES_256_GCM),
            AeadAlg::ChaCha20Poly1305 => aws(&awsaead::CHACHA20_POLY1305),
            AeadAlg::XChaCha20Poly1305 => chacha20poly1305::XChaCha20Poly1305::new_from_slice(key)
                .ok()
                .map(|c| AeadCipher::XChaCha(Box::new(c))),
        }
    }

    /// Encrypts `buf` in place and returns the tag. `nonce` is 12 bytes (24 for XChaCha).
    pub fn seal(&self, nonce: &[u8], buf: &mut [u8]) -> [u8; TAG_LEN] {
        let mut tag = [0u8; TAG_LEN];
        match self {
            AeadCipher::Aws(k) => {
                if let Ok(n) = awsaead::Nonce::try_assume_unique_for_key(nonce) {
                    if let Ok(t) = k.seal_in_place_separate_tag(n, Aad::empty(), buf) {
                        tag.copy_from_slice(t.as_ref());
                    }
                }
            }
            AeadCipher::XChaCha(c) => {
                if let Ok(n) = <&chacha20poly1305::XNonce>::try_from(nonce) {
                    if let Ok(t) = c.encrypt_inout_detached(n, &[], buf.into()) {
                        tag.copy_from_slice(&t);
                    }
                }
            }
        }
        tag
    }

    /// Seals `buf[..len - 16]` in place and writes the tag into the last 16 bytes.
    pub fn seal_with_tag(&self, nonce: &[u8], buf: &mut [u8]) {
        let Some(split) = buf.len().checked_sub(TAG_LEN) else {
            return;
        };
        let (data, tag) = buf.split_at_mut(split);
        tag.copy_from_slice(&self.seal(nonce, data));
    }

    /// Seals `src` into `dst[..src.len() + 16]` (ciphertext || tag), leaving `src` alone.
    pub fn seal_to(&self, nonce: &[u8], src: &[u8], dst: &mut [u8]) -> Result<(), AuthError> {
        let out = dst.get_mut(..src.len() + TAG_LEN).ok_or(AuthError)?;
        match self {
            // aws-lc's scatter path is as fast as in place for AES-GCM (and saves the copy),
            // but several times slower for ChaCha20-Poly1305 (measured: 0.4 vs 1.9 GB/s).
            AeadCipher::Aws(k) if k.algorithm() != &awsaead::CHACHA20_POLY1305 => {
                let n = awsaead::Nonce::try_assume_unique_for_key(nonce).map_err(|_| AuthError)?;
                k.seal_in_place_scatter(n, Aad::empty(), &mut [], src, out)
                    .map_err(|_| AuthError)
            }
            AeadCipher::Aws(_) | AeadCipher::XChaCha(_) => {
                out[..src.len()].copy_from_slice(src);
                self.seal_with_tag(nonce, out);
                Ok(())
            }
        }
    }

    /// Opens `src` = ciphertext || tag into `dst[..src.len() - 16]`, leaving `src` alone.
    pub fn open_to(&self, nonce: &[u8], src: &[u8], dst: &mut [u8]) -> Result<(), AuthError> {
        let split = src.len().checked_sub(TAG_LEN).ok_or(AuthError)?;
        let (ct, tag) = src.split_at(split);
        let out = dst.get_mut(..split).ok_or(AuthError)?;
        match self {
            AeadCipher::Aws(k) => {
                let n = awsaead::Nonce::try_assume_unique_for_key(nonce).map_err(|_| AuthError)?;
                k.open_separate_gather(n, Aad::empty(), ct, tag, out)
                    .map_err(|_| AuthError)
            }
            AeadCipher::XChaCha(c) => {
                let n = <&chacha20poly1305::XNonce>::try_from(nonce).map_err(|_| AuthError)?;
                let t = <&chacha20poly1305::Tag>::try_from(tag).map_err(|_| AuthError)?;
                out.copy_from_slice(ct);
                c.decrypt_inout_detached(n, &[], out.into(), t)
                    .map_err(|_| AuthError)
            }
        }
    }

    /// Opens `buf` = ciphertext || tag in place; on success the plaintext is `buf[..len - 16]`.
    pub fn open(&self, nonce: &[u8], buf: &mut [u8]) -> Result<(), AuthError> {
        let split = buf.len().checked_sub(TAG_LEN).ok_or(AuthError)?;
        let (data, tag) = buf.split_at_mut(split);
        match self {
            AeadCipher::Aws(k) => {
                let n = awsaead::Nonce::try_assume_unique_for_key(nonce).map_err(|_| AuthError)?;
                k.open_in_place_separate_tag(n, Aad::empty(), tag, data)
                    .map(|_| ())
                    .map_err(|_| AuthError)
            }
            AeadCipher::XChaCha(c) => {
                let n = <&chacha20poly1305::XNonce>::try_from(nonce).map_err(|_| AuthError)?;
                let t = <&chacha20poly1305::Tag>::try_from(&*tag).map_err(|_| AuthError)?;
                c.decrypt_inout_detached(n, &[], data.into(), t)
                    .map_err(|_| AuthError)
            }
        }
    }
}

/// A little-endian counter nonce (12 or 24 bytes), +1 after every AEAD operation.
#[derive(Clone)]
pub struct CounterNonce {
    bytes: [u8; 24],
    len: usize,
}

impl CounterNonce {
    pub fn new(len: usize) -> Self {
        CounterNonce {
            bytes: [0; 24],
            len: len.min(24),
        }
    }

    pub fn get(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    pub fn increment(&mut self) {
        for b in self.bytes[..self.len].iter_mut() {
            let (v, carry) = b.overflowing_add(1);
            *b = v;
            if !carry {
                break;
            }
        }
    }
}

/// Fills `buf` with cryptographically random bytes (panics if the system RNG fails, see
/// [`crate::common::rand::fill`]).
pub fn random(buf: &mut [u8]) {
    crate::common::rand::fill(buf);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::testutil::hex;

    const ALL_AEAD: [AeadAlg; 4] = [
        AeadAlg::Aes128Gcm,
        AeadAlg::Aes256Gcm,
        AeadAlg::ChaCha20Poly1305,
        AeadAlg::XChaCha20Poly1305,
    ];

    #[test]
    fn evp_bytes_to_key_vectors() {
        assert_eq!(
            evp_bytes_to_key(b"password", 16),
            hex("5f4dcc3b5aa765d61d8327deb882cf99")
        );
        assert_eq!(
            evp_bytes_to_key(b"password", 32),
            hex("5f4dcc3b5aa765d61d8327deb882cf99 2b95990a9151374abd8ff8c5a7a0fe08")
        );
        assert_eq!(
            evp_bytes_to_key(b"12345678901234561234567890123456", 32),
            hex("9b69a546f0c55fd22d2f5b6fdce27deb55d817b5d610488cfaa88c21c8a094eb")
        );
        let k = hex("8c5ea5e7ade3b3133a479e6aff0506dd7952bf75984a26722070cd9e44a09353");
        for len in [16, 24, 32] {
            assert_eq!(
                evp_bytes_to_key("123中1文da18测)试abc!#$@(".as_bytes(), len),
                k[..len]
            );
        }
        let k = hex("4b01a2d762fada9ede4d1034a13dc69c3b528b738236b99cd3a472d2933580d6");
        assert_eq!(
            evp_bytes_to_key(b"Imakethis_LongPassPhraseFor_safety_2019_0928@_@!", 32),
            k
        );
    }

    #[test]
    fn hkdf_sha1_vectors() {
        let mut okm = [0u8; 42];
        hkdf_sha1(
            &hex("0b0b0b0b0b0b0b0b0b0b0b"),
            &hex("000102030405060708090a0b0c"),
            &hex("f0f1f2f3f4f5f6f7f8f9"),
            &mut okm,
        );
        assert_eq!(
            okm.to_vec(),
            hex("085a01ea1b10f36933068b56efa5ad81a4f14b822f5b091568a9cdd4f155fda2c22e422478d305f3f896")
        );
        let mut k = [0u8; 16];
        hkdf_sha1(b"password", b"random-salt", b"ss-subkey", &mut k);
        assert_eq!(k.to_vec(), hex("64a301074f05220743fdfeb584aa1216"));
        let mut k = [0u8; 32];
        hkdf_sha1(b"shadowsocks", b"saltsalt", b"infoinfo", &mut k);
        assert_eq!(
            k.to_vec(),
            hex("99a88d5a2ce18ae45f1ff44aab96405fa9ea922ca0b32494399427fa1a16f879")
        );
    }

    #[test]
    fn blake3_vectors() {
        let ctx = "BLAKE3 2019-12-27 16:29:52 test vectors context";
        assert_eq!(
            blake3::hash(b"").as_bytes().to_vec(),
            hex("af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262")
        );
        assert_eq!(
            blake3::hash(&[0]).as_bytes().to_vec(),
            hex("2d3adedff11b61f14c886e35afa036736dcd87a74d27b5c1510225d0f592e213")
        );
        assert_eq!(
            blake3_derive(ctx, b"", b"", 32),
            hex("2cc39783c223154fea8dfb7c1b1660f2ac2dcbd1c1de8277b0b0dd39b7e50d7d")
        );
        // The split between the two inputs does not matter (PSK || salt).
        assert_eq!(
            blake3_derive(ctx, &[0], b"", 32),
            hex("b3e2e340a117a499c6cf2398a19ee0d29cca2bb7404c73063382693bf66cb06c")
        );
        assert_eq!(
            blake3_derive(ctx, b"", &[0], 16),
            blake3_derive(ctx, &[0], b"", 32)[..16]
        );
    }

    #[test]
    fn aead_round_trip_and_tamper() {
        for alg in ALL_AEAD {
            let klen = if alg == AeadAlg::Aes128Gcm { 16 } else { 32 };
            let c = AeadCipher::new(alg, &vec![7u8; klen]).unwrap();
            assert!(AeadCipher::new(alg, &[1u8; 5]).is_none());
            let mut n = CounterNonce::new(alg.nonce_len());
            n.increment();
            let mut buf = b"hello world".to_vec();
            buf.extend_from_slice(&[0u8; 16]);
            c.seal_with_tag(n.get(), &mut buf);
            assert_ne!(&buf[..11], b"hello world");
            let mut bad = buf.clone();
            bad[0] ^= 1;
            assert_eq!(c.open(n.get(), &mut bad), Err(AuthError));
            c.open(n.get(), &mut buf).unwrap();
            assert_eq!(&buf[..11], b"hello world");
            assert_eq!(c.open(n.get(), &mut [0u8; 3]), Err(AuthError));
        }
    }

    #[test]
    fn out_of_place_matches_in_place() {
        for alg in ALL_AEAD {
            let klen = if alg == AeadAlg::Aes128Gcm { 16 } else { 32 };
            let c = AeadCipher::new(alg, &vec![5u8; klen]).unwrap();
            let nonce = [3u8; 24];
            let n = &nonce[..alg.nonce_len()];
            let msg: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
            let mut inplace = msg.clone();
            inplace.extend_from_slice(&[0u8; 16]);
            c.seal_with_tag(n, &mut inplace);
            let mut sealed = vec![0u8; msg.len() + 40];
            c.seal_to(n, &msg, &mut sealed).unwrap();
            assert_eq!(&sealed[..inplace.len()], &inplace[..], "{alg:?}");
            assert!(c.seal_to(n, &msg, &mut [0u8; 100]).is_err());
            let mut plain = vec![0u8; msg.len()];
            c.open_to(n, &inplace, &mut plain).unwrap();
            assert_eq!(plain, msg);
            inplace[7] ^= 1;
            assert_eq!(c.open_to(n, &inplace, &mut plain), Err(AuthError));
            assert_eq!(c.open_to(n, &inplace, &mut [0u8; 10]), Err(AuthError));
        }
    }

    #[test]
    fn nonce_counts_little_endian() {
        let mut n = CounterNonce::new(12);
        for _ in 0..256 {
            n.increment();
        }
        assert_eq!(n.get(), &[0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn methods_parse_and_sizes() {
        for m in Method::ALL {
            assert_eq!(Method::parse(m.name()), Some(*m));
        }
        assert_eq!(
            Method::parse("chacha20-poly1305"),
            Some(Method::Chacha20Poly1305)
        );
        assert_eq!(Method::parse("AES-128-GCM"), Some(Method::Aes128Gcm));
        assert_eq!(Method::Aes128Gcm.salt_len(), 16);
        assert_eq!(Method::Chacha20Ietf.salt_len(), 12);
        assert!(Method::Blake3Aes128Gcm
            .key_from_password("AAECAwQFBgcICQoLDA0ODw==")
            .is_ok());
        assert!(Method::Blake3Aes256Gcm
            .key_from_password("AAECAwQFBgcICQoLDA0ODw==")
            .is_err());
    }
}
