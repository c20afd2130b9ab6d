//! UDP over VMess (command 0x02): one datagram per chunk, all to the header's destination.

use std::io;
use std::sync::atomic::Ordering;

use async_trait::async_trait;
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::Mutex;

use super::stream::VmessStream;
use crate::app::udp::MAX_DATAGRAM;
use crate::common::Destination;
use crate::proxy::{InboundCtx, PacketConn, Session};

/// Server side: relays datagrams between the VMess body and an outbound packet channel.
pub async fn serve(body: VmessStream, session: Session, ctx: &InboundCtx) -> io::Result<()> {
    let (pc, counters, _tag) = ctx.dispatcher.open_udp(&session).await?;
    let idle = ctx.dispatcher.policy.level(session.level()).conn_idle;
    let idle = if idle.is_zero() {
        std::time::Duration::from_secs(300)
    } else {
        idle
    };
    let (mut rd, mut wr) = tokio::io::split(body);
    let dest = session.dest.clone();
    let mut up = vec![0u8; MAX_DATAGRAM];
    let mut down = vec![0u8; MAX_DATAGRAM];
    loop {
        tokio::select! {
            r = rd.read(&mut up) => {
                let n = r?;
                if n == 0 {
                    return Ok(());
                }
                if let Err(e) = pc.send_to(&up[..n], &dest).await {
                    tracing::debug!("[{}] vmess udp -> {dest}: {e}", session.inbound_tag);
                    continue;
                }
                for c in &counters.up { c.fetch_add(n as u64, Ordering::Relaxed); }
            }
            r = pc.recv_from(&mut down) => {
                let (n, _from) = r?;
                wr.write_all(&down[..n]).await?;
                wr.flush().await?;
                for c in &counters.down { c.fetch_add(n as u64, Ordering::Relaxed); }
            }
            _ = tokio::time::sleep(idle) => return Ok(()),
        }
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
