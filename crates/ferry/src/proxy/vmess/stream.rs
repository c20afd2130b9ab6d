//! The VMess body as a [`Stream`]: writes become sealed chunks (several per syscall), reads
//! open chunks in place. The client side also reads the response header first and sends its
//! request header together with the first payload.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

use super::body::{BodyError, OpenedInto, Opener, Sealer, MAX_CHUNK};
use super::header::{self, CfbDec};
use crate::relay::pool;
use crate::transport::{BoxStream, ReadAhead, Stream};

/// Read buffer: one read brings many chunks (16 of Xray's 8 KiB ones).
const READ_BUF: usize = 128 * 1024;
/// Write buffer: sealed chunks collect here until it is full, a flush, a read or shutdown.
const WRITE_BUF: usize = 128 * 1024;
/// `none` over TCP: chunks per vectored write at most (two slices each).
const VEC_CHUNKS: usize = 16;
/// How long a client holds its request header waiting for the first payload (as Xray).
pub const HEADER_HOLD: Duration = Duration::from_millis(100);

/// A response header the client still has to read.
pub enum ReadHead {
    None,
    Aead {
        key: [u8; 16],
        iv: [u8; 16],
        v: u8,
    },
    Legacy {
        dec: Box<CfbDec>,
        v: u8,
        /// Cmd length once the first 4 bytes are decrypted.
        cmd_len: Option<usize>,
        /// Legacy security: the body continues this CFB stream.
        chain: bool,
    },
}

fn bad(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("vmess: {e}"))
}

impl From<BodyError> for io::Error {
    fn from(e: BodyError) -> io::Error {
        bad(e)
    }
}

/// One VMess connection's body, both directions. Both buffers come from the relay's pool
/// and go back to it when empty, so an idle connection holds none.
pub struct VmessStream {
    inner: BoxStream,
    opener: Opener,
    head: ReadHead,
    /// Bytes read ahead (unmasked once the header is read) and opened plaintext not handed
    /// out yet.
    ra: ReadAhead,
    read_done: bool,
    /// UDP: one datagram per chunk each way.
    packet: bool,
    sealer: Sealer,
    /// Sealed bytes not written yet: `wbuf[wpos..wlen]`.
    wbuf: Option<Box<[u8]>>,
    wpos: usize,
    wlen: usize,
    /// `none` over TCP on a socket that takes vectored writes: payload goes out uncopied.
    vectored: bool,
    /// The header waits in `wbuf` for the first payload.
    hold: bool,
    hold_timer: Option<Pin<Box<Sleep>>>,
    shut: bool,
}

