//! The running instance: dispatcher, router, stats, metrics, and the listeners.

pub mod dispatcher;
pub mod instance;
pub mod log;
pub mod metrics;
pub mod policy;
pub mod router;
pub mod stats;
pub mod udp;
