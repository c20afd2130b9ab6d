//! The connection tests' tables: handshakes, churn, soak, and bulk beside idle connections.

use std::fmt::Write as _;

use crate::plan::RunOpts;
use crate::results::{median, Agg, AggKey, Handshakes, Status};

use super::cells::{range, ratio, rows_of, status_cell};

/// The handshake test's table: medians over the runs, with min–max where runs > 1.
pub(super) fn handshake_table(md: &mut String, o: &RunOpts, aggs: &[(AggKey, Agg)]) {
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

/// The churn test: RSS after the first sample and at the end, per process, and the ratio.
pub(super) fn churn_table(md: &mut String, aggs: &[(AggKey, Agg)]) {
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
pub(super) fn soak_table(md: &mut String, aggs: &[(AggKey, Agg)]) {
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
pub(super) fn bulk_idle_table(md: &mut String, aggs: &[(AggKey, Agg)]) {
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
