//! The results of a run: one row per measurement, written to results.json as they come, and
//! folded over the runs for the report and the charts.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;

use crate::loadgen::{ConnBurst, Percentiles};
use crate::plan::{RunOpts, ALL_IMPLS};

/// How a measurement ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Ok,
    /// Ferry lacks a protocol of this scenario yet (`ferry test -c` says "not supported yet").
    NotYet,
    /// The implementation has no template for the scenario.
    Skipped,
    Error,
}

/// One measurement.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub scenario: String,
    pub implementation: String,
    pub test: String,
    /// Connections (throughput/reverse), idle connections (idle), 1 (latency).
    pub streams: usize,
    pub run: usize,
    pub status: Status,
    pub message: Option<String>,
    pub bytes: u64,
    pub secs: f64,
    pub mb_per_s: f64,
    pub gbit_per_s: f64,
    /// CPU seconds (user+system) of every proxy process during the measurement.
    pub cpu_secs: f64,
    pub cpu_secs_per_gb: f64,
    /// Summed VmHWM of the proxy processes, KiB.
    pub peak_rss_kb: u64,
    pub ttfb: Option<Percentiles>,
    pub rtt: Option<Percentiles>,
    pub idle_rss_kb_before: Option<u64>,
    pub idle_rss_kb_after: Option<u64>,
    pub rss_bytes_per_conn: Option<f64>,
    /// The idle test's RSS growth per connection of each process of the chain, by name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_bytes_per_conn_by_process: Option<Vec<(String, f64)>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handshake: Option<Handshakes>,
    /// The bulk-idle test: the same transfer with no idle connections beside it, MB/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alone_mb_per_s: Option<f64>,
    /// The churn test's samples: after the first 10,000 connections, then ten more.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub churn: Option<Vec<ChurnSample>>,
    /// The soak test: what went through and RSS over time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub soak: Option<Soak>,
    /// Where the chain ran when it ran on the testbed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub testbed: Option<TestbedRow>,
}

/// A testbed measurement's conditions, as asked and as measured.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TestbedRow {
    pub plan: crate::plan::TestbedPlan,
    /// The congestion control the nodes used.
    pub congestion: String,
    /// What the impairment hop measured during the timed part.
    pub hop: Option<crate::impair::HopStats>,
    /// cgroup periods in which the capped node was throttled.
    pub throttled_periods: Option<u64>,
}

/// A soak run: idle connections held throughout, cycles of churn, hostile clients and one bulk
/// transfer, each process's RSS sampled as it goes.
#[derive(Clone, Debug, Serialize)]
pub struct Soak {
    /// Connections held idle the whole time.
    pub idle: usize,
    /// Short connections made (each echoed).
    pub churned: usize,
    /// Hostile connections per cycle: this many silent and this many never-reading.
    pub hostile: usize,
    pub cycles: usize,
    /// The bulk transfer before the idle connections were opened, MB/s.
    pub bulk_alone_mb_per_s: f64,
    /// The bulk transfer of each cycle (beside the idle connections), MB/s.
    pub bulk_mb_per_s: Vec<f64>,
    pub samples: Vec<SoakSample>,
}

/// Each process's RSS (KiB) `secs` into the soak, after `phase`.
#[derive(Clone, Debug, Serialize)]
pub struct SoakSample {
    pub secs: f64,
    pub phase: &'static str,
    pub rss_kb: Vec<(String, u64)>,
}

impl SoakSample {
    /// RSS of every process together, MiB.
    pub fn total_mib(&self) -> f64 {
        self.rss_kb.iter().map(|(_, v)| *v).sum::<u64>() as f64 / 1024.0
    }
}

impl Soak {
    /// The last sample of `phase` in cycle order: (first one, last one).
    fn phase_ends(&self, phase: &str) -> Option<(&SoakSample, &SoakSample)> {
        let mut it = self.samples.iter().filter(|s| s.phase == phase);
        let first = it.next()?;
        Some((first, it.next_back().unwrap_or(first)))
    }

    /// RSS after the first cycle and after the last (each taken after its bulk transfer, with
    /// the idle connections held), MiB.
    pub fn cycle_rss(&self) -> Option<(f64, f64)> {
        self.phase_ends("cycle end")
            .map(|(a, b)| (a.total_mib(), b.total_mib()))
    }

    /// The median bulk transfer, MB/s.
    pub fn median_bulk(&self) -> f64 {
        let mut v = self.bulk_mb_per_s.clone();
        v.sort_by(|a, b| a.total_cmp(b));
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    }

