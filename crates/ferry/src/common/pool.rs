//! Copy buffers and splice pipes, pooled per thread so idle connections hold neither.
//!
//! Buffers come in any size: [`take`] hands out the smallest pooled buffer that is at least
//! the size asked (and at most twice it), so the relay's growing copy buffers and the protocol
//! streams' read-ahead and output buffers share one pool. Each thread keeps at most
//! [`KEEP_BYTES`]; what does not fit is freed.
//!
//! Pipes ([`take_pipe`], [`put_pipe`]) are taken by a splicing direction when its socket has
//! bytes and given back empty when it has none (HAProxy's pipe pool does the same), so an idle
//! spliced connection holds its two sockets and no pipe. Each thread keeps at most
//! [`KEEP_PIPES`] (two descriptors each); what does not fit is closed.

use std::cell::RefCell;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::common::sys;

/// Copy buffer a relay direction starts with: a full TLS record or AEAD chunk per syscall.
pub const DEFAULT_SIZE: usize = 32 * 1024;
/// Largest copy buffer a busy relay direction grows to: bulk transfers move this much per
/// read and write syscall, which saves the kernel per-segment work on both sides of each hop.
pub const MAX_SIZE: usize = 256 * 1024;
/// Largest copy buffer of a direction into a plain socket that copies only because its reader
/// is local (it would splice otherwise; see `relay`): 512 KiB per syscall there moved
/// 4-11% more bytes per second than 256 KiB at 3-10% less CPU per GB (BENCHMARKS.md,
/// session 17). Protocol paths keep [`MAX_SIZE`], which bounds what a stalled client pins.
pub const LOCAL_COPY_MAX_SIZE: usize = 512 * 1024;
/// Capacity asked for each splice pipe.
pub const PIPE_SIZE: usize = 256 * 1024;
/// Bytes of buffers a thread keeps for reuse at most.
pub const KEEP_BYTES: usize = 1024 * 1024;

#[derive(Default)]
struct Pool {
    bufs: Vec<Box<[u8]>>,
    bytes: usize,
}

thread_local! {
    static POOL: RefCell<Pool> = RefCell::new(Pool::default());
}

/// A buffer of at least `size` bytes: the smallest pooled one no larger than twice `size`,
/// or a new one of exactly `size`.
pub fn take(size: usize) -> Box<[u8]> {
    POOL.with(|p| {
        let mut p = p.borrow_mut();
        let best = p
            .bufs
            .iter()
            .enumerate()
            .filter(|(_, b)| b.len() >= size && b.len() / 2 <= size)
            .min_by_key(|(_, b)| b.len())
            .map(|(i, _)| i);
        if let Some(i) = best {
            let b = p.bufs.swap_remove(i);
            p.bytes -= b.len();
            return b;
        }
        vec![0u8; size].into_boxed_slice()
    })
}

/// Returns a buffer to this thread's pool (freed when the pool is full).
pub fn put(buf: Box<[u8]>) {
    // A thread being torn down has no pool left: the buffer is freed.
    let _ = POOL.try_with(|p| {
        let mut p = p.borrow_mut();
        if p.bytes + buf.len() <= KEEP_BYTES {
            p.bytes += buf.len();
            p.bufs.push(buf);
        }
    });
}

/// Bytes this thread's pool holds (for tests and metrics).
pub fn pooled_bytes() -> usize {
    POOL.with(|p| p.borrow().bytes)
}

/// Empty pipes a thread keeps for reuse at most.
pub const KEEP_PIPES: usize = 16;

/// Pipes open in the process: in use by a relay direction or pooled.
static PIPES_OPEN: AtomicUsize = AtomicUsize::new(0);

/// A splice pipe; counted while open.
pub struct PooledPipe(sys::Pipe);

impl PooledPipe {
    pub fn get(&self) -> &sys::Pipe {
        &self.0
    }
}

impl Drop for PooledPipe {
    fn drop(&mut self) {
        PIPES_OPEN.fetch_sub(1, Ordering::Relaxed);
    }
}

thread_local! {
    static PIPES: RefCell<Vec<PooledPipe>> = const { RefCell::new(Vec::new()) };
}

