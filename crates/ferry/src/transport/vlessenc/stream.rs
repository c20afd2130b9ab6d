//! A VLESS Encryption connection after its handshake: records `17 03 03 | len | AEAD(data)`
//! (aad = the header) over any [`Stream`], opened in place one at a time as the reader asks,
//! so that XTLS Vision can leave the encryption mid-connection as it leaves TLS
//! ([`OuterTls`]); in the `random` mode the record headers are XORed on the wire.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::kdf::Aead;
use super::ticket::TicketSlot;
use super::xor::HeaderXor;
use crate::common::pool;
use crate::transport::outer_tls::OuterTls;
use crate::transport::{poll_write_all, BoxStream, RawSocket, ReadAhead, Stream};

/// Writers put at most this much plaintext in a record (Xray's).
pub const MAX_PLAIN: usize = 8192;
/// Readers accept record bodies (plaintext and tag) of 17..=16640 bytes.
pub const MAX_BODY: usize = 16640;
const TAG: usize = 16;
/// Plaintext sealed per write call at most.
const WRITE_CHUNK: usize = 4 * MAX_PLAIN;

fn rx_size() -> pool::Adaptive {
    pool::Adaptive::fixed(64 * 1024)
}

fn invalid(msg: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("VLESS encryption: {msg}"),
    )
}

/// The record length in a header, if it is one (Xray's `DecodeHeader`).
pub fn record_len(h: &[u8]) -> Option<usize> {
    let l = u16::from_be_bytes([h[3], h[4]]) as usize;
    (h[..3] == [23, 3, 3] && (17..=MAX_BODY).contains(&l)).then_some(l)
}

/// A client's 0-RTT connection until the server's first record: a header that is no record
/// means the server did not know the ticket.
pub struct Resumed {
    pub slot: Arc<TicketSlot>,
    pub pfs: [u8; 64],
}

/// How a stream starts, as its handshake left it.
pub struct Setup {
    pub io: BoxStream,
    /// Bytes read past the handshake (not yet through the incoming XOR).
    pub held: Vec<u8>,
    pub united: Vec<u8>,
    pub aes: bool,
    pub write: Aead,
    /// `None`: a client's 0-RTT, keyed by the server random that starts the server's bytes.
    pub read: Option<Aead>,
    /// Bytes prepended to the first record (a 0-RTT flight, the server's random).
    pub pre_write: Vec<u8>,
    /// A client's 1-RTT: the server's padding to read and open before its first record.
    pub peer_padding: usize,
    pub xor_in: Option<HeaderXor>,
    pub xor_out: Option<HeaderXor>,
    /// `random` mode (the incoming XOR of a client's 0-RTT starts after the server random).
    pub random: bool,
    pub resumed: Option<Resumed>,
    /// The stream under is a bare socket: the relay may splice it once Vision went direct.
    pub splice_ok: bool,
}

pub struct EncStream {
    io: BoxStream,
    rx: ReadAhead,
    united: Vec<u8>,
    aes: bool,
    read: Option<Aead>,
    write: Aead,
    pre_write: Vec<u8>,
    peer_padding: usize,
    xor_in: Option<HeaderXor>,
    xor_out: Option<HeaderXor>,
    random: bool,
    resumed: Option<Resumed>,
    splice_ok: bool,
    tx: Vec<u8>,
    tx_pos: usize,
    eof: bool,
    one_record: bool,
    raw_read: bool,
    raw_write: bool,
}

impl EncStream {
    pub fn new(s: Setup) -> EncStream {
        let mut e = EncStream {
            io: s.io,
            rx: ReadAhead::with_prefill(rx_size(), &s.held),
            united: s.united,
            aes: s.aes,
            read: s.read,
            write: s.write,
            pre_write: s.pre_write,
            peer_padding: s.peer_padding,
            xor_in: s.xor_in,
            xor_out: s.xor_out,
            random: s.random,
            resumed: s.resumed,
            splice_ok: s.splice_ok,
            tx: Vec::new(),
            tx_pos: 0,
            eof: false,
            one_record: false,
            raw_read: false,
            raw_write: false,
        };
        if let Some(x) = &mut e.xor_in {
            x.apply(e.rx.pending_mut());
        }
        e
    }

