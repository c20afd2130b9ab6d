//! WebSocket frame headers (RFC 6455 §5.2), sans-IO: parse one from the front of a buffer,
//! encode one, and (un)mask payload bytes in place.

/// Opcodes Ferry handles.
pub const CONTINUATION: u8 = 0x0;
pub const TEXT: u8 = 0x1;
pub const BINARY: u8 = 0x2;
pub const CLOSE: u8 = 0x8;
pub const PING: u8 = 0x9;
pub const PONG: u8 = 0xA;

/// The longest header: 2 bytes, 8 of extended length, 4 of masking key.
pub const MAX_HEADER: usize = 14;

/// The largest payload a control frame may carry.
pub const MAX_CONTROL: usize = 125;

/// A frame header as it came off the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub fin: bool,
    pub opcode: u8,
    pub mask: Option<[u8; 4]>,
    pub len: u64,
    /// Bytes the header took.
    pub size: usize,
}

impl Header {
    pub fn is_control(&self) -> bool {
        self.opcode & 0x8 != 0
    }
}

/// Why bytes are not a frame this endpoint accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("reserved bits set (no extension was negotiated)")]
    Reserved,
    #[error("unknown opcode {0:#x}")]
    Opcode(u8),
    #[error("control frame fragmented or longer than 125 bytes")]
    Control,
    #[error("64-bit length with its top bit set")]
    Length,
    #[error("unmasked frame from a client")]
    Unmasked,
    #[error("masked frame from a server")]
    Masked,
    #[error("continuation frame outside a fragmented message")]
    Continuation,
    #[error("new data frame inside a fragmented message")]
    Interleaved,
}

/// Parses the header at the front of `buf`: `Ok(None)` until it is all there. `from_client`:
/// frames must be masked (a server reads them); otherwise they must not be.
pub fn parse(buf: &[u8], from_client: bool) -> Result<Option<Header>, Error> {
    let (Some(&b0), Some(&b1)) = (buf.first(), buf.get(1)) else {
        return Ok(None);
    };
    if b0 & 0x70 != 0 {
        return Err(Error::Reserved);
    }
    let fin = b0 & 0x80 != 0;
    let opcode = b0 & 0x0f;
    match opcode {
        CONTINUATION | TEXT | BINARY => {}
        CLOSE | PING | PONG => {
            if !fin || (b1 & 0x7f) as usize > MAX_CONTROL {
                return Err(Error::Control);
            }
        }
        other => return Err(Error::Opcode(other)),
    }
    let masked = b1 & 0x80 != 0;
    if masked != from_client {
        return Err(if from_client {
            Error::Unmasked
        } else {
            Error::Masked
        });
    }
    let (len, mut size) = match b1 & 0x7f {
        126 => {
            let Some(b) = buf.get(2..4) else {
                return Ok(None);
            };
            (u16::from_be_bytes([b[0], b[1]]) as u64, 4)
        }
        127 => {
            let Some(b) = buf.get(2..10) else {
                return Ok(None);
            };
            let len = u64::from_be_bytes(crate::common::array(b));
            if len >> 63 != 0 {
                return Err(Error::Length);
            }
            (len, 10)
        }
        n => (n as u64, 2),
    };
    let mask = if masked {
        let Some(k) = buf.get(size..size + 4) else {
            return Ok(None);
        };
        size += 4;
        Some([k[0], k[1], k[2], k[3]])
    } else {
        None
    };
    Ok(Some(Header {
        fin,
        opcode,
        mask,
        len,
        size,
    }))
}

