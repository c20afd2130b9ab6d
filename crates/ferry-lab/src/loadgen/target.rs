//! Where loadgen connects and how: directly or through SOCKS5, in the clear or inside inner
//! TLS; one connection of either kind.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};

use anyhow::{bail, Context, Result};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

use crate::inner_tls::InnerTls;
use crate::wire::{Header, Mode};

/// Where loadgen connects.
#[derive(Clone, Debug)]
pub struct Target {
    /// The address to connect to: the receiver, a dokodemo-style entry, or a SOCKS5 proxy.
    pub connect: SocketAddr,
    /// With a SOCKS5 proxy at `connect`: the receiver address to CONNECT to.
    pub socks_dest: Option<SocketAddr>,
    /// Speak TLS to the receiver through the chain (None: the lab protocol in the clear).
    pub inner_tls: Option<InnerTls>,
}

impl Target {
    /// The receiver (or a dokodemo-style entry) at `connect`, no SOCKS5, no inner TLS.
    pub fn plain(connect: SocketAddr) -> Target {
        Target {
            connect,
            socks_dest: None,
            inner_tls: None,
        }
    }

    /// A connection through the chain, confirmed end to end by the receiver's hello byte.
    pub async fn hello(&self) -> Result<Conn> {
        let mut s = self.open().await?;
        s.write_all(
            &Header {
                mode: Mode::Hello,
                arg: 0,
            }
            .encode(),
        )
        .await?;
        s.flush().await?;
        let mut b = [0u8; 1];
        s.read_exact(&mut b).await?;
        Ok(s)
    }

    /// Opens a connection that reaches the receiver (after the SOCKS5 handshake, if any, and
    /// the inner TLS handshake, if any).
    pub async fn open(&self) -> Result<Conn> {
        let mut s = TcpStream::connect(self.connect)
            .await
            .with_context(|| format!("connecting to {}", self.connect))?;
        let _ = s.set_nodelay(true);
        if let Some(dest) = self.socks_dest {
            socks5_connect(&mut s, dest)
                .await
                .with_context(|| format!("SOCKS5 CONNECT {dest} via {}", self.connect))?;
        }
        match &self.inner_tls {
            None => Ok(Conn::Plain(s)),
            Some(t) => Ok(Conn::Tls(Box::new(t.connect(s).await?))),
        }
    }
}

/// One loadgen connection: bare TCP, or a TLS session with the receiver over it.
pub enum Conn {
    Plain(TcpStream),
    Tls(Box<crate::inner_tls::ClientStream>),
}

/// The halves of a split [`Conn`].
pub(super) type ReadHalf = Box<dyn AsyncRead + Unpin + Send>;
pub(super) type WriteHalf = Box<dyn AsyncWrite + Unpin + Send>;

impl Conn {
    /// Read and write halves usable from two tasks (TCP: the socket's own halves; TLS: a
    /// shared session).
    pub(super) fn split(self) -> (ReadHalf, WriteHalf) {
        match self {
            Conn::Plain(s) => {
                let (r, w) = s.into_split();
                (Box::new(r), Box::new(w))
            }
            Conn::Tls(t) => {
                let (r, w) = tokio::io::split(*t);
                (Box::new(r), Box::new(w))
            }
        }
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tls(t) => Pin::new(t.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Tls(t) => Pin::new(t.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_flush(cx),
            Conn::Tls(t) => Pin::new(t.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Tls(t) => Pin::new(t.as_mut()).poll_shutdown(cx),
        }
    }
}

/// SOCKS5 no-auth CONNECT handshake (RFC 1928).
pub async fn socks5_connect(s: &mut TcpStream, dest: SocketAddr) -> Result<()> {
    s.write_all(&[5, 1, 0]).await?;
    let mut m = [0u8; 2];
    s.read_exact(&mut m).await?;
    if m != [5, 0] {
        bail!("proxy refused no-auth method: {m:02x?}");
    }
    let mut req = vec![5, 1, 0];
    match dest {
        SocketAddr::V4(a) => {
            req.push(1);
            req.extend_from_slice(&a.ip().octets());
        }
        SocketAddr::V6(a) => {
            req.push(4);
            req.extend_from_slice(&a.ip().octets());
        }
    }
    req.extend_from_slice(&dest.port().to_be_bytes());
    s.write_all(&req).await?;
    let mut head = [0u8; 4];
    s.read_exact(&mut head).await?;
    if head[1] != 0 {
        bail!("proxy answered CONNECT with code {}", head[1]);
    }
    let skip = match head[3] {
        1 => 4 + 2,
        4 => 16 + 2,
        3 => {
            let mut l = [0u8; 1];
            s.read_exact(&mut l).await?;
            l[0] as usize + 2
        }
        t => bail!("bad address type {t} in SOCKS5 reply"),
    };
    let mut rest = vec![0u8; skip];
    s.read_exact(&mut rest).await?;
    Ok(())
}
