//! `ferry-lab testbed`: build the namespaces' chain from the options, start the `--run`
//! commands in their nodes, hold it, and remove it.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use ferry_lab::testbed;

use super::args::{parse_impair, TestbedArgs};

/// `--run`: (node, command).
type Runs = Vec<(String, String)>;
/// `--cap`: (node, percent of one CPU).
type Caps = Vec<(String, u32)>;

pub(crate) fn testbed_cmd(t: TestbedArgs) -> Result<ExitCode> {
    if t.sweep {
        for id in testbed::sweep() {
            println!("removed what run {id} left");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let hold = t.hold;
    let (spec, runs, caps) = bed_spec(t)?;
    let mut tb = testbed::Testbed::build(&spec)?;
    let mut procs = ferry_lab::procs::ProcSet::default();
    let dir = std::env::temp_dir().join(format!("ferry-lab-testbed-{}", tb.id));
    std::fs::create_dir_all(&dir)?;
    let mut started = Vec::new();
    for (i, (node, cmd)) in runs.iter().enumerate() {
        let mut c = tb.command(node, "sh");
        c.args(["-c", &format!("exec {cmd}")]);
        let pid = procs.spawn_cmd(&format!("{node}-{i}"), c, &dir)?;
        if let Some((_, pct)) = caps.iter().find(|(n, _)| n == node) {
            tb.cap(node, pid, *pct)?;
        }
        started.push(serde_json::json!({"node": node, "pid": pid, "command": cmd}));
    }
    announce(&tb, started, &dir, hold);
    let t0 = std::time::Instant::now();
    while hold <= 0.0 || t0.elapsed().as_secs_f64() < hold {
        std::thread::sleep(Duration::from_millis(100));
        procs.check_alive()?;
    }
    for (link, st) in tb.hop_stats() {
        eprintln!("hop {link}: {}", serde_json::to_string(&st)?);
    }
    drop(procs);
    tb.teardown();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(ExitCode::SUCCESS)
}

/// The testbed's spec from the options, with the commands to run and the nodes' caps.
fn bed_spec(t: TestbedArgs) -> Result<(testbed::Spec, Runs, Caps)> {
    let TestbedArgs {
        nodes,
        impair,
        rate,
        congestion,
        run,
        cap,
        fail_after,
        ..
    } = t;
    let names: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let mut spec = testbed::Spec::chain(&names);
    spec.fail_after = fail_after;
    spec.congestion = congestion;
    for a in &impair {
        let (left, rest) = link_arg(&spec, a, "impair")?;
        spec.link_after(&left).impair = Some(parse_impair(rest)?);
    }
    for a in &rate {
        let (left, rest) = link_arg(&spec, a, "rate")?;
        let mbit: u32 = rest
            .parse()
            .with_context(|| format!("--rate {a:?}: give Mbit/s after the colon, e.g. b-c:100"))?;
        spec.link_after(&left).rate_mbit = Some(mbit);
    }
    let node_arg = |a: &str, flag: &str| -> Result<(String, String)> {
        let (n, v) = a
            .split_once('=')
            .with_context(|| format!("--{flag} {a:?}: give node=value"))?;
        if !spec.nodes.iter().any(|x| x == n) {
            bail!("--{flag} {a:?}: no node {n}");
        }
        Ok((n.to_string(), v.to_string()))
    };
    let runs = run
        .iter()
        .map(|a| node_arg(a, "run"))
        .collect::<Result<Vec<_>>>()?;
    let caps = cap
        .iter()
        .map(|a| {
            let (n, v) = node_arg(a, "cap")?;
            let pct: u32 = v
                .parse()
                .with_context(|| format!("--cap {a:?}: give a percentage"))?;
            Ok((n, pct))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((spec, runs, caps))
}

/// Prints the testbed as JSON (stdout) and a line on it (stderr).
fn announce(
    tb: &testbed::Testbed,
    started: Vec<serde_json::Value>,
    dir: &std::path::Path,
    hold: f64,
) {
    let info = serde_json::json!({
        "id": tb.id,
        "congestion": tb.congestion(),
        "watchdog": tb.watchdog_pid(),
        "nodes": tb.nodes.iter().map(|n| serde_json::json!({
            "name": n.name, "namespace": n.ns, "addr": n.addr.to_string()
        })).collect::<Vec<_>>(),
        "namespaces": tb.namespaces(),
        "processes": started,
        "logs": dir.display().to_string(),
    });
    println!("{info}");
    eprintln!(
        "testbed {} is up: {}; {}",
        tb.id,
        tb.nodes
            .iter()
            .map(|n| format!("{} {} ({})", n.name, n.addr, n.ns))
            .collect::<Vec<_>>()
            .join(", "),
        if hold > 0.0 {
            format!("removed in {hold} s")
        } else {
            "Ctrl-C removes it".to_string()
        }
    );
}

/// `a-b` or `a-b:rest` -> the link's left node and the rest.
fn link_arg<'a>(spec: &testbed::Spec, arg: &'a str, flag: &str) -> Result<(String, &'a str)> {
    let (link, rest) = arg.split_once(':').unwrap_or((arg, ""));
    let (l, r) = link
        .split_once('-')
        .with_context(|| format!("--{flag} {arg:?}: name the link as left-right, e.g. b-c"))?;
    let li = spec.nodes.iter().position(|n| n == l);
    let ri = spec.nodes.iter().position(|n| n == r);
    match (li, ri) {
        (Some(i), Some(j)) if j == i + 1 => Ok((l.to_string(), rest)),
        _ => bail!(
            "--{flag} {arg:?}: {link} is not a link of the chain {}",
            spec.nodes.join("-")
        ),
    }
}
