//! One measurement: its testbed, receiver and chain, the warm-up, then the test itself (in
//! the files beside this one).

use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::loadgen::{self, BulkOpts, Target};
use crate::receiver;
use crate::results::{Row, Status};
use crate::scenario::Scenario;

use crate::plan::Test;

use super::bed::{Bed, ClearBed};
use super::chain::Live;
use super::ctx::Ctx;
use super::jobs::Job;

impl Ctx<'_> {
    pub(super) fn measure(&self, s: &Scenario, job: &Job) -> Row {
        let dir = self.o.out.join("work").join(format!(
            "{}-{}-{}-{}-r{}",
            job.scenario,
            job.imp,
            job.test.name(),
            job.param,
            job.run
        ));
        let mut row = Row::new(&job.scenario, &job.imp, job.test.name(), job.param, job.run);
        let res = std::fs::create_dir_all(&dir)
            .map_err(anyhow::Error::from)
            .and_then(|_| self.measure_in(s, job, &dir, &mut row));
        if let Err(e) = res {
            row.status = Status::Error;
            row.message = Some(format!("{e:#}"));
        }
        row
    }

    fn measure_in(&self, s: &Scenario, job: &Job, dir: &Path, row: &mut Row) -> Result<()> {
        self.check_nofile(job)?;
        if let Some(plan) = &self.o.testbed {
            *self.bed.borrow_mut() = Some(Bed::build(plan)?);
        }
        let _clear = ClearBed(&self.bed);
        if matches!(job.test, Test::Iperf3 | Test::Iperf3Reverse) {
            return self.measure_iperf3(s, job, dir, row);
        }
        let (target_port, reports, recv_task) = match self.bed.borrow().as_ref() {
            Some(b) => b.d.block_on(receiver::start_on(std::net::SocketAddr::new(
                b.addr("d"),
                0,
            )))?,
            None => self.rt.block_on(receiver::start(0))?,
        };
        let _stop_receiver = AbortOnDrop(recv_task);
        let chain = self.start_chain(s, &job.imp, dir, target_port)?;
        let target = chain.target.clone();
        self.warm_up(&target)?;
        let before = chain.procs.usage();
        if let Some(b) = self.bed.borrow().as_ref() {
            b.tb.reset_hops();
        }
        let mut live = Live {
            chain,
            target,
            reports,
            before,
        };
        match job.test {
            Test::Throughput | Test::Reverse => self.throughput(&mut live, job, row)?,
            Test::Latency => self.latency(&mut live, row)?,
            Test::Handshake => self.handshake(&mut live, job, row)?,
            Test::Iperf3 | Test::Iperf3Reverse => unreachable!("measured by measure_iperf3"),
            Test::BulkIdle => self.bulk_idle(&mut live, job, row)?,
            Test::Churn => self.churn(&mut live, job, row)?,
            Test::Soak => {
                row.soak = Some(self.soak(&mut live.chain, &live.target, &live.reports, job)?);
                let after = live.chain.procs.usage();
                row.cpu_secs = after.cpu_secs - live.before.cpu_secs;
                row.peak_rss_kb = after.hwm_kb;
            }
            Test::Idle => self.idle(&mut live, job, row)?,
        }
        row.testbed = self.bed_row();
        live.chain.procs.stop_all();
        row.status = Status::Ok;
        Ok(())
    }

    /// The idle tests need open files for all their connections.
    fn check_nofile(&self, job: &Job) -> Result<()> {
        if matches!(job.test, Test::Idle | Test::BulkIdle) {
            // Each proxy holds two sockets per connection; this process holds two as well.
            let need = job.param as u64 * 2 + 200;
            if need > self.nofile {
                bail!(
                    "{} idle connections need about {need} open files per process; the limit here is {}",
                    job.param,
                    self.nofile
                );
            }
        }
        Ok(())
    }

    /// A small verified transfer first: proves the chain works before anything is timed.
    fn warm_up(&self, target: &Target) -> Result<()> {
        self.block_on(loadgen::bulk(
            target,
            &BulkOpts {
                amount: 1 << 20,
                concurrency: 1,
                reverse: false,
                stall: self.o.stall,
            },
        ))
        .context("warm-up transfer")?;
        Ok(())
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);
impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