impl VmessStream {
    /// `pending_write` is a header to send before the first chunk (held until the first write or,
    /// with `hold_for`, until that time passes). `read_ahead` holds bytes already read past the
    /// request header (server side).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        inner: BoxStream,
        sealer: Sealer,
        opener: Opener,
        head: ReadHead,
        pending_write: Vec<u8>,
        hold_for: Option<Duration>,
        read_ahead: &[u8],
        packet: bool,
    ) -> VmessStream {
        let hold = !pending_write.is_empty();
        // A held header gets a buffer of its own size: a connection that never sends (an idle
        // one, or a server whose target has not answered yet) keeps no large buffer. The first
        // payload moves it into a full-size one.
        let wbuf = hold.then(|| {
            let mut b = pool::take(pending_write.len());
            b[..pending_write.len()].copy_from_slice(&pending_write);
            b
        });
        let vectored = sealer.is_plain_stream() && !packet && inner.is_write_vectored();
        let mut s = VmessStream {
            inner,
            opener,
            head,
            ra: ReadAhead::with_prefill(pool::Adaptive::fixed(READ_BUF), read_ahead),
            read_done: false,
            packet,
            sealer,
            wbuf,
            wpos: 0,
            wlen: pending_write.len(),
            vectored,
            hold,
            hold_timer: hold_for
                .filter(|_| hold)
                .map(|d| Box::pin(tokio::time::sleep(d))),
            shut: false,
        };
        if matches!(s.head, ReadHead::None) {
            s.opener.on_read(s.ra.pending_mut());
        }
        s
    }

    /// Writes `wbuf` out; Ready(Ok) once it is empty (the buffer then goes back to the pool).
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(b) = &self.wbuf {
            while self.wpos < self.wlen {
                let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &b[self.wpos..self.wlen]))?;
                if n == 0 {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                self.wpos += n;
            }
        }
        self.wpos = 0;
        self.wlen = 0;
        if let Some(b) = self.wbuf.take() {
            pool::put(b);
        }
        Poll::Ready(Ok(()))
    }

    /// The write buffer with room for `room` more bytes behind `wlen` (drained data must be
    /// gone already when it is too small).
    fn ensure_wbuf(&mut self, room: usize) {
        let need = self.wlen + room;
        match &mut self.wbuf {
            Some(b) if b.len() >= need => {}
            Some(b) => {
                let mut nb = pool::take(WRITE_BUF.max(need));
                nb[..self.wlen].copy_from_slice(&b[..self.wlen]);
                pool::put(std::mem::replace(b, nb));
            }
            None => self.wbuf = Some(pool::take(WRITE_BUF.max(need))),
        }
    }

    /// Seals with `f` into `wbuf[wlen..wlen + room]` and counts what it wrote.
    fn seal_into_wbuf<R>(
        &mut self,
        room: usize,
        f: impl FnOnce(&mut Sealer, &mut [u8]) -> (R, usize),
    ) -> R {
        self.ensure_wbuf(room);
        let at = self.wlen;
        let (r, n) = match &mut self.wbuf {
            Some(b) => f(&mut self.sealer, &mut b[at..at + room]),
            None => f(&mut self.sealer, &mut []),
        };
        self.wlen += n;
        r
    }

    /// `none` over TCP: `[size][payload]` chunks straight from `data` in one vectored write.
    /// Only chunks the socket took (whole, or begun: their rest is copied to `wbuf`) count.
    fn poll_write_plain(&mut self, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let max = self.sealer.max_payload();
        let data = &data[..data.len().min(max * VEC_CHUNKS)];
        let mut hdrs = [[0u8; 2]; VEC_CHUNKS];
        let k = self.sealer.stream_headers(data, &mut hdrs);
        let mut slices = [io::IoSlice::new(&[]); 2 * VEC_CHUNKS];
        for (i, c) in data.chunks(max).take(k).enumerate() {
            slices[2 * i] = io::IoSlice::new(&hdrs[i]);
            slices[2 * i + 1] = io::IoSlice::new(c);
        }
        let n = ready!(Pin::new(&mut self.inner).poll_write_vectored(cx, &slices[..2 * k]))?;
        if n == 0 {
            return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
        }
        let (mut left, mut full, mut taken) = (n, 0, 0);
        for c in data.chunks(max).take(k) {
            if left < 2 + c.len() {
                break;
            }
            left -= 2 + c.len();
            full += 1;
            taken += c.len();
        }
        if left == 0 {
            self.sealer.commit_headers(full);
            return Poll::Ready(Ok(taken));
        }
        // Chunk `full` went out in part: the rest of it goes first on the next write.
        let c = data.chunks(max).nth(full).unwrap_or(&[]);
        let hdr = hdrs.get(full).copied().unwrap_or_default();
        let rest_hdr = &hdr[left.min(2)..];
        let rest_payload = &c[left.saturating_sub(2).min(c.len())..];
        let room = rest_hdr.len() + rest_payload.len();
        self.seal_into_wbuf(room, |_, b| {
            b[..rest_hdr.len()].copy_from_slice(rest_hdr);
            b[rest_hdr.len()..].copy_from_slice(rest_payload);
            ((), room)
        });
        self.sealer.commit_headers(full + 1);
        Poll::Ready(Ok(taken + c.len()))
    }

    /// Decodes the response header at the front of the read-ahead; `Ok(Some(n))` asks for `n`
    /// bytes.
    fn read_head(&mut self) -> io::Result<Option<usize>> {
        if matches!(self.head, ReadHead::None) {
            return Ok(None);
        }
        let rbuf = self.ra.pending_mut();
        let avail = rbuf.len();
        let used = match &mut self.head {
            ReadHead::None => return Ok(None),
            ReadHead::Aead { key, iv, v } => {
                if avail < 18 {
                    return Ok(Some(18));
                }
                let l = header::open_aead_response_length(key, iv, &rbuf[..18]).map_err(bad)?;
                if avail < 18 + l + 16 {
                    return Ok(Some(18 + l + 16));
                }
                header::open_aead_response(key, iv, *v, &mut rbuf[18..18 + l + 16]).map_err(bad)?;
                18 + l + 16
            }
            ReadHead::Legacy {
                dec,
                v,
                cmd_len,
                chain,
            } => {
                let m = match cmd_len {
                    Some(m) => *m,
                    None => {
                        if avail < 4 {
                            return Ok(Some(4));
                        }
                        dec.decrypt(&mut rbuf[..4]);
                        if rbuf[0] != *v {
                            return Err(bad(header::HeaderError::ResponseAuth));
                        }
                        let m = if rbuf[2] != 0 { rbuf[3] as usize } else { 0 };
                        *cmd_len = Some(m);
                        m
                    }
                };
                if avail < 4 + m {
                    return Ok(Some(4 + m));
                }
                // A SwitchAccount (dynamic port) command is skipped: not supported.
                dec.decrypt(&mut rbuf[4..4 + m]);
                if *chain {
                    let d = std::mem::replace(dec, Box::new(header::cfb_dec(&[0; 16], &[0; 16])));
                    self.opener.set_cfb(*d);
                }
                4 + m
            }
        };
        self.ra.consume(used);
        self.head = ReadHead::None;
        self.opener.on_read(self.ra.pending_mut());
        Ok(None)
    }

    /// Opens as many buffered chunks as fit into `out`.
    fn open_buffered(&mut self, out: &mut ReadBuf<'_>) -> io::Result<Step> {
        if !self.ra.holds_buffer() {
            return Ok(Step::Need(1));
        }
        let before = out.filled().len();
        loop {
            let buffered = self.ra.pending_len();
            let opened = self
                .opener
                .open_into(self.ra.pending_mut(), out.initialize_unfilled())
                .map_err(|e| {
                    tracing::info!("vmess: bad chunk, closing: {e}");
                    io::Error::from(e)
                })?;
            match opened {
                OpenedInto::Copied { len, consumed } => {
                    out.advance(len);
                    self.ra.consume(consumed);
                    if self.packet || out.remaining() == 0 {
                        return Ok(Step::Ready);
                    }
                }
                OpenedInto::InPlace {
                    start,
                    end,
                    consumed,
                } => {
                    self.ra.set_plain(start..end);
                    self.ra.consume(consumed);
                    if start < end {
                        return Ok(Step::Again);
                    }
                    tracing::debug!("vmess: empty chunk of {consumed} bytes, {buffered} buffered");
                    if self.packet {
                        // An empty datagram still counts as one.
                        return Ok(Step::Ready);
                    }
                }
                OpenedInto::Eof => {
                    tracing::debug!("vmess: end marker after {buffered} buffered bytes");
                    self.read_done = true;
                    return Ok(Step::Again);
                }
                OpenedInto::NeedMore(n) => {
                    if out.filled().len() > before {
                        return Ok(Step::Ready);
                    }
                    return Ok(Step::Need(n));
                }
            }
        }
    }
}

