//! Hostile and malformed bytes from the network: what a prober sees (side by side with Xray),
//! limits, and bad input per protocol and transport.
//!
//! One test binary for the area (`cargo test --release --test bad_input`), a module per
//! former test file; each module's tests are named `{module}::{test}`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

#[path = "../common/mod.rs"]
mod common;
#[path = "../proxy_clients/mod.rs"]
mod proxy_clients;

mod hysteria_bad_input;
mod probing;
mod socks_http_bad_input;
mod ssr_bad_input;
mod transports_bad_input;
mod vision_bad_input;
mod wireguard_bad_input;
mod xhttp_bad_input;
