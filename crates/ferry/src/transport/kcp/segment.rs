//! mKCP segments as Xray writes them: one or more per datagram, concatenated, each opened by
//! `conv u16 | cmd u8 | opt u8` (big endian throughout). Parsing borrows from the datagram
//! and allocates nothing, whatever its length fields say; it stops at the first segment that
//! does not fit, as Xray's reader does.
//!
//! ```text
//! Data (cmd 1):      ts u32 | sn u32 | una u32 | len u16 | data        (18 bytes before data)
//! Ack (cmd 0):       rcv_wnd u32 | rcv_next u32 | ts u32 | count u8 | sn u32 x count
//! any other cmd:     snd_una u32 | rcv_next u32 | peer_rto u32         (Terminate 2, Ping 3)
//! ```

/// Bytes a data segment adds to its payload.
pub const DATA_OVERHEAD: usize = 18;
/// Bytes of an Ack segment before its numbers.
pub const ACK_OVERHEAD: usize = 17;
/// The most numbers one Ack segment carries (Xray's `ackNumberLimit`).
pub const ACK_LIMIT: usize = 128;
/// Bytes of a command-only segment (Ping, Terminate).
pub const CMD_LEN: usize = 16;

/// `cmd` values.
pub const CMD_ACK: u8 = 0;
pub const CMD_DATA: u8 = 1;
pub const CMD_TERMINATE: u8 = 2;
pub const CMD_PING: u8 = 3;

/// `opt` bit: the sender is closing.
pub const OPT_CLOSE: u8 = 1;

/// One segment read from a datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Segment<'a> {
    Data {
        conv: u16,
        opt: u8,
        ts: u32,
        sn: u32,
        una: u32,
        data: &'a [u8],
    },
    Ack {
        conv: u16,
        opt: u8,
        /// The receiver's next number plus its window: the first number it will not take.
        window: u32,
        next: u32,
        ts: u32,
        /// `count` big-endian numbers.
        numbers: &'a [u8],
    },
    /// Ping, Terminate, or a command Xray does not know (read the same way, as Xray does).
    Cmd {
        conv: u16,
        cmd: u8,
        opt: u8,
        una: u32,
        next: u32,
        rto: u32,
    },
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

impl<'a> Segment<'a> {
    pub fn conv(&self) -> u16 {
        match *self {
            Segment::Data { conv, .. } | Segment::Ack { conv, .. } | Segment::Cmd { conv, .. } => {
                conv
            }
        }
    }

    pub fn opt(&self) -> u8 {
        match *self {
            Segment::Data { opt, .. } | Segment::Ack { opt, .. } | Segment::Cmd { opt, .. } => opt,
        }
    }

    pub fn cmd(&self) -> u8 {
        match *self {
            Segment::Data { .. } => CMD_DATA,
            Segment::Ack { .. } => CMD_ACK,
            Segment::Cmd { cmd, .. } => cmd,
        }
    }

    /// The numbers of an Ack segment.
    pub fn ack_numbers(numbers: &'a [u8]) -> impl Iterator<Item = u32> + 'a {
        numbers.chunks_exact(4).map(be32)
    }

    /// Reads one segment from the front of `buf`: the segment and what follows it, or `None`
    /// when `buf` does not start with a whole one.
    pub fn read(buf: &'a [u8]) -> Option<(Segment<'a>, &'a [u8])> {
        if buf.len() < 4 {
            return None;
        }
        let conv = u16::from_be_bytes([buf[0], buf[1]]);
        let (cmd, opt) = (buf[2], buf[3]);
        let b = &buf[4..];
        match cmd {
            CMD_DATA => {
                if b.len() < 14 {
                    return None;
                }
                let len = u16::from_be_bytes([b[12], b[13]]) as usize;
                let rest = &b[14..];
                if rest.len() < len {
                    return None;
                }
                let seg = Segment::Data {
                    conv,
                    opt,
                    ts: be32(b),
                    sn: be32(&b[4..]),
                    una: be32(&b[8..]),
                    data: &rest[..len],
                };
                Some((seg, &rest[len..]))
            }
            CMD_ACK => {
                if b.len() < 13 {
                    return None;
                }
                let count = b[12] as usize;
                let rest = &b[13..];
                if rest.len() < count * 4 {
                    return None;
                }
                let seg = Segment::Ack {
                    conv,
                    opt,
                    window: be32(b),
                    next: be32(&b[4..]),
                    ts: be32(&b[8..]),
                    numbers: &rest[..count * 4],
                };
                Some((seg, &rest[count * 4..]))
            }
            _ => {
                if b.len() < 12 {
                    return None;
                }
                let seg = Segment::Cmd {
                    conv,
                    cmd,
                    opt,
                    una: be32(b),
                    next: be32(&b[4..]),
                    rto: be32(&b[8..]),
                };
                Some((seg, &b[12..]))
            }
        }
    }
}

/// The segments of one datagram, up to the first that does not parse.
pub fn segments(mut buf: &[u8]) -> impl Iterator<Item = Segment<'_>> {
    std::iter::from_fn(move || {
        let (seg, rest) = Segment::read(buf)?;
        buf = rest;
        Some(seg)
    })
}

