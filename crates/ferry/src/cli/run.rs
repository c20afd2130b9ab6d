//! `ferry run` and `ferry test`: load the configs, describe them or start the instance, and
//! serve until SIGINT/SIGTERM (reloading on SIGHUP).

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;

use ferry::config::{self, Config};

use super::reload::reload;
use super::show_tag;
use super::source::load;

fn describe(cfg: &Config) {
    for ib in &cfg.inbounds {
        let (ip, ports) = match &ib.listen {
            config::Listen::Ip(ip, ports) => (ip.to_string(), ports.clone()),
            config::Listen::Unix(p) => (p.text(), Vec::new()),
            config::Listen::Device => ("its device".to_string(), Vec::new()),
        };
        let ports: Vec<String> = ports
            .iter()
            .map(|(a, b)| {
                if a == b {
                    a.to_string()
                } else {
                    format!("{a}-{b}")
                }
            })
            .collect();
        println!(
            "inbound  {:<16} {:<14} {}{}{}",
            show_tag(&ib.tag),
            ib.protocol,
            ip,
            if ports.is_empty() { "" } else { ":" },
            ports.join(",")
        );
    }
    for (i, ob) in cfg.outbounds.iter().enumerate() {
        println!(
            "outbound {:<16} {:<14}{}",
            show_tag(&ob.tag),
            ob.protocol,
            if i == 0 { " (default)" } else { "" }
        );
    }
    println!(
        "routing  {} rule(s); stats {}",
        cfg.router.rules.len(),
        if cfg.stats.is_some() { "on" } else { "off" }
    );
}

/// What the process was asked to do.
enum Signal {
    /// SIGINT or SIGTERM.
    Stop,
    /// SIGHUP.
    Reload,
}

/// Waits for SIGINT, SIGTERM or SIGHUP.
async fn next_signal(
    term: &mut Option<tokio::signal::unix::Signal>,
    hup: &mut Option<tokio::signal::unix::Signal>,
) -> Signal {
    async fn recv(s: &mut Option<tokio::signal::unix::Signal>) {
        match s {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending().await,
        }
    }
    tokio::select! {
        _ = tokio::signal::ctrl_c() => Signal::Stop,
        _ = recv(term) => Signal::Stop,
        _ = recv(hup) => Signal::Reload,
    }
}

pub(crate) fn run(sources: Vec<String>, test: bool, grace: u64) -> Result<ExitCode> {
    let (cfg, mut running) = match load(&sources) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e:#}");
            return Ok(ExitCode::FAILURE);
        }
    };
    if test {
        describe(&cfg);
        println!("Configuration OK.");
        return Ok(ExitCode::SUCCESS);
    }
    ferry::app::log::init(&cfg.log);
    match ferry::common::sys::raise_nofile_limit() {
        Ok(n) => tracing::debug!("open files limit: {n}"),
        Err(e) => tracing::warn!("open files limit: {e}"),
    }
    // The parse's garbage (JSON trees, geodata buffers) goes back before the inbounds listen.
    ferry::common::sys::release_free_heap();
    let used_default = sources.is_empty();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        use tokio::signal::unix::{signal, SignalKind};
        // Installed before the start line, so a panel's SIGHUP right after it is not fatal.
        let mut term = signal(SignalKind::terminate()).ok();
        let mut hup = signal(SignalKind::hangup()).ok();
        let mut inst = match ferry::app::api::start_instance(cfg).await {
            Ok(i) => i,
            Err(e) => {
                eprintln!("error: {e}");
                return Ok(ExitCode::FAILURE);
            }
        };
        // What loading the config left behind goes back to the system (Xray: FreeOSMemory).
        ferry::common::sys::release_free_heap();
        // Xray's start line on stdout: panels that launch the core wait for a line that
        // contains "core" and ends in "started" (Marzban-node).
        println!(
            "{} [Warning] core: Ferry {} (Xray {} compatible) started",
            ferry::app::log::timestamp(),
            env!("CARGO_PKG_VERSION"),
            ferry::XRAY_COMPAT
        );
        for (tag, net, addr) in &inst.bound() {
            tracing::warn!("ferry {} started: {} {net} {addr}", env!("CARGO_PKG_VERSION"), show_tag(tag));
        }
        if used_default {
            eprintln!(
                "ferry: no config given; serving SOCKS5 and HTTP on 127.0.0.1:1080, direct.\n  \
                 try: curl -x socks5h://127.0.0.1:1080 http://example.com/   or   curl -x http://127.0.0.1:1080 ..."
            );
        }
        while let Signal::Reload = next_signal(&mut term, &mut hup).await {
            reload(&sources, &mut inst, &mut running).await;
        }
        tracing::warn!("stopping: no new connections; waiting up to {grace}s for {} live", inst.live.count());
        let left = inst.stop(Duration::from_secs(grace)).await;
        if left > 0 {
            tracing::warn!("{left} connection(s) still open after the grace period; closing");
        }
        Ok(ExitCode::SUCCESS)
    })
}
