//! `ferry-lab report`: rerun one of the benchmark reports and print it.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Result};

use ferry_lab::runner;
use ferry_lab::{reports, scenario, wire};

use super::args::ReportArgs;
use super::run::{check_impls, timestamp};

pub(crate) fn report_cmd(a: ReportArgs) -> Result<ExitCode> {
    let ReportArgs {
        report,
        impls,
        quick,
        runs,
        amount,
        out,
        ferry_bin,
        peers_dir,
    } = a;
    if runs == 0 {
        bail!("--runs must be at least 1");
    }
    check_impls(impls.iter().flatten())?;
    let o = reports::ReportOpts {
        out: out.unwrap_or_else(|| {
            PathBuf::from("results").join(format!("report-{report}-{}", timestamp()))
        }),
        id: report,
        impls,
        quick,
        runs,
        amount: amount.map(|a| wire::parse_size(&a)).transpose()?,
        ferry_bin,
        scenario_dir: scenario::default_dir(),
        peers_dir: peers_dir.unwrap_or_else(runner::peers_dir),
    };
    let rows = reports::run(&o)?;
    println!(
        "{}",
        std::fs::read_to_string(o.out.join("results.md")).unwrap_or_default()
    );
    println!("results in {}", o.out.display());
    let errors = rows
        .iter()
        .filter(|r| r.status.starts_with("error"))
        .count();
    if errors > 0 {
        eprintln!("{errors} measurement(s) failed; see the report");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
