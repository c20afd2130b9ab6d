//! One session of the `dns` outbound: its messages handled in turn, over TCP (the far end of
//! the relay's stream) or UDP (a packet channel).

use std::io;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, OnceCell};
use tokio::task::JoinSet;

use super::rules::Step;
use super::upstream::{frame, spawn, Upstream};
use super::{DnsOutbound, Resolve, DRAIN, MAX_LOOKUPS, REPLY_QUEUE};
use crate::common::dns_message::{self as message, Query, A, AAAA};
use crate::common::{Destination, Network};
use crate::proxy::PacketConn;

/// The answer to a hijacked query, or `None` when the lookup got no verdict.
async fn lookup(dns: &dyn Resolve, q: Query) -> Option<Vec<u8>> {
    match dns.answer(&q.name, q.qtype == A, q.qtype == AAAA).await {
        Some(a) => Some(message::reply(&q, a.rcode, &a.ips, a.ttl)),
        None => {
            tracing::info!("dns out: no answer for {} (type {})", q.name, q.qtype);
            None
        }
    }
}

/// One session's state: the replies queue, the lookups and upstream reader in flight (ended
/// with the session), and the upstream once dialed.
pub(super) struct Session {
    out: Arc<DnsOutbound>,
    replies: mpsc::Sender<Vec<u8>>,
    tasks: Mutex<JoinSet<()>>,
    upstream: OnceCell<Upstream>,
    dest: Destination,
    source: Network,
}

impl Session {
    pub(super) fn new(
        out: Arc<DnsOutbound>,
        dest: Destination,
        source: Network,
    ) -> (Session, mpsc::Receiver<Vec<u8>>) {
        let (tx, rx) = mpsc::channel(REPLY_QUEUE);
        (
            Session {
                out,
                replies: tx,
                tasks: Mutex::new(JoinSet::new()),
                upstream: OnceCell::new(),
                dest,
                source,
            },
            rx,
        )
    }

    /// Handles one message from the client; an error ends the session (the upstream could
    /// not be dialed or written).
    async fn handle(&self, msg: &[u8]) -> io::Result<()> {
        match self.out.decide(msg) {
            Step::Drop => {}
            Step::Reply(r) => {
                if self.replies.try_send(r).is_err() {
                    tracing::info!("dns out: reply queue full, an answer is dropped");
                }
            }
            Step::Lookup(q) => {
                let busy = self.tasks.lock().map(|t| t.len()).unwrap_or(0);
                if busy >= MAX_LOOKUPS {
                    tracing::info!(
                        "dns out: {MAX_LOOKUPS} lookups in flight; query for {} dropped",
                        q.name
                    );
                    return Ok(());
                }
                let (dns, tx) = (self.out.dns.clone(), self.replies.clone());
                spawn(&self.tasks, async move {
                    if let Some(r) = lookup(&*dns, q).await {
                        let _ = tx.send(r).await;
                    }
                });
            }
            Step::Forward => {
                let up = self
                    .upstream
                    .get_or_try_init(|| {
                        let (d, n) = self.out.upstream_dest(&self.dest, self.source);
                        Upstream::dial(
                            self.out.dialer.as_ref(),
                            d,
                            n,
                            self.replies.clone(),
                            &self.tasks,
                        )
                    })
                    .await?;
                up.send(msg).await?;
            }
        }
        Ok(())
    }
}

/// Serves one TCP session on the far end of the stream the relay got.
pub(super) async fn serve_stream(
    session: Session,
    mut replies: mpsc::Receiver<Vec<u8>>,
    s: tokio::io::DuplexStream,
) {
    let (mut r, mut w) = tokio::io::split(s);
    let mut buf = BytesMut::with_capacity(1024);
    let mut client_done = false;
    loop {
        // Complete messages first.
        while buf.len() >= 2 {
            let n = usize::from(u16::from_be_bytes([buf[0], buf[1]]));
            if buf.len() < 2 + n {
                buf.reserve(2 + n - buf.len());
                break;
            }
            buf.advance(2);
            let msg = buf.split_to(n);
            if let Err(e) = session.handle(&msg).await {
                tracing::info!("dns out: {e}");
                return;
            }
        }
        if client_done {
            break;
        }
        tokio::select! {
            n = r.read_buf(&mut buf) => match n {
                Ok(0) | Err(_) => client_done = true,
                Ok(_) => {}
            },
            m = replies.recv() => {
                let Some(m) = m else { return };
                let Ok(f) = frame(&m) else { continue };
                if w.write_all(&f).await.is_err() {
                    return;
                }
            }
        }
    }
    // The client has sent everything: the answers still coming (lookups in flight, the
    // upstream's last replies) are written for at most DRAIN, then the end.
    if let Some(up) = session.upstream.get() {
        up.finish().await;
    }
    let _in_flight = std::mem::take(&mut *session.tasks.lock().unwrap_or_else(|e| e.into_inner()));
    drop(session);
    let deadline = tokio::time::sleep(DRAIN);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            m = replies.recv() => {
                let Some(m) = m else { break };
                let Ok(f) = frame(&m) else { continue };
                if w.write_all(&f).await.is_err() {
                    return;
                }
            }
            _ = &mut deadline => break,
        }
    }
    let _ = w.shutdown().await;
}

/// The packet channel of one UDP session: queries go in with `send_to`, answers and the
/// upstream's replies come out of `recv_from` as from the session's destination.
pub(super) struct DnsPackets {
    pub(super) session: Session,
    pub(super) replies: tokio::sync::Mutex<mpsc::Receiver<Vec<u8>>>,
}

#[async_trait]
impl PacketConn for DnsPackets {
    async fn send_to(&self, data: &[u8], _dest: &Destination) -> io::Result<()> {
        self.session.handle(data).await
    }

    async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, Destination)> {
        let m = self
            .replies
            .lock()
            .await
            .recv()
            .await
            .ok_or_else(|| io::Error::new(io::ErrorKind::BrokenPipe, "dns session ended"))?;
        let n = m.len().min(buf.len());
        buf[..n].copy_from_slice(&m[..n]);
        Ok((n, self.session.dest.clone()))
    }
}
