//! The run's plan: the scenarios loaded and one job per measurement.

use crate::plan::{RunOpts, Test};
use crate::results::{Row, Status};
use crate::scenario::{self, Entry, Scenario};

/// One planned measurement.
#[derive(Clone, Debug)]
pub(super) struct Job {
    pub(super) scenario: String,
    pub(super) imp: String,
    pub(super) test: Test,
    /// Connections (throughput/reverse), idle connections (idle), 1 (latency).
    pub(super) param: usize,
    pub(super) run: usize,
}

/// The scenarios asked for; one that does not load is a failed row.
pub(super) fn load_scenarios(o: &RunOpts, rows: &mut Vec<Row>) -> Vec<Scenario> {
    let mut scns: Vec<Scenario> = Vec::new();
    for name in &o.scenarios {
        match scenario::load(&o.scenario_dir, name) {
            Ok(s) => scns.push(s),
            Err(e) => rows.push(Row::failed(
                name,
                "-",
                "-",
                0,
                0,
                Status::Error,
                format!("{e:#}"),
            )),
        }
    }
    scns
}

/// Every (scenario, implementation, test, parameter, run); an implementation without a
/// template for a scenario is a skipped row.
pub(super) fn plan(o: &RunOpts, scns: &[Scenario], rows: &mut Vec<Row>) -> Vec<Job> {
    let mut jobs = Vec::new();
    for s in scns {
        let impls: Vec<String> = if s.entry == Entry::Direct {
            vec!["loopback".to_string()]
        } else {
            o.impls
                .iter()
                .filter(|i| s.impls.contains_key(i.as_str()))
                .cloned()
                .collect()
        };
        for i in &o.impls {
            if s.entry != Entry::Direct && !s.impls.contains_key(i.as_str()) {
                rows.push(Row::failed(
                    &s.name,
                    i,
                    "-",
                    0,
                    0,
                    Status::Skipped,
                    format!("{i} has no template for {}", s.name),
                ));
            }
        }
        if s.entry == Entry::Transparent && o.testbed.is_none() {
            for i in &impls {
                rows.push(Row::failed(
                    &s.name,
                    i,
                    "-",
                    0,
                    0,
                    Status::Skipped,
                    format!("{} runs on the testbed only (--testbed)", s.name),
                ));
            }
            continue;
        }
        for imp in &impls {
            for t in &o.tests {
                for p in params(o, *t) {
                    for r in 1..=o.runs {
                        jobs.push(Job {
                            scenario: s.name.clone(),
                            imp: imp.clone(),
                            test: *t,
                            param: p,
                            run: r,
                        });
                    }
                }
            }
        }
    }
    jobs
}

/// The parameters a test runs with.
fn params(o: &RunOpts, t: Test) -> Vec<usize> {
    match t {
        Test::Throughput | Test::Reverse | Test::Iperf3 | Test::Iperf3Reverse => o.streams.clone(),
        Test::Latency => vec![1],
        Test::Handshake => vec![o.handshake_concurrency],
        Test::Idle | Test::BulkIdle => o.idle.clone(),
        Test::Churn => vec![o.churn],
        Test::Soak => vec![o.soak_idle],
    }
}

pub(super) fn param_label(t: Test, p: usize) -> String {
    match t {
        Test::Throughput | Test::Reverse | Test::Iperf3 | Test::Iperf3Reverse => {
            format!("x{p}")
        }
        Test::Idle | Test::BulkIdle => format!("{p} conns"),
        Test::Churn => format!("{p} conns"),
        Test::Soak => format!("{p} idle"),
        Test::Handshake => format!("{p} in parallel"),
        Test::Latency => String::new(),
    }
}
