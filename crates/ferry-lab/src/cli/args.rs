//! The command line: the subcommands and their options, and how options become settings.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};

use ferry_lab::impair::Impair;
use ferry_lab::inner_tls::{self, InnerTls, TlsVersion};
use ferry_lab::runner::{self, Test};
use ferry_lab::wire;

#[derive(Parser)]
#[command(
    name = "ferry-lab",
    version,
    about = "Measure Ferry and its peers side by side on loopback"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) cmd: Cmd,
}

// Parsed once per process: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
pub(crate) enum Cmd {
    /// Build the reports' testbed (namespaces A -> B -> C -> D) and hold it: each node's address
    /// is printed; run commands in a node with `--run` or `ip netns exec <namespace> ...`.
    /// Ctrl-C (or the end of --hold) removes everything.
    Testbed(TestbedArgs),
    /// Rerun one of the benchmark reports this project started from, in its own shape: 000
    /// ciphers on loopback; 001 the A-B-C-D chains with B capped; 002 Vision vs TLS under CPU
    /// caps and inner record sizes; 003 ciphers on a clean and a 50 ms / 1% loss link; 004
    /// fallbacks and nginx in front. Writes results.json, results.md and charts.
    Report(ReportArgs),
    /// Run scenarios for several implementations and write results/<timestamp>/.
    Run(RunArgs),
    /// `run --tests soak`: for `--duration`, idle connections held throughout and cycles of
    /// churn, hostile clients and a bulk transfer; each process's RSS over time as a chart
    /// (chart-SCENARIO-soak.png) and as JSON (results.json). A benchmark, not a test.
    Soak(SoakCmdArgs),
    /// List the scenarios and the implementations each one has.
    List(ListArgs),
    /// Listen and serve lab connections (acknowledging running byte totals); connections that
    /// open with a TLS handshake (loadgen --inner-tls) are served inside TLS.
    Receiver(ReceiverArgs),
    /// Connect (directly or via SOCKS5) and measure against a receiver.
    Loadgen(LoadgenArgs),
}

/// The soak test's settings, shared by `run --tests soak` and `soak`.
#[derive(clap::Args, Clone)]
pub(crate) struct SoakArgs {
    /// How long the soak test runs (s/m/h suffixes).
    #[arg(long, default_value = "5m")]
    pub(crate) duration: String,
    /// Connections held idle throughout the soak.
    #[arg(long, default_value_t = 2000)]
    pub(crate) soak_idle: usize,
    /// Silent (and as many never-reading) clients held during each soak cycle.
    #[arg(long, default_value_t = 50)]
    pub(crate) soak_hostile: usize,
    /// Short connections per soak cycle.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) soak_churn: usize,
    /// End the soak after this many cycles, if `--duration` has not ended it (0: no limit).
    #[arg(long, default_value_t = 0)]
    pub(crate) soak_cycles: usize,
}

impl SoakArgs {
    pub(crate) fn duration(&self) -> Result<Duration> {
        let s = self.duration.trim();
        let (n, unit) = match s
            .char_indices()
            .find(|(_, c)| !c.is_ascii_digit() && *c != '.')
        {
            Some((i, _)) => (&s[..i], &s[i..]),
            None => (s, "s"),
        };
        let n: f64 = n
            .parse()
            .with_context(|| format!("--duration {s:?}: not a number"))?;
        let secs = match unit {
            "s" => n,
            "m" => n * 60.0,
            "h" => n * 3600.0,
            _ => bail!("--duration {s:?}: use s, m or h"),
        };
        Ok(Duration::from_secs_f64(secs))
    }
}

/// `run` on the testbed: loadgen in A, the client side in B, the server side in C, the
/// receiver in D (see `ferry-lab testbed`).
#[derive(clap::Args, Clone)]
pub(crate) struct BedArgs {
    /// Run the chains on the testbed instead of loopback (implied by the options below).
    #[arg(long)]
    pub(crate) testbed: bool,
    /// Cap a node's proxy processes: `b=10` (client side) or `c=10` (server side), percent of
    /// one CPU.
    #[arg(long)]
    pub(crate) cpu_cap: Option<String>,
    /// An impairment hop between client and server: `delay=25,loss=1` (ms each way, percent;
    /// also jitter, seed).
    #[arg(long)]
    pub(crate) impair: Option<String>,
    /// TCP congestion control in every node (cubic, bbr, reno).
    #[arg(long)]
    pub(crate) congestion: Option<String>,
    /// A bandwidth limit between client and server, Mbit/s.
    #[arg(long)]
    pub(crate) rate: Option<u32>,
}

