//! The read side: records opened in place in `rx` one at a time, post-handshake messages
//! (tickets dropped, KeyUpdate followed), close_notify, and the buffer given back while idle.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

use super::super::record::{self, HEADER};
use super::{invalid, poll_read_under, Tls13Stream};

impl Tls13Stream {
    /// Decrypts the next complete record in `rx`, if there is one: `Ok(true)` when one was
    /// processed (its plaintext, possibly empty, waits in `rx`).
    pub(super) fn open_next(&mut self) -> io::Result<bool> {
        let Some((ty, body)) = record::header(self.rx.pending()) else {
            return Ok(false);
        };
        if body > record::MAX_BODY {
            return Err(invalid("TLS record too long"));
        }
        let end = HEADER + body;
        if end > self.rx.pending_len() {
            return Ok(false);
        }
        let p = self.rx.pending_mut();
        if ty == record::CHANGE_CIPHER_SPEC && body == 1 && p[HEADER] == 1 {
            // A middlebox-compatibility CCS late in the flight: ignored, as TLS 1.3 allows.
            self.rx.consume(end);
            return Ok(true);
        }
        let (inner, content) = record::open(&mut self.read.key, &mut p[..end])
            .map_err(|e| invalid(&format!("TLS record: {e:?}")))?;
        match inner {
            record::APPLICATION_DATA => self.rx.set_plain(content),
            record::HANDSHAKE => {
                // Rare (tickets, KeyUpdate): a copy keeps the borrow of `rx` short.
                let m = self.rx.pending()[content].to_vec();
                let r = self.post_handshake(&m);
                self.rx.consume(end);
                return r.map(|()| true);
            }
            record::ALERT => {
                let a = &self.rx.pending()[content];
                if a.len() == 2 && a[1] == 0 {
                    self.closed = true;
                } else {
                    return Err(invalid(&format!("TLS alert {a:?} from the peer")));
                }
            }
            other => return Err(invalid(&format!("TLS record of type {other}"))),
        }
        self.rx.consume(end);
        Ok(true)
    }

    /// Handshake messages after the handshake: tickets are dropped, KeyUpdate honoured.
    pub(super) fn post_handshake(&mut self, mut m: &[u8]) -> io::Result<()> {
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

    /// Reads more ciphertext, room made for a whole record; sets `eof` when the peer closed.
    /// Called with no plaintext waiting.
    pub(super) fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let need = HEADER + record::MAX_BODY;
        if self.rx.pending_len() >= need {
            return Poll::Ready(Err(invalid("TLS record too long")));
        }
        let n = ready!(self
            .rx
            .poll_fill_from(cx, &mut self.io, self.direct_read, need))?;
        self.eof |= n == 0;
        Poll::Ready(Ok(()))
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
            if me.rx.has_plain() {
                me.rx.take_plain_into(buf);
                if buf.remaining() == 0 || me.one_record || me.rx.has_plain() {
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
                if me.rx.pending_len() > 0 {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "TLS: peer closed in the middle of a TLS record",
                    )));
                }
                return Poll::Ready(Ok(()));
            }
            ready!(me.poll_fill(cx))?;
        }
    }
}
