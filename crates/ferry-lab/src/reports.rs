//! `ferry-lab report NNN`: the five benchmark reports this project started from, each rerun in
//! its own shape with Ferry and the installed peers side by side. A report is a list of cases
//! (scenario, CPU cap, inner TLS record size, link); each case is one runner plan; the rows come
//! back flattened into one schema (results.json), a Markdown table shaped like the report's,
//! and charts.
//!
//! - 000: loopback, VMess and Shadowsocks (and ShadowsocksR) ciphers, 1/2/4 connections.
//! - 001: the A -> B -> C -> D chains (VLESS over TCP, TLS and Vision, VMess over TLS and over
//!   ws+TLS with and without nginx, Trojan over TLS) with TLS traffic from A to D and node B capped.
//! - 002: Vision against plain TLS under each CPU cap of the server node and each inner TLS
//!   record size.
//! - 003: cipher throughput, time to first byte and request latency on a clean link and on a
//!   50 ms round trip with 1% loss (CUBIC).
//! - 004: fallbacks over TCP, unix, abstract and padded-abstract sockets; nginx in front over
//!   TCP, unix and TCP with PROXY protocol.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::impair::Impair;
use crate::inner_tls::{InnerTls, TlsVersion};
use crate::plan::{RunOpts, Test, TestbedPlan, ALL_IMPLS};
use crate::results::{command_line, median, Row, Status};
use crate::scenario;

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

/// One row of results.json: the schema.
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

const G: u64 = 1 << 30;
const M: u64 = 1 << 20;

fn vision(scenario: &str) -> bool {
    scenario.contains("vision")
}

