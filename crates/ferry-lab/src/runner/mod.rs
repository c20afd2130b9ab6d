//! `ferry-lab run`: for each scenario and implementation, start the chain's processes on free
//! loopback ports, move verified bytes through it, sample the proxies' CPU and memory, stop
//! everything, and record one row per measurement.

mod bed;
mod bins;
mod bulk;
mod cert;
mod chain;
mod checks;
mod conns;
mod ctx;
mod iperf3;
mod jobs;
mod live;
mod measure;
mod render;
mod run;
mod soak;

pub use crate::plan::{RunOpts, Test, TestbedPlan, ALL_IMPLS, HANDSHAKE_MSG};
pub use bins::{build_ferry, peers_dir, workspace_root};
pub use render::base_vars;
pub use run::run;
