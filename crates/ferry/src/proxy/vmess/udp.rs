//! UDP over VMess (command 0x02): one datagram per chunk, all to the header's destination.

use std::io;

use async_trait::async_trait;
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::Mutex;

use super::stream::VmessStream;
use crate::common::Destination;
use crate::proxy::PacketConn;

/// Server side: the client's datagrams in a VMess body, all bound for the header's
/// destination; replies go back as chunks whatever address they came from.
pub struct Server {
    rd: Mutex<ReadHalf<VmessStream>>,
    wr: Mutex<WriteHalf<VmessStream>>,
    dest: Destination,
}

impl Server {
    pub fn new(s: VmessStream, dest: Destination) -> Server {
        let (rd, wr) = tokio::io::split(s);
        Server {
            rd: Mutex::new(rd),
            wr: Mutex::new(wr),
            dest,
        }
    }
}

#[async_trait]
impl PacketConn for Server {
    async fn send_to(&self, data: &[u8], _from: &Destination) -> io::Result<()> {
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

/// Client side: a packet channel over one VMess UDP connection.
pub struct Client {
    rd: Mutex<ReadHalf<VmessStream>>,
    wr: Mutex<WriteHalf<VmessStream>>,
    dest: Destination,
}

impl Client {
    pub fn new(s: VmessStream, dest: Destination) -> Client {
        let (rd, wr) = tokio::io::split(s);
        Client {
            rd: Mutex::new(rd),
            wr: Mutex::new(wr),
            dest,
        }
    }
}

#[async_trait]
impl PacketConn for Client {
    async fn send_to(&self, data: &[u8], dest: &Destination) -> io::Result<()> {
        if *dest != self.dest {
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
