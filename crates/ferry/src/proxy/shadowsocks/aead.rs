//! Sans-IO chunk codec of the AEAD edition (SIP004) and of Shadowsocks 2022 (same framing,
//! larger chunks): `AE(len) || AE(payload)`, nonces counting up from zero, in-place crypto.

use std::ops::Range;

use super::cipher::{AeadCipher, AuthError, CounterNonce, TAG_LEN};

/// Largest payload of an AEAD-edition chunk (the top two length bits are reserved).
pub const AEAD_MAX_CHUNK: usize = 0x3FFF;
/// Largest payload of a 2022 chunk.
pub const SS2022_MAX_CHUNK: usize = 0xFFFF;
/// Encrypted length block: BE16 + tag.
pub const LEN_BLOCK: usize = 2 + TAG_LEN;

/// Why a Shadowsocks stream or packet was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("authentication failed (wrong key or tampered data)")]
    Auth,
    #[error("chunk length {0} over the limit")]
    TooLong(usize),
    #[error("salt was seen before (replay)")]
    Replay,
    #[error("timestamp {0} s off the local clock")]
    ClockSkew(i64),
    #[error("bad header: {0}")]
    Header(&'static str),
    #[error("unknown user")]
    UnknownUser,
    #[error("truncated")]
    Truncated,
    #[error("first read held {0} of the {1} header bytes")]
    ShortHeader(usize, usize),
}

impl Error {
    /// A short stable name for counting rejections by kind (the metrics' `reason` label).
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Auth => "auth",
            Error::TooLong(_) => "bad_length",
            Error::Replay => "replay",
            Error::ClockSkew(_) => "clock_skew",
            Error::Header(_) => "bad_header",
            Error::UnknownUser => "unknown_user",
            Error::Truncated => "truncated",
            Error::ShortHeader(..) => "short_header",
        }
    }
}

impl From<AuthError> for Error {
    fn from(_: AuthError) -> Self {
        Error::Auth
    }
}

impl From<Error> for std::io::Error {
    fn from(e: Error) -> Self {
        std::io::Error::new(std::io::ErrorKind::InvalidData, e)
    }
}

/// What [`ChunkOpener::open`] found at the start of the buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Open {
    /// At least this many bytes (counted from the buffer start) are needed.
    Need(usize),
    /// A whole chunk: `consumed` bytes used, plaintext at `plain` (inside the consumed bytes).
    Data {
        consumed: usize,
        plain: Range<usize>,
    },
}

/// What [`ChunkOpener::open_to`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum OpenTo {
    /// At least this many bytes (counted from the buffer start) are needed.
    Need(usize),
    /// `consumed` input bytes used; `written` plaintext bytes are at the start of `dst`
    /// (zero after a length block).
    Written { consumed: usize, written: usize },
    /// The chunk did not fit `dst`: it was opened in place, plaintext at `plain` in the input.
    InPlace {
        consumed: usize,
        plain: Range<usize>,
    },
}

/// Checks the first length block of a 2022 response (header bytes before the BE16 length).
pub type FirstCheck = Box<dyn FnMut(&[u8]) -> Result<(), Error> + Send>;

/// Decrypts chunks in place.
pub struct ChunkOpener {
    cipher: AeadCipher,
    nonce: CounterNonce,
    max: usize,
    /// Payload length of the chunk whose length block was already opened.
    pending: Option<usize>,
    /// 2022 client: the first length block carries a response header of this many bytes first.
    first: Option<(usize, FirstCheck)>,
}

impl ChunkOpener {
    pub fn new(cipher: AeadCipher, nonce_len: usize, max: usize) -> Self {
        ChunkOpener {
            cipher,
            nonce: CounterNonce::new(nonce_len),
            max,
            pending: None,
            first: None,
        }
    }

    /// The first length block is `header(extra) || BE16 len`; `check` validates the header.
    pub fn with_first_header(mut self, extra: usize, check: FirstCheck) -> Self {
        self.first = Some((extra, check));
        self
    }

