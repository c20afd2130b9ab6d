//! The VMess body, sans-IO: chunk framing per security type and option bits. A [`Sealer`]
//! appends encoded chunks to an output buffer; an [`Opener`] decodes chunks in place at the
//! front of an input buffer.

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM, CHACHA20_POLY1305};
use md5::{Digest, Md5};
use shake::{ExtendableOutput, Shake128, Shake128Reader, Update, XofReader};

use super::header::{CfbDec, CfbEnc};
use super::kdf::{self, kdf16};

/// Option bits of the instruction section.
pub const OPT_CHUNK_STREAM: u8 = 0x01;
pub const OPT_CHUNK_MASKING: u8 = 0x04;
pub const OPT_GLOBAL_PADDING: u8 = 0x08;
pub const OPT_AUTH_LENGTH: u8 = 0x10;

/// Security byte values on the wire.
pub const SEC_LEGACY: u8 = 1;
pub const SEC_AES128_GCM: u8 = 3;
pub const SEC_CHACHA20: u8 = 4;
pub const SEC_NONE: u8 = 5;

/// Largest chunk a writer emits (size field + sealed payload + padding), as Xray/v2ray.
pub const MAX_CHUNK: usize = 8192;
/// Largest padding per chunk.
const MAX_PADDING: usize = 64;
const TAG: usize = 16;

/// The body security of one connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Security {
    Aes128Gcm,
    Chacha20Poly1305,
    /// No encryption (`none`; `zero` is `none` without the chunk-stream option).
    None,
    /// AES-128-CFB with an FNV-1a checksum per chunk (v2ray's legacy, security 1).
    Legacy,
}

impl Security {
    pub fn from_wire(b: u8) -> Option<Security> {
        match b {
            SEC_LEGACY => Some(Security::Legacy),
            SEC_AES128_GCM => Some(Security::Aes128Gcm),
            SEC_CHACHA20 => Some(Security::Chacha20Poly1305),
            SEC_NONE => Some(Security::None),
            _ => None,
        }
    }

    pub fn wire(self) -> u8 {
        match self {
            Security::Legacy => SEC_LEGACY,
            Security::Aes128Gcm => SEC_AES128_GCM,
            Security::Chacha20Poly1305 => SEC_CHACHA20,
            Security::None => SEC_NONE,
        }
    }
}

/// Why a chunk was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BodyError {
    #[error("chunk fails authentication")]
    Auth,
    #[error("chunk length fails authentication")]
    LengthAuth,
    #[error("chunk size {0} smaller than its overhead")]
    BadSize(usize),
    #[error("global padding without chunk masking")]
    PaddingWithoutMasking,
}

/// 32-bit FNV-1a. The hash is one serial chain (xor then multiply per byte), so the loop is
/// bounded by the multiply's latency; it is unrolled by 8 so loads and bounds checks overlap.
#[inline]
pub fn fnv1a32(data: &[u8]) -> u32 {
    fnv1a32_from(0x811c_9dc5, data)
}

#[inline]
fn fnv1a32_from(mut h: u32, data: &[u8]) -> u32 {
    const P: u32 = 0x0100_0193;
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        h = (h ^ (w & 0xff) as u32).wrapping_mul(P);
        h = (h ^ ((w >> 8) & 0xff) as u32).wrapping_mul(P);
        h = (h ^ ((w >> 16) & 0xff) as u32).wrapping_mul(P);
        h = (h ^ ((w >> 24) & 0xff) as u32).wrapping_mul(P);
        h = (h ^ ((w >> 32) & 0xff) as u32).wrapping_mul(P);
        h = (h ^ ((w >> 40) & 0xff) as u32).wrapping_mul(P);
        h = (h ^ ((w >> 48) & 0xff) as u32).wrapping_mul(P);
        h = (h ^ (w >> 56) as u32).wrapping_mul(P);
    }
    for b in chunks.remainder() {
        h = (h ^ *b as u32).wrapping_mul(P);
    }
    h
}

/// FNV-1a of several buffers at once: the chains are independent, so interleaving them lets
/// the CPU overlap their multiplies (about N times the single-chain rate for N ≤ 4).
#[allow(clippy::needless_range_loop)]
pub fn fnv1a32_many<const N: usize>(bufs: [&[u8]; N]) -> [u32; N] {
    const P: u32 = 0x0100_0193;
    let common = bufs.iter().map(|b| b.len()).min().unwrap_or(0);
    let mut h = [0x811c_9dc5u32; N];
    for i in 0..common {
        for k in 0..N {
            h[k] = (h[k] ^ bufs[k][i] as u32).wrapping_mul(P);
        }
    }
    for k in 0..N {
        h[k] = fnv1a32_from(h[k], &bufs[k][common..]);
    }
    h
}

/// The 32-byte ChaCha20-Poly1305 key VMess expands from a 16-byte key.
pub fn chacha_key(k: &[u8; 16]) -> [u8; 32] {
    let a: [u8; 16] = Md5::digest(k).into();
    let b: [u8; 16] = Md5::digest(a).into();
    let mut out = [0u8; 32];
    out[..16].copy_from_slice(&a);
    out[16..].copy_from_slice(&b);
    out
}

