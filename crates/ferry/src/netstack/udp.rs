//! A UDP socket of the stack: one port on its addresses, datagrams to anywhere, replies from
//! anywhere (full cone). It is a [`PacketConn`], as a kernel UDP socket is to freedom.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::{mpsc, Mutex};

use super::Inner;
use crate::common::{Address, Destination};
use crate::transport::PacketConn;

pub struct UdpFlow {
    inner: Arc<Inner>,
    port: u16,
    v4: Option<Ipv4Addr>,
    v6: Option<Ipv6Addr>,
    rx: Mutex<mpsc::Receiver<(SocketAddr, Vec<u8>)>>,
}

impl UdpFlow {
    pub(super) fn new(
        inner: Arc<Inner>,
        port: u16,
        v4: Option<Ipv4Addr>,
        v6: Option<Ipv6Addr>,
        rx: mpsc::Receiver<(SocketAddr, Vec<u8>)>,
    ) -> UdpFlow {
        UdpFlow {
            inner,
            port,
            v4,
            v6,
            rx: Mutex::new(rx),
        }
    }

    /// Sends one datagram to an IP address (the caller resolved names).
    pub async fn send(&self, data: &[u8], to: SocketAddr) -> io::Result<()> {
        let src: IpAddr = match to.ip() {
            IpAddr::V4(_) => self.v4.map(IpAddr::V4),
            IpAddr::V6(_) => self.v6.map(IpAddr::V6),
        }
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::AddrNotAvailable,
                format!("the tunnel has no address of {to}'s family"),
            )
        })?;
        if data.len() + super::packet::udp_overhead(&to) > usize::from(u16::MAX) {
            return Err(io::Error::other("datagram too large"));
        }
        self.inner
            .send_udp(SocketAddr::new(src, self.port), to, data)
            .await;
        Ok(())
    }
}

#[async_trait]
impl PacketConn for UdpFlow {
    async fn send_to(&self, data: &[u8], dest: &Destination) -> io::Result<()> {
        match dest.addr {
            Address::Ip(ip) => self.send(data, SocketAddr::new(ip, dest.port)).await,
            Address::Domain(_) => Err(io::Error::other(
                "a name inside the tunnel must be resolved before it is sent to",
            )),
        }
    }

    async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, Destination)> {
        let (from, data) = self
            .rx
            .lock()
            .await
            .recv()
            .await
            .ok_or_else(|| io::Error::from(io::ErrorKind::BrokenPipe))?;
        let n = data.len().min(buf.len());
        buf[..n].copy_from_slice(&data[..n]);
        Ok((n, Destination::new(Address::Ip(from.ip()), from.port())))
    }
}

impl Drop for UdpFlow {
    fn drop(&mut self) {
        self.inner.lock().udp_ports.remove(&self.port);
    }
}