    /// RSS growth per idle connection (from after the lone bulk transfer to the idle
    /// connections held, before any cycle), KiB.
    pub fn idle_kib_per_conn(&self) -> Option<f64> {
        let (a, b) = (self.at("bulk alone")?, self.at("idle held")?);
        Some((b - a) * 1024.0 / self.idle.max(1) as f64)
    }

    /// The largest sampled RSS, MiB.
    pub fn peak_mib(&self) -> f64 {
        self.samples
            .iter()
            .map(SoakSample::total_mib)
            .fold(0.0, f64::max)
    }

    /// RSS of the named phase's first sample, MiB.
    pub fn at(&self, phase: &str) -> Option<f64> {
        self.samples
            .iter()
            .find(|s| s.phase == phase)
            .map(SoakSample::total_mib)
    }
}

/// Each process's RSS (KiB) after `conns` short connections went through the chain.
#[derive(Clone, Debug, Serialize)]
pub struct ChurnSample {
    pub conns: usize,
    pub rss_kb: Vec<(String, u64)>,
}

impl ChurnSample {
    /// RSS of every process together, MiB.
    pub fn total_mib(&self) -> f64 {
        self.rss_kb.iter().map(|(_, v)| *v).sum::<u64>() as f64 / 1024.0
    }
}

/// One phase of the handshake test: the burst and the CPU each role spent on it.
#[derive(Clone, Debug, Serialize)]
pub struct HandshakePhase {
    pub burst: ConnBurst,
    /// CPU seconds of the process named "server" (the side that accepts the handshakes).
    pub server_cpu_secs: f64,
    /// CPU seconds of the process named "client" (the side that starts them).
    pub client_cpu_secs: f64,
    /// CPU seconds of every other process of the chain (e.g. a REALITY target, nginx).
    pub other_cpu_secs: f64,
}

impl HandshakePhase {
    /// CPU seconds per 1000 handshakes.
    pub fn per_1000(&self, cpu: f64) -> f64 {
        if self.burst.conns == 0 {
            return 0.0;
        }
        cpu * 1000.0 / self.burst.conns as f64
    }
}

/// The handshake test: fresh connections one at a time, then many at a time.
#[derive(Clone, Debug, Serialize)]
pub struct Handshakes {
    /// Bytes each connection sent and got echoed.
    pub message_bytes: usize,
    pub sequential: HandshakePhase,
    pub parallel: HandshakePhase,
}

impl Handshakes {
    /// Connections of both phases.
    pub fn conns(&self) -> usize {
        self.sequential.burst.conns + self.parallel.burst.conns
    }

    /// CPU seconds per 1000 handshakes over both phases, for the server, client and others.
    pub fn cpu_per_1000(&self) -> (f64, f64, f64) {
        let n = self.conns().max(1) as f64 / 1000.0;
        let (a, b) = (&self.sequential, &self.parallel);
        (
            (a.server_cpu_secs + b.server_cpu_secs) / n,
            (a.client_cpu_secs + b.client_cpu_secs) / n,
            (a.other_cpu_secs + b.other_cpu_secs) / n,
        )
    }
}

impl Row {
    pub fn new(scenario: &str, imp: &str, test: &str, streams: usize, run: usize) -> Row {
        Row {
            scenario: scenario.into(),
            implementation: imp.into(),
            test: test.into(),
            streams,
            run,
            status: Status::Error,
            message: None,
            bytes: 0,
            secs: 0.0,
            mb_per_s: 0.0,
            gbit_per_s: 0.0,
            cpu_secs: 0.0,
            cpu_secs_per_gb: 0.0,
            peak_rss_kb: 0,
            ttfb: None,
            rtt: None,
            idle_rss_kb_before: None,
            idle_rss_kb_after: None,
            rss_bytes_per_conn: None,
            idle_bytes_per_conn_by_process: None,
            handshake: None,
            churn: None,
            soak: None,
            alone_mb_per_s: None,
            testbed: None,
        }
    }

    pub fn failed(
        scenario: &str,
        imp: &str,
        test: &str,
        streams: usize,
        run: usize,
        status: Status,
        msg: String,
    ) -> Row {
        let mut r = Row::new(scenario, imp, test, streams, run);
        r.status = status;
        r.message = Some(msg);
        r
    }

