//! The `ferry-lab` command's parts: the options ([`args`]) and one function per subcommand.

pub(crate) mod args;
mod report;
mod run;
mod testbed;
mod tools;

pub(crate) use report::report_cmd;
pub(crate) use run::{run_cmd, soak_cmd};
pub(crate) use testbed::testbed_cmd;
pub(crate) use tools::{list_cmd, loadgen_cmd, receiver_cmd};
