//! Ferry: a multi-protocol proxy core that reads Xray/V2Ray v4 JSON configs.
//!
//! The path of one connection: listener -> security -> transport -> inbound protocol ->
//! [`session::Session`] -> router -> outbound (a dialer) -> [`relay::run`].

/// The Xray release whose config, wire protocols and API Ferry is tested against; what it says
/// it is when a panel runs it in Xray's place (`xray version`, the `core: … started` line).
pub const XRAY_COMPAT: &str = "26.3.27";

pub mod app;
pub mod common;
pub mod config;
pub mod counters;
pub mod matchers;
pub mod netstack;
pub mod pb;
pub mod proxy;
pub mod registry;
pub mod rejects;
pub mod relay;
pub mod session;
pub mod sniffing;
pub mod stats;
pub mod transport;
pub mod users;
