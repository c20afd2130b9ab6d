//! A TLS connection over any [`Stream`], driven by rustls record by record so that at every
//! moment the bytes it holds are known (what XTLS Vision needs to drop the outer TLS without
//! losing or repeating a byte, and what fallbacks need to see of a client's first flight).
//!
//! Ciphertext from the peer lands in one pooled buffer, `rx`. rustls is given it in pieces and
//! processes what it was given at once, so at any time:
//! - `rx[rec..]` is ciphertext not yet decrypted (a prefix of it may have been handed to rustls
//!   as part of an incomplete record; rustls's copy is dropped with the connection),
//! - rustls's reader holds plaintext decrypted but not yet read ([`TlsStream::take_plaintext`]),
//! - rustls's writer holds records encrypted but not yet written out ([`TlsStream::write_pending`];
//!   after the handshake a write is encrypted at once, so no plaintext waits unencrypted).
//!
//! The socket under a TLS layer is usually a plain TCP or unix socket: then the stream reads it
//! itself when it is readable, so an idle connection holds no read buffer at all.

use std::io::{self, Read, Write};
use std::ops::{Deref, DerefMut};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use rustls::{
    ClientConnection, ConnectionCommon, ConnectionTrafficSecrets, ExtractedSecrets,
    ServerConnection, SideData,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::capture::{self, Secrets};
use super::OuterTls;
use crate::relay::pool;
use crate::transport::tls13::keys::Suite;
use crate::transport::tls13::stream::poll_read_under;
use crate::transport::tls13::{Direction, Tls13Stream};
use crate::transport::{BoxStream, RawSocket, Stream};

/// Size of the ciphertext buffer: several full records per read syscall.
const RX_SIZE: usize = 64 * 1024;
/// Largest TLS record on the wire: header + 2^14 + 2048 (TLS 1.2's ciphertext expansion).
const MAX_RECORD: usize = 5 + 16384 + 2048;

/// What went wrong before any TLS was spoken: the first bytes were not a TLS handshake record
/// (an HTTP request to a TLS port, a probe). Nothing is answered, as Go's TLS server does.
#[derive(Debug)]
pub struct NotTls;

impl std::fmt::Display for NotTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("first bytes are not a TLS handshake")
    }
}

impl std::error::Error for NotTls {}

/// A TLS client or server connection over a stream.
pub struct TlsStream<C> {
    io: BoxStream,
    /// `io` handed its read side over: read its socket directly when readable.
    direct_read: bool,
    pub(super) conn: C,
    rx: Rx,
    /// `rx[..len]` holds data; `rx[..fed]` was given to rustls; records before `rec` are
    /// decrypted.
    len: usize,
    fed: usize,
    rec: usize,
    /// The peer closed its side of the socket.
    eof: bool,
    /// Server side: the first bytes are checked to look like TLS before rustls sees them.
    check_first: bool,
    close_sent: bool,
    /// XTLS Vision reads: rustls gets one record at a time and a read returns after each.
    one_record: bool,
    /// XTLS Vision dropped TLS: reads / writes go to `io` as they are.
    raw_read: bool,
    raw_write: bool,
    /// The application traffic secrets rustls logged during the handshake (TLS 1.3).
    secrets: Secrets,
    /// Server: chooses the connection that answers, from the first bytes (see [`Pick`]).
    pick: Option<Pick<C>>,
}

/// Given the first bytes of a connection before rustls sees them: `None` to wait for more,
/// `Some(Some(conn))` to answer with `conn` instead, `Some(None)` to keep the one given.
pub type Pick<C> = Box<dyn FnMut(&[u8]) -> Option<Option<C>> + Send>;

/// The ciphertext buffer, given back to the pool when dropped.
#[derive(Default)]
struct Rx(Option<Box<[u8]>>);

