//! The testbed of one measurement: its namespaces' runtimes, where each process runs, and
//! clearing it when the measurement ends.

use std::cell::RefCell;

use anyhow::{Context, Result};

use crate::testbed::{NsRuntime, Spec, Testbed};

use crate::plan::TestbedPlan;

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
