//! A REALITY connection after its handshake: TLS 1.3 records over any [`Stream`], decrypted in
//! place in one pooled buffer, one record at a time as the reader asks. So at every moment the
//! stream holds at most one record's plaintext not yet read and, after it, ciphertext not yet
//! decrypted; that is what XTLS Vision needs to leave TLS mid-connection ([`OuterTls`]).

use std::io;
use std::ops::Range;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::keys::{Suite, TrafficKey};
use super::record::{self, HEADER, MAX_PLAIN, TAG};
use crate::relay::pool;
use crate::transport::tls::OuterTls;
use crate::transport::{poll_write_all, BoxStream, RawSocket, Stream};

/// Ciphertext buffer: several full records per read syscall.
const RX_SIZE: usize = 64 * 1024;
/// Plaintext sealed per write call at most (four full records).
const WRITE_CHUNK: usize = 4 * MAX_PLAIN;
/// Records sealed with one key before it is replaced by a KeyUpdate: RFC 8446 §5.5 allows
/// 2^24.5 full records under AES-GCM; rustls and Go update at 2^24 too (ChaCha20 has no
/// practical limit, one rule for all keeps it simple).
const KEY_LIMIT: u64 = 1 << 24;

/// One direction's key and the secret it came from (for KeyUpdate).
pub struct Direction {
    pub key: TrafficKey,
    pub secret: Vec<u8>,
}

impl Direction {
    pub fn new(suite: Suite, secret: Vec<u8>) -> Direction {
        Direction {
            key: TrafficKey::new(suite, &secret),
            secret,
        }
    }

    /// RFC 8446 §7.2: the next generation of this direction's secret.
    fn update(&mut self, suite: Suite) {
        let h = suite.hash();
        self.secret = h.expand_label(&self.secret, "traffic upd", &[], h.size());
        self.key = TrafficKey::new(suite, &self.secret);
    }
}

/// A TLS 1.3 connection after its handshake (REALITY's or rustls's).
pub struct Tls13Stream {
    io: BoxStream,
    /// `io` handed its read side over: read its socket directly when readable.
    direct_read: bool,
    suite: Suite,
    read: Direction,
    write: Direction,
    rx: Option<Box<[u8]>>,
    /// `rx[plain]`: decrypted, not yet read; `rx[start..len]`: ciphertext not yet decrypted.
    plain: Range<usize>,
    start: usize,
    len: usize,
    /// Records sealed and not yet written out.
    tx: Vec<u8>,
    tx_pos: usize,
    eof: bool,
    /// close_notify received.
    closed: bool,
    close_sent: bool,
    /// The peer asked for a KeyUpdate: ours goes out with the next write.
    update_owed: bool,
    one_record: bool,
    raw_read: bool,
    raw_write: bool,
    /// Made by REALITY (not handed over from rustls).
    reality: bool,
}

impl Tls13Stream {
    /// Marks a connection REALITY made (its server and client).
    pub fn of_reality(mut self) -> Self {
        self.reality = true;
        self
    }

    /// The connection over `io` after a handshake that left `held` (ciphertext already read).
    pub fn new(
        mut io: BoxStream,
        held: &[u8],
        suite: Suite,
        read: Direction,
        write: Direction,
    ) -> Self {
        let mut pre = held.to_vec();
        let direct_read = match io
            .socket()
            .is_some()
            .then(|| io.take_read_direct())
            .flatten()
        {
            Some(more) => {
                pre.extend_from_slice(&more);
                true
            }
            None => false,
        };
        let (rx, len) = if pre.is_empty() {
            (None, 0)
        } else {
            let mut b = pool::take(RX_SIZE.max(pre.len()));
            b[..pre.len()].copy_from_slice(&pre);
            (Some(b), pre.len())
        };
        let mut s = Tls13Stream::bare(io, direct_read, suite, read, write);
        s.rx = rx;
        s.len = len;
        s
    }

    fn bare(
        io: BoxStream,
        direct_read: bool,
        suite: Suite,
        read: Direction,
        write: Direction,
    ) -> Self {
        Tls13Stream {
            io,
            direct_read,
            suite,
            read,
            write,
            rx: None,
            plain: 0..0,
            start: 0,
            len: 0,
            tx: Vec::new(),
            tx_pos: 0,
            eof: false,
            closed: false,
            close_sent: false,
            update_owed: false,
            one_record: false,
            raw_read: false,
            raw_write: false,
            reality: false,
        }
    }

