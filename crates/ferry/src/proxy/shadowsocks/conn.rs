//! The Shadowsocks TCP stream after the header.
//!
//! Reading: ciphertext is read in large batches into a pooled buffer (several chunks per read
//! syscall; the buffer grows from the edition's minimum to about 256 KiB while reads fill it);
//! each chunk that fits the caller's buffer is decrypted straight into it (no copy afterwards),
//! a larger one in place and copied out. Writing: each write (up to 256 KiB) is sealed, length
//! blocks and payloads together, into one pooled output buffer that leaves in one write
//! syscall (AES-GCM encrypts out of place, so the plaintext is read once). Both buffers go back
//! to the per-thread pool whenever they are empty, so an idle connection holds none.
//! The relay copies through this stream; it never peels (it always transforms bytes).

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

use super::aead::{ChunkOpener, ChunkSealer, Error, OpenTo};
use super::ss2022;
use super::stream_cipher::{StreamCrypt, CFB_SLACK};
use crate::relay::pool;
use crate::transport::{BoxStream, ReadAhead, Stream};

/// How long a client waits for the first payload before sending its header alone (as Xray).
pub const FIRST_PAYLOAD_WAIT: Duration = Duration::from_millis(100);
/// Plaintext sealed per `poll_write` at most (the relay's largest copy buffer).
const WRITE_MAX: usize = pool::MAX_SIZE;
/// Smallest output buffer taken from the pool, so small writes share one size.
const OUT_MIN: usize = 16 * 1024;
/// Largest read-ahead buffer: a full relay buffer's worth of chunks with their framing.
const READ_MAX: usize = pool::MAX_SIZE + pool::MAX_SIZE / 16;

/// The decrypting half of a connection.
pub enum Opener {
    Plain,
    Stream(StreamCrypt),
    Aead(ChunkOpener),
}

impl Opener {
    /// Bytes of the next unit that can fail authentication (0: none can).
    fn unit_len(&self) -> usize {
        match self {
            Opener::Aead(o) => o.unit_len(),
            Opener::Plain | Opener::Stream(_) => 0,
        }
    }

    /// Decrypts the next unit at the start of `buf` into `dst` (non-empty), or in place when an
    /// AEAD chunk does not fit it.
    fn open_to(&mut self, buf: &mut [u8], dst: &mut [u8]) -> Result<OpenTo, Error> {
        match self {
            Opener::Aead(o) => o.open_to(buf, dst),
            Opener::Plain | Opener::Stream(_) => {
                if buf.is_empty() {
                    return Ok(OpenTo::Need(1));
                }
                let n = buf.len().min(dst.len());
                match self {
                    Opener::Stream(s) => s.apply_to(&buf[..n], &mut dst[..n]),
                    _ => dst[..n].copy_from_slice(&buf[..n]),
                }
                Ok(OpenTo::Written {
                    consumed: n,
                    written: n,
                })
            }
        }
    }
}

/// Sealed bytes waiting for the socket, in a pooled buffer that stays initialised (sealing
/// never zeroes it again).
#[derive(Default)]
pub struct OutBuf {
    buf: Option<Box<[u8]>>,
    len: usize,
    pos: usize,
}

impl OutBuf {
    /// Makes room for `n` more bytes after the pending ones (one buffer for a whole write).
    pub fn reserve(&mut self, n: usize) {
        let need = self.len + n;
        if self.buf.as_ref().map_or(0, |b| b.len()) < need {
            let mut nb = pool::take(need.max(OUT_MIN));
            if let Some(old) = self.buf.take() {
                nb[..self.len].copy_from_slice(&old[..self.len]);
                pool::put(old);
            }
            self.buf = Some(nb);
        }
    }

    /// `n` writable bytes after the pending ones; [`OutBuf::commit`] what was used.
    pub fn room(&mut self, n: usize) -> &mut [u8] {
        let need = self.len + n;
        self.reserve(n);
        match self.buf.as_mut() {
            Some(b) => &mut b[self.len..need],
            None => &mut [],
        }
    }

    pub fn commit(&mut self, n: usize) {
        self.len += n;
    }

    pub fn push(&mut self, data: &[u8]) {
        self.room(data.len()).copy_from_slice(data);
        self.commit(data.len());
    }

