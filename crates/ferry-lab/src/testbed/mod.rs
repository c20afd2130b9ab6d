//! The reports' testbed on one machine: network namespaces joined by veth pairs in a chain
//! (A -> B -> C -> D), each node with its own address, optional bandwidth shaping (`tbf`) and an
//! impairment hop (delay, jitter, loss) on any link, and a cgroup CPU cap for the process under
//! test. Everything it creates carries the run's id in its name and is removed when the
//! [`Testbed`] is dropped, when the lab is killed (a watchdog process removes it when the lab's
//! end of a pipe closes, whatever the cause), and at the start of the next run (a sweep of every
//! id whose process is gone).
//!
//! Addresses exist only inside the namespaces: node `i` has `198.18.0.(i+1)` on its loopback
//! (198.18.0.0/15 is the benchmarking range, RFC 2544), and the k-th veth segment of the chain
//! is 198.19.k.0/24. Every namespace forwards, and routes each node address along the chain with
//! its own node address as the source, so any process can reach any node by its address.

mod host;
mod ns_runtime;
mod setup;

use std::net::Ipv4Addr;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use crate::impair::{Hop, HopStats, Impair};

use host::{cgroup_root, cleanup_script};

pub use host::{leftovers, stale_ids, sweep, NS_PREFIX};
pub use ns_runtime::NsRuntime;

/// One link of the chain, between node `i` and node `i + 1`.
#[derive(Clone, Debug, Default)]
pub struct LinkSpec {
    /// `tbf` rate limit on both ends, Mbit/s.
    pub rate_mbit: Option<u32>,
    /// An impairment hop in the middle of the link.
    pub impair: Option<Impair>,
}

/// A chain of nodes.
#[derive(Clone, Debug)]
pub struct Spec {
    /// Node names, lowercase letters and digits (`a`, `b`, `c`, `d`).
    pub nodes: Vec<String>,
    /// `nodes.len() - 1` links, in order.
    pub links: Vec<LinkSpec>,
    /// TCP congestion control in every namespace (`cubic`, `bbr`, `reno`); None keeps what a
    /// new namespace gets from the host.
    pub congestion: Option<String>,
    /// Fails the set-up after this many steps (tests of the clean-up on failure).
    #[doc(hidden)]
    pub fail_after: Option<usize>,
}

impl Spec {
    /// The reports' chain A -> B -> C -> D with plain links.
    pub fn abcd() -> Spec {
        Spec::chain(&["a", "b", "c", "d"])
    }

    pub fn chain(nodes: &[&str]) -> Spec {
        Spec {
            nodes: nodes.iter().map(|s| s.to_string()).collect(),
            links: vec![LinkSpec::default(); nodes.len().saturating_sub(1)],
            congestion: None,
            fail_after: None,
        }
    }

    /// The link from `node` to the next one.
    pub fn link_after(&mut self, node: &str) -> &mut LinkSpec {
        let i = self
            .nodes
            .iter()
            .position(|n| n == node)
            .filter(|&i| i + 1 < self.nodes.len())
            .unwrap_or_else(|| panic!("no link after node {node}"));
        &mut self.links[i]
    }
}

/// One node of a built testbed.
#[derive(Clone, Debug)]
pub struct Node {
    pub name: String,
    /// The namespace (`ip netns exec <ns>`).
    pub ns: String,
    /// Its address, reachable from every node.
    pub addr: Ipv4Addr,
}

/// A CPU cap on one node's processes.
struct Cap {
    dir: PathBuf,
}

/// A built testbed; dropping it removes everything it created.
pub struct Testbed {
    pub id: String,
    pub nodes: Vec<Node>,
    /// Every namespace, hop namespaces included, in chain order.
    namespaces: Vec<String>,
    hops: Vec<(String, Hop)>,
    caps: Vec<Cap>,
    watchdog: Option<(Child, ChildStdin)>,
}

static SEQ: AtomicU32 = AtomicU32::new(0);