impl Deref for Rx {
    type Target = Option<Box<[u8]>>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl DerefMut for Rx {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Drop for Rx {
    fn drop(&mut self) {
        if let Some(b) = self.0.take() {
            pool::put(b);
        }
    }
}

/// A rustls connection that can give its TLS 1.3 traffic over ([`TlsStream::into_tls13`]).
pub trait Handover {
    /// The server side of the connection.
    const SERVER: bool;
    /// rustls's keys and record numbers after the handshake (consumes the connection).
    fn extract(self) -> Result<ExtractedSecrets, rustls::Error>;
}

impl Handover for ServerConnection {
    const SERVER: bool = true;
    fn extract(self) -> Result<ExtractedSecrets, rustls::Error> {
        self.dangerous_extract_secrets()
    }
}

impl Handover for ClientConnection {
    const SERVER: bool = false;
    fn extract(self) -> Result<ExtractedSecrets, rustls::Error> {
        self.dangerous_extract_secrets()
    }
}

impl<C, D> TlsStream<C>
where
    C: DerefMut + Deref<Target = ConnectionCommon<D>> + Send + Unpin + 'static,
    D: SideData + 'static,
{
    /// Wraps `io`; `server` checks that the first bytes look like a TLS handshake.
    pub fn new(mut io: BoxStream, conn: C, server: bool) -> Self {
        let mut rx = None;
        let mut len = 0;
        let direct_read = match io
            .socket()
            .is_some()
            .then(|| io.take_read_direct())
            .flatten()
        {
            Some(held) => {
                if !held.is_empty() {
                    let mut b = pool::take(RX_SIZE.max(held.len()));
                    b[..held.len()].copy_from_slice(&held);
                    len = held.len();
                    rx = Some(b);
                }
                true
            }
            None => false,
        };
        TlsStream {
            io,
            direct_read,
            conn,
            rx: Rx(rx),
            len,
            fed: 0,
            rec: 0,
            eof: false,
            check_first: server,
            close_sent: false,
            one_record: false,
            raw_read: false,
            raw_write: false,
            secrets: Secrets::default(),
            pick: None,
        }
    }

    /// Lets `pick` replace the connection from the first bytes the peer sends.
    pub fn set_alternative(&mut self, pick: Pick<C>) {
        self.pick = Some(pick);
    }

    /// Runs [`Pick`] on what has arrived; `false` while it waits for more.
    fn picked(&mut self) -> bool {
        let Some(pick) = self.pick.as_mut() else {
            return true;
        };
        let got = match &*self.rx {
            Some(b) => &b[..self.len],
            None => &[],
        };
        match pick(got) {
            None if !self.eof && self.len < MAX_RECORD => return false,
            Some(Some(conn)) => self.conn = conn,
            _ => {}
        }
        self.pick = None;
        true
    }

    /// The rustls connection (negotiated ALPN, SNI, version, ...).
    pub fn connection(&self) -> &C {
        &self.conn
    }

    /// The stream under TLS.
    pub fn get_ref(&self) -> &BoxStream {
        &self.io
    }

    /// Ciphertext read from the peer and not yet decrypted (a prefix of an incomplete record
    /// may also have been handed to rustls).
    pub fn ciphertext_held(&self) -> &[u8] {
        match &*self.rx {
            Some(b) => &b[self.rec..self.len],
            None => &[],
        }
    }

    /// Takes the plaintext rustls decrypted and nobody has read yet.
    pub fn take_plaintext(&mut self) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        match self.conn.reader().read_to_end(&mut out) {
            Ok(_) => Ok(out),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(out),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(out),
            Err(e) => Err(e),
        }
    }

    /// Encrypted records are waiting to be written out.
    pub fn write_pending(&self) -> bool {
        self.conn.wants_write()
    }

    /// Completes the handshake.
    pub async fn handshake(&mut self) -> io::Result<()> {
        std::future::poll_fn(|cx| self.poll_handshake(cx)).await
    }

    fn poll_handshake(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            ready!(self.poll_flush_tls(cx))?;
            if !self.conn.is_handshaking() {
                return Poll::Ready(Ok(()));
            }
            if self.picked() && self.feedable() {
                self.feed(cx)?;
                continue;
            }
            if self.eof {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "peer closed during the TLS handshake",
                )));
            }
            ready!(self.poll_fill(cx))?;
        }
    }

    /// Whether `rx` holds bytes to hand rustls: any, or in one-record mode a whole record.
    fn feedable(&self) -> bool {
        if self.fed >= self.len {
            return false;
        }
        if !self.one_record {
            return true;
        }
        self.next_record_end().is_some()
    }

    /// The end of the first record not yet processed (at `rec`; part of it may have been
    /// handed over before one-record mode began), if it is all there.
    fn next_record_end(&self) -> Option<usize> {
        let rx = self.rx.as_deref()?;
        let h = rx.get(self.rec..self.rec + 5)?;
        let end = self.rec + 5 + u16::from_be_bytes([h[3], h[4]]) as usize;
        (end <= self.len && end > self.fed).then_some(end)
    }

    /// Hands rustls the next piece of `rx` (one record in one-record mode) and processes it;
    /// errors leave rustls's alert queued (sent if the socket takes it at once).
    #[allow(
        clippy::expect_used,
        clippy::unwrap_used,
        reason = "state the read path set just before"
    )]
    fn feed(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        let end = match self.one_record {
            true => self.next_record_end().unwrap_or(self.len),
            false => self.len,
        };
        let rx = self.rx.as_deref().expect("data in rx");
        if self.check_first {
            // A TLS client starts with a handshake record (22) of a 3.x version.
            if rx[0] != 22 || (self.len > 1 && rx[1] != 3) {
                return Err(io::Error::new(io::ErrorKind::InvalidData, NotTls));
            }
            self.check_first = false;
        }
        let n = self.conn.read_tls(&mut &rx[self.fed..end])?;
        self.fed += n;
        let processed = match self.conn.is_handshaking() {
            // The handshake's secrets are derived in here: keep the traffic secrets.
            true => capture::capture(&mut self.secrets, || self.conn.process_new_packets()),
            false => self.conn.process_new_packets(),
        };
        if let Err(e) = processed {
            // Best effort: tell the peer why (the alert rustls queued).
            let _ = self.poll_flush_tls(cx);
            return Err(io::Error::new(io::ErrorKind::InvalidData, e));
        }
        // Every complete record handed over has been processed now.
        let rx = self.rx.as_deref().expect("data in rx");
        while self.fed - self.rec >= 5 {
            let l = u16::from_be_bytes([rx[self.rec + 3], rx[self.rec + 4]]) as usize;
            if self.rec + 5 + l > self.fed {
                break;
            }
            self.rec += 5 + l;
        }
        if self.rec == self.len {
            // All decrypted: start over at the front.
            self.rec = 0;
            self.fed = 0;
            self.len = 0;
        }
        Ok(())
    }

    /// Reads more ciphertext from the network into `rx`; sets `eof` when the peer closed.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(b) = &mut *self.rx {
            if self.len == b.len() {
                // Full: move the undecrypted tail to the front.
                b.copy_within(self.rec..self.len, 0);
                self.len -= self.rec;
                self.fed -= self.rec;
                self.rec = 0;
                if self.len >= MAX_RECORD {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "TLS record too long",
                    )));
                }
            }
        }
        if self.direct_read {
            let Some(sock) = self.io.socket() else {
                return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
            };
            if self.len == 0 {
                // Idle: hold no buffer while waiting.
                if let Some(b) = self.rx.take() {
                    pool::put(b);
                }
                ready!(sock.poll_read_ready(cx))?;
            }
            let b = self.rx.get_or_insert_with(|| pool::take(RX_SIZE));
            let n = ready!(sock.poll_read_into(cx, &mut b[self.len..]))?;
            self.eof |= n == 0;
            self.len += n;
            return Poll::Ready(Ok(()));
        }
        let b = self.rx.get_or_insert_with(|| pool::take(RX_SIZE));
        let mut rb = ReadBuf::new(&mut b[self.len..]);
        ready!(Pin::new(&mut self.io).poll_read(cx, &mut rb))?;
        let n = rb.filled().len();
        if n == 0 {
            self.eof = true;
        }
        self.len += n;
        Poll::Ready(Ok(()))
    }

    /// Writes the records rustls has queued.
    fn poll_flush_tls(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
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

    /// After [`OuterTls::read_raw`]: reads the stream under TLS as it is.
    fn poll_read_raw(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        poll_read_under(&mut self.io, self.direct_read, cx, buf)
    }

    fn release_idle(&mut self) {
        if self.len == 0 {
            if let Some(b) = self.rx.take() {
                pool::put(b);
            }
        }
    }
}

