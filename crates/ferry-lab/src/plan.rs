//! What a run measures: the implementations the lab knows, the tests, and a run's options.
//! The runner executes a plan; the report and charts read it back beside the results.

use std::path::PathBuf;
use std::time::Duration;

use crate::impair::Impair;
use crate::inner_tls::InnerTls;

/// Every implementation the lab knows, in report order.
pub const ALL_IMPLS: &[&str] = &[
    "ferry",
    "xray",
    "sing-box",
    // sing-box's TUN with its other two stacks (`sing-box` is its `system` stack there).
    "sing-box-gvisor",
    "sing-box-mixed",
    "v2ray",
    "ss-rust",
    "ss-libev",
    "ssr-python",
    "ssr-python-server",
    "trojan",
    "trojan-go",
];

/// What to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Test {
    /// loadgen sends, receiver acknowledges (client -> server direction).
    Throughput,
    /// receiver sends, loadgen counts (server -> client direction).
    Reverse,
    /// Time to first byte through the chain and small-message round trips.
    Latency,
    /// Fresh connections through the chain, one after another and `--handshake-concurrency`
    /// at a time: connections per second, time to the first byte back, and each process's CPU
    /// per 1000 handshakes (alias `handshakes`).
    #[value(alias = "handshakes")]
    Handshake,
    /// RSS per held idle connection (the memory scenario; alias `memory`).
    #[value(alias = "memory")]
    Idle,
    /// One bulk transfer (`--amount`, one connection) alone, then again while `--idle`
    /// connections are held open through the same chain: does a busy connection slow down
    /// when thousands idle beside it? (name `bulk-idle`)
    #[value(name = "bulk-idle")]
    BulkIdle,
    /// `--churn` short connections (`--handshake-concurrency` at a time, each echoing a few
    /// bytes): each process's RSS after the first 10,000 and as the rest go through, sampled
    /// ten times (does memory come back?).
    Churn,
    /// For `--duration`: `--soak-idle` connections held idle throughout, and cycles of
    /// `--soak-churn` short connections, `--soak-hostile` silent and as many never-reading clients, and one
    /// `--amount` bulk transfer; each process's RSS sampled after every step (a chart and the
    /// JSON series in the results). A benchmark, not a CI test.
    Soak,
    /// iperf3 client -> chain -> iperf3 server (the community reports' load; it loads the
    /// proxy differently from loadgen: one control connection, then the data streams).
    Iperf3,
    /// iperf3 with `-R`: the server sends.
    #[value(name = "iperf3-reverse")]
    Iperf3Reverse,
}

impl Test {
    /// The tests that move bulk data over `--streams` connections, in report order.
    pub const BULK: [Test; 4] = [
        Test::Throughput,
        Test::Reverse,
        Test::Iperf3,
        Test::Iperf3Reverse,
    ];

    /// Sends server -> client.
    pub fn is_reverse(self) -> bool {
        matches!(self, Test::Reverse | Test::Iperf3Reverse)
    }

    /// Title and data path of its table.
    pub fn heading(self) -> (&'static str, &'static str) {
        match self {
            Test::Throughput => ("Throughput", "loadgen → chain → receiver"),
            Test::Reverse => (
                "Reverse throughput",
                "receiver → chain → loadgen (--reverse)",
            ),
            Test::Iperf3 => ("iperf3", "iperf3 -c → chain → iperf3 -s"),
            Test::Iperf3Reverse => ("iperf3 reverse", "iperf3 -s → chain → iperf3 -c -R"),
            Test::Latency => ("Latency", ""),
            Test::Handshake => ("Handshakes", ""),
            Test::Idle => ("Idle", ""),
            Test::Churn => ("Churn", ""),
            Test::BulkIdle => ("Bulk beside idle", ""),
            Test::Soak => ("Soak", ""),
        }
    }
}

impl Test {
    pub fn name(self) -> &'static str {
        match self {
            Test::Throughput => "throughput",
            Test::Reverse => "reverse",
            Test::Latency => "latency",
            Test::Handshake => "handshake",
            Test::Idle => "idle",
            Test::Churn => "churn",
            Test::BulkIdle => "bulk-idle",
            Test::Soak => "soak",
            Test::Iperf3 => "iperf3",
            Test::Iperf3Reverse => "iperf3-reverse",
        }
    }
}

/// Options of a run.
#[derive(Clone, Debug)]
pub struct RunOpts {
    pub scenarios: Vec<String>,
    pub impls: Vec<String>,
    pub streams: Vec<usize>,
    /// Bytes per throughput measurement, split evenly over its connections.
    pub amount: u64,
    pub runs: usize,
    pub out: PathBuf,
    pub tests: Vec<Test>,
    pub idle: Vec<usize>,
    pub baseline: Option<String>,
    /// The ferry binary; None builds `cargo build --release -p ferry`.
    pub ferry_bin: Option<PathBuf>,
    pub scenario_dir: PathBuf,
    pub peers_dir: PathBuf,
    /// A transfer with no progress for this long fails (lost bytes show up as a stall).
    pub stall: Duration,
    pub ttfb_count: usize,
    pub rr_count: usize,
    pub rr_size: usize,
    /// Fresh connections per phase of the handshake test (sequential, then parallel).
    pub handshakes: usize,
    /// Connections in flight at once in the handshake test's parallel phase (and the churn's).
    pub handshake_concurrency: usize,
    /// Short connections of the churn test.
    pub churn: usize,
    /// How long the soak test runs.
    pub soak: Duration,
    /// Connections the soak test holds idle throughout.
    pub soak_idle: usize,
    /// Silent (and as many never-reading) connections per soak cycle.
    pub soak_hostile: usize,
    /// Short connections per soak cycle.
    pub soak_churn: usize,
    /// The soak ends after this many cycles (0: only `soak` ends it).
    pub soak_cycles: usize,
    /// loadgen speaks TLS to the receiver through the chain (not iperf3, which has no TLS).
    pub inner_tls: Option<InnerTls>,
    /// Write charts (PNG).
    pub charts: bool,
    /// Run each chain on the testbed (namespaces A -> B -> C -> D) instead of loopback.
    pub testbed: Option<TestbedPlan>,
}

/// How a run uses the testbed: loadgen in A, the client side in B, the server side in C, the
/// receiver in D.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct TestbedPlan {
    /// A CPU cap on one node's processes: ("b" or "c", percent of one CPU).
    pub cap: Option<(String, u32)>,
    /// An impairment hop between B and C.
    pub impair: Option<Impair>,
    /// TCP congestion control in every node.
    pub congestion: Option<String>,
    /// A bandwidth limit between B and C, Mbit/s.
    pub rate_mbit: Option<u32>,
}

/// Bytes each fresh connection of the handshake test sends and gets back.
pub const HANDSHAKE_MSG: usize = 32;
