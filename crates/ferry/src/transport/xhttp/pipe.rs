//! A bounded byte pipe between a proxied connection's writes and an HTTP body: the writer
//! side is `AsyncWrite`, the reader side a hyper [`Body`] that hands over everything written
//! since its last poll as one frame (writes batch while HTTP is busy). Nothing is held while
//! the pipe is empty: each frame's allocation leaves with it.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use bytes::{Bytes, BytesMut};
use hyper::body::{Body, Frame, SizeHint};
use tokio::io::AsyncWrite;

#[derive(Default)]
struct State {
    buf: BytesMut,
    /// The writer is gone or shut down: the body ends once `buf` is drained.
    write_closed: bool,
    /// The body is gone: writes fail.
    read_closed: bool,
    reader: Option<Waker>,
    writer: Option<Waker>,
    /// Waiting in [`PipeWriter::poll_closed`].
    closer: Option<Waker>,
}

struct Shared {
    state: Mutex<State>,
    cap: usize,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic elsewhere while holding the lock leaves plain bytes behind: go on.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A pipe holding `cap` bytes at most before writes wait.
pub fn pipe(cap: usize) -> (PipeWriter, PipeBody) {
    let shared = Arc::new(Shared {
        state: Mutex::default(),
        cap: cap.max(1),
    });
    (PipeWriter(shared.clone()), PipeBody(shared))
}

/// The writing end.
pub struct PipeWriter(Arc<Shared>);

impl PipeWriter {
    /// Ends the body after what was written (also done on drop).
    pub fn close(&self) {
        let mut s = self.0.lock();
        s.write_closed = true;
        if let Some(w) = s.reader.take() {
            w.wake();
        }
    }

    /// The reading end is gone.
    pub fn is_closed(&self) -> bool {
        self.0.lock().read_closed
    }

    /// Ready once the reading end is gone.
    pub fn poll_closed(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut s = self.0.lock();
        if s.read_closed {
            return Poll::Ready(());
        }
        s.closer = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Bytes written and not yet taken by the body.
    pub fn buffered(&self) -> usize {
        self.0.lock().buf.len()
    }
}

impl Drop for PipeWriter {
    fn drop(&mut self) {
        self.close();
    }
}

impl AsyncWrite for PipeWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let shared = &self.0;
        let mut s = shared.lock();
        if s.read_closed {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        if s.write_closed {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "XHTTP: write after shutdown",
            )));
        }
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let room = shared.cap.saturating_sub(s.buf.len());
        if room == 0 {
            s.writer = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let n = room.min(data.len());
        if s.buf.is_empty() {
            // A fresh allocation of just this write: the last frame took the old one.
            s.buf = BytesMut::from(&data[..n]);
        } else {
            s.buf.extend_from_slice(&data[..n]);
        }
        if let Some(w) = s.reader.take() {
            w.wake();
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Every write is handed to HTTP as soon as it can take it.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.close();
        Poll::Ready(Ok(()))
    }
}

/// The reading end, as an HTTP body.
pub struct PipeBody(Arc<Shared>);

impl Drop for PipeBody {
    fn drop(&mut self) {
        let mut s = self.0.lock();
        s.read_closed = true;
        s.buf = BytesMut::new();
        if let Some(w) = s.writer.take() {
            w.wake();
        }
        if let Some(w) = s.closer.take() {
            w.wake();
        }
    }
}

impl Body for PipeBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let mut s = self.0.lock();
        if !s.buf.is_empty() {
            let chunk = std::mem::take(&mut s.buf).freeze();
            if let Some(w) = s.writer.take() {
                w.wake();
            }
            return Poll::Ready(Some(Ok(Frame::data(chunk))));
        }
        if s.write_closed {
            return Poll::Ready(None);
        }
        s.reader = Some(cx.waker().clone());
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        let s = self.0.lock();
        s.write_closed && s.buf.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

/// The other way: an HTTP body read as a byte stream, a frame at a time (the rest of the
/// last frame kept for the next read).
pub struct BodyReader {
    body: hyper::body::Incoming,
    pending: Bytes,
}

impl BodyReader {
    pub fn new(body: hyper::body::Incoming) -> Self {
        BodyReader {
            body,
            pending: Bytes::new(),
        }
    }

    /// Reads into `out`: `true` with bytes read, `false` at the body's end.
    pub fn poll_read(
        &mut self,
        cx: &mut Context<'_>,
        out: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<Result<bool, hyper::Error>> {
        loop {
            if !self.pending.is_empty() {
                let n = self.pending.len().min(out.remaining());
                out.put_slice(&self.pending[..n]);
                bytes::Buf::advance(&mut self.pending, n);
                if self.pending.is_empty() {
                    // An empty slice of h2's read buffer still pins all of it while idle.
                    self.pending = Bytes::new();
                }
                return Poll::Ready(Ok(true));
            }
            match std::task::ready!(Pin::new(&mut self.body).poll_frame(cx)) {
                None => return Poll::Ready(Ok(false)),
                Some(Err(e)) => return Poll::Ready(Err(e)),
                Some(Ok(f)) => {
                    // Trailers carry no bytes.
                    if let Ok(d) = f.into_data() {
                        self.pending = d;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;
    use tokio::io::AsyncWriteExt;

    async fn frame(b: &mut PipeBody) -> Option<Bytes> {
        poll_fn(|cx| Pin::new(&mut *b).poll_frame(cx))
            .await
            .map(|f| f.unwrap().into_data().unwrap())
    }

    #[tokio::test]
    async fn writes_batch_into_frames_and_the_end_follows_the_bytes() {
        let (mut w, mut b) = pipe(8);
        w.write_all(b"abc").await.unwrap();
        w.write_all(b"de").await.unwrap();
        assert_eq!(frame(&mut b).await.unwrap(), &b"abcde"[..]);
        // More than the capacity waits for the reader.
        let t = tokio::spawn(async move {
            w.write_all(b"0123456789").await.unwrap();
            w.shutdown().await.unwrap();
        });
        let mut got = Vec::new();
        while let Some(f) = frame(&mut b).await {
            got.extend_from_slice(&f);
        }
        assert_eq!(got, b"0123456789");
        t.await.unwrap();
    }

    #[tokio::test]
    async fn a_dropped_body_fails_the_writer() {
        let (mut w, b) = pipe(4);
        drop(b);
        assert!(w.is_closed());
        assert_eq!(
            w.write(b"x").await.unwrap_err().kind(),
            io::ErrorKind::BrokenPipe
        );
    }
}
