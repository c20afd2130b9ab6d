//! An mKCP connection running: the shared state a [`KcpStream`] and its driver task hold, the
//! driver (Xray's two updaters: the data updater flushing every `tti` while segments or Acks
//! are pending, the ping updater every 5 s), and the link its datagrams leave by, masked.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::UdpSocket;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::conn::{Kcp, State, Wake};
use super::Out;
use crate::common::Destination;
use crate::transport::udpmask::UdpMasks;
use crate::transport::{PacketConn, Stream};

/// Xray's ping updater interval.
const PING_EVERY: Duration = Duration::from_secs(5);

struct Inner {
    kcp: Kcp,
    reader: Option<Waker>,
    writer: Option<Waker>,
    /// Flush at once (the stream was just closed).
    flush_now: bool,
}

/// What a connection's stream, its driver and its input path share.
pub struct Shared {
    inner: Mutex<Inner>,
    wake: Notify,
    start: Instant,
}

impl Shared {
    pub fn new(kcp: Kcp) -> Arc<Shared> {
        Arc::new(Shared {
            inner: Mutex::new(Inner {
                kcp,
                reader: None,
                writer: None,
                flush_now: false,
            }),
            wake: Notify::new(),
            start: Instant::now(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Milliseconds since the connection began (its segments' clock).
    fn now(&self) -> u32 {
        self.start.elapsed().as_millis() as u32
    }

    fn apply(&self, inner: &mut Inner, w: Wake) {
        if w.reader {
            if let Some(r) = inner.reader.take() {
                r.wake();
            }
        }
        if w.writer {
            if let Some(r) = inner.writer.take() {
                r.wake();
            }
        }
        if w.update {
            self.wake.notify_one();
        }
    }

    /// One unmasked datagram from the peer.
    pub fn input(&self, datagram: &[u8]) {
        let now = self.now();
        let mut inner = self.lock();
        let w = inner.kcp.input(now, datagram);
        self.apply(&mut inner, w);
    }

    /// Ends the connection at once.
    pub fn terminate(&self) {
        let now = self.now();
        let mut inner = self.lock();
        inner.kcp.terminate(now);
        self.apply(
            &mut inner,
            Wake {
                reader: true,
                writer: true,
                update: true,
            },
        );
    }

    pub fn state(&self) -> State {
        self.lock().kcp.state()
    }
}

/// Where a connection's datagrams go.
pub enum Link {
    /// A server's session: the listener's socket, to the client's address.
    Server(Arc<UdpSocket>, SocketAddr),
    /// A client's own channel to the server.
    Client(Arc<dyn PacketConn>, Destination),
}

impl Link {
    async fn send(&self, d: &[u8]) -> io::Result<()> {
        match self {
            Link::Server(s, peer) => s.send_to(d, *peer).await.map(|_| ()),
            Link::Client(c, dest) => c.send_to(d, dest).await,
        }
    }
}

/// Runs a connection until it is terminated, then calls `done`.
pub async fn drive(shared: Arc<Shared>, link: Link, masks: UdpMasks, done: impl FnOnce()) {
    let tti = Duration::from_millis(shared.lock().kcp.tti() as u64);
    let mut out = Out::default();
    let mut wire = Vec::new();
    let mut next_ping = Instant::now() + PING_EVERY;
    // Set while the data updater runs: its next tick.
    let mut ticking: Option<Instant> = None;
    loop {
        let deadline = ticking.map_or(next_ping, |t| t.min(next_ping));
        let woke = tokio::select! {
            _ = shared.wake.notified() => true,
            _ = tokio::time::sleep_until(deadline) => false,
        };
        let at = Instant::now();
        let terminated = {
            let mut inner = shared.lock();
            let mut flush = std::mem::take(&mut inner.flush_now);
            if woke && ticking.is_none() && inner.kcp.update_necessary() {
                flush = true;
                ticking = Some(at + tti);
            } else if let Some(t) = ticking {
                if at >= t {
                    if inner.kcp.update_necessary() {
                        flush = true;
                        ticking = Some(at + tti);
                    } else {
                        ticking = None;
                    }
                }
            }
            if at >= next_ping {
                flush = true;
                next_ping = at + PING_EVERY;
            }
            if flush {
                let now = shared.now();
                let w = inner.kcp.flush(now, &mut out);
                shared.apply(&mut inner, Wake { update: false, ..w });
            }
            inner.kcp.state() == State::Terminated
        };
        for d in out.datagrams() {
            let r = if masks.is_empty() {
                link.send(d).await
            } else {
                masks.encode(d, &mut wire);
                link.send(&wire).await
            };
            if let Err(e) = r {
                tracing::debug!("mKCP send: {e}");
            }
        }
        out.clear();
        if terminated {
            let mut inner = shared.lock();
            shared.apply(
                &mut inner,
                Wake {
                    reader: true,
                    writer: true,
                    update: false,
                },
            );
            break;
        }
    }
    done();
}

/// One mKCP connection as a byte stream. mKCP has no half-close (Xray's has none either):
/// shutting the write side down only flushes, and the connection closes when the stream is
/// dropped.
pub struct KcpStream {
    shared: Arc<Shared>,
}

impl KcpStream {
    pub fn new(shared: Arc<Shared>) -> KcpStream {
        KcpStream { shared }
    }
}

impl AsyncRead for KcpStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let sh = &self.shared;
        let mut inner = sh.lock();
        match inner.kcp.read(buf.initialize_unfilled()) {
            Some(n) => {
                buf.advance(n);
                if n > 0 {
                    // The window moved: the next Ack tells the peer (Xray wakes its updater).
                    sh.wake.notify_one();
                }
                Poll::Ready(Ok(()))
            }
            None => {
                inner.reader = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

impl AsyncWrite for KcpStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let sh = &self.shared;
        let mut inner = sh.lock();
        if inner.kcp.write_closed() {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        match inner.kcp.write(buf) {
            0 => {
                inner.writer = Some(cx.waker().clone());
                Poll::Pending
            }
            n => {
                sh.wake.notify_one();
                Poll::Ready(Ok(n))
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl Drop for KcpStream {
    fn drop(&mut self) {
        let now = self.shared.now();
        let mut inner = self.shared.lock();
        if inner.kcp.close(now) {
            inner.flush_now = true;
            self.shared.wake.notify_one();
        }
    }
}

impl Stream for KcpStream {}
