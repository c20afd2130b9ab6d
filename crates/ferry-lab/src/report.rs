//! Results: one row per measurement, written as JSON after every measurement, and at the end
//! as a Markdown table and PNG bar charts.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;

use crate::loadgen::Percentiles;
use crate::runner::{RunOpts, Test, ALL_IMPLS};

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
            Status::Ok => match (&self.ttfb, &self.rtt, self.rss_bytes_per_conn) {
                (Some(t), Some(r), _) => format!(
                    "ttfb p50 {:.3} ms, rtt p50 {:.3} ms p99 {:.3} ms",
                    t.p50_ms, r.p50_ms, r.p99_ms
                ),
                (_, _, Some(b)) => format!("{:.1} KiB RSS per idle connection", b / 1024.0),
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

/// Writes results.json, results.md and the charts.
pub fn write_all(out: &Path, o: &RunOpts, rows: &[Row]) -> Result<()> {
    write_json(out, o, rows)?;
    let mut charts = Vec::new();
    if o.charts {
        charts = crate::chart::write_charts(out, rows, &impl_order(rows), &o.scenarios)?;
    }
    let md = markdown(o, rows, &charts);
    std::fs::write(out.join("results.md"), md)?;
    Ok(())
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

fn median(mut v: Vec<f64>) -> f64 {
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

/// Groups rows by (scenario, impl, test, streams) in first-seen order.
pub fn aggregate(rows: &[Row]) -> Vec<((String, String, String, usize), Agg)> {
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

fn short(msg: &str) -> String {
    let first = msg.lines().next().unwrap_or("").replace('|', "/");
    if first.chars().count() > 140 {
        let s: String = first.chars().take(140).collect();
        format!("{s}…")
    } else {
        first
    }
}

fn status_cell(a: &Agg) -> Option<String> {
    match a.status {
        Status::Ok => None,
        Status::NotYet => Some("not yet".into()),
        Status::Skipped => Some("n/a".into()),
        Status::Error => Some(format!(
            "**error**: {}",
            short(a.message.as_deref().unwrap_or(""))
        )),
    }
}

/// The Markdown report.
pub fn markdown(o: &RunOpts, rows: &[Row], charts: &[(String, String)]) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# ferry-lab results\n");
    let _ = writeln!(md, "Command: `{}`\n", command_line());
    let aggs = aggregate(rows);
    let base = o.baseline.as_deref();
    for test in Test::BULK {
        let these: Vec<_> = aggs
            .iter()
            .filter(|(k, a)| k.2 == test.name() && a.status != Status::Skipped)
            .collect();
        if these.is_empty() {
            continue;
        }
        let (title, dir) = test.heading();
        let inner = match (&o.inner_tls, test) {
            (None, _) => String::new(),
            (Some(_), Test::Iperf3 | Test::Iperf3Reverse) => {
                " The iperf3 traffic is not TLS (`--inner-tls` applies to loadgen only).".into()
            }
            (Some(t), _) => format!(
                " Traffic: {} from loadgen to receiver; MB/s counts the inner plaintext.",
                t.describe()
            ),
        };
        let _ =
            writeln!(
            md,
            "## {title} ({dir})\n\n{} per measurement split over the connections; median of {} run(s). \
             CPU is user+system time of every proxy process; RSS is their summed peak (VmHWM).{inner}\n",
            human_bytes(o.amount),
            o.runs
        );
        let bcol = base
            .map(|b| format!(" speed vs {b} | CPU/GB vs {b} |"))
            .unwrap_or_default();
        let _ = writeln!(
            md,
            "| scenario | implementation | conns | MB/s | Gbit/s | CPU-s/GB | peak RSS MiB |{bcol}"
        );
        let _ = writeln!(
            md,
            "|---|---|---:|---:|---:|---:|---:|{}",
            if base.is_some() { "---:|---:|" } else { "" }
        );
        for (k, a) in these {
            let basecells = match base {
                None => String::new(),
                Some(b) => {
                    let bk = (k.0.clone(), b.to_string(), k.2.clone(), k.3);
                    let ba = aggs.iter().find(|(x, _)| *x == bk).map(|(_, a)| a);
                    match ba {
                        Some(ba) if ba.status == Status::Ok && a.status == Status::Ok => format!(
                            " {:.2}× | {:.2}× |",
                            ratio(a.mb_per_s, ba.mb_per_s),
                            ratio(a.cpu_per_gb, ba.cpu_per_gb)
                        ),
                        _ => " – | – |".into(),
                    }
                }
            };
            match status_cell(a) {
                Some(cell) => {
                    let _ = writeln!(
                        md,
                        "| {} | {} | {} | {cell} | | | |{}",
                        k.0,
                        k.1,
                        k.3,
                        if base.is_some() { " | |" } else { "" }
                    );
                }
                None => {
                    let _ = writeln!(
                        md,
                        "| {} | {} | {} | {:.1} | {:.2} | {:.2} | {:.1} |{basecells}",
                        k.0,
                        k.1,
                        k.3,
                        a.mb_per_s,
                        a.mb_per_s * 8.0 / 1000.0,
                        a.cpu_per_gb,
                        a.peak_rss_kb as f64 / 1024.0
                    );
                }
            }
        }
        let _ = writeln!(md);
    }
    let lat: Vec<_> = aggs
        .iter()
        .filter(|(k, a)| k.2 == "latency" && a.status != Status::Skipped)
        .collect();
    if !lat.is_empty() {
        let _ = writeln!(
            md,
            "## Latency\n\nTime to first byte = connect + chain set-up{} + one byte back; round trips of {}-byte messages on one connection. Milliseconds, first run.\n",
            if o.inner_tls.is_some() { " + the inner TLS handshake" } else { "" },
            o.rr_size
        );
        let _ = writeln!(
            md,
            "| scenario | implementation | TTFB p50 | p90 | p99 | RTT p50 | p90 | p99 |"
        );
        let _ = writeln!(md, "|---|---|---:|---:|---:|---:|---:|---:|");
        for (k, a) in lat {
            let r = a.rows.iter().find(|r| r.status == Status::Ok);
            match (
                status_cell(a),
                r.and_then(|r| r.ttfb.clone().zip(r.rtt.clone())),
            ) {
                (None, Some((t, x))) => {
                    let _ = writeln!(
                        md,
                        "| {} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |",
                        k.0, k.1, t.p50_ms, t.p90_ms, t.p99_ms, x.p50_ms, x.p90_ms, x.p99_ms
                    );
                }
                (cell, _) => {
                    let _ = writeln!(
                        md,
                        "| {} | {} | {} | | | | | |",
                        k.0,
                        k.1,
                        cell.unwrap_or_default()
                    );
                }
            }
        }
        let _ = writeln!(md);
    }
    let idle: Vec<_> = aggs
        .iter()
        .filter(|(k, a)| k.2 == "idle" && a.status != Status::Skipped)
        .collect();
    if !idle.is_empty() {
        let _ = writeln!(
            md,
            "## Memory per idle connection\n\nConnections held open through the chain (each confirmed end to end); RSS growth of all proxy processes divided by the count.\n"
        );
        let _ = writeln!(md, "| scenario | implementation | connections | RSS before MiB | RSS after MiB | KiB per connection |");
        let _ = writeln!(md, "|---|---|---:|---:|---:|---:|");
        for (k, a) in idle {
            let r = a.rows.iter().find(|r| r.status == Status::Ok);
            match (status_cell(a), r) {
                (None, Some(r)) => {
                    let _ = writeln!(
                        md,
                        "| {} | {} | {} | {:.1} | {:.1} | {:.1} |",
                        k.0,
                        k.1,
                        k.3,
                        r.idle_rss_kb_before.unwrap_or(0) as f64 / 1024.0,
                        r.idle_rss_kb_after.unwrap_or(0) as f64 / 1024.0,
                        r.rss_bytes_per_conn.unwrap_or(0.0) / 1024.0
                    );
                }
                (cell, _) => {
                    let _ = writeln!(
                        md,
                        "| {} | {} | {} | {} | | |",
                        k.0,
                        k.1,
                        k.3,
                        cell.unwrap_or_default()
                    );
                }
            }
        }
        let _ = writeln!(md);
    }
    let errors: Vec<&Row> = rows.iter().filter(|r| r.status == Status::Error).collect();
    if !errors.is_empty() {
        let _ = writeln!(md, "## Errors\n");
        for r in errors {
            let _ = writeln!(
                md,
                "- {} / {} / {} {}: {}",
                r.scenario,
                r.implementation,
                r.test,
                r.streams,
                short(r.message.as_deref().unwrap_or(""))
            );
        }
        let _ = writeln!(md);
    }
    let skipped: Vec<&Row> = rows
        .iter()
        .filter(|r| r.status == Status::Skipped)
        .collect();
    if !skipped.is_empty() {
        let _ = writeln!(
            md,
            "Not run (no template): {}\n",
            skipped
                .iter()
                .map(|r| format!("{} on {}", r.implementation, r.scenario))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if !charts.is_empty() {
        let _ = writeln!(md, "## Charts\n");
        for (file, legend) in charts {
            let _ = writeln!(md, "![{legend}]({file})\n\n{legend}\n");
        }
    }
    md
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

/// 1073741824 -> "1 GiB".
pub fn human_bytes(n: u64) -> String {
    const U: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = n as f64;
    let mut i = 0;
    while v >= 1024.0 && i < 3 {
        v /= 1024.0;
        i += 1;
    }
    if v.fract() == 0.0 {
        format!("{v:.0} {}", U[i])
    } else {
        format!("{v:.1} {}", U[i])
    }
}
