//! The loadgen <-> receiver wire format: a 16-byte header saying what the connection is for,
//! then the mode's payload. Upload is V2Ray's benchmark method: the receiver answers every read
//! with the running byte total as a big-endian u64, so the sender knows exactly what arrived.

use anyhow::{bail, Result};

/// First bytes of every lab connection.
pub const MAGIC: [u8; 4] = *b"FLB1";
/// Header length on the wire.
pub const HEADER_LEN: usize = 16;
/// Size of each bulk write.
pub const CHUNK: usize = 128 * 1024;

/// What a connection does after the header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// loadgen sends; receiver acknowledges running totals after every read.
    Upload,
    /// receiver sends `arg` bytes; loadgen acknowledges the final total.
    Download,
    /// receiver answers one byte at once, then waits for EOF (time to first byte, idle holding).
    Hello,
    /// receiver echoes messages of `arg` bytes (request/response round trips).
    Echo,
}

impl Mode {
    fn code(self) -> u8 {
        match self {
            Mode::Upload => 1,
            Mode::Download => 2,
            Mode::Hello => 3,
            Mode::Echo => 4,
        }
    }
    fn from_code(c: u8) -> Option<Mode> {
        Some(match c {
            1 => Mode::Upload,
            2 => Mode::Download,
            3 => Mode::Hello,
            4 => Mode::Echo,
            _ => return None,
        })
    }
}

/// A decoded header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub mode: Mode,
    /// Download: bytes to send; Echo: message size; otherwise 0.
    pub arg: u64,
}

impl Header {
    /// The 16 wire bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[..4].copy_from_slice(&MAGIC);
        b[4] = self.mode.code();
        b[8..].copy_from_slice(&self.arg.to_be_bytes());
        b
    }

    /// Parses exactly 16 bytes.
    pub fn decode(b: &[u8; HEADER_LEN]) -> Result<Header> {
        if b[..4] != MAGIC {
            bail!("not a ferry-lab connection (bad magic {:02x?})", &b[..4]);
        }
        let Some(mode) = Mode::from_code(b[4]) else {
            bail!("unknown mode {}", b[4]);
        };
        let mut arg = [0u8; 8];
        arg.copy_from_slice(&b[8..]);
        Ok(Header {
            mode,
            arg: u64::from_be_bytes(arg),
        })
    }
}

/// Reads big-endian u64 acknowledgements out of a byte stream that may split them anywhere.
#[derive(Default)]
pub struct AckReader {
    partial: [u8; 8],
    have: usize,
    /// The latest complete value.
    pub last: Option<u64>,
}

impl AckReader {
    /// Feeds bytes; returns the newest complete value seen so far.
    pub fn feed(&mut self, mut data: &[u8]) -> Option<u64> {
        while !data.is_empty() {
            let take = (8 - self.have).min(data.len());
            self.partial[self.have..self.have + take].copy_from_slice(&data[..take]);
            self.have += take;
            data = &data[take..];
            if self.have == 8 {
                self.last = Some(u64::from_be_bytes(self.partial));
                self.have = 0;
            }
        }
        self.last
    }
}

/// Deterministic pseudo-random bytes (xorshift64), cheap enough to make once per run.
pub fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

/// Parses sizes like `20M`, `1G`, `512K`, `1.5G`, `1000` (binary multiples: K=1024).
pub fn parse_size(s: &str) -> Result<u64> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_uppercase() {
                'K' => 1u64 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => bail!("bad size {s:?}: unit must be K, M, G or T"),
            };
            (&t[..i], m)
        }
        _ => (t, 1),
    };
    let n: f64 = num.parse().map_err(|_| anyhow::anyhow!("bad size {s:?}"))?;
    if !(n.is_finite() && n >= 0.0) {
        bail!("bad size {s:?}");
    }
    Ok((n * mult as f64).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_roundtrip_and_rejects_garbage() {
        let h = Header {
            mode: Mode::Download,
            arg: 123_456_789,
        };
        assert_eq!(Header::decode(&h.encode()).unwrap(), h);
        let mut bad = h.encode();
        bad[0] = b'X';
        assert!(Header::decode(&bad).is_err());
        let mut bad = h.encode();
        bad[4] = 99;
        assert!(Header::decode(&bad).is_err());
    }

    #[test]
    fn acks_split_anywhere() {
        let mut r = AckReader::default();
        let mut bytes = 5u64.to_be_bytes().to_vec();
        bytes.extend_from_slice(&70_000u64.to_be_bytes());
        assert_eq!(r.feed(&bytes[..3]), None);
        assert_eq!(r.feed(&bytes[3..11]), Some(5));
        assert_eq!(r.feed(&bytes[11..]), Some(70_000));
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("20M").unwrap(), 20 << 20);
        assert_eq!(parse_size("1G").unwrap(), 1 << 30);
        assert_eq!(parse_size("1.5k").unwrap(), 1536);
        assert_eq!(parse_size("77").unwrap(), 77);
        assert!(parse_size("5Q").is_err());
        assert!(parse_size("").is_err());
    }
}
