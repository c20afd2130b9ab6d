//! Chunk masking and padding: the SHAKE128 word stream and the random padding pool.

use shake::{ExtendableOutput, Shake128, Shake128Reader, Update, XofReader};

/// Bytes of SHAKE128 output buffered at a time: two rate blocks (168 words).
const MASK_BUF: usize = 2 * 168;

/// SHAKE128(IV) as a stream of big-endian 16-bit words (masks and padding lengths), drawn
/// from the XOF in bulk. Words can be looked at ahead ([`Mask::peek`]) and used up later
/// ([`Mask::advance`]), so a writer can frame chunks before it knows how many the socket takes.
pub(super) struct Mask {
    xof: Shake128Reader,
    buf: [u8; MASK_BUF],
    pos: usize,
    end: usize,
}

impl Mask {
    /// Most words [`Mask::peek`] can look ahead.
    pub(super) const LOOKAHEAD: usize = MASK_BUF / 2;

    pub(super) fn new(iv: &[u8; 16]) -> Self {
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
    pub(super) fn next(&mut self) -> u16 {
        let v = self.peek(0);
        self.pos += 2;
        v
    }

    /// The `i`-th word from now, without using it up (`i` < [`Mask::LOOKAHEAD`]).
    #[inline]
    pub(super) fn peek(&mut self, i: usize) -> u16 {
        self.ensure(i + 1);
        let at = self.pos + 2 * i;
        u16::from_be_bytes([self.buf[at], self.buf[at + 1]])
    }

    /// Uses up `words` words (all of them peeked before).
    #[inline]
    pub(super) fn advance(&mut self, words: usize) {
        self.ensure(words);
        self.pos += 2 * words;
    }
}

/// Random padding bytes, drawn from the system RNG a block at a time.
pub(super) struct PadPool {
    buf: Box<[u8; 1024]>,
    pos: usize,
}

impl PadPool {
    pub(super) fn new() -> Self {
        PadPool {
            buf: Box::new([0; 1024]),
            pos: 1024,
        }
    }

    /// Fills `out` (at most [`super::MAX_PADDING`] bytes) with random bytes.
    pub(super) fn fill(&mut self, out: &mut [u8]) {
        if self.pos + out.len() > self.buf.len() {
            crate::common::rand::fill(&mut self.buf[..]);
            self.pos = 0;
        }
        let n = out.len().min(self.buf.len());
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shake::{ExtendableOutput, Shake128, Update, XofReader};

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
    fn shake_vector() {
        let mut s = Shake128::default();
        s.update(b"");
        let mut out = [0u8; 4];
        s.finalize_xof().read(&mut out);
        assert_eq!(out, [0x7f, 0x9c, 0x2b, 0xa4]);
    }
}
