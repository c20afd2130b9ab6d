//! Ferry: a multi-protocol proxy core that reads Xray/V2Ray v4 JSON configs.
//!
//! The path of one connection: listener -> security -> transport -> inbound protocol ->
//! [`session::Session`] -> router -> outbound (a dialer) -> [`relay::run`].

pub mod app;
pub mod common;
pub mod config;
pub mod proxy;
pub mod registry;
pub mod rejects;
pub mod relay;
pub mod session;
pub mod stats;
pub mod transport;