    /// The connection over `io` after a handshake another engine (rustls) ran over it: `rx`
    /// (a pooled buffer, taken over) holds in `cipher` the ciphertext read and not yet
    /// decrypted; `plain` was decrypted and not yet read; `direct_read` says whether `io`
    /// already handed its read side over; `eof` whether the peer closed.
    #[allow(clippy::too_many_arguments)]
    pub fn after_handshake(
        io: BoxStream,
        direct_read: bool,
        eof: bool,
        rx: Option<Box<[u8]>>,
        cipher: Range<usize>,
        plain: &[u8],
        suite: Suite,
        read: Direction,
        write: Direction,
    ) -> Self {
        let (rx, plain_at, start, len) = match rx {
            Some(b) if cipher.start >= plain.len() => {
                let mut b = b;
                let p = cipher.start - plain.len();
                b[p..cipher.start].copy_from_slice(plain);
                (Some(b), p..cipher.start, cipher.start, cipher.end)
            }
            Some(b) => {
                let c = cipher.len();
                let mut n = pool::take(RX_SIZE.max(plain.len() + c));
                n[..plain.len()].copy_from_slice(plain);
                n[plain.len()..plain.len() + c].copy_from_slice(&b[cipher]);
                pool::put(b);
                let p = plain.len();
                (Some(n), 0..p, p, p + c)
            }
            None if !plain.is_empty() => {
                let mut n = pool::take(RX_SIZE.max(plain.len()));
                n[..plain.len()].copy_from_slice(plain);
                let p = plain.len();
                (Some(n), 0..p, p, p)
            }
            None => (None, 0..0, 0, 0),
        };
        let mut s = Tls13Stream::bare(io, direct_read, suite, read, write);
        s.eof = eof;
        s.rx = rx;
        s.plain = plain_at;
        s.start = start;
        s.len = len;
        s
    }

    /// The stream under TLS.
    pub fn get_ref(&self) -> &BoxStream {
        &self.io
    }

    /// Decrypts the next complete record in `rx`, if there is one: `Ok(true)` when one was
    /// processed (its plaintext, possibly empty, is in `plain`).
    fn open_next(&mut self) -> io::Result<bool> {
        let Some(rx) = self.rx.as_deref_mut() else {
            return Ok(false);
        };
        let Some((ty, body)) = record::header(&rx[self.start..self.len]) else {
            return Ok(false);
        };
        if body > record::MAX_BODY {
            return Err(invalid("TLS record too long"));
        }
        if self.start + HEADER + body > self.len {
            if self.start + HEADER + body > rx.len() {
                // Make room for the whole record at the front.
                rx.copy_within(self.start..self.len, 0);
                self.len -= self.start;
                self.start = 0;
            }
            return Ok(false);
        }
        let end = self.start + HEADER + body;
        if ty == record::CHANGE_CIPHER_SPEC && body == 1 && rx[self.start + HEADER] == 1 {
            // A middlebox-compatibility CCS late in the flight: ignored, as TLS 1.3 allows.
            self.start = end;
            self.plain = end..end;
            return Ok(true);
        }
        let (inner, content) = record::open(&mut self.read.key, &mut rx[self.start..end])
            .map_err(|e| invalid(&format!("TLS record: {e:?}")))?;
        let content = self.start + content.start..self.start + content.end;
        self.start = end;
        match inner {
            record::APPLICATION_DATA => self.plain = content,
            record::HANDSHAKE => {
                self.plain = end..end;
                self.post_handshake(content)?;
            }
            record::ALERT => {
                self.plain = end..end;
                let a = &rx[content];
                if a.len() == 2 && a[1] == 0 {
                    self.closed = true;
                } else {
                    return Err(invalid(&format!("TLS alert {a:?} from the peer")));
                }
            }
            other => return Err(invalid(&format!("TLS record of type {other}"))),
        }
        Ok(true)
    }

