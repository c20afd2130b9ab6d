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

use super::body::{BodyError, Opened, Opener, Sealer, MAX_CHUNK};
use super::header::{self, CfbDec};
use crate::transport::{BoxStream, Peel, Stream};

/// Chunks sealed per write call at most (bytes of payload = this × max payload).
const BATCH_CHUNKS: usize = 8;
/// Initial read buffer: a few chunks, so one read brings several.
const READ_BUF: usize = 4 * MAX_CHUNK;
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

/// One VMess connection's body, both directions.
pub struct VmessStream {
    inner: BoxStream,
    opener: Opener,
    head: ReadHead,
    rbuf: Vec<u8>,
    rpos: usize,
    rend: usize,
    /// Opened plaintext not handed out yet: `rbuf[plain.0..plain.1]`.
    plain: (usize, usize),
    read_done: bool,
    /// UDP: one datagram per chunk each way.
    packet: bool,
    sealer: Sealer,
    wbuf: Vec<u8>,
    wpos: usize,
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
        let mut rbuf = vec![0u8; READ_BUF.max(read_ahead.len())];
        rbuf[..read_ahead.len()].copy_from_slice(read_ahead);
        let hold = !pending_write.is_empty();
        let mut s = VmessStream {
            inner,
            opener,
            head,
            rbuf,
            rpos: 0,
            rend: read_ahead.len(),
            plain: (0, 0),
            read_done: false,
            packet,
            sealer,
            wbuf: pending_write,
            wpos: 0,
            hold,
            hold_timer: hold_for
                .filter(|_| hold)
                .map(|d| Box::pin(tokio::time::sleep(d))),
            shut: false,
        };
        if matches!(s.head, ReadHead::None) {
            let end = s.rend;
            s.opener.on_read(&mut s.rbuf[..end]);
        }
        s
    }

    /// Writes `wbuf` out; Ready(Ok) once it is empty.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.wpos < self.wbuf.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.wbuf[self.wpos..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.wpos += n;
        }
        self.wbuf.clear();
        self.wpos = 0;
        Poll::Ready(Ok(()))
    }

    /// Decodes the response header at `rbuf[rpos..rend]`; `Ok(Some(n))` asks for `n` bytes.
    fn read_head(&mut self) -> io::Result<Option<usize>> {
        let avail = self.rend - self.rpos;
        match &mut self.head {
            ReadHead::None => return Ok(None),
            ReadHead::Aead { key, iv, v } => {
                if avail < 18 {
                    return Ok(Some(18));
                }
                let at = self.rpos;
                let l = header::open_aead_response_length(key, iv, &self.rbuf[at..at + 18])
                    .map_err(bad)?;
                if avail < 18 + l + 16 {
                    return Ok(Some(18 + l + 16));
                }
                header::open_aead_response(key, iv, *v, &mut self.rbuf[at + 18..at + 18 + l + 16])
                    .map_err(bad)?;
                self.rpos += 18 + l + 16;
            }
            ReadHead::Legacy {
                dec,
                v,
                cmd_len,
                chain,
            } => {
                let at = self.rpos;
                let m = match cmd_len {
                    Some(m) => *m,
                    None => {
                        if avail < 4 {
                            return Ok(Some(4));
                        }
                        dec.decrypt(&mut self.rbuf[at..at + 4]);
                        if self.rbuf[at] != *v {
                            return Err(bad(header::HeaderError::ResponseAuth));
                        }
                        let m = if self.rbuf[at + 2] != 0 {
                            self.rbuf[at + 3] as usize
                        } else {
                            0
                        };
                        *cmd_len = Some(m);
                        m
                    }
                };
                if avail < 4 + m {
                    return Ok(Some(4 + m));
                }
                // A SwitchAccount (dynamic port) command is skipped: not supported.
                dec.decrypt(&mut self.rbuf[at + 4..at + 4 + m]);
                self.rpos += 4 + m;
                if *chain {
                    let d = std::mem::replace(dec, Box::new(header::cfb_dec(&[0; 16], &[0; 16])));
                    self.opener.set_cfb(*d);
                }
            }
        }
        self.head = ReadHead::None;
        let (a, b) = (self.rpos, self.rend);
        self.opener.on_read(&mut self.rbuf[a..b]);
        Ok(None)
    }

    /// Makes room for `need` bytes from `rpos`.
    fn make_room(&mut self, need: usize) {
        if self.rpos + need > self.rbuf.len() {
            self.rbuf.copy_within(self.rpos..self.rend, 0);
            self.rend -= self.rpos;
            self.rpos = 0;
            if need > self.rbuf.len() {
                self.rbuf.resize(need, 0);
            }
        }
    }
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
        if !me.hold && me.wpos < me.wbuf.len() {
            // Errors surface on the next write.
            let _ = me.poll_drain(cx);
        }
        loop {
            if me.plain.0 < me.plain.1 {
                let (a, b) = me.plain;
                let n = (b - a).min(out.remaining());
                out.put_slice(&me.rbuf[a..a + n]);
                me.plain = if me.packet { (0, 0) } else { (a + n, b) };
                return Poll::Ready(Ok(()));
            }
            if me.read_done {
                return Poll::Ready(Ok(()));
            }
            let need = match me.read_head()? {
                Some(n) => n,
                None => {
                    if me.opener.is_passthrough() && me.rpos == me.rend && !me.packet {
                        // Nothing framed or buffered: read straight into the caller's buffer.
                        return Pin::new(&mut me.inner).poll_read(cx, out);
                    }
                    let (a, b) = (me.rpos, me.rend);
                    let opened = me.opener.open(&mut me.rbuf[a..b]).map_err(|e| {
                        tracing::info!("vmess: bad chunk, closing: {e}");
                        io::Error::from(e)
                    })?;
                    match opened {
                        Opened::Data {
                            start,
                            end,
                            consumed,
                        } => {
                            me.plain = (a + start, a + end);
                            me.rpos += consumed;
                            if start == end {
                                tracing::debug!(
                                    "vmess: empty chunk of {consumed} bytes, {} buffered",
                                    b - a
                                );
                            }
                            if me.packet && start == end {
                                // An empty datagram still counts as one.
                                return Poll::Ready(Ok(()));
                            }
                            continue;
                        }
                        Opened::Eof => {
                            tracing::debug!("vmess: end marker after {} buffered bytes", b - a);
                            me.read_done = true;
                            continue;
                        }
                        Opened::NeedMore(n) => n,
                    }
                }
            };
            me.make_room(need);
            let end = me.rend;
            let mut rb = ReadBuf::new(&mut me.rbuf[end..]);
            ready!(Pin::new(&mut me.inner).poll_read(cx, &mut rb))?;
            let n = rb.filled().len();
            if n == 0 {
                if me.rpos == me.rend && matches!(me.head, ReadHead::None) {
                    // The peer closed between chunks without an end marker: treat as the end.
                    tracing::debug!("vmess: peer closed without an end marker");
                    me.read_done = true;
                    continue;
                }
                return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into()));
            }
            if matches!(me.head, ReadHead::None) {
                me.opener.on_read(&mut me.rbuf[end..end + n]);
            }
            me.rend += n;
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
            ready!(me.poll_drain(cx))?;
            if me.sealer.is_passthrough() {
                return Pin::new(&mut me.inner).poll_write(cx, data);
            }
        }
        me.hold = false;
        me.hold_timer = None;
        let max = me.sealer.max_payload();
        let taken = if me.packet {
            if data.len() > max {
                tracing::debug!("vmess: {}-byte datagram too large, dropped", data.len());
                return Poll::Ready(Ok(data.len()));
            }
            me.sealer.seal(data, &mut me.wbuf);
            data.len()
        } else {
            let take = data.len().min(max * BATCH_CHUNKS);
            me.sealer.seal_all(&data[..take], &mut me.wbuf);
            take
        };
        // Push it out now; whatever the socket does not take goes out on the next call.
        if let Poll::Ready(Err(e)) = me.poll_drain(cx) {
            return Poll::Ready(Err(e));
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
            me.sealer.seal_eof(&mut me.wbuf);
        }
        ready!(me.poll_drain(cx))?;
        Pin::new(&mut me.inner).poll_shutdown(cx)
    }
}

impl Stream for VmessStream {
    fn peel(self: Box<Self>) -> Peel {
        let peelable = self.sealer.is_passthrough()
            && self.opener.is_passthrough()
            && matches!(self.head, ReadHead::None)
            && !self.packet
            && !self.shut;
        if !peelable {
            return Peel::Stream(self);
        }
        let mut me = *self;
        let inner = std::mem::replace(&mut me.inner, Box::new(tokio::io::duplex(1).0));
        match inner.peel() {
            Peel::Raw(mut parts) => {
                let mut read = Vec::new();
                read.extend_from_slice(&me.rbuf[me.plain.0..me.plain.1]);
                read.extend_from_slice(&me.rbuf[me.rpos..me.rend]);
                read.extend_from_slice(&parts.read_pending);
                parts.read_pending = Bytes::from(read);
                let mut write = parts.write_pending.to_vec();
                write.extend_from_slice(&me.wbuf[me.wpos..]);
                parts.write_pending = Bytes::from(write);
                Peel::Raw(parts)
            }
            Peel::Stream(s) => {
                me.inner = s;
                Peel::Stream(Box::new(me))
            }
        }
    }

    fn into_box(self: Box<Self>) -> BoxStream {
        self
    }
}
