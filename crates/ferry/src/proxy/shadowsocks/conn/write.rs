//! The write side of [`SsStream`]: the encrypting half, the pooled output buffer, the client
//! request sent with the first payload, and `poll_write`.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::AsyncWrite;

use super::super::aead::ChunkSealer;
use super::super::ss2022;
use super::super::stream_cipher::{StreamCrypt, CFB_SLACK};
use super::{Request, SsStream, OUT_MIN, WRITE_MAX};
use crate::relay::pool;

/// Sealed bytes waiting for the socket, in a pooled buffer that stays initialised (sealing
/// never zeroes it again).
#[derive(Default)]
pub struct OutBuf {
    pub(super) buf: Option<Box<[u8]>>,
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

    pub(super) fn is_empty(&self) -> bool {
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

impl SsStream {
    fn push_head(&mut self) {
        if !self.head.is_empty() {
            let head = std::mem::take(&mut self.head);
            self.out.push(&head);
        }
    }

    /// Seals the pending client request with as much of `payload` as fits; returns bytes taken.
    pub(super) fn emit_request(&mut self, payload: &[u8]) -> usize {
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
    pub(super) fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
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

    pub(super) fn poll_request_timer(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        if matches!(self.req, Request::Sent) {
            return Ok(());
        }
        if self.wait.poll_over(cx).is_ready() {
            self.emit_request(&[]);
            if let Poll::Ready(Err(e)) = self.poll_drain(cx) {
                return Err(e);
            }
        }
        Ok(())
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
            me.wait.end();
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
