//! The zero-copy direction of a relay: socket -> pipe -> socket with `splice(2)`.

use std::io;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};

use super::idle::Activity;
use super::{add, pool};
use crate::common::sys;
use crate::transport::RawSocket;

/// Bytes read at a time when no pipe can be had.
const COPY_ROUND: usize = 16 * 1024;

/// One direction of the splice path as a small state machine (polled, so an idle connection
/// keeps no readiness futures): bytes go socket -> pipe -> socket; the pipe is taken from the
/// thread's pool when the socket has bytes and given back, empty, when it has none.
pub(super) struct SpliceDir {
    pipe: Option<pool::PooledPipe>,
    /// Bytes sitting in the pipe.
    left: usize,
    /// Bytes the layers held when this direction went direct: written first.
    pending: Bytes,
    /// Half-close the writer when the reader ends.
    fin: bool,
}

impl SpliceDir {
    /// Splices after first writing `pending` (bytes a layer held when it went direct); `fin`:
    /// half-close the writer when the reader ends.
    pub(super) fn new(pending: Bytes, fin: bool) -> Self {
        SpliceDir {
            pipe: None,
            left: 0,
            pending,
            fin,
        }
    }

    /// Moves bytes until `from` ends (then half-closes `to`, with `fin`); `total` counts them.
    pub(super) fn poll_splice(
        &mut self,
        cx: &mut Context<'_>,
        from: RawSocket<'_>,
        to: RawSocket<'_>,
        total: &mut u64,
        counters: &[Arc<AtomicU64>],
        activity: &Activity,
    ) -> Poll<io::Result<()>> {
        use std::os::fd::AsRawFd;
        loop {
            // Bytes to write: those a layer held first, then the pipe's.
            if !self.pending.is_empty() || self.left > 0 {
                let wrote = if !self.pending.is_empty() {
                    to.try_write(&self.pending)
                } else {
                    match &self.pipe {
                        Some(p) => {
                            let pr = p.get().read.as_raw_fd();
                            to.try_write_io(|| sys::splice(pr, to.fd(), self.left))
                        }
                        None => return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
                    }
                };
                match wrote {
                    Ok(0) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                    Ok(n) => {
                        if self.pending.is_empty() {
                            self.left -= n;
                        } else {
                            self.pending.advance(n);
                        }
                        *total += n as u64;
                        add(counters, n);
                        activity.touch();
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        ready!(to.poll_write_ready(cx))?;
                    }
                    Err(e) => return Poll::Ready(Err(e)),
                }
                continue;
            }
            ready!(from.poll_read_ready(cx))?;
            let pw = match &self.pipe {
                Some(p) => p.get().write.as_raw_fd(),
                None => match pool::take_pipe() {
                    Ok(p) => self.pipe.insert(p).get().write.as_raw_fd(),
                    // No descriptor left for a pipe (EMFILE): these bytes go through a buffer,
                    // and the connection lives on.
                    Err(_) => match self.copy_round(from) {
                        Ok(true) => continue,
                        Ok(false) => {
                            self.end(to)?;
                            return Poll::Ready(Ok(()));
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                        Err(e) => return Poll::Ready(Err(e)),
                    },
                },
            };
            // The pipe is empty here, so WouldBlock can only mean the socket has nothing to read.
            match from.try_read_io(|| sys::splice(from.fd(), pw, pool::PIPE_SIZE)) {
                Ok(0) => {
                    self.give_back();
                    self.end(to)?;
                    return Poll::Ready(Ok(()));
                }
                Ok(n) => self.left = n,
                // Nothing to read: the empty pipe goes back until bytes come.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.give_back(),
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    /// Reads what `from` has into `pending` (written next) without a pipe: `Ok(false)` at its
    /// end.
    fn copy_round(&mut self, from: RawSocket<'_>) -> io::Result<bool> {
        let mut b = pool::take(COPY_ROUND);
        let r = from.try_read(&mut b);
        let out = match r {
            Ok(0) => Ok(false),
            Ok(n) => {
                self.pending = Bytes::copy_from_slice(&b[..n]);
                Ok(true)
            }
            Err(e) => Err(e),
        };
        pool::put(b);
        out
    }

    /// The reader ended: half-close the writer when asked to.
    fn end(&self, to: RawSocket<'_>) -> io::Result<()> {
        if self.fin {
            to.shutdown_write()?;
        }
        Ok(())
    }

    /// Returns the pipe to the pool if it is empty (one holding bytes is closed on drop).
    fn give_back(&mut self) {
        if self.left == 0 {
            if let Some(p) = self.pipe.take() {
                pool::put_pipe(p);
            }
        }
    }
}

impl Drop for SpliceDir {
    fn drop(&mut self) {
        self.give_back();
    }
}