    /// Reads more bytes from the stream under (room for `need` pending), through the XOR.
    fn poll_fill(&mut self, cx: &mut Context<'_>, need: usize) -> Poll<io::Result<()>> {
        let n = ready!(self.rx.poll_fill(cx, Pin::new(&mut self.io), need))?;
        self.eof |= n == 0;
        if let Some(x) = &mut self.xor_in {
            let p = self.rx.pending_mut();
            let len = p.len();
            x.apply(&mut p[len - n..]);
        }
        Poll::Ready(Ok(()))
    }

    /// What must be read before the records: a 0-RTT client's server random, a 1-RTT client's
    /// server padding. `Ok(false)` when more bytes are needed (`need` of them pending).
    fn preamble(&mut self) -> io::Result<Option<usize>> {
        if self.read.is_none() {
            let p = self.rx.pending();
            if p.len() < 16 {
                return Ok(Some(16));
            }
            let random = p[..16].to_vec();
            self.rx.consume(16);
            self.read = Some(Aead::new(&random, &self.united, self.aes));
            if self.random {
                let mut iv = [0u8; 16];
                iv.copy_from_slice(&random);
                let mut x = HeaderXor::new(super::kdf::Ctr::new(&self.united, &iv), 0, false);
                x.apply(self.rx.pending_mut());
                self.xor_in = Some(x);
            }
        }
        if self.peer_padding > 0 {
            let n = self.peer_padding;
            if self.rx.pending_len() < n {
                return Ok(Some(n));
            }
            let Some(read) = &mut self.read else {
                return Err(invalid("no key for the server's padding"));
            };
            read.open(&[], &mut self.rx.pending_mut()[..n])
                .map_err(|_| invalid("the server's padding does not open"))?;
            self.rx.consume(n);
            self.peer_padding = 0;
        }
        Ok(None)
    }

    /// Opens the next record if all of it is pending: `Ok(None)` when it is, else how many
    /// bytes must be pending.
    fn open_next(&mut self) -> io::Result<Option<usize>> {
        let p = self.rx.pending();
        if p.len() < 5 {
            return Ok(Some(5));
        }
        let Some(len) = record_len(&p[..5]) else {
            if let Some(r) = self.resumed.take() {
                r.slot.refused(&r.pfs);
                return Err(invalid("new handshake needed"));
            }
            return Err(invalid(format_args!("invalid header: {:?}", &p[..5])));
        };
        self.resumed = None;
        if p.len() < 5 + len {
            return Ok(Some(5 + len));
        }
        let Some(read) = &mut self.read else {
            return Err(invalid("no read key"));
        };
        // At the counter's top the next key comes from this whole record (as sent).
        let next = read
            .at_max()
            .then(|| Aead::new(&p[..5 + len], &self.united, self.aes));
        let rec = &mut self.rx.pending_mut()[..5 + len];
        let (head, body) = rec.split_at_mut(5);
        let opened = read.open(head, body);
        if let Some(n) = next {
            *read = n;
        }
        let n = opened.map_err(|_| invalid("a record does not open"))?;
        self.rx.set_plain(5..5 + n);
        self.rx.consume(5 + len);
        Ok(None)
    }

