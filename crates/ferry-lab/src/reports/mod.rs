//! `ferry-lab report NNN`: the five benchmark reports this project started from, each rerun in
//! its own shape with Ferry and the installed peers side by side. A report is a list of cases
//! (scenario, CPU cap, inner TLS record size, link); each case is one runner plan; the rows come
//! back flattened into one schema (results.json), a Markdown table shaped like the report's,
//! and charts.
//!
//! - 000: loopback, VMess and Shadowsocks (and ShadowsocksR) ciphers, 1/2/4 connections.
//! - 001: the A -> B -> C -> D chains (VLESS over TCP, TLS and Vision, VMess over TLS and over
//!   ws+TLS with and without nginx, Trojan over TLS) with TLS traffic from A to D and node B capped.
//! - 002: Vision against plain TLS under each CPU cap of the server node and each inner TLS
//!   record size.
//! - 003: cipher throughput, time to first byte and request latency on a clean link and on a
//!   50 ms round trip with 1% loss (CUBIC).
//! - 004: fallbacks over TCP, unix, abstract and padded-abstract sockets; nginx in front over
//!   TCP, unix and TCP with PROXY protocol.

mod cases;
mod markdown;
mod opts;
mod run;

pub use crate::results::FlatRow;
pub use cases::cases;
pub use markdown::markdown;
pub use opts::{Case, ReportOpts, REPORTS};
pub use run::run;