/// What [`VmessStream::open_buffered`] leaves to do.
enum Step {
    /// `out` is done: return it.
    Ready,
    /// Plaintext left in place or the end was found: go round again.
    Again,
    /// The read-ahead must hold this many bytes.
    Need(usize),
}

impl AsyncRead for VmessStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = &mut *self;
        if me.hold {
            if let Some(t) = &mut me.hold_timer {
                if t.as_mut().poll(cx).is_ready() {
                    me.hold = false;
                    me.hold_timer = None;
                }
            }
        }
        if !me.hold && me.wpos < me.wlen {
            // Errors surface on the next write.
            let _ = me.poll_drain(cx);
        }
        loop {
            if me.ra.has_plain() {
                me.ra.take_plain_into(out);
                if me.packet {
                    // One datagram per read: what did not fit is dropped.
                    me.ra.clear_plain();
                }
                return Poll::Ready(Ok(()));
            }
            if me.read_done {
                me.ra.release_if_empty();
                return Poll::Ready(Ok(()));
            }
            let need = match me.read_head()? {
                Some(n) => n,
                None => {
                    if me.opener.is_passthrough() && me.ra.pending_len() == 0 && !me.packet {
                        // Nothing framed or buffered: read straight into the caller's buffer.
                        me.ra.release_if_empty();
                        return Pin::new(&mut me.inner).poll_read(cx, out);
                    }
                    match me.open_buffered(out)? {
                        Step::Ready => return Poll::Ready(Ok(())),
                        Step::Again => continue,
                        Step::Need(n) => n,
                    }
                }
            };
            // Pending: the read-ahead gave an empty buffer back.
            let n = ready!(me.ra.poll_fill(cx, Pin::new(&mut me.inner), need))?;
            if n == 0 {
                if me.ra.pending_len() == 0 && matches!(me.head, ReadHead::None) {
                    // The peer closed between chunks without an end marker: treat as the end.
                    tracing::debug!("vmess: peer closed without an end marker");
                    me.read_done = true;
                    continue;
                }
                return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into()));
            }
            if matches!(me.head, ReadHead::None) {
                let fresh = me.ra.pending_mut();
                let at = fresh.len() - n;
                me.opener.on_read(&mut fresh[at..]);
            }
        }
    }
}

