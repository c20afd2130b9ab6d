//! Copy buffers, pooled per thread so idle connections hold none.

use std::cell::RefCell;

/// Default copy buffer: large enough for a full TLS record or AEAD chunk per syscall.
pub const DEFAULT_SIZE: usize = 32 * 1024;
/// Capacity asked for each splice pipe.
pub const PIPE_SIZE: usize = 256 * 1024;
/// Buffers kept per thread at most.
const KEEP: usize = 64;

thread_local! {
    static POOL: RefCell<Vec<Box<[u8]>>> = const { RefCell::new(Vec::new()) };
}

/// Takes a buffer of exactly `size` bytes (from the pool when one of that size is there).
pub fn take(size: usize) -> Box<[u8]> {
    POOL.with(|p| {
        let mut p = p.borrow_mut();
        if let Some(i) = p.iter().rposition(|b| b.len() == size) {
            return p.swap_remove(i);
        }
        vec![0u8; size].into_boxed_slice()
    })
}

/// Returns a buffer to this thread's pool (dropped when the pool is full).
pub fn put(buf: Box<[u8]>) {
    POOL.with(|p| {
        let mut p = p.borrow_mut();
        if p.len() < KEEP {
            p.push(buf);
        }
    })
}
