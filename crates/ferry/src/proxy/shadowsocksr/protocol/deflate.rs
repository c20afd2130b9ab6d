//! verify_deflate (shadowsocksr.md §4.2): zlib-compressed chunks, no authentication.

use super::super::util::{Error, Result};

#[derive(Default)]
pub struct Deflate {
    recv: Vec<u8>,
}

const DEFLATE_UNIT: usize = 32700;

impl Deflate {
    pub(super) fn encode(&mut self, data: &[u8], out: &mut Vec<u8>) {
        use std::io::Write;
        for chunk in data.chunks(DEFLATE_UNIT) {
            let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
            let _ = z.write_all(chunk);
            let c = z.finish().unwrap_or_default();
            let body = c.get(2..).unwrap_or_default();
            out.extend_from_slice(&((body.len() + 2) as u16).to_be_bytes());
            out.extend_from_slice(body);
        }
    }

    pub(super) fn decode(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<()> {
        use std::io::Read;
        self.recv.extend_from_slice(data);
        while self.recv.len() > 2 {
            let total = u16::from_be_bytes([self.recv[0], self.recv[1]]) as usize;
            if !(6..32768).contains(&total) {
                return Err(Error::Frame);
            }
            if self.recv.len() < total {
                break;
            }
            let mut z = Vec::with_capacity(total);
            z.extend_from_slice(&[0x78, 0x9c]);
            z.extend_from_slice(&self.recv[2..total]);
            // A packet carries at most one 32,700-byte chunk: more is a deflate bomb.
            let mut d = flate2::read::ZlibDecoder::new(&z[..]).take(DEFLATE_UNIT as u64 + 1);
            let mut plain = Vec::new();
            d.read_to_end(&mut plain).map_err(|_| Error::Frame)?;
            if plain.len() > DEFLATE_UNIT {
                return Err(Error::Frame);
            }
            out.extend_from_slice(&plain);
            self.recv.drain(..total);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::testutil::hex;

    #[test]
    fn deflate_vector_and_round_trip() {
        let mut d = Deflate::default();
        let mut out = Vec::new();
        d.encode(b"hello", &mut out);
        assert_eq!(out, hex("000dcb48cdc9c90700062c0215"));
        let big: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let mut wire = Vec::new();
        d.encode(&big, &mut wire);
        let mut back = Vec::new();
        for c in wire.chunks(999) {
            d.decode(c, &mut back).unwrap();
        }
        assert_eq!(back, big);
        // A packet inflating past one chunk (a deflate bomb) is refused.
        use std::io::Write;
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        z.write_all(&[0u8; 40_000]).unwrap();
        let c = z.finish().unwrap();
        let mut bomb = ((c.len()) as u16).to_be_bytes().to_vec();
        bomb.extend_from_slice(&c[2..]);
        assert_eq!(
            Deflate::default().decode(&bomb, &mut Vec::new()),
            Err(Error::Frame)
        );
    }
}
