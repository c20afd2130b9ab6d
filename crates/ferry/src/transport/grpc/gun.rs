//! The "gun" framing of Xray's gRPC transport, sans-IO: each write is one gRPC message
//! (`00 ‖ len(4, BE) ‖ protobuf`) holding a `Hunk { bytes data = 1 }`; a reader takes the
//! data of every field 1 of every message (a `MultiHunk` repeats it), skips other fields, and
//! follows messages and fields across any cut of the bytes into DATA frames.

use bytes::{BufMut, BytesMut};

/// The largest message accepted (grpc-go's default receive limit is 4 MiB).
pub const MAX_MESSAGE: usize = 4 << 20;

/// Why bytes are not gun messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("compressed gRPC message (none was negotiated)")]
    Compressed,
    #[error("gRPC message of {0} bytes is over the limit")]
    TooLong(usize),
    #[error("malformed protobuf in a gRPC message")]
    Protobuf,
}

/// What the front of the buffer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// This many bytes at the front are payload (take some, then [`Decoder::consume`]).
    Data(usize),
    /// More bytes are needed.
    More,
}

/// Where the reader is.
#[derive(Debug, Default, Clone, Copy)]
pub struct Decoder {
    /// Bytes of the current message not yet parsed.
    msg_left: usize,
    /// Bytes of the current data field not yet taken.
    field_left: usize,
    /// Bytes of an unknown field still to skip.
    skip_left: usize,
}

/// Reads a varint from the front of `b`: `Ok(None)` when it is cut.
fn varint(b: &[u8]) -> Result<Option<(u64, usize)>, Error> {
    let mut v = 0u64;
    for (i, &byte) in b.iter().enumerate().take(10) {
        v |= ((byte & 0x7f) as u64) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(Some((v, i + 1)));
        }
    }
    if b.len() >= 10 {
        return Err(Error::Protobuf);
    }
    Ok(None)
}

impl Decoder {
    /// Whether the bytes so far end at a message boundary (a clean place to end).
    pub fn at_boundary(&self) -> bool {
        self.msg_left == 0
    }

    /// Parses what it can at the front of `buf` (headers and tags are removed from it) and
    /// says whether payload follows.
    pub fn step(&mut self, buf: &mut BytesMut) -> Result<Step, Error> {
        loop {
            if self.field_left > 0 {
                let n = self.field_left.min(buf.len());
                return Ok(if n == 0 { Step::More } else { Step::Data(n) });
            }
            if self.skip_left > 0 {
                let n = self.skip_left.min(buf.len());
                if n == 0 {
                    return Ok(Step::More);
                }
                let _ = buf.split_to(n);
                self.skip_left -= n;
                self.msg_left -= n;
                continue;
            }
            if self.msg_left == 0 {
                if buf.len() < 5 {
                    return Ok(Step::More);
                }
                if buf[0] != 0 {
                    return Err(Error::Compressed);
                }
                let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
                if len > MAX_MESSAGE {
                    return Err(Error::TooLong(len));
                }
                let _ = buf.split_to(5);
                self.msg_left = len;
                continue;
            }
            // A field inside the message.
            let limit = self.msg_left.min(buf.len());
            let Some((tag, t)) = varint(&buf[..limit])? else {
                if limit == self.msg_left {
                    return Err(Error::Protobuf);
                }
                return Ok(Step::More);
            };
            let (field, wire) = (tag >> 3, tag & 7);
            let len = match wire {
                0 => {
                    let Some((_, n)) = varint(&buf[t..limit])? else {
                        if limit == self.msg_left {
                            return Err(Error::Protobuf);
                        }
                        return Ok(Step::More);
                    };
                    let _ = buf.split_to(t + n);
                    self.msg_left -= t + n;
                    continue;
                }
                1 => 8,
                5 => 4,
                2 => {
                    let Some((len, n)) = varint(&buf[t..limit])? else {
                        if limit == self.msg_left {
                            return Err(Error::Protobuf);
                        }
                        return Ok(Step::More);
                    };
                    let _ = buf.split_to(t + n);
                    self.msg_left -= t + n;
                    let len = usize::try_from(len).map_err(|_| Error::Protobuf)?;
                    if len > self.msg_left {
                        return Err(Error::Protobuf);
                    }
                    if field == 1 {
                        self.field_left = len;
                    } else {
                        self.skip_left = len;
                    }
                    continue;
                }
                _ => return Err(Error::Protobuf),
            };
            if field == 0 || t + len > self.msg_left {
                return Err(Error::Protobuf);
            }
            let _ = buf.split_to(t);
            self.msg_left -= t;
            self.skip_left = len;
        }
    }

