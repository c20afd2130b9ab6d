//! The read side of [`SsStream`]: the decrypting half and `poll_read` (salt, read-ahead, chunks
//! opened straight into the caller's buffer).

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, ReadBuf};

use super::super::aead::{ChunkOpener, Error, OpenTo};
use super::super::stream_cipher::StreamCrypt;
use super::{ReadKey, SsStream};

/// The decrypting half of a connection.
pub enum Opener {
    Plain,
    Stream(StreamCrypt),
    Aead(ChunkOpener),
}

impl Opener {
    /// Bytes of the next unit that can fail authentication (0: none can).
    fn unit_len(&self) -> usize {
        match self {
            Opener::Aead(o) => o.unit_len(),
            Opener::Plain | Opener::Stream(_) => 0,
        }
    }

    /// Decrypts the next unit at the start of `buf` into `dst` (non-empty), or in place when an
    /// AEAD chunk does not fit it.
    fn open_to(&mut self, buf: &mut [u8], dst: &mut [u8]) -> Result<OpenTo, Error> {
        match self {
            Opener::Aead(o) => o.open_to(buf, dst),
            Opener::Plain | Opener::Stream(_) => {
                if buf.is_empty() {
                    return Ok(OpenTo::Need(1));
                }
                let n = buf.len().min(dst.len());
                match self {
                    Opener::Stream(s) => s.apply_to(&buf[..n], &mut dst[..n]),
                    _ => dst[..n].copy_from_slice(&buf[..n]),
                }
                Ok(OpenTo::Written {
                    consumed: n,
                    written: n,
                })
            }
        }
    }
}

impl SsStream {
    /// Makes the socket underneath close with an RST (SO_LINGER 0).
    fn reset_on_close(&self) {
        if let Some(crate::transport::RawSocket::Tcp(t)) = self.inner.socket() {
            let _ = socket2::SockRef::from(t).set_linger(Some(std::time::Duration::ZERO));
        }
    }
}

impl AsyncRead for SsStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        me.poll_request_timer(cx)?;
        if !me.out.is_empty() {
            if let Poll::Ready(Err(e)) = me.poll_drain(cx) {
                return Poll::Ready(Err(e));
            }
        }
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        if !me.front.is_empty() {
            let n = me.front.len().min(buf.remaining());
            buf.put_slice(&me.front[..n]);
            me.front.advance(n);
            if me.front.is_empty() {
                // Drop the allocation behind it (up to a whole 2022 initial payload).
                me.front = Bytes::new();
            }
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        loop {
            if me.ra.has_plain() {
                me.ra.take_plain_into(buf);
                if buf.remaining() == 0 {
                    return Poll::Ready(Ok(()));
                }
            }
            let need = match &mut me.rkey {
                ReadKey::Failed => return Poll::Ready(Err(io::ErrorKind::InvalidData.into())),
                ReadKey::AwaitSalt(n, _) => {
                    let n = *n;
                    if me.ra.pending_len() >= n {
                        let ReadKey::AwaitSalt(_, f) =
                            std::mem::replace(&mut me.rkey, ReadKey::Failed)
                        else {
                            continue;
                        };
                        me.rkey = ReadKey::Ready(f(&me.ra.pending()[..n])?);
                        me.ra.consume(n);
                        continue;
                    }
                    n
                }
                ReadKey::Ready(op) => {
                    let unit = op.unit_len();
                    match op.open_to(me.ra.pending_mut(), buf.initialize_unfilled()) {
                        Ok(OpenTo::Written { consumed, written }) => {
                            me.ra.consume(consumed);
                            buf.advance(written);
                            if buf.remaining() == 0 {
                                return Poll::Ready(Ok(()));
                            }
                            continue;
                        }
                        Ok(OpenTo::InPlace { consumed, plain }) => {
                            me.ra.set_plain(plain);
                            me.ra.consume(consumed);
                            continue;
                        }
                        Ok(OpenTo::Need(n)) => n,
                        Err(e) => {
                            me.rkey = ReadKey::Failed;
                            // shadowsocks-rust reads each unit exactly and closes on the one
                            // that fails: bytes already past it stay unread in its socket, so
                            // the client gets an RST. Do the same.
                            if me.ra.pending_len() > unit {
                                me.reset_on_close();
                            }
                            // What was opened before the bad unit is still handed over (the
                            // next read returns the error).
                            if buf.filled().len() > before {
                                return Poll::Ready(Ok(()));
                            }
                            return Poll::Ready(Err(e.into()));
                        }
                    }
                }
            };
            if buf.filled().len() > before {
                me.ra.release_if_empty();
                return Poll::Ready(Ok(()));
            }
            if me.eof {
                return Poll::Ready(if me.ra.pending_len() == 0 {
                    Ok(())
                } else {
                    Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "connection closed inside a chunk",
                    ))
                });
            }
            if need > me.ra.max_size() {
                return Poll::Ready(Err(Error::TooLong(need).into()));
            }
            // Pending: the read-ahead gave an empty buffer back.
            if ready!(me.ra.poll_fill(cx, Pin::new(&mut me.inner), need))? == 0 {
                me.eof = true;
                me.ra.release_if_empty();
            }
        }
    }
}
