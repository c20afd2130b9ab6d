//! The small subcommands: `list` the scenarios, and `receiver` / `loadgen` alone.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};

use ferry_lab::loadgen::{self, BulkOpts, Target};
use ferry_lab::runner;
use ferry_lab::{receiver, scenario, wire};

use super::args::{ListArgs, LoadgenArgs, Probe, ReceiverArgs};

pub(crate) fn list_cmd(a: ListArgs) -> Result<ExitCode> {
    let dir = a.scenario_dir.unwrap_or_else(scenario::default_dir);
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

pub(crate) fn receiver_cmd(a: ReceiverArgs) -> Result<ExitCode> {
    let listen = a.listen;
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

pub(crate) fn loadgen_cmd(a: LoadgenArgs) -> Result<ExitCode> {
    let LoadgenArgs {
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
    } = a;
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
