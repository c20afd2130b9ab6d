//! What both handshakes share: reading exact sizes over a stream (what is read past them goes
//! to the record layer), the relays' XOR chain, and the padded pieces written with gaps.

use std::io;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::kdf::Ctr;
use crate::transport::BoxStream;

/// Reads exact sizes from a stream, keeping what a read brought past them.
pub struct Reader {
    buf: Vec<u8>,
    pos: usize,
}

impl Reader {
    pub fn new() -> Reader {
        Reader {
            buf: Vec::new(),
            pos: 0,
        }
    }

    /// The next `n` bytes, read exactly (nothing past them is taken from the stream, so a
    /// connection closed after a bad handshake leaves the rest unread, as Xray's `ReadFull`:
    /// the kernel then resets it).
    pub async fn take(&mut self, io: &mut BoxStream, n: usize) -> io::Result<Vec<u8>> {
        if self.pos > 0 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        while self.buf.len() < n {
            let have = self.buf.len();
            self.buf.resize(n, 0);
            let got = io.read(&mut self.buf[have..]).await;
            let k = *got.as_ref().unwrap_or(&0);
            self.buf.truncate(have + k);
            got?;
            if k == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("closed after {have} of {n} bytes"),
                ));
            }
        }
        let out = self.buf[..n].to_vec();
        self.pos = n;
        Ok(out)
    }

    /// What was read past the last `take`.
    pub fn rest(mut self) -> Vec<u8> {
        self.buf.drain(..self.pos);
        self.buf
    }
}

/// Writes `flight` in `pieces` (zero-length ones skipped), sleeping `gaps` (ms) after each.
pub async fn write_pieces(
    io: &mut BoxStream,
    flight: &[u8],
    pieces: &[usize],
    gaps: &[u64],
) -> io::Result<()> {
    let mut at = 0;
    for (i, &l) in pieces.iter().enumerate() {
        let end = (at + l).min(flight.len());
        if end > at {
            io.write_all(&flight[at..end]).await?;
            io.flush().await?;
            at = end;
        }
        if let Some(&g) = gaps.get(i) {
            if g > 0 {
                tokio::time::sleep(Duration::from_millis(g)).await;
            }
        }
    }
    if at < flight.len() {
        io.write_all(&flight[at..]).await?;
        io.flush().await?;
    }
    Ok(())
}

/// The keystream that links one relay to the next (`CTR(nfsKey_j, iv)`): it hides the next
/// key's hash, then the first 32 bytes of the next relay.
pub fn link(nfs: &[u8], iv: &[u8; 16]) -> Ctr {
    Ctr::new(nfs, iv)
}

pub fn iv16(b: &[u8]) -> [u8; 16] {
    let mut iv = [0u8; 16];
    iv.copy_from_slice(&b[..16]);
    iv
}

pub fn u16_at(b: &[u8]) -> usize {
    u16::from_be_bytes([b[0], b[1]]) as usize
}
