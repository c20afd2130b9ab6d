//! TLS 1.3 keys (RFC 8446 §7): the cipher suites, HKDF written out over HMAC (REALITY's key
//! schedule needs its pseudo-random keys as bytes), and the per-direction record key.

use aws_lc_rs::{aead, digest, hmac};

/// A TLS 1.3 cipher suite.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Suite {
    Aes128Gcm,
    Aes256Gcm,
    Chacha20Poly1305,
}

impl Suite {
    pub fn from_id(id: u16) -> Option<Suite> {
        match id {
            0x1301 => Some(Suite::Aes128Gcm),
            0x1302 => Some(Suite::Aes256Gcm),
            0x1303 => Some(Suite::Chacha20Poly1305),
            _ => None,
        }
    }

    pub fn id(self) -> u16 {
        match self {
            Suite::Aes128Gcm => 0x1301,
            Suite::Aes256Gcm => 0x1302,
            Suite::Chacha20Poly1305 => 0x1303,
        }
    }

    pub fn hash(self) -> Hash {
        match self {
            Suite::Aes256Gcm => Hash::Sha384,
            _ => Hash::Sha256,
        }
    }

    fn aead(self) -> &'static aead::Algorithm {
        match self {
            Suite::Aes128Gcm => &aead::AES_128_GCM,
            Suite::Aes256Gcm => &aead::AES_256_GCM,
            Suite::Chacha20Poly1305 => &aead::CHACHA20_POLY1305,
        }
    }
}

/// The hash of a suite.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hash {
    Sha256,
    Sha384,
}

impl Hash {
    pub fn size(self) -> usize {
        match self {
            Hash::Sha256 => 32,
            Hash::Sha384 => 48,
        }
    }

    pub(crate) fn digest(self) -> &'static digest::Algorithm {
        match self {
            Hash::Sha256 => &digest::SHA256,
            Hash::Sha384 => &digest::SHA384,
        }
    }

    pub(crate) fn hmac(self) -> hmac::Algorithm {
        match self {
            Hash::Sha256 => hmac::HMAC_SHA256,
            Hash::Sha384 => hmac::HMAC_SHA384,
        }
    }

    pub fn hash(self, data: &[u8]) -> Vec<u8> {
        digest::digest(self.digest(), data).as_ref().to_vec()
    }

    pub fn mac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        let k = hmac::Key::new(self.hmac(), key);
        hmac::sign(&k, data).as_ref().to_vec()
    }

    /// HKDF-Extract.
    pub fn extract(self, salt: &[u8], ikm: &[u8]) -> Vec<u8> {
        let zeros = vec![0u8; self.size()];
        self.mac(if salt.is_empty() { &zeros } else { salt }, ikm)
    }

    /// HKDF-Expand to `len` bytes.
    pub fn expand(self, prk: &[u8], info: &[u8], len: usize) -> Vec<u8> {
        let k = hmac::Key::new(self.hmac(), prk);
        let mut out = Vec::with_capacity(len + self.size());
        let mut t: Vec<u8> = Vec::new();
        let mut i = 1u8;
        while out.len() < len {
            let mut c = hmac::Context::with_key(&k);
            c.update(&t);
            c.update(info);
            c.update(&[i]);
            t = c.sign().as_ref().to_vec();
            out.extend_from_slice(&t);
            i += 1;
        }
        out.truncate(len);
        out
    }

    /// HKDF-Expand-Label (RFC 8446 §7.1).
    pub fn expand_label(self, secret: &[u8], label: &str, context: &[u8], len: usize) -> Vec<u8> {
        let mut info = Vec::with_capacity(4 + 6 + label.len() + context.len());
        info.extend_from_slice(&(len as u16).to_be_bytes());
        info.push((6 + label.len()) as u8);
        info.extend_from_slice(b"tls13 ");
        info.extend_from_slice(label.as_bytes());
        info.push(context.len() as u8);
        info.extend_from_slice(context);
        self.expand(secret, &info, len)
    }

    /// Derive-Secret with a transcript hash already computed.
    pub fn derive(self, secret: &[u8], label: &str, transcript_hash: &[u8]) -> Vec<u8> {
        self.expand_label(secret, label, transcript_hash, self.size())
    }
}

/// An AEAD key and IV of one direction (RFC 8446 §5.3): the nonce is the IV XOR the record
/// sequence number.
pub struct TrafficKey {
    key: aead::LessSafeKey,
    iv: [u8; 12],
    seq: u64,
}

impl TrafficKey {
    #[allow(
        clippy::expect_used,
        clippy::unwrap_used,
        reason = "key lengths fixed by the suite; a record never exceeds the AEAD's limits"
    )]
    pub fn new(suite: Suite, secret: &[u8]) -> TrafficKey {
        let h = suite.hash();
        let alg = suite.aead();
        let k = h.expand_label(secret, "key", &[], alg.key_len());
        let iv = h.expand_label(secret, "iv", &[], 12);
        let mut ivb = [0u8; 12];
        ivb.copy_from_slice(&iv);
        TrafficKey {
            key: aead::LessSafeKey::new(aead::UnboundKey::new(alg, &k).expect("key length")),
            iv: ivb,
            seq: 0,
        }
    }

    /// Starts at record number `seq` (a handshake run elsewhere already used the ones before).
    pub fn set_seq(&mut self, seq: u64) {
        self.seq = seq;
    }

    /// Records sealed or opened with this key so far.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The IV (to check keys derived here against another engine's).
    pub fn iv(&self) -> &[u8; 12] {
        &self.iv
    }

    fn nonce(&mut self) -> aead::Nonce {
        let mut n = self.iv;
        for (i, b) in self.seq.to_be_bytes().iter().enumerate() {
            n[4 + i] ^= b;
        }
        self.seq += 1;
        aead::Nonce::assume_unique_for_key(n)
    }

    /// Encrypts `buf` in place with `aad`, returning the tag.
    #[allow(
        clippy::expect_used,
        clippy::unwrap_used,
        reason = "key lengths fixed by the suite; a record never exceeds the AEAD's limits"
    )]
    pub fn seal(&mut self, aad: &[u8], buf: &mut [u8]) -> [u8; 16] {
        let n = self.nonce();
        let tag = self
            .key
            .seal_in_place_separate_tag(n, aead::Aad::from(aad), buf)
            .expect("TLS record within AEAD limits");
        let mut t = [0u8; 16];
        t.copy_from_slice(tag.as_ref());
        t
    }

    /// Decrypts `buf` (ciphertext then tag) in place; returns the plaintext length.
    pub fn open(&mut self, aad: &[u8], buf: &mut [u8]) -> Option<usize> {
        let n = self.nonce();
        self.key
            .open_in_place(n, aead::Aad::from(aad), buf)
            .ok()
            .map(|p| p.len())
    }
}
