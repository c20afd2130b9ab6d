//! The write side of [`VmessStream`]: chunks sealed into the pooled write buffer (or, for
//! `none` over TCP, written vectored straight from the caller's bytes), the held request
//! header, the end marker at shutdown.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::AsyncWrite;

use super::super::body::{Sealer, MAX_CHUNK};
use super::{VmessStream, VEC_CHUNKS, WRITE_BUF};
use crate::relay::pool;

impl VmessStream {
    /// Writes `wbuf` out; Ready(Ok) once it is empty (the buffer then goes back to the pool).
    pub(super) fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
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
            me.hold_wait = None;
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
        me.hold_wait = None;
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
        me.hold_wait = None;
        ready!(me.poll_drain(cx))?;
        Pin::new(&mut me.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = &mut *self;
        if !me.shut {
            me.shut = true;
            me.hold = false;
            me.hold_wait = None;
            me.seal_into_wbuf(MAX_CHUNK, |s, b| ((), s.seal_eof_to(b)));
        }
        ready!(me.poll_drain(cx))?;
        Pin::new(&mut me.inner).poll_shutdown(cx)
    }
}
