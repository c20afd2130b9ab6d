//! The Shadowsocks TCP stream after the header: decrypts whole chunks in place as they arrive and
//! encrypts writes into one output buffer (length block and payload leave in the same write).
//! The relay copies through it; it never peels (it always transforms bytes).

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

use super::aead::{ChunkOpener, ChunkSealer, Error, Open};
use super::ss2022;
use super::stream_cipher::StreamCrypt;
use crate::transport::{BoxStream, Stream};

/// How long a client waits for the first payload before sending its header alone (as Xray).
pub const FIRST_PAYLOAD_WAIT: Duration = Duration::from_millis(100);
/// Plaintext sealed per `poll_write` at most.
const WRITE_MAX: usize = 64 * 1024;

/// The decrypting half of a connection.
pub enum Opener {
    Plain,
    Stream(StreamCrypt),
    Aead(ChunkOpener),
}

impl Opener {
    fn open(&mut self, buf: &mut [u8]) -> Result<Open, Error> {
        match self {
            Opener::Aead(o) => o.open(buf),
            Opener::Plain | Opener::Stream(_) => {
                if buf.is_empty() {
                    return Ok(Open::Need(1));
                }
                if let Opener::Stream(s) = self {
                    s.apply(buf);
                }
                Ok(Open::Data {
                    consumed: buf.len(),
                    plain: 0..buf.len(),
                })
            }
        }
    }
}

/// The encrypting half of a connection.
pub enum Sealer {
    Plain,
    Stream(StreamCrypt),
    Aead(ChunkSealer),
}

impl Sealer {
    /// Largest plaintext one framing unit takes (whole writes for stream ciphers).
    pub fn max_chunk(&self) -> usize {
        match self {
            Sealer::Aead(s) => s.max_chunk(),
            _ => usize::MAX,
        }
    }

    /// Appends the encryption of all of `data`.
    pub fn seal(&mut self, data: &[u8], out: &mut Vec<u8>) {
        match self {
            Sealer::Aead(s) => s.seal_all(data, out),
            Sealer::Plain => out.extend_from_slice(data),
            Sealer::Stream(c) => {
                let at = out.len();
                out.extend_from_slice(data);
                c.apply(&mut out[at..]);
            }
        }
    }
}

/// Builds the read half from the peer's salt/IV once it has arrived.
pub type KeyFromSalt = Box<dyn FnOnce(&[u8]) -> Result<Opener, Error> + Send>;

enum ReadKey {
    Ready(Opener),
    AwaitSalt(usize, KeyFromSalt),
    Failed,
}

/// A client request still to be sent; it goes out with the first payload (or alone after
/// [`FIRST_PAYLOAD_WAIT`] once the client starts reading, or at shutdown).
pub enum Request {
    Sent,
    /// Stream/AEAD editions: the SOCKS address, sent as the first plaintext bytes.
    Address(Vec<u8>),
    /// 2022: the SOCKS address, sent in the variable header with padding.
    Ss2022(Vec<u8>),
}

/// What a server handshake hands to [`SsStream::server`]: the keyed opener, ciphertext already
/// read past the header (`prefill`), plaintext already decrypted (`front`, e.g. the 2022 initial
/// payload), the sealer and the raw bytes sent before the first sealed output (`head`: our salt).
pub struct ServerParts {
    pub opener: Opener,
    pub prefill: Vec<u8>,
    pub front: Bytes,
    pub sealer: Sealer,
    pub head: Vec<u8>,
    pub rcap: usize,
}

/// A Shadowsocks connection positioned after the request header.
pub struct SsStream {
    inner: BoxStream,
    rkey: ReadKey,
    rbuf: Vec<u8>,
    rcap: usize,
    start: usize,
    end: usize,
    plain: std::ops::Range<usize>,
    front: Bytes,
    eof: bool,
    sealer: Sealer,
    head: Vec<u8>,
    out: Vec<u8>,
    opos: usize,
    req: Request,
    timer: Option<Pin<Box<Sleep>>>,
}

impl SsStream {
    /// A server stream from the parts its handshake produced.
    pub fn server(inner: BoxStream, p: ServerParts) -> SsStream {
        let mut s = SsStream::new(
            inner,
            ReadKey::Ready(p.opener),
            p.sealer,
            p.head,
            Request::Sent,
            p.rcap,
        );
        s.front = p.front;
        s.prefill(&p.prefill);
        s
    }

    /// A client stream: the server's salt (`salt_len` bytes) keys the read half via `key`.
    pub fn client(
        inner: BoxStream,
        salt_len: usize,
        key: KeyFromSalt,
        sealer: Sealer,
        head: Vec<u8>,
        req: Request,
        rcap: usize,
    ) -> SsStream {
        SsStream::new(
            inner,
            ReadKey::AwaitSalt(salt_len, key),
            sealer,
            head,
            req,
            rcap,
        )
    }

    fn new(
        inner: BoxStream,
        rkey: ReadKey,
        sealer: Sealer,
        head: Vec<u8>,
        req: Request,
        rcap: usize,
    ) -> SsStream {
        SsStream {
            inner,
            rkey,
            rbuf: Vec::new(),
            rcap,
            start: 0,
            end: 0,
            plain: 0..0,
            front: Bytes::new(),
            eof: false,
            sealer,
            head,
            out: Vec::new(),
            opos: 0,
            req,
            timer: None,
        }
    }

    fn prefill(&mut self, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        self.ensure_buf();
        let n = data.len().min(self.rcap);
        self.rbuf[..n].copy_from_slice(&data[..n]);
        self.end = n;
    }

