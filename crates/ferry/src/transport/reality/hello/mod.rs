//! The ClientHello: parsed by the server (everything REALITY authenticates), built by the
//! client from a browser [`Template`](super::fingerprint::Template).
//!
//! - `reader`: the byte reader, `parse`: ClientHello and ServerHello parsers,
//! - `build`: the ClientHello builder.

mod build;
mod parse;
mod reader;
#[cfg(test)]
mod tests;

pub use build::{build, build_with_alpn, ClientKeys};
pub use parse::{message_from_records, ClientHello, Malformed, ServerHello, HRR_RANDOM};

/// Handshake message types.
pub const CLIENT_HELLO: u8 = 1;
pub const SERVER_HELLO: u8 = 2;
pub const ENCRYPTED_EXTENSIONS: u8 = 8;
pub const CERTIFICATE: u8 = 11;
pub const CERTIFICATE_VERIFY: u8 = 15;
pub const FINISHED: u8 = 20;
pub use crate::transport::tls13::record::{message, KEY_UPDATE, NEW_SESSION_TICKET};

/// Extension types.
pub const EXT_SERVER_NAME: u16 = 0;
pub const EXT_SUPPORTED_GROUPS: u16 = 10;
pub const EXT_SIGNATURE_ALGORITHMS: u16 = 13;
pub const EXT_ALPN: u16 = 16;
pub const EXT_SUPPORTED_VERSIONS: u16 = 43;
pub const EXT_KEY_SHARE: u16 = 51;

/// Named groups.
pub const X25519: u16 = 0x001d;
pub const X25519MLKEM768: u16 = 0x11ec;
/// ML-KEM-768 encapsulation key (1184) + X25519 (32), the client's hybrid share.
pub const MLKEM_CLIENT_SHARE: usize = 1184 + 32;
/// ML-KEM-768 ciphertext (1088) + X25519 (32), the server's hybrid share.
pub const MLKEM_SERVER_SHARE: usize = 1088 + 32;

pub const TLS13: u16 = 0x0304;
/// Offset of the 32-byte session id in a ClientHello message (type, length, version, random,
/// session id length).
pub const SESSION_ID_AT: usize = 1 + 3 + 2 + 32 + 1;

/// A GREASE value (RFC 8701): 0x?A?A with both bytes equal.
pub fn is_grease(v: u16) -> bool {
    v & 0x0f0f == 0x0a0a && v >> 8 == v & 0xff
}
