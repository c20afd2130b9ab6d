//! Streams and the transports that produce them.
//!
//! Every layer (raw socket, TLS, WebSocket, protocol framing) is a [`Stream`]. Inbounds accept
//! through a [`Listener`] and the acceptor chain of their stream settings ([`chain`]: PROXY
//! protocol -> TLS -> transport); outbounds dial through a [`Dialer`] chain (tcp|unix -> TLS ->
//! transport, or another outbound). A stream says, per direction and without being consumed,
//! when the relay may bypass it and `splice(2)` the socket underneath. Layers that decode frames
//! read ahead through one [`ReadAhead`].

pub mod chain;
pub mod grpc;
pub mod head;
pub mod http_header;
pub mod httpupgrade;
pub mod kcp;
pub mod layer;
pub mod listener;
pub mod outer_tls;
pub mod prefixed;
pub mod proxy_protocol;
pub mod quic;
pub mod read_ahead;
pub mod reality;
pub mod sockopt;
pub mod tcp;
pub mod tls;
pub mod tls13;
pub mod udp;
pub mod udpmask;
pub mod upgrade;
pub mod vlessenc;
pub mod ws;
pub mod xhttp;

use std::any::Any;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpStream, UnixStream};

use crate::common::{Address, Destination};
use crate::session::Session;

pub use chain::StreamSettings;
pub use layer::Layer;
pub use listener::Listener;
pub use prefixed::Prefixed;
pub use read_ahead::ReadAhead;

/// Lets a boxed stream be reached by its concrete type (see `dyn Stream::downcast_mut`).
pub trait AsAny: Any {
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl<T: Any> AsAny for T {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// Writes `buf[*pos..]` to `w`, moving `pos` on as bytes go; ready once all of it went (the
/// loop of every layer that keeps bytes to write across polls).
pub fn poll_write_all<W: AsyncWrite + Unpin + ?Sized>(
    w: &mut W,
    cx: &mut std::task::Context<'_>,
    buf: &[u8],
    pos: &mut usize,
) -> std::task::Poll<io::Result<()>> {
    while *pos < buf.len() {
        let n = std::task::ready!(std::pin::Pin::new(&mut *w).poll_write(cx, &buf[*pos..]))?;
        if n == 0 {
            return std::task::Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
        }
        *pos += n;
    }
    std::task::Poll::Ready(Ok(()))
}

/// A byte stream the relay can move data through.
///
/// A layer that can be bypassed says so per direction, without being consumed: the relay asks
/// after each transfer whether reads (`take_read_direct`) and writes (`write_direct`) may now go
/// straight to the kernel socket underneath (`socket`), and moves only that direction to
/// `splice(2)`. A plain socket is direct from the start; a framing or encrypting layer never
/// is; XTLS Vision becomes direct mid-connection.
pub trait Stream: AsyncRead + AsyncWrite + Send + Unpin + AsAny + 'static {
    /// The kernel socket at the bottom of this stream, if there is one.
    fn socket(&self) -> Option<RawSocket<'_>> {
        None
    }

    /// Reads may now bypass this stream: returns the bytes it (and the layers under it) still
    /// hold for the reader, which come before anything read from [`Stream::socket`]. `None`
    /// while the stream still transforms what it reads. After `Some`, the stream is not read
    /// again.
    fn take_read_direct(&mut self) -> Option<Bytes> {
        None
    }

    /// Writes may bypass this stream once it has been flushed.
    fn write_direct(&self) -> bool {
        false
    }

    /// This stream is the outer TLS of a connection, which XTLS Vision can drop mid-way.
    fn outer_tls(&mut self) -> Option<&mut dyn tls::OuterTls> {
        None
    }
}

impl dyn Stream {
    /// The stream as its concrete type, if it is a `T` (as hyper's `Upgraded::downcast`).
    pub fn downcast_mut<T: Stream>(&mut self) -> Option<&mut T> {
        AsAny::as_any_mut(self).downcast_mut::<T>()
    }

    /// The stream as its concrete type, if it is a `T`.
    pub fn downcast_ref<T: Stream>(&self) -> Option<&T> {
        AsAny::as_any(self).downcast_ref::<T>()
    }
}

/// An owned, type-erased stream.
pub type BoxStream = Box<dyn Stream>;

