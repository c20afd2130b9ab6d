//! The upstream of direct queries: dialed once per session, over a stream (messages framed
//! with their length) or packets.

use std::io;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::MAX_MESSAGE;
use crate::common::{Destination, Network};
use crate::proxy::PacketConn;
use crate::transport::{BoxStream, Dialer};

/// Where direct queries go: a stream (messages framed with their length) or packets.
pub(super) enum Upstream {
    Stream(tokio::sync::Mutex<WriteHalf<BoxStream>>),
    Packets(Arc<dyn PacketConn>, Destination),
}

impl Upstream {
    /// Dials `dest` and starts the task that hands its replies to `replies`.
    pub(super) async fn dial(
        dialer: &dyn Dialer,
        dest: Destination,
        network: Network,
        replies: mpsc::Sender<Vec<u8>>,
        tasks: &Mutex<JoinSet<()>>,
    ) -> io::Result<Upstream> {
        tracing::info!("dns out: forwarding to {dest} over {network}");
        match network {
            Network::Tcp => {
                let s = dialer.dial_tcp(&dest).await?;
                let (r, w) = tokio::io::split(s);
                spawn(tasks, read_stream_replies(r, replies));
                Ok(Upstream::Stream(tokio::sync::Mutex::new(w)))
            }
            Network::Udp => {
                let pc: Arc<dyn PacketConn> = Arc::from(dialer.dial_udp(&dest).await?);
                let reader = pc.clone();
                spawn(tasks, async move {
                    let mut buf = vec![0u8; MAX_MESSAGE];
                    while let Ok((n, _)) = reader.recv_from(&mut buf).await {
                        if replies.send(buf[..n].to_vec()).await.is_err() {
                            break;
                        }
                    }
                });
                Ok(Upstream::Packets(pc, dest))
            }
        }
    }

    pub(super) async fn send(&self, msg: &[u8]) -> io::Result<()> {
        match self {
            Upstream::Stream(w) => {
                let mut w = w.lock().await;
                w.write_all(&frame(msg)?).await
            }
            Upstream::Packets(pc, dest) => pc.send_to(msg, dest).await,
        }
    }

    /// Tells a stream upstream that no more queries come.
    pub(super) async fn finish(&self) {
        if let Upstream::Stream(w) = self {
            let _ = w.lock().await.shutdown().await;
        }
    }
}

pub(super) fn spawn(
    tasks: &Mutex<JoinSet<()>>,
    f: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let mut t = tasks.lock().unwrap_or_else(|e| e.into_inner());
    // Finished tasks are reaped here, so the set holds only live ones.
    while t.try_join_next().is_some() {}
    t.spawn(f);
}

pub(super) fn frame(msg: &[u8]) -> io::Result<Vec<u8>> {
    let len = u16::try_from(msg.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "DNS message over 65535 bytes"))?;
    let mut m = Vec::with_capacity(2 + msg.len());
    m.extend_from_slice(&len.to_be_bytes());
    m.extend_from_slice(msg);
    Ok(m)
}

async fn read_stream_replies(mut r: ReadHalf<BoxStream>, replies: mpsc::Sender<Vec<u8>>) {
    let mut l = [0u8; 2];
    loop {
        if r.read_exact(&mut l).await.is_err() {
            return;
        }
        let mut m = vec![0u8; usize::from(u16::from_be_bytes(l))];
        if r.read_exact(&mut m).await.is_err() || replies.send(m).await.is_err() {
            return;
        }
    }
}