    /// Handshake messages after the handshake: tickets are dropped, KeyUpdate honoured.
    #[allow(
        clippy::expect_used,
        clippy::unwrap_used,
        reason = "state the read path set just before"
    )]
    fn post_handshake(&mut self, content: Range<usize>) -> io::Result<()> {
        let rx = self.rx.as_deref().expect("a record was just read");
        let mut m = &rx[content];
        while m.len() >= 4 {
            let len = 4 + ((m[1] as usize) << 16 | (m[2] as usize) << 8 | m[3] as usize);
            if m.len() < len {
                return Err(invalid("handshake message split across records"));
            }
            match m[0] {
                record::NEW_SESSION_TICKET => {}
                record::KEY_UPDATE if len == 5 => {
                    self.read.update(self.suite);
                    if m[4] == 1 {
                        self.update_owed = true;
                    }
                }
                t => return Err(invalid(&format!("unexpected handshake message {t}"))),
            }
            m = &m[len..];
        }
        if !m.is_empty() {
            return Err(invalid("handshake message split across records"));
        }
        Ok(())
    }

    /// Reads more ciphertext; sets `eof` when the peer closed.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.start == self.len && self.plain.is_empty() {
            (self.start, self.len, self.plain) = (0, 0, 0..0);
        }
        if let Some(b) = self.rx.as_deref_mut() {
            if self.len == b.len() {
                // Full: move what is not yet read to the front.
                let from = self.plain.start.min(self.start);
                b.copy_within(from..self.len, 0);
                self.plain = self.plain.start - from..self.plain.end - from;
                self.start -= from;
                self.len -= from;
                if self.len == b.len() {
                    return Poll::Ready(Err(invalid("TLS record too long")));
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
        self.eof |= n == 0;
        self.len += n;
        Poll::Ready(Ok(()))
    }

    /// Writes out the sealed records.
    fn poll_flush_tx(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.tx_pos < self.tx.len() {
            ready!(poll_write_all(&mut self.io, cx, &self.tx, &mut self.tx_pos))?;
        }
        self.tx.clear();
        self.tx_pos = 0;
        if self.tx.capacity() > 2 * (HEADER + MAX_PLAIN + 1 + TAG) {
            self.tx = Vec::new();
        }
        Poll::Ready(Ok(()))
    }

    /// Seals `bufs` (up to [`WRITE_CHUNK`] bytes) into records in `tx`; returns how much.
    fn seal(&mut self, bufs: &[io::IoSlice<'_>]) -> usize {
        if self.write.key.seq() + (WRITE_CHUNK / MAX_PLAIN) as u64 + 1 >= KEY_LIMIT {
            // Our key is near its limit: move it on (update_requested = 0, as rustls does).
            let mut m = Vec::new();
            record::message(record::KEY_UPDATE, &[0], &mut m);
            record::seal(&mut self.write.key, record::HANDSHAKE, &m, 0, &mut self.tx);
            self.write.update(self.suite);
        }
        if self.update_owed {
            self.update_owed = false;
            let mut m = Vec::new();
            record::message(record::KEY_UPDATE, &[0], &mut m);
            record::seal(&mut self.write.key, record::HANDSHAKE, &m, 0, &mut self.tx);
            self.write.update(self.suite);
        }
        let total: usize = bufs.iter().map(|b| b.len()).sum::<usize>().min(WRITE_CHUNK);
        let mut taken = 0;
        let mut slices = bufs.iter().map(|b| &b[..]).filter(|b| !b.is_empty());
        let mut cur: &[u8] = slices.next().unwrap_or(&[]);
        while taken < total {
            let n = (total - taken).min(MAX_PLAIN);
            let start = self.tx.len();
            self.tx.reserve(HEADER + n + 1 + TAG);
            self.tx
                .extend_from_slice(&[record::APPLICATION_DATA, 3, 3, 0, 0]);
            let mut left = n;
            while left > 0 {
                if cur.is_empty() {
                    cur = slices.next().unwrap_or(&[]);
                    continue;
                }
                let k = left.min(cur.len());
                self.tx.extend_from_slice(&cur[..k]);
                cur = &cur[k..];
                left -= k;
            }
            self.tx.push(record::APPLICATION_DATA);
            let body = (n + 1 + TAG) as u16;
            self.tx[start + 3..start + 5].copy_from_slice(&body.to_be_bytes());
            let (head, rest) = self.tx[start..].split_at_mut(HEADER);
            let tag = self.write.key.seal(head, rest);
            self.tx.extend_from_slice(&tag);
            taken += n;
        }
        taken
    }

    fn release_idle(&mut self) {
        if self.plain.is_empty() && self.start == self.len {
            if let Some(b) = self.rx.take() {
                pool::put(b);
            }
            (self.start, self.len, self.plain) = (0, 0, 0..0);
        }
    }

    fn poll_read_raw(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        poll_read_under(&mut self.io, self.direct_read, cx, buf)
    }
}

/// After TLS stopped in the read direction: reads the stream under it as it is, from its socket
/// directly when `direct_read` (the stream handed its read side over).
pub(crate) fn poll_read_under(
    io: &mut BoxStream,
    direct_read: bool,
    cx: &mut Context<'_>,
    buf: &mut ReadBuf<'_>,
) -> Poll<io::Result<()>> {
    if !direct_read {
        return Pin::new(io).poll_read(cx, buf);
    }
    let Some(sock) = io.socket() else {
        return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
    };
    let n = ready!(sock.poll_read_into(cx, buf.initialize_unfilled()))?;
    buf.advance(n);
    Poll::Ready(Ok(()))
}

fn invalid(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("TLS: {msg}"))
}

impl Drop for Tls13Stream {
    fn drop(&mut self) {
        if let Some(b) = self.rx.take() {
            pool::put(b);
        }
        self.close_notify_now();
    }
}

impl Tls13Stream {
    /// Dropped without a shutdown (Ferry closing the connection itself: a bad request, a
    /// timeout): close_notify if the socket takes it at once, as Go's `Conn.Close` sends it
    /// (waiting is not possible here); a bare FIN would tell Ferry apart.
    fn close_notify_now(&mut self) {
        if self.close_sent || self.raw_write {
            return;
        }
        let mut cx = Context::from_waker(std::task::Waker::noop());
        // Not behind a record half written.
        if !matches!(self.poll_flush_tx(&mut cx), Poll::Ready(Ok(()))) {
            return;
        }
        record::seal(&mut self.write.key, record::ALERT, &[1, 0], 0, &mut self.tx);
        self.close_sent = true;
        let _ = self.poll_flush_tx(&mut cx);
    }
}

impl AsyncRead for Tls13Stream {
    #[allow(
        clippy::expect_used,
        clippy::unwrap_used,
        reason = "state the read path set just before"
    )]
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
            if !me.plain.is_empty() {
                let rx = me.rx.as_deref().expect("plaintext lives in rx");
                let n = me.plain.len().min(buf.remaining());
                buf.put_slice(&rx[me.plain.start..me.plain.start + n]);
                me.plain.start += n;
                if buf.remaining() == 0 || me.one_record || !me.plain.is_empty() {
                    return Poll::Ready(Ok(()));
                }
            }
            if me.closed {
                return Poll::Ready(Ok(()));
            }
            if me.open_next()? {
                if me.update_owed {
                    // Our KeyUpdate goes out now if the socket takes it, else with the next write.
                    let _ = me.seal(&[]);
                    let _ = me.poll_flush_tx(cx)?;
                }
                continue;
            }
            if buf.filled().len() > start {
                return Poll::Ready(Ok(()));
            }
            if me.eof {
                if me.start < me.len {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "TLS: peer closed in the middle of a TLS record",
                    )));
                }
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

