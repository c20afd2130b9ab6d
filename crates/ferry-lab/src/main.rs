//! The `ferry-lab` command: `run` scenarios side by side, or use `loadgen` / `receiver` alone.

mod cli;

use std::process::ExitCode;

use anyhow::Result;
use clap::Parser;

use cli::args::{Cli, Cmd};

fn real_main() -> Result<ExitCode> {
    match Cli::parse().cmd {
        Cmd::Run(a) => cli::run_cmd(a),
        Cmd::Soak(a) => cli::soak_cmd(a),
        Cmd::Report(a) => cli::report_cmd(a),
        Cmd::Testbed(a) => cli::testbed_cmd(a),
        Cmd::List(a) => cli::list_cmd(a),
        Cmd::Receiver(a) => cli::receiver_cmd(a),
        Cmd::Loadgen(a) => cli::loadgen_cmd(a),
    }
}

fn main() -> ExitCode {
    match real_main() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