impl AsyncWrite for VmessStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = &mut *self;
        if me.shut {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        if !me.hold {
            if me.sealer.is_passthrough() {
                ready!(me.poll_drain(cx))?;
                return Pin::new(&mut me.inner).poll_write(cx, data);
            }
            if me.vectored {
                ready!(me.poll_drain(cx))?;
                return me.poll_write_plain(cx, data);
            }
        }
        let max = me.sealer.max_payload();
        if me.packet {
            if !me.hold {
                ready!(me.poll_drain(cx))?;
            }
            me.hold = false;
            me.hold_timer = None;
            if data.len() > max {
                tracing::debug!("vmess: {}-byte datagram too large, dropped", data.len());
                return Poll::Ready(Ok(data.len()));
            }
            me.seal_into_wbuf(MAX_CHUNK, |s, b| ((), s.seal_to(data, b)));
            if let Poll::Ready(Err(e)) = me.poll_drain(cx) {
                return Poll::Ready(Err(e));
            }
            return Poll::Ready(Ok(data.len()));
        }
        // Seal into the write buffer; write it out once no further chunk fits.
        let cap = me
            .wbuf
            .as_ref()
            .map_or(WRITE_BUF, |b| b.len())
            .max(WRITE_BUF);
        if me.wlen + MAX_CHUNK > cap && !me.hold {
            ready!(me.poll_drain(cx))?;
        }
        me.hold = false;
        me.hold_timer = None;
        let room = cap.saturating_sub(me.wlen).max(MAX_CHUNK);
        let taken = me.seal_into_wbuf(room, |s, b| s.seal_all_to(data, b));
        if me.wlen + MAX_CHUNK > cap {
            if let Poll::Ready(Err(e)) = me.poll_drain(cx) {
                return Poll::Ready(Err(e));
            }
        }
        Poll::Ready(Ok(taken))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = &mut *self;
        me.hold = false;
        me.hold_timer = None;
        ready!(me.poll_drain(cx))?;
        Pin::new(&mut me.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = &mut *self;
        if !me.shut {
            me.shut = true;
            me.hold = false;
            me.hold_timer = None;
            me.seal_into_wbuf(MAX_CHUNK, |s, b| ((), s.seal_eof_to(b)));
        }
        ready!(me.poll_drain(cx))?;
        Pin::new(&mut me.inner).poll_shutdown(cx)
    }
}

impl VmessStream {
    /// Security `none`/`zero` without masking: the body is the plain bytes, so the relay may
    /// bypass this layer once its header went out and its buffers are empty.
    fn passthrough(&self) -> bool {
        self.sealer.is_passthrough()
            && self.opener.is_passthrough()
            && matches!(self.head, ReadHead::None)
            && !self.packet
            && !self.shut
    }
}