fn aead_key(sec: Security, key: &[u8; 16]) -> LessSafeKey {
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
fn chunk_nonce(count: u16, iv: &[u8; 16]) -> Nonce {
    let mut n = [0u8; 12];
    n[..2].copy_from_slice(&count.to_be_bytes());
    n[2..].copy_from_slice(&iv[2..12]);
    Nonce::assume_unique_for_key(n)
}

/// Bytes of SHAKE128 output buffered at a time: two rate blocks (168 words).
const MASK_BUF: usize = 2 * 168;

/// SHAKE128(IV) as a stream of big-endian 16-bit words (masks and padding lengths), drawn
/// from the XOF in bulk. Words can be looked at ahead ([`Mask::peek`]) and used up later
/// ([`Mask::advance`]), so a writer can frame chunks before it knows how many the socket takes.
struct Mask {
    xof: Shake128Reader,
    buf: [u8; MASK_BUF],
    pos: usize,
    end: usize,
}

impl Mask {
    /// Most words [`Mask::peek`] can look ahead.
    const LOOKAHEAD: usize = MASK_BUF / 2;

    fn new(iv: &[u8; 16]) -> Self {
        let mut s = Shake128::default();
        s.update(iv);
        Mask {
            xof: s.finalize_xof(),
            buf: [0; MASK_BUF],
            pos: 0,
            end: 0,
        }
    }

    /// Makes sure at least `words` words are buffered (`words` ≤ [`Mask::LOOKAHEAD`]).
    #[inline]
    fn ensure(&mut self, words: usize) {
        if self.end - self.pos < 2 * words {
            self.buf.copy_within(self.pos..self.end, 0);
            self.end -= self.pos;
            self.pos = 0;
            self.xof.read(&mut self.buf[self.end..]);
            self.end = MASK_BUF;
        }
    }

    #[inline]
    fn next(&mut self) -> u16 {
        let v = self.peek(0);
        self.pos += 2;
        v
    }

    /// The `i`-th word from now, without using it up (`i` < [`Mask::LOOKAHEAD`]).
    #[inline]
    fn peek(&mut self, i: usize) -> u16 {
        self.ensure(i + 1);
        let at = self.pos + 2 * i;
        u16::from_be_bytes([self.buf[at], self.buf[at + 1]])
    }

    /// Uses up `words` words (all of them peeked before).
    #[inline]
    fn advance(&mut self, words: usize) {
        self.ensure(words);
        self.pos += 2 * words;
    }
}

/// Random padding bytes, drawn from the system RNG a block at a time.
struct PadPool {
    buf: Box<[u8; 1024]>,
    pos: usize,
}

impl PadPool {
    fn new() -> Self {
        PadPool {
            buf: Box::new([0; 1024]),
            pos: 1024,
        }
    }

    /// Fills `out` (at most [`MAX_PADDING`] bytes) with random bytes.
    fn fill(&mut self, out: &mut [u8]) {
        if self.pos + out.len() > self.buf.len() {
            crate::common::rand::fill(&mut self.buf[..]);
            self.pos = 0;
        }
        let n = out.len().min(self.buf.len());
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
    }
}

/// What authenticates each chunk's payload.
enum Payload {
    Aead(LessSafeKey),
    /// `none` over UDP: framing of the AEAD format with no tag.
    NoOp,
    /// Legacy: a 4-byte FNV-1a prefix.
    Fnv,
}

impl Payload {
    fn overhead(&self) -> usize {
        match self {
            Payload::Aead(_) => TAG,
            Payload::NoOp => 0,
            Payload::Fnv => 4,
        }
    }
}

enum Framing {
    /// No chunk stream: the body is the raw (possibly CFB-encrypted) byte stream.
    Raw,
    /// `none` over TCP: `[size][data]`, end = size 0.
    Stream,
    /// `[size][payload + overhead][padding]`, end = an empty payload.
    Auth(Payload),
}

/// Encodes the size field of each chunk.
struct SizeCodec {
    mask: Option<Mask>,
    padding: bool,
    /// Authenticated length: its AEAD, the request IV, and its counter.
    auth: Option<(LessSafeKey, [u8; 16], u16)>,
}

impl SizeCodec {
    fn len(&self) -> usize {
        if self.auth.is_some() {
            2 + TAG
        } else {
            2
        }
    }
    fn padding_len(&mut self) -> usize {
        match (&mut self.mask, self.padding) {
            (Some(m), true) => (m.next() % MAX_PADDING as u16) as usize,
            _ => 0,
        }
    }
}

/// One direction's chunk parameters.
pub struct BodyParams {
    pub security: Security,
    pub opt: u8,
    /// UDP (one datagram per chunk).
    pub packet: bool,
    /// This direction's key and IV.
    pub key: [u8; 16],
    pub iv: [u8; 16],
    /// The request key and IV (authenticated length uses them in both directions).
    pub req_key: [u8; 16],
    pub req_iv: [u8; 16],
}

impl BodyParams {
    /// The two directions of one session: uplink under the request key/IV, downlink under the
    /// response key/IV (`resp`), both with the request's security and options.
    pub fn pair(
        security: Security,
        opt: u8,
        packet: bool,
        req: ([u8; 16], [u8; 16]),
        resp: ([u8; 16], [u8; 16]),
    ) -> (BodyParams, BodyParams) {
        let up = BodyParams {
            security,
            opt,
            packet,
            key: req.0,
            iv: req.1,
            req_key: req.0,
            req_iv: req.1,
        };
        let down = BodyParams {
            key: resp.0,
            iv: resp.1,
            ..up
        };
        (up, down)
    }
}

fn parts(p: &BodyParams) -> Result<(Framing, SizeCodec), BodyError> {
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

/// Writes one direction's chunks.
pub struct Sealer {
    framing: Framing,
    size: SizeCodec,
    iv: [u8; 16],
    count: u16,
    cfb: Option<CfbEnc>,
    pad: Option<PadPool>,
}

/// Chunks [`Sealer::stream_headers`] frames at most per call.
pub const MAX_STREAM_HEADERS: usize = Mask::LOOKAHEAD;

impl Sealer {
    /// `cfb` is the running CFB stream for legacy security (fresh, or the response header's).
    pub fn new(p: &BodyParams, cfb: Option<CfbEnc>) -> Result<Sealer, BodyError> {
        let (framing, size) = parts(p)?;
        let pad = size.padding.then(PadPool::new);
        Ok(Sealer {
            framing,
            size,
            iv: p.iv,
            count: 0,
            cfb: cfb.filter(|_| p.security == Security::Legacy),
            pad,
        })
    }

    /// True when the body is passed through untouched (`zero`, `none` without chunk stream).
    pub fn is_passthrough(&self) -> bool {
        matches!(self.framing, Framing::Raw) && self.cfb.is_none()
    }

    /// True for `none` over TCP: `[size][data]` chunks whose payload goes out untouched, so a
    /// writer can send it straight from the caller's buffer (see [`Sealer::stream_headers`]).
    pub fn is_plain_stream(&self) -> bool {
        matches!(self.framing, Framing::Stream) && self.cfb.is_none()
    }

    /// The most payload one chunk carries.
    pub fn max_payload(&self) -> usize {
        match &self.framing {
            Framing::Raw => MAX_CHUNK,
            Framing::Stream => MAX_CHUNK - 2,
            Framing::Auth(p) => {
                let pad = if self.size.padding { MAX_PADDING } else { 0 };
                MAX_CHUNK - self.size.len() - p.overhead() - pad
            }
        }
    }

    /// Output room one chunk of `len` payload bytes may need (padding included).
    fn room(&self, len: usize) -> usize {
        match &self.framing {
            Framing::Raw => len,
            Framing::Stream => 2 + len,
            Framing::Auth(p) => {
                let pad = if self.size.padding { MAX_PADDING } else { 0 };
                self.size.len() + len + p.overhead() + pad
            }
        }
    }

    /// Seals as much of `data` as fits into `out`, as whole chunks of at most
    /// [`Self::max_payload`] bytes; returns (payload bytes taken, bytes written). Legacy FNV
    /// checksums of up to four chunks are computed together (independent chains run in parallel).
    pub fn seal_all_to(&mut self, data: &[u8], out: &mut [u8]) -> (usize, usize) {
        let max = self.max_payload();
        let (mut taken, mut written) = (0, 0);
        let fnv = matches!(self.framing, Framing::Auth(Payload::Fnv));
        while taken < data.len() {
            let rest = &data[taken..];
            // Up to four chunks (only legacy uses more than one at a time).
            let mut lens = [0usize; 4];
            let mut k = 0;
            let mut off = 0;
            let mut room = 0;
            while k < if fnv { 4 } else { 1 } && off < rest.len() {
                let n = (rest.len() - off).min(max);
                if written + room + self.room(n) > out.len() {
                    break;
                }
                lens[k] = n;
                room += self.room(n);
                off += n;
                k += 1;
            }
            if k == 0 {
                break;
            }
            let mut sums = [None; 4];
            if fnv {
                let c = |i: usize| {
                    let s: usize = lens[..i].iter().sum();
                    &rest[s..s + lens[i]]
                };
                if k == 4 {
                    let v = fnv1a32_many([c(0), c(1), c(2), c(3)]);
                    sums = v.map(Some);
                } else if k >= 2 {
                    let v = fnv1a32_many([c(0), c(1)]);
                    sums[0] = Some(v[0]);
                    sums[1] = Some(v[1]);
                }
            }
            let mut at = 0;
            for (n, sum) in lens.iter().zip(sums).take(k) {
                written += self.seal_with(&rest[at..at + n], sum, &mut out[written..]);
                at += n;
            }
            taken += at;
        }
        (taken, written)
    }

    /// Appends `data` as chunks of at most [`Self::max_payload`] bytes.
    pub fn seal_all(&mut self, data: &[u8], out: &mut Vec<u8>) {
        let max = self.max_payload().max(1);
        let chunks = data.len().div_ceil(max).max(1);
        let start = out.len();
        out.resize(start + chunks * self.room(max), 0);
        let (_, n) = self.seal_all_to(data, &mut out[start..]);
        out.truncate(start + n);
    }

    /// Appends one chunk carrying `payload` (at most [`Self::max_payload`] bytes) to `out`.
    pub fn seal(&mut self, payload: &[u8], out: &mut Vec<u8>) {
        let start = out.len();
        out.resize(start + self.room(payload.len()), 0);
        let n = self.seal_with(payload, None, &mut out[start..]);
        out.truncate(start + n);
    }

    /// Seals one chunk of `payload` (at most [`Self::max_payload`] bytes) into `out` (at least
    /// [`MAX_CHUNK`] bytes); returns its length.
    pub fn seal_to(&mut self, payload: &[u8], out: &mut [u8]) -> usize {
        self.seal_with(payload, None, out)
    }

    /// Seals one chunk of `payload` into `out` (at least [`Self::room`] bytes); returns its length.
    fn seal_with(&mut self, payload: &[u8], fnv: Option<u32>, out: &mut [u8]) -> usize {
        let len = match &self.framing {
            Framing::Raw => {
                out[..payload.len()].copy_from_slice(payload);
                payload.len()
            }
            Framing::Stream => {
                let mut v = payload.len() as u16;
                if let Some(m) = &mut self.size.mask {
                    v ^= m.next();
                }
                out[..2].copy_from_slice(&v.to_be_bytes());
                out[2..2 + payload.len()].copy_from_slice(payload);
                2 + payload.len()
            }
            Framing::Auth(p) => {
                let pad = self.size.padding_len();
                let overhead = p.overhead();
                let sealed = payload.len() + overhead;
                let hl = write_size(&mut self.size, (sealed + pad) as u16, overhead, out);
                let body = &mut out[hl..hl + sealed];
                match p {
                    Payload::Aead(k) => {
                        let (ct, tag) = body.split_at_mut(payload.len());
                        // Sealing under 64 GiB with a valid key cannot fail.
                        let _ = k.seal_out_of_place_scatter(
                            chunk_nonce(self.count, &self.iv),
                            Aad::empty(),
                            payload,
                            ct,
                            &[],
                            tag,
                        );
                    }
                    Payload::NoOp => body.copy_from_slice(payload),
                    Payload::Fnv => {
                        let sum = fnv.unwrap_or_else(|| fnv1a32(payload));
                        body[..4].copy_from_slice(&sum.to_be_bytes());
                        body[4..].copy_from_slice(payload);
                    }
                }
                self.count = self.count.wrapping_add(1);
                if pad > 0 {
                    let tail = &mut out[hl + sealed..hl + sealed + pad];
                    match &mut self.pad {
                        Some(pool) => pool.fill(tail),
                        None => tail.fill(0),
                    }
                }
                hl + sealed + pad
            }
        };
        if let Some(c) = &mut self.cfb {
            c.encrypt(&mut out[..len]);
        }
        len
    }

    /// `none` over TCP ([`Self::is_plain_stream`]): frames `data` as chunks without using up
    /// any mask. `hdrs[i]` gets the size field of chunk `i`; returns the number of chunks
    /// (at most `hdrs.len()` and [`MAX_STREAM_HEADERS`]), each [`Self::max_payload`] bytes but
    /// the last. Call [`Self::commit_headers`] with the number actually sent.
    pub fn stream_headers(&mut self, data: &[u8], hdrs: &mut [[u8; 2]]) -> usize {
        let max = self.max_payload();
        let mut k = 0;
        for (i, c) in data
            .chunks(max)
            .take(hdrs.len().min(MAX_STREAM_HEADERS))
            .enumerate()
        {
            let mut v = c.len() as u16;
            if let Some(m) = &mut self.size.mask {
                v ^= m.peek(i);
            }
            hdrs[i] = v.to_be_bytes();
            k = i + 1;
        }
        k
    }

    /// Uses up the masks of `n` chunks framed by [`Self::stream_headers`].
    pub fn commit_headers(&mut self, n: usize) {
        if let Some(m) = &mut self.size.mask {
            m.advance(n);
        }
    }

    /// Appends the end-of-stream marker (nothing without chunk stream).
    pub fn seal_eof(&mut self, out: &mut Vec<u8>) {
        if !matches!(self.framing, Framing::Raw) {
            self.seal(&[], out);
        }
    }

    /// Writes the end-of-stream marker into `out` (at least [`MAX_CHUNK`] bytes); returns its length.
    pub fn seal_eof_to(&mut self, out: &mut [u8]) -> usize {
        if matches!(self.framing, Framing::Raw) {
            return 0;
        }
        self.seal_with(&[], None, out)
    }
}

/// Writes the size field of a chunk whose sealed payload plus padding is `value` bytes; returns
/// the field's length.
fn write_size(size: &mut SizeCodec, value: u16, overhead: usize, out: &mut [u8]) -> usize {
    if let Some((k, iv, count)) = &mut size.auth {
        let (len, tag) = out[..2 + TAG].split_at_mut(2);
        len.copy_from_slice(&value.wrapping_sub(overhead as u16).to_be_bytes());
        if let Ok(t) = k.seal_in_place_separate_tag(chunk_nonce(*count, iv), Aad::empty(), len) {
            tag.copy_from_slice(t.as_ref());
        }
        *count = count.wrapping_add(1);
        return 2 + TAG;
    }
    let mut v = value;
    if let Some(m) = &mut size.mask {
        v ^= m.next();
    }
    out[..2].copy_from_slice(&v.to_be_bytes());
    2
}

/// What [`Opener::open`] found at the front of the buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Opened {
    /// The buffer must hold at least this many bytes (from its start) to go on.
    NeedMore(usize),
    /// A chunk: its plaintext is `buf[start..end]`; `consumed` bytes of input are used up.
    Data {
        start: usize,
        end: usize,
        consumed: usize,
    },
    /// The end-of-stream marker.
    Eof,
}

/// What [`Opener::open_into`] did with the chunk at the front of the buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum OpenedInto {
    /// The buffer must hold at least this many bytes (from its start) to go on.
    NeedMore(usize),
    /// `len` plaintext bytes went to the front of the destination; `consumed` bytes of input
    /// are used up.
    Copied { len: usize, consumed: usize },
    /// The chunk was opened in place: its plaintext is `buf[start..end]`.
    InPlace {
        start: usize,
        end: usize,
        consumed: usize,
    },
    /// The end-of-stream marker.
    Eof,
}

