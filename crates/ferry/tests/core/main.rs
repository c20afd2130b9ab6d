//! The binary and its core: the CLI, the relay, reload, the layers (secure by default), the
//! registry, Xray's spellings, SOCKS and HTTP, dokodemo-door, fallbacks, TLS, load.
//!
//! One test binary for the area (`cargo test --release --test core`), a module per
//! former test file; each module's tests are named `{module}::{test}`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

#[path = "../common/mod.rs"]
mod common;
#[path = "../proxy_clients/mod.rs"]
mod proxy_clients;

mod cli;
mod dokodemo;
mod examples;
mod examples_xray;
mod fallbacks;
mod install;
mod layers;
mod load;
mod registry;
mod relay;
mod reload;
mod socks_http;
mod spellings;
mod tls;
