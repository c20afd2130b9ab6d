//! results.md of a run: the command, the testbed, a table per test, errors and charts.

use std::fmt::Write as _;

use crate::plan::{RunOpts, Test};
use crate::results::{aggregate, command_line, Row, Status};

use super::cells::short;
use super::conns::{bulk_idle_table, churn_table, handshake_table, soak_table};
use super::transfer::{bulk_table, idle_table, latency_table};

/// The Markdown report.
pub fn markdown(o: &RunOpts, rows: &[Row], charts: &[(String, String)]) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# ferry-lab results\n");
    let _ = writeln!(md, "Command: `{}`\n", command_line());
    testbed_line(&mut md, o);
    let aggs = aggregate(rows);
    for test in Test::BULK {
        bulk_table(&mut md, o, &aggs, test);
    }
    latency_table(&mut md, o, &aggs);
    idle_table(&mut md, o, &aggs);
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

/// The testbed's conditions, when the run was on the testbed.
fn testbed_line(md: &mut String, o: &RunOpts) {
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
}
