//! Bytes the loadgen has moved and had confirmed, across every connection of the process: the
//! live line reads it ([`crate::runner`]), the transfers add to it as they go.

use std::sync::atomic::{AtomicU64, Ordering};

static MOVED: AtomicU64 = AtomicU64::new(0);

/// Adds `n` confirmed bytes.
pub fn add(n: u64) {
    MOVED.fetch_add(n, Ordering::Relaxed);
}

/// The bytes confirmed since the process started.
pub fn moved() -> u64 {
    MOVED.load(Ordering::Relaxed)
}