impl BedArgs {
    pub(crate) fn plan(&self) -> Result<Option<runner::TestbedPlan>> {
        let any = self.testbed
            || self.cpu_cap.is_some()
            || self.impair.is_some()
            || self.congestion.is_some()
            || self.rate.is_some();
        if !any {
            return Ok(None);
        }
        let cap = match &self.cpu_cap {
            None => None,
            Some(a) => {
                let (n, v) = a
                    .split_once('=')
                    .with_context(|| format!("--cpu-cap {a:?}: give node=percent, e.g. b=10"))?;
                if n != "b" && n != "c" {
                    bail!("--cpu-cap {a:?}: the node is b (client side) or c (server side)");
                }
                let pct: u32 =
                    v.parse().ok().filter(|p| *p >= 1).with_context(|| {
                        format!("--cpu-cap {a:?}: give a percentage of 1 or more")
                    })?;
                Some((n.to_string(), pct))
            }
        };
        Ok(Some(runner::TestbedPlan {
            cap,
            impair: self.impair.as_deref().map(parse_impair).transpose()?,
            congestion: self.congestion.clone(),
            rate_mbit: self.rate,
        }))
    }
}

/// `ferry-lab testbed`'s options.
#[derive(clap::Args)]
pub(crate) struct TestbedArgs {
    /// Seconds to hold the testbed (0: until Ctrl-C).
    #[arg(long, default_value_t = 0.0)]
    pub(crate) hold: f64,
    /// Node names in chain order.
    #[arg(long, value_delimiter = ',', default_value = "a,b,c,d")]
    pub(crate) nodes: Vec<String>,
    /// An impairment hop on a link: `b-c:delay=25,jitter=2,loss=1,seed=7` (milliseconds each
    /// way, percent).
    #[arg(long)]
    pub(crate) impair: Vec<String>,
    /// A bandwidth limit on a link: `b-c:100` (Mbit/s, tbf on both ends).
    #[arg(long)]
    pub(crate) rate: Vec<String>,
    /// TCP congestion control in every node (cubic, bbr, reno; default: what the host gives a
    /// new namespace).
    #[arg(long)]
    pub(crate) congestion: Option<String>,
    /// A command to start in a node: `b=iperf3 -s` (through sh -c; stopped at the end).
    #[arg(long)]
    pub(crate) run: Vec<String>,
    /// A CPU cap for a node's --run commands: `b=10` (percent of one CPU).
    #[arg(long)]
    pub(crate) cap: Vec<String>,
    /// Only remove what killed runs left behind, and exit.
    #[arg(long)]
    pub(crate) sweep: bool,
    /// Fail the set-up after this many steps (tests of the clean-up).
    #[arg(long, hide = true)]
    pub(crate) fail_after: Option<usize>,
}

/// Inner TLS between loadgen and receiver, shared by `run` and `loadgen`.
#[derive(clap::Args, Clone)]
pub(crate) struct InnerTlsArgs {
    /// Speak TLS of this version from loadgen (client) to receiver (server) through the chain;
    /// throughput counts the inner plaintext (the XTLS Vision benchmarks' traffic).
    #[arg(long, value_enum)]
    pub(crate) inner_tls: Option<TlsVersion>,
    /// Inner TLS record plaintext size, both directions (K suffix; default 16K, the maximum).
    #[arg(long)]
    pub(crate) record: Option<String>,
}

impl InnerTlsArgs {
    pub(crate) fn build(&self) -> Result<Option<InnerTls>> {
        match (&self.inner_tls, &self.record) {
            (None, None) => Ok(None),
            (None, Some(_)) => bail!("--record needs --inner-tls"),
            (Some(v), r) => {
                let record = match r {
                    Some(r) => inner_tls::check_record(wire::parse_size(r)?)?,
                    None => inner_tls::MAX_RECORD,
                };
                Ok(Some(InnerTls::new(*v, record)?))
            }
        }
    }
}