impl AsyncWrite for Tls13Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[io::IoSlice::new(buf)])
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
        ready!(me.poll_flush_tx(cx))?;
        if bufs.iter().all(|b| b.is_empty()) {
            return Poll::Ready(Ok(0));
        }
        let n = me.seal(bufs);
        // Best effort now; what the socket does not take goes with the next write or flush.
        if let Poll::Ready(Err(e)) = me.poll_flush_tx(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        ready!(me.poll_flush_tx(cx))?;
        Pin::new(&mut me.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if !me.close_sent && !me.raw_write {
            ready!(me.poll_flush_tx(cx))?;
            record::seal(&mut me.write.key, record::ALERT, &[1, 0], 0, &mut me.tx);
            me.close_sent = true;
        }
        ready!(me.poll_flush_tx(cx))?;
        Pin::new(&mut me.io).poll_shutdown(cx)
    }
}

impl Stream for Tls13Stream {
    fn socket(&self) -> Option<RawSocket<'_>> {
        self.io.socket()
    }
    fn outer_tls(&mut self) -> Option<&mut dyn OuterTls> {
        Some(self)
    }
}

impl OuterTls for Tls13Stream {
    fn is_tls13(&self) -> bool {
        true
    }

    fn is_reality(&self) -> bool {
        self.reality
    }