/// Appends a data segment.
pub fn put_data(out: &mut Vec<u8>, conv: u16, opt: u8, ts: u32, sn: u32, una: u32, data: &[u8]) {
    out.extend_from_slice(&conv.to_be_bytes());
    out.extend_from_slice(&[CMD_DATA, opt]);
    out.extend_from_slice(&ts.to_be_bytes());
    out.extend_from_slice(&sn.to_be_bytes());
    out.extend_from_slice(&una.to_be_bytes());
    out.extend_from_slice(&(data.len() as u16).to_be_bytes());
    out.extend_from_slice(data);
}

/// Appends an Ack segment.
pub fn put_ack(
    out: &mut Vec<u8>,
    conv: u16,
    opt: u8,
    window: u32,
    next: u32,
    ts: u32,
    sns: &[u32],
) {
    out.extend_from_slice(&conv.to_be_bytes());
    out.extend_from_slice(&[CMD_ACK, opt]);
    out.extend_from_slice(&window.to_be_bytes());
    out.extend_from_slice(&next.to_be_bytes());
    out.extend_from_slice(&ts.to_be_bytes());
    out.push(sns.len() as u8);
    for n in sns {
        out.extend_from_slice(&n.to_be_bytes());
    }
}

/// Appends a command-only segment (Ping, Terminate).
pub fn put_cmd(out: &mut Vec<u8>, conv: u16, cmd: u8, opt: u8, una: u32, next: u32, rto: u32) {
    out.extend_from_slice(&conv.to_be_bytes());
    out.extend_from_slice(&[cmd, opt]);
    out.extend_from_slice(&una.to_be_bytes());
    out.extend_from_slice(&next.to_be_bytes());
    out.extend_from_slice(&rto.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_round_trip_in_xrays_layout() {
        let mut d = Vec::new();
        put_data(&mut d, 0x1234, OPT_CLOSE, 7, 9, 3, b"hello");
        assert_eq!(
            d,
            [
                0x12, 0x34, 1, 1, 0, 0, 0, 7, 0, 0, 0, 9, 0, 0, 0, 3, 0, 5, b'h', b'e', b'l', b'l',
                b'o'
            ]
        );
        put_ack(&mut d, 0x1234, 0, 100, 10, 7, &[10, 12]);
        put_cmd(&mut d, 0x1234, CMD_PING, 0, 4, 5, 100);
        assert_eq!(d.len(), 23 + ACK_OVERHEAD + 8 + CMD_LEN);
        let all: Vec<_> = segments(&d).collect();
        assert_eq!(all.len(), 3);
        assert_eq!(
            all[0],
            Segment::Data {
                conv: 0x1234,
                opt: 1,
                ts: 7,
                sn: 9,
                una: 3,
                data: b"hello"
            }
        );
        match all[1] {
            Segment::Ack {
                window: 100,
                next: 10,
                ts: 7,
                numbers,
                ..
            } => {
                assert_eq!(Segment::ack_numbers(numbers).collect::<Vec<_>>(), [10, 12])
            }
            s => panic!("{s:?}"),
        }
        assert_eq!(
            all[2],
            Segment::Cmd {
                conv: 0x1234,
                cmd: CMD_PING,
                opt: 0,
                una: 4,
                next: 5,
                rto: 100
            }
        );
    }

    #[test]
    fn parsing_stops_at_the_first_short_segment() {
        let mut d = Vec::new();
        put_cmd(&mut d, 1, CMD_TERMINATE, 0, 0, 0, 0);
        // A data segment claiming more bytes than follow.
        d.extend_from_slice(&[
            0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 1,
        ]);
        put_cmd(&mut d, 1, CMD_PING, 0, 0, 0, 0);
        assert_eq!(segments(&d).count(), 1);
        // An Ack claiming 255 numbers, and garbage shorter than any header.
        assert_eq!(
            segments(&[0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 255, 1]).count(),
            0
        );
        assert_eq!(segments(&[0, 1, 9]).count(), 0);
        // Unknown commands read as command-only segments, as Xray reads them.
        let mut u = Vec::new();
        put_cmd(&mut u, 5, 77, 0, 1, 2, 3);
        assert_eq!(segments(&u).next().map(|s| s.cmd()), Some(77));
    }
}
