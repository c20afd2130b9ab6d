//! The WebSocket reader: any bytes, cut into reads of any size, as a server or a client reads
//! them, never panic, never make more payload than came in, and end (data, EOF or an error)
//! without waiting for more input than there is.
#![no_main]
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use ferry::transport::ws::WsStream;
use ferry::transport::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Gives `data` in reads of `step` bytes, then EOF; takes any write.
struct Feed {
    data: Vec<u8>,
    pos: usize,
    step: usize,
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
        Poll::Ready(Ok(b.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl Stream for Feed {}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&ctl, rest)) = data.split_first() else {
        return;
    };
    let client = ctl & 1 != 0;
    let step = (ctl >> 1) as usize + 1;
    let out_size = [1usize, 7, 4096, 65536][(ctl as usize >> 6) & 3];
    let feed = Feed { data: rest.to_vec(), pos: 0, step };
    let mut ws = WsStream::new(Box::new(feed), client, Vec::new(), Bytes::new());
    let mut cx = Context::from_waker(Waker::noop());
    let mut buf = vec![0u8; out_size];
    let mut total = 0usize;
    // Every read makes progress (the feed never blocks): bounded by the input's length.
    for _ in 0..rest.len() + 2 {
        let mut rb = ReadBuf::new(&mut buf);
        match Pin::new(&mut ws).poll_read(&mut cx, &mut rb) {
            Poll::Ready(Ok(())) if rb.filled().is_empty() => return,
            Poll::Ready(Ok(())) => {
                total += rb.filled().len();
                assert!(total <= rest.len(), "more payload than input");
            }
            Poll::Ready(Err(_)) => return,
            Poll::Pending => panic!("pending on a feed that never blocks"),
        }
    }
    panic!("no end after {} reads", rest.len() + 2);
});
