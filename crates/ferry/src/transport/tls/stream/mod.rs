//! A TLS connection over any [`Stream`], driven by rustls record by record so that at every
//! moment the bytes it holds are known (what XTLS Vision needs to drop the outer TLS without
//! losing or repeating a byte, and what fallbacks need to see of a client's first flight).
//!
//! Ciphertext from the peer lands in one pooled buffer, `rx`. rustls is given it in pieces and
//! processes what it was given at once, so at any time:
//! - what `rx` holds is ciphertext not yet decrypted (a prefix of it may have been handed to rustls
//!   as part of an incomplete record; rustls's copy is dropped with the connection),
//! - rustls's reader holds plaintext decrypted but not yet read ([`TlsStream::take_plaintext`]),
//! - rustls's writer holds records encrypted but not yet written out ([`TlsStream::write_pending`];
//!   after the handshake a write is encrypted at once, so no plaintext waits unencrypted).
//!
//! The socket under a TLS layer is usually a plain TCP or unix socket: then the stream reads it
//! itself when it is readable, so an idle connection holds no read buffer at all.

//!
//! - `read`: the read side and the `rx` buffer, `write`: the write side and shutdown,
//! - `handover`: TLS 1.3 handed to [`Tls13Stream`](crate::transport::tls13::Tls13Stream),
//! - `close`: close_notify on drop ([`Closing`]).

use std::io::{self, Read};
use std::ops::{Deref, DerefMut};
use std::task::{ready, Context, Poll};

use rustls::{ConnectionCommon, SideData};

use super::capture::Secrets;
use crate::common::pool;
use crate::transport::tls::OuterTls;
use crate::transport::{BoxStream, RawSocket, ReadAhead, Stream};

mod close;
mod handover;
mod read;
#[cfg(test)]
mod tests;
mod write;

pub use close::Closing;
pub use handover::Handover;

/// Size of the ciphertext buffer: several full records per read syscall.
const RX_SIZE: usize = 64 * 1024;

fn rx_size() -> pool::Adaptive {
    pool::Adaptive::fixed(RX_SIZE)
}
/// Largest TLS record on the wire: header + 2^14 + 2048 (TLS 1.2's ciphertext expansion).
const MAX_RECORD: usize = 5 + 16384 + 2048;

/// What went wrong before any TLS was spoken: the first bytes were not a TLS handshake record
/// (an HTTP request to a TLS port, a probe). Nothing is answered, as Go's TLS server does.
#[derive(Debug)]
pub struct NotTls;

impl std::fmt::Display for NotTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("first bytes are not a TLS handshake")
    }
}

impl std::error::Error for NotTls {}

/// A TLS client or server connection over a stream.
pub struct TlsStream<C> {
    io: BoxStream,
    /// `io` handed its read side over: read its socket directly when readable.
    direct_read: bool,
    pub(super) conn: C,
    /// Ciphertext read and not yet decrypted: the records from the first not yet processed on.
    rx: ReadAhead,
    /// How much of what `rx` holds was handed to rustls (part of an incomplete record).
    fed: usize,
    /// The peer closed its side of the socket.
    eof: bool,
    /// Server side: the first bytes are checked to look like TLS before rustls sees them.
    check_first: bool,
    close_sent: bool,
    /// XTLS Vision reads: rustls gets one record at a time and a read returns after each.
    one_record: bool,
    /// XTLS Vision dropped TLS: reads / writes go to `io` as they are.
    raw_read: bool,
    raw_write: bool,
    /// The application traffic secrets rustls logged during the handshake (TLS 1.3).
    secrets: Secrets,
    /// Server: chooses the connection that answers, from the first bytes (see [`Pick`]).
    pick: Option<Pick<C>>,
}

/// Given the first bytes of a connection before rustls sees them: `None` to wait for more,
/// `Some(Some(conn))` to answer with `conn` instead, `Some(None)` to keep the one given.
pub type Pick<C> = Box<dyn FnMut(&[u8]) -> Option<Option<C>> + Send>;

