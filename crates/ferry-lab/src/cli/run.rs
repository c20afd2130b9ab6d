//! `ferry-lab run` and `ferry-lab soak`: settings from the options, the measurements, and the
//! report printed.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Result};

use ferry_lab::report::Status;
use ferry_lab::runner::{self, RunOpts, Test};
use ferry_lab::{scenario, wire};

use super::args::{Probe, RunArgs, SoakCmdArgs};

pub(crate) fn run_cmd(a: RunArgs) -> Result<ExitCode> {
    let RunArgs {
        scenarios,
        impls,
        streams,
        amount,
        runs,
        out,
        mut tests,
        reverse,
        churn,
        soak,
        idle,
        baseline,
        ferry_bin,
        scenario_dir,
        peers_dir,
        probe:
            Probe {
                stall,
                ttfb_count,
                rr_count,
                rr_size,
                handshakes,
                handshake_concurrency,
            },
        inner,
        bed,
        no_charts,
    } = a;
    let inner_tls = inner.build()?;
    let testbed = bed.plan()?;
    if reverse && !tests.contains(&Test::Reverse) && tests.contains(&Test::Throughput) {
        tests.push(Test::Reverse);
    }
    if reverse && !tests.contains(&Test::Iperf3Reverse) && tests.contains(&Test::Iperf3) {
        tests.push(Test::Iperf3Reverse);
    }
    if streams.contains(&0) || runs == 0 || handshakes == 0 || handshake_concurrency == 0 {
        bail!("--streams, --runs, --handshakes and --handshake-concurrency must be at least 1");
    }
    check_impls(&impls)?;
    let dir = scenario_dir.unwrap_or_else(scenario::default_dir);
    let o = RunOpts {
        scenarios: scenario::expand(&dir, &scenarios),
        impls,
        streams,
        amount: wire::parse_size(&amount)?,
        runs,
        out: out.unwrap_or_else(|| PathBuf::from("results").join(timestamp())),
        tests,
        idle,
        baseline: Some(baseline),
        ferry_bin,
        scenario_dir: dir,
        peers_dir: peers_dir.unwrap_or_else(runner::peers_dir),
        stall: Duration::from_secs_f64(stall),
        ttfb_count,
        rr_count,
        rr_size,
        handshakes,
        handshake_concurrency,
        churn,
        soak: soak.duration()?,
        soak_idle: soak.soak_idle,
        soak_hostile: soak.soak_hostile,
        soak_churn: soak.soak_churn,
        soak_cycles: soak.soak_cycles,
        inner_tls,
        charts: !no_charts,
        testbed,
    };
    report_run(&o)
}

pub(crate) fn soak_cmd(a: SoakCmdArgs) -> Result<ExitCode> {
    let SoakCmdArgs {
        scenarios,
        impls,
        amount,
        soak,
        out,
        ferry_bin,
        peers_dir,
        probe,
        no_charts,
    } = a;
    check_impls(&impls)?;
    let dir = scenario::default_dir();
    let o = RunOpts {
        scenarios: scenario::expand(&dir, &scenarios),
        impls: impls.clone(),
        streams: vec![1],
        amount: wire::parse_size(&amount)?,
        runs: 1,
        out: out.unwrap_or_else(|| PathBuf::from("results").join(timestamp())),
        tests: vec![Test::Soak],
        idle: vec![soak.soak_idle],
        baseline: impls.iter().find(|i| *i != "ferry").cloned(),
        ferry_bin,
        scenario_dir: dir,
        peers_dir: peers_dir.unwrap_or_else(runner::peers_dir),
        stall: Duration::from_secs_f64(probe.stall),
        ttfb_count: probe.ttfb_count,
        rr_count: probe.rr_count,
        rr_size: probe.rr_size,
        handshakes: probe.handshakes,
        handshake_concurrency: probe.handshake_concurrency,
        churn: 0,
        soak: soak.duration()?,
        soak_idle: soak.soak_idle,
        soak_hostile: soak.soak_hostile,
        soak_churn: soak.soak_churn,
        soak_cycles: soak.soak_cycles,
        inner_tls: None,
        charts: !no_charts,
        testbed: None,
    };
    report_run(&o)
}

/// Every implementation named must be one the lab knows.
pub(crate) fn check_impls<'a>(impls: impl IntoIterator<Item = &'a String>) -> Result<()> {
    for i in impls {
        if !runner::ALL_IMPLS.contains(&i.as_str()) {
            bail!(
                "unknown implementation {i:?}; known: {}",
                runner::ALL_IMPLS.join(", ")
            );
        }
    }
    Ok(())
}

/// `YYYYmmdd-HHMMSS` (the output folder's name), or seconds since the epoch.
pub(crate) fn timestamp() -> String {
    let out = std::process::Command::new("date")
        .arg("+%Y%m%d-%H%M%S")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    if out.is_empty() {
        format!(
            "{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0)
        )
    } else {
        out
    }
}

/// Runs the measurements, prints the report and says where it is.
fn report_run(o: &RunOpts) -> Result<ExitCode> {
    let rows = ferry_lab::report::run_and_report(o)?;
    let md = std::fs::read_to_string(o.out.join("results.md")).unwrap_or_default();
    println!("{md}");
    println!("results in {}", o.out.display());
    let errors = rows.iter().filter(|r| r.status == Status::Error).count();
    if errors > 0 {
        eprintln!("{errors} measurement(s) failed; see the report");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
