//! The connection tests: handshakes (sequential and parallel bursts of fresh connections) and
//! churn (memory while many short connections come and go).

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::loadgen::{self, Target};
use crate::procs;
use crate::results::Row;

use crate::plan::HANDSHAKE_MSG;

use super::chain::Live;
use super::checks::{echoes, wait_exact_echoes};
use super::ctx::Ctx;
use super::jobs::Job;

/// CPU seconds of a role's processes: the client, the server, or all others.
fn role_cpu(u: &[(String, procs::Usage)], role: &str) -> f64 {
    u.iter()
        .filter(|(n, _)| match role {
            "client" | "server" => n == role,
            _ => n != "client" && n != "server",
        })
        .map(|(_, x)| x.cpu_secs)
        .sum()
}

impl Ctx<'_> {
    /// [`crate::plan::Test::Handshake`]: `--handshakes` fresh connections one at a time, then
    /// `param` at a time, with each role's CPU.
    pub(super) fn handshake(&self, l: &mut Live, job: &Job, row: &mut Row) -> Result<()> {
        let o = self.o;
        let n = o.handshakes;
        let mut phases = Vec::new();
        for conc in [1, job.param] {
            // Settle: connections of the warm-up (or the last phase) are torn down
            // before the sample, and this phase's teardown is inside its own.
            std::thread::sleep(Duration::from_millis(300));
            let u0 = l.chain.procs.usage_by_name();
            let burst = self
                .block_on(loadgen::fresh_conns(
                    &l.target,
                    n,
                    conc,
                    HANDSHAKE_MSG,
                    o.stall,
                ))
                .with_context(|| format!("fresh connections, {conc} at a time"))?;
            std::thread::sleep(Duration::from_millis(300));
            let u1 = l.chain.procs.usage_by_name();
            let d = |role: &str| role_cpu(&u1, role) - role_cpu(&u0, role);
            phases.push(crate::results::HandshakePhase {
                burst,
                server_cpu_secs: d("server"),
                client_cpu_secs: d("client"),
                other_cpu_secs: d("other"),
            });
        }
        let after = l.chain.procs.usage();
        l.chain.procs.check_alive()?;
        wait_exact_echoes(&l.reports, 2 * n)?;
        row.cpu_secs = after.cpu_secs - l.before.cpu_secs;
        row.peak_rss_kb = after.hwm_kb;
        row.handshake = Some(crate::results::Handshakes {
            message_bytes: HANDSHAKE_MSG,
            sequential: phases.remove(0),
            parallel: phases.remove(0),
        });
        Ok(())
    }

    /// [`crate::plan::Test::Churn`]: `param` short connections in batches, the chain's memory
    /// after each.
    pub(super) fn churn(&self, l: &mut Live, job: &Job, row: &mut Row) -> Result<()> {
        let chain = &mut l.chain;
        let n = job.param;
        let first = n.min(10_000);
        let chunks = 10;
        let mut done = 0;
        let mut samples = Vec::new();
        let mut echoed = 0;
        let start = Instant::now();
        while done < n {
            let count = if done == 0 {
                first
            } else {
                ((n - first).div_ceil(chunks)).min(n - done)
            };
            self.churn_batch(&l.target, count)
                .with_context(|| format!("churn, after {done} connections"))?;
            done += count;
            // Let the chain finish tearing the last ones down before the sample.
            std::thread::sleep(Duration::from_millis(500));
            echoed += echoes(&l.reports)?;
            samples.push(crate::results::ChurnSample {
                conns: done,
                rss_kb: chain
                    .procs
                    .usage_by_name()
                    .into_iter()
                    .map(|(n, u)| (n, u.rss_kb))
                    .collect(),
            });
        }
        chain.procs.check_alive()?;
        // The receiver reports a connection when the chain passed its close on; some
        // chains pass the last ones on late. (+1: the warm-up is not an echo.)
        let t0 = Instant::now();
        while echoed < n && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(100));
            echoed += echoes(&l.reports)?;
        }
        if echoed < n {
            bail!("the receiver echoed {echoed} connections, loadgen made {n}");
        }
        let after = chain.procs.usage();
        row.cpu_secs = after.cpu_secs - l.before.cpu_secs;
        row.peak_rss_kb = after.hwm_kb;
        row.secs = start.elapsed().as_secs_f64();
        row.churn = Some(samples);
        Ok(())
    }

    /// `count` short echoed connections, `--handshake-concurrency` at a time (churn and soak).
    pub(super) fn churn_batch(&self, target: &Target, count: usize) -> Result<()> {
        let o = self.o;
        self.block_on(loadgen::fresh_conns(
            target,
            count,
            o.handshake_concurrency,
            HANDSHAKE_MSG,
            o.stall,
        ))
        .map(|_| ())
    }
}
