//! A stream with bytes in front: what a protocol read past its header is handed on first.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::{BoxStream, Stream};

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
            if self.prefix.is_empty() {
                // Let go of the buffer behind it (a header reader's whole first read, 8 KiB
                // or more), which an empty `Bytes` would hold for the connection's life.
                self.prefix = Bytes::new();
            }
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
    fn socket(&self) -> Option<super::RawSocket<'_>> {
        self.inner.socket()
    }
    fn take_read_direct(&mut self) -> Option<Bytes> {
        let under = self.inner.take_read_direct()?;
        let prefix = std::mem::take(&mut self.prefix);
        if under.is_empty() {
            return Some(prefix);
        }
        let mut joined = Vec::with_capacity(prefix.len() + under.len());
        joined.extend_from_slice(&prefix);
        joined.extend_from_slice(&under);
        Some(joined.into())
    }
    fn write_direct(&self) -> bool {
        self.inner.write_direct()
    }
}
