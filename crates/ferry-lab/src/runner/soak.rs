//! The soak test: idle connections held while cycles of hostile clients, churn and bulk
//! transfers run, the chain's memory sampled throughout.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::loadgen::{self, Target};
use crate::receiver;

use super::chain::Chain;
use super::ctx::Ctx;
use super::jobs::Job;

impl Ctx<'_> {
    /// The soak test (see [`crate::plan::Test::Soak`]).
    pub(super) fn soak(
        &self,
        chain: &mut Chain,
        target: &Target,
        reports: &receiver::Reports,
        job: &Job,
    ) -> Result<crate::results::Soak> {
        use crate::results::SoakSample;
        let o = self.o;
        let start = Instant::now();
        let mut samples = Vec::new();
        let sample = |phase: &'static str, samples: &mut Vec<SoakSample>, chain: &Chain| {
            samples.push(SoakSample {
                secs: start.elapsed().as_secs_f64(),
                phase,
                rss_kb: chain
                    .procs
                    .usage_by_name()
                    .into_iter()
                    .map(|(n, u)| (n, u.rss_kb))
                    .collect(),
            })
        };
        // The receiver's reports: echoes counted; a never-reading client's download ends in
        // an error at the receiver when it goes, which is expected.
        let drain = || -> Result<usize> {
            let mut n = 0;
            for r in reports.take() {
                match (&r.error, r.mode) {
                    (_, Some(crate::wire::Mode::Download)) => {}
                    (Some(e), _) => bail!("receiver: {e}"),
                    (None, Some(crate::wire::Mode::Echo)) => n += 1,
                    _ => {}
                }
            }
            Ok(n)
        };
        let mut echoed = 0;
        let bulk_once = |what: &str| {
            self.one_bulk(target, what)
                .context("soak")
                .map(|t| t.mb_per_s())
        };
        sample("start", &mut samples, chain);
        // The same transfer alone, before anything else is held: what the cycles' transfers
        // beside the idle connections compare with.
        let alone = bulk_once("alone")?;
        std::thread::sleep(Duration::from_millis(500));
        sample("bulk alone", &mut samples, chain);
        let held = self
            .block_on(loadgen::hold_idle(target, job.param, o.stall))
            .context("soak: holding the idle connections")?;
        sample("idle held", &mut samples, chain);
        let (mut churned, mut cycles, mut bulk) = (0, 0, Vec::new());
        while start.elapsed() < o.soak && (o.soak_cycles == 0 || cycles < o.soak_cycles) {
            let hostile = self
                .block_on(loadgen::hold_hostile(target, o.soak_hostile, o.stall))
                .context("soak: hostile clients")?;
            let per = o.soak_churn.div_ceil(5).max(1);
            for _ in 0..5 {
                self.churn_batch(target, per)
                    .with_context(|| format!("soak: churn after {churned} connections"))?;
                churned += per;
                sample("churn", &mut samples, chain);
                echoed += drain()?;
            }
            bulk.push(bulk_once("beside the idle connections")?);
            drop(hostile);
            chain.procs.check_alive()?;
            std::thread::sleep(Duration::from_millis(500));
            sample("cycle end", &mut samples, chain);
            cycles += 1;
        }
        drop(held);
        std::thread::sleep(Duration::from_secs(2));
        sample("released", &mut samples, chain);
        let t0 = Instant::now();
        while echoed < churned && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(100));
            echoed += drain()?;
        }
        if echoed < churned {
            bail!("soak: the receiver echoed {echoed} connections, loadgen made {churned}");
        }
        chain.procs.check_alive()?;
        Ok(crate::results::Soak {
            idle: job.param,
            churned,
            hostile: o.soak_hostile,
            cycles,
            bulk_alone_mb_per_s: alone,
            bulk_mb_per_s: bulk,
            samples,
        })
    }
}
