//! The handover of a TLS 1.3 connection from rustls to Ferry's own record layer
//! ([`Tls13Stream`]) once the handshake is done, with every byte held going along.

use std::io;
use std::ops::{Deref, DerefMut};

use rustls::{
    ClientConnection, ConnectionCommon, ConnectionTrafficSecrets, ExtractedSecrets,
    ServerConnection, SideData,
};

use super::TlsStream;
use crate::transport::tls13::keys::Suite;
use crate::transport::tls13::{Direction, Tls13Stream};

/// A rustls connection that can give its TLS 1.3 traffic over ([`TlsStream::into_tls13`]).
pub trait Handover {
    /// The server side of the connection.
    const SERVER: bool;
    /// rustls's keys and record numbers after the handshake (consumes the connection).
    fn extract(self) -> Result<ExtractedSecrets, rustls::Error>;
}

impl Handover for ServerConnection {
    const SERVER: bool = true;
    fn extract(self) -> Result<ExtractedSecrets, rustls::Error> {
        self.dangerous_extract_secrets()
    }
}

impl Handover for ClientConnection {
    const SERVER: bool = false;
    fn extract(self) -> Result<ExtractedSecrets, rustls::Error> {
        self.dangerous_extract_secrets()
    }
}

impl<C, D> TlsStream<C>
where
    C: Handover + DerefMut + Deref<Target = ConnectionCommon<D>> + Send + Unpin + 'static,
    D: SideData + 'static,
{
    /// After a TLS 1.3 handshake, gives the connection to Ferry's own record layer
    /// ([`Tls13Stream`]): it decrypts in place and holds nothing but two keys while idle, where
    /// rustls keeps its buffers and state for the life of the connection. The plaintext rustls
    /// already decrypted and the ciphertext not yet processed go along, so no byte is lost or
    /// repeated. `Ok(Err(self))` when the connection stays with rustls: TLS 1.2, records still
    /// to send, the secrets not logged (a config without Ferry's key log).
    #[allow(
        clippy::expect_used,
        clippy::unwrap_used,
        reason = "state the read path set just before"
    )]
    pub fn into_tls13(mut self) -> io::Result<Result<Tls13Stream, Self>> {
        if self.conn.is_handshaking()
            || self.conn.protocol_version() != Some(rustls::ProtocolVersion::TLSv1_3)
            || self.conn.wants_write()
            || !self.secrets.complete()
            || self.raw_read
            || self.raw_write
        {
            return Ok(Err(self));
        }
        let plain = self.take_plaintext()?;
        let (client, server) = (
            self.secrets.client.take().expect("complete"),
            self.secrets.server.take().expect("complete"),
        );
        let TlsStream {
            io,
            direct_read,
            conn,
            rx,
            eof,
            ..
        } = self;
        let ex = conn.extract().map_err(io::Error::other)?;
        let (read, write) = match C::SERVER {
            true => (client, server),
            false => (server, client),
        };
        let read = handover_key(read, ex.rx)?;
        let write = handover_key(write, ex.tx)?;
        let suite = read.0;
        Ok(Ok(Tls13Stream::after_handshake(
            io,
            direct_read,
            eof,
            rx,
            &plain,
            suite,
            read.1,
            write.1,
        )))
    }
}

/// One direction's key for [`Tls13Stream`] from the logged `secret`, checked against what
/// rustls extracted and starting at rustls's record number.
fn handover_key(
    secret: Vec<u8>,
    (seq, ex): (u64, ConnectionTrafficSecrets),
) -> io::Result<(Suite, Direction)> {
    let (suite, iv) = match &ex {
        ConnectionTrafficSecrets::Aes128Gcm { iv, .. } => (Suite::Aes128Gcm, iv),
        ConnectionTrafficSecrets::Aes256Gcm { iv, .. } => (Suite::Aes256Gcm, iv),
        ConnectionTrafficSecrets::Chacha20Poly1305 { iv, .. } => (Suite::Chacha20Poly1305, iv),
        _ => {
            return Err(io::Error::other(
                "TLS: a cipher suite Ferry's record layer lacks",
            ))
        }
    };
    let mut d = Direction::new(suite, secret);
    if d.key.iv()[..] != *iv.as_ref() {
        return Err(io::Error::other(
            "TLS: the logged traffic secret does not match rustls's keys",
        ));
    }
    d.key.set_seq(seq);
    Ok((suite, d))
}
