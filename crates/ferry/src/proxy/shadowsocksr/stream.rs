//! The SSR TCP stream: the three codecs composed in wire order (§1.1).
//!
//! Send: protocol encode → stream cipher (IV in front of the first bytes) → obfs encode.
//! Receive: obfs decode → stream cipher (keyed once the peer's IV is in) → protocol decode.
//! What a codec asks to send back (the TLS flight and Finished, random_head's answer, the
//! server's empty protocol packet) is queued with the writes and flushed from either direction.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::cipher::{Crypt, Method};
use super::obfs::Obfs;
use super::protocol::Protocol;
use super::util::{Error, Result};
use crate::common::pool;
use crate::proxy::first_payload::FirstPayloadWait;
use crate::proxy::shadowsocks::conn::FIRST_PAYLOAD_WAIT;
use crate::proxy::shadowsocks::stream_cipher::CFB_SLACK;
use crate::transport::{BoxStream, ReadAhead, Stream};

/// Plaintext taken per write at most (SSR's own buffer size).
const WRITE_MAX: usize = 32 * 1024;
/// Raw bytes read per read call.
const READ_SIZE: usize = 64 * 1024;
/// verify_deflate: raw bytes per read, so one read inflates to a few MiB at most (a packet of
/// ~32 bytes may inflate to a full 32,700-byte chunk).
const READ_SIZE_DEFLATE: usize = 4096;

pub struct SsrStream {
    inner: BoxStream,
    server: bool,
    obfs: Obfs,
    proto: Protocol,
    method: Method,
    key: Arc<[u8]>,
    enc: Crypt,
    /// This side's IV until it has gone out in front of the first ciphertext.
    send_iv: Option<Vec<u8>>,
    dec: Option<Crypt>,
    /// The peer's IV as it arrives.
    recv_iv: Vec<u8>,
    /// Plaintext for the reader.
    rbuf: Vec<u8>,
    rpos: usize,
    /// Wire bytes not yet written.
    wbuf: Vec<u8>,
    wpos: usize,
    /// Bytes read from the socket, decoded at once (pooled, given back while idle).
    raw: ReadAhead,
    eof: bool,
    /// Client: the request address, sent with the first payload.
    request: Option<Vec<u8>>,
    wait: FirstPayloadWait,
    /// Server with a decoy: every raw byte read so far, until the handshake is over.
    record: Option<Vec<u8>>,
    /// Scratch buffers kept between calls: protocol output, ciphertext, obfs output, plaintext.
    pbuf: Vec<u8>,
    cbuf: Vec<u8>,
    obuf: Vec<u8>,
    dbuf: Vec<u8>,
}

/// Raw bytes a server keeps for its decoy at most (an HTTP disguise may be 64 KiB).
const RECORD_MAX: usize = 80 * 1024;

/// The pieces of one connection.
pub struct Parts {
    pub obfs: Obfs,
    pub proto: Protocol,
    pub method: Method,
    pub key: Arc<[u8]>,
    /// This side's send IV (what the protocol's `Info::iv` was built with).
    pub iv: Vec<u8>,
}

impl SsrStream {
    fn new(inner: BoxStream, server: bool, p: Parts, request: Option<Vec<u8>>) -> Option<Self> {
        let enc = Crypt::new(p.method, &p.key, &p.iv, true)?;
        Some(SsrStream {
            inner,
            server,
            obfs: p.obfs,
            proto: p.proto,
            method: p.method,
            key: p.key,
            enc,
            send_iv: Some(p.iv),
            dec: None,
            recv_iv: Vec::new(),
            rbuf: Vec::new(),
            rpos: 0,
            wbuf: Vec::new(),
            wpos: 0,
            raw: ReadAhead::new(pool::Adaptive::fixed(READ_SIZE)),
            eof: false,
            request,
            wait: FirstPayloadWait::new(FIRST_PAYLOAD_WAIT),
            record: None,
            pbuf: Vec::new(),
            cbuf: Vec::new(),
            obuf: Vec::new(),
            dbuf: Vec::new(),
        })
    }

    /// A client asking for the target whose SOCKS-form address is `request`.
    pub fn client(inner: BoxStream, p: Parts, request: Vec<u8>) -> io::Result<Self> {
        Self::new(inner, false, p, Some(request)).ok_or_else(|| io::Error::other("bad key"))
    }