    /// Continues after a length block that was opened elsewhere (multi-user key trial).
    pub fn resume_with_len(&mut self, len: usize) -> Result<(), Error> {
        if len > self.max {
            return Err(Error::TooLong(len));
        }
        self.nonce.increment();
        self.pending = Some(len);
        Ok(())
    }

    /// Bytes of the next unit [`ChunkOpener::open`] will authenticate (a length block, or the
    /// payload whose length was read).
    pub fn unit_len(&self) -> usize {
        match self.pending {
            Some(l) => l + TAG_LEN,
            None => self.first.as_ref().map(|f| f.0).unwrap_or(0) + LEN_BLOCK,
        }
    }

    /// Opens one AEAD block in place (2022 headers): consumes one nonce.
    pub fn open_block(&mut self, buf: &mut [u8]) -> Result<(), Error> {
        let r = self.cipher.open(self.nonce.get(), buf);
        self.nonce.increment();
        r.map_err(Error::from)
    }

    /// Opens the next chunk at the start of `buf` (decrypting in place).
    pub fn open(&mut self, buf: &mut [u8]) -> Result<Open, Error> {
        let len = match self.pending {
            Some(l) => l,
            None => {
                let extra = self.first.as_ref().map(|f| f.0).unwrap_or(0);
                let lb = extra + LEN_BLOCK;
                let Some(block) = buf.get_mut(..lb) else {
                    return Ok(Open::Need(lb));
                };
                self.open_block(block)?;
                if let Some((_, mut check)) = self.first.take() {
                    check(&block[..extra])?;
                }
                let len = u16::from_be_bytes([block[extra], block[extra + 1]]) as usize;
                if len > self.max {
                    return Err(Error::TooLong(len));
                }
                self.pending = Some(len);
                // The caller consumes the length block even when the payload is not here yet.
                return Ok(Open::Data {
                    consumed: lb,
                    plain: lb..lb,
                });
            }
        };
        let Some(block) = buf.get_mut(..len + TAG_LEN) else {
            return Ok(Open::Need(len + TAG_LEN));
        };
        self.open_block(block)?;
        self.pending = None;
        Ok(Open::Data {
            consumed: len + TAG_LEN,
            plain: 0..len,
        })
    }
}

impl ChunkOpener {
    /// Like [`ChunkOpener::open`], but a payload that fits `dst` is decrypted straight into it
    /// (no copy afterwards); a larger one is opened in place.
    pub fn open_to(&mut self, buf: &mut [u8], dst: &mut [u8]) -> Result<OpenTo, Error> {
        let Some(len) = self.pending else {
            return Ok(match self.open(buf)? {
                Open::Need(n) => OpenTo::Need(n),
                Open::Data { consumed, plain } => OpenTo::InPlace { consumed, plain },
            });
        };
        if dst.len() < len {
            return Ok(match self.open(buf)? {
                Open::Need(n) => OpenTo::Need(n),
                Open::Data { consumed, plain } => OpenTo::InPlace { consumed, plain },
            });
        }
        let Some(block) = buf.get(..len + TAG_LEN) else {
            return Ok(OpenTo::Need(len + TAG_LEN));
        };
        let r = self.cipher.open_to(self.nonce.get(), block, dst);
        self.nonce.increment();
        r?;
        self.pending = None;
        Ok(OpenTo::Written {
            consumed: len + TAG_LEN,
            written: len,
        })
    }
}

/// Encrypts chunks into an output buffer.
pub struct ChunkSealer {
    cipher: AeadCipher,
    nonce: CounterNonce,
    max: usize,
    /// 2022 server: bytes placed before the first chunk's BE16 length (response header).
    first_prefix: Option<Vec<u8>>,
}

impl ChunkSealer {
    pub fn new(cipher: AeadCipher, nonce_len: usize, max: usize) -> Self {
        ChunkSealer {
            cipher,
            nonce: CounterNonce::new(nonce_len),
            max,
            first_prefix: None,
        }
    }

