//! The transfer tests' tables: throughput (and reverse, iperf3), latency, and memory per idle
//! connection.

use std::fmt::Write as _;

use crate::plan::{RunOpts, Test};
use crate::results::{median, Agg, AggKey, Row, Status};

use super::cells::{human_bytes, range, ratio, status_cell};

/// The table of one bulk test (throughput, reverse, iperf3): speed, CPU and memory, against
/// the baseline and with the spread over runs when asked.
pub(super) fn bulk_table(md: &mut String, o: &RunOpts, aggs: &[(AggKey, Agg)], test: Test) {
    let base = o.baseline.as_deref();
    let these: Vec<_> = aggs
        .iter()
        .filter(|(k, a)| k.2 == test.name() && a.status != Status::Skipped)
        .collect();
    if these.is_empty() {
        return;
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

/// The latency test's table: time to first byte and round trips, first run.
pub(super) fn latency_table(md: &mut String, o: &RunOpts, aggs: &[(AggKey, Agg)]) {
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
}

/// The idle test's table: RSS growth per held connection, in all and by process.
pub(super) fn idle_table(md: &mut String, o: &RunOpts, aggs: &[(AggKey, Agg)]) {
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
}

/// [`crate::results::by_process`] as the median over runs, process by process.
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
