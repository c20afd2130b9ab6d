//! finalmask's UDP masks (`streamSettings.finalmask.udp`): transforms of every datagram a UDP
//! transport sends and receives, stacked in a list, below QUIC (Hysteria, XHTTP/3) and mKCP.
//! Each mask is sans-IO: it turns one datagram into its wire form and back. [`UdpMasks`] is
//! the stack; `transport::quic::socket` puts it under a QUIC endpoint.

mod salamander;

use std::sync::Arc;

pub use salamander::Salamander;

/// One mask: a datagram to its wire form and back.
pub trait UdpMask: Send + Sync + std::fmt::Debug + 'static {
    /// Bytes the wire form adds at most (the senders above leave room for it).
    fn overhead(&self) -> usize;
    /// Whether it adds exactly [`UdpMask::overhead`] to every datagram (then a GSO batch of
    /// equal datagrams stays one of equal wire datagrams).
    fn fixed_overhead(&self) -> bool {
        true
    }
    /// Appends the wire form of `datagram` to `out`.
    fn encode(&self, datagram: &[u8], out: &mut Vec<u8>);
    /// Opens a wire datagram in place: the range of `buf` that holds the datagram, or `None`
    /// when it is not this mask's (dropped, silently: a stranger's bytes get no answer).
    fn decode(&self, buf: &mut [u8]) -> Option<std::ops::Range<usize>>;
}

/// The masks of one socket, in the order Xray applies them when sending: the first is the
/// outermost (applied last).
#[derive(Clone, Debug, Default)]
pub struct UdpMasks(pub Vec<Arc<dyn UdpMask>>);

impl UdpMasks {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether every mask adds a fixed number of bytes.
    pub fn fixed_overhead(&self) -> bool {
        self.0.iter().all(|m| m.fixed_overhead())
    }

    /// Bytes all masks add together.
    pub fn overhead(&self) -> usize {
        self.0.iter().map(|m| m.overhead()).sum()
    }

    /// Writes the wire form of `datagram` into `out` (cleared first): the innermost mask first.
    pub fn encode(&self, datagram: &[u8], out: &mut Vec<u8>) {
        out.clear();
        self.append(datagram, out);
    }

    /// Appends the wire form of `datagram` to `out` (one mask writes straight into it).
    pub fn append(&self, datagram: &[u8], out: &mut Vec<u8>) {
        match &self.0[..] {
            [] => out.extend_from_slice(datagram),
            [one] => one.encode(datagram, out),
            [outer @ .., inner] => {
                let mut cur = Vec::new();
                inner.encode(datagram, &mut cur);
                for m in outer.iter().rev() {
                    let mut next = Vec::with_capacity(cur.len() + m.overhead());
                    m.encode(&cur, &mut next);
                    cur = next;
                }
                out.extend_from_slice(&cur);
            }
        }
    }

    /// Opens a wire datagram in place, the outermost mask first: the range holding the
    /// datagram, or `None` when a mask refuses it.
    pub fn decode(&self, buf: &mut [u8]) -> Option<std::ops::Range<usize>> {
        let mut range = 0..buf.len();
        for m in &self.0 {
            let r = m.decode(&mut buf[range.clone()])?;
            range = range.start + r.start..range.start + r.end;
        }
        Some(range)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stacked_masks_round_trip_and_refuse_others() {
        let masks = UdpMasks(vec![
            Arc::new(Salamander::new(b"outer-pass")),
            Arc::new(Salamander::new(b"inner-pass")),
        ]);
        assert_eq!(masks.overhead(), 16);
        let mut wire = Vec::new();
        masks.encode(b"a quic packet", &mut wire);
        assert_eq!(wire.len(), 13 + 16);
        let mut buf = wire.clone();
        let r = masks.decode(&mut buf).unwrap();
        assert_eq!(&buf[r], b"a quic packet");
        // The outer mask alone does not give the datagram back.
        let outer = UdpMasks(vec![Arc::new(Salamander::new(b"outer-pass"))]);
        let mut buf = wire.clone();
        let r = outer.decode(&mut buf).unwrap();
        assert_ne!(&buf[r], b"a quic packet");
        let none = UdpMasks::default();
        none.encode(b"x", &mut wire);
        assert_eq!(wire, b"x");
    }
}
