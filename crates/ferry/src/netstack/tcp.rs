//! One TCP connection of the stack as a [`Stream`]: reads and writes go straight to the
//! engine's socket buffers (under the stack's lock), and wake the stack's task to send.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use smoltcp::iface::SocketHandle;
use smoltcp::socket::tcp::{self as stcp, State as TcpState};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::{to_socket, Inner};

pub struct TcpFlow {
    inner: Arc<Inner>,
    handle: SocketHandle,
    /// (remote, local) as the engine had them when the flow was made.
    ends: (Option<SocketAddr>, Option<SocketAddr>),
}

fn connecting(s: TcpState) -> bool {
    matches!(
        s,
        TcpState::Listen | TcpState::SynSent | TcpState::SynReceived
    )
}

impl TcpFlow {
    pub(super) fn new(inner: Arc<Inner>, handle: SocketHandle) -> TcpFlow {
        let ends = {
            let mut st = inner.lock();
            let s = st.sockets.get_mut::<stcp::Socket>(handle);
            (
                s.remote_endpoint().map(to_socket),
                s.local_endpoint().map(to_socket),
            )
        };
        TcpFlow::with_ends(inner, handle, ends)
    }

    /// A flow whose ends the caller read (it holds the stack's lock).
    pub(super) fn with_ends(
        inner: Arc<Inner>,
        handle: SocketHandle,
        ends: (Option<SocketAddr>, Option<SocketAddr>),
    ) -> TcpFlow {
        TcpFlow {
            inner,
            handle,
            ends,
        }
    }

    /// The other end (inbound: the client inside the tunnel).
    pub fn remote(&self) -> Option<SocketAddr> {
        self.ends.0
    }

    /// This end (inbound: where the client connected to).
    pub fn local(&self) -> Option<SocketAddr> {
        self.ends.1
    }

    /// Waits for the handshake to finish.
    pub(super) async fn established(&self) -> io::Result<()> {
        std::future::poll_fn(|cx| {
            let mut st = self.inner.lock();
            let s = st.sockets.get_mut::<stcp::Socket>(self.handle);
            match s.state() {
                TcpState::Closed => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::ConnectionRefused,
                    "connection refused in the tunnel",
                ))),
                st if connecting(st) => {
                    s.register_send_waker(cx.waker());
                    Poll::Pending
                }
                _ => Poll::Ready(Ok(())),
            }
        })
        .await
    }
}

impl AsyncRead for TcpFlow {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let mut st = this.inner.lock();
        let s = st.sockets.get_mut::<stcp::Socket>(this.handle);
        if connecting(s.state()) {
            s.register_recv_waker(cx.waker());
            return Poll::Pending;
        }
        match s.recv_slice(buf.initialize_unfilled()) {
            Ok(0) => {
                s.register_recv_waker(cx.waker());
                Poll::Pending
            }
            Ok(n) => {
                buf.advance(n);
                drop(st);
                // The window opened: the engine may owe the peer an update.
                this.inner.wake.notify_one();
                Poll::Ready(Ok(()))
            }
            Err(stcp::RecvError::Finished) => Poll::Ready(Ok(())),
            Err(stcp::RecvError::InvalidState) => {
                if s.state() == TcpState::Closed {
                    // Reset, or closed both ways.
                    Poll::Ready(Ok(()))
                } else {
                    Poll::Ready(Err(io::ErrorKind::NotConnected.into()))
                }
            }
        }
    }
}

impl AsyncWrite for TcpFlow {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let mut st = this.inner.lock();
        let s = st.sockets.get_mut::<stcp::Socket>(this.handle);
        if connecting(s.state()) {
            s.register_send_waker(cx.waker());
            return Poll::Pending;
        }
        if !s.may_send() {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        match s.send_slice(data) {
            Ok(0) => {
                s.register_send_waker(cx.waker());
                Poll::Pending
            }
            Ok(n) => {
                drop(st);
                this.inner.wake.notify_one();
                Poll::Ready(Ok(n))
            }
            Err(_) => Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        {
            let mut st = this.inner.lock();
            st.sockets.get_mut::<stcp::Socket>(this.handle).close();
        }
        this.inner.wake.notify_one();
        Poll::Ready(Ok(()))
    }
}

impl crate::transport::Stream for TcpFlow {}

impl Drop for TcpFlow {
    fn drop(&mut self) {
        {
            let mut st = self.inner.lock();
            let s = st.sockets.get_mut::<stcp::Socket>(self.handle);
            if s.state() == TcpState::Listen || connecting(s.state()) {
                s.abort();
            } else {
                s.close();
            }
            st.dropped.push((self.handle, std::time::Instant::now()));
        }
        self.inner.wake.notify_one();
    }
}