    fn pending(&self) -> &[u8] {
        match &self.buf {
            Some(b) => &b[self.pos..self.len],
            None => &[],
        }
    }

    fn is_empty(&self) -> bool {
        self.pos == self.len
    }

    /// Everything was written: hand the buffer back to the pool.
    fn release(&mut self) {
        self.len = 0;
        self.pos = 0;
        if let Some(b) = self.buf.take() {
            pool::put(b);
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
    pub fn seal(&mut self, data: &[u8], out: &mut OutBuf) {
        match self {
            Sealer::Aead(s) => {
                let mc = s.max_chunk().max(1);
                let (full, rest) = (data.len() / mc, data.len() % mc);
                let rest = if rest > 0 { s.sealed_len(rest) } else { 0 };
                out.reserve(full * s.sealed_len(mc) + rest);
                for c in data.chunks(mc) {
                    let w = s.seal_chunk_to(c, out.room(s.sealed_len(c.len())));
                    out.commit(w);
                }
            }
            Sealer::Plain => out.push(data),
            Sealer::Stream(c) => {
                c.apply_to(data, out.room(data.len() + CFB_SLACK));
                out.commit(data.len());
            }
        }
    }
}

/// Read-ahead sizes for an edition whose chunks need `rcap` bytes: up to [`READ_MAX`].
fn read_ahead_size(rcap: usize) -> pool::Adaptive {
    pool::Adaptive::new(rcap, rcap, READ_MAX.max(rcap))
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
    /// Smallest read-ahead buffer (the edition's: it must hold one whole chunk).
    pub rcap: usize,
}

/// A Shadowsocks connection positioned after the request header.
pub struct SsStream {
    inner: BoxStream,
    rkey: ReadKey,
    /// Ciphertext read ahead, and plaintext of a chunk opened in place not taken yet; its
    /// size grows from the edition's minimum up to [`READ_MAX`] while reads fill it.
    ra: ReadAhead,
    front: Bytes,
    eof: bool,
    sealer: Sealer,
    head: Vec<u8>,
    out: OutBuf,
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
        s.ra = ReadAhead::with_prefill(read_ahead_size(p.rcap), &p.prefill);
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
            ra: ReadAhead::new(read_ahead_size(rcap)),
            front: Bytes::new(),
            eof: false,
            sealer,
            head,
            out: OutBuf::default(),
            req,
            timer: None,
        }
    }

    /// The raw bytes this client sends before its first sealed output (its salt or IV) while
    /// they have not left yet.
    pub fn client_iv(&self) -> &[u8] {
        &self.head
    }

    /// The read-ahead size reads currently aim for (for tests).
    #[cfg(test)]
    fn read_ahead_size(&self) -> usize {
        self.ra.target_size()
    }

    /// Whether the connection currently holds pooled buffers (for tests).
    pub fn holds_buffers(&self) -> bool {
        self.ra.holds_buffer() || self.out.buf.is_some()
    }

    /// The stream under the cipher, for draining a connection that failed after its header:
    /// what was read ahead (and not decrypted) is dropped, as shadowsocks-rust does.
    pub fn into_inner(self) -> BoxStream {
        self.inner
    }

    /// Makes the socket underneath close with an RST (SO_LINGER 0).
    fn reset_on_close(&self) {
        if let Some(crate::transport::RawSocket::Tcp(t)) = self.inner.socket() {
            let _ = socket2::SockRef::from(t).set_linger(Some(std::time::Duration::ZERO));
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

    fn push_head(&mut self) {
        if !self.head.is_empty() {
            let head = std::mem::take(&mut self.head);
            self.out.push(&head);
        }
    }

    /// Seals the pending client request with as much of `payload` as fits; returns bytes taken.
    fn emit_request(&mut self, payload: &[u8]) -> usize {
        let req = std::mem::replace(&mut self.req, Request::Sent);
        self.push_head();
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
                Sealer::Aead(s) => {
                    let mut v = Vec::new();
                    let k = ss2022::seal_request(s, &addr, payload, &mut v);
                    self.out.push(&v);
                    k
                }
                _ => 0,
            },
        }
    }

