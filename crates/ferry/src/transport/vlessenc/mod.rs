//! VLESS Encryption (Xray's `mlkem768x25519plus`, v25.8.29 onward): a layer between the
//! transport (with its TLS or REALITY, if any) and the VLESS header, as TLS is one.
//!
//! The client sends one relay per server key (an X25519 public key or an ML-KEM-768
//! ciphertext, chained by the keys' BLAKE3 hashes), then either a 1-RTT key exchange (an
//! ephemeral ML-KEM-768 key and X25519 key, padded and written in pieces with gaps) that the
//! server answers with its half and a ticket, or a 0-RTT flight with a ticket it holds. Data
//! then goes in records that look like TLS 1.3 application data (`native`, `xorpub`) or like
//! random bytes (`random`, record headers XORed). XTLS Vision runs over it on any transport
//! and leaves it as it leaves TLS ([`crate::transport::outer_tls::OuterTls`]).
//!
//! - `config`: the `decryption` / `encryption` strings and keys,
//! - `kdf`: BLAKE3 with binary contexts, the AEAD and its nonces, AES-CTR,
//! - `hs`: exact reads, the pieces and gaps, the relay chain's links,
//! - `client`, `server`: the two handshakes (the server's bounded ticket store), `ticket`:
//!   the client's one ticket,
//! - `stream`: the records, `xor`: the `random` mode's header XOR.

pub mod client;
pub mod config;
mod hs;
pub mod kdf;
pub mod server;
pub mod stream;
#[cfg(test)]
mod tests;
mod ticket;
pub mod xor;

pub use client::Client;
pub use config::{ClientConfig, Mode, ServerConfig};
pub use server::{Refused, Server};
pub use stream::EncStream;

/// `ferry vlessenc`: a fresh X25519 key pair and ML-KEM-768 seed, and the four strings
/// `xray vlessenc` prints for them, as (label, decryption, encryption) pairs.
pub fn generate() -> [(&'static str, String, String); 2] {
    let b64 = crate::common::text::base64_url;
    let (private, public) = crate::transport::reality::generate_x25519();
    // Xray prints the clamped private key.
    let mut private = private;
    private[0] &= 248;
    private[31] &= 127;
    private[31] |= 64;
    let mut seed = [0u8; 64];
    crate::common::rand::fill(&mut seed);
    #[allow(clippy::expect_used, reason = "a 64-byte seed is always a key")]
    let key = config::mlkem_from_seed(&seed).expect("64-byte seed");
    let ek = config::mlkem_public(&key);
    [
        (
            "X25519, not Post-Quantum",
            format!("mlkem768x25519plus.native.600s.{}", b64(&private)),
            format!("mlkem768x25519plus.native.0rtt.{}", b64(&public)),
        ),
        (
            "ML-KEM-768, Post-Quantum",
            format!("mlkem768x25519plus.native.600s.{}", b64(&seed)),
            format!("mlkem768x25519plus.native.0rtt.{}", b64(&ek)),
        ),
    ]
}
