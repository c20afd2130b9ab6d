//! The TLS connection under XTLS Vision, as Vision sees it: implemented by the TLS layer's
//! rustls stream and by Ferry's own TLS 1.3 record layer (re-exported as `tls::OuterTls`).

use std::io;

/// What XTLS Vision needs of the TLS connection under it: to see the plaintext of one record
/// at a time, and to stop speaking TLS in one direction knowing every byte the layer holds.
pub trait OuterTls: Send {
    /// TLS 1.3 was negotiated (Vision refuses anything older).
    fn is_tls13(&self) -> bool;
    /// Decrypt one record at a time, and return from a read once a record yielded plaintext
    /// (nothing past it is handed to rustls, so nothing of what follows is lost in it).
    fn set_record_at_a_time(&mut self, on: bool);
    /// Takes the plaintext decrypted and not yet read (TLS goes on).
    fn decrypted(&mut self) -> io::Result<Vec<u8>>;
    /// Stops reading TLS: returns the plaintext decrypted and not yet read, followed by the
    /// bytes read from the peer and not yet decrypted; later reads come from the stream under
    /// TLS as they are.
    fn read_raw(&mut self) -> io::Result<Vec<u8>>;
    /// Later writes go to the stream under TLS as they are (the caller flushed first; no record,
    /// not even close_notify, is sent after this).
    fn write_raw(&mut self);
    /// A REALITY connection (not a TLS library's).
    fn is_reality(&self) -> bool {
        false
    }
}
