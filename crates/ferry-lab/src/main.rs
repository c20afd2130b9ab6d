//! The `ferry-lab` command: `run` scenarios side by side, or use `loadgen` / `receiver` alone.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};

use ferry_lab::impair::Impair;
use ferry_lab::inner_tls::{self, InnerTls, TlsVersion};
use ferry_lab::loadgen::{self, BulkOpts, Target};
use ferry_lab::report::Status;
use ferry_lab::runner::{self, RunOpts, Test};
use ferry_lab::{receiver, reports, scenario, testbed, wire};

#[derive(Parser)]
#[command(
    name = "ferry-lab",
    version,
    about = "Measure Ferry and its peers side by side on loopback"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

// Parsed once per process: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Cmd {
    /// Build the reports' testbed (namespaces A -> B -> C -> D) and hold it: each node's address
    /// is printed; run commands in a node with `--run` or `ip netns exec <namespace> ...`.
    /// Ctrl-C (or the end of --hold) removes everything.
    Testbed(TestbedArgs),
    /// Rerun one of the benchmark reports this project started from, in its own shape: 000
    /// ciphers on loopback; 001 the A-B-C-D chains with B capped; 002 Vision vs TLS under CPU
    /// caps and inner record sizes; 003 ciphers on a clean and a 50 ms / 1% loss link; 004
    /// fallbacks and nginx in front. Writes results.json, results.md and charts.
    Report {
        /// 000, 001, 002, 003 or 004.
        report: String,
        /// Implementations, comma-separated (default: every one each scenario has).
        #[arg(long = "impl", value_delimiter = ',')]
        impls: Option<Vec<String>>,
        /// A reduced shape of the same table (fewer caps, sizes and bytes): minutes, not hours.
        #[arg(long)]
        quick: bool,
        /// Repetitions of each measurement (the tables show the median).
        #[arg(long, default_value_t = 1)]
        runs: usize,
        /// Bytes per throughput measurement instead of the report's own (K/M/G suffixes).
        #[arg(long)]
        amount: Option<String>,
        /// Output folder (default results/report-NNN-<timestamp>/).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Use this ferry binary instead of building `cargo build --release -p ferry`.
        #[arg(long)]
        ferry_bin: Option<PathBuf>,
        /// Folder of peer binaries (default: scripts/peers.sh's cache).
        #[arg(long)]
        peers_dir: Option<PathBuf>,
    },
    /// Run scenarios for several implementations and write results/<timestamp>/.
    Run {
        /// Scenario names (files under crates/ferry-lab/scenarios/), or groups: a prefix such as
        /// `ssr-ciphers` runs every `ssr-ciphers-*` scenario.
        #[arg(required = true)]
        scenarios: Vec<String>,
        /// Implementations, comma-separated.
        #[arg(
            long = "impl",
            value_delimiter = ',',
            default_value = "ferry,xray,sing-box,v2ray,ss-rust,ss-libev,trojan,trojan-go,ssr-python,ssr-python-server"
        )]
        impls: Vec<String>,
        /// Connection counts for throughput tests.
        #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
        streams: Vec<usize>,
        /// Bytes per throughput measurement, split over its connections (K/M/G suffixes).
        #[arg(long, default_value = "2G")]
        amount: String,
        /// Repetitions of each measurement (the report shows the median).
        #[arg(long, default_value_t = 1)]
        runs: usize,
        /// Output folder (default results/<timestamp>/).
        #[arg(long)]
        out: Option<PathBuf>,
        /// What to measure, comma-separated.
        #[arg(long, value_enum, value_delimiter = ',', default_value = "throughput")]
        tests: Vec<Test>,
        /// Shortcut for adding the reverse direction to the tests.
        #[arg(long)]
        reverse: bool,
        /// Short connections of the churn test.
        #[arg(long, default_value_t = 200_000)]
        churn: usize,
        #[command(flatten)]
        soak: SoakArgs,
        /// Idle connection counts for the idle (memory) test.
        #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
        idle: Vec<usize>,
        /// Implementation the ratios in the table compare against.
        #[arg(long, default_value = "xray")]
        baseline: String,
        /// Use this ferry binary instead of building `cargo build --release -p ferry`.
        #[arg(long)]
        ferry_bin: Option<PathBuf>,
        /// Folder of scenario files.
        #[arg(long)]
        scenario_dir: Option<PathBuf>,
        /// Folder of peer binaries (default: scripts/peers.sh's cache).
        #[arg(long)]
        peers_dir: Option<PathBuf>,
        #[command(flatten)]
        probe: Probe,
        #[command(flatten)]
        inner: InnerTlsArgs,
        #[command(flatten)]
        bed: BedArgs,
        /// Skip the PNG charts.
        #[arg(long)]
        no_charts: bool,
    },
    /// `run --tests soak`: for `--duration`, idle connections held throughout and cycles of
    /// churn, hostile clients and a bulk transfer; each process's RSS over time as a chart
    /// (chart-SCENARIO-soak.png) and as JSON (results.json). A benchmark, not a test.
    Soak {
        /// Scenario names or groups, as for `run`.
        #[arg(required = true)]
        scenarios: Vec<String>,
        /// Implementations, comma-separated.
        #[arg(
            long = "impl",
            value_delimiter = ',',
            default_value = "ferry,xray,sing-box"
        )]
        impls: Vec<String>,
        /// Bytes of each cycle's bulk transfer (K/M/G suffixes).
        #[arg(long, default_value = "256M")]
        amount: String,
        #[command(flatten)]
        soak: SoakArgs,
        /// Output folder (default results/<timestamp>/).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Use this ferry binary instead of building `cargo build --release -p ferry`.
        #[arg(long)]
        ferry_bin: Option<PathBuf>,
        /// Folder of peer binaries (default: scripts/peers.sh's cache).
        #[arg(long)]
        peers_dir: Option<PathBuf>,
        #[command(flatten)]
        probe: Probe,
        /// Skip the PNG charts.
        #[arg(long)]
        no_charts: bool,
    },
    /// List the scenarios and the implementations each one has.
    List {
        #[arg(long)]
        scenario_dir: Option<PathBuf>,
    },
    /// Listen and serve lab connections (acknowledging running byte totals); connections that
    /// open with a TLS handshake (loadgen --inner-tls) are served inside TLS.
    Receiver {
        #[arg(long, default_value = "127.0.0.1:9000")]
        listen: SocketAddr,
    },
    /// Connect (directly or via SOCKS5) and measure against a receiver.
    Loadgen {
        /// Address to connect to: the receiver or a dokodemo-style proxy entry.
        #[arg(long, default_value = "127.0.0.1:9000")]
        connect: SocketAddr,
        /// Treat --connect as a SOCKS5 proxy and CONNECT to this receiver address.
        #[arg(long)]
        socks_dest: Option<SocketAddr>,
        /// Bytes per connection (K/M/G suffixes).
        #[arg(long, default_value = "1G")]
        amount: String,
        #[arg(long, default_value_t = 1)]
        concurrency: usize,
        /// The receiver sends and loadgen counts.
        #[arg(long)]
        reverse: bool,
        /// Measure time to first byte and round trips instead of throughput.
        #[arg(long)]
        latency: bool,
        /// Measure fresh connections (--handshakes of them, one at a time, then
        /// --handshake-concurrency at a time) instead of throughput.
        #[arg(long, conflicts_with = "latency")]
        handshake: bool,
        #[command(flatten)]
        probe: Probe,
        #[command(flatten)]
        inner: InnerTlsArgs,
    },
}

