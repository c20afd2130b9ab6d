//! Shared building blocks: addresses and their wire codecs, buffers, and the one unsafe module.

pub mod addr;
pub mod ct;
pub mod rand;
pub mod sys;
pub mod uuid;

pub use addr::{Address, Destination, Network};

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
