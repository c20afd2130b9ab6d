//! The `random` appearance: each record's 5-byte header XORed with one keystream per
//! direction, the bodies (already ciphertext) left as they are, so the whole stream looks
//! random. The state follows the records across reads and writes of any size.

use super::kdf::Ctr;

/// One direction's header XOR.
pub struct HeaderXor {
    ctr: Ctr,
    /// Bytes to pass untouched before the next header (a body, or bytes that are no record).
    skip: usize,
    /// The plaintext of a header split across calls.
    header: [u8; 5],
    have: usize,
    /// Outgoing: the header is read before the XOR; incoming: after it.
    outgoing: bool,
}

/// The body length a header announces (Xray's `DecodeHeader`: 0 when it is no TLS 1.3
/// application-data header).
fn body_len(h: &[u8; 5]) -> usize {
    match h[..3] == [23, 3, 3] {
        true => u16::from_be_bytes([h[3], h[4]]) as usize,
        false => 0,
    }
}

impl HeaderXor {
    pub fn new(ctr: Ctr, skip: usize, outgoing: bool) -> HeaderXor {
        HeaderXor {
            ctr,
            skip,
            header: [0; 5],
            have: 0,
            outgoing,
        }
    }

    /// XORs the header bytes in `p`, the next bytes of this direction.
    pub fn apply(&mut self, mut p: &mut [u8]) {
        loop {
            if p.len() <= self.skip {
                self.skip -= p.len();
                return;
            }
            p = &mut p[self.skip..];
            self.skip = 0;
            let need = 5 - self.have;
            let n = need.min(p.len());
            if self.outgoing {
                self.header[self.have..self.have + n].copy_from_slice(&p[..n]);
                self.ctr.xor(&mut p[..n]);
            } else {
                self.ctr.xor(&mut p[..n]);
                self.header[self.have..self.have + n].copy_from_slice(&p[..n]);
            }
            self.have += n;
            if self.have < 5 {
                return;
            }
            self.have = 0;
            self.skip = body_len(&self.header);
            p = &mut p[n..];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records() -> Vec<u8> {
        let mut v = Vec::new();
        for len in [17usize, 300, 8208] {
            v.extend_from_slice(&[23, 3, 3]);
            v.extend_from_slice(&(len as u16).to_be_bytes());
            v.extend((0..len).map(|i| i as u8));
        }
        v
    }

    #[test]
    fn headers_only_are_xored_and_undone_whatever_the_pieces() {
        let plain = records();
        let mut wire = plain.clone();
        HeaderXor::new(Ctr::new(b"k", &[1; 16]), 0, true).apply(&mut wire);
        // Bodies pass as they are; the three headers changed.
        assert_ne!(wire[..5], plain[..5]);
        assert_eq!(wire[5..22], plain[5..22]);
        assert_ne!(wire[22..27], plain[22..27]);
        assert_eq!(wire[27..327], plain[27..327]);
        assert_ne!(wire[327..332], plain[327..332]);
        // The reader undoes it across any split, here in pieces of 1, 2, 3, 4... bytes.
        let mut rx = HeaderXor::new(Ctr::new(b"k", &[1; 16]), 0, false);
        let mut got = wire.clone();
        let (mut at, mut step) = (0, 1);
        while at < got.len() {
            let end = (at + step).min(got.len());
            rx.apply(&mut got[at..end]);
            at = end;
            step += 1;
        }
        assert_eq!(got, plain);
    }

    #[test]
    fn skipped_bytes_and_other_keys_stay_apart() {
        let plain = records();
        let mut wire = vec![9u8; 16];
        wire.extend_from_slice(&plain);
        HeaderXor::new(Ctr::new(b"k", &[1; 16]), 16, true).apply(&mut wire);
        assert_eq!(wire[..16], [9u8; 16]);
        let mut other = wire[16..].to_vec();
        HeaderXor::new(Ctr::new(b"other", &[1; 16]), 0, false).apply(&mut other);
        assert_ne!(other[..5], plain[..5]);
    }
}
