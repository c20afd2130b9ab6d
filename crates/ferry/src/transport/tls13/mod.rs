//! Ferry's own TLS 1.3 record layer: what a TLS 1.3 connection is after its handshake. REALITY's
//! engine uses it after its own handshake; the TLS layer hands every TLS 1.3 connection over to
//! it once rustls has finished the handshake (the traffic secrets come from rustls's key log),
//! because it decrypts in place in one pooled buffer that an idle connection gives back, and
//! keeps nothing else per connection but two keys.
//! - [`keys`]: cipher suites, HKDF, the per-direction record key,
//! - [`record`]: record protection (seal/open in place, padding),
//! - [`stream`]: the connection, an [`OuterTls`](super::outer_tls::OuterTls) that XTLS Vision can leave.

pub mod keys;
pub mod record;
pub mod stream;

pub use stream::{Direction, Tls13Stream};
