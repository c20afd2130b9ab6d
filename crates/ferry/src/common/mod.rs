//! Shared building blocks: addresses and their wire codecs, buffers, and the one unsafe module.

pub mod addr;
pub mod ct;
pub mod dns_message;
pub mod http1;
pub mod json;
pub mod netlink;
pub mod own;
pub mod pool;
pub mod rand;
pub mod reader;
pub mod swap;
#[allow(
    unsafe_code,
    reason = "the one module of raw syscalls; each block has a SAFETY line"
)]
pub mod sys;
pub mod text;
pub mod uuid;

pub use addr::{Address, Destination, Network};

/// The bytes of `s` as an array; `s` is a slice of a length the caller has fixed (as
/// `&b[3..7]`), so the copy's length check never fails.
#[inline]
pub fn array<const N: usize>(s: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(s);
    a
}

/// Helpers for unit tests.
#[cfg(test)]
pub(crate) mod testutil {
    /// Bytes from hex text (whitespace ignored), for known-answer vectors.
    pub fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }
}
