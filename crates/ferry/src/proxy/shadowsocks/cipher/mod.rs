//! Shadowsocks methods, key derivation, and our small AEAD enum.
//!
//! The AEAD is chosen per method behind [`AeadCipher`]: aws-lc-rs for AES-GCM and
//! ChaCha20-Poly1305 (the fastest here), RustCrypto for XChaCha20-Poly1305 (aws-lc-rs has none).
//!
//! `kdf.rs`: key derivation; `aead_cipher.rs`: the AEAD enum and its nonce; `aes_block.rs`: the
//! single-block AES of 2022 headers.

mod aead_cipher;
mod aes_block;
mod kdf;

pub use aead_cipher::{AeadAlg, AeadCipher, AuthError, CounterNonce};
pub use aes_block::AesBlock;
pub use kdf::{
    aead_subkey, blake3_derive, decode_psk, evp_bytes_to_key, hkdf_sha1, identity_subkey_2022,
    psk_hash16, session_subkey_2022,
};

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

/// Fills `buf` with cryptographically random bytes (panics if the system RNG fails, see
/// [`crate::common::rand::fill`]).
pub fn random(buf: &mut [u8]) {
    crate::common::rand::fill(buf);
}

#[cfg(test)]
mod tests {
    use super::*;

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
