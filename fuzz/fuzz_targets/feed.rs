//! A stream for the targets that drive real readers: it gives its bytes in reads of at most
//! `step` bytes, then EOF, never blocking; it keeps what is written to it.
#![allow(dead_code)]

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// What a [`Feed`] was written.
pub type Written = Arc<Mutex<Vec<u8>>>;

pub struct Feed {
    data: Vec<u8>,
    pos: usize,
    step: usize,
    written: Written,
}

impl Feed {
    pub fn new(data: &[u8], step: usize) -> (Feed, Written) {
        let written = Written::default();
        let f = Feed {
            data: data.to_vec(),
            pos: 0,
            step: step.max(1),
            written: written.clone(),
        };
        (f, written)
    }

    /// A boxed stream for layers and inbounds.
    pub fn boxed(data: &[u8], step: usize) -> (ferry::transport::BoxStream, Written) {
        let (f, w) = Self::new(data, step);
        (Box::new(f), w)
    }
}

impl AsyncRead for Feed {
    fn poll_read(mut self: Pin<&mut Self>, _: &mut Context<'_>, b: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let n = (self.data.len() - self.pos).min(self.step).min(b.remaining());
        let pos = self.pos;
        b.put_slice(&self.data[pos..pos + n]);
        self.pos += n;
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Feed {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, b: &[u8]) -> Poll<io::Result<usize>> {
        let mut w = self.written.lock().unwrap();
        // Bounded: a reader that answers every byte must not grow without end.
        if w.len() < 1 << 20 {
            w.extend_from_slice(b);
        }
        Poll::Ready(Ok(b.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl ferry::transport::Stream for Feed {}

/// A runtime for one input: current-thread, its clock paused (timers fire as soon as nothing
/// else can run, so a reader that waits on a timer costs no wall time).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap()
}

/// `(control byte, piece size from it, rest)`.
pub fn split(data: &[u8]) -> (u8, usize, &[u8]) {
    match data.split_first() {
        Some((&b, rest)) => (b, (b as usize >> 2) + 1, rest),
        None => (0, 1, &[]),
    }
}
