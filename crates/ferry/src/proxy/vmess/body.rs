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

/// SHAKE128(IV) read two bytes at a time (masks and padding lengths).
struct Mask(Shake128Reader);

impl Mask {
    fn new(iv: &[u8; 16]) -> Self {
        let mut s = Shake128::default();
        s.update(iv);
        Mask(s.finalize_xof())
    }
    fn next(&mut self) -> u16 {
        let mut b = [0u8; 2];
        self.0.read(&mut b);
        u16::from_be_bytes(b)
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
}

impl Sealer {
    /// `cfb` is the running CFB stream for legacy security (fresh, or the response header's).
    pub fn new(p: &BodyParams, cfb: Option<CfbEnc>) -> Result<Sealer, BodyError> {
        let (framing, size) = parts(p)?;
        Ok(Sealer {
            framing,
            size,
            iv: p.iv,
            count: 0,
            cfb: if p.security == Security::Legacy {
                cfb
            } else {
                None
            },
        })
    }

    /// True when the body is passed through untouched (`zero`, `none` without chunk stream).
    pub fn is_passthrough(&self) -> bool {
        matches!(self.framing, Framing::Raw) && self.cfb.is_none()
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

    /// Appends `data` as chunks of at most [`Self::max_payload`] bytes. Legacy FNV checksums
    /// of up to four chunks are computed together (independent chains run in parallel).
    pub fn seal_all(&mut self, data: &[u8], out: &mut Vec<u8>) {
        let max = self.max_payload();
        if !matches!(self.framing, Framing::Auth(Payload::Fnv)) {
            for c in data.chunks(max) {
                self.seal(c, out);
            }
            return;
        }
        let mut chunks = data.chunks(max);
        loop {
            let group: Vec<&[u8]> = chunks.by_ref().take(4).collect();
            let sums = match group.as_slice() {
                [] => return,
                [a, b, c, d] => fnv1a32_many([a, b, c, d]).to_vec(),
                [a, b] | [a, b, _] => {
                    let mut v = fnv1a32_many([a, b]).to_vec();
                    if let Some(c) = group.get(2) {
                        v.push(fnv1a32(c));
                    }
                    v
                }
                [a] => vec![fnv1a32(a)],
                _ => group.iter().map(|c| fnv1a32(c)).collect(),
            };
            for (c, sum) in group.iter().zip(sums) {
                self.seal_with(c, Some(sum), out);
            }
        }
    }

    /// Appends one chunk carrying `payload` (at most [`Self::max_payload`] bytes) to `out`.
    pub fn seal(&mut self, payload: &[u8], out: &mut Vec<u8>) {
        self.seal_with(payload, None, out)
    }

    fn seal_with(&mut self, payload: &[u8], fnv: Option<u32>, out: &mut Vec<u8>) {
        let start = out.len();
        match &self.framing {
            Framing::Raw => out.extend_from_slice(payload),
            Framing::Stream => {
                let mut v = payload.len() as u16;
                if let Some(m) = &mut self.size.mask {
                    v ^= m.next();
                }
                out.extend_from_slice(&v.to_be_bytes());
                out.extend_from_slice(payload);
            }
            Framing::Auth(p) => {
                let pad = self.size.padding_len();
                let sealed = payload.len() + p.overhead();
                write_size(&mut self.size, (sealed + pad) as u16, p.overhead(), out);
                match p {
                    Payload::Aead(k) => {
                        let at = out.len();
                        out.resize(at + sealed, 0);
                        let (ct, tag) = out[at..].split_at_mut(payload.len());
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
                    Payload::NoOp => out.extend_from_slice(payload),
                    Payload::Fnv => {
                        let sum = fnv.unwrap_or_else(|| fnv1a32(payload));
                        out.extend_from_slice(&sum.to_be_bytes());
                        out.extend_from_slice(payload);
                    }
                }
                self.count = self.count.wrapping_add(1);
                if pad > 0 {
                    let at = out.len();
                    out.resize(at + pad, 0);
                    let _ = aws_lc_rs::rand::fill(&mut out[at..]);
                }
            }
        }
        if let Some(c) = &mut self.cfb {
            c.encrypt(&mut out[start..]);
        }
    }

    /// Appends the end-of-stream marker (nothing without chunk stream).
    pub fn seal_eof(&mut self, out: &mut Vec<u8>) {
        if !matches!(self.framing, Framing::Raw) {
            self.seal(&[], out);
        }
    }
}

fn write_size(size: &mut SizeCodec, value: u16, overhead: usize, out: &mut Vec<u8>) {
    if let Some((k, iv, count)) = &mut size.auth {
        let mut b = value.wrapping_sub(overhead as u16).to_be_bytes().to_vec();
        let _ = k.seal_in_place_append_tag(chunk_nonce(*count, iv), Aad::empty(), &mut b);
        *count = count.wrapping_add(1);
        out.extend_from_slice(&b);
        return;
    }
    let mut v = value;
    if let Some(m) = &mut size.mask {
        v ^= m.next();
    }
    out.extend_from_slice(&v.to_be_bytes());
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
            cfb: if p.security == Security::Legacy {
                cfb
            } else {
                None
            },
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
        let hl = self.size.len();
        match &self.framing {
            Framing::Raw => {
                if buf.is_empty() {
                    return Ok(Opened::NeedMore(1));
                }
                Ok(Opened::Data {
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
                            return Ok(Opened::NeedMore(2));
                        }
                        let mut v = u16::from_be_bytes([buf[0], buf[1]]);
                        if let Some(m) = &mut self.size.mask {
                            v ^= m.next();
                        }
                        if v == 0 {
                            if self.first && self.empty_first_is_data {
                                self.first = false;
                                return Ok(Opened::Data {
                                    start: 2,
                                    end: 2,
                                    consumed: 2,
                                });
                            }
                            return Ok(Opened::Eof);
                        }
                        self.pending = Some((v as usize, 0));
                        v as usize
                    }
                };
                if buf.len() < 2 + size {
                    return Ok(Opened::NeedMore(2 + size));
                }
                self.pending = None;
                self.first = false;
                Ok(Opened::Data {
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
                            return Ok(Opened::NeedMore(hl));
                        }
                        let pad = self.size.padding_len();
                        let size = read_size(&mut self.size, &buf[..hl], overhead)?;
                        if size < overhead + pad {
                            return Err(BodyError::BadSize(size));
                        }
                        if size == overhead + pad && !(self.first && self.empty_first_is_data) {
                            return Ok(Opened::Eof);
                        }
                        self.pending = Some((size, pad));
                        (size, pad)
                    }
                };
                if buf.len() < hl + size {
                    return Ok(Opened::NeedMore(hl + size));
                }
                self.pending = None;
                let body = &mut buf[hl..hl + size - pad];
                let (start, end) = match p {
                    Payload::Aead(k) => {
                        let nonce = chunk_nonce(self.count, &self.iv);
                        let n = k
                            .open_in_place(nonce, Aad::empty(), body)
                            .map_err(|_| BodyError::Auth)?
                            .len();
                        (hl, hl + n)
                    }
                    Payload::NoOp => (hl, hl + body.len()),
                    Payload::Fnv => {
                        let want = u32::from_be_bytes([body[0], body[1], body[2], body[3]]);
                        if fnv1a32(&body[4..]) != want {
                            return Err(BodyError::Auth);
                        }
                        (hl + 4, hl + body.len())
                    }
                };
                self.count = self.count.wrapping_add(1);
                self.first = false;
                Ok(Opened::Data {
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
    fn shake_vector() {
        let mut s = Shake128::default();
        s.update(b"");
        let mut out = [0u8; 4];
        s.finalize_xof().read(&mut out);
        assert_eq!(out, [0x7f, 0x9c, 0x2b, 0xa4]);
    }
}
