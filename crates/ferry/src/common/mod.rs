//! Shared building blocks: addresses and their wire codecs, buffers, and the one unsafe module.

pub mod addr;
pub mod sys;
pub mod uuid;

pub use addr::{Address, Destination, Network};