    fn set_record_at_a_time(&mut self, on: bool) {
        self.one_record = on;
    }

    fn decrypted(&mut self) -> io::Result<Vec<u8>> {
        let out = match &self.rx {
            Some(b) => b[self.plain.clone()].to_vec(),
            None => Vec::new(),
        };
        self.plain.start = self.plain.end;
        Ok(out)
    }

    fn read_raw(&mut self) -> io::Result<Vec<u8>> {
        let mut out = self.decrypted()?;
        if let Some(b) = self.rx.take() {
            out.extend_from_slice(&b[self.start..self.len]);
            pool::put(b);
        }
        (self.start, self.len, self.plain) = (0, 0, 0..0);
        self.raw_read = true;
        Ok(out)
    }

    fn write_raw(&mut self) {
        self.raw_write = true;
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    fn pair() -> (Tls13Stream, Tls13Stream) {
        let (a, b) = tokio::io::duplex(1 << 20);
        let s = Suite::Aes128Gcm;
        let c2s = vec![1u8; 32];
        let s2c = vec![2u8; 32];
        let client = Tls13Stream::new(
            Box::new(a),
            &[],
            s,
            Direction::new(s, s2c.clone()),
            Direction::new(s, c2s.clone()),
        );
        let server = Tls13Stream::new(
            Box::new(b),
            &[],
            s,
            Direction::new(s, c2s),
            Direction::new(s, s2c),
        );
        (client, server)
    }

    #[tokio::test]
    async fn bytes_cross_both_ways_and_close_notify_ends_the_stream() {
        let (mut c, mut s) = pair();
        let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7) as u8).collect();
        let d = data.clone();
        let w = tokio::spawn(async move {
            c.write_all(&d).await.unwrap();
            c.shutdown().await.unwrap();
            c
        });
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, data);
        let mut c = w.await.unwrap();
        s.write_all(b"back").await.unwrap();
        s.flush().await.unwrap();
        let mut b = [0u8; 4];
        c.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"back");
    }

    #[tokio::test]
    async fn one_record_mode_leaves_the_rest_undecrypted_for_a_switch_to_raw() {
        let (mut c, mut s) = pair();
        c.write_all(b"first").await.unwrap();
        c.write_all(b"second").await.unwrap();
        c.flush().await.unwrap();
        // Then raw bytes, as a Vision peer writes after its switch.
        c.write_raw();
        c.write_all(b"raw!").await.unwrap();
        c.flush().await.unwrap();
        s.set_record_at_a_time(true);
        let mut b = [0u8; 3];
        s.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"fir");
        assert_eq!(s.decrypted().unwrap(), b"st");
        let mut b = [0u8; 6];
        s.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"second");
        let held = s.read_raw().unwrap();
        let mut rest = vec![0u8; 4 - held.len()];
        s.read_exact(&mut rest).await.unwrap();
        assert_eq!([held, rest].concat(), b"raw!");
    }

    #[tokio::test]
    async fn a_key_update_from_the_peer_is_followed() {
        let (mut c, mut s) = pair();
        // The client asks for an update (update_requested = 1) and moves its own key on.
        let mut m = Vec::new();
        record::message(record::KEY_UPDATE, &[1], &mut m);
        record::seal(&mut c.write.key, record::HANDSHAKE, &m, 0, &mut c.tx);
        c.write.update(Suite::Aes128Gcm);
        c.write_all(b"after update").await.unwrap();
        c.flush().await.unwrap();
        let mut b = [0u8; 12];
        s.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"after update");
        // The server answers with its own update before its next data.
        s.write_all(b"reply").await.unwrap();
        s.flush().await.unwrap();
        let mut b = [0u8; 5];
        c.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"reply");
    }
}
