//! A QUIC connection as the `h3` server sees it, with Hysteria's proxy streams taken out: the
//! server reads the first varint of each bidirectional stream itself; a TCP request (0x401)
//! on an authenticated connection is a proxy stream, anything else goes to HTTP/3 with the
//! bytes already read put back in front. `h3`'s own types would skip a frame type they do not
//! know by reading its length, which would eat the address.

use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use h3::quic::{self, ConnectionErrorIncoming, StreamErrorIncoming, StreamId, WriteBuf};
use quinn::VarInt;
use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::mpsc;

/// A bidirectional stream handed to HTTP/3, with the bytes read from it before.
pub struct Handed {
    pub send: quinn::SendStream,
    pub recv: quinn::RecvStream,
    pub read: Bytes,
}

/// Bytes one request stream may bring to HTTP/3 (its head and body): `h3` holds a frame whole
/// before it looks at its length, so a stranger's endless frame must end somewhere.
const MAX_REQUEST: usize = 256 << 10;
/// Bytes one unidirectional stream (control, QPACK) may bring.
const MAX_UNI: usize = 64 << 10;

/// The connection `h3` serves: its streams of control and QPACK (unidirectional) and the
/// request streams handed to it, each read through a byte cap.
pub struct H3Conn {
    opener: Opener,
    handed: mpsc::Receiver<Handed>,
    uni: mpsc::Receiver<quinn::RecvStream>,
}

impl H3Conn {
    /// Takes the connection's unidirectional streams itself (a task, ended with the
    /// connection) and the bidirectional ones from `handed`.
    pub fn new(conn: quinn::Connection, handed: mpsc::Receiver<Handed>) -> H3Conn {
        let (tx, uni) = mpsc::channel(4);
        let c = conn.clone();
        tokio::spawn(async move {
            while let Ok(s) = c.accept_uni().await {
                if tx.send(s).await.is_err() {
                    return;
                }
            }
        });
        H3Conn {
            opener: Opener(quic::Connection::<Bytes>::opener(
                &h3_quinn::Connection::new(conn),
            )),
            handed,
            uni,
        }
    }
}

fn id_of(n: u64) -> Result<StreamId, ConnectionErrorIncoming> {
    // quinn's ids are QUIC stream ids (varints), which h3 takes as they are.
    StreamId::try_from(n).map_err(|e| ConnectionErrorIncoming::InternalError(e.to_string()))
}

impl<B: Buf> quic::Connection<B> for H3Conn {
    type RecvStream = Recv;
    type OpenStreams = Opener;

