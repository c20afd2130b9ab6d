//! A proxied connection as the server sees it ([`ServerConn`]), and the response bodies: its
//! downlink, or a stream-up POST's keep-alive padding.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::super::pipe::{BodyReader, PipeBody, PipeWriter};
use super::super::{padding, XhttpSettings};
use super::session::{Session, Sessions};
use crate::transport::Stream;

/// The uplink of a proxied connection.
pub(super) enum Uplink {
    Session {
        id: String,
        session: Arc<Session>,
        sessions: Arc<Sessions>,
    },
    /// stream-one: the POST's own body.
    Body(BodyReader),
}

/// One proxied connection: uplink from the session (or the request body), downlink into the
/// response body.
pub struct ServerConn {
    pub(super) up: Uplink,
    pub(super) down: PipeWriter,
    /// It wrote: its session was told.
    pub(super) answered: bool,
}

impl Drop for ServerConn {
    fn drop(&mut self) {
        if let Uplink::Session {
            id,
            session,
            sessions,
        } = &self.up
        {
            sessions.remove(id, session);
        }
    }
}

impl AsyncRead for ServerConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        // The client went away (its GET, or the stream-one POST, was dropped): the uplink
        // ends with it, as Xray closes the connection when the request context ends.
        if me.down.poll_closed(cx).is_ready() {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "XHTTP: the client closed the download",
            )));
        }
        match &mut me.up {
            Uplink::Session { session, .. } => session.poll_read(cx, out),
            Uplink::Body(body) => body.poll_read(cx, out).map(|r| {
                r.map(|_| ())
                    .map_err(|e| io::Error::other(format!("XHTTP stream-one: {e}")))
            }),
        }
    }
}

impl AsyncWrite for ServerConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        if !me.answered && !buf.is_empty() {
            // Every inbound answers only a client that authenticated.
            me.answered = true;
            if let Uplink::Session { session, .. } = &me.up {
                session.answered();
            }
        }
        Pin::new(&mut me.down).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().down).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().down).poll_shutdown(cx)
    }
}

impl Stream for ServerConn {}

/// The body of a stream-up POST's response: padding now and then (so middleboxes see the
/// request alive), until the session ends.
pub(super) struct KeepAlive {
    pub(super) session: Arc<Session>,
    pub(super) settings: Arc<XhttpSettings>,
    /// `None`: no padding (no Referer, or `scStreamUpServerSecs` off).
    pub(super) timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

/// A response body.
pub(super) enum ServerBody {
    Empty,
    Down(PipeBody),
    KeepAlive(KeepAlive),
}

impl Body for ServerBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        match self.get_mut() {
            ServerBody::Empty => Poll::Ready(None),
            ServerBody::Down(p) => Pin::new(p).poll_frame(cx),
            ServerBody::KeepAlive(k) => {
                {
                    let mut u = k.session.lock();
                    if u.closed {
                        return Poll::Ready(None);
                    }
                    u.end = Some(cx.waker().clone());
                }
                let Some(t) = k.timer.as_mut() else {
                    return Poll::Pending;
                };
                std::task::ready!(t.as_mut().poll(cx));
                let secs = k
                    .settings
                    .stream_up_server_secs
                    .map(|r| r.rand())
                    .unwrap_or(0);
                t.as_mut()
                    .reset(tokio::time::Instant::now() + Duration::from_secs(secs.into()));
                let pad = padding(k.settings.padding.rand());
                Poll::Ready(Some(Ok(Frame::data(Bytes::from(pad)))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ServerBody::Empty => true,
            ServerBody::Down(p) => p.is_end_stream(),
            ServerBody::KeepAlive(_) => false,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ServerBody::Empty => SizeHint::with_exact(0),
            _ => SizeHint::default(),
        }
    }
}
