//! What a report is: the list of reports, a report's cases, and `ferry-lab report`'s options.

use std::path::PathBuf;

use crate::plan::{Test, TestbedPlan};

/// The reports, with what each measures.
pub const REPORTS: &[(&str, &str)] = &[
    (
        "000",
        "VMess and Shadowsocks ciphers on loopback, 1/2/4 connections",
    ),
    (
        "001",
        "A -> B -> C -> D: VLESS, Vision, VMess ws+TLS (nginx), Trojan; TLS from A to D; B capped",
    ),
    (
        "002",
        "Vision vs TLS under CPU caps of the server node and inner TLS record sizes",
    ),
    (
        "003",
        "cipher throughput, TTFB and request latency: clean link and 50 ms RTT + 1% loss",
    ),
    (
        "004",
        "fallbacks (TCP, unix, abstract, padded) and nginx in front (TCP, unix, PROXY protocol)",
    ),
];

/// One measurement group of a report: one runner plan.
#[derive(Clone, Debug)]
pub struct Case {
    /// What the report's table calls it (scenario, and the condition when it varies).
    pub label: String,
    pub scenario: String,
    pub tests: Vec<Test>,
    pub streams: Vec<usize>,
    pub amount: u64,
    pub testbed: Option<TestbedPlan>,
    /// Inner TLS 1.3 between loadgen and receiver, with this record size.
    pub record: Option<usize>,
    /// Latency samples (time to first byte, round trips).
    pub ttfb_count: usize,
    pub rr_count: usize,
}

/// Options of `ferry-lab report`.
#[derive(Clone, Debug)]
pub struct ReportOpts {
    pub id: String,
    /// Implementations (None: every one each scenario has).
    pub impls: Option<Vec<String>>,
    pub quick: bool,
    pub runs: usize,
    /// Bytes per throughput measurement instead of each case's.
    pub amount: Option<u64>,
    pub out: PathBuf,
    pub ferry_bin: Option<PathBuf>,
    pub scenario_dir: PathBuf,
    pub peers_dir: PathBuf,
}

/// The VLESS flow of a scenario: Vision or none.
pub(super) fn vision(scenario: &str) -> bool {
    scenario.contains("vision")
}
