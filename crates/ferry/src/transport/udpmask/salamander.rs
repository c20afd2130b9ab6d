//! Salamander (Hysteria 2's obfuscation, finalmask `salamander`): each datagram is an 8-byte
//! random salt and the datagram XORed with BLAKE2b-256(password || salt), repeated. No
//! integrity: a wrong password only makes garbage, which QUIC ignores.

use blake2::digest::consts::U32;
use blake2::{Blake2b, Digest};

use super::UdpMask;

const SALT: usize = 8;

/// A Salamander mask with its password.
pub struct Salamander {
    psk: Vec<u8>,
}

impl std::fmt::Debug for Salamander {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Salamander")
    }
}

impl Salamander {
    /// The smallest password Xray and the official server take.
    pub const MIN_PASSWORD: usize = 4;

    pub fn new(psk: &[u8]) -> Salamander {
        Salamander { psk: psk.to_vec() }
    }

    fn key(&self, salt: &[u8]) -> [u8; 32] {
        let mut h = Blake2b::<U32>::new();
        h.update(&self.psk);
        h.update(salt);
        h.finalize().into()
    }
}

fn xor(data: &mut [u8], key: &[u8; 32]) {
    for (chunk, _) in data.chunks_mut(32).zip(0..) {
        for (b, k) in chunk.iter_mut().zip(key) {
            *b ^= k;
        }
    }
}

impl UdpMask for Salamander {
    fn overhead(&self) -> usize {
        SALT
    }

    fn encode(&self, datagram: &[u8], out: &mut Vec<u8>) {
        let mut salt = [0u8; SALT];
        crate::common::rand::fill(&mut salt);
        let key = self.key(&salt);
        let start = out.len();
        out.extend_from_slice(&salt);
        out.extend_from_slice(datagram);
        xor(&mut out[start + SALT..], &key);
    }

    fn decode(&self, buf: &mut [u8]) -> Option<std::ops::Range<usize>> {
        // As the Go implementations: a datagram of the salt alone (or less) is dropped.
        if buf.len() <= SALT {
            return None;
        }
        let key = self.key(&buf[..SALT]);
        xor(&mut buf[SALT..], &key);
        Some(SALT..buf.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn matches_the_reference_vector() {
        // PSK "obfs-pass", salt 00..07, payload "hello hysteria" (BLAKE2b with a 32-byte
        // digest, not BLAKE2b-512 cut short).
        let s = Salamander::new(b"obfs-pass");
        assert_eq!(
            s.key(&unhex("0001020304050607")).to_vec(),
            unhex("a380ea80f9c736ae1bdc96cb8f139e3adecbf2c2b406167f0104bf5a97430940")
        );
        let mut wire = unhex("0001020304050607cbe586ec96e75ed768a8f3b9e672");
        let r = s.decode(&mut wire).unwrap();
        assert_eq!(&wire[r], b"hello hysteria");
    }

    #[test]
    fn round_trips_long_datagrams_with_fresh_salts() {
        let s = Salamander::new(b"pw12");
        let data: Vec<u8> = (0..1400u32).map(|i| i as u8).collect();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        s.encode(&data, &mut a);
        s.encode(&data, &mut b);
        assert_ne!(a, b, "a fresh salt per datagram");
        let r = s.decode(&mut a).unwrap();
        assert_eq!(&a[r], &data[..]);
        assert!(s.decode(&mut [1u8; 8]).is_none());
        assert!(s.decode(&mut []).is_none());
    }
}
