//! A REALITY connection after its handshake: TLS 1.3 records over any [`Stream`], decrypted in
//! place in one pooled buffer, one record at a time as the reader asks. So at every moment the
//! stream holds at most one record's plaintext not yet read and, after it, ciphertext not yet
//! decrypted; that is what XTLS Vision needs to leave TLS mid-connection ([`OuterTls`]).
//!
//! - `read`: opening records, post-handshake messages, the `rx` buffer,
//! - `write`: sealing records, KeyUpdate, close_notify.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

use super::keys::{Suite, TrafficKey};
use super::record::MAX_PLAIN;
use crate::common::pool;
use crate::transport::outer_tls::OuterTls;
use crate::transport::{BoxStream, RawSocket, ReadAhead, Stream};

mod read;
#[cfg(test)]
mod tests;
mod write;

/// Ciphertext buffer: several full records per read syscall.
const RX_SIZE: usize = 64 * 1024;

fn rx_size() -> pool::Adaptive {
    pool::Adaptive::fixed(RX_SIZE)
}
/// Plaintext sealed per write call at most (four full records).
const WRITE_CHUNK: usize = 4 * MAX_PLAIN;
/// Records sealed with one key before it is replaced by a KeyUpdate: RFC 8446 §5.5 allows
/// 2^24.5 full records under AES-GCM; rustls and Go update at 2^24 too (ChaCha20 has no
/// practical limit, one rule for all keeps it simple).
const KEY_LIMIT: u64 = 1 << 24;

/// One direction's key and the secret it came from (for KeyUpdate).
pub struct Direction {
    pub key: TrafficKey,
    pub secret: Vec<u8>,
}

impl Direction {
    pub fn new(suite: Suite, secret: Vec<u8>) -> Direction {
        Direction {
            key: TrafficKey::new(suite, &secret),
            secret,
        }
    }

    /// RFC 8446 §7.2: the next generation of this direction's secret.
    fn update(&mut self, suite: Suite) {
        let h = suite.hash();
        self.secret = h.expand_label(&self.secret, "traffic upd", &[], h.size());
        self.key = TrafficKey::new(suite, &self.secret);
    }
}

/// A TLS 1.3 connection after its handshake (REALITY's or rustls's).
pub struct Tls13Stream {
    io: BoxStream,
    /// `io` handed its read side over: read its socket directly when readable.
    direct_read: bool,
    suite: Suite,
    read: Direction,
    write: Direction,
    /// Ciphertext not yet decrypted (pending), and before it the plaintext of the record last
    /// opened in place that is not yet read.
    rx: ReadAhead,
    /// Records sealed and not yet written out.
    tx: Vec<u8>,
    tx_pos: usize,
    eof: bool,
    /// close_notify received.
    closed: bool,
    close_sent: bool,
    /// The peer asked for a KeyUpdate: ours goes out with the next write.
    update_owed: bool,
    one_record: bool,
    raw_read: bool,
    raw_write: bool,
    /// Made by REALITY (not handed over from rustls).
    reality: bool,
}

impl Tls13Stream {
    /// Marks a connection REALITY made (its server and client).
    pub fn of_reality(mut self) -> Self {
        self.reality = true;
        self
    }

    /// The connection over `io` after a handshake that left `held` (ciphertext already read).
    pub fn new(
        mut io: BoxStream,
        held: &[u8],
        suite: Suite,
        read: Direction,
        write: Direction,
    ) -> Self {
        let mut pre = held.to_vec();
        let direct_read = match io
            .socket()
            .is_some()
            .then(|| io.take_read_direct())
            .flatten()
        {
            Some(more) => {
                pre.extend_from_slice(&more);
                true
            }
            None => false,
        };
        let mut s = Tls13Stream::bare(io, direct_read, suite, read, write);
        s.rx = ReadAhead::with_prefill(rx_size(), &pre);
        s
    }

    fn bare(
        io: BoxStream,
        direct_read: bool,
        suite: Suite,
        read: Direction,
        write: Direction,
    ) -> Self {
        Tls13Stream {
            io,
            direct_read,
            suite,
            read,
            write,
            rx: ReadAhead::new(rx_size()),
            tx: Vec::new(),
            tx_pos: 0,
            eof: false,
            closed: false,
            close_sent: false,
            update_owed: false,
            one_record: false,
            raw_read: false,
            raw_write: false,
            reality: false,
        }
    }

    /// The connection over `io` after a handshake another engine (rustls) ran over it: `rx`
    /// (taken over) holds as pending the ciphertext read and not yet decrypted; `plain` was
    /// decrypted and not yet read; `direct_read` says whether `io` already handed its read
    /// side over; `eof` whether the peer closed.
    #[allow(clippy::too_many_arguments)]
    pub fn after_handshake(
        io: BoxStream,
        direct_read: bool,
        eof: bool,
        mut rx: ReadAhead,
        plain: &[u8],
        suite: Suite,
        read: Direction,
        write: Direction,
    ) -> Self {
        let mut s = Tls13Stream::bare(io, direct_read, suite, read, write);
        s.eof = eof;
        s.rx = match plain.is_empty() {
            true => rx,
            false => {
                let r = ReadAhead::with_plain_before(rx_size(), plain, rx.pending());
                rx.release();
                r
            }
        };
        s
    }

    /// The stream under TLS.
    pub fn get_ref(&self) -> &BoxStream {
        &self.io
    }
}

/// After TLS stopped in the read direction: reads the stream under it as it is, from its socket
/// directly when `direct_read` (the stream handed its read side over).
pub(crate) fn poll_read_under(
    io: &mut BoxStream,
    direct_read: bool,
    cx: &mut Context<'_>,
    buf: &mut ReadBuf<'_>,
) -> Poll<io::Result<()>> {
    if !direct_read {
        return Pin::new(io).poll_read(cx, buf);
    }
    let Some(sock) = io.socket() else {
        return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
    };
    let n = ready!(sock.poll_read_into(cx, buf.initialize_unfilled()))?;
    buf.advance(n);
    Poll::Ready(Ok(()))
}

fn invalid(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("TLS: {msg}"))
}

impl Stream for Tls13Stream {
    fn socket(&self) -> Option<RawSocket<'_>> {
        self.io.socket()
    }
    fn outer_tls(&mut self) -> Option<&mut dyn OuterTls> {
        Some(self)
    }
}

impl OuterTls for Tls13Stream {
    fn is_tls13(&self) -> bool {
        true
    }

    fn is_reality(&self) -> bool {
        self.reality
    }

    fn set_record_at_a_time(&mut self, on: bool) {
        self.one_record = on;
    }

    fn decrypted(&mut self) -> io::Result<Vec<u8>> {
        Ok(self.rx.take_plain())
    }

    fn read_raw(&mut self) -> io::Result<Vec<u8>> {
        let mut out = self.rx.take_plain();
        out.extend_from_slice(&self.rx.take_all());
        self.raw_read = true;
        Ok(out)
    }

    fn write_raw(&mut self) {
        self.raw_write = true;
    }
}