    fn poll_accept_recv(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Self::RecvStream, ConnectionErrorIncoming>> {
        match std::task::ready!(self.uni.poll_recv(cx)) {
            Some(s) => {
                let id = id_of(s.id().into())?;
                Poll::Ready(Ok(Recv::new(s, Bytes::new(), id, MAX_UNI)))
            }
            None => Poll::Ready(Err(ConnectionErrorIncoming::ApplicationClose {
                error_code: 0x100,
            })),
        }
    }

    fn poll_accept_bidi(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Self::BidiStream, ConnectionErrorIncoming>> {
        match std::task::ready!(self.handed.poll_recv(cx)) {
            Some(h) => {
                let id = id_of(h.send.id().into())?;
                Poll::Ready(Ok(Bidi {
                    send: Send::new(h.send, id),
                    recv: Recv::new(h.recv, h.read, id, MAX_REQUEST),
                }))
            }
            None => Poll::Ready(Err(ConnectionErrorIncoming::ApplicationClose {
                error_code: 0x100,
            })),
        }
    }

    fn opener(&self) -> Self::OpenStreams {
        self.opener.clone()
    }
}

/// The connection opens streams as its [`Opener`] does.
impl<B: Buf> quic::OpenStreams<B> for H3Conn {
    type BidiStream = Bidi<B>;
    type SendStream = h3_quinn::SendStream<B>;

    fn poll_open_bidi(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Self::BidiStream, StreamErrorIncoming>> {
        quic::OpenStreams::<B>::poll_open_bidi(&mut self.opener, cx)
    }

    fn poll_open_send(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Self::SendStream, StreamErrorIncoming>> {
        quic::OpenStreams::<B>::poll_open_send(&mut self.opener, cx)
    }

    fn close(&mut self, code: h3::error::Code, reason: &[u8]) {
        quic::OpenStreams::<B>::close(&mut self.opener, code, reason)
    }
}

fn no_server_bidi() -> StreamErrorIncoming {
    StreamErrorIncoming::Unknown("an HTTP/3 server opens no request streams".into())
}

/// `h3-quinn`'s opener, with this module's bidirectional streams (never opened by a server).
#[derive(Clone)]
pub struct Opener(h3_quinn::OpenStreams);

impl<B: Buf> quic::OpenStreams<B> for Opener {
    type BidiStream = Bidi<B>;
    type SendStream = h3_quinn::SendStream<B>;

    fn poll_open_bidi(
        &mut self,
        _cx: &mut Context<'_>,
    ) -> Poll<Result<Self::BidiStream, StreamErrorIncoming>> {
        Poll::Ready(Err(no_server_bidi()))
    }

    fn poll_open_send(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Self::SendStream, StreamErrorIncoming>> {
        <h3_quinn::OpenStreams as quic::OpenStreams<B>>::poll_open_send(&mut self.0, cx)
    }

    fn close(&mut self, code: h3::error::Code, reason: &[u8]) {
        <h3_quinn::OpenStreams as quic::OpenStreams<B>>::close(&mut self.0, code, reason)
    }
}

/// A request stream as the HTTP/3 server hands it out.
pub type Stream = h3::server::RequestStream<Bidi<Bytes>, Bytes>;

/// A request stream: quinn's two halves, the bytes read first replayed.
pub struct Bidi<B: Buf> {
    send: Send<B>,
    recv: Recv,
}

pub struct Send<B: Buf> {
    s: quinn::SendStream,
    id: StreamId,
    writing: Option<WriteBuf<B>>,
}

impl<B: Buf> Send<B> {
    fn new(s: quinn::SendStream, id: StreamId) -> Self {
        Send {
            s,
            id,
            writing: None,
        }
    }
}

pub struct Recv {
    s: quinn::RecvStream,
    id: StreamId,
    read: Option<Bytes>,
    /// Bytes it may still bring.
    left: usize,
}

impl Recv {
    fn new(s: quinn::RecvStream, read: Bytes, id: StreamId, cap: usize) -> Self {
        Recv {
            s,
            id,
            left: cap.saturating_sub(read.len()),
            read: Some(read).filter(|b| !b.is_empty()),
        }
    }
}

fn io_err(e: impl Into<std::io::Error>) -> StreamErrorIncoming {
    StreamErrorIncoming::Unknown(Box::new(e.into()))
}

impl<B: Buf> quic::SendStream<B> for Send<B> {
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        if let Some(w) = &mut self.writing {
            while w.has_remaining() {
                let n =
                    std::task::ready!(std::pin::Pin::new(&mut self.s).poll_write(cx, w.chunk()))
                        .map_err(io_err)?;
                w.advance(n);
            }
        }
        self.writing = None;
        Poll::Ready(Ok(()))
    }

    fn send_data<T: Into<WriteBuf<B>>>(&mut self, data: T) -> Result<(), StreamErrorIncoming> {
        if self.writing.is_some() {
            return Err(StreamErrorIncoming::Unknown(
                "send_data before the last write went".into(),
            ));
        }
        self.writing = Some(data.into());
        Ok(())
    }

    fn poll_finish(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        Poll::Ready(
            self.s
                .finish()
                .map_err(|e| StreamErrorIncoming::Unknown(Box::new(e))),
        )
    }

    fn reset(&mut self, code: u64) {
        let _ = self.s.reset(VarInt::from_u64(code).unwrap_or(VarInt::MAX));
    }

    fn send_id(&self) -> StreamId {
        self.id
    }
}

impl quic::RecvStream for Recv {
    type Buf = Bytes;

    fn poll_data(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<Bytes>, StreamErrorIncoming>> {
        if let Some(b) = self.read.take() {
            return Poll::Ready(Ok(Some(b)));
        }
        let mut buf = [0u8; 4096];
        let mut rb = ReadBuf::new(&mut buf);
        std::task::ready!(std::pin::Pin::new(&mut self.s).poll_read(cx, &mut rb))
            .map_err(io_err)?;
        let n = rb.filled().len();
        if n > self.left {
            let _ = self.s.stop(VarInt::from_u32(0x10b));
            return Poll::Ready(Err(StreamErrorIncoming::Unknown(
                "an HTTP/3 stream over Ferry's limit".into(),
            )));
        }
        self.left -= n;
        Poll::Ready(Ok(match rb.filled() {
            [] => None,
            b => Some(Bytes::copy_from_slice(b)),
        }))
    }

    fn stop_sending(&mut self, code: u64) {
        let _ = self.s.stop(VarInt::from_u64(code).unwrap_or(VarInt::MAX));
    }

    fn recv_id(&self) -> StreamId {
        self.id
    }
}

impl<B: Buf> quic::SendStream<B> for Bidi<B> {
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        self.send.poll_ready(cx)
    }
    fn send_data<T: Into<WriteBuf<B>>>(&mut self, data: T) -> Result<(), StreamErrorIncoming> {
        self.send.send_data(data)
    }
    fn poll_finish(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        self.send.poll_finish(cx)
    }
    fn reset(&mut self, code: u64) {
        quic::SendStream::<B>::reset(&mut self.send, code)
    }
    fn send_id(&self) -> StreamId {
        quic::SendStream::<B>::send_id(&self.send)
    }
}

impl<B: Buf> quic::RecvStream for Bidi<B> {
    type Buf = Bytes;
    fn poll_data(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<Bytes>, StreamErrorIncoming>> {
        self.recv.poll_data(cx)
    }
    fn stop_sending(&mut self, code: u64) {
        self.recv.stop_sending(code)
    }
    fn recv_id(&self) -> StreamId {
        self.recv.recv_id()
    }
}

impl<B: Buf> quic::BidiStream<B> for Bidi<B> {
    type SendStream = Send<B>;
    type RecvStream = Recv;
    fn split(self) -> (Send<B>, Recv) {
        (self.send, self.recv)
    }
}