impl Testbed {
    /// Builds the chain `spec` describes. On failure everything built so far is removed.
    pub fn build(spec: &Spec) -> Result<Testbed> {
        if spec.nodes.len() < 2 || spec.links.len() + 1 != spec.nodes.len() {
            bail!(
                "a testbed chain needs at least two nodes and one link per pair ({} nodes, {} links)",
                spec.nodes.len(),
                spec.links.len()
            );
        }
        for n in &spec.nodes {
            if n.is_empty()
                || n.len() > 4
                || !n
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
            {
                bail!("node name {n:?}: 1-4 lowercase letters or digits");
            }
        }
        sweep();
        let id = format!(
            "{}x{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::SeqCst)
        );
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(format!("cat >/dev/null\n{}", cleanup_script(&id)))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own process group: a Ctrl-C to the lab's group does not reach it.
            .process_group(0)
            .spawn()
            .context("starting the testbed's clean-up watchdog")?;
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| anyhow!("watchdog stdin"))?;
        let mut tb = Testbed {
            id,
            nodes: Vec::new(),
            namespaces: Vec::new(),
            hops: Vec::new(),
            caps: Vec::new(),
            watchdog: Some((child, stdin)),
        };
        tb.set_up(spec)?;
        Ok(tb)
    }

    pub fn node(&self, name: &str) -> &Node {
        self.nodes
            .iter()
            .find(|n| n.name == name)
            .unwrap_or_else(|| panic!("no node {name} in this testbed"))
    }

    /// `program` to run inside `node`'s namespace.
    pub fn command(&self, node: &str, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.node(node).ns]).arg(program);
        c
    }

    /// Runs `argv` inside `node`'s namespace, failing with its stderr.
    pub fn run_in(&self, node: &str, argv: &[String]) -> Result<()> {
        let (prog, args) = argv
            .split_first()
            .ok_or_else(|| anyhow!("an empty command"))?;
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        host::in_ns(&self.node(node).ns, prog, &args)
    }

    /// Whether `node` has the device `dev`, and it is up (`None`: no such device).
    pub fn link_up(&self, node: &str, dev: &str) -> Option<bool> {
        let out = self
            .command(node, "ip")
            .args(["-o", "link", "show", "dev", dev])
            .stderr(std::process::Stdio::null())
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).contains(",UP"))
    }

    /// A tokio runtime whose every thread lives in `node`'s namespace (loadgen in A, the
    /// receiver in D run in-process this way).
    pub fn runtime(&self, node: &str) -> Result<NsRuntime> {
        NsRuntime::new(&self.node(node).ns)
    }

    /// Caps the CPU of `pid` (and every thread and child it starts later) at `pct` percent of
    /// one CPU. One cap per node; capping a second process on the node adds it to the same cap.
    pub fn cap(&mut self, node: &str, pid: u32, pct: u32) -> Result<()> {
        if !(1..=100 * 64).contains(&pct) {
            bail!("a CPU cap of {pct}%: give 1 or more");
        }
        let (root, v2) = cgroup_root()?;
        let dir = root.join(format!("{}-{node}", self.id));
        if !dir.exists() {
            if v2 {
                // cgroup v2 hands the cpu controller down one level at a time.
                std::fs::create_dir_all(&root)
                    .with_context(|| format!("creating {}", root.display()))?;
                for level in [root.parent().unwrap_or(&root), root.as_path()] {
                    let ctl = level.join("cgroup.subtree_control");
                    std::fs::write(&ctl, "+cpu")
                        .with_context(|| format!("enabling cpu in {}", ctl.display()))?;
                }
            }
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            self.caps.push(Cap { dir: dir.clone() });
        }
        // 20 ms periods (the kernel default is 100 ms): a cap evens out within a short
        // measurement, and 5% still gets the 1 ms minimum quota.
        let period = 20_000u64;
        let quota = period * pct as u64 / 100;
        if v2 {
            std::fs::write(dir.join("cpu.max"), format!("{quota} {period}"))?;
        } else {
            std::fs::write(dir.join("cpu.cfs_period_us"), period.to_string())?;
            std::fs::write(dir.join("cpu.cfs_quota_us"), quota.to_string())?;
        }
        std::fs::write(dir.join("cgroup.procs"), pid.to_string())
            .with_context(|| format!("moving {pid} into {}", dir.display()))?;
        Ok(())
    }

    /// How often the capped node's processes were throttled (v1 `cpu.stat` nr_throttled).
    pub fn throttled(&self, node: &str) -> Option<u64> {
        let cap = self
            .caps
            .iter()
            .find(|c| c.dir.ends_with(format!("{}-{node}", self.id)))?;
        let s = std::fs::read_to_string(cap.dir.join("cpu.stat")).ok()?;
        s.lines()
            .find_map(|l| l.strip_prefix("nr_throttled "))
            .and_then(|v| v.trim().parse().ok())
    }

    /// The impairment hops' measurements, by link (`"b-c"`).
    pub fn hop_stats(&self) -> Vec<(String, HopStats)> {
        self.hops
            .iter()
            .map(|(l, h)| (l.clone(), h.stats()))
            .collect()
    }

    /// Clears the hops' counters.
    pub fn reset_hops(&self) {
        for (_, h) in &self.hops {
            h.reset();
        }
    }

    /// The clean-up watchdog's PID (until the testbed is torn down).
    pub fn watchdog_pid(&self) -> Option<u32> {
        self.watchdog.as_ref().map(|(c, _)| c.id())
    }

    /// The TCP congestion control the nodes use.
    pub fn congestion(&self) -> String {
        let Some(n) = self.nodes.first() else {
            return String::new();
        };
        Command::new("ip")
            .args(["netns", "exec", &n.ns, "sysctl", "-n"])
            .arg("net.ipv4.tcp_congestion_control")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    }

    /// Every namespace of this testbed (hops included).
    pub fn namespaces(&self) -> &[String] {
        &self.namespaces
    }

    /// Removes everything now and waits for it (also what dropping does).
    pub fn teardown(&mut self) {
        self.hops.clear();
        if let Some((mut child, stdin)) = self.watchdog.take() {
            drop(stdin);
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(30) {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        self.caps.clear();
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        self.teardown();
    }
}
