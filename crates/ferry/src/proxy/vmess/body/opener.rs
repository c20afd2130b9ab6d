//! The reading side of a body: [`Opener`] decodes chunks in place at the front of a buffer.

use std::ops::ControlFlow;

use aws_lc_rs::aead::Aad;

use super::framing::*;
use super::params::*;
use crate::proxy::vmess::legacy::{fnv1a32, CfbDec};

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
            Framing::Raw => Ok(open_raw(buf, dst)),
            Framing::Stream => Ok(self.open_stream(buf, dst)),
            Framing::Auth(p) => {
                let overhead = p.overhead();
                let empty_first = self.first && self.empty_first_is_data;
                let next = auth_chunk_size(
                    &mut self.size,
                    &mut self.pending,
                    empty_first,
                    buf,
                    overhead,
                )?;
                let (size, pad) = match next {
                    ControlFlow::Continue(v) => v,
                    ControlFlow::Break(early) => return Ok(early),
                };
                if buf.len() < hl + size {
                    return Ok(OpenedInto::NeedMore(hl + size));
                }
                self.pending = None;
                let body = &mut buf[hl..hl + size - pad];
                let plain = body.len() - overhead;
                let fits = !dst.is_empty() && plain <= dst.len();
                let at = hl + open_payload(p, self.count, &self.iv, body, dst, fits)?;
                let (start, end) = (at, at + plain);
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

    /// `none` over TCP: `[size][data]` chunks, size 0 the end.
    fn open_stream(&mut self, buf: &mut [u8], dst: &mut [u8]) -> OpenedInto {
        let size = match self.pending {
            Some((s, _)) => s,
            None => {
                if buf.len() < 2 {
                    return OpenedInto::NeedMore(2);
                }
                let mut v = u16::from_be_bytes([buf[0], buf[1]]);
                if let Some(m) = &mut self.size.mask {
                    v ^= m.next();
                }
                if v == 0 {
                    if self.first && self.empty_first_is_data {
                        self.first = false;
                        return OpenedInto::InPlace {
                            start: 2,
                            end: 2,
                            consumed: 2,
                        };
                    }
                    return OpenedInto::Eof;
                }
                self.pending = Some((v as usize, 0));
                v as usize
            }
        };
        if buf.len() < 2 + size {
            return OpenedInto::NeedMore(2 + size);
        }
        self.pending = None;
        self.first = false;
        if !dst.is_empty() && size <= dst.len() {
            dst[..size].copy_from_slice(&buf[2..2 + size]);
            return OpenedInto::Copied {
                len: size,
                consumed: 2 + size,
            };
        }
        OpenedInto::InPlace {
            start: 2,
            end: 2 + size,
            consumed: 2 + size,
        }
    }

    /// The most input one chunk can need (for sizing the read buffer).
    pub fn max_chunk(&self) -> usize {
        self.size.len() + 65535 + TAG
    }
}

/// No chunk stream: the bytes as they are, as much as fits into a non-empty `dst`.
fn open_raw(buf: &mut [u8], dst: &mut [u8]) -> OpenedInto {
    if buf.is_empty() {
        return OpenedInto::NeedMore(1);
    }
    if !dst.is_empty() {
        let n = buf.len().min(dst.len());
        dst[..n].copy_from_slice(&buf[..n]);
        return OpenedInto::Copied {
            len: n,
            consumed: n,
        };
    }
    OpenedInto::InPlace {
        start: 0,
        end: buf.len(),
        consumed: buf.len(),
    }
}

/// Size and padding of the authenticated chunk at the front of `buf` (decoded once, then kept
/// in `pending`); `Break` when more bytes are needed or the chunk is the end marker.
fn auth_chunk_size(
    size: &mut SizeCodec,
    pending: &mut Option<(usize, usize)>,
    empty_first: bool,
    buf: &[u8],
    overhead: usize,
) -> Result<ControlFlow<OpenedInto, (usize, usize)>, BodyError> {
    if let Some(v) = *pending {
        return Ok(ControlFlow::Continue(v));
    }
    let hl = size.len();
    if buf.len() < hl {
        return Ok(ControlFlow::Break(OpenedInto::NeedMore(hl)));
    }
    let pad = size.padding_len();
    let n = read_size(size, &buf[..hl], overhead)?;
    if n < overhead + pad {
        return Err(BodyError::BadSize(n));
    }
    if n == overhead + pad && !empty_first {
        return Ok(ControlFlow::Break(OpenedInto::Eof));
    }
    *pending = Some((n, pad));
    Ok(ControlFlow::Continue((n, pad)))
}

/// Authenticates and decrypts a chunk's payload `body` (in place, or into `dst` when it
/// `fits` and the payload is AEAD); returns where its plaintext starts in `body`.
fn open_payload(
    p: &Payload,
    count: u16,
    iv: &[u8; 16],
    body: &mut [u8],
    dst: &mut [u8],
    fits: bool,
) -> Result<usize, BodyError> {
    let plain = body.len() - p.overhead();
    match p {
        Payload::Aead(k) => {
            let nonce = chunk_nonce(count, iv);
            if fits {
                let (ct, tag) = body.split_at(plain);
                k.open_separate_gather(nonce, Aad::empty(), ct, tag, &mut dst[..plain])
                    .map_err(|_| BodyError::Auth)?;
            } else {
                k.open_in_place(nonce, Aad::empty(), body)
                    .map_err(|_| BodyError::Auth)?;
            }
            Ok(0)
        }
        Payload::NoOp => Ok(0),
        Payload::Fnv => {
            let want = u32::from_be_bytes([body[0], body[1], body[2], body[3]]);
            if fnv1a32(&body[4..]) != want {
                return Err(BodyError::Auth);
            }
            Ok(4)
        }
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
