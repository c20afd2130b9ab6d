//! Running a report: each case as a runner plan, its rows flattened into results.json, then
//! results.md and the charts.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;

use crate::inner_tls::{InnerTls, TlsVersion};
use crate::plan::{RunOpts, ALL_IMPLS};
use crate::results::{command_line, FlatRow, Row, Status};
use crate::scenario;

use super::cases::cases;
use super::markdown::markdown;
use super::opts::{vision, Case, ReportOpts, REPORTS};

/// Implementations of `scenario` this report runs.
fn impls_for(o: &ReportOpts, scenario: &str) -> Vec<String> {
    let has: Vec<String> = scenario::load(&o.scenario_dir, scenario)
        .map(|s| s.impls.keys().cloned().collect())
        .unwrap_or_default();
    ALL_IMPLS
        .iter()
        .map(|s| s.to_string())
        .filter(|i| has.contains(i))
        .filter(|i| o.impls.as_ref().is_none_or(|v| v.contains(i)))
        .collect()
}

fn flatten(id: &str, c: &Case, r: &Row) -> FlatRow {
    let tb = r.testbed.as_ref();
    let plan = c.testbed.as_ref();
    let impair = plan.and_then(|p| p.impair);
    let status = match r.status {
        Status::Ok => "ok".to_string(),
        Status::NotYet => format!("not yet: {}", r.message.as_deref().unwrap_or("")),
        Status::Skipped => format!("skipped: {}", r.message.as_deref().unwrap_or("")),
        Status::Error => format!("error: {}", r.message.as_deref().unwrap_or("")),
    };
    FlatRow {
        report: id.to_string(),
        case: c.label.clone(),
        scenario: c.scenario.clone(),
        implementation: r.implementation.clone(),
        test: r.test.clone(),
        flow: if vision(&c.scenario) {
            "xtls-rprx-vision".into()
        } else {
            "-".into()
        },
        run: r.run,
        cpu_cap_pct: plan.and_then(|p| p.cap.as_ref()).map(|(_, p)| *p),
        cpu_cap_node: plan.and_then(|p| p.cap.as_ref()).map(|(n, _)| n.clone()),
        record_size: c.record,
        conns: r.streams,
        delay_ms: impair.map(|i| i.delay.as_secs_f64() * 1000.0),
        loss_pct: impair.map(|i| i.loss_pct),
        congestion: tb.map(|t| t.congestion.clone()),
        gbps: r.gbit_per_s,
        mb_per_s: r.mb_per_s,
        cpu_s_per_gb: r.cpu_secs_per_gb,
        peak_rss_mib: r.peak_rss_kb as f64 / 1024.0,
        ttfb_ms: r.ttfb.as_ref().map(|p| p.p50_ms),
        latency_p50_ms: r.rtt.as_ref().map(|p| p.p50_ms),
        latency_p99_ms: r.rtt.as_ref().map(|p| p.p99_ms),
        hop_loss_pct: tb.and_then(|t| t.hop.as_ref()).map(|h| h.loss_pct),
        hop_delay_p50_ms: tb.and_then(|t| t.hop.as_ref()).map(|h| h.delay_p50_ms),
        status,
    }
}

#[derive(Serialize)]
struct Doc<'a> {
    report: &'a str,
    title: &'a str,
    command: String,
    quick: bool,
    runs: usize,
    rows: &'a [FlatRow],
}

fn write_json(o: &ReportOpts, title: &str, rows: &[FlatRow]) -> Result<()> {
    let doc = Doc {
        report: &o.id,
        title,
        command: command_line(),
        quick: o.quick,
        runs: o.runs,
        rows,
    };
    let p = o.out.join("results.json");
    std::fs::write(&p, serde_json::to_string_pretty(&doc)?)
        .with_context(|| format!("writing {}", p.display()))
}

fn impls_wanted(o: &ReportOpts, i: &str) -> bool {
    o.impls.as_ref().is_none_or(|v| v.iter().any(|x| x == i))
}

fn human_secs(s: f64) -> String {
    if s < 120.0 {
        format!("{s:.0} s")
    } else if s < 7200.0 {
        format!("{:.0} min", s / 60.0)
    } else {
        format!("{:.1} h", s / 3600.0)
    }
}

/// Runs report `o.id`: every case for every implementation; writes results.json after each
/// case, then results.md and the charts. Returns the rows.
pub fn run(o: &ReportOpts) -> Result<Vec<FlatRow>> {
    let title = REPORTS
        .iter()
        .find(|(n, _)| *n == o.id)
        .map(|(_, t)| *t)
        .unwrap_or("");
    let cases = cases(&o.id, o.quick, &o.scenario_dir)?;
    std::fs::create_dir_all(&o.out).with_context(|| format!("creating {}", o.out.display()))?;
    let ferry_bin = match &o.ferry_bin {
        Some(b) => Some(b.clone()),
        None if impls_wanted(o, "ferry") => Some(crate::runner::build_ferry()?),
        None => None,
    };
    let total = cases.len();
    let t0 = Instant::now();
    let mut rows = Vec::new();
    for (k, c) in cases.iter().enumerate() {
        let impls = impls_for(o, &c.scenario);
        eprintln!(
            "report {} case {}/{total}: {} ({})",
            o.id,
            k + 1,
            c.label,
            impls.join(", ")
        );
        if impls.is_empty() {
            continue;
        }
        let plan = case_plan(o, c, k, impls, ferry_bin.clone())?;
        let got = crate::runner::run(&plan)?;
        rows.extend(got.iter().map(|r| flatten(&o.id, c, r)));
        write_json(o, title, &rows)?;
        let done = k + 1;
        let spent = t0.elapsed().as_secs_f64();
        let left = spent / done as f64 * (total - done) as f64;
        eprintln!(
            "report {}: {done}/{total} cases in {}; about {} left",
            o.id,
            human_secs(spent),
            human_secs(left)
        );
    }
    let md = markdown(o, title, &cases, &rows);
    let charts = crate::chart::write_report_charts(&o.out, &o.id, &rows)?;
    let mut md = md;
    for (file, legend) in &charts {
        let _ = writeln!(md, "\n![{legend}]({file})\n");
    }
    std::fs::write(o.out.join("results.md"), md)?;
    Ok(rows)
}

/// The runner plan of case `k` (its own folder under work/).
fn case_plan(
    o: &ReportOpts,
    c: &Case,
    k: usize,
    impls: Vec<String>,
    ferry_bin: Option<PathBuf>,
) -> Result<RunOpts> {
    Ok(RunOpts {
        scenarios: vec![c.scenario.clone()],
        impls,
        streams: c.streams.clone(),
        amount: o.amount.unwrap_or(c.amount),
        runs: o.runs,
        out: o.out.join("work").join(format!("case-{:03}", k + 1)),
        tests: c.tests.clone(),
        idle: vec![],
        baseline: None,
        ferry_bin,
        scenario_dir: o.scenario_dir.clone(),
        peers_dir: o.peers_dir.clone(),
        stall: Duration::from_secs(30),
        ttfb_count: c.ttfb_count,
        rr_count: c.rr_count,
        rr_size: 64,
        handshakes: 1,
        handshake_concurrency: 1,
        churn: 1,
        soak: Duration::ZERO,
        soak_idle: 0,
        soak_hostile: 0,
        soak_churn: 0,
        soak_cycles: 0,
        inner_tls: c
            .record
            .map(|r| InnerTls::new(TlsVersion::V13, r))
            .transpose()?,
        charts: false,
        testbed: c.testbed.clone(),
    })
}
