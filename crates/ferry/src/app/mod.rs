//! The running instance: dispatcher, router, stats, metrics, and the listeners.

pub mod api;
pub mod dispatcher;
pub mod dns;
pub mod instance;
pub mod log;
pub mod mask;
pub mod metrics;
pub mod observatory;
pub mod policy;
pub mod router;
pub mod sniff;
/// Traffic counters (a low module of their own; re-exported here where they used to live).
pub use crate::stats;
