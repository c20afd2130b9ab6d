//! How chunks are framed and authenticated for one direction: the payload AEAD keys and
//! nonces, the size field codec (masking, padding, authenticated length), and the choice of
//! framing from [`BodyParams`].

use aws_lc_rs::aead::{LessSafeKey, Nonce, UnboundKey, AES_128_GCM, CHACHA20_POLY1305};
use md5::{Digest, Md5};

use super::mask::Mask;
use super::params::*;
use crate::proxy::vmess::kdf::{self, kdf16};

/// The 32-byte ChaCha20-Poly1305 key VMess expands from a 16-byte key.
pub fn chacha_key(k: &[u8; 16]) -> [u8; 32] {
    let a: [u8; 16] = Md5::digest(k).into();
    let b: [u8; 16] = Md5::digest(a).into();
    let mut out = [0u8; 32];
    out[..16].copy_from_slice(&a);
    out[16..].copy_from_slice(&b);
    out
}

pub(super) fn aead_key(sec: Security, key: &[u8; 16]) -> LessSafeKey {
    // Keys have the exact length each algorithm wants, so construction cannot fail.
    #[allow(clippy::unwrap_used)]
    let k = match sec {
        Security::Chacha20Poly1305 => {
            UnboundKey::new(&CHACHA20_POLY1305, &chacha_key(key)).unwrap()
        }
        _ => UnboundKey::new(&AES_128_GCM, key).unwrap(),
    };
    LessSafeKey::new(k)
}

/// `BE16(count) || iv[2..12]`.
pub(super) fn chunk_nonce(count: u16, iv: &[u8; 16]) -> Nonce {
    let mut n = [0u8; 12];
    n[..2].copy_from_slice(&count.to_be_bytes());
    n[2..].copy_from_slice(&iv[2..12]);
    Nonce::assume_unique_for_key(n)
}

/// What authenticates each chunk's payload.
pub(super) enum Payload {
    Aead(LessSafeKey),
    /// `none` over UDP: framing of the AEAD format with no tag.
    NoOp,
    /// Legacy: a 4-byte FNV-1a prefix.
    Fnv,
}

impl Payload {
    pub(super) fn overhead(&self) -> usize {
        match self {
            Payload::Aead(_) => TAG,
            Payload::NoOp => 0,
            Payload::Fnv => 4,
        }
    }
}

pub(super) enum Framing {
    /// No chunk stream: the body is the raw (possibly CFB-encrypted) byte stream.
    Raw,
    /// `none` over TCP: `[size][data]`, end = size 0.
    Stream,
    /// `[size][payload + overhead][padding]`, end = an empty payload.
    Auth(Payload),
}

/// Encodes the size field of each chunk.
pub(super) struct SizeCodec {
    pub(super) mask: Option<Mask>,
    pub(super) padding: bool,
    /// Authenticated length: its AEAD, the request IV, and its counter.
    pub(super) auth: Option<(LessSafeKey, [u8; 16], u16)>,
}

impl SizeCodec {
    pub(super) fn len(&self) -> usize {
        if self.auth.is_some() {
            2 + TAG
        } else {
            2
        }
    }
    pub(super) fn padding_len(&mut self) -> usize {
        match (&mut self.mask, self.padding) {
            (Some(m), true) => (m.next() % MAX_PADDING as u16) as usize,
            _ => 0,
        }
    }
}

pub(super) fn parts(p: &BodyParams) -> Result<(Framing, SizeCodec), BodyError> {
    let stream = p.opt & OPT_CHUNK_STREAM != 0;
    let masking = p.opt & OPT_CHUNK_MASKING != 0;
    let padding = p.opt & OPT_GLOBAL_PADDING != 0;
    if padding && !masking && stream {
        return Err(BodyError::PaddingWithoutMasking);
    }
    let framing = match (stream, p.security) {
        (false, _) => Framing::Raw,
        (true, Security::None) if !p.packet => Framing::Stream,
        (true, Security::None) => Framing::Auth(Payload::NoOp),
        (true, Security::Legacy) => Framing::Auth(Payload::Fnv),
        (true, s) => Framing::Auth(Payload::Aead(aead_key(s, &p.key))),
    };
    let aead = matches!(p.security, Security::Aes128Gcm | Security::Chacha20Poly1305);
    let auth = (aead && stream && p.opt & OPT_AUTH_LENGTH != 0).then(|| {
        let k = kdf16(&p.req_key, &[kdf::AUTH_LEN]);
        (aead_key(p.security, &k), p.req_iv, 0u16)
    });
    let size = SizeCodec {
        mask: masking.then(|| Mask::new(&p.iv)),
        padding: padding && matches!(framing, Framing::Auth(_)),
        auth,
    };
    Ok((framing, size))
}