/// An empty pipe of [`PIPE_SIZE`]: a pooled one, or a new one.
pub fn take_pipe() -> io::Result<PooledPipe> {
    if let Some(p) = PIPES.try_with(|v| v.borrow_mut().pop()).ok().flatten() {
        return Ok(p);
    }
    let p = sys::Pipe::new(PIPE_SIZE)?;
    PIPES_OPEN.fetch_add(1, Ordering::Relaxed);
    Ok(PooledPipe(p))
}

/// Gives an empty pipe back to this thread's pool (closed when the pool is full). A pipe
/// that may still hold bytes must be dropped instead.
pub fn put_pipe(p: PooledPipe) {
    // A thread being torn down has no pool left: the pipe is closed.
    let _ = PIPES.try_with(|v| {
        let mut v = v.borrow_mut();
        if v.len() < KEEP_PIPES {
            v.push(p);
        }
    });
}

/// Pipes open in the process (in use and pooled), for metrics and tests.
pub fn open_pipes() -> usize {
    PIPES_OPEN.load(Ordering::Relaxed)
}

/// Pipes this thread's pool holds.
pub fn pooled_pipes() -> usize {
    PIPES.with(|v| v.borrow().len())
}

/// A buffer size that follows the traffic: it doubles (up to `max`) after a transfer filled
/// the whole buffer, and halves (down to `min`) after one used less than an eighth of it.
#[derive(Clone, Copy, Debug)]
pub struct Adaptive {
    pub size: usize,
    pub min: usize,
    pub max: usize,
}

impl Adaptive {
    /// Starts at `start` (clamped into `min..=max`).
    pub fn new(start: usize, min: usize, max: usize) -> Self {
        let max = max.max(min);
        Adaptive {
            size: start.clamp(min, max),
            min,
            max,
        }
    }

    /// A fixed size.
    pub fn fixed(size: usize) -> Self {
        Adaptive::new(size, size, size)
    }

    /// Records that a transfer moved `n` bytes into `room` bytes of space: filling a room of
    /// at least half the current size grows it.
    #[inline]
    pub fn record(&mut self, n: usize, room: usize) {
        if n >= room && room * 2 >= self.size {
            self.size = (self.size * 2).min(self.max);
        } else if n < self.size / 8 {
            self.size = (self.size / 2).max(self.min);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_a_buffer_that_is_large_enough() {
        let b = take(1000);
        let p = b.as_ptr();
        put(b);
        let again = take(900);
        assert_eq!(again.as_ptr(), p);
        assert_eq!(again.len(), 1000);
        put(again);
        // Twice the size asked is too wasteful: a new buffer.
        let small = take(400);
        assert_eq!(small.len(), 400);
        assert_ne!(small.as_ptr(), p);
    }

    #[test]
    fn keeps_at_most_keep_bytes() {
        let n = KEEP_BYTES / MAX_SIZE + 3;
        let bufs: Vec<_> = (0..n).map(|_| take(MAX_SIZE)).collect();
        for b in bufs {
            put(b);
        }
        assert!(pooled_bytes() <= KEEP_BYTES);
        assert!(pooled_bytes() >= KEEP_BYTES - MAX_SIZE);
    }

    #[test]
    fn adaptive_grows_on_full_reads_and_shrinks_on_small_ones() {
        let mut a = Adaptive::new(DEFAULT_SIZE, 16 * 1024, MAX_SIZE);
        for _ in 0..10 {
            let room = a.size;
            a.record(room, room);
        }
        assert_eq!(a.size, MAX_SIZE);
        a.record(1000, MAX_SIZE);
        assert_eq!(a.size, MAX_SIZE / 2);
        for _ in 0..10 {
            a.record(10, a.size);
        }
        assert_eq!(a.size, 16 * 1024);
        // A full read into a buffer smaller than the target (an old one still held) does not grow it.
        a.record(4096, 4096);
        assert_eq!(a.size, 16 * 1024);
        let mut f = Adaptive::fixed(4096);
        f.record(4096, 4096);
        f.record(1, 4096);
        assert_eq!(f.size, 4096);
    }
}
