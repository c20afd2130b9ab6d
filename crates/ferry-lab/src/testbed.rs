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

use std::fs::File;
use std::future::Future;
use std::io::Write;
use std::net::Ipv4Addr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use crate::impair::{Hop, HopStats, Impair};
use crate::sys;

/// Prefix of every namespace the lab creates: `ferrylab-<id>-<node>`.
pub const NS_PREFIX: &str = "ferrylab-";

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

fn ip(args: &[&str]) -> Result<()> {
    run(Command::new("ip").args(args))
}

fn in_ns(ns: &str, program: &str, args: &[&str]) -> Result<()> {
    run(Command::new("ip")
        .args(["netns", "exec", ns, program])
        .args(args))
}

/// Where CPU caps live: cgroup v1's cpu controller, else the v2 unified hierarchy.
fn cgroup_root() -> Result<(PathBuf, bool)> {
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
fn cleanup_script(id: &str) -> String {
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
fn allow_congestion(cc: &str) -> Result<()> {
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

    fn set_up(&mut self, spec: &Spec) -> Result<()> {
        let mut steps = 0usize;
        let mut step = |what: &str| -> Result<()> {
            steps += 1;
            if spec.fail_after.is_some_and(|n| steps > n) {
                bail!("injected failure before {what}");
            }
            Ok(())
        };
        // The chain as namespaces: nodes, and a hop namespace inside each impaired link.
        // (position in path, Some(node index) or None for a hop)
        let mut path: Vec<(String, Option<usize>)> = Vec::new();
        for (i, n) in spec.nodes.iter().enumerate() {
            let ns = format!("{NS_PREFIX}{}-{n}", self.id);
            path.push((ns.clone(), Some(i)));
            self.nodes.push(Node {
                name: n.clone(),
                ns,
                addr: Ipv4Addr::new(198, 18, 0, (i + 1) as u8),
            });
            if let Some(l) = spec.links.get(i) {
                if l.impair.is_some() {
                    let next = &spec.nodes[i + 1];
                    path.push((format!("{NS_PREFIX}{}-{n}{next}", self.id), None));
                }
            }
        }
        for (ns, _) in &path {
            step("a namespace")?;
            ip(&["netns", "add", ns])?;
            self.namespaces.push(ns.clone());
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
            in_ns(
                ns,
                "sysctl",
                &[
                    "-qw",
                    "net.ipv4.ip_forward=1",
                    "net.ipv4.conf.all.rp_filter=0",
                    "net.ipv4.conf.default.rp_filter=0",
                    "net.ipv4.conf.all.send_redirects=0",
                ],
            )?;
            if let Some(cc) = &spec.congestion {
                allow_congestion(cc)?;
                in_ns(
                    ns,
                    "sysctl",
                    &["-qw", &format!("net.ipv4.tcp_congestion_control={cc}")],
                )
                .with_context(|| format!("congestion control {cc:?}"))?;
            }
        }
        // Interface names inside a namespace: "to-<neighbour>" (node name, or "hop").
        let short = |p: &(String, Option<usize>)| match p.1 {
            Some(i) => spec.nodes[i].clone(),
            None => "hop".to_string(),
        };
        for k in 0..path.len() - 1 {
            step("a veth pair")?;
            let (l, r) = (&path[k], &path[k + 1]);
            let (ldev, rdev) = (format!("to-{}", short(r)), format!("to-{}", short(l)));
            ip(&[
                "link", "add", &ldev, "netns", &l.0, "type", "veth", "peer", "name", &rdev,
                "netns", &r.0,
            ])?;
            let seg = k + 1;
            ip(&[
                "-n",
                &l.0,
                "addr",
                "add",
                &format!("198.19.{seg}.1/24"),
                "dev",
                &ldev,
            ])?;
            ip(&[
                "-n",
                &r.0,
                "addr",
                "add",
                &format!("198.19.{seg}.2/24"),
                "dev",
                &rdev,
            ])?;
            ip(&["-n", &l.0, "link", "set", &ldev, "up"])?;
            ip(&["-n", &r.0, "link", "set", &rdev, "up"])?;
        }
        // Node addresses on loopback, and routes to every other node along the chain.
        for (p, (ns, node)) in path.iter().enumerate() {
            let own = node.map(|i| self.nodes[i].addr);
            if let Some(a) = own {
                ip(&["-n", ns, "addr", "add", &format!("{a}/32"), "dev", "lo"])?;
            }
            for (q, (_, other)) in path.iter().enumerate() {
                let Some(j) = other else { continue };
                if q == p {
                    continue;
                }
                let dest = format!("{}/32", self.nodes[*j].addr);
                let (via, dev) = if q > p {
                    (
                        format!("198.19.{}.2", p + 1),
                        format!("to-{}", short(&path[p + 1])),
                    )
                } else {
                    (
                        format!("198.19.{}.1", p),
                        format!("to-{}", short(&path[p - 1])),
                    )
                };
                let mut args = vec![
                    "-n".to_string(),
                    ns.clone(),
                    "route".into(),
                    "add".into(),
                    dest,
                    "via".into(),
                    via,
                    "dev".into(),
                    dev,
                ];
                if let Some(a) = own {
                    args.push("src".into());
                    args.push(a.to_string());
                }
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                ip(&args)?;
            }
        }
        // Shaping: tbf on both ends' egress of each limited link.
        for (i, l) in spec.links.iter().enumerate() {
            let Some(rate) = l.rate_mbit else { continue };
            step("link shaping")?;
            let left = path
                .iter()
                .position(|p| p.1 == Some(i))
                .ok_or_else(|| anyhow!("node {i} not in path"))?;
            // Shape where the link meets each node (the hop, if any, stays unshaped inside).
            let right = path
                .iter()
                .position(|p| p.1 == Some(i + 1))
                .ok_or_else(|| anyhow!("node {} not in path", i + 1))?;
            let burst = format!("{}kb", (rate as u64 * 1000 / 8 / 100).max(32));
            let rate = format!("{rate}mbit");
            for (ns_i, dev_to) in [(left, left + 1), (right, right - 1)] {
                let dev = format!("to-{}", short(&path[dev_to]));
                in_ns(
                    &path[ns_i].0,
                    "tc",
                    &[
                        "qdisc", "add", "dev", &dev, "root", "tbf", "rate", &rate, "burst", &burst,
                        "latency", "100ms",
                    ],
                )?;
            }
        }
        // Impairment hops: a TUN device, and every packet from either side routed into it.
        for (p, (ns, node)) in path.iter().enumerate() {
            if node.is_some() {
                continue;
            }
            step("an impairment hop")?;
            let left_node = path[p - 1].1.ok_or_else(|| anyhow!("hop after a hop"))?;
            let cfg = spec.links[left_node]
                .impair
                .ok_or_else(|| anyhow!("hop without impairment"))?;
            let f = File::open(format!("/var/run/netns/{ns}"))
                .with_context(|| format!("opening namespace {ns}"))?;
            let hop = Hop::start(f, "impair0", cfg)?;
            self.hops.push((
                format!("{}-{}", spec.nodes[left_node], spec.nodes[left_node + 1]),
                hop,
            ));
            ip(&["-n", ns, "link", "set", "impair0", "up"])?;
            let (ldev, rdev) = (
                format!("to-{}", short(&path[p - 1])),
                format!("to-{}", short(&path[p + 1])),
            );
            for dev in [&ldev, &rdev] {
                ip(&["-n", ns, "rule", "add", "iif", dev, "lookup", "100"])?;
            }
            ip(&[
                "-n", ns, "route", "add", "default", "dev", "impair0", "table", "100",
            ])?;
        }
        step("done")?;
        Ok(())
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

/// A multi-threaded tokio runtime whose workers (and blocking threads) live in one namespace.
pub struct NsRuntime {
    rt: tokio::runtime::Runtime,
    ns: Arc<File>,
}

impl NsRuntime {
    pub fn new(ns: &str) -> Result<NsRuntime> {
        let f = Arc::new(
            File::open(format!("/var/run/netns/{ns}"))
                .with_context(|| format!("opening namespace {ns}"))?,
        );
        // Prove entering works before handing it to threads that cannot report failure.
        let probe = f.clone();
        std::thread::spawn(move || sys::enter_netns(&probe))
            .join()
            .map_err(|_| anyhow!("namespace probe thread panicked"))?
            .with_context(|| format!("entering namespace {ns}"))?;
        let g = f.clone();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .on_thread_start(move || {
                if let Err(e) = sys::enter_netns(&g) {
                    // Checked above; a failure now would put sockets in the wrong namespace.
                    let _ = writeln!(std::io::stderr(), "entering the namespace: {e}");
                    std::process::abort();
                }
            })
            .build()?;
        Ok(NsRuntime { rt, ns: f })
    }

    /// Runs `fut` to completion on a thread inside the namespace.
    pub fn block_on<F>(&self, fut: F) -> F::Output
    where
        F: Future + Send,
        F::Output: Send,
    {
        std::thread::scope(|s| {
            s.spawn(|| {
                if let Err(e) = sys::enter_netns(&self.ns) {
                    let _ = writeln!(std::io::stderr(), "entering the namespace: {e}");
                    std::process::abort();
                }
                self.rt.block_on(fut)
            })
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
        })
    }

    pub fn handle(&self) -> &tokio::runtime::Handle {
        self.rt.handle()
    }
}
