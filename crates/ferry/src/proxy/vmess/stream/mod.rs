//! The VMess body as a [`Stream`]: writes become sealed chunks (several per syscall), reads
//! open chunks in place. The client side also reads the response header first and sends its
//! request header together with the first payload.//!
//! `read.rs` holds the read side (response header, `poll_read`), `write.rs` the write side
//! (write buffer, vectored plain writes, `poll_write`).

mod read;
mod write;

use std::io;
use std::time::Duration;

use crate::proxy::first_payload::FirstPayloadWait;
use bytes::Bytes;

use super::body::{BodyError, Opener, Sealer};
use super::header::CfbDec;
use crate::relay::pool;
use crate::transport::{BoxStream, ReadAhead, Stream};

/// Read buffer: one read brings many chunks (16 of Xray's 8 KiB ones).
const READ_BUF: usize = 128 * 1024;
/// Write buffer: sealed chunks collect here until it is full, a flush, a read or shutdown.
const WRITE_BUF: usize = 128 * 1024;
/// `none` over TCP: chunks per vectored write at most (two slices each).
const VEC_CHUNKS: usize = 16;
/// How long a client holds its request header waiting for the first payload (as Xray).
pub const HEADER_HOLD: Duration = Duration::from_millis(100);

/// A response header the client still has to read.
pub enum ReadHead {
    None,
    Aead {
        key: [u8; 16],
        iv: [u8; 16],
        v: u8,
    },
    Legacy {
        dec: Box<CfbDec>,
        v: u8,
        /// Cmd length once the first 4 bytes are decrypted.
        cmd_len: Option<usize>,
        /// Legacy security: the body continues this CFB stream.
        chain: bool,
    },
}

fn bad(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("vmess: {e}"))
}

impl From<BodyError> for io::Error {
    fn from(e: BodyError) -> io::Error {
        bad(e)
    }
}

/// One VMess connection's body, both directions. Both buffers come from the relay's pool
/// and go back to it when empty, so an idle connection holds none.
pub struct VmessStream {
    inner: BoxStream,
    opener: Opener,
    head: ReadHead,
    /// Bytes read ahead (unmasked once the header is read) and opened plaintext not handed
    /// out yet.
    ra: ReadAhead,
    read_done: bool,
    /// UDP: one datagram per chunk each way.
    packet: bool,
    sealer: Sealer,
    /// Sealed bytes not written yet: `wbuf[wpos..wlen]`.
    wbuf: Option<Box<[u8]>>,
    wpos: usize,
    wlen: usize,
    /// `none` over TCP on a socket that takes vectored writes: payload goes out uncopied.
    vectored: bool,
    /// The header waits in `wbuf` for the first payload.
    hold: bool,
    hold_wait: Option<FirstPayloadWait>,
    shut: bool,
}

impl VmessStream {
    /// `pending_write` is a header to send before the first chunk (held until the first write or,
    /// with `hold_for`, until that time passes). `read_ahead` holds bytes already read past the
    /// request header (server side).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        inner: BoxStream,
        sealer: Sealer,
        opener: Opener,
        head: ReadHead,
        pending_write: Vec<u8>,
        hold_for: Option<Duration>,
        read_ahead: &[u8],
        packet: bool,
    ) -> VmessStream {
        let hold = !pending_write.is_empty();
        // A held header gets a buffer of its own size: a connection that never sends (an idle
        // one, or a server whose target has not answered yet) keeps no large buffer. The first
        // payload moves it into a full-size one.
        let wbuf = hold.then(|| {
            let mut b = pool::take(pending_write.len());
            b[..pending_write.len()].copy_from_slice(&pending_write);
            b
        });
        let vectored = sealer.is_plain_stream() && !packet && inner.is_write_vectored();
        let mut s = VmessStream {
            inner,
            opener,
            head,
            ra: ReadAhead::with_prefill(pool::Adaptive::fixed(READ_BUF), read_ahead),
            read_done: false,
            packet,
            sealer,
            wbuf,
            wpos: 0,
            wlen: pending_write.len(),
            vectored,
            hold,
            hold_wait: hold_for.filter(|_| hold).map(FirstPayloadWait::started),
            shut: false,
        };
        if matches!(s.head, ReadHead::None) {
            s.opener.on_read(s.ra.pending_mut());
        }
        s
    }
}