    /// A server; its reader yields the request (address first).
    pub fn server(inner: BoxStream, p: Parts) -> io::Result<Self> {
        Self::new(inner, true, p, None).ok_or_else(|| io::Error::other("bad key"))
    }

    /// The socket underneath (a failed handshake is drained on it).
    pub fn into_inner(self) -> BoxStream {
        self.inner
    }

    /// Keeps every raw byte read from now on (a server that may hand a failed handshake to
    /// its decoy), until [`SsrStream::stop_recording`].
    pub fn start_recording(&mut self) {
        self.record = Some(Vec::new());
    }

    pub fn stop_recording(&mut self) {
        self.record = None;
    }

    /// The socket underneath and every raw byte read from it while recording (`None` when
    /// more than the recording limit came).
    pub fn into_recorded(self) -> (BoxStream, Option<Vec<u8>>) {
        (self.inner, self.record.filter(|r| r.len() <= RECORD_MAX))
    }

    /// The protocol codec (the server reads the user it authenticated).
    pub fn protocol(&self) -> &Protocol {
        &self.proto
    }

    /// Plaintext decoded but not read yet goes back in front (the address reader over-read).
    pub fn unread(&mut self, data: &[u8]) {
        let mut v = data.to_vec();
        v.extend_from_slice(&self.rbuf[self.rpos..]);
        self.rbuf = v;
        self.rpos = 0;
    }

    /// Encodes `data` (may be empty: the protocol's empty packet) onto the write queue.
    fn encode(&mut self, data: &[u8]) {
        let mut p = std::mem::take(&mut self.pbuf);
        p.clear();
        if self.server {
            self.proto.server_encode(data, &mut p);
        } else {
            self.proto.client_encode(data, &mut p);
        }
        if !p.is_empty() {
            // Ciphertext (after the IV, first time) straight from the protocol's output.
            let mut c = std::mem::take(&mut self.cbuf);
            c.clear();
            if let Some(iv) = self.send_iv.take() {
                c.extend_from_slice(&iv);
            }
            let s = c.len();
            c.resize(s + p.len() + CFB_SLACK, 0);
            self.enc.apply_to(&p, &mut c[s..]);
            c.truncate(s + p.len());
            self.obfs_encode_owned(c);
        }
        self.pbuf = p;
    }

    /// [`SsrStream::obfs_encode`] of a buffer this stream may keep (plain obfs: it becomes the
    /// write queue when that is empty, no copy).
    fn obfs_encode_owned(&mut self, c: Vec<u8>) {
        if matches!(self.obfs, Obfs::Plain) && self.wpos == self.wbuf.len() {
            self.cbuf = std::mem::replace(&mut self.wbuf, c);
            self.wpos = 0;
            return;
        }
        self.obfs_encode(&c);
        self.cbuf = c;
    }

    fn obfs_encode(&mut self, c: &[u8]) {
        if self.wpos == self.wbuf.len() {
            self.wbuf.clear();
            self.wpos = 0;
        }
        if self.server {
            self.obfs.server_encode(c, &mut self.wbuf);
        } else {
            self.obfs.client_encode(c, &mut self.wbuf);
        }
    }

    /// Runs received wire bytes through the codecs.
    fn decode(&mut self, raw: &[u8]) -> Result<()> {
        let mut o = std::mem::take(&mut self.obuf);
        o.clear();
        let r = self.decode_with(raw, &mut o);
        self.obuf = o;
        r
    }

