//! Streams of protocols that put a head in front of plain bytes (VLESS, Trojan): a server's
//! response leaves with its first write ([`ServerStream`]); a client's request header leaves
//! with its first payload, or alone after [`FIRST_PAYLOAD_WAIT`] once it starts reading, and
//! the client checks and strips the server's response if the protocol has one
//! ([`ClientStream`]). Once those are done both streams are direct, so the relay splices.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use super::first_payload::FirstPayloadWait;
use crate::transport::{BoxStream, RawSocket, Stream};
use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// How long a client waits for its first payload before sending the header alone.
pub const FIRST_PAYLOAD_WAIT: Duration = Duration::from_millis(100);

/// Bytes to send before the first write (the server's response, the client's request).
struct Head {
    bytes: Vec<u8>,
    sent: usize,
}

impl Head {
    fn done(&self) -> bool {
        self.sent >= self.bytes.len()
    }

    /// Writes the rest of the head together with `data` (one vectored write where the socket
    /// allows); returns how much of `data` went.
    fn poll_write_with(
        &mut self,
        cx: &mut Context<'_>,
        inner: &mut BoxStream,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        while !self.done() {
            let rest = &self.bytes[self.sent..];
            let bufs = [IoSlice::new(rest), IoSlice::new(data)];
            let n = ready!(Pin::new(&mut *inner).poll_write_vectored(cx, &bufs))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            let h = n.min(rest.len());
            self.sent += h;
            if self.done() {
                self.bytes = Vec::new();
                if n > h || data.is_empty() {
                    return Poll::Ready(Ok(n - h));
                }
                // Only the head went out (a layer that writes one slice at a time).
                break;
            }
        }
        Pin::new(inner).poll_write(cx, data)
    }

    fn poll_flush_head(
        &mut self,
        cx: &mut Context<'_>,
        inner: &mut BoxStream,
    ) -> Poll<io::Result<()>> {
        ready!(crate::transport::poll_write_all(
            inner,
            cx,
            &self.bytes,
            &mut self.sent
        ))?;
        self.bytes = Vec::new();
        Poll::Ready(Ok(()))
    }
}

/// The server side: the response goes out with the first write. The client's write side is
/// the same thing (its header goes out with its first payload).
pub struct ServerStream {
    inner: BoxStream,
    head: Head,
}

impl ServerStream {
    /// `response` leaves with the first write.
    pub fn new(inner: BoxStream, response: Vec<u8>) -> Self {
        ServerStream {
            inner,
            head: Head {
                bytes: response,
                sent: 0,
            },
        }
    }
}

/// Checks a server's response at the start of what it sent: `Ok(None)` asks for more bytes,
/// `Ok(Some(n))` is its length.
pub type ResponseCheck = fn(&[u8]) -> Result<Option<usize>, String>;

impl AsyncRead for ServerStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for ServerStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = &mut *self;
        me.head.poll_write_with(cx, &mut me.inner, data)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = &mut *self;
        ready!(me.head.poll_flush_head(cx, &mut me.inner))?;
        Pin::new(&mut me.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = &mut *self;
        ready!(me.head.poll_flush_head(cx, &mut me.inner))?;
        Pin::new(&mut me.inner).poll_shutdown(cx)
    }
}

impl Stream for ServerStream {
    fn socket(&self) -> Option<RawSocket<'_>> {
        self.inner.socket()
    }
    fn take_read_direct(&mut self) -> Option<Bytes> {
        self.inner.take_read_direct()
    }
    fn write_direct(&self) -> bool {
        self.head.done() && self.inner.write_direct()
    }
}

/// Where the client is in reading the server's response.
enum Resp {
    /// Bytes of the response read so far, and how to tell it is complete.
    Reading(Vec<u8>, ResponseCheck),
    /// Done; bytes read past it wait here for the caller.
    Done(Bytes),
}

/// The client side: the request header goes out with the first payload, the response is
/// checked and stripped.
pub struct ClientStream {
    /// The write side: the header goes with the first payload.
    out: ServerStream,
    resp: Resp,
    wait: FirstPayloadWait,
}

impl ClientStream {
    /// `header` leaves with the first payload; `response` checks the server's response (none
    /// for a protocol without one).
    pub fn new(inner: BoxStream, header: Vec<u8>, response: Option<ResponseCheck>) -> Self {
        ClientStream {
            out: ServerStream::new(inner, header),
            resp: match response {
                Some(check) => Resp::Reading(Vec::new(), check),
                None => Resp::Done(Bytes::new()),
            },
            wait: FirstPayloadWait::new(FIRST_PAYLOAD_WAIT),
        }
    }
}

impl AsyncRead for ClientStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = &mut *self;
        if !me.out.head.done() {
            // No payload yet: the header goes alone once the wait is over.
            ready!(me.wait.poll_over(cx));
            let ServerStream { inner, head } = &mut me.out;
            ready!(head.poll_flush_head(cx, inner))?;
        }
        let inner = &mut me.out.inner;
        loop {
            match &mut me.resp {
                Resp::Done(extra) => {
                    if !extra.is_empty() {
                        let n = extra.len().min(buf.remaining());
                        buf.put_slice(&extra.split_to(n));
                        return Poll::Ready(Ok(()));
                    }
                    return Pin::new(inner).poll_read(cx, buf);
                }
                Resp::Reading(got, check) => {
                    let mut tmp = [0u8; 512];
                    let mut rb = ReadBuf::new(&mut tmp);
                    ready!(Pin::new(&mut *inner).poll_read(cx, &mut rb))?;
                    if rb.filled().is_empty() {
                        return Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "the server closed before its response",
                        )));
                    }
                    got.extend_from_slice(rb.filled());
                    match check(got) {
                        Ok(None) => {}
                        Ok(Some(n)) => {
                            let extra = Bytes::copy_from_slice(&got[n..]);
                            me.resp = Resp::Done(extra);
                        }
                        Err(e) => {
                            return Poll::Ready(Err(io::Error::new(
                                io::ErrorKind::InvalidData,
                                format!("bad response: {e}"),
                            )))
                        }
                    }
                }
            }
        }
    }
}

impl AsyncWrite for ClientStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.wait.end();
        Pin::new(&mut self.out).poll_write(cx, data)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.out).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.out).poll_shutdown(cx)
    }
}

impl Stream for ClientStream {
    fn socket(&self) -> Option<RawSocket<'_>> {
        self.out.socket()
    }
    fn take_read_direct(&mut self) -> Option<Bytes> {
        let Resp::Done(extra) = &mut self.resp else {
            return None;
        };
        let under = self.out.take_read_direct()?;
        let mut out = std::mem::take(extra).to_vec();
        out.extend_from_slice(&under);
        Some(out.into())
    }
    fn write_direct(&self) -> bool {
        self.out.write_direct()
    }
}
