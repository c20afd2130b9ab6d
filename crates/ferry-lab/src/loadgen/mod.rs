//! The sending end: connects directly or through a SOCKS5 proxy, moves a verified number of
//! bytes, and measures throughput, time to first byte and round-trip latency. With inner TLS
//! (`Target::inner_tls`) every connection is a TLS session with the receiver, and the lab
//! protocol runs inside it.

mod bulk;
mod conns;
mod latency;
pub mod progress;
mod target;

pub use bulk::{bulk, BulkOpts, Transfer};
pub use conns::{fresh_conns, hold_hostile, hold_idle, one_echo, ConnBurst, Hostile};
pub use latency::{percentiles, round_trips, ttfb, Percentiles};
pub use target::{socks5_connect, Conn, Target};