    pub fn with_first_prefix(mut self, prefix: Vec<u8>) -> Self {
        self.first_prefix = Some(prefix);
        self
    }

    /// Largest payload per chunk.
    pub fn max_chunk(&self) -> usize {
        self.max
    }

    /// Seals `plain` as one AEAD block (2022 headers, AEAD UDP): appends ciphertext || tag.
    pub fn seal_block(&mut self, plain: &[u8], out: &mut Vec<u8>) {
        let at = out.len();
        out.extend_from_slice(plain);
        out.extend_from_slice(&[0u8; TAG_LEN]);
        self.cipher.seal_with_tag(self.nonce.get(), &mut out[at..]);
        self.nonce.increment();
    }

    /// Seals one chunk (`payload.len() <= max`): appends AE(len) || AE(payload).
    pub fn seal_chunk(&mut self, payload: &[u8], out: &mut Vec<u8>) {
        let n = payload.len().min(self.max);
        let at = out.len();
        if let Some(p) = self.first_prefix.take() {
            out.extend_from_slice(&p);
        }
        out.extend_from_slice(&(n as u16).to_be_bytes());
        out.extend_from_slice(&[0u8; TAG_LEN]);
        self.cipher.seal_with_tag(self.nonce.get(), &mut out[at..]);
        self.nonce.increment();
        self.seal_block(&payload[..n], out);
    }

    /// Bytes [`ChunkSealer::seal_chunk_to`] writes for a payload of `n` bytes.
    pub fn sealed_len(&self, n: usize) -> usize {
        self.first_prefix.as_ref().map_or(0, |p| p.len()) + LEN_BLOCK + n.min(self.max) + TAG_LEN
    }

    /// Seals one chunk (`payload.len() <= max`) into the start of `out`, which must hold
    /// [`ChunkSealer::sealed_len`] bytes; returns the bytes written (0 when `out` is too small).
    pub fn seal_chunk_to(&mut self, payload: &[u8], out: &mut [u8]) -> usize {
        let n = payload.len().min(self.max);
        let total = self.sealed_len(n);
        let Some(out) = out.get_mut(..total) else {
            return 0;
        };
        let mut lb = 0;
        if let Some(p) = self.first_prefix.take() {
            out[..p.len()].copy_from_slice(&p);
            lb = p.len();
        }
        out[lb..lb + 2].copy_from_slice(&(n as u16).to_be_bytes());
        lb += LEN_BLOCK;
        self.cipher.seal_with_tag(self.nonce.get(), &mut out[..lb]);
        self.nonce.increment();
        // Cannot fail: `out` was sized above.
        let _ = self
            .cipher
            .seal_to(self.nonce.get(), &payload[..n], &mut out[lb..]);
        self.nonce.increment();
        total
    }

