//! Bytes read ahead of a framing layer, in a pooled buffer that idle connections give back.
//!
//! A layer that decodes frames (an AEAD chunk, a TLS record, a WebSocket frame) reads in large
//! batches into one buffer and decodes from it: `start..end` is what was read and not consumed
//! yet, and a frame opened in place may leave plaintext (`plain`) for the caller to take. The
//! buffer comes from [`crate::common::pool`] and goes back whenever it holds nothing, so a
//! connection waiting for data keeps none (and a dropped one gives it back); its size follows
//! a [`pool::Adaptive`] policy. Every layer that holds bytes it read reads into one: TLS and
//! TLS 1.3 records, WebSocket frames, Shadowsocks and VMess chunks.

use std::io;
use std::ops::Range;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use tokio::io::{AsyncRead, ReadBuf};

use super::BoxStream;
use crate::common::pool;

/// Free space behind the pending bytes below which they move to the front before a read, so
/// reads stay large.
pub const MIN_READ: usize = 16 * 1024;

/// A framing layer's read-ahead buffer.
#[derive(Debug)]
pub struct ReadAhead {
    buf: Option<Box<[u8]>>,
    start: usize,
    end: usize,
    plain: Range<usize>,
    size: pool::Adaptive,
}

impl ReadAhead {
    /// An empty read-ahead (no buffer held) whose reads aim for `size`.
    pub fn new(size: pool::Adaptive) -> Self {
        ReadAhead {
            buf: None,
            start: 0,
            end: 0,
            plain: 0..0,
            size,
        }
    }

    /// A read-ahead that starts with `data` (bytes a handshake read past its header).
    pub fn with_prefill(size: pool::Adaptive, data: &[u8]) -> Self {
        let mut r = ReadAhead::new(size);
        if !data.is_empty() {
            let mut b = pool::take(size.size.max(data.len()));
            b[..data.len()].copy_from_slice(data);
            r.buf = Some(b);
            r.end = data.len();
        }
        r
    }

    /// Bytes read and not consumed yet.
    #[inline]
    pub fn pending(&self) -> &[u8] {
        match &self.buf {
            Some(b) => &b[self.start..self.end],
            None => &[],
        }
    }

    /// Bytes read and not consumed yet, to decode in place.
    #[inline]
    pub fn pending_mut(&mut self) -> &mut [u8] {
        match &mut self.buf {
            Some(b) => &mut b[self.start..self.end],
            None => &mut [],
        }
    }

    /// How many bytes are pending.
    #[inline]
    pub fn pending_len(&self) -> usize {
        self.end - self.start
    }

    /// Drops `n` pending bytes from the front (they were decoded).
    #[inline]
    pub fn consume(&mut self, n: usize) {
        debug_assert!(n <= self.end - self.start);
        self.start = (self.start + n).min(self.end);
    }

    /// Records plaintext a frame opened in place: `range` is relative to the start of
    /// [`ReadAhead::pending`], so call this before consuming the frame.
    #[inline]
    pub fn set_plain(&mut self, range: Range<usize>) {
        debug_assert!(range.start <= range.end && self.start + range.end <= self.end);
        self.plain = self.start + range.start..self.start + range.end;
    }

    /// Whether plaintext opened in place waits for the caller.
    #[inline]
    pub fn has_plain(&self) -> bool {
        !self.plain.is_empty()
    }

    /// Copies as much waiting plaintext as fits into `out`; returns how much.
    #[inline]
    pub fn take_plain_into(&mut self, out: &mut ReadBuf<'_>) -> usize {
        let n = self.plain.len().min(out.remaining());
        if let Some(b) = &self.buf {
            out.put_slice(&b[self.plain.start..self.plain.start + n]);
        }
        self.plain.start += n;
        n
    }

    /// Takes all waiting plaintext.
    pub fn take_plain(&mut self) -> Vec<u8> {
        let out = match &self.buf {
            Some(b) => b[self.plain.clone()].to_vec(),
            None => Vec::new(),
        };
        self.plain = 0..0;
        out
    }

    /// The pending bytes and, before them, `plain` as plaintext waiting for the caller (what
    /// another engine decrypted and handed over), in one buffer.
    pub fn with_plain_before(size: pool::Adaptive, plain: &[u8], pending: &[u8]) -> Self {
        let mut both = Vec::with_capacity(plain.len() + pending.len());
        both.extend_from_slice(plain);
        both.extend_from_slice(pending);
        let mut r = ReadAhead::with_prefill(size, &both);
        r.set_plain(0..plain.len());
        r.consume(plain.len());
        r
    }

    /// Forgets waiting plaintext (the rest of a datagram that did not fit).
    #[inline]
    pub fn clear_plain(&mut self) {
        self.plain = 0..0;
    }

