//! UDP over VMess (command 0x02): one datagram per chunk, all to the header's destination.

use std::io;

use async_trait::async_trait;
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::Mutex;

use super::stream::VmessStream;
use crate::common::Destination;
use crate::proxy::PacketConn;

/// Datagrams in a VMess body, all for the header's destination. The client (`outbound`) drops
/// a datagram for any other destination (one connection carries one); the server sends every
/// reply back, whatever address it came from.
pub struct Datagrams {
    rd: Mutex<ReadHalf<VmessStream>>,
    wr: Mutex<WriteHalf<VmessStream>>,
    dest: Destination,
    outbound: bool,
}

impl Datagrams {
    fn split(s: VmessStream, dest: Destination, outbound: bool) -> Datagrams {
        let (rd, wr) = tokio::io::split(s);
        Datagrams {
            rd: Mutex::new(rd),
            wr: Mutex::new(wr),
            dest,
            outbound,
        }
    }

    /// The server's side of a VMess UDP connection.
    pub fn server(s: VmessStream, dest: Destination) -> Datagrams {
        Datagrams::split(s, dest, false)
    }

    /// The client's side of a VMess UDP connection.
    pub fn client(s: VmessStream, dest: Destination) -> Datagrams {
        Datagrams::split(s, dest, true)
    }
}

#[async_trait]
impl PacketConn for Datagrams {
    async fn send_to(&self, data: &[u8], dest: &Destination) -> io::Result<()> {
        if self.outbound && *dest != self.dest {
            tracing::debug!(
                "vmess udp: datagram for {dest} dropped (this connection carries {})",
                self.dest
            );
            return Ok(());
        }
        let mut w = self.wr.lock().await;
        w.write_all(data).await?;
        w.flush().await
    }

    async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, Destination)> {
        let n = self.rd.lock().await.read(buf).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        Ok((n, self.dest.clone()))
    }
}
