//! The write side: plaintext into rustls's records, written out as the stream under TLS takes
//! them; close_notify on shutdown.

use std::io::{self, Write};
use std::ops::{Deref, DerefMut};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use rustls::{ConnectionCommon, SideData};
use tokio::io::AsyncWrite;

use super::TlsStream;
use crate::transport::BoxStream;

impl<C, D> TlsStream<C>
where
    C: DerefMut + Deref<Target = ConnectionCommon<D>> + Send + Unpin + 'static,
    D: SideData + 'static,
{
    /// Writes the records rustls has queued.
    pub(super) fn poll_flush_tls(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.conn.wants_write() {
            let mut w = SyncWriter {
                io: &mut self.io,
                cx,
            };
            match self.conn.write_tls(&mut w) {
                Ok(0) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Poll::Pending,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        Poll::Ready(Ok(()))
    }
}

/// `io::Write` over an `AsyncWrite` for rustls's `write_tls`: `Pending` becomes `WouldBlock`.
struct SyncWriter<'a, 'b> {
    io: &'a mut BoxStream,
    cx: &'a mut Context<'b>,
}

impl Write for SyncWriter<'_, '_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match Pin::new(&mut *self.io).poll_write(self.cx, buf) {
            Poll::Ready(r) => r,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        match Pin::new(&mut *self.io).poll_write_vectored(self.cx, bufs) {
            Poll::Ready(r) => r,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<C, D> AsyncWrite for TlsStream<C>
where
    C: DerefMut + Deref<Target = ConnectionCommon<D>> + Send + Unpin + 'static,
    D: SideData + 'static,
{
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        if me.raw_write {
            return Pin::new(&mut me.io).poll_write(cx, buf);
        }
        let mut done = 0;
        loop {
            if done < buf.len() {
                done += me.conn.writer().write(&buf[done..])?;
            }
            match me.poll_flush_tls(cx) {
                Poll::Ready(Ok(())) if done == buf.len() => return Poll::Ready(Ok(done)),
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending if done > 0 => return Poll::Ready(Ok(done)),
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    /// Several slices go into one record (a protocol header with the first payload).
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        if me.raw_write {
            return Pin::new(&mut me.io).poll_write_vectored(cx, bufs);
        }
        // Accept only what fits at once, so no slice is half taken twice.
        let n = me.conn.writer().write_vectored(bufs)?;
        match me.poll_flush_tls(cx) {
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending if n == 0 => Poll::Pending,
            Poll::Ready(Ok(())) if n == 0 && bufs.iter().any(|b| !b.is_empty()) => {
                let n = me.conn.writer().write_vectored(bufs)?;
                let _ = me.poll_flush_tls(cx)?;
                Poll::Ready(Ok(n))
            }
            _ => Poll::Ready(Ok(n)),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        ready!(me.poll_flush_tls(cx))?;
        Pin::new(&mut me.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if !me.close_sent && !me.raw_write {
            me.conn.send_close_notify();
            me.close_sent = true;
        }
        ready!(me.poll_flush_tls(cx))?;
        Pin::new(&mut me.io).poll_shutdown(cx)
    }
}