    /// Makes the buffer ready for a read after which `need` bytes may be pending from the
    /// start: takes one of the current target size (or `need`, if larger) when none is held or
    /// the held one is too small, and moves the pending bytes to the front when `need` would
    /// not fit behind them or less than [`MIN_READ`] is free. Waiting plaintext must have been
    /// taken.
    pub fn make_room(&mut self, need: usize) {
        debug_assert!(self.plain.is_empty());
        self.plain = 0..0;
        let want = self.size.size.max(need);
        let pending = self.end - self.start;
        match &mut self.buf {
            Some(b) if b.len() >= want => {
                if pending == 0 {
                    self.start = 0;
                    self.end = 0;
                } else if self.start > 0
                    && (self.start + need > b.len() || b.len() - self.end < MIN_READ)
                {
                    b.copy_within(self.start..self.end, 0);
                    self.start = 0;
                    self.end = pending;
                }
            }
            held => {
                let mut nb = pool::take(want);
                if let Some(old) = held.take() {
                    nb[..pending].copy_from_slice(&old[self.start..self.end]);
                    pool::put(old);
                }
                *held = Some(nb);
                self.start = 0;
                self.end = pending;
            }
        }
    }

    /// One read from `r` into the buffer (after [`ReadAhead::make_room`] for `need`): the
    /// bytes read are pending at the end. Returns how many (0: end of stream). The size policy
    /// learns from each read; on `Pending` an empty buffer goes back to the pool.
    #[inline]
    pub fn poll_fill<R: AsyncRead + ?Sized>(
        &mut self,
        cx: &mut Context<'_>,
        r: Pin<&mut R>,
        need: usize,
    ) -> Poll<io::Result<usize>> {
        self.poll_fill_with(need, |b| {
            let mut rb = ReadBuf::new(b);
            ready!(r.poll_read(cx, &mut rb))?;
            Poll::Ready(Ok(rb.filled().len()))
        })
    }