/// Loss detection and latency-test sizes, shared by `run` and `loadgen`.
#[derive(clap::Args, Clone, Copy)]
pub(crate) struct Probe {
    /// Seconds without progress after which a transfer counts as lost bytes.
    #[arg(long, default_value_t = 20.0)]
    pub(crate) stall: f64,
    /// Time-to-first-byte samples (latency test).
    #[arg(long, default_value_t = 200)]
    pub(crate) ttfb_count: usize,
    /// Round trips (latency test).
    #[arg(long, default_value_t = 2000)]
    pub(crate) rr_count: usize,
    /// Message size of the round trips.
    #[arg(long, default_value_t = 64)]
    pub(crate) rr_size: usize,
    /// Fresh connections per phase of the handshake test (one at a time, then in parallel).
    #[arg(long, default_value_t = 1000)]
    pub(crate) handshakes: usize,
    /// Fresh connections in flight at once in the handshake test's parallel phase.
    #[arg(long, default_value_t = 8)]
    pub(crate) handshake_concurrency: usize,
}

/// `ferry-lab report`'s options.
#[derive(clap::Args)]
pub(crate) struct ReportArgs {
    /// 000, 001, 002, 003 or 004.
    pub(crate) report: String,
    /// Implementations, comma-separated (default: every one each scenario has).
    #[arg(long = "impl", value_delimiter = ',')]
    pub(crate) impls: Option<Vec<String>>,
    /// A reduced shape of the same table (fewer caps, sizes and bytes): minutes, not hours.
    #[arg(long)]
    pub(crate) quick: bool,
    /// Repetitions of each measurement (the tables show the median).
    #[arg(long, default_value_t = 1)]
    pub(crate) runs: usize,
    /// Bytes per throughput measurement instead of the report's own (K/M/G suffixes).
    #[arg(long)]
    pub(crate) amount: Option<String>,
    /// Output folder (default results/report-NNN-<timestamp>/).
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
    /// Use this ferry binary instead of building `cargo build --release -p ferry`.
    #[arg(long)]
    pub(crate) ferry_bin: Option<PathBuf>,
    /// Folder of peer binaries (default: scripts/peers.sh's cache).
    #[arg(long)]
    pub(crate) peers_dir: Option<PathBuf>,
}

/// `ferry-lab run`'s options.
#[derive(clap::Args)]
pub(crate) struct RunArgs {
    /// Scenario names (files under crates/ferry-lab/scenarios/), or groups: a prefix such as
    /// `ssr-ciphers` runs every `ssr-ciphers-*` scenario.
    #[arg(required = true)]
    pub(crate) scenarios: Vec<String>,
    /// Implementations, comma-separated.
    #[arg(
        long = "impl",
        value_delimiter = ',',
        default_value = "ferry,xray,sing-box,sing-box-gvisor,sing-box-mixed,v2ray,ss-rust,ss-libev,trojan,trojan-go,ssr-python,ssr-python-server"
    )]
    pub(crate) impls: Vec<String>,
    /// Connection counts for throughput tests.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    pub(crate) streams: Vec<usize>,
    /// Bytes per throughput measurement, split over its connections (K/M/G suffixes).
    #[arg(long, default_value = "2G")]
    pub(crate) amount: String,
    /// Repetitions of each measurement (the report shows the median).
    #[arg(long, default_value_t = 1)]
    pub(crate) runs: usize,
    /// Output folder (default results/<timestamp>/).
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
    /// What to measure, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "throughput")]
    pub(crate) tests: Vec<Test>,
    /// Shortcut for adding the reverse direction to the tests.
    #[arg(long)]
    pub(crate) reverse: bool,
    /// Short connections of the churn test.
    #[arg(long, default_value_t = 200_000)]
    pub(crate) churn: usize,
    #[command(flatten)]
    pub(crate) soak: SoakArgs,
    /// Idle connection counts for the idle (memory) test.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
    pub(crate) idle: Vec<usize>,
    /// Implementation the ratios in the table compare against.
    #[arg(long, default_value = "xray")]
    pub(crate) baseline: String,
    /// Use this ferry binary instead of building `cargo build --release -p ferry`.
    #[arg(long)]
    pub(crate) ferry_bin: Option<PathBuf>,
    /// Folder of scenario files.
    #[arg(long)]
    pub(crate) scenario_dir: Option<PathBuf>,
    /// Folder of peer binaries (default: scripts/peers.sh's cache).
    #[arg(long)]
    pub(crate) peers_dir: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) probe: Probe,
    #[command(flatten)]
    pub(crate) inner: InnerTlsArgs,
    #[command(flatten)]
    pub(crate) bed: BedArgs,
    /// Skip the PNG charts.
    #[arg(long)]
    pub(crate) no_charts: bool,
}

