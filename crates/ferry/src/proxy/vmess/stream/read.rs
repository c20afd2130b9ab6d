//! The read side of [`VmessStream`]: the client's response header, then chunks opened from the
//! read-ahead into the caller's buffer.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

use super::super::body::OpenedInto;
use super::super::header;
use super::{bad, ReadHead, VmessStream};

impl VmessStream {
    /// Decodes the response header at the front of the read-ahead; `Ok(Some(n))` asks for `n`
    /// bytes.
    fn read_head(&mut self) -> io::Result<Option<usize>> {
        if matches!(self.head, ReadHead::None) {
            return Ok(None);
        }
        let rbuf = self.ra.pending_mut();
        let avail = rbuf.len();
        let used = match &mut self.head {
            ReadHead::None => return Ok(None),
            ReadHead::Aead { key, iv, v } => {
                if avail < 18 {
                    return Ok(Some(18));
                }
                let l = header::open_aead_response_length(key, iv, &rbuf[..18]).map_err(bad)?;
                if avail < 18 + l + 16 {
                    return Ok(Some(18 + l + 16));
                }
                header::open_aead_response(key, iv, *v, &mut rbuf[18..18 + l + 16]).map_err(bad)?;
                18 + l + 16
            }
            ReadHead::Legacy {
                dec,
                v,
                cmd_len,
                chain,
            } => {
                let m = match cmd_len {
                    Some(m) => *m,
                    None => {
                        if avail < 4 {
                            return Ok(Some(4));
                        }
                        dec.decrypt(&mut rbuf[..4]);
                        if rbuf[0] != *v {
                            return Err(bad(header::HeaderError::ResponseAuth));
                        }
                        let m = if rbuf[2] != 0 { rbuf[3] as usize } else { 0 };
                        *cmd_len = Some(m);
                        m
                    }
                };
                if avail < 4 + m {
                    return Ok(Some(4 + m));
                }
                // A SwitchAccount (dynamic port) command is skipped: not supported.
                dec.decrypt(&mut rbuf[4..4 + m]);
                if *chain {
                    let d = std::mem::replace(dec, Box::new(header::cfb_dec(&[0; 16], &[0; 16])));
                    self.opener.set_cfb(*d);
                }
                4 + m
            }
        };
        self.ra.consume(used);
        self.head = ReadHead::None;
        self.opener.on_read(self.ra.pending_mut());
        Ok(None)
    }

    /// Opens as many buffered chunks as fit into `out`.
    fn open_buffered(&mut self, out: &mut ReadBuf<'_>) -> io::Result<Step> {
        if !self.ra.holds_buffer() {
            return Ok(Step::Need(1));
        }
        let before = out.filled().len();
        loop {
            let buffered = self.ra.pending_len();
            let opened = self
                .opener
                .open_into(self.ra.pending_mut(), out.initialize_unfilled())
                .map_err(|e| {
                    tracing::info!("vmess: bad chunk, closing: {e}");
                    io::Error::from(e)
                })?;
            match opened {
                OpenedInto::Copied { len, consumed } => {
                    out.advance(len);
                    self.ra.consume(consumed);
                    if self.packet || out.remaining() == 0 {
                        return Ok(Step::Ready);
                    }
                }
                OpenedInto::InPlace {
                    start,
                    end,
                    consumed,
                } => {
                    self.ra.set_plain(start..end);
                    self.ra.consume(consumed);
                    if start < end {
                        return Ok(Step::Again);
                    }
                    tracing::debug!("vmess: empty chunk of {consumed} bytes, {buffered} buffered");
                    if self.packet {
                        // An empty datagram still counts as one.
                        return Ok(Step::Ready);
                    }
                }
                OpenedInto::Eof => {
                    tracing::debug!("vmess: end marker after {buffered} buffered bytes");
                    self.read_done = true;
                    return Ok(Step::Again);
                }
                OpenedInto::NeedMore(n) => {
                    if out.filled().len() > before {
                        return Ok(Step::Ready);
                    }
                    return Ok(Step::Need(n));
                }
            }
        }
    }
}

/// What [`VmessStream::open_buffered`] leaves to do.
enum Step {
    /// `out` is done: return it.
    Ready,
    /// Plaintext left in place or the end was found: go round again.
    Again,
    /// The read-ahead must hold this many bytes.
    Need(usize),
}

impl AsyncRead for VmessStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = &mut *self;
        if me.hold {
            if let Some(w) = &mut me.hold_wait {
                if w.poll_over(cx).is_ready() {
                    me.hold = false;
                    me.hold_wait = None;
                }
            }
        }
        if !me.hold && me.wpos < me.wlen {
            // Errors surface on the next write.
            let _ = me.poll_drain(cx);
        }
        loop {
            if me.ra.has_plain() {
                me.ra.take_plain_into(out);
                if me.packet {
                    // One datagram per read: what did not fit is dropped.
                    me.ra.clear_plain();
                }
                return Poll::Ready(Ok(()));
            }
            if me.read_done {
                me.ra.release_if_empty();
                return Poll::Ready(Ok(()));
            }
            let need = match me.read_head()? {
                Some(n) => n,
                None => {
                    if me.opener.is_passthrough() && me.ra.pending_len() == 0 && !me.packet {
                        // Nothing framed or buffered: read straight into the caller's buffer.
                        me.ra.release_if_empty();
                        return Pin::new(&mut me.inner).poll_read(cx, out);
                    }
                    match me.open_buffered(out)? {
                        Step::Ready => return Poll::Ready(Ok(())),
                        Step::Again => continue,
                        Step::Need(n) => n,
                    }
                }
            };
            // Pending: the read-ahead gave an empty buffer back.
            let n = ready!(me.ra.poll_fill(cx, Pin::new(&mut me.inner), need))?;
            if n == 0 {
                if me.ra.pending_len() == 0 && matches!(me.head, ReadHead::None) {
                    // The peer closed between chunks without an end marker: treat as the end.
                    tracing::debug!("vmess: peer closed without an end marker");
                    me.read_done = true;
                    continue;
                }
                return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into()));
            }
            if matches!(me.head, ReadHead::None) {
                let fresh = me.ra.pending_mut();
                let at = fresh.len() - n;
                me.opener.on_read(&mut fresh[at..]);
            }
        }
    }
}