impl Stream for VmessStream {
    fn socket(&self) -> Option<crate::transport::RawSocket<'_>> {
        if self.passthrough() {
            self.inner.socket()
        } else {
            None
        }
    }

    fn take_read_direct(&mut self) -> Option<Bytes> {
        if !self.passthrough() {
            return None;
        }
        let under = self.inner.take_read_direct()?;
        let read = self.ra.take_all();
        if under.is_empty() {
            return Some(read);
        }
        if read.is_empty() {
            return Some(under);
        }
        let mut both = Vec::with_capacity(read.len() + under.len());
        both.extend_from_slice(&read);
        both.extend_from_slice(&under);
        Some(Bytes::from(both))
    }

    fn write_direct(&self) -> bool {
        self.passthrough()
            && self.wbuf.as_ref().is_none_or(|_| self.wpos == self.wlen)
            && self.inner.write_direct()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::vmess::body::{BodyParams, Opened, Security};
    use std::sync::{Arc, Mutex};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A socket that records what is written, takes a varying, often small, number of bytes
    /// per call (vectored or not) and now and then is not ready; reads come from a buffer.
    struct Trickle {
        wire: Arc<Mutex<Vec<u8>>>,
        input: Vec<u8>,
        seed: u64,
        vectored: bool,
    }

    impl Trickle {
        fn next(&mut self) -> u64 {
            self.seed ^= self.seed << 13;
            self.seed ^= self.seed >> 7;
            self.seed ^= self.seed << 17;
            self.seed
        }
        /// How many bytes this call takes (None: not ready, woken at once).
        fn budget(&mut self, cx: &mut Context<'_>) -> Option<usize> {
            let r = self.next();
            if r.is_multiple_of(7) {
                cx.waker().wake_by_ref();
                return None;
            }
            Some(match r % 3 {
                0 => 1 + (r >> 8) as usize % 3,
                1 => 1 + (r >> 8) as usize % 9000,
                _ => 1 << 20,
            })
        }
    }

    impl AsyncRead for Trickle {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            out: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let Some(n) = self.budget(cx) else {
                return Poll::Pending;
            };
            let n = n.min(out.remaining()).min(self.input.len());
            out.put_slice(&self.input[..n]);
            self.input.drain(..n);
            Poll::Ready(Ok(()))
        }
    }

    impl AsyncWrite for Trickle {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            data: &[u8],
        ) -> Poll<io::Result<usize>> {
            let Some(n) = self.budget(cx) else {
                return Poll::Pending;
            };
            let n = n.min(data.len());
            self.wire.lock().unwrap().extend_from_slice(&data[..n]);
            Poll::Ready(Ok(n))
        }
        fn poll_write_vectored(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            bufs: &[io::IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            let Some(mut n) = self.budget(cx) else {
                return Poll::Pending;
            };
            let mut done = 0;
            let mut w = self.wire.lock().unwrap();
            for b in bufs {
                let k = n.min(b.len());
                w.extend_from_slice(&b[..k]);
                done += k;
                n -= k;
                if n == 0 {
                    break;
                }
            }
            Poll::Ready(Ok(done))
        }
        fn is_write_vectored(&self) -> bool {
            self.vectored
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    impl Stream for Trickle {}

    fn params(security: Security) -> BodyParams {
        BodyParams {
            security,
            opt: 0x0d
                & if security == Security::None {
                    0x05
                } else {
                    0xff
                },
            packet: false,
            key: [1; 16],
            iv: [2; 16],
            req_key: [3; 16],
            req_iv: [4; 16],
        }
    }

    fn data() -> Vec<u8> {
        (0..300_000u32).map(|i| (i * 31 + i / 977) as u8).collect()
    }

    /// A header held for the first payload keeps a buffer of its own size, not a full write
    /// buffer: a connection whose other side never sends stays small.
    #[test]
    fn a_held_header_keeps_only_its_own_bytes() {
        let p = params(Security::Aes128Gcm);
        let (a, _b) = tokio::io::duplex(64);
        let s = VmessStream::new(
            Box::new(a),
            Sealer::new(&p, None).unwrap(),
            Opener::new(&p, None).unwrap(),
            ReadHead::None,
            vec![7u8; 38],
            None,
            &[],
            false,
        );
        let held = s.wbuf.as_ref().map_or(0, |b| b.len());
        assert!(
            (38..=76).contains(&held),
            "held header buffer is {held} bytes"
        );
        assert!(!s.ra.holds_buffer());
    }

    /// Writes through a [`VmessStream`] onto a trickling socket in uneven pieces, with
    /// flushes and reads mixed in, and decodes the wire: every byte arrives once, in order.
    #[tokio::test]
    async fn writes_survive_partial_and_vectored_socket_writes() {
        for security in [
            Security::None,
            Security::Aes128Gcm,
            Security::Chacha20Poly1305,
        ] {
            for vectored in [true, false] {
                for seed in [1u64, 77, 12345] {
                    let wire = Arc::new(Mutex::new(Vec::new()));
                    let sock = Trickle {
                        wire: wire.clone(),
                        input: Vec::new(),
                        seed,
                        vectored,
                    };
                    let p = params(security);
                    let mut s = VmessStream::new(
                        Box::new(sock),
                        Sealer::new(&p, None).unwrap(),
                        Opener::new(&p, None).unwrap(),
                        ReadHead::None,
                        b"HEADER".to_vec(),
                        None,
                        &[],
                        false,
                    );
                    let d = data();
                    let mut off = 0;
                    let mut i = 0usize;
                    while off < d.len() {
                        let n = [1usize, 5000, 8190, 8191, 40_000, 131_072][i % 6];
                        let n = n.min(d.len() - off);
                        s.write_all(&d[off..off + n]).await.unwrap();
                        if i.is_multiple_of(4) {
                            s.flush().await.unwrap();
                        }
                        off += n;
                        i += 1;
                    }
                    s.shutdown().await.unwrap();
                    let mut w = wire.lock().unwrap().clone();
                    assert_eq!(&w[..6], b"HEADER");
                    w.drain(..6);
                    let mut o = Opener::new(&p, None).unwrap();
                    let mut got = Vec::new();
                    loop {
                        match o.open(&mut w).unwrap() {
                            Opened::Data {
                                start,
                                end,
                                consumed,
                            } => {
                                got.extend_from_slice(&w[start..end]);
                                w.drain(..consumed);
                            }
                            Opened::Eof => break,
                            Opened::NeedMore(n) => panic!("truncated, need {n}"),
                        }
                    }
                    assert!(got == d, "{security:?} vectored {vectored} seed {seed}");
                }
            }
        }
    }

    /// Reads chunks arriving in odd pieces into caller buffers of several sizes.
    #[tokio::test]
    async fn reads_deliver_every_chunk_into_any_buffer_size() {
        for security in [Security::None, Security::Aes128Gcm] {
            for (seed, bufsize) in [(3u64, 1usize), (5, 1000), (9, 32 * 1024), (11, 200_000)] {
                let p = params(security);
                let d = data();
                let mut wire = Vec::new();
                let mut sealer = Sealer::new(&p, None).unwrap();
                sealer.seal_all(&d, &mut wire);
                sealer.seal_eof(&mut wire);
                let sock = Trickle {
                    wire: Arc::new(Mutex::new(Vec::new())),
                    input: wire[100..].to_vec(),
                    seed,
                    vectored: true,
                };
                let mut s = VmessStream::new(
                    Box::new(sock),
                    Sealer::new(&p, None).unwrap(),
                    Opener::new(&p, None).unwrap(),
                    ReadHead::None,
                    Vec::new(),
                    None,
                    &wire[..100],
                    false,
                );
                let mut got = Vec::new();
                let mut buf = vec![0u8; bufsize];
                loop {
                    let n = s.read(&mut buf).await.unwrap();
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&buf[..n]);
                }
                assert!(got == d, "{security:?} seed {seed} buffer {bufsize}");
            }
        }
    }
}
