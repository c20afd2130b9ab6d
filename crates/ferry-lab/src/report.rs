//! The report of a run: results.md (tables shaped like the benchmark reports') and the charts,
//! from the rows in [`crate::results`].

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;

use crate::plan::{RunOpts, Test};
use crate::results::{
    aggregate, command_line, impl_order, median, write_json, Agg, AggKey, Handshakes,
};
pub use crate::results::{Row, Status};

/// Runs the plan, then writes results.json, results.md and the charts; returns the rows.
pub fn run_and_report(o: &RunOpts) -> Result<Vec<Row>> {
    let rows = crate::runner::run(o)?;
    write_all(&o.out, o, &rows)?;
    Ok(rows)
}

/// Writes results.json, results.md and the charts.
pub fn write_all(out: &Path, o: &RunOpts, rows: &[Row]) -> Result<()> {
    write_json(out, o, rows)?;
    let mut charts = Vec::new();
    if o.charts {
        charts = crate::chart::write_charts(out, rows, &impl_order(rows), &o.scenarios)?;
        charts.extend(crate::chart::write_soak_charts(
            out,
            rows,
            &impl_order(rows),
        )?);
    }
    let md = markdown(o, rows, &charts);
    std::fs::write(out.join("results.md"), md)?;
    Ok(())
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
    if let Some(t) = &o.testbed {
        let mut v =
            vec!["loadgen in A, client side in B, server side in C, receiver in D".to_string()];
        if let Some((n, p)) = &t.cap {
            v.push(format!("node {} capped at {p}% of a CPU", n.to_uppercase()));
        }
        if let Some(i) = &t.impair {
            v.push(format!("B-C hop: {}", i.describe()));
        }
        if let Some(r) = t.rate_mbit {
            v.push(format!("B-C limited to {r} Mbit/s"));
        }
        if let Some(c) = &t.congestion {
            v.push(format!("TCP {c}"));
        }
        let _ = writeln!(md, "Testbed: {}.\n", v.join("; "));
    }
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
        let spread = o.runs > 1;
        let mut bcol = base
            .map(|b| format!(" speed vs {b} | CPU/GB vs {b} |"))
            .unwrap_or_default();
        if spread {
            bcol.push_str(" MB/s min–max | CPU-s/GB min–max |");
        }
        let _ = writeln!(
            md,
            "| scenario | implementation | conns | MB/s | Gbit/s | CPU-s/GB | peak RSS MiB |{bcol}"
        );
        let _ = writeln!(
            md,
            "|---|---|---:|---:|---:|---:|---:|{}",
            if base.is_some() { "---:|---:|" } else { "" }.to_string()
                + if spread { "---:|---:|" } else { "" }
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
                        if base.is_some() { " | |" } else { "" }.to_string()
                            + if spread { " | |" } else { "" }
                    );
                }
                None => {
                    let _ = writeln!(
                        md,
                        "| {} | {} | {} | {:.1} | {:.2} | {:.2} | {:.1} |{basecells}{}",
                        k.0,
                        k.1,
                        k.3,
                        a.mb_per_s,
                        a.mb_per_s * 8.0 / 1000.0,
                        a.cpu_per_gb,
                        a.peak_rss_kb as f64 / 1024.0,
                        if spread {
                            let ok = || a.rows.iter().filter(|r| r.status == Status::Ok);
                            format!(
                                " {} | {} |",
                                range(ok().map(|r| r.mb_per_s), 1),
                                range(ok().map(|r| r.cpu_secs_per_gb), 2)
                            )
                        } else {
                            String::new()
                        }
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
            "## Memory per idle connection\n\nConnections held open through the chain (each confirmed end to end); RSS growth of all proxy processes divided by the count; median of {} run(s).\n",
            o.runs
        );
        let _ = writeln!(md, "| scenario | implementation | connections | RSS before MiB | RSS after MiB | KiB per connection | min–max | KiB per connection by process |");
        let _ = writeln!(md, "|---|---|---:|---:|---:|---:|---:|---|");
        for (k, a) in idle {
            let ok: Vec<&Row> = a.rows.iter().filter(|r| r.status == Status::Ok).collect();
            match (status_cell(a), ok.is_empty()) {
                (None, false) => {
                    let m = |f: &dyn Fn(&Row) -> f64| median(ok.iter().map(|r| f(r)).collect());
                    let kib = |r: &Row| r.rss_bytes_per_conn.unwrap_or(0.0) / 1024.0;
                    let _ = writeln!(
                        md,
                        "| {} | {} | {} | {:.1} | {:.1} | {:.1} | {} | {} |",
                        k.0,
                        k.1,
                        k.3,
                        m(&|r| r.idle_rss_kb_before.unwrap_or(0) as f64 / 1024.0),
                        m(&|r| r.idle_rss_kb_after.unwrap_or(0) as f64 / 1024.0),
                        m(&kib),
                        range(ok.iter().map(|r| kib(r)), 1),
                        by_process_median(&ok)
                    );
                }
                (cell, _) => {
                    let _ = writeln!(
                        md,
                        "| {} | {} | {} | {} | | | | |",
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
    handshake_table(&mut md, o, &aggs);
    churn_table(&mut md, &aggs);
    soak_table(&mut md, &aggs);
    bulk_idle_table(&mut md, &aggs);
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

/// [`by_process`] as the median over runs, process by process.
fn by_process_median(rows: &[&Row]) -> String {
    let Some(names) = rows
        .iter()
        .find_map(|r| r.idle_bytes_per_conn_by_process.as_ref())
    else {
        return String::new();
    };
    names
        .iter()
        .map(|(n, _)| {
            let v: Vec<f64> = rows
                .iter()
                .filter_map(|r| r.idle_bytes_per_conn_by_process.as_ref())
                .filter_map(|x| x.iter().find(|(m, _)| m == n).map(|(_, b)| b / 1024.0))
                .collect();
            format!("{n} {:.1}", median(v))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// "min–max" of the values, `prec` decimals ("–" when there are none).
fn range(v: impl Iterator<Item = f64>, prec: usize) -> String {
    let v: Vec<f64> = v.collect();
    if v.is_empty() {
        return "–".into();
    }
    let lo = v.iter().cloned().fold(f64::INFINITY, f64::min);
    let hi = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    format!("{lo:.prec$}–{hi:.prec$}")
}

/// The handshake test's table: medians over the runs, with min–max where runs > 1.
fn handshake_table(md: &mut String, o: &RunOpts, aggs: &[(AggKey, Agg)]) {
    let these: Vec<_> = aggs
        .iter()
        .filter(|(k, a)| k.2 == "handshake" && a.status != Status::Skipped)
        .collect();
    if these.is_empty() {
        return;
    }
    let conc = these.first().map(|(k, _)| k.3).unwrap_or(0);
    let inner = match &o.inner_tls {
        Some(t) => format!(
            " Each connection also runs {} from loadgen to the receiver.",
            t.describe()
        ),
        None => String::new(),
    };
    let _ = writeln!(
        md,
        "## Handshakes (fresh connections)\n\n{n} fresh connections one at a time, then {n} with {conc} in flight. Each connects to the chain's entry, sends {msg} bytes and waits for their echo from the receiver, then closes: the client dials the server (and its handshake) for every one. conn/s = connections / wall time; TTFB = from connect to the echo, ms. CPU per 1000 handshakes is over both phases (teardown included), by process: **server** (the one that accepts the handshakes), client, and target (the other processes: REALITY's website, nginx). Median of {runs} run(s){mm}.{inner}\n",
        n = o.handshakes,
        msg = crate::plan::HANDSHAKE_MSG,
        runs = o.runs,
        mm = if o.runs > 1 { ", min–max in brackets" } else { "" },
    );
    let base = o.baseline.as_deref();
    let bcol = base
        .map(|b| format!(" conn/s ({conc}) vs {b} | handshakes per server CPU-s vs {b} |"))
        .unwrap_or_default();
    let _ = writeln!(
        md,
        "| scenario | implementation | conn/s (1) | TTFB p50 | TTFB p99 | conn/s ({conc}) | TTFB p50 | TTFB p99 | server CPU-s per 1000 | handshakes per server CPU-s | client CPU-s per 1000 | target CPU-s per 1000 |{bcol}"
    );
    let _ = writeln!(
        md,
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|{}",
        if base.is_some() { "---:|---:|" } else { "" }
    );
    let hs = |a: &Agg| -> Vec<Handshakes> {
        a.rows
            .iter()
            .filter(|r| r.status == Status::Ok)
            .filter_map(|r| r.handshake.clone())
            .collect()
    };
    let cell = |v: Vec<f64>, prec: usize| -> String {
        let m = median(v.clone());
        if v.len() > 1 {
            format!("{m:.prec$} ({})", range(v.into_iter(), prec))
        } else {
            format!("{m:.prec$}")
        }
    };
    let per_cpu = |h: &Handshakes| {
        let s = h.cpu_per_1000().0;
        if s > 0.0 {
            1000.0 / s
        } else {
            0.0
        }
    };
    for (k, a) in these {
        if let Some(c) = status_cell(a) {
            let _ = writeln!(
                md,
                "| {} | {} | {c} | | | | | | | | | |{}",
                k.0,
                k.1,
                if base.is_some() { " | |" } else { "" }
            );
            continue;
        }
        let h = hs(a);
        let col =
            |f: &dyn Fn(&Handshakes) -> f64, prec: usize| cell(h.iter().map(f).collect(), prec);
        let basecells = match base {
            None => String::new(),
            Some(b) => {
                let bk = (k.0.clone(), b.to_string(), k.2.clone(), k.3);
                match aggs.iter().find(|(x, _)| *x == bk) {
                    Some((_, ba)) if ba.status == Status::Ok => {
                        let bh = hs(ba);
                        let m = |v: &[Handshakes], f: &dyn Fn(&Handshakes) -> f64| {
                            median(v.iter().map(f).collect())
                        };
                        let rate = |x: &Handshakes| x.parallel.burst.conns_per_s;
                        format!(
                            " {:.2}× | {:.2}× |",
                            ratio(m(&h, &rate), m(&bh, &rate)),
                            ratio(m(&h, &per_cpu), m(&bh, &per_cpu))
                        )
                    }
                    _ => " – | – |".into(),
                }
            }
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |{basecells}",
            k.0,
            k.1,
            col(&|x| x.sequential.burst.conns_per_s, 0),
            col(&|x| x.sequential.burst.ttfb.p50_ms, 2),
            col(&|x| x.sequential.burst.ttfb.p99_ms, 2),
            col(&|x| x.parallel.burst.conns_per_s, 0),
            col(&|x| x.parallel.burst.ttfb.p50_ms, 2),
            col(&|x| x.parallel.burst.ttfb.p99_ms, 2),
            col(&|x| x.cpu_per_1000().0, 3),
            col(&per_cpu, 0),
            col(&|x| x.cpu_per_1000().1, 3),
            col(&|x| x.cpu_per_1000().2, 3),
        );
    }
    let _ = writeln!(md);
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

/// Every row of one test, with its aggregation key.
fn rows_of<'a>(aggs: &'a [(AggKey, Agg)], test: &str) -> Vec<(&'a AggKey, &'a Row)> {
    aggs.iter()
        .filter(|(k, _)| k.2 == test)
        .flat_map(|(k, a)| a.rows.iter().map(move |r| (k, r)))
        .collect()
}

/// The churn test: RSS after the first sample and at the end, per process, and the ratio.
fn churn_table(md: &mut String, aggs: &[(AggKey, Agg)]) {
    let rows = rows_of(aggs, "churn");
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "## Churn\n\nShort connections through the chain, each echoing a few bytes; RSS of every proxy process after the first sample (10,000 connections) and at the end; end/first is the target's ratio (within 1.05).\n"
    );
    let _ = writeln!(md, "| scenario | implementation | connections | run | conn/s | RSS after first MiB | RSS at end MiB | end / first | by process (first → end MiB) |");
    let _ = writeln!(md, "|---|---|---:|---:|---:|---:|---:|---:|---|");
    for (k, r) in rows {
        let Some(s) = r
            .churn
            .as_ref()
            .filter(|s| r.status == Status::Ok && !s.is_empty())
        else {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | | | | |",
                k.0,
                k.1,
                k.3,
                r.run,
                r.message.as_deref().unwrap_or("not run")
            );
            continue;
        };
        let (a, b) = (&s[0], &s[s.len() - 1]);
        let by: Vec<String> = a
            .rss_kb
            .iter()
            .map(|(n, v)| {
                let e = b.rss_kb.iter().find(|(m, _)| m == n).map_or(0, |(_, v)| *v);
                format!("{n} {:.1} → {:.1}", *v as f64 / 1024.0, e as f64 / 1024.0)
            })
            .collect();
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {:.0} | {:.1} | {:.1} | {:.3} | {} |",
            k.0,
            k.1,
            b.conns,
            r.run,
            b.conns as f64 / r.secs.max(1e-9),
            a.total_mib(),
            b.total_mib(),
            b.total_mib() / a.total_mib().max(1e-9),
            by.join(", ")
        );
    }
    let _ = writeln!(md);
}

/// The soak test: RSS at each stage, the growth from the first cycle to the last, and the bulk
/// transfer's speed.
fn soak_table(md: &mut String, aggs: &[(AggKey, Agg)]) {
    let rows = rows_of(aggs, "soak");
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "## Soak\n\nOne bulk transfer alone, then idle connections held throughout; each cycle: `--soak-churn` short connections (each echoed), silent and never-reading clients held during it, one bulk transfer. RSS of every proxy process together, MiB: at the start, with the idle connections held (and the growth per idle connection), after the first and the last cycle (last / first: does memory grow over time?), the peak, and after the idle connections went; the bulk transfer alone and beside them (median and slowest cycle). The series is in results.json and the chart.\n"
    );
    let _ = writeln!(md, "| scenario | implementation | idle | hostile | cycles | churned | start | idle held | KiB per idle conn | first cycle | last cycle | last / first | peak | released | bulk alone MB/s | beside (median, min) | beside / alone |");
    let _ = writeln!(
        md,
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|"
    );
    for (k, r) in rows {
        let Some(s) = r.soak.as_ref().filter(|_| r.status == Status::Ok) else {
            let _ = writeln!(
                md,
                "| {} | {} | {} | | | | {} | | | | | | | | | | |",
                k.0,
                k.1,
                k.3,
                r.message.as_deref().unwrap_or("not run")
            );
            continue;
        };
        let (a, b) = s.cycle_rss().unwrap_or_default();
        let f = |v: Option<f64>| v.map(|v| format!("{v:.1}")).unwrap_or_default();
        let min = s
            .bulk_mb_per_s
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min);
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {a:.1} | {b:.1} | {:.3} | {:.1} | {} | {:.0} | {:.0}, {:.0} | {:.2} |",
            k.0,
            k.1,
            s.idle,
            s.hostile,
            s.cycles,
            s.churned,
            f(s.at("start")),
            f(s.at("idle held")),
            f(s.idle_kib_per_conn()),
            b / a.max(1e-9),
            s.peak_mib(),
            f(s.at("released")),
            s.bulk_alone_mb_per_s,
            s.median_bulk(),
            if min.is_finite() { min } else { 0.0 },
            s.median_bulk() / s.bulk_alone_mb_per_s.max(1e-9),
        );
    }
    let _ = writeln!(md);
}

/// The bulk-idle test: one transfer alone and beside the idle connections.
fn bulk_idle_table(md: &mut String, aggs: &[(AggKey, Agg)]) {
    let rows = rows_of(aggs, "bulk-idle");
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "## Bulk transfer beside idle connections\n\nOne connection's transfer alone, then again while the given number of connections idle through the same chain; beside / alone is the target's ratio (at least 0.9).\n"
    );
    let _ = writeln!(
        md,
        "| scenario | implementation | idle connections | run | MB/s alone | MB/s beside | beside / alone |"
    );
    let _ = writeln!(md, "|---|---|---:|---:|---:|---:|---:|");
    for (k, r) in rows {
        match r.alone_mb_per_s.filter(|_| r.status == Status::Ok) {
            Some(alone) => {
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {} | {alone:.1} | {:.1} | {:.2} |",
                    k.0,
                    k.1,
                    k.3,
                    r.run,
                    r.mb_per_s,
                    r.mb_per_s / alone.max(1e-9)
                );
            }
            None => {
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {} | {} | | |",
                    k.0,
                    k.1,
                    k.3,
                    r.run,
                    r.message.as_deref().unwrap_or("not run")
                );
            }
        }
    }
    let _ = writeln!(md);
}