    /// Seals all of `data` as chunks of at most `max` bytes.
    pub fn seal_all(&mut self, data: &[u8], out: &mut Vec<u8>) {
        for c in data.chunks(self.max.max(1)) {
            self.seal_chunk(c, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::cipher::AeadAlg;
    use super::*;

    fn pair(max: usize) -> (ChunkSealer, ChunkOpener) {
        let k = [9u8; 16];
        (
            ChunkSealer::new(AeadCipher::new(AeadAlg::Aes128Gcm, &k).unwrap(), 12, max),
            ChunkOpener::new(AeadCipher::new(AeadAlg::Aes128Gcm, &k).unwrap(), 12, max),
        )
    }

    /// Feeds `wire` to the opener in pieces of `step` bytes, as a reader would.
    fn read_all(o: &mut ChunkOpener, wire: &mut [u8], step: usize) -> Result<Vec<u8>, Error> {
        let mut out = Vec::new();
        let (mut start, mut avail) = (0usize, 0usize);
        loop {
            match o.open(&mut wire[start..avail])? {
                Open::Data { consumed, plain } => {
                    out.extend_from_slice(&wire[start + plain.start..start + plain.end]);
                    start += consumed;
                }
                Open::Need(_) if avail == wire.len() => return Ok(out),
                Open::Need(_) => avail = (avail + step).min(wire.len()),
            }
        }
    }

    #[test]
    fn round_trip_in_any_pieces() {
        let data: Vec<u8> = (0..50_000u32).map(|i| (i * 7) as u8).collect();
        for step in [1, 17, 4096, 100_000] {
            let (mut s, mut o) = pair(AEAD_MAX_CHUNK);
            let mut wire = Vec::new();
            s.seal_all(&data, &mut wire);
            assert_eq!(wire.len(), data.len() + 4 * (LEN_BLOCK + TAG_LEN));
            assert_eq!(read_all(&mut o, &mut wire, step).unwrap(), data);
        }
    }

    #[test]
    fn oversized_length_and_tamper_are_rejected() {
        let (mut s, mut o) = pair(SS2022_MAX_CHUNK);
        let mut wire = Vec::new();
        s.seal_chunk(&[1u8; 20_000], &mut wire);
        let (_, mut small) = pair(AEAD_MAX_CHUNK);
        assert_eq!(small.open(&mut wire.clone()), Err(Error::TooLong(20_000)));
        wire[30] ^= 0x80;
        assert!(matches!(o.open(&mut wire), Ok(Open::Data { .. })));
        assert_eq!(o.open(&mut wire[LEN_BLOCK..]), Err(Error::Auth));
    }

    #[test]
    fn slice_api_matches_vec_api() {
        let data: Vec<u8> = (0..40_000u32).map(|i| (i * 13) as u8).collect();
        let (mut a, _) = pair(AEAD_MAX_CHUNK);
        let (mut b, mut o) = pair(AEAD_MAX_CHUNK);
        let mut wire = Vec::new();
        a.seal_all(&data, &mut wire);
        let mut wire2 = vec![0u8; wire.len()];
        let mut at = 0;
        for c in data.chunks(AEAD_MAX_CHUNK) {
            assert_eq!(b.seal_chunk_to(c, &mut [0u8; 10]), 0);
            at += b.seal_chunk_to(c, &mut wire2[at..]);
        }
        assert_eq!(at, wire.len());
        assert_eq!(wire, wire2);
        // open_to: straight into a large destination, in place into a small one.
        let mut out = Vec::new();
        let mut dst = vec![0u8; 20_000];
        let (mut start, mut small) = (0, false);
        while start < wire.len() {
            let d = if small { &mut dst[..100] } else { &mut dst[..] };
            match o.open_to(&mut wire[start..], d).unwrap() {
                OpenTo::Written { consumed, written } => {
                    out.extend_from_slice(&dst[..written]);
                    start += consumed;
                    small = !small;
                }
                OpenTo::InPlace { consumed, plain } => {
                    out.extend_from_slice(&wire[start + plain.start..start + plain.end]);
                    start += consumed;
                    if !plain.is_empty() {
                        small = !small;
                    }
                }
                OpenTo::Need(_) => unreachable!(),
            }
        }
        assert_eq!(out, data);
        let (mut s, mut o) = pair(AEAD_MAX_CHUNK);
        let mut wire = Vec::new();
        s.seal_chunk(b"hello", &mut wire);
        wire[LEN_BLOCK + 1] ^= 1;
        assert!(matches!(
            o.open_to(&mut wire, &mut dst),
            Ok(OpenTo::InPlace { .. })
        ));
        assert_eq!(
            o.open_to(&mut wire[LEN_BLOCK..], &mut dst),
            Err(Error::Auth)
        );
    }

    #[test]
    fn zero_length_chunk_is_accepted() {
        let (mut s, mut o) = pair(AEAD_MAX_CHUNK);
        let mut wire = Vec::new();
        s.seal_chunk(&[], &mut wire);
        s.seal_chunk(b"x", &mut wire);
        assert_eq!(read_all(&mut o, &mut wire, 3).unwrap(), b"x");
    }
}
