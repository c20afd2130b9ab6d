//! The read side: records opened in place in `rx` one at a time, post-handshake messages
//! (tickets dropped, KeyUpdate followed), close_notify, and the buffer given back while idle.

use std::io;
use std::ops::Range;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

use super::super::record::{self, HEADER};
use super::{invalid, poll_read_under, Tls13Stream, RX_SIZE};
use crate::common::pool;

impl Tls13Stream {
    /// Decrypts the next complete record in `rx`, if there is one: `Ok(true)` when one was
    /// processed (its plaintext, possibly empty, is in `plain`).
    pub(super) fn open_next(&mut self) -> io::Result<bool> {
        let Some(rx) = self.rx.as_deref_mut() else {
            return Ok(false);
        };
        let Some((ty, body)) = record::header(&rx[self.start..self.len]) else {
            return Ok(false);
        };
        if body > record::MAX_BODY {
            return Err(invalid("TLS record too long"));
        }
        if self.start + HEADER + body > self.len {
            if self.start + HEADER + body > rx.len() {
                // Make room for the whole record at the front.
                rx.copy_within(self.start..self.len, 0);
                self.len -= self.start;
                self.start = 0;
            }
            return Ok(false);
        }
        let end = self.start + HEADER + body;
        if ty == record::CHANGE_CIPHER_SPEC && body == 1 && rx[self.start + HEADER] == 1 {
            // A middlebox-compatibility CCS late in the flight: ignored, as TLS 1.3 allows.
            self.start = end;
            self.plain = end..end;
            return Ok(true);
        }
        let (inner, content) = record::open(&mut self.read.key, &mut rx[self.start..end])
            .map_err(|e| invalid(&format!("TLS record: {e:?}")))?;
        let content = self.start + content.start..self.start + content.end;
        self.start = end;
        match inner {
            record::APPLICATION_DATA => self.plain = content,
            record::HANDSHAKE => {
                self.plain = end..end;
                self.post_handshake(content)?;
            }
            record::ALERT => {
                self.plain = end..end;
                let a = &rx[content];
                if a.len() == 2 && a[1] == 0 {
                    self.closed = true;
                } else {
                    return Err(invalid(&format!("TLS alert {a:?} from the peer")));
                }
            }
            other => return Err(invalid(&format!("TLS record of type {other}"))),
        }
        Ok(true)
    }

    /// Handshake messages after the handshake: tickets are dropped, KeyUpdate honoured.
    #[allow(
        clippy::expect_used,
        clippy::unwrap_used,
        reason = "state the read path set just before"
    )]
    pub(super) fn post_handshake(&mut self, content: Range<usize>) -> io::Result<()> {
        let rx = self.rx.as_deref().expect("a record was just read");
        let mut m = &rx[content];
        while m.len() >= 4 {
            let len = 4 + ((m[1] as usize) << 16 | (m[2] as usize) << 8 | m[3] as usize);
            if m.len() < len {
                return Err(invalid("handshake message split across records"));
            }
            match m[0] {
                record::NEW_SESSION_TICKET => {}
                record::KEY_UPDATE if len == 5 => {
                    self.read.update(self.suite);
                    if m[4] == 1 {
                        self.update_owed = true;
                    }
                }
                t => return Err(invalid(&format!("unexpected handshake message {t}"))),
            }
            m = &m[len..];
        }
        if !m.is_empty() {
            return Err(invalid("handshake message split across records"));
        }
        Ok(())
    }

    /// Reads more ciphertext; sets `eof` when the peer closed.
    pub(super) fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.start == self.len && self.plain.is_empty() {
            (self.start, self.len, self.plain) = (0, 0, 0..0);
        }
        if let Some(b) = self.rx.as_deref_mut() {
            if self.len == b.len() {
                // Full: move what is not yet read to the front.
                let from = self.plain.start.min(self.start);
                b.copy_within(from..self.len, 0);
                self.plain = self.plain.start - from..self.plain.end - from;
                self.start -= from;
                self.len -= from;
                if self.len == b.len() {
                    return Poll::Ready(Err(invalid("TLS record too long")));
                }
            }
        }
        if self.direct_read {
            let Some(sock) = self.io.socket() else {
                return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
            };
            if self.len == 0 {
                // Idle: hold no buffer while waiting.
                if let Some(b) = self.rx.take() {
                    pool::put(b);
                }
                ready!(sock.poll_read_ready(cx))?;
            }
            let b = self.rx.get_or_insert_with(|| pool::take(RX_SIZE));
            let n = ready!(sock.poll_read_into(cx, &mut b[self.len..]))?;
            self.eof |= n == 0;
            self.len += n;
            return Poll::Ready(Ok(()));
        }
        let b = self.rx.get_or_insert_with(|| pool::take(RX_SIZE));
        let mut rb = ReadBuf::new(&mut b[self.len..]);
        ready!(Pin::new(&mut self.io).poll_read(cx, &mut rb))?;
        let n = rb.filled().len();
        self.eof |= n == 0;
        self.len += n;
        Poll::Ready(Ok(()))
    }

    pub(super) fn release_idle(&mut self) {
        if self.plain.is_empty() && self.start == self.len {
            if let Some(b) = self.rx.take() {
                pool::put(b);
            }
            (self.start, self.len, self.plain) = (0, 0, 0..0);
        }
    }

    pub(super) fn poll_read_raw(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        poll_read_under(&mut self.io, self.direct_read, cx, buf)
    }
}

impl AsyncRead for Tls13Stream {
    #[allow(
        clippy::expect_used,
        clippy::unwrap_used,
        reason = "state the read path set just before"
    )]
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
            if !me.plain.is_empty() {
                let rx = me.rx.as_deref().expect("plaintext lives in rx");
                let n = me.plain.len().min(buf.remaining());
                buf.put_slice(&rx[me.plain.start..me.plain.start + n]);
                me.plain.start += n;
                if buf.remaining() == 0 || me.one_record || !me.plain.is_empty() {
                    return Poll::Ready(Ok(()));
                }
            }
            if me.closed {
                return Poll::Ready(Ok(()));
            }
            if me.open_next()? {
                if me.update_owed {
                    // Our KeyUpdate goes out now if the socket takes it, else with the next write.
                    let _ = me.seal(&[]);
                    let _ = me.poll_flush_tx(cx)?;
                }
                continue;
            }
            if buf.filled().len() > start {
                return Poll::Ready(Ok(()));
            }
            if me.eof {
                if me.start < me.len {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "TLS: peer closed in the middle of a TLS record",
                    )));
                }
                return Poll::Ready(Ok(()));
            }
            match me.poll_fill(cx) {
                Poll::Ready(r) => r?,
                Poll::Pending => {
                    me.release_idle();
                    return Poll::Pending;
                }
            }
        }
    }
}
