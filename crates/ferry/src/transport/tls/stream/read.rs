//! The read side: ciphertext into `rx` (a [`ReadAhead`](crate::transport::ReadAhead)), handed
//! to rustls in pieces (one record at a time for XTLS Vision), plaintext out; the buffer goes
//! back to the pool while idle.

use std::io::{self, Read};
use std::ops::{Deref, DerefMut};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use rustls::{ConnectionCommon, SideData};
use tokio::io::{AsyncRead, ReadBuf};

use super::super::capture;
use super::{NotTls, TlsStream, MAX_RECORD};
use crate::transport::tls13::stream::poll_read_under;

impl<C, D> TlsStream<C>
where
    C: DerefMut + Deref<Target = ConnectionCommon<D>> + Send + Unpin + 'static,
    D: SideData + 'static,
{
    /// Whether `rx` holds bytes to hand rustls: any, or in one-record mode a whole record.
    pub(super) fn feedable(&self) -> bool {
        if self.fed >= self.rx.pending_len() {
            return false;
        }
        if !self.one_record {
            return true;
        }
        self.next_record_end().is_some()
    }

    /// The end (from the start of what `rx` holds) of the first record not yet processed
    /// (part of it may have been handed over before one-record mode began), if it is all there.
    pub(super) fn next_record_end(&self) -> Option<usize> {
        let p = self.rx.pending();
        let h = p.get(..5)?;
        let end = 5 + u16::from_be_bytes([h[3], h[4]]) as usize;
        (end <= p.len() && end > self.fed).then_some(end)
    }

    /// Hands rustls the next piece of `rx` (one record in one-record mode) and processes it;
    /// errors leave rustls's alert queued (sent if the socket takes it at once).
    pub(super) fn feed(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        let held = self.rx.pending_len();
        let end = match self.one_record {
            true => self.next_record_end().unwrap_or(held),
            false => held,
        };
        let p = self.rx.pending();
        if self.check_first {
            // A TLS client starts with a handshake record (22) of a 3.x version.
            if p.first() != Some(&22) || (p.len() > 1 && p[1] != 3) {
                return Err(io::Error::new(io::ErrorKind::InvalidData, NotTls));
            }
            self.check_first = false;
        }
        let n = self.conn.read_tls(&mut &p[self.fed..end])?;
        self.fed += n;
        let processed = match self.conn.is_handshaking() {
            // The handshake's secrets are derived in here: keep the traffic secrets.
            true => capture::capture(&mut self.secrets, || self.conn.process_new_packets()),
            false => self.conn.process_new_packets(),
        };
        if let Err(e) = processed {
            // Best effort: tell the peer why (the alert rustls queued).
            let _ = self.poll_flush_tls(cx);
            return Err(io::Error::new(io::ErrorKind::InvalidData, e));
        }
        // Every complete record handed over has been processed now: drop them from `rx`.
        let p = self.rx.pending();
        let mut done = 0;
        while self.fed - done >= 5 {
            let l = u16::from_be_bytes([p[done + 3], p[done + 4]]) as usize;
            if done + 5 + l > self.fed {
                break;
            }
            done += 5 + l;
        }
        self.rx.consume(done);
        self.fed -= done;
        Ok(())
    }

    /// Reads more ciphertext from the network into `rx`, room made for a whole record; sets
    /// `eof` when the peer closed.
    pub(super) fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.rx.pending_len() >= MAX_RECORD {
            // More than a record's worth held and no record complete in it.
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "TLS record too long",
            )));
        }
        let n = ready!(self
            .rx
            .poll_fill_from(cx, &mut self.io, self.direct_read, MAX_RECORD))?;
        self.eof |= n == 0;
        Poll::Ready(Ok(()))
    }

    /// After [`OuterTls::read_raw`]: reads the stream under TLS as it is.
    pub(super) fn poll_read_raw(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        poll_read_under(&mut self.io, self.direct_read, cx, buf)
    }
}

impl<C, D> AsyncRead for TlsStream<C>
where
    C: DerefMut + Deref<Target = ConnectionCommon<D>> + Send + Unpin + 'static,
    D: SideData + 'static,
{
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if me.raw_read {
            return me.poll_read_raw(cx, buf);
        }
        let start = buf.filled().len();
        loop {
            // Plaintext first; keep going while more is already here and there is room.
            match me.conn.reader().read(buf.initialize_unfilled()) {
                Ok(0) if buf.remaining() > 0 => return Poll::Ready(Ok(())), // close_notify
                Ok(n) => {
                    buf.advance(n);
                    if buf.remaining() == 0 || me.fed == me.rx.pending_len() || me.one_record {
                        return Poll::Ready(Ok(()));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The peer closed the socket without close_notify at a record boundary: an
                // end of stream, as Go's TLS treats it.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    return Poll::Ready(Ok(()));
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
            if me.feedable() {
                me.feed(cx)?;
                // Records rustls answers (key updates, tickets) go out when the socket takes them.
                if me.conn.wants_write() {
                    let _ = me.poll_flush_tls(cx)?;
                }
                continue;
            }
            if buf.filled().len() > start {
                return Poll::Ready(Ok(()));
            }
            if me.eof {
                if me.rx.pending_len() > 0 {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "peer closed in the middle of a TLS record",
                    )));
                }
                // Let rustls see the end (its reader then reports it).
                me.conn.read_tls(&mut &[][..])?;
                me.conn
                    .process_new_packets()
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                return Poll::Ready(Ok(()));
            }
            ready!(me.poll_fill(cx))?;
        }
    }
}