/// Reads one direction's chunks.
pub struct Opener {
    framing: Framing,
    size: SizeCodec,
    iv: [u8; 16],
    count: u16,
    cfb: Option<CfbDec>,
    /// Size and padding of a chunk whose size field was decoded (masks already drawn).
    pending: Option<(usize, usize)>,
    /// No chunk decoded yet.
    first: bool,
    /// Read an empty first chunk as "no data" rather than the end (see [`Opener::tolerate_empty_first`]).
    empty_first_is_data: bool,
}

impl Opener {
    pub fn new(p: &BodyParams, cfb: Option<CfbDec>) -> Result<Opener, BodyError> {
        let (framing, size) = parts(p)?;
        Ok(Opener {
            framing,
            size,
            iv: p.iv,
            count: 0,
            cfb: cfb.filter(|_| p.security == Security::Legacy),
            pending: None,
            first: true,
            empty_first_is_data: false,
        })
    }

    /// Xray's client, when the first payload does not arrive within its 100 ms wait, writes an
    /// empty chunk (its timeout reader returns an empty buffer) and then the data: an empty
    /// *first* chunk is therefore read as no data. A client that really sends nothing is
    /// ended when it closes the connection.
    pub fn tolerate_empty_first(&mut self) {
        self.empty_first_is_data = true;
    }

