//! The testbed of one measurement: its namespaces' runtimes, where each process runs, and
//! running loadgen's futures in node A.

use std::cell::RefCell;
use std::future::Future;

use anyhow::{Context, Result};

use crate::testbed::{NsRuntime, Spec, Testbed};

use super::{Ctx, TestbedPlan};

/// One measurement's testbed: loadgen's runtime in A, the receiver's in D (fields drop in
/// order: the runtimes leave the namespaces before the testbed removes them).
pub(super) struct Bed {
    pub(super) a: NsRuntime,
    pub(super) d: NsRuntime,
    pub(super) tb: Testbed,
}

impl Bed {
    pub(super) fn build(plan: &TestbedPlan) -> Result<Bed> {
        let mut spec = Spec::abcd();
        spec.congestion = plan.congestion.clone();
        let bc = spec.link_after("b");
        bc.impair = plan.impair;
        bc.rate_mbit = plan.rate_mbit;
        let tb = Testbed::build(&spec).context("building the testbed")?;
        Ok(Bed {
            a: tb.runtime("a")?,
            d: tb.runtime("d")?,
            tb,
        })
    }

    pub(super) fn addr(&self, node: &str) -> std::net::IpAddr {
        self.tb.node(node).addr.into()
    }
}

/// The node a chain's process runs on: the client side (or a single relay) in B, everything
/// else (server, nginx in front of it, fallback targets, REALITY sites) in C.
pub(super) fn node_of(name: &str, processes: usize) -> &'static str {
    if processes == 1 || name == "client" {
        "b"
    } else {
        "c"
    }
}

/// Clears the measurement's testbed when the measurement ends, however it ends.
pub(super) struct ClearBed<'a>(pub(super) &'a RefCell<Option<Bed>>);

impl Drop for ClearBed<'_> {
    fn drop(&mut self) {
        self.0.borrow_mut().take();
    }
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
}
