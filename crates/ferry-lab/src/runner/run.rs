//! The run: plan the jobs, build ferry and the certificate when needed, measure each job and
//! rewrite results.json after each.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::Instant;

use anyhow::{Context, Result};

use crate::plan::RunOpts;
use crate::results::{Row, Status};
use crate::scenario::Scenario;

use super::bins::build_ferry;
use super::cert;
use super::ctx::Ctx;
use super::jobs::{self, param_label, Job};

/// Runs everything, writing results.json after each measurement; returns the rows (the report
/// is [`crate::report::run_and_report`]'s part).
pub fn run(o: &RunOpts) -> Result<Vec<Row>> {
    // Processes run in their own folders: every path handed to them must be absolute.
    let mut abs = o.clone();
    abs.out = std::path::absolute(&o.out)?;
    abs.scenario_dir = std::path::absolute(&o.scenario_dir)?;
    abs.peers_dir = std::path::absolute(&o.peers_dir)?;
    let o = &abs;
    std::fs::create_dir_all(&o.out).with_context(|| format!("creating {}", o.out.display()))?;
    let nofile = crate::sys::raise_nofile();
    let mut rows: Vec<Row> = Vec::new();
    let scns = jobs::load_scenarios(o, &mut rows);
    let jobs = jobs::plan(o, &scns, &mut rows);
    let needs_ferry = jobs.iter().any(|j| j.imp == "ferry");
    let ferry_bin = match (&o.ferry_bin, needs_ferry) {
        (Some(p), _) => Some(
            std::fs::canonicalize(p).with_context(|| format!("ferry binary {}", p.display()))?,
        ),
        (None, true) => Some(build_ferry()?),
        (None, false) => None,
    };
    let work = o.out.join("work");
    std::fs::create_dir_all(&work)?;
    let cert = if scns.iter().any(|s| s.tls) {
        Some(cert::make_cert(&work)?)
    } else {
        None
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let ctx = Ctx {
        o,
        rt,
        bed: RefCell::new(None),
        cert,
        ferry_bin,
        nofile,
    };
    ctx.run_jobs(&scns, &jobs, &mut rows)?;
    Ok(rows)
}

impl Ctx<'_> {
    /// Measures each job in turn, appending its row and rewriting results.json after each.
    fn run_jobs(&self, scns: &[Scenario], jobs: &[Job], rows: &mut Vec<Row>) -> Result<()> {
        let o = self.o;
        // Ferry's support for each scenario, checked once with `ferry test -c`.
        let mut ferry_support: BTreeMap<String, Result<(), (Status, String)>> = BTreeMap::new();
        let total = jobs.len();
        for (n, job) in jobs.iter().enumerate() {
            let Some(s) = scns.iter().find(|s| s.name == job.scenario) else {
                continue;
            };
            let label = format!(
                "[{}/{total}] {} {} {} {} run {}/{}",
                n + 1,
                job.scenario,
                job.imp,
                job.test.name(),
                param_label(job.test, job.param),
                job.run,
                o.runs
            );
            let live = super::live::LiveLine::start(&label);
            let t0 = Instant::now();
            let pre = if job.imp == "ferry" {
                ferry_support
                    .entry(s.name.clone())
                    .or_insert_with(|| self.ferry_check(s))
                    .clone()
            } else {
                Ok(())
            };
            let row = match pre {
                Err((st, msg)) => Row::failed(
                    &job.scenario,
                    &job.imp,
                    job.test.name(),
                    job.param,
                    job.run,
                    st,
                    msg,
                ),
                Ok(()) => self.measure(s, job),
            };
            live.finish();
            eprintln!("{} ({:.1}s)", row.summary(), t0.elapsed().as_secs_f64());
            rows.push(row);
            crate::results::write_json(&o.out, o, rows)?;
        }
        Ok(())
    }
}