/// Writes a header with FIN set into `out` and returns its length.
pub fn encode(opcode: u8, len: usize, mask: Option<[u8; 4]>, out: &mut [u8; MAX_HEADER]) -> usize {
    out[0] = 0x80 | opcode;
    let m = if mask.is_some() { 0x80 } else { 0 };
    let mut n = if len < 126 {
        out[1] = m | len as u8;
        2
    } else if len <= u16::MAX as usize {
        out[1] = m | 126;
        out[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        4
    } else {
        out[1] = m | 127;
        out[2..10].copy_from_slice(&(len as u64).to_be_bytes());
        10
    };
    if let Some(k) = mask {
        out[n..n + 4].copy_from_slice(&k);
        n += 4;
    }
    n
}

/// XORs `data` with the masking key, `offset` bytes into the payload.
pub fn apply_mask(data: &mut [u8], key: [u8; 4], offset: u64) {
    let mut k = key;
    k.rotate_left((offset % 4) as usize);
    let word = u64::from_ne_bytes([k[0], k[1], k[2], k[3], k[0], k[1], k[2], k[3]]);
    let mut chunks = data.chunks_exact_mut(8);
    for c in &mut chunks {
        let v = u64::from_ne_bytes(crate::common::array(c)) ^ word;
        c.copy_from_slice(&v.to_ne_bytes());
    }
    for (i, b) in chunks.into_remainder().iter_mut().enumerate() {
        *b ^= k[i % 4];
    }
}

/// Tracks message fragmentation: what a data frame may be given the ones before it.
#[derive(Debug, Default, Clone, Copy)]
pub struct Fragments {
    open: bool,
}

impl Fragments {
    /// Checks a data frame's place and records it.
    pub fn data(&mut self, h: &Header) -> Result<(), Error> {
        match (h.opcode, self.open) {
            (CONTINUATION, false) => return Err(Error::Continuation),
            (TEXT | BINARY, true) => return Err(Error::Interleaved),
            _ => {}
        }
        self.open = !h.fin;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc6455_vectors() {
        // §5.7: unmasked text "Hello" and masked text "Hello".
        let h = parse(&[0x81, 0x05, b'H'], false).unwrap().unwrap();
        assert_eq!(
            (h.fin, h.opcode, h.len, h.size, h.mask),
            (true, TEXT, 5, 2, None)
        );
        let mut f = [
            0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58,
        ];
        let h = parse(&f, true).unwrap().unwrap();
        assert_eq!(h.size, 6);
        let key = h.mask.unwrap();
        apply_mask(&mut f[6..], key, 0);
        assert_eq!(&f[6..], b"Hello");
        // 256-byte and 64 KiB binary headers.
        let mut out = [0u8; MAX_HEADER];
        let n = encode(BINARY, 256, None, &mut out);
        assert_eq!(&out[..n], &[0x82, 0x7e, 0x01, 0x00]);
        let n = encode(BINARY, 65536, None, &mut out);
        assert_eq!(&out[..n], &[0x82, 0x7f, 0, 0, 0, 0, 0, 1, 0, 0]);
        let h = parse(&out[..n], false).unwrap().unwrap();
        assert_eq!((h.len, h.size), (65536, 10));
        // Ping "Hello".
        let h = parse(&[0x89, 0x05], false).unwrap().unwrap();
        assert!(h.is_control() && h.opcode == PING);
    }

    #[test]
    fn masking_at_any_offset_matches_bytewise() {
        let key = [1, 2, 3, 4];
        let data: Vec<u8> = (0..100u8).collect();
        let mut whole = data.clone();
        apply_mask(&mut whole, key, 0);
        for i in 0..whole.len() {
            assert_eq!(whole[i], data[i] ^ key[i % 4]);
        }
        for split in 0..data.len() {
            let mut parts = data.clone();
            let (a, b) = parts.split_at_mut(split);
            apply_mask(a, key, 0);
            apply_mask(b, key, split as u64);
            assert_eq!(parts, whole, "split at {split}");
        }
    }

    #[test]
    fn incomplete_headers_wait_and_bad_ones_are_refused() {
        let mut out = [0u8; MAX_HEADER];
        let n = encode(BINARY, 70000, Some([9, 9, 9, 9]), &mut out);
        for cut in 0..n {
            assert_eq!(parse(&out[..cut], true), Ok(None), "cut at {cut}");
        }
        assert_eq!(parse(&out[..n], false), Err(Error::Masked));
        assert_eq!(parse(&[0x82, 0x05], true), Err(Error::Unmasked));
        assert_eq!(parse(&[0xc2, 0x05], false), Err(Error::Reserved));
        assert_eq!(parse(&[0x83, 0x05], false), Err(Error::Opcode(3)));
        assert_eq!(parse(&[0x09, 0x05], false), Err(Error::Control));
        assert_eq!(parse(&[0x89, 0x7e], false), Err(Error::Control));
        let mut big = [0x82, 0x7f, 0x80, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(parse(&big, false), Err(Error::Length));
        big[2] = 0x7f;
        assert!(parse(&big, false).unwrap().is_some());
    }

    #[test]
    fn fragmentation_rules() {
        let h = |fin, opcode| Header {
            fin,
            opcode,
            mask: None,
            len: 1,
            size: 2,
        };
        let mut f = Fragments::default();
        assert_eq!(f.data(&h(true, CONTINUATION)), Err(Error::Continuation));
        f.data(&h(false, BINARY)).unwrap();
        assert_eq!(f.data(&h(true, TEXT)), Err(Error::Interleaved));
        f.data(&h(false, CONTINUATION)).unwrap();
        f.data(&h(true, CONTINUATION)).unwrap();
        f.data(&h(true, TEXT)).unwrap();
    }
}