    /// True when the body is passed through untouched.
    pub fn is_passthrough(&self) -> bool {
        matches!(self.framing, Framing::Raw) && self.cfb.is_none()
    }

    /// Continues a CFB stream that began in the response header (legacy header, legacy security).
    pub fn set_cfb(&mut self, cfb: CfbDec) {
        self.cfb = Some(cfb);
    }

    /// Called once on every byte read from the wire, in order (decrypts the legacy CFB stream).
    pub fn on_read(&mut self, fresh: &mut [u8]) {
        if let Some(c) = &mut self.cfb {
            c.decrypt(fresh);
        }
    }

    /// Decodes the chunk at the front of `buf` (which went through [`Self::on_read`]).
    pub fn open(&mut self, buf: &mut [u8]) -> Result<Opened, BodyError> {
        Ok(match self.open_into(buf, &mut [])? {
            OpenedInto::NeedMore(n) => Opened::NeedMore(n),
            OpenedInto::Eof => Opened::Eof,
            OpenedInto::InPlace {
                start,
                end,
                consumed,
            } => Opened::Data {
                start,
                end,
                consumed,
            },
            // Never with an empty destination.
            OpenedInto::Copied { consumed, .. } => Opened::Data {
                start: 0,
                end: 0,
                consumed,
            },
        })
    }