    fn decode_with(&mut self, raw: &[u8], o: &mut Vec<u8>) -> Result<()> {
        let src: &[u8] = if matches!(self.obfs, Obfs::Plain) {
            raw
        } else {
            let sendback = if self.server {
                self.obfs.server_decode(raw, o)?
            } else {
                self.obfs.client_decode(raw, o)?
            };
            if sendback {
                self.obfs_encode(&[]);
            }
            o
        };
        let mut src = src;
        if src.is_empty() {
            return Ok(());
        }
        if self.dec.is_none() {
            let il = self.method.iv_len();
            let need = il - self.recv_iv.len().min(il);
            let take = need.min(src.len());
            self.recv_iv.extend_from_slice(&src[..take]);
            src = &src[take..];
            if self.recv_iv.len() < il || src.is_empty() {
                return Ok(());
            }
            self.dec =
                Some(Crypt::new(self.method, &self.key, &self.recv_iv, false).ok_or(Error::Auth)?);
            self.proto.set_recv_iv(&self.recv_iv);
        }
        if self.rpos == self.rbuf.len() {
            self.rbuf.clear();
            self.rpos = 0;
        }
        let mut d = std::mem::take(&mut self.dbuf);
        // Origin: the plaintext goes straight onto the read buffer.
        let origin = matches!(self.proto, Protocol::Origin);
        let (buf, at) = if origin {
            let at = self.rbuf.len();
            (&mut self.rbuf, at)
        } else {
            d.clear();
            (&mut d, 0)
        };
        buf.resize(at + src.len() + CFB_SLACK, 0);
        if let Some(c) = self.dec.as_mut() {
            c.apply_to(src, &mut buf[at..]);
        }
        buf.truncate(at + src.len());
        let res = if origin {
            Ok(())
        } else if self.server {
            match self.proto.server_decode(&d, &mut self.rbuf) {
                Ok(true) => {
                    self.encode(&[]);
                    Ok(())
                }
                Ok(false) => Ok(()),
                Err(e) => Err(e),
            }
        } else {
            self.proto.client_decode(&d, &mut self.rbuf)
        };
        self.dbuf = d;
        res
    }

    /// Writes queued wire bytes.
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
}

impl AsyncRead for SsrStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        loop {
            if me.wpos < me.wbuf.len() {
                // Sendbacks go out while the reader waits; a full socket just waits too.
                if let Poll::Ready(Err(e)) = me.poll_drain(cx) {
                    return Poll::Ready(Err(e));
                }
            }
            if me.rpos < me.rbuf.len() {
                let n = buf.remaining().min(me.rbuf.len() - me.rpos);
                buf.put_slice(&me.rbuf[me.rpos..me.rpos + n]);
                me.rpos += n;
                return Poll::Ready(Ok(()));
            }
            if me.eof {
                return Poll::Ready(Ok(()));
            }
            if me.request.is_some() {
                // A client that reads before writing: the request leaves alone after a while.
                if me.wait.poll_over(cx).is_ready() {
                    if let Some(r) = me.request.take() {
                        me.encode(&r);
                    }
                    continue;
                }
            }
            let size = if matches!(me.proto, Protocol::Deflate(_)) {
                READ_SIZE_DEFLATE
            } else {
                READ_SIZE
            };
            if me.raw.target_size() != size {
                me.raw = ReadAhead::new(pool::Adaptive::fixed(size));
            }
            // Out of `me` while it is decoded (an empty ReadAhead holds no buffer).
            let mut raw =
                std::mem::replace(&mut me.raw, ReadAhead::new(pool::Adaptive::fixed(size)));
            let inner = &mut me.inner;
            let r = raw.poll_fill_with(size, |b| {
                // At most `size` per read, whatever the pooled buffer's length.
                let cap = b.len().min(size);
                let mut rb = ReadBuf::new(&mut b[..cap]);
                ready!(Pin::new(&mut *inner).poll_read(cx, &mut rb))?;
                Poll::Ready(Ok(rb.filled().len()))
            });
            let res = match r {
                Poll::Pending => {
                    me.raw = raw;
                    return Poll::Pending;
                }
                Poll::Ready(Err(e)) => Err(e),
                Poll::Ready(Ok(0)) => {
                    me.eof = true;
                    Ok(())
                }
                Poll::Ready(Ok(_)) => {
                    let got = raw.pending();
                    if let Some(r) = me.record.as_mut() {
                        if r.len() <= RECORD_MAX {
                            r.extend_from_slice(got);
                        }
                    }
                    let res = me.decode(got).map_err(io::Error::from);
                    let n = raw.pending_len();
                    raw.consume(n);
                    res
                }
            };
            me.raw = raw;
            res?;
        }
    }
}

impl AsyncWrite for SsrStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        ready!(me.poll_drain(cx))?;
        let n = data.len().min(WRITE_MAX);
        match me.request.take() {
            Some(mut r) => {
                me.wait.end();
                r.extend_from_slice(&data[..n]);
                me.encode(&r);
            }
            None => me.encode(&data[..n]),
        }
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
        if let Some(r) = me.request.take() {
            me.encode(&r);
        }
        ready!(me.poll_drain(cx))?;
        Pin::new(&mut me.inner).poll_shutdown(cx)
    }
}

impl Stream for SsrStream {}