    /// One line for the progress output.
    pub fn summary(&self) -> String {
        match self.status {
            Status::Ok if self.handshake.is_some() => {
                let Some(h) = self.handshake.as_ref() else {
                    return String::new();
                };
                let (srv, cli, oth) = h.cpu_per_1000();
                format!(
                    "{:.0} conn/s (ttfb p50 {:.2} ms p99 {:.2} ms) one at a time, {:.0} conn/s (p50 {:.2} ms p99 {:.2} ms) {} at a time; CPU-s per 1000: server {srv:.3}, client {cli:.3}, other {oth:.3}",
                    h.sequential.burst.conns_per_s,
                    h.sequential.burst.ttfb.p50_ms,
                    h.sequential.burst.ttfb.p99_ms,
                    h.parallel.burst.conns_per_s,
                    h.parallel.burst.ttfb.p50_ms,
                    h.parallel.burst.ttfb.p99_ms,
                    h.parallel.burst.concurrency,
                )
            }
            Status::Ok if self.alone_mb_per_s.is_some() => {
                let alone = self.alone_mb_per_s.unwrap_or(0.0);
                format!(
                    "{:.1} MB/s beside {} idle connections, {alone:.1} MB/s alone ({:.2}x)",
                    self.mb_per_s,
                    self.streams,
                    self.mb_per_s / alone.max(1e-9)
                )
            }
            Status::Ok if self.soak.is_some() => {
                let Some(s) = self.soak.as_ref() else {
                    return String::new();
                };
                let (a, b) = s.cycle_rss().unwrap_or_default();
                format!(
                    "soak: {} cycles, {} churned, {} idle; RSS {a:.1} MiB after the first cycle, {b:.1} MiB after the last ({:.3}x), peak {:.1} MiB",
                    s.cycles,
                    s.churned,
                    s.idle,
                    b / a.max(1e-9),
                    s.peak_mib()
                )
            }
            Status::Ok if self.churn.as_ref().is_some_and(|c| !c.is_empty()) => {
                let Some(c) = self.churn.as_ref() else {
                    return String::new();
                };
                let (a, b) = (&c[0], &c[c.len() - 1]);
                format!(
                    "{} connections at {:.0} conn/s; RSS {:.1} MiB after {}, {:.1} MiB at the end ({:.3}x)",
                    b.conns,
                    b.conns as f64 / self.secs.max(1e-9),
                    a.total_mib(),
                    a.conns,
                    b.total_mib(),
                    b.total_mib() / a.total_mib().max(1e-9)
                )
            }
            Status::Ok => match (&self.ttfb, &self.rtt, self.rss_bytes_per_conn) {
                (Some(t), Some(r), _) => format!(
                    "ttfb p50 {:.3} ms, rtt p50 {:.3} ms p99 {:.3} ms",
                    t.p50_ms, r.p50_ms, r.p99_ms
                ),
                (_, _, Some(b)) => format!(
                    "{:.1} KiB RSS per idle connection{}",
                    b / 1024.0,
                    by_process(self)
                        .map(|s| format!(" ({s})"))
                        .unwrap_or_default()
                ),
                _ => format!(
                    "{:.1} MB/s ({:.2} Gbit/s), {:.2} CPU-s/GB, peak RSS {:.1} MiB",
                    self.mb_per_s,
                    self.gbit_per_s,
                    self.cpu_secs_per_gb,
                    self.peak_rss_kb as f64 / 1024.0
                ),
            },
            Status::NotYet => "not yet".into(),
            Status::Skipped => format!("skipped: {}", self.message.as_deref().unwrap_or("")),
            Status::Error => format!("ERROR: {}", self.message.as_deref().unwrap_or("")),
        }
    }
}

/// One row of a report's results.json (`ferry-lab report`): the schema, one
/// measurement of a case flattened.
#[derive(Clone, Debug, Serialize)]
pub struct FlatRow {
    pub report: String,
    pub case: String,
    pub scenario: String,
    #[serde(rename = "impl")]
    pub implementation: String,
    pub test: String,
    /// The VLESS flow the row ran ("xtls-rprx-vision"), or "-".
    pub flow: String,
    pub run: usize,
    pub cpu_cap_pct: Option<u32>,
    /// The capped node: "b" (client side) or "c" (server side).
    pub cpu_cap_node: Option<String>,
    pub record_size: Option<usize>,
    pub conns: usize,
    /// Added by the hop in each direction (the round trip grows by twice this).
    pub delay_ms: Option<f64>,
    pub loss_pct: Option<f64>,
    pub congestion: Option<String>,
    pub gbps: f64,
    pub mb_per_s: f64,
    pub cpu_s_per_gb: f64,
    pub peak_rss_mib: f64,
    pub ttfb_ms: Option<f64>,
    pub latency_p50_ms: Option<f64>,
    pub latency_p99_ms: Option<f64>,
    /// What the hop measured: loss and delay each way.
    pub hop_loss_pct: Option<f64>,
    pub hop_delay_p50_ms: Option<f64>,
    /// "ok", "not yet: <missing feature>", "skipped: <why>" or "error: <what>".
    pub status: String,
}