impl<C, D> TlsStream<C>
where
    C: DerefMut + Deref<Target = ConnectionCommon<D>> + Send + Unpin + 'static,
    D: SideData + 'static,
{
    /// Wraps `io`; `server` checks that the first bytes look like a TLS handshake.
    pub fn new(mut io: BoxStream, conn: C, server: bool) -> Self {
        let mut rx = ReadAhead::new(rx_size());
        let direct_read = match io
            .socket()
            .is_some()
            .then(|| io.take_read_direct())
            .flatten()
        {
            Some(held) => {
                rx = ReadAhead::with_prefill(rx_size(), &held);
                true
            }
            None => false,
        };
        TlsStream {
            io,
            direct_read,
            conn,
            rx,
            fed: 0,
            eof: false,
            check_first: server,
            close_sent: false,
            one_record: false,
            raw_read: false,
            raw_write: false,
            secrets: Secrets::default(),
            pick: None,
        }
    }

    /// Lets `pick` replace the connection from the first bytes the peer sends.
    pub fn set_alternative(&mut self, pick: Pick<C>) {
        self.pick = Some(pick);
    }

    /// Runs [`Pick`] on what has arrived; `false` while it waits for more.
    fn picked(&mut self) -> bool {
        let Some(pick) = self.pick.as_mut() else {
            return true;
        };
        let got = self.rx.pending();
        match pick(got) {
            None if !self.eof && got.len() < MAX_RECORD => return false,
            Some(Some(conn)) => self.conn = conn,
            _ => {}
        }
        self.pick = None;
        true
    }

    /// The rustls connection (negotiated ALPN, SNI, version, ...).
    pub fn connection(&self) -> &C {
        &self.conn
    }

    /// The stream under TLS.
    pub fn get_ref(&self) -> &BoxStream {
        &self.io
    }

    /// Ciphertext read from the peer and not yet decrypted (a prefix of an incomplete record
    /// may also have been handed to rustls).
    pub fn ciphertext_held(&self) -> &[u8] {
        self.rx.pending()
    }

    /// Takes the plaintext rustls decrypted and nobody has read yet.
    pub fn take_plaintext(&mut self) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        match self.conn.reader().read_to_end(&mut out) {
            Ok(_) => Ok(out),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(out),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(out),
            Err(e) => Err(e),
        }
    }

    /// Encrypted records are waiting to be written out.
    pub fn write_pending(&self) -> bool {
        self.conn.wants_write()
    }

    /// Completes the handshake.
    pub async fn handshake(&mut self) -> io::Result<()> {
        std::future::poll_fn(|cx| self.poll_handshake(cx)).await
    }

    fn poll_handshake(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            ready!(self.poll_flush_tls(cx))?;
            if !self.conn.is_handshaking() {
                return Poll::Ready(Ok(()));
            }
            if self.picked() && self.feedable() {
                self.feed(cx)?;
                continue;
            }
            if self.eof {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "peer closed during the TLS handshake",
                )));
            }
            ready!(self.poll_fill(cx))?;
        }
    }
}

impl<C, D> Stream for TlsStream<C>
where
    C: DerefMut + Deref<Target = ConnectionCommon<D>> + Send + Unpin + 'static,
    D: SideData + 'static,
{
    fn socket(&self) -> Option<RawSocket<'_>> {
        self.io.socket()
    }
    fn outer_tls(&mut self) -> Option<&mut dyn OuterTls> {
        Some(self)
    }
}

impl<C, D> OuterTls for TlsStream<C>
where
    C: DerefMut + Deref<Target = ConnectionCommon<D>> + Send + Unpin + 'static,
    D: SideData + 'static,
{
    fn is_tls13(&self) -> bool {
        self.conn.protocol_version() == Some(rustls::ProtocolVersion::TLSv1_3)
    }

    fn set_record_at_a_time(&mut self, on: bool) {
        self.one_record = on;
    }

    fn decrypted(&mut self) -> io::Result<Vec<u8>> {
        self.take_plaintext()
    }

    fn read_raw(&mut self) -> io::Result<Vec<u8>> {
        if self.fed != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "part of a TLS record was handed to rustls: the bytes after it are not known",
            ));
        }
        let mut out = self.take_plaintext()?;
        out.extend_from_slice(&self.rx.take_all());
        self.raw_read = true;
        Ok(out)
    }

    fn write_raw(&mut self) {
        self.raw_write = true;
    }
}
