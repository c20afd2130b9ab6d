//! The transfer tests: throughput (and reverse), latency, bulk beside idle connections, and
//! the memory idle connections hold.

use std::time::Duration;

use anyhow::{Context, Result};

use crate::loadgen::{self, BulkOpts, Target};
use crate::results::Row;

use crate::plan::Test;

use super::chain::Live;
use super::ctx::Ctx;
use super::jobs::Job;

impl Ctx<'_> {
    /// [`Test::Throughput`] and [`Test::Reverse`]: `--amount` over `param` connections.
    pub(super) fn throughput(&self, l: &mut Live, job: &Job, row: &mut Row) -> Result<()> {
        let o = self.o;
        let per = (o.amount / job.param as u64).max(1);
        let t = self.block_on(loadgen::bulk(
            &l.target,
            &BulkOpts {
                amount: per,
                concurrency: job.param,
                reverse: job.test == Test::Reverse,
                stall: o.stall,
            },
        ))?;
        let after = l.chain.procs.usage();
        l.chain.procs.check_alive()?;
        row.bytes = t.bytes;
        row.secs = t.secs;
        row.mb_per_s = t.mb_per_s();
        row.gbit_per_s = t.mb_per_s() * 8.0 / 1000.0;
        row.cpu_secs = after.cpu_secs - l.before.cpu_secs;
        row.cpu_secs_per_gb = if t.bytes > 0 {
            row.cpu_secs / (t.bytes as f64 / 1e9)
        } else {
            0.0
        };
        row.peak_rss_kb = after.hwm_kb;
        self.check_receiver(&l.reports, job, per)
    }

    /// [`Test::Latency`]: time to first byte and request/response round trips.
    pub(super) fn latency(&self, l: &mut Live, row: &mut Row) -> Result<()> {
        let o = self.o;
        let timeout = o.stall;
        let ttfb = self
            .block_on(loadgen::ttfb(&l.target, o.ttfb_count, timeout))
            .context("time to first byte")?;
        let rtt = self
            .block_on(loadgen::round_trips(
                &l.target, o.rr_size, o.rr_count, timeout,
            ))
            .context("round trips")?;
        let after = l.chain.procs.usage();
        l.chain.procs.check_alive()?;
        row.cpu_secs = after.cpu_secs - l.before.cpu_secs;
        row.peak_rss_kb = after.hwm_kb;
        row.ttfb = Some(ttfb);
        row.rtt = Some(rtt);
        Ok(())
    }

    /// [`Test::BulkIdle`]: one transfer alone, then one beside `param` idle connections.
    pub(super) fn bulk_idle(&self, l: &mut Live, job: &Job, row: &mut Row) -> Result<()> {
        let o = self.o;
        let target = &l.target;
        let bulk = |what: &str| self.one_bulk(target, what);
        let alone = bulk("alone")?;
        self.check_receiver(&l.reports, job, o.amount)?;
        let held = self.block_on(loadgen::hold_idle(target, job.param, o.stall))?;
        std::thread::sleep(Duration::from_secs(1));
        let beside = bulk("beside the idle connections")?;
        l.chain.procs.check_alive()?;
        self.check_receiver(&l.reports, job, o.amount)?;
        drop(held);
        let after = l.chain.procs.usage();
        row.bytes = beside.bytes;
        row.secs = beside.secs;
        row.mb_per_s = beside.mb_per_s();
        row.gbit_per_s = beside.mb_per_s() * 8.0 / 1000.0;
        row.alone_mb_per_s = Some(alone.mb_per_s());
        row.cpu_secs = after.cpu_secs - l.before.cpu_secs;
        row.peak_rss_kb = after.hwm_kb;
        Ok(())
    }

    /// [`Test::Idle`]: the memory `param` idle connections hold, in all and per process.
    pub(super) fn idle(&self, l: &mut Live, job: &Job, row: &mut Row) -> Result<()> {
        let o = self.o;
        let chain = &mut l.chain;
        std::thread::sleep(Duration::from_millis(300));
        let base = chain.procs.usage();
        let base_by = chain.procs.usage_by_name();
        let held = self.block_on(loadgen::hold_idle(&l.target, job.param, o.stall))?;
        std::thread::sleep(Duration::from_secs(1));
        let after = chain.procs.usage();
        let after_by = chain.procs.usage_by_name();
        chain.procs.check_alive()?;
        drop(held);
        // Which process holds the memory: growth per connection of each one.
        row.idle_bytes_per_conn_by_process = Some(
            after_by
                .iter()
                .map(|(name, a)| {
                    let b = base_by
                        .iter()
                        .find(|(n, _)| n == name)
                        .map(|(_, u)| u.rss_kb)
                        .unwrap_or(0);
                    let per = (a.rss_kb as f64 - b as f64) * 1024.0 / job.param as f64;
                    (name.clone(), per)
                })
                .collect(),
        );
        row.idle_rss_kb_before = Some(base.rss_kb);
        row.idle_rss_kb_after = Some(after.rss_kb);
        row.rss_bytes_per_conn =
            Some((after.rss_kb as f64 - base.rss_kb as f64) * 1024.0 / job.param as f64);
        row.peak_rss_kb = after.hwm_kb;
        Ok(())
    }

    /// One `--amount` transfer over one connection (the bulk-idle and soak tests).
    pub(super) fn one_bulk(&self, target: &Target, what: &str) -> Result<loadgen::Transfer> {
        let o = self.o;
        self.block_on(loadgen::bulk(
            target,
            &BulkOpts {
                amount: o.amount,
                concurrency: 1,
                reverse: false,
                stall: o.stall,
            },
        ))
        .with_context(|| format!("bulk transfer {what}"))
    }
}