/// The soak test's settings, shared by `run --tests soak` and `soak`.
#[derive(clap::Args, Clone)]
struct SoakArgs {
    /// How long the soak test runs (s/m/h suffixes).
    #[arg(long, default_value = "5m")]
    duration: String,
    /// Connections held idle throughout the soak.
    #[arg(long, default_value_t = 2000)]
    soak_idle: usize,
    /// Silent (and as many never-reading) clients held during each soak cycle.
    #[arg(long, default_value_t = 50)]
    soak_hostile: usize,
    /// Short connections per soak cycle.
    #[arg(long, default_value_t = 10_000)]
    soak_churn: usize,
    /// End the soak after this many cycles, if `--duration` has not ended it (0: no limit).
    #[arg(long, default_value_t = 0)]
    soak_cycles: usize,
}

impl SoakArgs {
    fn duration(&self) -> Result<Duration> {
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
struct BedArgs {
    /// Run the chains on the testbed instead of loopback (implied by the options below).
    #[arg(long)]
    testbed: bool,
    /// Cap a node's proxy processes: `b=10` (client side) or `c=10` (server side), percent of
    /// one CPU.
    #[arg(long)]
    cpu_cap: Option<String>,
    /// An impairment hop between client and server: `delay=25,loss=1` (ms each way, percent;
    /// also jitter, seed).
    #[arg(long)]
    impair: Option<String>,
    /// TCP congestion control in every node (cubic, bbr, reno).
    #[arg(long)]
    congestion: Option<String>,
    /// A bandwidth limit between client and server, Mbit/s.
    #[arg(long)]
    rate: Option<u32>,
}

impl BedArgs {
    fn plan(&self) -> Result<Option<runner::TestbedPlan>> {
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
struct TestbedArgs {
    /// Seconds to hold the testbed (0: until Ctrl-C).
    #[arg(long, default_value_t = 0.0)]
    hold: f64,
    /// Node names in chain order.
    #[arg(long, value_delimiter = ',', default_value = "a,b,c,d")]
    nodes: Vec<String>,
    /// An impairment hop on a link: `b-c:delay=25,jitter=2,loss=1,seed=7` (milliseconds each
    /// way, percent).
    #[arg(long)]
    impair: Vec<String>,
    /// A bandwidth limit on a link: `b-c:100` (Mbit/s, tbf on both ends).
    #[arg(long)]
    rate: Vec<String>,
    /// TCP congestion control in every node (cubic, bbr, reno; default: what the host gives a
    /// new namespace).
    #[arg(long)]
    congestion: Option<String>,
    /// A command to start in a node: `b=iperf3 -s` (through sh -c; stopped at the end).
    #[arg(long)]
    run: Vec<String>,
    /// A CPU cap for a node's --run commands: `b=10` (percent of one CPU).
    #[arg(long)]
    cap: Vec<String>,
    /// Only remove what killed runs left behind, and exit.
    #[arg(long)]
    sweep: bool,
    /// Fail the set-up after this many steps (tests of the clean-up).
    #[arg(long, hide = true)]
    fail_after: Option<usize>,
}

/// Inner TLS between loadgen and receiver, shared by `run` and `loadgen`.
#[derive(clap::Args, Clone)]
struct InnerTlsArgs {
    /// Speak TLS of this version from loadgen (client) to receiver (server) through the chain;
    /// throughput counts the inner plaintext (the XTLS Vision benchmarks' traffic).
    #[arg(long, value_enum)]
    inner_tls: Option<TlsVersion>,
    /// Inner TLS record plaintext size, both directions (K suffix; default 16K, the maximum).
    #[arg(long)]
    record: Option<String>,
}

impl InnerTlsArgs {
    fn build(&self) -> Result<Option<InnerTls>> {
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
struct Probe {
    /// Seconds without progress after which a transfer counts as lost bytes.
    #[arg(long, default_value_t = 20.0)]
    stall: f64,
    /// Time-to-first-byte samples (latency test).
    #[arg(long, default_value_t = 200)]
    ttfb_count: usize,
    /// Round trips (latency test).
    #[arg(long, default_value_t = 2000)]
    rr_count: usize,
    /// Message size of the round trips.
    #[arg(long, default_value_t = 64)]
    rr_size: usize,
    /// Fresh connections per phase of the handshake test (one at a time, then in parallel).
    #[arg(long, default_value_t = 1000)]
    handshakes: usize,
    /// Fresh connections in flight at once in the handshake test's parallel phase.
    #[arg(long, default_value_t = 8)]
    handshake_concurrency: usize,
}

fn timestamp() -> String {
    let out = std::process::Command::new("date")
        .arg("+%Y%m%d-%H%M%S")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    if out.is_empty() {
        format!(
            "{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0)
        )
    } else {
        out
    }
}

/// Runs the measurements, prints the report and says where it is.
fn report_run(o: &RunOpts) -> Result<ExitCode> {
    let rows = ferry_lab::report::run_and_report(o)?;
    let md = std::fs::read_to_string(o.out.join("results.md")).unwrap_or_default();
    println!("{md}");
    println!("results in {}", o.out.display());
    let errors = rows.iter().filter(|r| r.status == Status::Error).count();
    if errors > 0 {
        eprintln!("{errors} measurement(s) failed; see the report");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// `a-b` or `a-b:rest` -> the link's left node and the rest.
fn link_arg<'a>(spec: &testbed::Spec, arg: &'a str, flag: &str) -> Result<(String, &'a str)> {
    let (link, rest) = arg.split_once(':').unwrap_or((arg, ""));
    let (l, r) = link
        .split_once('-')
        .with_context(|| format!("--{flag} {arg:?}: name the link as left-right, e.g. b-c"))?;
    let li = spec.nodes.iter().position(|n| n == l);
    let ri = spec.nodes.iter().position(|n| n == r);
    match (li, ri) {
        (Some(i), Some(j)) if j == i + 1 => Ok((l.to_string(), rest)),
        _ => bail!(
            "--{flag} {arg:?}: {link} is not a link of the chain {}",
            spec.nodes.join("-")
        ),
    }
}

fn parse_impair(s: &str) -> Result<Impair> {
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

fn testbed_cmd(t: TestbedArgs) -> Result<ExitCode> {
    let TestbedArgs {
        hold,
        nodes,
        impair,
        rate,
        congestion,
        run,
        cap,
        fail_after,
        ..
    } = t;
    let names: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let mut spec = testbed::Spec::chain(&names);
    spec.fail_after = fail_after;
    spec.congestion = congestion;
    for a in &impair {
        let (left, rest) = link_arg(&spec, a, "impair")?;
        spec.link_after(&left).impair = Some(parse_impair(rest)?);
    }
    for a in &rate {
        let (left, rest) = link_arg(&spec, a, "rate")?;
        let mbit: u32 = rest
            .parse()
            .with_context(|| format!("--rate {a:?}: give Mbit/s after the colon, e.g. b-c:100"))?;
        spec.link_after(&left).rate_mbit = Some(mbit);
    }
    let node_arg = |a: &str, flag: &str| -> Result<(String, String)> {
        let (n, v) = a
            .split_once('=')
            .with_context(|| format!("--{flag} {a:?}: give node=value"))?;
        if !spec.nodes.iter().any(|x| x == n) {
            bail!("--{flag} {a:?}: no node {n}");
        }
        Ok((n.to_string(), v.to_string()))
    };
    let runs = run
        .iter()
        .map(|a| node_arg(a, "run"))
        .collect::<Result<Vec<_>>>()?;
    let caps = cap
        .iter()
        .map(|a| {
            let (n, v) = node_arg(a, "cap")?;
            let pct: u32 = v
                .parse()
                .with_context(|| format!("--cap {a:?}: give a percentage"))?;
            Ok((n, pct))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut tb = testbed::Testbed::build(&spec)?;
    let mut procs = ferry_lab::procs::ProcSet::default();
    let dir = std::env::temp_dir().join(format!("ferry-lab-testbed-{}", tb.id));
    std::fs::create_dir_all(&dir)?;
    let mut started = Vec::new();
    for (i, (node, cmd)) in runs.iter().enumerate() {
        let mut c = tb.command(node, "sh");
        c.args(["-c", &format!("exec {cmd}")]);
        let pid = procs.spawn_cmd(&format!("{node}-{i}"), c, &dir)?;
        if let Some((_, pct)) = caps.iter().find(|(n, _)| n == node) {
            tb.cap(node, pid, *pct)?;
        }
        started.push(serde_json::json!({"node": node, "pid": pid, "command": cmd}));
    }
    let info = serde_json::json!({
        "id": tb.id,
        "congestion": tb.congestion(),
        "watchdog": tb.watchdog_pid(),
        "nodes": tb.nodes.iter().map(|n| serde_json::json!({
            "name": n.name, "namespace": n.ns, "addr": n.addr.to_string()
        })).collect::<Vec<_>>(),
        "namespaces": tb.namespaces(),
        "processes": started,
        "logs": dir.display().to_string(),
    });
    println!("{info}");
    eprintln!(
        "testbed {} is up: {}; {}",
        tb.id,
        tb.nodes
            .iter()
            .map(|n| format!("{} {} ({})", n.name, n.addr, n.ns))
            .collect::<Vec<_>>()
            .join(", "),
        if hold > 0.0 {
            format!("removed in {hold} s")
        } else {
            "Ctrl-C removes it".to_string()
        }
    );
    let t0 = std::time::Instant::now();
    while hold <= 0.0 || t0.elapsed().as_secs_f64() < hold {
        std::thread::sleep(Duration::from_millis(100));
        procs.check_alive()?;
    }
    for (link, st) in tb.hop_stats() {
        eprintln!("hop {link}: {}", serde_json::to_string(&st)?);
    }
    drop(procs);
    tb.teardown();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(ExitCode::SUCCESS)
}

fn real_main() -> Result<ExitCode> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Run {
            scenarios,
            impls,
            streams,
            amount,
            runs,
            out,
            mut tests,
            reverse,
            churn,
            soak,
            idle,
            baseline,
            ferry_bin,
            scenario_dir,
            peers_dir,
            probe:
                Probe {
                    stall,
                    ttfb_count,
                    rr_count,
                    rr_size,
                    handshakes,
                    handshake_concurrency,
                },
            inner,
            bed,
            no_charts,
        } => {
            let inner_tls = inner.build()?;
            let testbed = bed.plan()?;
            if reverse && !tests.contains(&Test::Reverse) && tests.contains(&Test::Throughput) {
                tests.push(Test::Reverse);
            }
            if reverse && !tests.contains(&Test::Iperf3Reverse) && tests.contains(&Test::Iperf3) {
                tests.push(Test::Iperf3Reverse);
            }
            if streams.contains(&0) || runs == 0 || handshakes == 0 || handshake_concurrency == 0 {
                bail!("--streams, --runs, --handshakes and --handshake-concurrency must be at least 1");
            }
            for i in &impls {
                if !runner::ALL_IMPLS.contains(&i.as_str()) {
                    bail!(
                        "unknown implementation {i:?}; known: {}",
                        runner::ALL_IMPLS.join(", ")
                    );
                }
            }
            let dir = scenario_dir.unwrap_or_else(scenario::default_dir);
            let o = RunOpts {
                scenarios: scenario::expand(&dir, &scenarios),
                impls,
                streams,
                amount: wire::parse_size(&amount)?,
                runs,
                out: out.unwrap_or_else(|| PathBuf::from("results").join(timestamp())),
                tests,
                idle,
                baseline: Some(baseline),
                ferry_bin,
                scenario_dir: dir,
                peers_dir: peers_dir.unwrap_or_else(runner::peers_dir),
                stall: Duration::from_secs_f64(stall),
                ttfb_count,
                rr_count,
                rr_size,
                handshakes,
                handshake_concurrency,
                churn,
                soak: soak.duration()?,
                soak_idle: soak.soak_idle,
                soak_hostile: soak.soak_hostile,
                soak_churn: soak.soak_churn,
                soak_cycles: soak.soak_cycles,
                inner_tls,
                charts: !no_charts,
                testbed,
            };
            report_run(&o)
        }
        Cmd::Soak {
            scenarios,
            impls,
            amount,
            soak,
            out,
            ferry_bin,
            peers_dir,
            probe,
            no_charts,
        } => {
            for i in &impls {
                if !runner::ALL_IMPLS.contains(&i.as_str()) {
                    bail!(
                        "unknown implementation {i:?}; known: {}",
                        runner::ALL_IMPLS.join(", ")
                    );
                }
            }
            let dir = scenario::default_dir();
            let o = RunOpts {
                scenarios: scenario::expand(&dir, &scenarios),
                impls: impls.clone(),
                streams: vec![1],
                amount: wire::parse_size(&amount)?,
                runs: 1,
                out: out.unwrap_or_else(|| PathBuf::from("results").join(timestamp())),
                tests: vec![Test::Soak],
                idle: vec![soak.soak_idle],
                baseline: impls.iter().find(|i| *i != "ferry").cloned(),
                ferry_bin,
                scenario_dir: dir,
                peers_dir: peers_dir.unwrap_or_else(runner::peers_dir),
                stall: Duration::from_secs_f64(probe.stall),
                ttfb_count: probe.ttfb_count,
                rr_count: probe.rr_count,
                rr_size: probe.rr_size,
                handshakes: probe.handshakes,
                handshake_concurrency: probe.handshake_concurrency,
                churn: 0,
                soak: soak.duration()?,
                soak_idle: soak.soak_idle,
                soak_hostile: soak.soak_hostile,
                soak_churn: soak.soak_churn,
                soak_cycles: soak.soak_cycles,
                inner_tls: None,
                charts: !no_charts,
                testbed: None,
            };
            report_run(&o)
        }
        Cmd::Report {
            report,
            impls,
            quick,
            runs,
            amount,
            out,
            ferry_bin,
            peers_dir,
        } => {
            if runs == 0 {
                bail!("--runs must be at least 1");
            }
            for i in impls.iter().flatten() {
                if !runner::ALL_IMPLS.contains(&i.as_str()) {
                    bail!(
                        "unknown implementation {i:?}; known: {}",
                        runner::ALL_IMPLS.join(", ")
                    );
                }
            }
            let o = reports::ReportOpts {
                out: out.unwrap_or_else(|| {
                    PathBuf::from("results").join(format!("report-{report}-{}", timestamp()))
                }),
                id: report,
                impls,
                quick,
                runs,
                amount: amount.map(|a| wire::parse_size(&a)).transpose()?,
                ferry_bin,
                scenario_dir: scenario::default_dir(),
                peers_dir: peers_dir.unwrap_or_else(runner::peers_dir),
            };
            let rows = reports::run(&o)?;
            println!(
                "{}",
                std::fs::read_to_string(o.out.join("results.md")).unwrap_or_default()
            );
            println!("results in {}", o.out.display());
            let errors = rows
                .iter()
                .filter(|r| r.status.starts_with("error"))
                .count();
            if errors > 0 {
                eprintln!("{errors} measurement(s) failed; see the report");
                return Ok(ExitCode::FAILURE);
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Testbed(t) => {
            if t.sweep {
                for id in testbed::sweep() {
                    println!("removed what run {id} left");
                }
                return Ok(ExitCode::SUCCESS);
            }
            testbed_cmd(t)
        }
        Cmd::List { scenario_dir } => {
            let dir = scenario_dir.unwrap_or_else(scenario::default_dir);
            for name in scenario::list(&dir)? {
                match scenario::load(&dir, &name) {
                    Ok(s) => println!(
                        "{name:<28} {:<9} {:<40} {}",
                        format!("{:?}", s.entry).to_lowercase(),
                        s.impls.keys().cloned().collect::<Vec<_>>().join(","),
                        s.description
                    ),
                    Err(e) => println!("{name:<28} ERROR {e:#}"),
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Receiver { listen } => {
            let rt = tokio::runtime::Runtime::new()?;
            rt.block_on(async {
                let l = tokio::net::TcpListener::bind(listen)
                    .await
                    .with_context(|| format!("binding {listen}"))?;
                println!("receiver listening on {}", l.local_addr()?);
                receiver::serve(l, receiver::Reports::default(), true).await;
                Ok::<_, anyhow::Error>(())
            })?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Loadgen {
            connect,
            socks_dest,
            amount,
            concurrency,
            reverse,
            latency,
            handshake,
            probe:
                Probe {
                    stall,
                    ttfb_count,
                    rr_count,
                    rr_size,
                    handshakes,
                    handshake_concurrency,
                },
            inner,
        } => {
            let target = Target {
                connect,
                socks_dest,
                inner_tls: inner.build()?,
            };
            let stall = Duration::from_secs_f64(stall);
            let rt = tokio::runtime::Runtime::new()?;
            if handshake {
                for conc in [1, handshake_concurrency] {
                    let b = rt.block_on(loadgen::fresh_conns(
                        &target,
                        handshakes,
                        conc,
                        runner::HANDSHAKE_MSG,
                        stall,
                    ))?;
                    println!(
                        "{} fresh connections, {} at a time: {:.1} conn/s, time to the echo p50 {:.3} ms  p90 {:.3} ms  p99 {:.3} ms",
                        b.conns, b.concurrency, b.conns_per_s, b.ttfb.p50_ms, b.ttfb.p90_ms, b.ttfb.p99_ms
                    );
                }
                return Ok(ExitCode::SUCCESS);
            }
            if latency {
                let t = rt.block_on(loadgen::ttfb(&target, ttfb_count, stall))?;
                let r = rt.block_on(loadgen::round_trips(&target, rr_size, rr_count, stall))?;
                println!(
                    "time to first byte ({} samples): p50 {:.3} ms  p90 {:.3} ms  p99 {:.3} ms",
                    t.samples, t.p50_ms, t.p90_ms, t.p99_ms
                );
                println!(
                    "round trip, {rr_size} B ({} samples): p50 {:.3} ms  p90 {:.3} ms  p99 {:.3} ms",
                    r.samples, r.p50_ms, r.p90_ms, r.p99_ms
                );
                return Ok(ExitCode::SUCCESS);
            }
            let t = rt.block_on(loadgen::bulk(
                &target,
                &BulkOpts {
                    amount: wire::parse_size(&amount)?,
                    concurrency,
                    reverse,
                    stall,
                },
            ))?;
            let over = target
                .inner_tls
                .as_ref()
                .map(|t| format!(" ({})", t.describe()))
                .unwrap_or_default();
            println!(
                "{} bytes verified in {:.6} s over {concurrency} connection(s){over}: {:.1} MB/s ({:.2} Gbit/s)",
                t.bytes,
                t.secs,
                t.mb_per_s(),
                t.mb_per_s() * 8.0 / 1000.0
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn main() -> ExitCode {
    match real_main() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
