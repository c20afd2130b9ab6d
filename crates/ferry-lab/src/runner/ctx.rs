//! Per-run shared state: the options, the runtime, the current testbed, the certificate and
//! the binaries; running loadgen where it belongs.

use std::cell::RefCell;
use std::future::Future;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Result};

use crate::plan::RunOpts;

use super::bed::Bed;
use super::cert::Cert;

/// Per-run shared state.
pub(super) struct Ctx<'a> {
    pub(super) o: &'a RunOpts,
    pub(super) rt: tokio::runtime::Runtime,
    /// The current measurement's testbed (None on loopback).
    pub(super) bed: RefCell<Option<Bed>>,
    pub(super) cert: Option<Cert>,
    pub(super) ferry_bin: Option<PathBuf>,
    pub(super) nofile: u64,
}

impl Ctx<'_> {
    /// Runs a loadgen future: in node A's namespace on the testbed, else here.
    pub(super) fn block_on<F>(&self, fut: F) -> F::Output
    where
        F: Future + Send,
        F::Output: Send,
    {
        match self.bed.borrow().as_ref() {
            Some(b) => b.a.block_on(fut),
            None => self.rt.block_on(fut),
        }
    }

    /// The testbed's conditions for the row, with what the hop and the cap measured.
    pub(super) fn bed_row(&self) -> Option<crate::results::TestbedRow> {
        let bed = self.bed.borrow();
        let b = bed.as_ref()?;
        let plan = self.o.testbed.clone().unwrap_or_default();
        Some(crate::results::TestbedRow {
            congestion: b.tb.congestion(),
            hop: b.tb.hop_stats().into_iter().next().map(|(_, h)| h),
            throttled_periods: plan.cap.as_ref().and_then(|(n, _)| b.tb.throttled(n)),
            plan,
        })
    }

    pub(super) fn bin(&self, name: &str) -> Result<PathBuf> {
        if name == "ferry" {
            return self
                .ferry_bin
                .clone()
                .ok_or_else(|| anyhow!("no ferry binary"));
        }
        let p = self.o.peers_dir.join(name);
        if !p.exists() {
            bail!(
                "peer {name} is not installed at {} (run scripts/peers.sh)",
                p.display()
            );
        }
        Ok(p)
    }

    pub(super) fn cert_vars(&self) -> Option<(&Path, &Path, &str)> {
        self.cert
            .as_ref()
            .map(|c| (c.cert.as_path(), c.key.as_path(), c.sha256.as_str()))
    }
}
