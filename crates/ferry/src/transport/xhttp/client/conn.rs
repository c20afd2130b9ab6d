//! A tunnel as the client sees it ([`ClientConn`]): the downlink's response body to read, the
//! uplink's pipe to write.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use http::StatusCode;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::super::pipe::{BodyReader, PipeWriter};
use super::leg::Usage;
use super::{hyper_err, AbortOnDrop, ResponseFuture};
use crate::transport::Stream;

enum Down {
    Waiting(ResponseFuture),
    Body(BodyReader),
    Done,
}

/// One tunnel as a byte stream.
pub struct ClientConn {
    down: Down,
    /// The uplink: into the request body (stream-up/one) or the packet uploader.
    up: PipeWriter,
    _usage: Vec<Usage>,
    _conn: Option<AbortOnDrop>,
}

impl ClientConn {
    pub(super) fn new(
        resp: ResponseFuture,
        up: PipeWriter,
        usage: Vec<Usage>,
        conn: Option<AbortOnDrop>,
    ) -> Self {
        ClientConn {
            down: Down::Waiting(resp),
            up,
            _usage: usage,
            _conn: conn,
        }
    }
}

impl AsyncRead for ClientConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        loop {
            match &mut me.down {
                Down::Done => return Poll::Ready(Ok(())),
                Down::Waiting(f) => {
                    let r = ready!(f.as_mut().poll(cx));
                    let r = match r {
                        Ok(r) => r,
                        Err(e) => {
                            me.down = Down::Done;
                            return Poll::Ready(Err(e));
                        }
                    };
                    if r.status() != StatusCode::OK {
                        me.down = Down::Done;
                        return Poll::Ready(Err(io::Error::other(format!(
                            "XHTTP: the server answered {}",
                            r.status()
                        ))));
                    }
                    me.down = Down::Body(BodyReader::new(r.into_body()));
                }
                Down::Body(b) => {
                    return match ready!(b.poll_read(cx, out)) {
                        Ok(true) => Poll::Ready(Ok(())),
                        Ok(false) => {
                            me.down = Down::Done;
                            Poll::Ready(Ok(()))
                        }
                        Err(e) => {
                            me.down = Down::Done;
                            Poll::Ready(Err(hyper_err(e)))
                        }
                    }
                }
            }
        }
    }
}

impl AsyncWrite for ClientConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().up).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    /// stream-up / stream-one: ends the request body. packet-up has no way to say so: what
    /// was written is still posted.
    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.up.close();
        Poll::Ready(Ok(()))
    }
}

impl Stream for ClientConn {}