    /// Like [`Self::open`], but a chunk whose plaintext fits into a non-empty `dst` is
    /// decrypted (or copied) straight into it ([`OpenedInto::Copied`]); a bigger one is
    /// opened in place. Without chunk stream, as much as fits is copied.
    pub fn open_into(&mut self, buf: &mut [u8], dst: &mut [u8]) -> Result<OpenedInto, BodyError> {
        let hl = self.size.len();
        match &self.framing {
            Framing::Raw => {
                if buf.is_empty() {
                    return Ok(OpenedInto::NeedMore(1));
                }
                if !dst.is_empty() {
                    let n = buf.len().min(dst.len());
                    dst[..n].copy_from_slice(&buf[..n]);
                    return Ok(OpenedInto::Copied {
                        len: n,
                        consumed: n,
                    });
                }
                Ok(OpenedInto::InPlace {
                    start: 0,
                    end: buf.len(),
                    consumed: buf.len(),
                })
            }
            Framing::Stream => {
                let size = match self.pending {
                    Some((s, _)) => s,
                    None => {
                        if buf.len() < 2 {
                            return Ok(OpenedInto::NeedMore(2));
                        }
                        let mut v = u16::from_be_bytes([buf[0], buf[1]]);
                        if let Some(m) = &mut self.size.mask {
                            v ^= m.next();
                        }
                        if v == 0 {
                            if self.first && self.empty_first_is_data {
                                self.first = false;
                                return Ok(OpenedInto::InPlace {
                                    start: 2,
                                    end: 2,
                                    consumed: 2,
                                });
                            }
                            return Ok(OpenedInto::Eof);
                        }
                        self.pending = Some((v as usize, 0));
                        v as usize
                    }
                };
                if buf.len() < 2 + size {
                    return Ok(OpenedInto::NeedMore(2 + size));
                }
                self.pending = None;
                self.first = false;
                if !dst.is_empty() && size <= dst.len() {
                    dst[..size].copy_from_slice(&buf[2..2 + size]);
                    return Ok(OpenedInto::Copied {
                        len: size,
                        consumed: 2 + size,
                    });
                }
                Ok(OpenedInto::InPlace {
                    start: 2,
                    end: 2 + size,
                    consumed: 2 + size,
                })
            }
            Framing::Auth(p) => {
                let overhead = p.overhead();
                let (size, pad) = match self.pending {
                    Some(v) => v,
                    None => {
                        if buf.len() < hl {
                            return Ok(OpenedInto::NeedMore(hl));
                        }
                        let pad = self.size.padding_len();
                        let size = read_size(&mut self.size, &buf[..hl], overhead)?;
                        if size < overhead + pad {
                            return Err(BodyError::BadSize(size));
                        }
                        if size == overhead + pad && !(self.first && self.empty_first_is_data) {
                            return Ok(OpenedInto::Eof);
                        }
                        self.pending = Some((size, pad));
                        (size, pad)
                    }
                };
                if buf.len() < hl + size {
                    return Ok(OpenedInto::NeedMore(hl + size));
                }
                self.pending = None;
                let body = &mut buf[hl..hl + size - pad];
                let plain = body.len() - overhead;
                let fits = !dst.is_empty() && plain <= dst.len();
                let (start, end) = match p {
                    Payload::Aead(k) => {
                        let nonce = chunk_nonce(self.count, &self.iv);
                        if fits {
                            let (ct, tag) = body.split_at(plain);
                            k.open_separate_gather(nonce, Aad::empty(), ct, tag, &mut dst[..plain])
                                .map_err(|_| BodyError::Auth)?;
                        } else {
                            k.open_in_place(nonce, Aad::empty(), body)
                                .map_err(|_| BodyError::Auth)?;
                        }
                        (hl, hl + plain)
                    }
                    Payload::NoOp => (hl, hl + plain),
                    Payload::Fnv => {
                        let want = u32::from_be_bytes([body[0], body[1], body[2], body[3]]);
                        if fnv1a32(&body[4..]) != want {
                            return Err(BodyError::Auth);
                        }
                        (hl + 4, hl + 4 + plain)
                    }
                };
                self.count = self.count.wrapping_add(1);
                self.first = false;
                if fits {
                    if !matches!(p, Payload::Aead(_)) {
                        dst[..plain].copy_from_slice(&buf[start..end]);
                    }
                    return Ok(OpenedInto::Copied {
                        len: plain,
                        consumed: hl + size,
                    });
                }
                Ok(OpenedInto::InPlace {
                    start,
                    end,
                    consumed: hl + size,
                })
            }
        }
    }