    /// `n` payload bytes (at most what [`Step::Data`] said) were taken from the front.
    /// Payload bytes of the current data field still to come (0 between fields).
    pub fn payload_left(&self) -> usize {
        self.field_left
    }

    pub fn consume(&mut self, n: usize) {
        self.field_left -= n;
        self.msg_left -= n;
    }
}

/// Frames `data` as one message holding one Hunk.
pub fn encode(data: &[u8], out: &mut BytesMut) {
    let mut v = [0u8; 10];
    let mut n = 0;
    let mut x = data.len() as u64;
    loop {
        let b = (x & 0x7f) as u8;
        x >>= 7;
        if x == 0 {
            v[n] = b;
            n += 1;
            break;
        }
        v[n] = b | 0x80;
        n += 1;
    }
    let msg = 1 + n + data.len();
    out.reserve(5 + msg);
    out.put_u8(0);
    out.put_u32(msg as u32);
    out.put_u8(0x0a);
    out.put_slice(&v[..n]);
    out.put_slice(data);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Everything a decoder yields for `wire` cut into pieces of `step`.
    fn decode(wire: &[u8], step: usize) -> Result<(Vec<u8>, bool), Error> {
        let mut d = Decoder::default();
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for chunk in wire.chunks(step.max(1)) {
            buf.extend_from_slice(chunk);
            while let Step::Data(n) = d.step(&mut buf)? {
                let take = n.min(3);
                out.extend_from_slice(&buf.split_to(take));
                d.consume(take);
            }
        }
        Ok((out, d.at_boundary() && buf.is_empty()))
    }

    #[test]
    fn spec_vectors() {
        let mut b = BytesMut::new();
        encode(b"abc", &mut b);
        assert_eq!(&b[..], &[0, 0, 0, 0, 5, 0x0a, 3, b'a', b'b', b'c']);
        // MultiHunk ["ab", "c"] and an empty Hunk.
        let multi = [
            0u8, 0, 0, 0, 7, 0x0a, 2, b'a', b'b', 0x0a, 1, b'c', 0, 0, 0, 0, 0,
        ];
        for step in 1..multi.len() + 1 {
            assert_eq!(decode(&multi, step), Ok((b"abc".to_vec(), true)));
        }
    }

    #[test]
    fn large_hunks_any_cut_and_unknown_fields_skipped() {
        let data: Vec<u8> = (0..70_000u32).map(|i| (i % 251) as u8).collect();
        let mut wire = BytesMut::new();
        encode(&data, &mut wire);
        // A message with other fields around the data: varint, fixed64, fixed32, bytes.
        let extra = [
            0u8, 0, 0, 0, 22, 0x10, 0x96, 0x01, 0x19, 1, 2, 3, 4, 5, 6, 7, 8, 0x0a, 1, b'Z', 0x12,
            2, b'x', b'y', 0x25, 9, 9, 9, 9,
        ];
        let mut all = wire.to_vec();
        all.extend_from_slice(&extra[..5]);
        let body = &extra[5..];
        let last = all.len() - 1;
        all[last] = body.len() as u8;
        all.extend_from_slice(body);
        let mut want = data.clone();
        want.push(b'Z');
        for step in [1, 2, 7, 4096, 100_000] {
            assert_eq!(decode(&all, step), Ok((want.clone(), true)), "step {step}");
        }
    }

    #[test]
    fn bad_messages() {
        assert_eq!(decode(&[1, 0, 0, 0, 0], 5), Err(Error::Compressed));
        assert_eq!(
            decode(&[0, 0x01, 0, 0, 0], 5),
            Err(Error::TooLong(0x0100_0000))
        );
        // A field longer than its message, a cut varint at the message end, wire type 3.
        assert_eq!(decode(&[0, 0, 0, 0, 2, 0x0a, 5], 7), Err(Error::Protobuf));
        assert_eq!(decode(&[0, 0, 0, 0, 1, 0x0a], 6), Err(Error::Protobuf));
        assert_eq!(decode(&[0, 0, 0, 0, 1, 0x0b], 6), Err(Error::Protobuf));
        // Cut mid-message: no error, but not at a boundary.
        assert_eq!(
            decode(&[0, 0, 0, 0, 5, 0x0a, 3, b'a'], 8),
            Ok((b"a".to_vec(), false))
        );
    }
}