impl<C, D> TlsStream<C>
where
    C: Handover + DerefMut + Deref<Target = ConnectionCommon<D>> + Send + Unpin + 'static,
    D: SideData + 'static,
{
    /// After a TLS 1.3 handshake, gives the connection to Ferry's own record layer
    /// ([`Tls13Stream`]): it decrypts in place and holds nothing but two keys while idle, where
    /// rustls keeps its buffers and state for the life of the connection. The plaintext rustls
    /// already decrypted and the ciphertext not yet processed go along, so no byte is lost or
    /// repeated. `Ok(Err(self))` when the connection stays with rustls: TLS 1.2, records still
    /// to send, the secrets not logged (a config without Ferry's key log).
    #[allow(
        clippy::expect_used,
        clippy::unwrap_used,
        reason = "state the read path set just before"
    )]
    pub fn into_tls13(mut self) -> io::Result<Result<Tls13Stream, Self>> {
        if self.conn.is_handshaking()
            || self.conn.protocol_version() != Some(rustls::ProtocolVersion::TLSv1_3)
            || self.conn.wants_write()
            || !self.secrets.complete()
            || self.raw_read
            || self.raw_write
        {
            return Ok(Err(self));
        }
        let plain = self.take_plaintext()?;
        let (client, server) = (
            self.secrets.client.take().expect("complete"),
            self.secrets.server.take().expect("complete"),
        );
        let TlsStream {
            io,
            direct_read,
            conn,
            mut rx,
            len,
            rec,
            eof,
            ..
        } = self;
        let ex = conn.extract().map_err(io::Error::other)?;
        let (read, write) = match C::SERVER {
            true => (client, server),
            false => (server, client),
        };
        let read = handover_key(read, ex.rx)?;
        let write = handover_key(write, ex.tx)?;
        let suite = read.0;
        Ok(Ok(Tls13Stream::after_handshake(
            io,
            direct_read,
            eof,
            rx.take(),
            rec..len,
            &plain,
            suite,
            read.1,
            write.1,
        )))
    }
}

