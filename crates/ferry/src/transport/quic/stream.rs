//! A QUIC bidirectional stream as a [`Stream`](crate::transport::Stream): reads replay what
//! was read ahead of it first; shutting down finishes the send side (FIN).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

pub struct QuicStream {
    send: quinn::SendStream,
    recv: quinn::RecvStream,
    ahead: Bytes,
}

impl QuicStream {
    pub fn new(send: quinn::SendStream, recv: quinn::RecvStream, ahead: Bytes) -> QuicStream {
        QuicStream { send, recv, ahead }
    }
}

impl AsyncRead for QuicStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.ahead.is_empty() {
            let n = self.ahead.len().min(buf.remaining());
            buf.put_slice(&self.ahead[..n]);
            self.ahead.advance(n);
            if self.ahead.is_empty() {
                // Let go of the allocation it came from.
                self.ahead = Bytes::new();
            }
            return Poll::Ready(Ok(()));
        }
        match Pin::new(&mut self.recv).poll_read(cx, buf) {
            // A peer's reset ends the stream as a close does for TCP.
            Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::ConnectionReset => {
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}

impl AsyncWrite for QuicStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.send)
            .poll_write(cx, buf)
            .map_err(io::Error::from)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.send).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // FIN; a stream already finished or reset has nothing more to say.
        let _ = self.send.finish();
        Poll::Ready(Ok(()))
    }
}

impl crate::transport::Stream for QuicStream {}