    /// Writes buffered output to the inner stream, then releases the output buffer.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.out.is_empty() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, self.out.pending()))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.out.pos += n;
        }
        self.out.release();
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
        if !me.out.is_empty() {
            if let Poll::Ready(Err(e)) = me.poll_drain(cx) {
                return Poll::Ready(Err(e));
            }
        }
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        if !me.front.is_empty() {
            let n = me.front.len().min(buf.remaining());
            buf.put_slice(&me.front[..n]);
            me.front.advance(n);
            if me.front.is_empty() {
                // Drop the allocation behind it (up to a whole 2022 initial payload).
                me.front = Bytes::new();
            }
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        loop {
            if me.ra.has_plain() {
                me.ra.take_plain_into(buf);
                if buf.remaining() == 0 {
                    return Poll::Ready(Ok(()));
                }
            }
            let need = match &mut me.rkey {
                ReadKey::Failed => return Poll::Ready(Err(io::ErrorKind::InvalidData.into())),
                ReadKey::AwaitSalt(n, _) => {
                    let n = *n;
                    if me.ra.pending_len() >= n {
                        let ReadKey::AwaitSalt(_, f) =
                            std::mem::replace(&mut me.rkey, ReadKey::Failed)
                        else {
                            continue;
                        };
                        me.rkey = ReadKey::Ready(f(&me.ra.pending()[..n])?);
                        me.ra.consume(n);
                        continue;
                    }
                    n
                }
                ReadKey::Ready(op) => {
                    let unit = op.unit_len();
                    match op.open_to(me.ra.pending_mut(), buf.initialize_unfilled()) {
                        Ok(OpenTo::Written { consumed, written }) => {
                            me.ra.consume(consumed);
                            buf.advance(written);
                            if buf.remaining() == 0 {
                                return Poll::Ready(Ok(()));
                            }
                            continue;
                        }
                        Ok(OpenTo::InPlace { consumed, plain }) => {
                            me.ra.set_plain(plain);
                            me.ra.consume(consumed);
                            continue;
                        }
                        Ok(OpenTo::Need(n)) => n,
                        Err(e) => {
                            me.rkey = ReadKey::Failed;
                            // shadowsocks-rust reads each unit exactly and closes on the one
                            // that fails: bytes already past it stay unread in its socket, so
                            // the client gets an RST. Do the same.
                            if me.ra.pending_len() > unit {
                                me.reset_on_close();
                            }
                            // What was opened before the bad unit is still handed over (the
                            // next read returns the error).
                            if buf.filled().len() > before {
                                return Poll::Ready(Ok(()));
                            }
                            return Poll::Ready(Err(e.into()));
                        }
                    }
                }
            };
            if buf.filled().len() > before {
                me.ra.release_if_empty();
                return Poll::Ready(Ok(()));
            }
            if me.eof {
                return Poll::Ready(if me.ra.pending_len() == 0 {
                    Ok(())
                } else {
                    Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "connection closed inside a chunk",
                    ))
                });
            }
            if need > me.ra.max_size() {
                return Poll::Ready(Err(Error::TooLong(need).into()));
            }
            // Pending: the read-ahead gave an empty buffer back.
            if ready!(me.ra.poll_fill(cx, Pin::new(&mut me.inner), need))? == 0 {
                me.eof = true;
                me.ra.release_if_empty();
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
            me.push_head();
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

impl Stream for SsStream {}

#[cfg(test)]
mod tests {
    use super::super::aead::AEAD_MAX_CHUNK;
    use super::super::cipher::{AeadAlg, AeadCipher};
    use super::super::inbound::AEAD_RBUF;
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn opener(k: u8) -> ChunkOpener {
        ChunkOpener::new(
            AeadCipher::new(AeadAlg::Aes128Gcm, &[k; 16]).unwrap(),
            12,
            AEAD_MAX_CHUNK,
        )
    }

    fn sealer(k: u8) -> ChunkSealer {
        ChunkSealer::new(
            AeadCipher::new(AeadAlg::Aes128Gcm, &[k; 16]).unwrap(),
            12,
            AEAD_MAX_CHUNK,
        )
    }

    /// A client and a server stream over a duplex pipe (keys fixed, salts already exchanged).
    fn pair() -> (SsStream, SsStream) {
        let (a, b) = tokio::io::duplex(256 * 1024);
        let client = SsStream::client(
            Box::new(a),
            0,
            Box::new(|_| Ok(Opener::Aead(opener(2)))),
            Sealer::Aead(sealer(1)),
            Vec::new(),
            Request::Address(vec![1, 127, 0, 0, 1, 0, 80]),
            AEAD_RBUF,
        );
        let server = SsStream::server(
            Box::new(b),
            ServerParts {
                opener: Opener::Aead(opener(1)),
                prefill: Vec::new(),
                front: Bytes::new(),
                sealer: Sealer::Aead(sealer(2)),
                head: Vec::new(),
                rcap: AEAD_RBUF,
            },
        );
        (client, server)
    }

    #[tokio::test]
    async fn bulk_both_ways_then_idle_connections_hold_no_buffers() {
        let (mut c, mut s) = pair();
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 31 / 7) as u8).collect();
        // The server reads the 7-byte address first.
        let mut addr = [0u8; 7];
        let d2 = data.clone();
        let w = tokio::spawn(async move {
            for part in d2.chunks(70_000) {
                c.write_all(part).await.unwrap();
            }
            c.flush().await.unwrap();
            c
        });
        s.read_exact(&mut addr).await.unwrap();
        assert_eq!(addr, [1, 127, 0, 0, 1, 0, 80]);
        let mut got = vec![0u8; data.len()];
        // Odd read sizes: chunks land partly in place, partly straight in the caller's buffer.
        let mut at = 0;
        for (i, step) in [100usize, 20_000, 16_383, 50_000, 7]
            .iter()
            .cycle()
            .enumerate()
        {
            if at == got.len() {
                break;
            }
            let end = (at + step + i).min(got.len());
            let n = s.read(&mut got[at..end]).await.unwrap();
            assert!(n > 0);
            at += n;
        }
        assert_eq!(got, data);
        let mut c = w.await.unwrap();
        assert!(
            !c.holds_buffers(),
            "client keeps a buffer after its writes left"
        );
        // Nothing more to read: the read is pending and the server gave its buffers back.
        let mut one = [0u8; 1];
        let r = tokio::time::timeout(Duration::from_millis(50), s.read(&mut one)).await;
        assert!(r.is_err());
        assert!(!s.holds_buffers(), "idle server stream keeps a buffer");
        // The other way, and the client's read side releases as well.
        s.write_all(&data[..40_000]).await.unwrap();
        let mut back = vec![0u8; 40_000];
        c.read_exact(&mut back).await.unwrap();
        assert_eq!(back, &data[..40_000]);
        let r = tokio::time::timeout(Duration::from_millis(50), c.read(&mut one)).await;
        assert!(r.is_err());
        assert!(!c.holds_buffers() && !s.holds_buffers());
    }

    #[tokio::test]
    async fn read_ahead_grows_under_bulk_and_keeps_partial_chunks() {
        let (mut c, mut s) = pair();
        let data: Vec<u8> = (0..3_000_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let d2 = data.clone();
        let w = tokio::spawn(async move {
            // Odd write sizes: chunk boundaries fall anywhere in the server's reads, so the
            // read-ahead often grows while part of a chunk is pending.
            let sizes = [262_144usize, 1, 99_999, 262_144, 16_384, 5, 300_000];
            let (mut at, mut k) = (0, 0);
            while at < d2.len() {
                let n = sizes[k % sizes.len()].min(d2.len() - at);
                c.write_all(&d2[at..at + n]).await.unwrap();
                at += n;
                k += 1;
            }
            c.shutdown().await.unwrap();
            c
        });
        let mut addr = [0u8; 7];
        s.read_exact(&mut addr).await.unwrap();
        let (mut got, mut buf, mut largest) = (Vec::new(), vec![0u8; pool::MAX_SIZE], 0);
        loop {
            let n = s.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
            largest = largest.max(s.read_ahead_size());
        }
        assert_eq!(got.len(), data.len());
        assert!(got == data, "plaintext differs");
        assert!(
            largest > AEAD_RBUF,
            "read-ahead stayed at {largest} bytes under bulk traffic"
        );
        assert!(largest <= READ_MAX);
        drop(w.await.unwrap());
    }
}
