//! ferry-lab: loadgen, receiver and side-by-side proxy scenarios on one machine.

pub mod chart;
pub mod impair;
pub mod inner_tls;
pub mod loadgen;
pub mod plan;
pub mod procs;
pub mod receiver;
pub mod report;
pub mod reports;
pub mod results;
pub mod runner;
pub mod scenario;
#[allow(
    unsafe_code,
    reason = "the one module of raw syscalls; each block has a SAFETY line"
)]
pub mod sys;
pub mod testbed;
pub mod wire;
