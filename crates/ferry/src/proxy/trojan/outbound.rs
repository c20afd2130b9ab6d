//! Trojan client: the request leaves with the first payload; UDP as frames that each carry
//! their destination.

use std::io;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::Mutex;

use super::codec;
use super::Server;
use crate::common::{Address, Destination};
use crate::proxy::headed::ClientStream;
use crate::proxy::{OutboundHandler, PacketConn};
use crate::transport::{BoxStream, Dialer};

pub struct Outbound {
    pub server: Server,
    pub dialer: Arc<dyn Dialer>,
}

impl Outbound {
    async fn open(&self, cmd: u8, dest: &Destination) -> io::Result<ClientStream> {
        let inner = self.dialer.dial_tcp(&self.server.dest).await?;
        let mut header = Vec::with_capacity(96);
        codec::encode_request(&self.server.hash, cmd, dest, &mut header);
        Ok(ClientStream::new(inner, header, None))
    }
}

#[async_trait]
impl OutboundHandler for Outbound {
    async fn dial_tcp(&self, dest: &Destination) -> io::Result<BoxStream> {
        Ok(Box::new(self.open(codec::CMD_CONNECT, dest).await?))
    }

    async fn dial_udp(&self, dest: &Destination) -> io::Result<Box<dyn PacketConn>> {
        let s = self.open(codec::CMD_UDP, dest).await?;
        Ok(Box::new(Frames::new(Box::new(s))))
    }
}

/// UDP over one Trojan connection (both sides): each datagram is one frame with its address
/// (the destination going out, the source coming back).
pub struct Frames {
    rd: Mutex<(ReadHalf<BoxStream>, Vec<u8>)>,
    wr: Mutex<WriteHalf<BoxStream>>,
}

impl Frames {
    pub fn new(s: BoxStream) -> Self {
        let (rd, wr) = tokio::io::split(s);
        Frames {
            rd: Mutex::new((rd, Vec::new())),
            wr: Mutex::new(wr),
        }
    }
}

#[async_trait]
impl PacketConn for Frames {
    async fn send_to(&self, data: &[u8], addr: &Destination) -> io::Result<()> {
        if data.len() > codec::MAX_UDP {
            tracing::debug!("trojan udp: {}-byte datagram not sent", data.len());
            return Ok(());
        }
        let addr = match &addr.addr {
            // A reply from an unknown source is written as 0.0.0.0:0, as trojan-gfw does.
            Address::Domain(d) if d.is_empty() => {
                Destination::new(Address::Ip([0, 0, 0, 0].into()), 0)
            }
            _ => addr.clone(),
        };
        let mut frame = Vec::with_capacity(data.len() + 32);
        codec::encode_udp(&addr, data, &mut frame);
        let mut w = self.wr.lock().await;
        w.write_all(&frame).await?;
        w.flush().await
    }

    async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, Destination)> {
        let mut g = self.rd.lock().await;
        let (rd, pending) = &mut *g;
        loop {
            match codec::decode_udp(pending) {
                Ok(Some((addr, range, n))) => {
                    let len = range.len().min(buf.len());
                    buf[..len].copy_from_slice(&pending[range.start..range.start + len]);
                    pending.drain(..n);
                    return Ok((len, addr));
                }
                Ok(None) => {}
                Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
            }
            let mut tmp = [0u8; 16 * 1024];
            let n = rd.read(&mut tmp).await?;
            if n == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            pending.extend_from_slice(&tmp[..n]);
        }
    }
}
