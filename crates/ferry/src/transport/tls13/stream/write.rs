//! The write side: plaintext sealed into records (KeyUpdate when a key nears its limit or the
//! peer asked), written out as the socket takes them; close_notify on shutdown and on drop.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::AsyncWrite;

use super::super::record::{self, HEADER, MAX_PLAIN, TAG};
use super::{Tls13Stream, KEY_LIMIT, WRITE_CHUNK};
use crate::transport::poll_write_all;

impl Tls13Stream {
    /// Writes out the sealed records.
    pub(super) fn poll_flush_tx(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.tx_pos < self.tx.len() {
            ready!(poll_write_all(&mut self.io, cx, &self.tx, &mut self.tx_pos))?;
        }
        self.tx.clear();
        self.tx_pos = 0;
        if self.tx.capacity() > 2 * (HEADER + MAX_PLAIN + 1 + TAG) {
            self.tx = Vec::new();
        }
        Poll::Ready(Ok(()))
    }

    /// Seals `bufs` (up to [`WRITE_CHUNK`] bytes) into records in `tx`; returns how much.
    pub(super) fn seal(&mut self, bufs: &[io::IoSlice<'_>]) -> usize {
        if self.write.key.seq() + (WRITE_CHUNK / MAX_PLAIN) as u64 + 1 >= KEY_LIMIT {
            // Our key is near its limit: move it on (update_requested = 0, as rustls does).
            let mut m = Vec::new();
            record::message(record::KEY_UPDATE, &[0], &mut m);
            record::seal(&mut self.write.key, record::HANDSHAKE, &m, 0, &mut self.tx);
            self.write.update(self.suite);
        }
        if self.update_owed {
            self.update_owed = false;
            let mut m = Vec::new();
            record::message(record::KEY_UPDATE, &[0], &mut m);
            record::seal(&mut self.write.key, record::HANDSHAKE, &m, 0, &mut self.tx);
            self.write.update(self.suite);
        }
        let total: usize = bufs.iter().map(|b| b.len()).sum::<usize>().min(WRITE_CHUNK);
        let mut taken = 0;
        let mut slices = bufs.iter().map(|b| &b[..]).filter(|b| !b.is_empty());
        let mut cur: &[u8] = slices.next().unwrap_or(&[]);
        while taken < total {
            let n = (total - taken).min(MAX_PLAIN);
            let start = self.tx.len();
            self.tx.reserve(HEADER + n + 1 + TAG);
            self.tx
                .extend_from_slice(&[record::APPLICATION_DATA, 3, 3, 0, 0]);
            let mut left = n;
            while left > 0 {
                if cur.is_empty() {
                    cur = slices.next().unwrap_or(&[]);
                    continue;
                }
                let k = left.min(cur.len());
                self.tx.extend_from_slice(&cur[..k]);
                cur = &cur[k..];
                left -= k;
            }
            self.tx.push(record::APPLICATION_DATA);
            let body = (n + 1 + TAG) as u16;
            self.tx[start + 3..start + 5].copy_from_slice(&body.to_be_bytes());
            let (head, rest) = self.tx[start..].split_at_mut(HEADER);
            let tag = self.write.key.seal(head, rest);
            self.tx.extend_from_slice(&tag);
            taken += n;
        }
        taken
    }
}

impl Drop for Tls13Stream {
    fn drop(&mut self) {
        self.close_notify_now();
    }
}

impl Tls13Stream {
    /// Dropped without a shutdown (Ferry closing the connection itself: a bad request, a
    /// timeout): close_notify if the socket takes it at once, as Go's `Conn.Close` sends it
    /// (waiting is not possible here); a bare FIN would tell Ferry apart.
    fn close_notify_now(&mut self) {
        if self.close_sent || self.raw_write {
            return;
        }
        let mut cx = Context::from_waker(std::task::Waker::noop());
        // Not behind a record half written.
        if !matches!(self.poll_flush_tx(&mut cx), Poll::Ready(Ok(()))) {
            return;
        }
        record::seal(&mut self.write.key, record::ALERT, &[1, 0], 0, &mut self.tx);
        self.close_sent = true;
        let _ = self.poll_flush_tx(&mut cx);
    }
}

impl AsyncWrite for Tls13Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[io::IoSlice::new(buf)])
    }

    /// Several slices go into one record (a protocol header with the first payload).
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        if me.raw_write {
            return Pin::new(&mut me.io).poll_write_vectored(cx, bufs);
        }
        ready!(me.poll_flush_tx(cx))?;
        if bufs.iter().all(|b| b.is_empty()) {
            return Poll::Ready(Ok(0));
        }
        let n = me.seal(bufs);
        // Best effort now; what the socket does not take goes with the next write or flush.
        if let Poll::Ready(Err(e)) = me.poll_flush_tx(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        ready!(me.poll_flush_tx(cx))?;
        Pin::new(&mut me.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if !me.close_sent && !me.raw_write {
            ready!(me.poll_flush_tx(cx))?;
            record::seal(&mut me.write.key, record::ALERT, &[1, 0], 0, &mut me.tx);
            me.close_sent = true;
        }
        ready!(me.poll_flush_tx(cx))?;
        Pin::new(&mut me.io).poll_shutdown(cx)
    }
}