impl VmessStream {
    /// Security `none`/`zero` without masking: the body is the plain bytes, so the relay may
    /// bypass this layer once its header went out and its buffers are empty.
    fn passthrough(&self) -> bool {
        self.sealer.is_passthrough()
            && self.opener.is_passthrough()
            && matches!(self.head, ReadHead::None)
            && !self.packet
            && !self.shut
    }
}

impl Stream for VmessStream {
    fn socket(&self) -> Option<crate::transport::RawSocket<'_>> {
        if self.passthrough() {
            self.inner.socket()
        } else {
            None
        }
    }

    fn take_read_direct(&mut self) -> Option<Bytes> {
        if !self.passthrough() {
            return None;
        }
        let under = self.inner.take_read_direct()?;
        let read = self.ra.take_all();
        if under.is_empty() {
            return Some(read);
        }
        if read.is_empty() {
            return Some(under);
        }
        let mut both = Vec::with_capacity(read.len() + under.len());
        both.extend_from_slice(&read);
        both.extend_from_slice(&under);
        Some(Bytes::from(both))
    }

    fn write_direct(&self) -> bool {
        self.passthrough()
            && self.wbuf.as_ref().is_none_or(|_| self.wpos == self.wlen)
            && self.inner.write_direct()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::vmess::body::{BodyParams, Opened, Security};
    use std::pin::Pin;
    use std::sync::{Arc, Mutex};
    use std::task::{Context, Poll};
    use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};

    /// A socket that records what is written, takes a varying, often small, number of bytes
    /// per call (vectored or not) and now and then is not ready; reads come from a buffer.
    struct Trickle {
        wire: Arc<Mutex<Vec<u8>>>,
        input: Vec<u8>,
        seed: u64,
        vectored: bool,
    }

    impl Trickle {
        fn next(&mut self) -> u64 {
            self.seed ^= self.seed << 13;
            self.seed ^= self.seed >> 7;
            self.seed ^= self.seed << 17;
            self.seed
        }
        /// How many bytes this call takes (None: not ready, woken at once).
        fn budget(&mut self, cx: &mut Context<'_>) -> Option<usize> {
            let r = self.next();
            if r.is_multiple_of(7) {
                cx.waker().wake_by_ref();
                return None;
            }
            Some(match r % 3 {
                0 => 1 + (r >> 8) as usize % 3,
                1 => 1 + (r >> 8) as usize % 9000,
                _ => 1 << 20,
            })
        }
    }

    impl AsyncRead for Trickle {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            out: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let Some(n) = self.budget(cx) else {
                return Poll::Pending;
            };
            let n = n.min(out.remaining()).min(self.input.len());
            out.put_slice(&self.input[..n]);
            self.input.drain(..n);
            Poll::Ready(Ok(()))
        }
    }

    impl AsyncWrite for Trickle {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            data: &[u8],
        ) -> Poll<io::Result<usize>> {
            let Some(n) = self.budget(cx) else {
                return Poll::Pending;
            };
            let n = n.min(data.len());
            self.wire.lock().unwrap().extend_from_slice(&data[..n]);
            Poll::Ready(Ok(n))
        }
        fn poll_write_vectored(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            bufs: &[io::IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            let Some(mut n) = self.budget(cx) else {
                return Poll::Pending;
            };
            let mut done = 0;
            let mut w = self.wire.lock().unwrap();
            for b in bufs {
                let k = n.min(b.len());
                w.extend_from_slice(&b[..k]);
                done += k;
                n -= k;
                if n == 0 {
                    break;
                }
            }
            Poll::Ready(Ok(done))
        }
        fn is_write_vectored(&self) -> bool {
            self.vectored
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    impl Stream for Trickle {}

    fn params(security: Security) -> BodyParams {
        BodyParams {
            security,
            opt: 0x0d
                & if security == Security::None {
                    0x05
                } else {
                    0xff
                },
            packet: false,
            key: [1; 16],
            iv: [2; 16],
            req_key: [3; 16],
            req_iv: [4; 16],
        }
    }

    fn data() -> Vec<u8> {
        (0..300_000u32).map(|i| (i * 31 + i / 977) as u8).collect()
    }

    /// A header held for the first payload keeps a buffer of its own size, not a full write
    /// buffer: a connection whose other side never sends stays small.
    #[test]
    fn a_held_header_keeps_only_its_own_bytes() {
        let p = params(Security::Aes128Gcm);
        let (a, _b) = tokio::io::duplex(64);
        let s = VmessStream::new(
            Box::new(a),
            Sealer::new(&p, None).unwrap(),
            Opener::new(&p, None).unwrap(),
            ReadHead::None,
            vec![7u8; 38],
            None,
            &[],
            false,
        );
        let held = s.wbuf.as_ref().map_or(0, |b| b.len());
        assert!(
            (38..=76).contains(&held),
            "held header buffer is {held} bytes"
        );
        assert!(!s.ra.holds_buffer());
    }

    /// Writes through a [`VmessStream`] onto a trickling socket in uneven pieces, with
    /// flushes and reads mixed in, and decodes the wire: every byte arrives once, in order.
    #[tokio::test]
    async fn writes_survive_partial_and_vectored_socket_writes() {
        for security in [
            Security::None,
            Security::Aes128Gcm,
            Security::Chacha20Poly1305,
        ] {
            for vectored in [true, false] {
                for seed in [1u64, 77, 12345] {
                    let wire = Arc::new(Mutex::new(Vec::new()));
                    let sock = Trickle {
                        wire: wire.clone(),
                        input: Vec::new(),
                        seed,
                        vectored,
                    };
                    let p = params(security);
                    let mut s = VmessStream::new(
                        Box::new(sock),
                        Sealer::new(&p, None).unwrap(),
                        Opener::new(&p, None).unwrap(),
                        ReadHead::None,
                        b"HEADER".to_vec(),
                        None,
                        &[],
                        false,
                    );
                    let d = data();
                    let mut off = 0;
                    let mut i = 0usize;
                    while off < d.len() {
                        let n = [1usize, 5000, 8190, 8191, 40_000, 131_072][i % 6];
                        let n = n.min(d.len() - off);
                        s.write_all(&d[off..off + n]).await.unwrap();
                        if i.is_multiple_of(4) {
                            s.flush().await.unwrap();
                        }
                        off += n;
                        i += 1;
                    }
                    s.shutdown().await.unwrap();
                    let mut w = wire.lock().unwrap().clone();
                    assert_eq!(&w[..6], b"HEADER");
                    w.drain(..6);
                    let mut o = Opener::new(&p, None).unwrap();
                    let mut got = Vec::new();
                    loop {
                        match o.open(&mut w).unwrap() {
                            Opened::Data {
                                start,
                                end,
                                consumed,
                            } => {
                                got.extend_from_slice(&w[start..end]);
                                w.drain(..consumed);
                            }
                            Opened::Eof => break,
                            Opened::NeedMore(n) => panic!("truncated, need {n}"),
                        }
                    }
                    assert!(got == d, "{security:?} vectored {vectored} seed {seed}");
                }
            }
        }
    }

    /// Reads chunks arriving in odd pieces into caller buffers of several sizes.
    #[tokio::test]
    async fn reads_deliver_every_chunk_into_any_buffer_size() {
        for security in [Security::None, Security::Aes128Gcm] {
            for (seed, bufsize) in [(3u64, 1usize), (5, 1000), (9, 32 * 1024), (11, 200_000)] {
                let p = params(security);
                let d = data();
                let mut wire = Vec::new();
                let mut sealer = Sealer::new(&p, None).unwrap();
                sealer.seal_all(&d, &mut wire);
                sealer.seal_eof(&mut wire);
                let sock = Trickle {
                    wire: Arc::new(Mutex::new(Vec::new())),
                    input: wire[100..].to_vec(),
                    seed,
                    vectored: true,
                };
                let mut s = VmessStream::new(
                    Box::new(sock),
                    Sealer::new(&p, None).unwrap(),
                    Opener::new(&p, None).unwrap(),
                    ReadHead::None,
                    Vec::new(),
                    None,
                    &wire[..100],
                    false,
                );
                let mut got = Vec::new();
                let mut buf = vec![0u8; bufsize];
                loop {
                    let n = s.read(&mut buf).await.unwrap();
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&buf[..n]);
                }
                assert!(got == d, "{security:?} seed {seed} buffer {bufsize}");
            }
        }
    }
}