/// One direction's key for [`Tls13Stream`] from the logged `secret`, checked against what
/// rustls extracted and starting at rustls's record number.
fn handover_key(
    secret: Vec<u8>,
    (seq, ex): (u64, ConnectionTrafficSecrets),
) -> io::Result<(Suite, Direction)> {
    let (suite, iv) = match &ex {
        ConnectionTrafficSecrets::Aes128Gcm { iv, .. } => (Suite::Aes128Gcm, iv),
        ConnectionTrafficSecrets::Aes256Gcm { iv, .. } => (Suite::Aes256Gcm, iv),
        ConnectionTrafficSecrets::Chacha20Poly1305 { iv, .. } => (Suite::Chacha20Poly1305, iv),
        _ => {
            return Err(io::Error::other(
                "TLS: a cipher suite Ferry's record layer lacks",
            ))
        }
    };
    let mut d = Direction::new(suite, secret);
    if d.key.iv()[..] != *iv.as_ref() {
        return Err(io::Error::other(
            "TLS: the logged traffic secret does not match rustls's keys",
        ));
    }
    d.key.set_seq(seq);
    Ok((suite, d))
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

impl<C, D> AsyncRead for TlsStream<C>
where
    C: DerefMut + Deref<Target = ConnectionCommon<D>> + Send + Unpin + 'static,
    D: SideData + 'static,
{
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if me.raw_read {
            return me.poll_read_raw(cx, buf);
        }
        let start = buf.filled().len();
        loop {
            // Plaintext first; keep going while more is already here and there is room.
            match me.conn.reader().read(buf.initialize_unfilled()) {
                Ok(0) if buf.remaining() > 0 => return Poll::Ready(Ok(())), // close_notify
                Ok(n) => {
                    buf.advance(n);
                    if buf.remaining() == 0 || me.fed == me.len || me.one_record {
                        return Poll::Ready(Ok(()));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The peer closed the socket without close_notify at a record boundary: an
                // end of stream, as Go's TLS treats it.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    return Poll::Ready(Ok(()));
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
            if me.feedable() {
                me.feed(cx)?;
                // Records rustls answers (key updates, tickets) go out when the socket takes them.
                if me.conn.wants_write() {
                    let _ = me.poll_flush_tls(cx)?;
                }
                continue;
            }
            if buf.filled().len() > start {
                return Poll::Ready(Ok(()));
            }
            if me.eof {
                if me.len > 0 {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "peer closed in the middle of a TLS record",
                    )));
                }
                // Let rustls see the end (its reader then reports it).
                me.conn.read_tls(&mut &[][..])?;
                me.conn
                    .process_new_packets()
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                return Poll::Ready(Ok(()));
            }
            match me.poll_fill(cx) {
                Poll::Ready(r) => r?,
                Poll::Pending => {
                    me.release_idle();
                    return Poll::Pending;
                }
            }
        }
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

impl<C, D> Stream for TlsStream<C>
where
    C: DerefMut + Deref<Target = ConnectionCommon<D>> + Send + Unpin + 'static,
    D: SideData + 'static,
{
    fn socket(&self) -> Option<RawSocket<'_>> {
        self.io.socket()
    }
    fn outer_tls(&mut self) -> Option<&mut dyn OuterTls> {
        Some(self)
    }
}

impl<C, D> OuterTls for TlsStream<C>
where
    C: DerefMut + Deref<Target = ConnectionCommon<D>> + Send + Unpin + 'static,
    D: SideData + 'static,
{
    fn is_tls13(&self) -> bool {
        self.conn.protocol_version() == Some(rustls::ProtocolVersion::TLSv1_3)
    }

    fn set_record_at_a_time(&mut self, on: bool) {
        self.one_record = on;
    }

    fn decrypted(&mut self) -> io::Result<Vec<u8>> {
        self.take_plaintext()
    }

    fn read_raw(&mut self) -> io::Result<Vec<u8>> {
        if self.fed != self.rec {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "part of a TLS record was handed to rustls: the bytes after it are not known",
            ));
        }
        let mut out = self.take_plaintext()?;
        if let Some(b) = self.rx.take() {
            out.extend_from_slice(&b[self.rec..self.len]);
            pool::put(b);
        }
        (self.len, self.fed, self.rec) = (0, 0, 0);
        self.raw_read = true;
        Ok(out)
    }

    fn write_raw(&mut self) {
        self.raw_write = true;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rustls::{ClientConnection, ServerConnection};
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

    use super::*;
    use crate::transport::tls::{
        generate_self_signed, CertSource, CertificateEntry, TlsSettings, Usage,
    };

    fn settings() -> (TlsSettings, TlsSettings) {
        let g = generate_self_signed(&["t.test".into()], 1).unwrap();
        let entry = CertificateEntry::load(
            CertSource::Inline {
                cert: g.cert_pem,
                key: Some(g.key_pem),
            },
            Usage::Encipherment,
            true,
        )
        .unwrap();
        let server = TlsSettings {
            certificates: vec![Arc::new(entry)],
            ..Default::default()
        };
        let client = TlsSettings {
            pins: vec![g.pin],
            ..Default::default()
        };
        (server, client)
    }

    /// A server `TlsStream` over a pipe whose other end the test drives with a bare rustls
    /// client, so it sees every ciphertext byte.
    async fn handshaken() -> (TlsStream<ServerConnection>, ClientConnection, DuplexStream) {
        handshaken_with(settings(), None).await
    }

    /// As [`handshaken`], with given settings; `with_finished` goes out as application data in
    /// the same write as the client's Finished.
    async fn handshaken_with(
        (s, c): (TlsSettings, TlsSettings),
        with_finished: Option<&[u8]>,
    ) -> (TlsStream<ServerConnection>, ClientConnection, DuplexStream) {
        let (ours, mut theirs) = tokio::io::duplex(1 << 20);
        let conn = ServerConnection::new(Arc::new(s.server_config().unwrap())).unwrap();
        let server = tokio::spawn(async move {
            let mut t = TlsStream::new(Box::new(ours), conn, true);
            t.handshake().await.unwrap();
            t
        });
        let name = rustls::pki_types::ServerName::try_from("t.test").unwrap();
        let mut client = ClientConnection::new(Arc::new(c.client_config().unwrap()), name).unwrap();
        let mut buf = vec![0u8; 1 << 16];
        let mut extra = with_finished;
        loop {
            if !client.is_handshaking() {
                if let Some(data) = extra.take() {
                    client.writer().write_all(data).unwrap();
                }
            }
            let mut out = Vec::new();
            while client.wants_write() {
                client.write_tls(&mut out).unwrap();
            }
            if !out.is_empty() {
                theirs.write_all(&out).await.unwrap();
            }
            if !client.is_handshaking() {
                break;
            }
            let n = theirs.read(&mut buf).await.unwrap();
            client.read_tls(&mut &buf[..n]).unwrap();
            client.process_new_packets().unwrap();
        }
        (server.await.unwrap(), client, theirs)
    }

    /// One application-data record as the client puts it on the wire.
    fn record(client: &mut ClientConnection, data: &[u8]) -> Vec<u8> {
        client.writer().write_all(data).unwrap();
        let mut out = Vec::new();
        while client.wants_write() {
            client.write_tls(&mut out).unwrap();
        }
        out
    }

    #[tokio::test]
    async fn the_bytes_held_are_known_exactly_at_any_point() {
        let (mut server, mut client, mut wire) = handshaken().await;
        let r1 = record(&mut client, &[1u8; 1000]);
        let r2 = record(&mut client, &[2u8; 1000]);
        let r3 = record(&mut client, &[3u8; 1000]);
        assert!(r1.len() > 1000 && r2.len() > 1000);
        // Record 1 whole and the first half of record 2 arrive.
        let half = r2.len() / 2;
        wire.write_all(&r1).await.unwrap();
        wire.write_all(&r2[..half]).await.unwrap();
        let mut got = [0u8; 400];
        server.read_exact(&mut got).await.unwrap();
        assert_eq!(got, [1u8; 400]);
        // Nudge the stream to pick up what is already on the pipe without reading plaintext.
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let mut one = [0u8; 1];
        server.read_exact(&mut one).await.unwrap();
        // 599 bytes of record 1's plaintext wait to be read; record 2's first half is
        // ciphertext not yet decrypted (rustls was handed it as an incomplete record).
        assert_eq!(server.take_plaintext().unwrap(), vec![1u8; 599]);
        assert_eq!(server.ciphertext_held(), &r2[..half]);
        assert!(!server.write_pending());
        // The rest arrives: what was held decrypts in order, nothing lost or repeated.
        wire.write_all(&r2[half..]).await.unwrap();
        wire.write_all(&r3).await.unwrap();
        let mut rest = vec![0u8; 2000];
        server.read_exact(&mut rest).await.unwrap();
        assert_eq!(&rest[..1000], &[2u8; 1000][..]);
        assert_eq!(&rest[1000..], &[3u8; 1000][..]);
        assert!(server.ciphertext_held().is_empty());
    }

    #[tokio::test]
    async fn a_non_tls_first_flight_is_refused_unanswered() {
        let (s, _) = settings();
        let (ours, mut theirs) = tokio::io::duplex(1 << 16);
        let conn = ServerConnection::new(Arc::new(s.server_config().unwrap())).unwrap();
        let mut t = TlsStream::new(Box::new(ours), conn, true);
        theirs.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        let e = t.handshake().await.unwrap_err();
        assert!(e.get_ref().is_some_and(|e| e.is::<NotTls>()), "{e}");
        drop(t);
        let mut answer = Vec::new();
        theirs.read_to_end(&mut answer).await.unwrap();
        assert!(answer.is_empty(), "answered {answer:?}");
    }

    #[tokio::test]
    async fn a_record_longer_than_tls_allows_fails_the_connection() {
        let (mut server, _client, mut wire) = handshaken().await;
        // Application-data header announcing 30000 bytes (TLS allows 2^14 + 2048).
        let mut bad = vec![23u8, 3, 3, 0x75, 0x30];
        bad.resize(5 + 30000, 0);
        wire.write_all(&bad).await.unwrap();
        let mut b = [0u8; 16];
        assert!(server.read(&mut b).await.is_err());
    }

    /// Decrypts what the server wrote until `n` plaintext bytes came.
    async fn client_reads(
        client: &mut ClientConnection,
        wire: &mut DuplexStream,
        n: usize,
    ) -> Vec<u8> {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        while got.len() < n {
            let k = wire.read(&mut buf).await.unwrap();
            assert!(k > 0, "server closed after {} bytes", got.len());
            let mut left = &buf[..k];
            while !left.is_empty() {
                client.read_tls(&mut left).unwrap();
                client.process_new_packets().unwrap();
                let _ = client.reader().read_to_end(&mut got);
            }
        }
        got
    }

    #[tokio::test]
    async fn tls13_goes_on_in_ferrys_record_layer_with_nothing_lost() {
        let (server, mut client, mut wire) =
            handshaken_with(settings(), Some(b"sent with Finished")).await;
        // The first data came in the same read as the Finished: rustls decrypted it already.
        let mut own = match server.into_tls13().unwrap() {
            Ok(own) => own,
            Err(_) => panic!("a TLS 1.3 connection stayed with rustls"),
        };
        let mut b = vec![0u8; 18];
        own.read_exact(&mut b).await.unwrap();
        assert_eq!(b, b"sent with Finished");
        // Both ways, records of every size.
        let data: Vec<u8> = (0..100_000u32).map(|i| (i * 31) as u8).collect();
        for chunk in data.chunks(20_000) {
            let rec = record(&mut client, chunk);
            wire.write_all(&rec).await.unwrap();
        }
        let mut got = vec![0u8; data.len()];
        own.read_exact(&mut got).await.unwrap();
        assert_eq!(got, data);
        own.write_all(&data).await.unwrap();
        own.flush().await.unwrap();
        assert_eq!(client_reads(&mut client, &mut wire, data.len()).await, data);
        // A KeyUpdate from rustls is followed (and answered before our next record).
        client.refresh_traffic_keys().unwrap();
        let rec = record(&mut client, b"after the update");
        wire.write_all(&rec).await.unwrap();
        let mut b = vec![0u8; 16];
        own.read_exact(&mut b).await.unwrap();
        assert_eq!(b, b"after the update");
        own.write_all(b"reply").await.unwrap();
        own.flush().await.unwrap();
        assert_eq!(client_reads(&mut client, &mut wire, 5).await, b"reply");
        // close_notify ends the stream; ours reaches rustls.
        client.send_close_notify();
        let mut out = Vec::new();
        client.write_tls(&mut out).unwrap();
        wire.write_all(&out).await.unwrap();
        let mut rest = Vec::new();
        own.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
        own.shutdown().await.unwrap();
        let mut buf = vec![0u8; 4096];
        let k = wire.read(&mut buf).await.unwrap();
        client.read_tls(&mut &buf[..k]).unwrap();
        let st = client.process_new_packets().unwrap();
        assert!(st.peer_has_closed());
    }

    #[tokio::test]
    async fn a_record_split_at_the_handover_is_read_whole() {
        let (mut server, mut client, mut wire) = handshaken().await;
        // Half a record arrives and is handed to rustls before the switch.
        let rec = record(&mut client, &[9u8; 3000]);
        wire.write_all(&rec[..1000]).await.unwrap();
        let mut b = [0u8; 1];
        let r = tokio::time::timeout(std::time::Duration::from_millis(50), server.read(&mut b));
        assert!(r.await.is_err(), "half a record yielded plaintext");
        let mut own = match server.into_tls13().unwrap() {
            Ok(own) => own,
            Err(_) => panic!("stayed with rustls"),
        };
        wire.write_all(&rec[1000..]).await.unwrap();
        let mut got = vec![0u8; 3000];
        own.read_exact(&mut got).await.unwrap();
        assert_eq!(got, vec![9u8; 3000]);
    }

    #[tokio::test]
    async fn tls12_and_resumption_clients_stay_with_rustls() {
        let (mut s, c) = settings();
        s.max_version = Some(crate::transport::tls::Version::Tls12);
        let (server, _client, _wire) = handshaken_with((s, c), None).await;
        assert!(server.into_tls13().unwrap().is_err());
        let (_, mut c) = settings();
        c.session_resumption = true;
        assert!(!c
            .client_config()
            .unwrap()
            .key_log
            .will_log("CLIENT_TRAFFIC_SECRET_0"));
    }
}
