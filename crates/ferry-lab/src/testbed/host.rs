//! The host side of testbeds: running `ip` and friends, where CPU caps live, and finding and
//! removing what runs left behind.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

/// Prefix of every namespace the lab creates: `ferrylab-<id>-<node>`.
pub const NS_PREFIX: &str = "ferrylab-";

/// Runs a command, failing with its stderr.
fn run(cmd: &mut Command) -> Result<()> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

pub(super) fn ip(args: &[&str]) -> Result<()> {
    run(Command::new("ip").args(args))
}

pub(super) fn in_ns(ns: &str, program: &str, args: &[&str]) -> Result<()> {
    run(Command::new("ip")
        .args(["netns", "exec", ns, program])
        .args(args))
}

/// Where CPU caps live: cgroup v1's cpu controller, else the v2 unified hierarchy.
pub(super) fn cgroup_root() -> Result<(PathBuf, bool)> {
    let v1 = Path::new("/sys/fs/cgroup/cpu");
    if v1.join("cpu.cfs_quota_us").exists() {
        return Ok((v1.join("ferry-lab"), false));
    }
    let v2 = Path::new("/sys/fs/cgroup");
    if v2.join("cgroup.controllers").exists() {
        return Ok((v2.join("ferry-lab"), true));
    }
    bail!("no cgroup cpu controller at /sys/fs/cgroup/cpu (v1) or /sys/fs/cgroup (v2)")
}

/// The shell that removes everything of run `id`: processes in its namespaces and caps first,
/// then the namespaces (their veths and TUN devices go with them), then the cgroups.
pub(super) fn cleanup_script(id: &str) -> String {
    format!(
        r#"
id='{id}'
for ns in $(ip netns list | awk '{{print $1}}' | grep "^{NS_PREFIX}$id-"); do
  for p in $(ip netns pids "$ns"); do kill -9 "$p" 2>/dev/null; done
done
for cg in /sys/fs/cgroup/cpu/ferry-lab/"$id"-* /sys/fs/cgroup/ferry-lab/"$id"-*; do
  [ -d "$cg" ] || continue
  for p in $(cat "$cg/cgroup.procs"); do kill -9 "$p" 2>/dev/null; done
done
for ns in $(ip netns list | awk '{{print $1}}' | grep "^{NS_PREFIX}$id-"); do
  ip netns del "$ns" 2>/dev/null
done
for cg in /sys/fs/cgroup/cpu/ferry-lab/"$id"-* /sys/fs/cgroup/ferry-lab/"$id"-*; do
  [ -d "$cg" ] || continue
  i=0
  while ! rmdir "$cg" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done
done
"#
    )
}

/// A namespace other than the host's may only choose a congestion control the host lists in
/// `tcp_allowed_congestion_control`; adds `cc` there when the kernel has it (the host's own
/// default is not changed).
pub(super) fn allow_congestion(cc: &str) -> Result<()> {
    let read = |k: &str| {
        std::fs::read_to_string(format!("/proc/sys/net/ipv4/{k}"))
            .map(|s| s.split_whitespace().map(String::from).collect::<Vec<_>>())
            .unwrap_or_default()
    };
    let mut allowed = read("tcp_allowed_congestion_control");
    if allowed.iter().any(|a| a == cc) {
        return Ok(());
    }
    if !read("tcp_available_congestion_control")
        .iter()
        .any(|a| a == cc)
    {
        bail!(
            "congestion control {cc:?} is not in this kernel (available: {})",
            read("tcp_available_congestion_control").join(" ")
        );
    }
    allowed.push(cc.to_string());
    std::fs::write(
        "/proc/sys/net/ipv4/tcp_allowed_congestion_control",
        allowed.join(" "),
    )
    .with_context(|| format!("allowing congestion control {cc} in namespaces"))
}

/// Ids of runs whose process is gone but whose namespaces or cgroups remain.
pub fn stale_ids() -> Vec<String> {
    let mut names = Vec::new();
    if let Ok(out) = Command::new("ip").args(["netns", "list"]).output() {
        for l in String::from_utf8_lossy(&out.stdout).lines() {
            if let Some(n) = l.split_whitespace().next() {
                names.push(n.to_string());
            }
        }
    }
    let mut ids: Vec<String> = names
        .iter()
        .filter_map(|n| n.strip_prefix(NS_PREFIX))
        .filter_map(|rest| rest.rsplit_once('-').map(|(id, _)| id.to_string()))
        .collect();
    if let Ok((root, _)) = cgroup_root() {
        if let Ok(rd) = std::fs::read_dir(&root) {
            for e in rd.flatten() {
                if let Some(n) = e.file_name().to_str() {
                    if let Some((id, _)) = n.rsplit_once('-') {
                        ids.push(id.to_string());
                    }
                }
            }
        }
    }
    ids.sort();
    ids.dedup();
    ids.retain(|id| {
        let pid = id.split('x').next().and_then(|p| p.parse::<u32>().ok());
        match pid {
            Some(pid) => pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists(),
            None => false,
        }
    });
    ids
}

/// Removes what killed runs left behind; returns the ids removed.
pub fn sweep() -> Vec<String> {
    let ids = stale_ids();
    for id in &ids {
        let _ = Command::new("sh")
            .arg("-c")
            .arg(cleanup_script(id))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
    ids
}

/// What a run of `id` has left: namespaces, cgroups and processes inside either.
pub fn leftovers(id: &str) -> Vec<String> {
    let mut v = Vec::new();
    if let Ok(out) = Command::new("ip").args(["netns", "list"]).output() {
        for l in String::from_utf8_lossy(&out.stdout).lines() {
            if l.starts_with(&format!("{NS_PREFIX}{id}-")) {
                v.push(format!("namespace {l}"));
            }
        }
    }
    for root in ["/sys/fs/cgroup/cpu/ferry-lab", "/sys/fs/cgroup/ferry-lab"] {
        if let Ok(rd) = std::fs::read_dir(root) {
            for e in rd.flatten() {
                let n = e.file_name().to_string_lossy().to_string();
                if n.starts_with(&format!("{id}-")) {
                    v.push(format!("cgroup {root}/{n}"));
                }
            }
        }
    }
    v
}
