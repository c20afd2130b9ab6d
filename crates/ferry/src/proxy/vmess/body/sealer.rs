//! The writing side of a body: [`Sealer`] frames and seals chunks into an output buffer.

use aws_lc_rs::aead::Aad;

use super::framing::*;
use super::mask::{Mask, PadPool};
use super::params::*;
use crate::proxy::vmess::legacy::{fnv1a32, fnv1a32_many, CfbEnc};

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