/// A kernel socket that `splice(2)` can read and write, borrowed from the stream that owns it.
#[derive(Clone, Copy)]
pub enum RawSocket<'a> {
    Tcp(&'a TcpStream),
    Unix(&'a UnixStream),
}

impl RawSocket<'_> {
    pub fn fd(&self) -> RawFd {
        match self {
            RawSocket::Tcp(s) => s.as_raw_fd(),
            RawSocket::Unix(s) => s.as_raw_fd(),
        }
    }

    /// Polls for read readiness (the socket's own waker slot: no future to keep).
    pub fn poll_read_ready(
        &self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        match self {
            RawSocket::Tcp(s) => s.poll_read_ready(cx),
            RawSocket::Unix(s) => s.poll_read_ready(cx),
        }
    }

    /// Polls for write readiness.
    pub fn poll_write_ready(
        &self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        match self {
            RawSocket::Tcp(s) => s.poll_write_ready(cx),
            RawSocket::Unix(s) => s.poll_write_ready(cx),
        }
    }

    /// Runs a non-blocking read-side syscall, clearing readiness on `WouldBlock`.
    pub fn try_read_io<R>(&self, f: impl FnOnce() -> io::Result<R>) -> io::Result<R> {
        match self {
            RawSocket::Tcp(s) => s.try_io(tokio::io::Interest::READABLE, f),
            RawSocket::Unix(s) => s.try_io(tokio::io::Interest::READABLE, f),
        }
    }

    /// Runs a non-blocking write-side syscall, clearing readiness on `WouldBlock`.
    pub fn try_write_io<R>(&self, f: impl FnOnce() -> io::Result<R>) -> io::Result<R> {
        match self {
            RawSocket::Tcp(s) => s.try_io(tokio::io::Interest::WRITABLE, f),
            RawSocket::Unix(s) => s.try_io(tokio::io::Interest::WRITABLE, f),
        }
    }

    /// Reads without waiting (`WouldBlock` when nothing is there; readiness is cleared then).
    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            RawSocket::Tcp(s) => s.try_read(buf),
            RawSocket::Unix(s) => s.try_read(buf),
        }
    }

    /// Reads into `buf` once the socket is readable (its own waker slot: no future to keep);
    /// `Ok(0)` is the peer's end.
    pub fn poll_read_into(
        &self,
        cx: &mut std::task::Context<'_>,
        buf: &mut [u8],
    ) -> std::task::Poll<io::Result<usize>> {
        loop {
            std::task::ready!(self.poll_read_ready(cx))?;
            match self.try_read(buf) {
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) => {}
                r => return std::task::Poll::Ready(r),
            }
        }
    }

    /// Writes without waiting (`WouldBlock` when the socket is full).
    pub fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        match self {
            RawSocket::Tcp(s) => s.try_write(buf),
            RawSocket::Unix(s) => s.try_write(buf),
        }
    }

    /// Whether the other end is a process on this machine: a unix socket, or TCP over loopback.
    pub fn peer_is_local(&self) -> bool {
        match self {
            RawSocket::Unix(_) => true,
            RawSocket::Tcp(s) => s.peer_addr().is_ok_and(|a| match a.ip() {
                std::net::IpAddr::V6(v6) => v6
                    .to_ipv4_mapped()
                    .map_or(v6.is_loopback(), |v4| v4.is_loopback()),
                ip => ip.is_loopback(),
            }),
        }
    }

    /// Shuts down the write half (half-close).
    pub fn shutdown_write(&self) -> io::Result<()> {
        crate::common::sys::shutdown_write(self.fd())
    }
}

impl Stream for TcpStream {
    fn socket(&self) -> Option<RawSocket<'_>> {
        Some(RawSocket::Tcp(self))
    }
    fn take_read_direct(&mut self) -> Option<Bytes> {
        Some(Bytes::new())
    }
    fn write_direct(&self) -> bool {
        true
    }
}

impl Stream for UnixStream {
    fn socket(&self) -> Option<RawSocket<'_>> {
        Some(RawSocket::Unix(self))
    }
    fn take_read_direct(&mut self) -> Option<Bytes> {
        Some(Bytes::new())
    }
    fn write_direct(&self) -> bool {
        true
    }
}

impl Stream for tokio::io::DuplexStream {}

/// A datagram channel to many destinations (freedom's UDP socket, a proxy's UDP relay; on the
/// inbound side, a client's datagrams: `recv_from` gives where they go, `send_to` replies).
#[async_trait]
pub trait PacketConn: Send + Sync + 'static {
    async fn send_to(&self, data: &[u8], dest: &Destination) -> io::Result<()>;
    /// Receives one datagram and the address it came from (inbound side: where it goes).
    async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, Destination)>;
    /// Waits until a datagram may be ready to receive, so that a caller holds no receive buffer
    /// while nothing comes (a UDP NAT session that never gets a reply). A channel that cannot
    /// tell is ready at once.
    async fn ready(&self) -> io::Result<()> {
        Ok(())
    }

    /// The kernel UDP socket under this channel, if there is one (for its buffer sizes).
    fn udp_socket(&self) -> Option<&tokio::net::UdpSocket> {
        None
    }
}