#[derive(Serialize)]
struct JsonDoc<'a> {
    command: String,
    amount_bytes: u64,
    runs: usize,
    baseline: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    inner_tls: Option<&'a crate::inner_tls::InnerTls>,
    rows: &'a [Row],
}

/// Writes `results.json` (called after every measurement, so a crash keeps what was measured).
pub fn write_json(out: &Path, o: &RunOpts, rows: &[Row]) -> Result<()> {
    let doc = JsonDoc {
        command: command_line(),
        amount_bytes: o.amount,
        runs: o.runs,
        baseline: o.baseline.as_deref(),
        inner_tls: o.inner_tls.as_ref(),
        rows,
    };
    let p = out.join("results.json");
    std::fs::write(&p, serde_json::to_string_pretty(&doc)?)
        .with_context(|| format!("writing {}", p.display()))
}

/// The command that produced the results, as typed.
pub fn command_line() -> String {
    let args: Vec<String> = std::env::args().collect();
    let mut v = vec!["ferry-lab".to_string()];
    v.extend(args.into_iter().skip(1));
    v.join(" ")
}

/// Implementations in report order.
pub fn impl_order(rows: &[Row]) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    let mut known: Vec<&str> = vec!["loopback"];
    known.extend(ALL_IMPLS);
    for k in known {
        if rows.iter().any(|r| r.implementation == k) {
            v.push(k.to_string());
        }
    }
    for r in rows {
        if !v.contains(&r.implementation) && r.implementation != "-" {
            v.push(r.implementation.clone());
        }
    }
    v
}

pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Rows of one (scenario, implementation, test, streams) folded over the runs.
#[derive(Clone, Debug)]
pub struct Agg {
    pub status: Status,
    pub message: Option<String>,
    pub mb_per_s: f64,
    pub cpu_per_gb: f64,
    pub peak_rss_kb: u64,
    pub runs: usize,
    pub rows: Vec<Row>,
}

/// (scenario, implementation, test, streams): what [`aggregate`] groups rows by.
pub type AggKey = (String, String, String, usize);

/// Groups rows by (scenario, impl, test, streams) in first-seen order.
pub fn aggregate(rows: &[Row]) -> Vec<(AggKey, Agg)> {
    let mut order: Vec<(String, String, String, usize)> = Vec::new();
    let mut groups: BTreeMap<(String, String, String, usize), Vec<Row>> = BTreeMap::new();
    for r in rows {
        let k = (
            r.scenario.clone(),
            r.implementation.clone(),
            r.test.clone(),
            r.streams,
        );
        if !groups.contains_key(&k) {
            order.push(k.clone());
        }
        groups.entry(k).or_default().push(r.clone());
    }
    order
        .into_iter()
        .filter_map(|k| {
            let rs = groups.remove(&k)?;
            let bad = rs.iter().find(|r| r.status != Status::Ok);
            let ok: Vec<&Row> = rs.iter().filter(|r| r.status == Status::Ok).collect();
            let agg = Agg {
                status: bad.map(|r| r.status).unwrap_or(Status::Ok),
                message: bad.and_then(|r| r.message.clone()),
                mb_per_s: median(ok.iter().map(|r| r.mb_per_s).collect()),
                cpu_per_gb: median(ok.iter().map(|r| r.cpu_secs_per_gb).collect()),
                peak_rss_kb: ok.iter().map(|r| r.peak_rss_kb).max().unwrap_or(0),
                runs: ok.len(),
                rows: rs,
            };
            Some((k, agg))
        })
        .collect()
}

/// An idle row's growth per connection by process: "client 10.2, server 11.3" (KiB).
pub fn by_process(r: &Row) -> Option<String> {
    let v = r.idle_bytes_per_conn_by_process.as_ref()?;
    Some(
        v.iter()
            .map(|(n, b)| format!("{n} {:.1}", b / 1024.0))
            .collect::<Vec<_>>()
            .join(", "),
    )
}
