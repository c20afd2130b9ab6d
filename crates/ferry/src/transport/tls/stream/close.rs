//! close_notify on drop for a connection that stays with rustls ([`Closing`]).

use std::io;
use std::ops::{Deref, DerefMut};
use std::pin::Pin;
use std::task::{Context, Poll};

use rustls::{ConnectionCommon, SideData};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::TlsStream;
use crate::transport::tls::OuterTls;
use crate::transport::{RawSocket, Stream};

/// A TLS connection that stays with rustls (TLS 1.2) once its handshake is done: dropped
/// without a shutdown (Ferry closing it: a bad request, a timeout), it sends close_notify
/// first, as Go's `Conn.Close` does; a bare FIN would tell Ferry apart.
pub struct Closing<S: CloseNow>(pub S);

/// Sends close_notify if the socket takes it at once (for a drop, which cannot wait).
pub trait CloseNow {
    fn close_notify_now(&mut self);
}

impl<C, D> CloseNow for TlsStream<C>
where
    C: DerefMut + Deref<Target = ConnectionCommon<D>> + Send + Unpin + 'static,
    D: SideData + 'static,
{
    fn close_notify_now(&mut self) {
        if self.close_sent || self.raw_write || self.conn.is_handshaking() {
            return;
        }
        let mut cx = Context::from_waker(std::task::Waker::noop());
        // Not behind a record half written.
        if !matches!(self.poll_flush_tls(&mut cx), Poll::Ready(Ok(()))) {
            return;
        }
        self.conn.send_close_notify();
        self.close_sent = true;
        let _ = self.poll_flush_tls(&mut cx);
    }
}

impl<S: CloseNow> Drop for Closing<S> {
    fn drop(&mut self) {
        self.0.close_notify_now();
    }
}

impl<S: CloseNow + Stream> AsyncRead for Closing<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: CloseNow + Stream> AsyncWrite for Closing<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl<S: CloseNow + Stream> Stream for Closing<S> {
    fn socket(&self) -> Option<RawSocket<'_>> {
        self.0.socket()
    }
    fn take_read_direct(&mut self) -> Option<bytes::Bytes> {
        self.0.take_read_direct()
    }
    fn write_direct(&self) -> bool {
        self.0.write_direct()
    }
    fn outer_tls(&mut self) -> Option<&mut dyn OuterTls> {
        self.0.outer_tls()
    }
}