/// The Shadowsocks AEAD/2022 scenarios and the ShadowsocksR stream-cipher rows (the
/// `ssr-ciphers` group without its AEAD rows, which run through Shadowsocks above): the cipher
/// rows of 000 and 003.
fn cipher_scenarios(scenario_dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = [
        "ss-aes-128-gcm",
        "ss-aes-256-gcm",
        "ss-chacha20-ietf-poly1305",
        "ss-2022-blake3-aes-128-gcm",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.extend(
        scenario::expand(scenario_dir, &["ssr-ciphers".to_string()])
            .into_iter()
            .filter(|s| !s.contains("-aead-")),
    );
    v
}

/// The cases of report `id`.
pub fn cases(id: &str, quick: bool, scenario_dir: &Path) -> Result<Vec<Case>> {
    let case = |label: String, scenario: &str, streams: &[usize], amount: u64| Case {
        label,
        scenario: scenario.to_string(),
        tests: vec![Test::Throughput],
        streams: streams.to_vec(),
        amount,
        testbed: None,
        record: None,
        ttfb_count: 200,
        rr_count: 2000,
    };
    let mut v = Vec::new();
    match id {
        "000" => {
            let mut scns: Vec<String> =
                ["vmess-aes-128-gcm", "vmess-chacha20-poly1305", "vmess-none"]
                    .iter()
                    .map(|s| s.to_string())
                    .collect();
            scns.extend(cipher_scenarios(scenario_dir));
            let (streams, amount): (&[usize], u64) = if quick {
                (&[1, 4], 128 * M)
            } else {
                (&[1, 2, 4], G)
            };
            for s in scns {
                v.push(case(s.clone(), &s, streams, amount));
            }
        }
        "001" => {
            let caps: &[u32] = if quick {
                &[20, 100]
            } else {
                &[5, 10, 20, 50, 100]
            };
            // A capped measurement must outlast many cgroup periods (20 ms).
            let (streams, amount): (&[usize], u64) =
                if quick { (&[1], 256 * M) } else { (&[1, 4], G) };
            for s in [
                "vless-tcp",
                "vless-tls",
                "vless-vision",
                "vmess-tls",
                "vmess-ws-tls",
                "vmess-ws-tls-nginx",
                "trojan-tls",
            ] {
                for &cap in caps {
                    let mut c = case(format!("{s}, B at {cap}%"), s, streams, amount);
                    c.testbed = Some(TestbedPlan {
                        cap: Some(("b".into(), cap)),
                        ..TestbedPlan::default()
                    });
                    c.record = Some(16 * 1024);
                    v.push(c);
                }
            }
        }
        "002" => {
            let caps: &[u32] = if quick {
                &[10, 100]
            } else {
                &[5, 10, 20, 30, 50, 100]
            };
            let records: &[usize] = if quick {
                &[1024, 16384]
            } else {
                &[1024, 2048, 4096, 8192, 16384]
            };
            let amount = if quick { 256 * M } else { G };
            for &rec in records {
                for s in ["vless-tls", "vless-vision"] {
                    for &cap in caps {
                        let mut c = case(
                            format!("{s}, {}K records, C at {cap}%", rec / 1024),
                            s,
                            &[1],
                            amount,
                        );
                        c.testbed = Some(TestbedPlan {
                            cap: Some(("c".into(), cap)),
                            ..TestbedPlan::default()
                        });
                        c.record = Some(rec);
                        v.push(c);
                    }
                }
            }
        }
        "003" => {
            let scns = cipher_scenarios(scenario_dir);
            let lossy = Impair {
                delay: Duration::from_millis(25),
                loss_pct: 1.0,
                seed: 3,
                ..Impair::default()
            };
            for s in &scns {
                for (link, impair) in [("clean", None), ("50 ms RTT, 1% loss", Some(lossy))] {
                    let amount = match (impair.is_some(), quick) {
                        (false, false) => 512 * M,
                        (false, true) => 64 * M,
                        (true, false) => 16 * M,
                        (true, true) => 2 * M,
                    };
                    let mut c = case(format!("{s}, {link}"), s, &[1], amount);
                    c.tests = vec![Test::Throughput, Test::Latency];
                    c.testbed = Some(TestbedPlan {
                        impair,
                        congestion: Some("cubic".into()),
                        ..TestbedPlan::default()
                    });
                    if impair.is_some() {
                        (c.ttfb_count, c.rr_count) = if quick { (10, 40) } else { (50, 300) };
                    } else if quick {
                        (c.ttfb_count, c.rr_count) = (50, 300);
                    }
                    v.push(c);
                }
            }
        }
        "004" => {
            let (streams, amount): (&[usize], u64) = if quick {
                (&[1, 4], 128 * M)
            } else {
                (&[1, 4], G)
            };
            for s in [
                "fallback-tcp",
                "fallback-unix",
                "fallback-abstract",
                "fallback-padded",
                "vless-tls",
                "nginx-stream-tcp",
                "nginx-stream-unix",
                "nginx-stream-pp",
                "vless-tcp",
            ] {
                v.push(case(s.to_string(), s, streams, amount));
            }
        }
        _ => bail!(
            "no report {id:?}; the reports are {}",
            REPORTS
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
    Ok(v)
}

/// Implementations of `scenario` this report runs.
fn impls_for(o: &ReportOpts, scenario: &str) -> Vec<String> {
    let has: Vec<String> = scenario::load(&o.scenario_dir, scenario)
        .map(|s| s.impls.keys().cloned().collect())
        .unwrap_or_default();
    ALL_IMPLS
        .iter()
        .map(|s| s.to_string())
        .filter(|i| has.contains(i))
        .filter(|i| o.impls.as_ref().is_none_or(|v| v.contains(i)))
        .collect()
}

fn flatten(id: &str, c: &Case, r: &Row) -> FlatRow {
    let tb = r.testbed.as_ref();
    let plan = c.testbed.as_ref();
    let impair = plan.and_then(|p| p.impair);
    let status = match r.status {
        Status::Ok => "ok".to_string(),
        Status::NotYet => format!("not yet: {}", r.message.as_deref().unwrap_or("")),
        Status::Skipped => format!("skipped: {}", r.message.as_deref().unwrap_or("")),
        Status::Error => format!("error: {}", r.message.as_deref().unwrap_or("")),
    };
    FlatRow {
        report: id.to_string(),
        case: c.label.clone(),
        scenario: c.scenario.clone(),
        implementation: r.implementation.clone(),
        test: r.test.clone(),
        flow: if vision(&c.scenario) {
            "xtls-rprx-vision".into()
        } else {
            "-".into()
        },
        run: r.run,
        cpu_cap_pct: plan.and_then(|p| p.cap.as_ref()).map(|(_, p)| *p),
        cpu_cap_node: plan.and_then(|p| p.cap.as_ref()).map(|(n, _)| n.clone()),
        record_size: c.record,
        conns: r.streams,
        delay_ms: impair.map(|i| i.delay.as_secs_f64() * 1000.0),
        loss_pct: impair.map(|i| i.loss_pct),
        congestion: tb.map(|t| t.congestion.clone()),
        gbps: r.gbit_per_s,
        mb_per_s: r.mb_per_s,
        cpu_s_per_gb: r.cpu_secs_per_gb,
        peak_rss_mib: r.peak_rss_kb as f64 / 1024.0,
        ttfb_ms: r.ttfb.as_ref().map(|p| p.p50_ms),
        latency_p50_ms: r.rtt.as_ref().map(|p| p.p50_ms),
        latency_p99_ms: r.rtt.as_ref().map(|p| p.p99_ms),
        hop_loss_pct: tb.and_then(|t| t.hop.as_ref()).map(|h| h.loss_pct),
        hop_delay_p50_ms: tb.and_then(|t| t.hop.as_ref()).map(|h| h.delay_p50_ms),
        status,
    }
}

#[derive(Serialize)]
struct Doc<'a> {
    report: &'a str,
    title: &'a str,
    command: String,
    quick: bool,
    runs: usize,
    rows: &'a [FlatRow],
}

fn write_json(o: &ReportOpts, title: &str, rows: &[FlatRow]) -> Result<()> {
    let doc = Doc {
        report: &o.id,
        title,
        command: command_line(),
        quick: o.quick,
        runs: o.runs,
        rows,
    };
    let p = o.out.join("results.json");
    std::fs::write(&p, serde_json::to_string_pretty(&doc)?)
        .with_context(|| format!("writing {}", p.display()))
}

/// Runs report `o.id`: every case for every implementation; writes results.json after each
/// case, then results.md and the charts. Returns the rows.
pub fn run(o: &ReportOpts) -> Result<Vec<FlatRow>> {
    let title = REPORTS
        .iter()
        .find(|(n, _)| *n == o.id)
        .map(|(_, t)| *t)
        .unwrap_or("");
    let cases = cases(&o.id, o.quick, &o.scenario_dir)?;
    std::fs::create_dir_all(&o.out).with_context(|| format!("creating {}", o.out.display()))?;
    let ferry_bin = match &o.ferry_bin {
        Some(b) => Some(b.clone()),
        None if impls_wanted(o, "ferry") => Some(crate::runner::build_ferry()?),
        None => None,
    };
    let total = cases.len();
    let t0 = Instant::now();
    let mut rows = Vec::new();
    for (k, c) in cases.iter().enumerate() {
        let impls = impls_for(o, &c.scenario);
        eprintln!(
            "report {} case {}/{total}: {} ({})",
            o.id,
            k + 1,
            c.label,
            impls.join(", ")
        );
        if impls.is_empty() {
            continue;
        }
        let plan = RunOpts {
            scenarios: vec![c.scenario.clone()],
            impls,
            streams: c.streams.clone(),
            amount: o.amount.unwrap_or(c.amount),
            runs: o.runs,
            out: o.out.join("work").join(format!("case-{:03}", k + 1)),
            tests: c.tests.clone(),
            idle: vec![],
            baseline: None,
            ferry_bin: ferry_bin.clone(),
            scenario_dir: o.scenario_dir.clone(),
            peers_dir: o.peers_dir.clone(),
            stall: Duration::from_secs(30),
            ttfb_count: c.ttfb_count,
            rr_count: c.rr_count,
            rr_size: 64,
            handshakes: 1,
            handshake_concurrency: 1,
            churn: 1,
            soak: Duration::ZERO,
            soak_idle: 0,
            soak_hostile: 0,
            soak_churn: 0,
            soak_cycles: 0,
            inner_tls: c
                .record
                .map(|r| InnerTls::new(TlsVersion::V13, r))
                .transpose()?,
            charts: false,
            testbed: c.testbed.clone(),
        };
        let got = crate::runner::run(&plan)?;
        rows.extend(got.iter().map(|r| flatten(&o.id, c, r)));
        write_json(o, title, &rows)?;
        let done = k + 1;
        let spent = t0.elapsed().as_secs_f64();
        let left = spent / done as f64 * (total - done) as f64;
        eprintln!(
            "report {}: {done}/{total} cases in {}; about {} left",
            o.id,
            human_secs(spent),
            human_secs(left)
        );
    }
    let md = markdown(o, title, &cases, &rows);
    let charts = crate::chart::write_report_charts(&o.out, &o.id, &rows)?;
    let mut md = md;
    for (file, legend) in &charts {
        let _ = writeln!(md, "\n![{legend}]({file})\n");
    }
    std::fs::write(o.out.join("results.md"), md)?;
    Ok(rows)
}

fn impls_wanted(o: &ReportOpts, i: &str) -> bool {
    o.impls.as_ref().is_none_or(|v| v.iter().any(|x| x == i))
}

fn human_secs(s: f64) -> String {
    if s < 120.0 {
        format!("{s:.0} s")
    } else if s < 7200.0 {
        format!("{:.0} min", s / 60.0)
    } else {
        format!("{:.1} h", s / 3600.0)
    }
}

/// The rows of one (case, impl, test, conns) cell: the median over runs, or the first
/// non-ok status.
fn cell<'a>(
    rows: &'a [FlatRow],
    case: &str,
    imp: &str,
    test: &str,
    conns: usize,
) -> Option<(Option<&'a FlatRow>, Vec<&'a FlatRow>)> {
    let v: Vec<&FlatRow> = rows
        .iter()
        .filter(|r| r.case == case && r.implementation == imp && r.test == test && r.conns == conns)
        .collect();
    if v.is_empty() {
        return None;
    }
    let bad = v.iter().copied().find(|r| r.status != "ok");
    Some((bad, v.into_iter().filter(|r| r.status == "ok").collect()))
}

fn short(s: &str) -> String {
    let first = s.lines().next().unwrap_or("").replace('|', "/");
    if first.chars().count() > 90 {
        format!("{}…", first.chars().take(90).collect::<String>())
    } else {
        first
    }
}

fn fmt_cell(
    bad: Option<&FlatRow>,
    ok: &[&FlatRow],
    f: impl Fn(&FlatRow) -> Option<f64>,
    prec: usize,
) -> String {
    if let Some(b) = bad {
        return short(&b.status);
    }
    let v: Vec<f64> = ok.iter().filter_map(|r| f(r)).collect();
    if v.is_empty() {
        return "–".into();
    }
    format!("{:.prec$}", median(v))
}

/// results.md: the command, then the report's table.
pub fn markdown(o: &ReportOpts, title: &str, cases: &[Case], rows: &[FlatRow]) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# ferry-lab report {}: {title}\n", o.id);
    let _ = writeln!(md, "Command: `{}`\n", command_line());
    let _ = writeln!(
        md,
        "Median of {} run(s){}. Gbit/s counts the payload (the inner TLS plaintext where the \
         traffic is TLS); CPU-s/GB is user+system time of every proxy process per GB.\n",
        o.runs,
        if o.quick { ", --quick sizes" } else { "" }
    );
    let mut impls: Vec<String> = Vec::new();
    for i in ALL_IMPLS {
        if rows.iter().any(|r| r.implementation == *i) {
            impls.push(i.to_string());
        }
    }
    let conns: Vec<usize> = {
        let mut v: Vec<usize> = rows.iter().map(|r| r.conns).collect();
        v.sort();
        v.dedup();
        v
    };
    match o.id.as_str() {
        "000" | "004" => {
            let _ = writeln!(md, "Loopback: every process on this machine's 127.0.0.1.\n");
            let mut head = "| case | implementation |".to_string();
            let mut rule = "|---|---|".to_string();
            for c in &conns {
                let _ = write!(head, " Gbit/s x{c} | CPU-s/GB x{c} |");
                rule.push_str("---:|---:|");
            }
            let _ = writeln!(md, "{head}\n{rule}");
            for c in cases {
                for i in &impls {
                    let mut line = format!("| {} | {i} |", c.label);
                    let mut any = false;
                    for &n in &conns {
                        match cell(rows, &c.label, i, "throughput", n) {
                            Some((bad, ok)) => {
                                any = true;
                                let _ = write!(
                                    line,
                                    " {} | {} |",
                                    fmt_cell(bad, &ok, |r| Some(r.gbps), 2),
                                    fmt_cell(bad, &ok, |r| Some(r.cpu_s_per_gb), 2)
                                );
                            }
                            None => line.push_str(" | |"),
                        }
                    }
                    if any {
                        let _ = writeln!(md, "{line}");
                    }
                }
            }
        }
        "001" | "002" => {
            let node = if o.id == "001" {
                "B (client side)"
            } else {
                "C (server side)"
            };
            let _ = writeln!(
                md,
                "Testbed: loadgen in A, client side in B, server side in C, receiver in D; TLS 1.3 \
                 from A to D through the chain; {node} capped (percent of one CPU). Flow: the VLESS \
                 flow the row ran — today's cores (Ferry, Xray, sing-box) run Vision; the reports' \
                 `xtls-rprx-direct`/`origin` rows need Xray 1.7.5, which does not build with Go \
                 1.26 (gvisor and qtls-go1-20 stop at Go 1.20), so they are not in this table.\n"
            );
            // Rows: (scenario/record, impl); columns: caps.
            let mut caps: Vec<u32> = rows.iter().filter_map(|r| r.cpu_cap_pct).collect();
            caps.sort();
            caps.dedup();
            let mut groups: Vec<(String, Option<usize>)> = Vec::new();
            for c in cases {
                let g = (c.scenario.clone(), c.record);
                if !groups.contains(&g) {
                    groups.push(g);
                }
            }
            let mut head = "| scenario | record | flow | implementation | conns |".to_string();
            let mut rule = "|---|---:|---|---|---:|".to_string();
            for cap in &caps {
                let _ = write!(head, " {cap}% Gbit/s |");
                rule.push_str("---:|");
            }
            let _ = writeln!(md, "{head}\n{rule}");
            for (scn, rec) in &groups {
                for i in &impls {
                    for &n in &conns {
                        let mut line = format!(
                            "| {scn} | {} | {} | {i} | {n} |",
                            rec.map(|r| format!("{}K", r / 1024)).unwrap_or("-".into()),
                            if vision(scn) { "xtls-rprx-vision" } else { "-" }
                        );
                        let mut any = false;
                        for cap in &caps {
                            let c = cases.iter().find(|c| {
                                &c.scenario == scn
                                    && c.record == *rec
                                    && c.testbed.as_ref().and_then(|t| t.cap.as_ref()).map(|x| x.1)
                                        == Some(*cap)
                            });
                            match c.and_then(|c| cell(rows, &c.label, i, "throughput", n)) {
                                Some((bad, ok)) => {
                                    any = true;
                                    let _ = write!(
                                        line,
                                        " {} |",
                                        fmt_cell(bad, &ok, |r| Some(r.gbps), 2)
                                    );
                                }
                                None => line.push_str(" |"),
                            }
                        }
                        if any {
                            let _ = writeln!(md, "{line}");
                        }
                    }
                }
            }
        }
        "003" => {
            let _ = writeln!(
                md,
                "Testbed: client in B, server in C, TCP CUBIC; the lossy link is the impairment hop \
                 between B and C, 25 ms each way (50 ms added to the round trip) and 1% loss per \
                 packet. TTFB: connect through the chain and one byte back, p50; round trips: 64-byte \
                 request/response, p50 and p99. \"hop\" is what the hop measured.\n"
            );
            let _ = writeln!(md, "| case | implementation | Gbit/s | CPU-s/GB | TTFB p50 ms | RTT p50 ms | RTT p99 ms | hop loss % |");
            let _ = writeln!(md, "|---|---|---:|---:|---:|---:|---:|---:|");
            for c in cases {
                for i in &impls {
                    let t = cell(rows, &c.label, i, "throughput", 1);
                    let l = cell(rows, &c.label, i, "latency", 1);
                    if t.is_none() && l.is_none() {
                        continue;
                    }
                    let (tb, tok) = t.unwrap_or((None, vec![]));
                    let (lb, lok) = l.unwrap_or((None, vec![]));
                    let _ = writeln!(
                        md,
                        "| {} | {i} | {} | {} | {} | {} | {} | {} |",
                        c.label,
                        fmt_cell(tb, &tok, |r| Some(r.gbps), 3),
                        fmt_cell(tb, &tok, |r| Some(r.cpu_s_per_gb), 2),
                        fmt_cell(lb, &lok, |r| r.ttfb_ms, 2),
                        fmt_cell(lb, &lok, |r| r.latency_p50_ms, 2),
                        fmt_cell(lb, &lok, |r| r.latency_p99_ms, 2),
                        fmt_cell(tb, &tok, |r| r.hop_loss_pct, 2),
                    );
                }
            }
        }
        _ => {}
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_report_has_cases_on_shipped_scenarios() {
        let dir = crate::scenario::default_dir();
        let all = crate::scenario::list(&dir).unwrap();
        for (id, _) in REPORTS {
            for quick in [true, false] {
                let cs = cases(id, quick, &dir).unwrap();
                assert!(!cs.is_empty(), "{id}");
                for c in &cs {
                    assert!(
                        all.contains(&c.scenario),
                        "{id}: {} is not shipped",
                        c.scenario
                    );
                }
                let labels: std::collections::BTreeSet<&String> =
                    cs.iter().map(|c| &c.label).collect();
                assert_eq!(labels.len(), cs.len(), "{id}: case labels repeat");
            }
        }
        assert!(cases("005", true, &dir).is_err());
        // The shapes the issue names.
        let c002 = cases("002", false, &dir).unwrap();
        assert_eq!(
            c002.len(),
            5 * 2 * 6,
            "5 record sizes x TLS/Vision x 6 caps"
        );
        let c003 = cases("003", true, &dir).unwrap();
        assert!(c003.iter().any(|c| c
            .testbed
            .as_ref()
            .and_then(|t| t.impair)
            .is_some_and(|i| i.loss_pct == 1.0 && i.delay == Duration::from_millis(25))));
    }
}