/// Turns a destination into a stream or a packet channel. Every outbound is one, and so is
/// what an outbound reaches its server through (its stream settings' dialer chain, or another
/// outbound named by `proxySettings.tag` / `sockopt.dialerProxy`).
#[async_trait]
pub trait Dialer: Send + Sync + 'static {
    async fn dial_tcp(&self, dest: &Destination) -> io::Result<BoxStream>;
    /// A packet channel; the base dialer connects a UDP socket to `dest`.
    async fn dial_udp(&self, dest: &Destination) -> io::Result<Box<dyn PacketConn>>;

    /// Dials the destination of a routed session. An outbound that decides by where the
    /// session came from (freedom's `finalRules` and its default rule per inbound protocol)
    /// overrides this; every other dialer just dials the destination.
    async fn dial_tcp_for(&self, session: &Session) -> io::Result<BoxStream> {
        self.dial_tcp(&session.dest).await
    }

    /// [`Dialer::dial_udp`] for a routed session (see [`Dialer::dial_tcp_for`]).
    async fn dial_udp_for(&self, session: &Session) -> io::Result<Box<dyn PacketConn>> {
        self.dial_udp(&session.dest).await
    }

    /// Where the DNS module's own queries to `dest` go when routing sends them here: `None`
    /// means through this dialer; the `dns` outbound gives its upstream dialer and address
    /// (it forwards those queries instead of answering them).
    fn dns_forward(&self, _dest: &Destination) -> Option<(Arc<dyn Dialer>, Destination)> {
        None
    }
}

/// The bottom of every dialer chain: a TCP connection with socket options, or a unix socket
/// when the address is a path, `@abstract` or `@@padded`.
pub struct SocketDialer {
    pub opts: tcp::SockOpts,
}

#[async_trait]
impl Dialer for SocketDialer {
    async fn dial_tcp(&self, dest: &Destination) -> io::Result<BoxStream> {
        if let Address::Domain(d) = &dest.addr {
            if let Some(l) = listener::UnixPath::parse(d) {
                return Ok(Box::new(l.connect().await?));
            }
        }
        Ok(Box::new(tcp::dial(dest, &self.opts).await?))
    }

    async fn dial_udp(&self, dest: &Destination) -> io::Result<Box<dyn PacketConn>> {
        let addr = tcp::resolve(dest)
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| io::Error::other("no address"))?;
        let local: std::net::SocketAddr = match self.opts.bind {
            Some(ip) if ip.is_ipv4() == addr.is_ipv4() => (ip, 0).into(),
            _ if addr.is_ipv4() => ([0, 0, 0, 0], 0).into(),
            _ => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
        };
        let s = socket2::Socket::new(
            socket2::Domain::for_address(local),
            socket2::Type::DGRAM,
            Some(socket2::Protocol::UDP),
        )?;
        self.opts
            .apply_any(&socket2::SockRef::from(&s), crate::common::Network::Udp)?;
        s.bind(&local.into())?;
        s.set_nonblocking(true)?;
        let s = tokio::net::UdpSocket::from_std(s.into())?;
        s.connect(addr).await?;
        Ok(Box::new(ConnectedUdp(s, dest.clone())))
    }
}

/// A UDP socket connected to one peer.
pub struct ConnectedUdp(pub tokio::net::UdpSocket, pub Destination);

#[async_trait]
impl PacketConn for ConnectedUdp {
    async fn send_to(&self, data: &[u8], _dest: &Destination) -> io::Result<()> {
        self.0.send(data).await.map(|_| ())
    }
    async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, Destination)> {
        let n = self.0.recv(buf).await?;
        Ok((n, self.1.clone()))
    }
    async fn ready(&self) -> io::Result<()> {
        self.0.readable().await
    }
    fn udp_socket(&self) -> Option<&tokio::net::UdpSocket> {
        Some(&self.0)
    }
}

/// A dialer followed by the stream layers of an outbound's stream settings (TLS, transports).
pub struct ChainDialer {
    pub base: Arc<dyn Dialer>,
    pub layers: Vec<Arc<dyn Layer>>,
}

#[async_trait]
impl Dialer for ChainDialer {
    async fn dial_tcp(&self, dest: &Destination) -> io::Result<BoxStream> {
        let mut s = self.base.dial_tcp(dest).await?;
        for l in &self.layers {
            s = l.connect(s, dest).await?;
        }
        Ok(s)
    }

    async fn dial_udp(&self, dest: &Destination) -> io::Result<Box<dyn PacketConn>> {
        self.base.dial_udp(dest).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_boxed_stream_is_reached_by_type_without_consuming_it() {
        let (a, _b) = tokio::io::duplex(64);
        let inner: BoxStream = Box::new(a);
        let mut s: BoxStream = Box::new(Prefixed::new(Bytes::from_static(b"hi"), inner));
        assert!(s.downcast_ref::<Prefixed>().is_some());
        assert!(s.downcast_mut::<TcpStream>().is_none());
        // A duplex pipe has no socket, so nothing can go direct through it.
        assert!(s.socket().is_none());
        assert!(s.take_read_direct().is_none());
        assert!(!s.write_direct());
        assert!(s.downcast_mut::<Prefixed>().is_some());
    }

    #[tokio::test]
    async fn prefixed_bytes_come_first_when_reads_go_direct() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let mut s: BoxStream = Box::new(Prefixed::new(Bytes::from_static(b"held"), Box::new(c)));
        assert!(s.socket().is_some() && s.write_direct());
        assert_eq!(s.take_read_direct().as_deref(), Some(&b"held"[..]));
        drop(l);
    }
}
