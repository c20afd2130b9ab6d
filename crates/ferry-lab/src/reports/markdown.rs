//! results.md of a report: the command, then a table shaped like the report's.

use std::fmt::Write as _;

use crate::plan::ALL_IMPLS;
use crate::results::{command_line, median, FlatRow};

use super::opts::{vision, Case, ReportOpts};

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
        "000" | "004" => loopback_table(&mut md, cases, rows, &impls, &conns),
        "001" | "002" => capped_table(&mut md, o, cases, rows, &impls, &conns),
        "003" => lossy_table(&mut md, cases, rows, &impls),
        _ => {}
    }
    md
}

/// 000 and 004: throughput and CPU per GB for each connection count.
fn loopback_table(
    md: &mut String,
    cases: &[Case],
    rows: &[FlatRow],
    impls: &[String],
    conns: &[usize],
) {
    let _ = writeln!(md, "Loopback: every process on this machine's 127.0.0.1.\n");
    let mut head = "| case | implementation |".to_string();
    let mut rule = "|---|---|".to_string();
    for c in conns {
        let _ = write!(head, " Gbit/s x{c} | CPU-s/GB x{c} |");
        rule.push_str("---:|---:|");
    }
    let _ = writeln!(md, "{head}\n{rule}");
    for c in cases {
        for i in impls {
            let mut line = format!("| {} | {i} |", c.label);
            let mut any = false;
            for &n in conns {
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

/// 001 and 002: throughput for each CPU cap, a line per scenario, record size,
/// implementation and connection count.
fn capped_table(
    md: &mut String,
    o: &ReportOpts,
    cases: &[Case],
    rows: &[FlatRow],
    impls: &[String],
    conns: &[usize],
) {
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
        for i in impls {
            for &n in conns {
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
                            let _ = write!(line, " {} |", fmt_cell(bad, &ok, |r| Some(r.gbps), 2));
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

/// 003: throughput, CPU, time to first byte and round trips on each link.
fn lossy_table(md: &mut String, cases: &[Case], rows: &[FlatRow], impls: &[String]) {
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
        for i in impls {
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
