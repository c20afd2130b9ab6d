//! Streams and the transports that produce them.
//!
//! Every layer (raw socket, TLS, WebSocket, protocol framing) is a [`Stream`]. A stream can be
//! *peeled*: asked to give up its wrapper when it adds nothing any more (no framing, nothing
//! buffered), so the relay can reach the raw socket and use `splice(2)`.

pub mod prefixed;
pub mod tcp;

use std::io;
use std::os::fd::{AsRawFd, RawFd};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpStream, UnixStream};

pub use prefixed::Prefixed;

/// A byte stream the relay can move data through.
pub trait Stream: AsyncRead + AsyncWrite + Send + Unpin + 'static {
    /// Gives up this layer if it no longer transforms bytes. The default keeps the stream whole.
    fn peel(self: Box<Self>) -> Peel {
        Peel::Stream(self.into_box())
    }

    /// Upcast helper used by the default `peel`.
    fn into_box(self: Box<Self>) -> BoxStream;
}

/// An owned, type-erased stream.
pub type BoxStream = Box<dyn Stream>;

/// The result of peeling a stream.
pub enum Peel {
    /// A raw socket, with bytes already read from it that the reader has not consumed yet
    /// (`read_pending`) and bytes accepted for writing that have not reached it yet (`write_pending`).
    Raw(RawParts),
    /// The stream can't be peeled (it frames or encrypts); copy through it.
    Stream(BoxStream),
}

/// A raw socket and the bytes held above it when it was peeled.
pub struct RawParts {
    pub sock: RawSock,
    pub read_pending: Bytes,
    pub write_pending: Bytes,
}

/// A kernel socket that `splice(2)` can read and write.
pub enum RawSock {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl RawSock {
    pub fn fd(&self) -> RawFd {
        match self {
            RawSock::Tcp(s) => s.as_raw_fd(),
            RawSock::Unix(s) => s.as_raw_fd(),
        }
    }

    /// Turns the raw socket back into a stream (with its pending read bytes in front).
    pub fn into_stream(self, read_pending: Bytes) -> BoxStream {
        let inner: BoxStream = match self {
            RawSock::Tcp(s) => Box::new(s),
            RawSock::Unix(s) => Box::new(s),
        };
        if read_pending.is_empty() {
            inner
        } else {
            Box::new(Prefixed::new(read_pending, inner))
        }
    }

    /// Waits until the socket may be readable (tokio readiness).
    pub async fn readable(&self) -> io::Result<()> {
        match self {
            RawSock::Tcp(s) => s.readable().await,
            RawSock::Unix(s) => s.readable().await,
        }
    }

    pub async fn writable(&self) -> io::Result<()> {
        match self {
            RawSock::Tcp(s) => s.writable().await,
            RawSock::Unix(s) => s.writable().await,
        }
    }

    /// Polls for read readiness (the socket's own waker slot: no future to keep).
    pub fn poll_read_ready(
        &self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        match self {
            RawSock::Tcp(s) => s.poll_read_ready(cx),
            RawSock::Unix(s) => s.poll_read_ready(cx),
        }
    }

    /// Polls for write readiness.
    pub fn poll_write_ready(
        &self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        match self {
            RawSock::Tcp(s) => s.poll_write_ready(cx),
            RawSock::Unix(s) => s.poll_write_ready(cx),
        }
    }

    /// Runs a non-blocking read-side syscall, clearing readiness on `WouldBlock`.
    pub fn try_read_io<R>(&self, f: impl FnOnce() -> io::Result<R>) -> io::Result<R> {
        match self {
            RawSock::Tcp(s) => s.try_io(tokio::io::Interest::READABLE, f),
            RawSock::Unix(s) => s.try_io(tokio::io::Interest::READABLE, f),
        }
    }

    /// Runs a non-blocking write-side syscall, clearing readiness on `WouldBlock`.
    pub fn try_write_io<R>(&self, f: impl FnOnce() -> io::Result<R>) -> io::Result<R> {
        match self {
            RawSock::Tcp(s) => s.try_io(tokio::io::Interest::WRITABLE, f),
            RawSock::Unix(s) => s.try_io(tokio::io::Interest::WRITABLE, f),
        }
    }

    /// Writes without waiting (`WouldBlock` when the socket is full).
    pub fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        match self {
            RawSock::Tcp(s) => s.try_write(buf),
            RawSock::Unix(s) => s.try_write(buf),
        }
    }

    /// Shuts down the write half (half-close).
    pub fn shutdown_write(&self) -> io::Result<()> {
        crate::common::sys::shutdown_write(self.fd())
    }
}

impl Stream for TcpStream {
    fn peel(self: Box<Self>) -> Peel {
        Peel::Raw(RawParts {
            sock: RawSock::Tcp(*self),
            read_pending: Bytes::new(),
            write_pending: Bytes::new(),
        })
    }
    fn into_box(self: Box<Self>) -> BoxStream {
        self
    }
}

impl Stream for UnixStream {
    fn peel(self: Box<Self>) -> Peel {
        Peel::Raw(RawParts {
            sock: RawSock::Unix(*self),
            read_pending: Bytes::new(),
            write_pending: Bytes::new(),
        })
    }
    fn into_box(self: Box<Self>) -> BoxStream {
        self
    }
}

impl Stream for tokio::io::DuplexStream {
    fn into_box(self: Box<Self>) -> BoxStream {
        self
    }
}

/// How an outbound reaches its server: the stream settings below the protocol (tcp now;
/// tls, websocket and chains through another outbound compose here).
#[async_trait::async_trait]
pub trait Dialer: Send + Sync + 'static {
    async fn dial(&self, dest: &crate::common::Destination) -> io::Result<BoxStream>;

    /// A UDP socket for protocols that send datagrams to their server (Shadowsocks UDP).
    async fn bind_udp(
        &self,
        dest: &crate::common::Destination,
    ) -> io::Result<tokio::net::UdpSocket> {
        let addr = tcp::resolve(dest)
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| io::Error::other("no address"))?;
        let local: std::net::SocketAddr = if addr.is_ipv4() {
            ([0, 0, 0, 0], 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let s = tokio::net::UdpSocket::bind(local).await?;
        s.connect(addr).await?;
        Ok(s)
    }
}

/// Plain TCP with socket options.
pub struct TcpDialer {
    pub opts: tcp::SockOpts,
}

#[async_trait::async_trait]
impl Dialer for TcpDialer {
    async fn dial(&self, dest: &crate::common::Destination) -> io::Result<BoxStream> {
        Ok(Box::new(tcp::dial(dest, &self.opts).await?))
    }
}