    /// The most input one chunk can need (for sizing the read buffer).
    pub fn max_chunk(&self) -> usize {
        self.size.len() + 65535 + TAG
    }
}

fn read_size(size: &mut SizeCodec, field: &[u8], overhead: usize) -> Result<usize, BodyError> {
    if let Some((k, iv, count)) = &mut size.auth {
        let mut b = [0u8; 2 + TAG];
        b.copy_from_slice(field);
        let nonce = chunk_nonce(*count, iv);
        *count = count.wrapping_add(1);
        let p = k
            .open_in_place(nonce, Aad::empty(), &mut b)
            .map_err(|_| BodyError::LengthAuth)?;
        return Ok(u16::from_be_bytes([p[0], p[1]]) as usize + overhead);
    }
    let mut v = u16::from_be_bytes([field[0], field[1]]);
    if let Some(m) = &mut size.mask {
        v ^= m.next();
    }
    Ok(v as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::vmess::header::{cfb_dec, cfb_enc};

    fn params(security: Security, opt: u8, packet: bool) -> BodyParams {
        BodyParams {
            security,
            opt,
            packet,
            key: [1; 16],
            iv: [2; 16],
            req_key: [3; 16],
            req_iv: [4; 16],
        }
    }

    fn pair(sec: Security, opt: u8, packet: bool) -> (Sealer, Opener) {
        let p = params(sec, opt, packet);
        let (e, d) = if sec == Security::Legacy {
            (Some(cfb_enc(&p.key, &p.iv)), Some(cfb_dec(&p.key, &p.iv)))
        } else {
            (None, None)
        };
        (Sealer::new(&p, e).unwrap(), Opener::new(&p, d).unwrap())
    }

    /// Seals `msgs` then decodes the wire fed `step` bytes at a time.
    fn round_trip(sec: Security, opt: u8, packet: bool, msgs: &[Vec<u8>], step: usize) {
        let (mut s, mut o) = pair(sec, opt, packet);
        let mut wire = Vec::new();
        for m in msgs {
            for c in m.chunks(s.max_payload()) {
                let before = wire.len();
                s.seal(c, &mut wire);
                assert!(wire.len() - before <= MAX_CHUNK, "chunk too big");
            }
        }
        s.seal_eof(&mut wire);
        let mut got = Vec::new();
        let mut buf: Vec<u8> = Vec::new();
        let mut fed = 0;
        let mut eof = false;
        while !eof {
            match o.open(&mut buf).unwrap() {
                Opened::NeedMore(_) => {
                    if fed == wire.len() {
                        break;
                    }
                    let n = step.min(wire.len() - fed);
                    let at = buf.len();
                    buf.extend_from_slice(&wire[fed..fed + n]);
                    o.on_read(&mut buf[at..]);
                    fed += n;
                }
                Opened::Data {
                    start,
                    end,
                    consumed,
                } => {
                    got.extend_from_slice(&buf[start..end]);
                    buf.drain(..consumed);
                }
                Opened::Eof => eof = true,
            }
        }
        let want: Vec<u8> = msgs.concat();
        assert_eq!(got, want, "{sec:?} opt {opt:#x} packet {packet}");
        let framed = opt & OPT_CHUNK_STREAM != 0;
        assert_eq!(eof, framed, "{sec:?} opt {opt:#x} end marker");
    }

    #[test]
    fn every_security_and_option_combination_round_trips() {
        let msgs = vec![
            vec![7u8; 1],
            (0..20000u32).map(|i| i as u8).collect::<Vec<_>>(),
            vec![9u8; 8110],
        ];
        for sec in [
            Security::Aes128Gcm,
            Security::Chacha20Poly1305,
            Security::None,
            Security::Legacy,
        ] {
            for opt in [0x00u8, 0x01, 0x05, 0x0d, 0x11, 0x15, 0x1d] {
                for packet in [false, true] {
                    for step in [1usize, 7, 100_000] {
                        round_trip(sec, opt, packet, &msgs, step);
                    }
                }
            }
        }
    }

    #[test]
    fn seal_all_matches_chunk_by_chunk() {
        for sec in [Security::Legacy, Security::Aes128Gcm, Security::None] {
            for len in [0usize, 1, 8190, 8191, 3 * 8190 + 5, 9 * 8000] {
                let data: Vec<u8> = (0..len).map(|i| (i * 31) as u8).collect();
                // Padding is random, so compare without it.
                let (mut a, _) = pair(sec, 0x05, false);
                let (mut b, _) = pair(sec, 0x05, false);
                let (mut wa, mut wb) = (Vec::new(), Vec::new());
                a.seal_all(&data, &mut wa);
                for c in data.chunks(b.max_payload()) {
                    b.seal(c, &mut wb);
                }
                assert_eq!(wa, wb, "{sec:?} {len}");
            }
        }
    }

    #[test]
    fn masks_and_padding_follow_the_shake_stream() {
        // With M|P the first chunk's padding is next()%64 and its mask is the next word.
        let (mut s, _) = pair(Security::Aes128Gcm, 0x0d, false);
        let mut m = Mask::new(&[2; 16]);
        let pad = (m.next() % 64) as usize;
        let mask = m.next();
        let mut wire = Vec::new();
        s.seal(b"hello", &mut wire);
        let size = u16::from_be_bytes([wire[0], wire[1]]) ^ mask;
        assert_eq!(size as usize, 5 + 16 + pad);
        assert_eq!(wire.len(), 2 + 5 + 16 + pad);
    }

    #[test]
    fn corrupted_chunk_and_bad_sizes_are_errors() {
        for sec in [
            Security::Aes128Gcm,
            Security::Chacha20Poly1305,
            Security::Legacy,
        ] {
            for opt in [0x01u8, 0x0d, 0x1d] {
                let (mut s, mut o) = pair(sec, opt, false);
                let mut wire = Vec::new();
                s.seal(&[5u8; 300], &mut wire);
                let last = wire.len() - 1 - if opt & 8 != 0 { 64 } else { 0 };
                let i = last.min(100);
                wire[i] ^= 0x40;
                o.on_read(&mut wire);
                let r = o.open(&mut wire);
                assert!(r.is_err(), "{sec:?} {opt:#x}: {r:?}");
            }
        }
        // A plain size smaller than the tag.
        let (_, mut o) = pair(Security::Aes128Gcm, 0x01, false);
        assert_eq!(o.open(&mut [0, 3, 0, 0]), Err(BodyError::BadSize(3)));
        // A huge size just asks for more bytes (bounded by u16).
        let (_, mut o) = pair(Security::Aes128Gcm, 0x01, false);
        assert_eq!(o.open(&mut [0xff, 0xff]), Ok(Opened::NeedMore(2 + 65535)));
        assert!(o.max_chunk() >= 2 + 65535);
    }

    #[test]
    fn empty_first_chunk_is_data_only_when_tolerated() {
        for (sec, opt) in [
            (Security::Aes128Gcm, 0x0d),
            (Security::None, 0x01),
            (Security::Aes128Gcm, 0x1d),
        ] {
            let (mut s, mut o) = pair(sec, opt, false);
            let mut wire = Vec::new();
            s.seal(&[], &mut wire);
            s.seal(b"data", &mut wire);
            s.seal_eof(&mut wire);
            assert_eq!(o.open(&mut wire.clone()), Ok(Opened::Eof));
            let (_, mut o) = pair(sec, opt, false);
            o.tolerate_empty_first();
            let mut got = Vec::new();
            loop {
                match o.open(&mut wire).unwrap() {
                    Opened::Data {
                        start,
                        end,
                        consumed,
                    } => {
                        got.extend_from_slice(&wire[start..end]);
                        wire.drain(..consumed);
                    }
                    Opened::Eof => break,
                    Opened::NeedMore(_) => panic!("truncated"),
                }
            }
            assert_eq!(got, b"data");
        }
    }

    #[test]
    fn fnv_vectors_and_many() {
        assert_eq!(fnv1a32(b""), 0x811c9dc5);
        assert_eq!(fnv1a32(b"a"), 0xe40c292c);
        assert_eq!(fnv1a32(b"foobar"), 0xbf9cf968);
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        let slow = |d: &[u8]| {
            d.iter().fold(0x811c9dc5u32, |h, b| {
                (h ^ *b as u32).wrapping_mul(0x01000193)
            })
        };
        for n in [0, 1, 7, 8, 9, 999, 1000] {
            assert_eq!(fnv1a32(&data[..n]), slow(&data[..n]));
        }
        let got = fnv1a32_many([&data[..], &data[..500], &data[3..], b"foobar"]);
        assert_eq!(
            got,
            [
                slow(&data),
                slow(&data[..500]),
                slow(&data[3..]),
                0xbf9cf968
            ]
        );
    }

    #[test]
    fn mask_peek_and_advance_follow_next() {
        let mut a = Mask::new(&[9; 16]);
        let mut b = Mask::new(&[9; 16]);
        let want: Vec<u16> = (0..1000).map(|_| a.next()).collect();
        let mut got = Vec::new();
        while got.len() < 1000 {
            let k = (got.len() % Mask::LOOKAHEAD).clamp(1, 1000 - got.len());
            let peeked: Vec<u16> = (0..k).map(|i| b.peek(i)).collect();
            b.advance(k);
            got.extend(peeked);
        }
        assert_eq!(got, want);
    }

    #[test]
    fn stream_headers_match_sealed_chunks() {
        let data: Vec<u8> = (0..70_000u32).map(|i| (i * 13) as u8).collect();
        let (mut a, _) = pair(Security::None, 0x05, false);
        let (mut b, mut o) = pair(Security::None, 0x05, false);
        assert!(a.is_plain_stream());
        let mut want = Vec::new();
        a.seal_all(&data, &mut want);
        // Frame, "send" only part of the chunks, commit those, frame the rest again.
        let mut wire = Vec::new();
        let mut off = 0;
        let max = b.max_payload();
        while off < data.len() {
            let mut hdrs = [[0u8; 2]; 5];
            let k = b.stream_headers(&data[off..], &mut hdrs);
            let sent = k.div_ceil(2);
            for (h, c) in hdrs.iter().zip(data[off..].chunks(max)).take(sent) {
                wire.extend_from_slice(h);
                wire.extend_from_slice(c);
                off += c.len();
            }
            b.commit_headers(sent);
        }
        assert_eq!(wire, want);
        // And it decodes.
        let mut got = Vec::new();
        while let Opened::Data {
            start,
            end,
            consumed,
        } = o.open(&mut wire).unwrap()
        {
            got.extend_from_slice(&wire[start..end]);
            wire.drain(..consumed);
        }
        assert_eq!(got, data);
    }

    #[test]
    fn open_into_matches_open_for_every_destination_size() {
        let data: Vec<u8> = (0..30_000u32).map(|i| (i * 7) as u8).collect();
        for sec in [
            Security::Aes128Gcm,
            Security::Chacha20Poly1305,
            Security::None,
            Security::Legacy,
        ] {
            for opt in [0x00u8, 0x01, 0x05, 0x0d, 0x1d] {
                for dst_len in [1usize, 100, 8000, 8192, 65536] {
                    let (mut s, mut o) = pair(sec, opt, false);
                    let mut wire = Vec::new();
                    s.seal_all(&data, &mut wire);
                    s.seal_eof(&mut wire);
                    o.on_read(&mut wire);
                    let mut got = Vec::new();
                    let mut dst = vec![0u8; dst_len];
                    loop {
                        match o.open_into(&mut wire, &mut dst).unwrap() {
                            OpenedInto::Copied { len, consumed } => {
                                assert!(len <= dst_len);
                                got.extend_from_slice(&dst[..len]);
                                wire.drain(..consumed);
                            }
                            OpenedInto::InPlace {
                                start,
                                end,
                                consumed,
                            } => {
                                assert!(end - start > dst_len || start == end);
                                got.extend_from_slice(&wire[start..end]);
                                wire.drain(..consumed);
                            }
                            OpenedInto::Eof | OpenedInto::NeedMore(_) => break,
                        }
                    }
                    assert_eq!(got, data, "{sec:?} {opt:#x} dst {dst_len}");
                }
            }
        }
    }

    #[test]
    fn seal_all_to_stops_at_whole_chunks() {
        let data = vec![3u8; 50_000];
        let (mut s, mut o) = pair(Security::Aes128Gcm, 0x0d, false);
        let mut out = vec![0u8; 20_000];
        let (taken, written) = s.seal_all_to(&data, &mut out);
        assert_eq!(taken % s.max_payload(), 0);
        assert!(taken > 0 && written <= out.len());
        let mut wire = out[..written].to_vec();
        let mut got = 0;
        while let Ok(Opened::Data {
            start,
            end,
            consumed,
        }) = o.open(&mut wire)
        {
            got += end - start;
            wire.drain(..consumed);
        }
        assert_eq!(got, taken);
    }

    #[test]
    fn shake_vector() {
        let mut s = Shake128::default();
        s.update(b"");
        let mut out = [0u8; 4];
        s.finalize_xof().read(&mut out);
        assert_eq!(out, [0x7f, 0x9c, 0x2b, 0xa4]);
    }
}