/// `ferry-lab soak`'s options.
#[derive(clap::Args)]
pub(crate) struct SoakCmdArgs {
    /// Scenario names or groups, as for `run`.
    #[arg(required = true)]
    pub(crate) scenarios: Vec<String>,
    /// Implementations, comma-separated.
    #[arg(
        long = "impl",
        value_delimiter = ',',
        default_value = "ferry,xray,sing-box"
    )]
    pub(crate) impls: Vec<String>,
    /// Bytes of each cycle's bulk transfer (K/M/G suffixes).
    #[arg(long, default_value = "256M")]
    pub(crate) amount: String,
    #[command(flatten)]
    pub(crate) soak: SoakArgs,
    /// Output folder (default results/<timestamp>/).
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
    /// Use this ferry binary instead of building `cargo build --release -p ferry`.
    #[arg(long)]
    pub(crate) ferry_bin: Option<PathBuf>,
    /// Folder of peer binaries (default: scripts/peers.sh's cache).
    #[arg(long)]
    pub(crate) peers_dir: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) probe: Probe,
    /// Skip the PNG charts.
    #[arg(long)]
    pub(crate) no_charts: bool,
}

/// `ferry-lab list`'s options.
#[derive(clap::Args)]
pub(crate) struct ListArgs {
    #[arg(long)]
    pub(crate) scenario_dir: Option<PathBuf>,
}

/// `ferry-lab receiver`'s options.
#[derive(clap::Args)]
pub(crate) struct ReceiverArgs {
    #[arg(long, default_value = "127.0.0.1:9000")]
    pub(crate) listen: SocketAddr,
}

/// `ferry-lab loadgen`'s options.
#[derive(clap::Args)]
pub(crate) struct LoadgenArgs {
    /// Address to connect to: the receiver or a dokodemo-style proxy entry.
    #[arg(long, default_value = "127.0.0.1:9000")]
    pub(crate) connect: SocketAddr,
    /// Treat --connect as a SOCKS5 proxy and CONNECT to this receiver address.
    #[arg(long)]
    pub(crate) socks_dest: Option<SocketAddr>,
    /// Bytes per connection (K/M/G suffixes).
    #[arg(long, default_value = "1G")]
    pub(crate) amount: String,
    #[arg(long, default_value_t = 1)]
    pub(crate) concurrency: usize,
    /// The receiver sends and loadgen counts.
    #[arg(long)]
    pub(crate) reverse: bool,
    /// Measure time to first byte and round trips instead of throughput.
    #[arg(long)]
    pub(crate) latency: bool,
    /// Measure fresh connections (--handshakes of them, one at a time, then
    /// --handshake-concurrency at a time) instead of throughput.
    #[arg(long, conflicts_with = "latency")]
    pub(crate) handshake: bool,
    #[command(flatten)]
    pub(crate) probe: Probe,
    #[command(flatten)]
    pub(crate) inner: InnerTlsArgs,
}

/// `delay=25,jitter=2,loss=1,seed=7` -> the impairment.
pub(crate) fn parse_impair(s: &str) -> Result<Impair> {
    let mut i = Impair::default();
    for kv in s.split(',').filter(|x| !x.is_empty()) {
        let (k, v) = kv
            .split_once('=')
            .with_context(|| format!("--impair: {kv:?} is not key=value"))?;
        let num: f64 = v
            .parse()
            .with_context(|| format!("--impair: {k}={v:?} is not a number"))?;
        if !(num.is_finite() && num >= 0.0) {
            bail!("--impair: {k}={v}: give zero or more");
        }
        match k {
            "delay" => i.delay = Duration::from_secs_f64(num / 1000.0),
            "jitter" => i.jitter = Duration::from_secs_f64(num / 1000.0),
            "loss" if num <= 100.0 => i.loss_pct = num,
            "seed" => i.seed = num as u64,
            _ => bail!("--impair: {k}={v}: keys are delay, jitter (ms), loss (percent), seed"),
        }
    }
    Ok(i)
}