    /// [`ReadAhead::poll_fill`] with the read given as `read` (it fills the front of the slice
    /// it is handed and returns how much): a layer reading its socket directly.
    #[inline]
    pub fn poll_fill_with(
        &mut self,
        need: usize,
        read: impl FnOnce(&mut [u8]) -> Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        self.make_room(need);
        let end = self.end;
        let Some(b) = self.buf.as_deref_mut() else {
            return Poll::Ready(Err(io::ErrorKind::OutOfMemory.into()));
        };
        let room = b.len() - end;
        match read(&mut b[end..]) {
            Poll::Pending => {
                self.release_if_empty();
                Poll::Pending
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Ready(Ok(n)) => {
                let n = n.min(room);
                self.size.record(n, room);
                self.end += n;
                Poll::Ready(Ok(n))
            }
        }
    }

    /// [`ReadAhead::poll_fill`] from the stream under a framing layer, or straight from its
    /// socket when `direct` (the stream handed its read side over): then an idle connection
    /// waits for readability holding no buffer at all.
    pub fn poll_fill_from(
        &mut self,
        cx: &mut Context<'_>,
        io: &mut BoxStream,
        direct: bool,
        need: usize,
    ) -> Poll<io::Result<usize>> {
        if !direct {
            return self.poll_fill(cx, Pin::new(io), need);
        }
        let Some(sock) = io.socket() else {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        };
        if self.pending_len() == 0 {
            self.release_if_empty();
            ready!(sock.poll_read_ready(cx))?;
        }
        self.poll_fill_with(need, |b| sock.poll_read_into(cx, b))
    }

    /// Gives the buffer back to the pool when it holds nothing (idle connections keep none).
    #[inline]
    pub fn release_if_empty(&mut self) {
        if self.start == self.end && self.plain.is_empty() {
            self.start = 0;
            self.end = 0;
            self.plain = 0..0;
            if let Some(b) = self.buf.take() {
                pool::put(b);
            }
        }
    }

    /// Everything held, waiting plaintext first, then the pending bytes; the buffer goes back
    /// to the pool (a layer the reader now bypasses).
    pub fn take_all(&mut self) -> Bytes {
        let mut v = Vec::new();
        if let Some(b) = self.buf.take() {
            v.reserve(self.plain.len() + self.end - self.start);
            v.extend_from_slice(&b[self.plain.clone()]);
            v.extend_from_slice(&b[self.start..self.end]);
            pool::put(b);
        }
        self.start = 0;
        self.end = 0;
        self.plain = 0..0;
        Bytes::from(v)
    }

    /// The buffer goes back to the pool now, whatever it holds (a layer that is done).
    pub fn release(&mut self) {
        (self.start, self.end, self.plain) = (0, 0, 0..0);
        if let Some(b) = self.buf.take() {
            pool::put(b);
        }
    }

    /// Whether a pooled buffer is held.
    pub fn holds_buffer(&self) -> bool {
        self.buf.is_some()
    }

    /// The size reads currently aim for.
    pub fn target_size(&self) -> usize {
        self.size.size
    }

    /// The largest size reads may grow to.
    pub fn max_size(&self) -> usize {
        self.size.max
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        if let Some(b) = self.buf.take() {
            pool::put(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;

    /// A reader that hands out `data` at most `step` bytes per read, then ends.
    struct Pieces {
        data: Vec<u8>,
        step: usize,
    }

    impl AsyncRead for Pieces {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            out: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let n = self.step.min(out.remaining()).min(self.data.len());
            out.put_slice(&self.data[..n]);
            self.data.drain(..n);
            Poll::Ready(Ok(()))
        }
    }

    fn bytes(n: usize) -> Vec<u8> {
        (0..n as u32).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    async fn fill(ra: &mut ReadAhead, r: &mut Pieces, need: usize) -> usize {
        poll_fn(|cx| ra.poll_fill(cx, Pin::new(&mut *r), need))
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn compaction_keeps_pending_bytes() {
        let data = bytes(1 << 20);
        let mut r = Pieces {
            data: data.clone(),
            step: 1 << 20,
        };
        let mut ra = ReadAhead::new(pool::Adaptive::fixed(64 * 1024));
        let len = fill(&mut ra, &mut r, 1).await;
        assert_eq!(Some(len), ra.buf.as_ref().map(|b| b.len()));
        // No room behind the data: the 1000 pending bytes move to the front.
        ra.consume(len - 1000);
        let n = fill(&mut ra, &mut r, 10).await;
        assert_eq!(n, len - 1000);
        assert_eq!(ra.start, 0);
        assert_eq!(ra.pending(), &data[len - 1000..len + n]);
    }

    #[tokio::test]
    async fn pending_bytes_stay_put_while_reads_have_room() {
        let data = bytes(100_000);
        let mut r = Pieces {
            data: data.clone(),
            step: 20_000,
        };
        let mut ra = ReadAhead::new(pool::Adaptive::fixed(64 * 1024));
        fill(&mut ra, &mut r, 1).await;
        ra.consume(10);
        fill(&mut ra, &mut r, 20).await;
        assert_eq!(ra.start, 10);
        assert_eq!(ra.pending(), &data[10..40_000]);
    }

    #[tokio::test]
    async fn growing_keeps_pending_bytes() {
        let data = bytes(300_000);
        let mut r = Pieces {
            data: data.clone(),
            step: 1 << 20,
        };
        let mut ra = ReadAhead::with_prefill(pool::Adaptive::fixed(4096), &data[..1000]);
        r.data.drain(..1000);
        ra.consume(500);
        // A frame larger than the buffer: it grows and keeps what was pending.
        let n = fill(&mut ra, &mut r, 100_000).await;
        assert!(ra.pending_len() >= 100_000);
        assert_eq!(ra.pending(), &data[500..1000 + n]);
    }

    #[tokio::test]
    async fn adaptive_size_grows_on_full_reads() {
        let data = bytes(8 << 20);
        let mut r = Pieces {
            data,
            step: 1 << 20,
        };
        let mut ra = ReadAhead::new(pool::Adaptive::new(16 * 1024, 16 * 1024, 256 * 1024));
        for _ in 0..8 {
            fill(&mut ra, &mut r, 1).await;
            let n = ra.pending_len();
            ra.consume(n);
        }
        assert_eq!(ra.target_size(), 256 * 1024);
        assert!(ra.buf.as_ref().is_some_and(|b| b.len() >= 256 * 1024));
    }

    #[tokio::test]
    async fn an_empty_buffer_goes_back_to_the_pool() {
        let mut r = Pieces {
            data: bytes(5000),
            step: 3000,
        };
        let mut ra = ReadAhead::new(pool::Adaptive::fixed(8192));
        fill(&mut ra, &mut r, 1).await;
        let at = ra.buf.as_ref().map(|b| b.as_ptr());
        // Plaintext opened in place keeps the buffer until it is taken.
        ra.set_plain(10..20);
        ra.consume(3000);
        ra.release_if_empty();
        assert!(ra.holds_buffer());
        let mut out = [0u8; 100];
        let mut rb = ReadBuf::new(&mut out);
        assert_eq!(ra.take_plain_into(&mut rb), 10);
        assert_eq!(rb.filled(), &bytes(20)[10..]);
        ra.release_if_empty();
        assert!(!ra.holds_buffer());
        // The next read reuses it.
        let pooled = pool::pooled_bytes();
        assert!(pooled >= 8192);
        fill(&mut ra, &mut r, 1).await;
        assert_eq!(ra.buf.as_ref().map(|b| b.as_ptr()), at);
        assert_eq!(ra.pending(), &bytes(5000)[3000..]);
        assert_eq!(&ra.take_all()[..], &bytes(5000)[3000..]);
        assert!(!ra.holds_buffer());
    }
}
