//! The mKCP client: each connection its own UDP channel (a socket connected to the server, or
//! another outbound's packet channel under `dialerProxy`), under the masks, with the next
//! conversation number (a process-wide counter from a random start, as Xray's).

use std::io;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;

use super::conn::Kcp;
use super::recv::Budget;
use super::stream::{drive, Link, Shared};
use super::{KcpSettings, KcpStream};
use crate::common::Destination;
use crate::transport::udpmask::UdpMasks;
use crate::transport::{BoxStream, Dialer, PacketConn};

fn next_conv() -> u16 {
    static CONV: OnceLock<AtomicU32> = OnceLock::new();
    let c = CONV.get_or_init(|| AtomicU32::new(crate::common::rand::u64() as u16 as u32));
    c.fetch_add(1, Ordering::Relaxed).wrapping_add(1) as u16
}

/// Dials mKCP connections over `base`'s UDP channels.
pub struct KcpDialer {
    pub base: Arc<dyn Dialer>,
    pub settings: Arc<KcpSettings>,
    pub masks: UdpMasks,
}

#[async_trait]
impl Dialer for KcpDialer {
    async fn dial_tcp(&self, dest: &Destination) -> io::Result<BoxStream> {
        let pc: Arc<dyn PacketConn> = Arc::from(self.base.dial_udp(dest).await?);
        let s = &self.settings;
        // One connection's receive window is its whole budget.
        let budget = Budget::new(s.receiving_in_flight() as usize * s.mss());
        let shared = Shared::new(Kcp::new(next_conv(), s, budget));
        let masks = self.masks.clone();
        let room = (s.mtu as usize + masks.overhead() + 64).max(2048);
        let reader = tokio::spawn(read_loop(pc.clone(), shared.clone(), masks.clone(), room));
        let link = Link::Client(pc, dest.clone());
        tokio::spawn(drive(shared.clone(), link, masks, move || reader.abort()));
        Ok(Box::new(KcpStream::new(shared)))
    }

    /// UDP is not carried by mKCP: it goes as the channel below sends it (Xray dials the
    /// system's UDP for it too).
    async fn dial_udp(&self, dest: &Destination) -> io::Result<Box<dyn PacketConn>> {
        self.base.dial_udp(dest).await
    }
}

async fn read_loop(pc: Arc<dyn PacketConn>, shared: Arc<Shared>, masks: UdpMasks, room: usize) {
    let mut buf = vec![0u8; room];
    loop {
        let n = match pc.recv_from(&mut buf).await {
            Ok((n, _)) => n,
            // An ICMP error for an earlier datagram: the server may be there yet.
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => continue,
            Err(e) => {
                tracing::debug!("mKCP client read: {e}");
                return;
            }
        };
        if let Some(r) = masks.decode(&mut buf[..n]) {
            shared.input(&buf[r]);
        }
    }
}
