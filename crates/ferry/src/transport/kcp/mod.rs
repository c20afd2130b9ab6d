//! mKCP, Xray's reliable transport over UDP (`network: "kcp"` / `"mkcp"`), byte for byte as
//! Xray v26.3.27 speaks it: its segments ([`segment`]), its sending and receiving workers
//! ([`send`], [`recv`]) and its connection states and timers ([`conn`]), all sans-IO; then the
//! tasks that run them over a UDP socket under finalmask's UDP masks ([`stream`]): a server
//! that keys sessions by source and conversation as Xray does, with caps Xray lacks
//! ([`listener`]), and a dialer that opens one UDP socket per connection ([`dialer`]).
//! A connection is a [`KcpStream`]; TLS and the protocols run over it as over TCP.

pub mod conn;
pub mod dialer;
pub mod listener;
pub mod recv;
pub mod segment;
pub mod send;
pub mod stream;

pub use dialer::KcpDialer;
pub use listener::KcpListener;
pub use stream::KcpStream;

/// `kcpSettings`, with Xray's defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KcpSettings {
    /// Datagram size the segments fill (payload per data segment: `mtu - 18`).
    pub mtu: u32,
    /// Flush interval, ms.
    pub tti: u32,
    /// MB/s: the segments one flush may send.
    pub uplink: u32,
    /// MB/s: the receive window.
    pub downlink: u32,
    pub congestion: bool,
    /// Bytes of data the sender queues.
    pub write_buffer: u32,
}

impl Default for KcpSettings {
    fn default() -> Self {
        KcpSettings {
            mtu: 1350,
            tti: 50,
            uplink: 5,
            downlink: 20,
            congestion: false,
            write_buffer: 2 * 1024 * 1024,
        }
    }
}

impl KcpSettings {
    /// The smallest `mtu` that leaves a data segment room for a byte (Xray v26.3.27 has no
    /// check and breaks below it; later versions refuse it).
    pub const MIN_MTU: u32 = 21;

    /// Payload bytes per data segment.
    pub fn mss(&self) -> usize {
        self.mtu
            .saturating_sub(segment::DATA_OVERHEAD as u32)
            .max(1) as usize
    }

    /// Xray's `capacity · 2^20 / mtu / (1000 / tti)`, at least 8 (a tti over 1000, where
    /// Xray divides by zero, counts as one flush per second).
    fn per_flush(&self, capacity: u32) -> u32 {
        let flushes = (1000 / self.tti.max(1)).max(1) as u64;
        let n = capacity as u64 * 1024 * 1024 / self.mtu.max(1) as u64 / flushes;
        n.clamp(8, u32::MAX as u64) as u32
    }

    /// Segments one flush may send (before the peer's window and Xray's factor of 20).
    pub fn sending_in_flight(&self) -> u32 {
        self.per_flush(self.uplink)
    }

    /// Segments the receive window holds.
    pub fn receiving_in_flight(&self) -> u32 {
        self.per_flush(self.downlink)
    }

    /// Segments the sender queues.
    pub fn sending_buffer(&self) -> u32 {
        self.write_buffer / self.mtu.max(1)
    }
}

/// A batch of datagrams built by a flush: one buffer, and where each datagram ends.
#[derive(Default, Debug)]
pub struct Out {
    pub buf: Vec<u8>,
    ends: Vec<usize>,
}

impl Out {
    /// Ends the datagram being written.
    pub fn end(&mut self) {
        self.ends.push(self.buf.len());
    }

    pub fn count(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    pub fn clear(&mut self) {
        self.buf.clear();
        self.ends.clear();
    }

    /// Each datagram in order.
    pub fn datagrams(&self) -> impl Iterator<Item = &[u8]> {
        let mut start = 0;
        self.ends.iter().map(move |&e| {
            let d = &self.buf[start..e];
            start = e;
            d
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_follow_xrays_formulas() {
        let d = KcpSettings::default();
        // 5 MB/s, mtu 1350, tti 50: 5·2^20/1350/20.
        assert_eq!(d.sending_in_flight(), 194);
        assert_eq!(d.receiving_in_flight(), 776);
        assert_eq!(d.sending_buffer(), 1553);
        assert_eq!(d.mss(), 1332);
        let slow = KcpSettings {
            uplink: 0,
            tti: 2000,
            ..d
        };
        assert_eq!(slow.sending_in_flight(), 8);
        assert!(slow.receiving_in_flight() > 8);
    }
}