    /// Seals up to [`WRITE_CHUNK`] bytes of `bufs` into records in `tx`; returns how much.
    fn seal(&mut self, bufs: &[io::IoSlice<'_>]) -> usize {
        let start = self.tx.len();
        if !self.pre_write.is_empty() {
            self.tx.append(&mut self.pre_write);
        }
        let total = bufs.iter().map(|b| b.len()).sum::<usize>().min(WRITE_CHUNK);
        let mut slices = bufs.iter().map(|b| &b[..]).filter(|b| !b.is_empty());
        let mut cur: &[u8] = slices.next().unwrap_or(&[]);
        let mut taken = 0;
        while taken < total {
            let n = (total - taken).min(MAX_PLAIN);
            let at = self.tx.len();
            self.tx.reserve(5 + n + TAG);
            self.tx.extend_from_slice(&[23, 3, 3]);
            self.tx.extend_from_slice(&((n + TAG) as u16).to_be_bytes());
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
            let rekey = self.write.at_max();
            let mut rec = self.tx.split_off(at);
            let head: [u8; 5] = [rec[0], rec[1], rec[2], rec[3], rec[4]];
            self.write.seal(&head, &mut rec, 5);
            if rekey {
                self.write = Aead::new(&rec, &self.united, self.aes);
            }
            self.tx.append(&mut rec);
            taken += n;
        }
        if let Some(x) = &mut self.xor_out {
            x.apply(&mut self.tx[start..]);
        }
        taken
    }

    fn poll_flush_tx(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.tx_pos < self.tx.len() {
            ready!(poll_write_all(&mut self.io, cx, &self.tx, &mut self.tx_pos))?;
        }
        self.tx.clear();
        self.tx_pos = 0;
        if self.tx.capacity() > 2 * (WRITE_CHUNK + 64) {
            self.tx = Vec::new();
        }
        Poll::Ready(Ok(()))
    }

    /// After Vision left the encryption: the stream under, through the incoming XOR.
    fn poll_read_raw(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let start = buf.filled().len();
        ready!(Pin::new(&mut self.io).poll_read(cx, buf))?;
        if let Some(x) = &mut self.xor_in {
            x.apply(&mut buf.filled_mut()[start..]);
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncRead for EncStream {
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
            let need = match me.preamble()? {
                Some(n) => Some(n),
                None => me.open_next()?,
            };
            let Some(need) = need else {
                continue;
            };
            if buf.filled().len() > start {
                return Poll::Ready(Ok(()));
            }
            if me.eof {
                if me.rx.pending_len() > 0 {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "VLESS encryption: peer closed in the middle of a record",
                    )));
                }
                return Poll::Ready(Ok(()));
            }
            ready!(me.poll_fill(cx, need))?;
        }
    }
}

impl AsyncWrite for EncStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[io::IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        if me.raw_write && me.xor_out.is_none() && me.tx.is_empty() {
            return Pin::new(&mut me.io).poll_write_vectored(cx, bufs);
        }
        ready!(me.poll_flush_tx(cx))?;
        if bufs.iter().all(|b| b.is_empty()) {
            return Poll::Ready(Ok(0));
        }
        let n = if me.raw_write {
            // Raw bytes through the header XOR (`random` under Vision).
            let mut n = 0;
            for b in bufs {
                let k = b.len().min(WRITE_CHUNK - n);
                me.tx.extend_from_slice(&b[..k]);
                n += k;
                if n == WRITE_CHUNK {
                    break;
                }
            }
            if let Some(x) = &mut me.xor_out {
                x.apply(&mut me.tx);
            }
            n
        } else {
            me.seal(bufs)
        };
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
        ready!(me.poll_flush_tx(cx))?;
        Pin::new(&mut me.io).poll_shutdown(cx)
    }
}

impl Stream for EncStream {
    fn socket(&self) -> Option<RawSocket<'_>> {
        match self.splice_ok && self.xor_out.is_none() {
            true => self.io.socket(),
            false => None,
        }
    }
    fn outer_tls(&mut self) -> Option<&mut dyn OuterTls> {
        Some(self)
    }
}

impl OuterTls for EncStream {
    fn is_tls13(&self) -> bool {
        true
    }

    fn set_record_at_a_time(&mut self, on: bool) {
        self.one_record = on;
    }

    fn decrypted(&mut self) -> io::Result<Vec<u8>> {
        Ok(self.rx.take_plain())
    }

    fn read_raw(&mut self) -> io::Result<Vec<u8>> {
        let out = self.rx.take_all().to_vec();
        self.raw_read = true;
        Ok(out)
    }

    fn write_raw(&mut self) {
        self.raw_write = true;
    }
}
