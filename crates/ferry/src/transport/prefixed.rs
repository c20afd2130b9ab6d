//! A stream with bytes in front: what a protocol read past its header is handed on first.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::{BoxStream, Peel, Stream};

/// Yields `prefix` first, then reads from `inner`; writes go straight to `inner`.
pub struct Prefixed {
    prefix: Bytes,
    inner: BoxStream,
}

impl Prefixed {
    pub fn new(prefix: Bytes, inner: BoxStream) -> Self {
        Prefixed { prefix, inner }
    }
}

impl AsyncRead for Prefixed {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.prefix.is_empty() {
            let n = self.prefix.len().min(buf.remaining());
            buf.put_slice(&self.prefix[..n]);
            self.prefix.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Prefixed {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl Stream for Prefixed {
    fn peel(self: Box<Self>) -> Peel {
        let Prefixed { prefix, inner } = *self;
        match inner.peel() {
            Peel::Raw(mut parts) => {
                if !prefix.is_empty() {
                    let mut joined = Vec::with_capacity(prefix.len() + parts.read_pending.len());
                    joined.extend_from_slice(&prefix);
                    joined.extend_from_slice(&parts.read_pending);
                    parts.read_pending = joined.into();
                }
                Peel::Raw(parts)
            }
            Peel::Stream(s) if prefix.is_empty() => Peel::Stream(s),
            Peel::Stream(s) => Peel::Stream(Box::new(Prefixed::new(prefix, s))),
        }
    }
    fn into_box(self: Box<Self>) -> BoxStream {
        self
    }
}
