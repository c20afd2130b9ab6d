//! The buffered direction of a relay: copies through a pooled buffer whose size follows the
//! traffic, and can hand over to splice when both ends turn direct.

use std::io;
use std::pin::Pin;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use tokio::io::ReadBuf;

use super::idle::Activity;
use super::{add, pool};
use crate::transport::Stream;

/// How a copy step ended.
pub(super) enum CopyEnd {
    /// Reading finished and the writer was flushed and (with `fin`) shut down.
    Done,
    /// Both ends may now go direct: splice from here, writing these bytes first.
    Switch(Bytes),
}

/// One direction of a buffered copy. The buffer goes back to the pool whenever the direction
/// waits for input with nothing left to write; its size follows the traffic (bulk transfers
/// get large buffers, so fewer and larger syscalls and segments per byte).
pub(super) struct CopyDir {
    buf: Option<Box<[u8]>>,
    size: pool::Adaptive,
    pos: usize,
    cap: usize,
    read_done: bool,
    need_flush: bool,
    /// Both ends sit on sockets: after each transfer, ask whether they went direct.
    may_switch: bool,
    /// Shut the writer down when the reader ends.
    fin: bool,
}

impl CopyDir {
    pub(super) fn new(size: pool::Adaptive, may_switch: bool, fin: bool) -> Self {
        CopyDir {
            buf: None,
            size,
            pos: 0,
            cap: 0,
            read_done: false,
            need_flush: false,
            may_switch,
            fin,
        }
    }

    /// Copies from `r` to `w` until `r` ends (then shuts `w` down, with `fin`) or both turn
    /// direct.
    /// `total` counts the bytes written.
    #[allow(
        clippy::expect_used,
        clippy::unwrap_used,
        reason = "the buffer is held whenever pos < cap"
    )]
    pub(super) fn poll_copy(
        &mut self,
        cx: &mut Context<'_>,
        r: &mut dyn Stream,
        w: &mut dyn Stream,
        total: &mut u64,
        counters: &[Arc<AtomicU64>],
        activity: &Activity,
    ) -> Poll<io::Result<CopyEnd>> {
        let mut r = Pin::new(r);
        let mut w = Pin::new(w);
        loop {
            if self.pos == self.cap && !self.read_done && self.may_switch {
                // Everything read was written: the layers may have turned direct. Writes
                // bypass a layer only once it was flushed.
                if self.need_flush {
                    ready!(w.as_mut().poll_flush(cx))?;
                    self.need_flush = false;
                }
                if w.write_direct() {
                    if let Some(pending) = r.take_read_direct() {
                        if let Some(b) = self.buf.take() {
                            pool::put(b);
                        }
                        return Poll::Ready(Ok(CopyEnd::Switch(pending)));
                    }
                }
            }
            if self.pos == self.cap && !self.read_done {
                let want = self.size.size;
                if self.buf.as_ref().is_some_and(|b| b.len() < want) {
                    if let Some(b) = self.buf.take() {
                        pool::put(b);
                    }
                }
                let buf = self.buf.get_or_insert_with(|| pool::take(want));
                let room = buf.len();
                let mut rb = ReadBuf::new(buf);
                match r.as_mut().poll_read(cx, &mut rb) {
                    Poll::Pending => {
                        if let Some(b) = self.buf.take() {
                            pool::put(b);
                        }
                        if self.need_flush {
                            ready!(w.as_mut().poll_flush(cx))?;
                            self.need_flush = false;
                        }
                        return Poll::Pending;
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Ready(Ok(())) => {
                        let n = rb.filled().len();
                        self.size.record(n, room);
                        if n == 0 {
                            self.read_done = true;
                            if let Some(b) = self.buf.take() {
                                pool::put(b);
                            }
                        } else {
                            self.pos = 0;
                            self.cap = n;
                        }
                    }
                }
            }
            while self.pos < self.cap {
                let buf = self
                    .buf
                    .as_ref()
                    .expect("buffer held while data is pending");
                let n = ready!(w.as_mut().poll_write(cx, &buf[self.pos..self.cap]))?;
                if n == 0 {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                self.pos += n;
                *total += n as u64;
                self.need_flush = true;
                add(counters, n);
                activity.touch();
            }
            if self.read_done {
                ready!(w.as_mut().poll_flush(cx))?;
                if self.fin {
                    ready!(w.as_mut().poll_shutdown(cx))?;
                }
                return Poll::Ready(Ok(CopyEnd::Done));
            }
        }
    }
}

impl Drop for CopyDir {
    fn drop(&mut self) {
        if let Some(b) = self.buf.take() {
            pool::put(b);
        }
    }
}