    fn ensure_buf(&mut self) {
        if self.rbuf.len() != self.rcap {
            self.rbuf = vec![0u8; self.rcap];
        }
    }

    /// Puts plaintext back in front of the stream (bytes read past a parsed address).
    pub fn unread(&mut self, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let mut v = data.to_vec();
        v.extend_from_slice(&self.front);
        self.front = v.into();
    }

    /// Seals the pending client request with as much of `payload` as fits; returns bytes taken.
    fn emit_request(&mut self, payload: &[u8]) -> usize {
        let req = std::mem::replace(&mut self.req, Request::Sent);
        self.out.append(&mut self.head);
        match req {
            Request::Sent => {
                self.sealer.seal(payload, &mut self.out);
                payload.len()
            }
            Request::Address(addr) => {
                let room = self.sealer.max_chunk().saturating_sub(addr.len());
                let k = payload.len().min(room);
                let mut first = addr;
                first.extend_from_slice(&payload[..k]);
                self.sealer.seal(&first, &mut self.out);
                k
            }
            Request::Ss2022(addr) => match &mut self.sealer {
                Sealer::Aead(s) => ss2022::seal_request(s, &addr, payload, &mut self.out),
                _ => 0,
            },
        }
    }

    /// Writes buffered output to the inner stream.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.opos < self.out.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.out[self.opos..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.opos += n;
        }
        self.out.clear();
        self.opos = 0;
        Poll::Ready(Ok(()))
    }

    fn poll_request_timer(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        if matches!(self.req, Request::Sent) {
            return Ok(());
        }
        let t = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(FIRST_PAYLOAD_WAIT)));
        if t.as_mut().poll(cx).is_ready() {
            self.timer = None;
            self.emit_request(&[]);
            if let Poll::Ready(Err(e)) = self.poll_drain(cx) {
                return Err(e);
            }
        }
        Ok(())
    }
}

use std::future::Future;

impl AsyncRead for SsStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        me.poll_request_timer(cx)?;
        if me.opos < me.out.len() {
            if let Poll::Ready(Err(e)) = me.poll_drain(cx) {
                return Poll::Ready(Err(e));
            }
        }
        if !me.front.is_empty() {
            let n = me.front.len().min(buf.remaining());
            buf.put_slice(&me.front[..n]);
            me.front.advance(n);
            return Poll::Ready(Ok(()));
        }
        let mut delivered = false;
        loop {
            if !me.plain.is_empty() {
                let n = me.plain.len().min(buf.remaining());
                buf.put_slice(&me.rbuf[me.plain.start..me.plain.start + n]);
                me.plain.start += n;
                delivered = true;
                if buf.remaining() == 0 {
                    return Poll::Ready(Ok(()));
                }
            }
            let need = match &mut me.rkey {
                ReadKey::Failed => return Poll::Ready(Err(io::ErrorKind::InvalidData.into())),
                ReadKey::AwaitSalt(n, _) => {
                    let n = *n;
                    if me.end - me.start >= n {
                        let ReadKey::AwaitSalt(_, f) =
                            std::mem::replace(&mut me.rkey, ReadKey::Failed)
                        else {
                            continue;
                        };
                        me.rkey = ReadKey::Ready(f(&me.rbuf[me.start..me.start + n])?);
                        me.start += n;
                        continue;
                    }
                    n
                }
                ReadKey::Ready(op) => match op.open(&mut me.rbuf[me.start..me.end]) {
                    Ok(Open::Data { consumed, plain }) => {
                        me.plain = me.start + plain.start..me.start + plain.end;
                        me.start += consumed;
                        if delivered && me.plain.len() > buf.remaining() {
                            return Poll::Ready(Ok(()));
                        }
                        continue;
                    }
                    Ok(Open::Need(n)) => n,
                    Err(e) => {
                        me.rkey = ReadKey::Failed;
                        return Poll::Ready(Err(e.into()));
                    }
                },
            };
            if delivered {
                return Poll::Ready(Ok(()));
            }
            if me.eof {
                return Poll::Ready(if me.start == me.end {
                    Ok(())
                } else {
                    Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "connection closed inside a chunk",
                    ))
                });
            }
            me.ensure_buf();
            if me.start == me.end {
                me.start = 0;
                me.end = 0;
            } else if me.start + need > me.rcap {
                me.rbuf.copy_within(me.start..me.end, 0);
                me.end -= me.start;
                me.start = 0;
            }
            if need > me.rcap {
                return Poll::Ready(Err(Error::TooLong(need).into()));
            }
            let mut rb = ReadBuf::new(&mut me.rbuf[me.end..me.rcap]);
            ready!(Pin::new(&mut me.inner).poll_read(cx, &mut rb))?;
            let n = rb.filled().len();
            if n == 0 {
                me.eof = true;
            } else {
                me.end += n;
            }
        }
    }
}

impl AsyncWrite for SsStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        ready!(me.poll_drain(cx))?;
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let take = data.len().min(WRITE_MAX);
        let n = if matches!(me.req, Request::Sent) {
            me.out.append(&mut me.head);
            me.sealer.seal(&data[..take], &mut me.out);
            take
        } else {
            me.timer = None;
            me.emit_request(&data[..take])
        };
        if let Poll::Ready(Err(e)) = me.poll_drain(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        ready!(me.poll_drain(cx))?;
        Pin::new(&mut me.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if !matches!(me.req, Request::Sent) {
            me.emit_request(&[]);
        }
        ready!(me.poll_drain(cx))?;
        Pin::new(&mut me.inner).poll_shutdown(cx)
    }
}

impl Stream for SsStream {
    fn into_box(self: Box<Self>) -> BoxStream {
        self
    }
}
