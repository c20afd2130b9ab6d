//! `ferry-lab run`: for each scenario and implementation, start the chain's processes on free
//! loopback ports, move verified bytes through it, sample the proxies' CPU and memory, stop
//! everything, and record one row per measurement.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use crate::loadgen::{self, BulkOpts, Target};
use crate::procs::{self, ProcSet};
use crate::receiver;
use crate::results::{Row, Status};
use crate::scenario::{self, Entry, Scenario};
use crate::testbed::{NsRuntime, Spec, Testbed};

pub use crate::plan::{RunOpts, Test, TestbedPlan, ALL_IMPLS, HANDSHAKE_MSG};

/// The folder scripts/peers.sh installs into.
pub fn peers_dir() -> PathBuf {
    if let Ok(p) = std::env::var("FERRY_PEERS") {
        return PathBuf::from(p);
    }
    let cache = std::env::var("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into())).join(".cache")
        });
    cache.join("ferry/peers/bin")
}

/// The workspace root (two levels above this crate).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Builds ferry in release mode and returns the binary path.
pub fn build_ferry() -> Result<PathBuf> {
    let root = workspace_root();
    eprintln!("building ferry: cargo build --release -p ferry");
    let st = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "--release", "-p", "ferry"])
        .current_dir(&root)
        .status()
        .context("running cargo")?;
    if !st.success() {
        bail!("cargo build --release -p ferry failed");
    }
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root.join("target"));
    Ok(target.join("release/ferry"))
}

/// One planned measurement.
#[derive(Clone, Debug)]
struct Job {
    scenario: String,
    imp: String,
    test: Test,
    /// Connections (throughput/reverse), idle connections (idle), 1 (latency).
    param: usize,
    run: usize,
}

/// One measurement's testbed: loadgen's runtime in A, the receiver's in D (fields drop in
/// order: the runtimes leave the namespaces before the testbed removes them).
struct Bed {
    a: NsRuntime,
    d: NsRuntime,
    tb: Testbed,
}

impl Bed {
    fn build(plan: &TestbedPlan) -> Result<Bed> {
        let mut spec = Spec::abcd();
        spec.congestion = plan.congestion.clone();
        let bc = spec.link_after("b");
        bc.impair = plan.impair;
        bc.rate_mbit = plan.rate_mbit;
        let tb = Testbed::build(&spec).context("building the testbed")?;
        Ok(Bed {
            a: tb.runtime("a")?,
            d: tb.runtime("d")?,
            tb,
        })
    }

    fn addr(&self, node: &str) -> std::net::IpAddr {
        self.tb.node(node).addr.into()
    }
}

/// The node a chain's process runs on: the client side (or a single relay) in B, everything
/// else (server, nginx in front of it, fallback targets, REALITY sites) in C.
fn node_of(name: &str, processes: usize) -> &'static str {
    if processes == 1 || name == "client" {
        "b"
    } else {
        "c"
    }
}

/// Per-run shared state.
struct Ctx<'a> {
    o: &'a RunOpts,
    rt: tokio::runtime::Runtime,
    /// The current measurement's testbed (None on loopback).
    bed: RefCell<Option<Bed>>,
    cert: Option<Cert>,
    ferry_bin: Option<PathBuf>,
    nofile: u64,
}

/// Runs everything, writing results.json after each measurement; returns the rows (the report
/// is [`crate::report::run_and_report`]'s part).
pub fn run(o: &RunOpts) -> Result<Vec<Row>> {
    // Processes run in their own folders: every path handed to them must be absolute.
    let mut abs = o.clone();
    abs.out = std::path::absolute(&o.out)?;
    abs.scenario_dir = std::path::absolute(&o.scenario_dir)?;
    abs.peers_dir = std::path::absolute(&o.peers_dir)?;
    let o = &abs;
    std::fs::create_dir_all(&o.out).with_context(|| format!("creating {}", o.out.display()))?;
    let nofile = crate::sys::raise_nofile();
    let mut rows: Vec<Row> = Vec::new();
    let mut scns: Vec<Scenario> = Vec::new();
    for name in &o.scenarios {
        match scenario::load(&o.scenario_dir, name) {
            Ok(s) => scns.push(s),
            Err(e) => rows.push(Row::failed(
                name,
                "-",
                "-",
                0,
                0,
                Status::Error,
                format!("{e:#}"),
            )),
        }
    }
    let mut jobs = Vec::new();
    for s in &scns {
        let impls: Vec<String> = if s.entry == Entry::Direct {
            vec!["loopback".to_string()]
        } else {
            o.impls
                .iter()
                .filter(|i| s.impls.contains_key(i.as_str()))
                .cloned()
                .collect()
        };
        for i in &o.impls {
            if s.entry != Entry::Direct && !s.impls.contains_key(i.as_str()) {
                rows.push(Row::failed(
                    &s.name,
                    i,
                    "-",
                    0,
                    0,
                    Status::Skipped,
                    format!("{i} has no template for {}", s.name),
                ));
            }
        }
        for imp in &impls {
            for t in &o.tests {
                let params: Vec<usize> = match t {
                    Test::Throughput | Test::Reverse | Test::Iperf3 | Test::Iperf3Reverse => {
                        o.streams.clone()
                    }
                    Test::Latency => vec![1],
                    Test::Handshake => vec![o.handshake_concurrency],
                    Test::Idle | Test::BulkIdle => o.idle.clone(),
                    Test::Churn => vec![o.churn],
                    Test::Soak => vec![o.soak_idle],
                };
                for p in params {
                    for r in 1..=o.runs {
                        jobs.push(Job {
                            scenario: s.name.clone(),
                            imp: imp.clone(),
                            test: *t,
                            param: p,
                            run: r,
                        });
                    }
                }
            }
        }
    }
    let needs_ferry = jobs.iter().any(|j| j.imp == "ferry");
    let ferry_bin = match (&o.ferry_bin, needs_ferry) {
        (Some(p), _) => Some(
            std::fs::canonicalize(p).with_context(|| format!("ferry binary {}", p.display()))?,
        ),
        (None, true) => Some(build_ferry()?),
        (None, false) => None,
    };
    let work = o.out.join("work");
    std::fs::create_dir_all(&work)?;
    let cert = if scns.iter().any(|s| s.tls) {
        Some(make_cert(&work)?)
    } else {
        None
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let ctx = Ctx {
        o,
        rt,
        bed: RefCell::new(None),
        cert,
        ferry_bin,
        nofile,
    };
    // Ferry's support for each scenario, checked once with `ferry test -c`.
    let mut ferry_support: BTreeMap<String, Result<(), (Status, String)>> = BTreeMap::new();
    let total = jobs.len();
    for (n, job) in jobs.iter().enumerate() {
        let Some(s) = scns.iter().find(|s| s.name == job.scenario) else {
            continue;
        };
        let label = format!(
            "[{}/{total}] {} {} {} {} run {}/{}",
            n + 1,
            job.scenario,
            job.imp,
            job.test.name(),
            param_label(job.test, job.param),
            job.run,
            o.runs
        );
        eprint!("{label} ... ");
        let t0 = Instant::now();
        let pre = if job.imp == "ferry" {
            ferry_support
                .entry(s.name.clone())
                .or_insert_with(|| ctx.ferry_check(s))
                .clone()
        } else {
            Ok(())
        };
        let row = match pre {
            Err((st, msg)) => Row::failed(
                &job.scenario,
                &job.imp,
                job.test.name(),
                job.param,
                job.run,
                st,
                msg,
            ),
            Ok(()) => ctx.measure(s, job),
        };
        eprintln!("{} ({:.1}s)", row.summary(), t0.elapsed().as_secs_f64());
        rows.push(row);
        crate::results::write_json(&o.out, o, &rows)?;
    }
    Ok(rows)
}

fn param_label(t: Test, p: usize) -> String {
    match t {
        Test::Throughput | Test::Reverse | Test::Iperf3 | Test::Iperf3Reverse => {
            format!("x{p}")
        }
        Test::Idle | Test::BulkIdle => format!("{p} conns"),
        Test::Churn => format!("{p} conns"),
        Test::Soak => format!("{p} idle"),
        Test::Handshake => format!("{p} in parallel"),
        Test::Latency => String::new(),
    }
}

/// The self-signed certificate of a run.
#[derive(Clone, Debug)]
struct Cert {
    cert: PathBuf,
    key: PathBuf,
    sha256: String,
}

const SERVER_NAME: &str = "lab.ferry.test";
/// The REALITY scenarios' website (their `target`, nginx) serves this name with the same
/// certificate (`{{reality_sni}}`).
const REALITY_SITE: &str = "reality.test";

fn make_cert(dir: &Path) -> Result<Cert> {
    let cert = dir.join("cert.pem");
    let key = dir.join("key.pem");
    let out = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-days", "30", "-subj"])
        .arg(format!("/CN={SERVER_NAME}"))
        .arg("-addext")
        .arg(format!(
            "subjectAltName=DNS:{SERVER_NAME},DNS:{REALITY_SITE}"
        ))
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .context("running openssl")?;
    if !out.status.success() {
        bail!(
            "openssl req failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let fp = Command::new("openssl")
        .args(["x509", "-noout", "-fingerprint", "-sha256", "-in"])
        .arg(&cert)
        .output()
        .context("running openssl")?;
    let text = String::from_utf8_lossy(&fp.stdout);
    let hex: String = text
        .split('=')
        .nth(1)
        .unwrap_or("")
        .trim()
        .replace(':', "")
        .to_ascii_lowercase();
    if hex.len() != 64 {
        bail!("could not read the certificate fingerprint from {text:?}");
    }
    Ok(Cert {
        cert,
        key,
        sha256: hex,
    })
}

/// Values every template may use, besides ports.
pub fn base_vars(
    s: &Scenario,
    dir: &Path,
    cert: Option<(&Path, &Path, &str)>,
) -> BTreeMap<String, String> {
    let mut v = BTreeMap::new();
    v.insert("uuid".into(), "b831381d-6324-4d53-ad4f-8cda48b30811".into());
    v.insert("password".into(), "ferry-lab-password".into());
    // 16- and 32-byte keys, base64, for Shadowsocks 2022.
    v.insert("psk16".into(), "ZmVycnktbGFiLWtleS0xNg==".into());
    v.insert(
        "psk32".into(),
        "ZmVycnktbGFiLWtleS0zMi1ieXRlcy1sb25nLTEyMzQ=".into(),
    );
    v.insert("server_name".into(), SERVER_NAME.into());
    v.insert("ws_path".into(), "/lab-ws".into());
    v.insert("dir".into(), dir.display().to_string());
    // Where each role's process is reached: all on loopback here; on the testbed the entry
    // (client) is node B, the server node C and the receiver node D. Processes of one node
    // reach each other on 127.0.0.1 (each namespace has its own loopback).
    for h in ["entry_host", "server_host", "target_host"] {
        v.insert(h.into(), "127.0.0.1".into());
    }
    if let Some((c, k, sha)) = cert {
        v.insert("cert".into(), c.display().to_string());
        v.insert("key".into(), k.display().to_string());
        v.insert("cert_sha256".into(), sha.to_string());
    }
    for (k, val) in &s.vars {
        v.insert(k.clone(), val.clone());
    }
    v
}

/// A started chain.
struct Chain {
    procs: ProcSet,
    target: Target,
}

/// Clears the measurement's testbed when the measurement ends, however it ends.
struct ClearBed<'a>(&'a RefCell<Option<Bed>>);

impl Drop for ClearBed<'_> {
    fn drop(&mut self) {
        self.0.borrow_mut().take();
    }
}

impl Ctx<'_> {
    /// Runs a loadgen future: in node A's namespace on the testbed, else here.
    fn block_on<F>(&self, fut: F) -> F::Output
    where
        F: Future + Send,
        F::Output: Send,
    {
        match self.bed.borrow().as_ref() {
            Some(b) => b.a.block_on(fut),
            None => self.rt.block_on(fut),
        }
    }

    /// The testbed's conditions for the row, with what the hop and the cap measured.
    fn bed_row(&self) -> Option<crate::results::TestbedRow> {
        let bed = self.bed.borrow();
        let b = bed.as_ref()?;
        let plan = self.o.testbed.clone().unwrap_or_default();
        Some(crate::results::TestbedRow {
            congestion: b.tb.congestion(),
            hop: b.tb.hop_stats().into_iter().next().map(|(_, h)| h),
            throttled_periods: plan.cap.as_ref().and_then(|(n, _)| b.tb.throttled(n)),
            plan,
        })
    }

    fn bin(&self, name: &str) -> Result<PathBuf> {
        if name == "ferry" {
            return self
                .ferry_bin
                .clone()
                .ok_or_else(|| anyhow!("no ferry binary"));
        }
        let p = self.o.peers_dir.join(name);
        if !p.exists() {
            bail!(
                "peer {name} is not installed at {} (run scripts/peers.sh)",
                p.display()
            );
        }
        Ok(p)
    }

    fn cert_vars(&self) -> Option<(&Path, &Path, &str)> {
        self.cert
            .as_ref()
            .map(|c| (c.cert.as_path(), c.key.as_path(), c.sha256.as_str()))
    }

    /// Renders every config of `imp` into `dir`; returns (process, bin, args, config path, listen ports).
    #[allow(clippy::type_complexity)]
    fn render(
        &self,
        s: &Scenario,
        imp: &str,
        dir: &Path,
        target_port: u16,
    ) -> Result<(
        Vec<(String, PathBuf, Vec<String>, Vec<u16>)>,
        BTreeMap<String, String>,
    )> {
        let procs = s
            .processes(imp)
            .ok_or_else(|| anyhow!("{imp} has no template for {}", s.name))?;
        let mut vars = base_vars(s, dir, self.cert_vars());
        vars.insert("target_port".into(), target_port.to_string());
        if let Some(b) = self.bed.borrow().as_ref() {
            for (h, node) in [
                ("entry_host", "b"),
                ("server_host", "c"),
                ("target_host", "d"),
            ] {
                vars.insert(h.into(), b.addr(node).to_string());
            }
        }
        let mut texts = Vec::new();
        for p in &procs {
            let t = s.template_text(&self.o.scenario_dir, p)?;
            let mut names: Vec<String> = p
                .args
                .iter()
                .flat_map(|a| scenario::placeholders(a))
                .collect();
            if let Some(t) = &t {
                names.extend(scenario::placeholders(t));
            }
            names.extend(p.listen.iter().cloned());
            for n in names {
                if n.ends_with("_port") && !vars.contains_key(&n) {
                    vars.insert(n, procs::free_port()?.to_string());
                }
            }
            texts.push(t);
        }
        let mut out = Vec::new();
        for (p, t) in procs.iter().zip(texts) {
            let cfg = dir.join(format!("{}.{}", p.name, p.config_ext()));
            let mut pv = vars.clone();
            pv.insert("config".into(), cfg.display().to_string());
            if let Some(t) = t {
                let text = scenario::render(&t, &pv)
                    .with_context(|| format!("{}: {imp}/{}", s.name, p.name))?;
                if p.config_ext() == "json" {
                    serde_json::from_str::<serde_json::Value>(&text).with_context(|| {
                        format!("{}: {imp}/{} renders to invalid JSON", s.name, p.name)
                    })?;
                }
                std::fs::write(&cfg, text)?;
            }
            let args = p
                .args
                .iter()
                .map(|a| scenario::render(a, &pv))
                .collect::<Result<Vec<_>>>()?;
            let listen = p
                .listen
                .iter()
                .map(|n| {
                    vars.get(n)
                        .and_then(|v| v.parse().ok())
                        .ok_or_else(|| anyhow!("listen port {n} is unknown"))
                })
                .collect::<Result<Vec<u16>>>()?;
            out.push((p.name.clone(), self.bin(&p.bin)?, args, listen));
        }
        Ok((out, vars))
    }

    /// `ferry test -c` on each of ferry's configs for `s`.
    fn ferry_check(&self, s: &Scenario) -> Result<(), (Status, String)> {
        let dir = self
            .o
            .out
            .join("work")
            .join(format!("{}-ferry-check", s.name));
        let _ = std::fs::create_dir_all(&dir);
        let (procs, _) = self
            .render(s, "ferry", &dir, 9)
            .map_err(|e| (Status::Error, format!("{e:#}")))?;
        for (name, bin, _, _) in procs {
            if Some(&bin) != self.ferry_bin.as_ref() {
                continue;
            }
            let cfg = dir.join(format!("{name}.json"));
            let out = Command::new(&bin)
                .arg("test")
                .arg("-c")
                .arg(&cfg)
                .output()
                .map_err(|e| (Status::Error, format!("running {}: {e}", bin.display())))?;
            if !out.status.success() {
                let text = format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
                let line = text
                    .lines()
                    .find(|l| l.contains("error"))
                    .unwrap_or(text.trim())
                    .to_string();
                if text.contains("not supported yet") {
                    return Err((Status::NotYet, line));
                }
                return Err((Status::Error, format!("ferry test -c {name}: {line}")));
            }
        }
        Ok(())
    }

    fn start_chain(&self, s: &Scenario, imp: &str, dir: &Path, target_port: u16) -> Result<Chain> {
        let mut set = ProcSet::default();
        let mut entry = None;
        if s.entry != Entry::Direct {
            let (procs, vars) = self.render(s, imp, dir, target_port)?;
            let count = procs.len();
            for (name, bin, args, listen) in procs {
                let mut bed = self.bed.borrow_mut();
                match bed.as_mut() {
                    None => {
                        set.spawn(&name, &bin, &args, dir)?;
                    }
                    Some(b) => {
                        let node = node_of(&name, count);
                        let mut cmd = b.tb.command(node, &bin);
                        cmd.args(&args);
                        let pid = set
                            .spawn_cmd(&name, cmd, dir)
                            .with_context(|| format!("starting {name} in node {node}"))?;
                        if let Some((cap_node, pct)) = self
                            .o
                            .testbed
                            .as_ref()
                            .and_then(|t| t.cap.as_ref())
                            .filter(|(n, _)| n == node)
                        {
                            b.tb.cap(cap_node, pid, *pct)?;
                        }
                    }
                }
                drop(bed);
                set.wait_listening(&listen, Duration::from_secs(15))?;
            }
            entry = Some(
                vars.get("entry_port")
                    .and_then(|p| p.parse::<u16>().ok())
                    .ok_or_else(|| {
                        anyhow!("{}: no {{{{entry_port}}}} in {imp}'s configs", s.name)
                    })?,
            );
        }
        let (entry_ip, target_ip) = match self.bed.borrow().as_ref() {
            Some(b) => (b.addr("b"), b.addr("d")),
            None => ([127, 0, 0, 1].into(), [127, 0, 0, 1].into()),
        };
        let local = |p: u16| std::net::SocketAddr::new(entry_ip, p);
        let inner_tls = self.o.inner_tls.clone();
        let target = match (s.entry, entry) {
            (Entry::Socks, Some(e)) => Target {
                connect: local(e),
                socks_dest: Some(std::net::SocketAddr::new(target_ip, target_port)),
                inner_tls,
            },
            (_, Some(e)) => Target {
                connect: local(e),
                socks_dest: None,
                inner_tls,
            },
            (_, None) => Target {
                connect: std::net::SocketAddr::new(target_ip, target_port),
                socks_dest: None,
                inner_tls,
            },
        };
        Ok(Chain { procs: set, target })
    }

    fn measure(&self, s: &Scenario, job: &Job) -> Row {
        let dir = self.o.out.join("work").join(format!(
            "{}-{}-{}-{}-r{}",
            job.scenario,
            job.imp,
            job.test.name(),
            job.param,
            job.run
        ));
        let mut row = Row::new(&job.scenario, &job.imp, job.test.name(), job.param, job.run);
        let res = std::fs::create_dir_all(&dir)
            .map_err(anyhow::Error::from)
            .and_then(|_| self.measure_in(s, job, &dir, &mut row));
        if let Err(e) = res {
            row.status = Status::Error;
            row.message = Some(format!("{e:#}"));
        }
        row
    }

    fn measure_in(&self, s: &Scenario, job: &Job, dir: &Path, row: &mut Row) -> Result<()> {
        let o = self.o;
        if matches!(job.test, Test::Idle | Test::BulkIdle) {
            // Each proxy holds two sockets per connection; this process holds two as well.
            let need = job.param as u64 * 2 + 200;
            if need > self.nofile {
                bail!(
                    "{} idle connections need about {need} open files per process; the limit here is {}",
                    job.param,
                    self.nofile
                );
            }
        }
        if let Some(plan) = &o.testbed {
            *self.bed.borrow_mut() = Some(Bed::build(plan)?);
        }
        let _clear = ClearBed(&self.bed);
        if matches!(job.test, Test::Iperf3 | Test::Iperf3Reverse) {
            return self.measure_iperf3(s, job, dir, row);
        }
        let (target_port, reports, recv_task) = match self.bed.borrow().as_ref() {
            Some(b) => b.d.block_on(receiver::start_on(std::net::SocketAddr::new(
                b.addr("d"),
                0,
            )))?,
            None => self.rt.block_on(receiver::start(0))?,
        };
        let _stop_receiver = AbortOnDrop(recv_task);
        let mut chain = self.start_chain(s, &job.imp, dir, target_port)?;
        let target = chain.target.clone();
        // A small verified transfer first: proves the chain works before anything is timed.
        self.block_on(loadgen::bulk(
            &target,
            &BulkOpts {
                amount: 1 << 20,
                concurrency: 1,
                reverse: false,
                stall: o.stall,
            },
        ))
        .context("warm-up transfer")?;
        let before = chain.procs.usage();
        if let Some(b) = self.bed.borrow().as_ref() {
            b.tb.reset_hops();
        }
        match job.test {
            Test::Throughput | Test::Reverse => {
                let per = (o.amount / job.param as u64).max(1);
                let t = self.block_on(loadgen::bulk(
                    &target,
                    &BulkOpts {
                        amount: per,
                        concurrency: job.param,
                        reverse: job.test == Test::Reverse,
                        stall: o.stall,
                    },
                ))?;
                let after = chain.procs.usage();
                chain.procs.check_alive()?;
                row.bytes = t.bytes;
                row.secs = t.secs;
                row.mb_per_s = t.mb_per_s();
                row.gbit_per_s = t.mb_per_s() * 8.0 / 1000.0;
                row.cpu_secs = after.cpu_secs - before.cpu_secs;
                row.cpu_secs_per_gb = if t.bytes > 0 {
                    row.cpu_secs / (t.bytes as f64 / 1e9)
                } else {
                    0.0
                };
                row.peak_rss_kb = after.hwm_kb;
                self.check_receiver(&reports, job, per)?;
            }
            Test::Latency => {
                let timeout = o.stall;
                let ttfb = self
                    .block_on(loadgen::ttfb(&target, o.ttfb_count, timeout))
                    .context("time to first byte")?;
                let rtt = self
                    .block_on(loadgen::round_trips(
                        &target, o.rr_size, o.rr_count, timeout,
                    ))
                    .context("round trips")?;
                let after = chain.procs.usage();
                chain.procs.check_alive()?;
                row.cpu_secs = after.cpu_secs - before.cpu_secs;
                row.peak_rss_kb = after.hwm_kb;
                row.ttfb = Some(ttfb);
                row.rtt = Some(rtt);
            }
            Test::Handshake => {
                let role_cpu = |u: &[(String, procs::Usage)], role: &str| -> f64 {
                    u.iter()
                        .filter(|(n, _)| match role {
                            "client" | "server" => n == role,
                            _ => n != "client" && n != "server",
                        })
                        .map(|(_, x)| x.cpu_secs)
                        .sum()
                };
                let n = o.handshakes;
                let mut phases = Vec::new();
                for conc in [1, job.param] {
                    // Settle: connections of the warm-up (or the last phase) are torn down
                    // before the sample, and this phase's teardown is inside its own.
                    std::thread::sleep(Duration::from_millis(300));
                    let u0 = chain.procs.usage_by_name();
                    let burst = self
                        .block_on(loadgen::fresh_conns(
                            &target,
                            n,
                            conc,
                            HANDSHAKE_MSG,
                            o.stall,
                        ))
                        .with_context(|| format!("fresh connections, {conc} at a time"))?;
                    std::thread::sleep(Duration::from_millis(300));
                    let u1 = chain.procs.usage_by_name();
                    let d = |role: &str| role_cpu(&u1, role) - role_cpu(&u0, role);
                    phases.push(crate::results::HandshakePhase {
                        burst,
                        server_cpu_secs: d("server"),
                        client_cpu_secs: d("client"),
                        other_cpu_secs: d("other"),
                    });
                }
                let after = chain.procs.usage();
                chain.procs.check_alive()?;
                // The receiver must have echoed every connection, exactly (its report of a
                // connection comes when the chain has passed the close on).
                let mut echoed = 0;
                let t0 = Instant::now();
                while echoed < 2 * n && t0.elapsed() < Duration::from_secs(5) {
                    for r in reports.take() {
                        if let Some(e) = &r.error {
                            bail!("receiver: {e}");
                        }
                        if r.mode == Some(crate::wire::Mode::Echo) {
                            if r.bytes != HANDSHAKE_MSG as u64 {
                                bail!(
                                    "byte-count mismatch at the receiver: an echo connection carried {} bytes, not {HANDSHAKE_MSG}",
                                    r.bytes
                                );
                            }
                            echoed += 1;
                        }
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                if echoed != 2 * n {
                    bail!(
                        "the receiver echoed {echoed} connections, loadgen made {}",
                        2 * n
                    );
                }
                row.cpu_secs = after.cpu_secs - before.cpu_secs;
                row.peak_rss_kb = after.hwm_kb;
                row.handshake = Some(crate::results::Handshakes {
                    message_bytes: HANDSHAKE_MSG,
                    sequential: phases.remove(0),
                    parallel: phases.remove(0),
                });
            }
            Test::Iperf3 | Test::Iperf3Reverse => unreachable!("measured by measure_iperf3"),
            Test::BulkIdle => {
                let bulk = |what: &str| self.one_bulk(&target, what);
                let alone = bulk("alone")?;
                self.check_receiver(&reports, job, o.amount)?;
                let held = self.block_on(loadgen::hold_idle(&target, job.param, o.stall))?;
                std::thread::sleep(Duration::from_secs(1));
                let beside = bulk("beside the idle connections")?;
                chain.procs.check_alive()?;
                self.check_receiver(&reports, job, o.amount)?;
                drop(held);
                let after = chain.procs.usage();
                row.bytes = beside.bytes;
                row.secs = beside.secs;
                row.mb_per_s = beside.mb_per_s();
                row.gbit_per_s = beside.mb_per_s() * 8.0 / 1000.0;
                row.alone_mb_per_s = Some(alone.mb_per_s());
                row.cpu_secs = after.cpu_secs - before.cpu_secs;
                row.peak_rss_kb = after.hwm_kb;
            }
            Test::Churn => {
                let n = job.param;
                let first = n.min(10_000);
                let chunks = 10;
                let mut done = 0;
                let mut samples = Vec::new();
                let mut echoed = 0;
                let start = Instant::now();
                while done < n {
                    let count = if done == 0 {
                        first
                    } else {
                        ((n - first).div_ceil(chunks)).min(n - done)
                    };
                    self.churn_batch(&target, count)
                        .with_context(|| format!("churn, after {done} connections"))?;
                    done += count;
                    // Let the chain finish tearing the last ones down before the sample.
                    std::thread::sleep(Duration::from_millis(500));
                    echoed += echoes(&reports)?;
                    samples.push(crate::results::ChurnSample {
                        conns: done,
                        rss_kb: chain
                            .procs
                            .usage_by_name()
                            .into_iter()
                            .map(|(n, u)| (n, u.rss_kb))
                            .collect(),
                    });
                }
                chain.procs.check_alive()?;
                // The receiver reports a connection when the chain passed its close on; some
                // chains pass the last ones on late. (+1: the warm-up is not an echo.)
                let t0 = Instant::now();
                while echoed < n && t0.elapsed() < Duration::from_secs(10) {
                    std::thread::sleep(Duration::from_millis(100));
                    echoed += echoes(&reports)?;
                }
                if echoed < n {
                    bail!("the receiver echoed {echoed} connections, loadgen made {n}");
                }
                let after = chain.procs.usage();
                row.cpu_secs = after.cpu_secs - before.cpu_secs;
                row.peak_rss_kb = after.hwm_kb;
                row.secs = start.elapsed().as_secs_f64();
                row.churn = Some(samples);
            }
            Test::Soak => {
                row.soak = Some(self.soak(&mut chain, &target, &reports, job)?);
                let after = chain.procs.usage();
                row.cpu_secs = after.cpu_secs - before.cpu_secs;
                row.peak_rss_kb = after.hwm_kb;
            }
            Test::Idle => {
                std::thread::sleep(Duration::from_millis(300));
                let base = chain.procs.usage();
                let base_by = chain.procs.usage_by_name();
                let held = self.block_on(loadgen::hold_idle(&target, job.param, o.stall))?;
                std::thread::sleep(Duration::from_secs(1));
                let after = chain.procs.usage();
                let after_by = chain.procs.usage_by_name();
                chain.procs.check_alive()?;
                drop(held);
                // Which process holds the memory: growth per connection of each one.
                row.idle_bytes_per_conn_by_process = Some(
                    after_by
                        .iter()
                        .map(|(name, a)| {
                            let b = base_by
                                .iter()
                                .find(|(n, _)| n == name)
                                .map(|(_, u)| u.rss_kb)
                                .unwrap_or(0);
                            let per = (a.rss_kb as f64 - b as f64) * 1024.0 / job.param as f64;
                            (name.clone(), per)
                        })
                        .collect(),
                );
                row.idle_rss_kb_before = Some(base.rss_kb);
                row.idle_rss_kb_after = Some(after.rss_kb);
                row.rss_bytes_per_conn =
                    Some((after.rss_kb as f64 - base.rss_kb as f64) * 1024.0 / job.param as f64);
                row.peak_rss_kb = after.hwm_kb;
            }
        }
        row.testbed = self.bed_row();
        chain.procs.stop_all();
        row.status = Status::Ok;
        Ok(())
    }

    /// One `--amount` transfer over one connection (the bulk-idle and soak tests).
    fn one_bulk(&self, target: &Target, what: &str) -> Result<loadgen::Transfer> {
        let o = self.o;
        self.block_on(loadgen::bulk(
            target,
            &BulkOpts {
                amount: o.amount,
                concurrency: 1,
                reverse: false,
                stall: o.stall,
            },
        ))
        .with_context(|| format!("bulk transfer {what}"))
    }

    /// `count` short echoed connections, `--handshake-concurrency` at a time (churn and soak).
    fn churn_batch(&self, target: &Target, count: usize) -> Result<()> {
        let o = self.o;
        self.block_on(loadgen::fresh_conns(
            target,
            count,
            o.handshake_concurrency,
            HANDSHAKE_MSG,
            o.stall,
        ))
        .map(|_| ())
    }

    /// The soak test (see [`Test::Soak`]).
    fn soak(
        &self,
        chain: &mut Chain,
        target: &Target,
        reports: &receiver::Reports,
        job: &Job,
    ) -> Result<crate::results::Soak> {
        use crate::results::SoakSample;
        let o = self.o;
        let start = Instant::now();
        let mut samples = Vec::new();
        let sample = |phase: &'static str, samples: &mut Vec<SoakSample>, chain: &Chain| {
            samples.push(SoakSample {
                secs: start.elapsed().as_secs_f64(),
                phase,
                rss_kb: chain
                    .procs
                    .usage_by_name()
                    .into_iter()
                    .map(|(n, u)| (n, u.rss_kb))
                    .collect(),
            })
        };
        // The receiver's reports: echoes counted; a never-reading client's download ends in
        // an error at the receiver when it goes, which is expected.
        let drain = || -> Result<usize> {
            let mut n = 0;
            for r in reports.take() {
                match (&r.error, r.mode) {
                    (_, Some(crate::wire::Mode::Download)) => {}
                    (Some(e), _) => bail!("receiver: {e}"),
                    (None, Some(crate::wire::Mode::Echo)) => n += 1,
                    _ => {}
                }
            }
            Ok(n)
        };
        let mut echoed = 0;
        let bulk_once = |what: &str| {
            self.one_bulk(target, what)
                .context("soak")
                .map(|t| t.mb_per_s())
        };
        sample("start", &mut samples, chain);
        // The same transfer alone, before anything else is held: what the cycles' transfers
        // beside the idle connections compare with.
        let alone = bulk_once("alone")?;
        std::thread::sleep(Duration::from_millis(500));
        sample("bulk alone", &mut samples, chain);
        let held = self
            .block_on(loadgen::hold_idle(target, job.param, o.stall))
            .context("soak: holding the idle connections")?;
        sample("idle held", &mut samples, chain);
        let (mut churned, mut cycles, mut bulk) = (0, 0, Vec::new());
        while start.elapsed() < o.soak && (o.soak_cycles == 0 || cycles < o.soak_cycles) {
            let hostile = self
                .block_on(loadgen::hold_hostile(target, o.soak_hostile, o.stall))
                .context("soak: hostile clients")?;
            let per = o.soak_churn.div_ceil(5).max(1);
            for _ in 0..5 {
                self.churn_batch(target, per)
                    .with_context(|| format!("soak: churn after {churned} connections"))?;
                churned += per;
                sample("churn", &mut samples, chain);
                echoed += drain()?;
            }
            bulk.push(bulk_once("beside the idle connections")?);
            drop(hostile);
            chain.procs.check_alive()?;
            std::thread::sleep(Duration::from_millis(500));
            sample("cycle end", &mut samples, chain);
            cycles += 1;
        }
        drop(held);
        std::thread::sleep(Duration::from_secs(2));
        sample("released", &mut samples, chain);
        let t0 = Instant::now();
        while echoed < churned && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(100));
            echoed += drain()?;
        }
        if echoed < churned {
            bail!("soak: the receiver echoed {echoed} connections, loadgen made {churned}");
        }
        chain.procs.check_alive()?;
        Ok(crate::results::Soak {
            idle: job.param,
            churned,
            hostile: o.soak_hostile,
            cycles,
            bulk_alone_mb_per_s: alone,
            bulk_mb_per_s: bulk,
            samples,
        })
    }

    /// iperf3 through the chain: `iperf3 -s` is the target, `iperf3 -c` connects to the entry
    /// with `-P conns -n amount` (and `-R` in reverse); throughput is what the receiving side
    /// counted.
    fn measure_iperf3(&self, s: &Scenario, job: &Job, dir: &Path, row: &mut Row) -> Result<()> {
        let o = self.o;
        if s.entry == Entry::Socks {
            bail!(
                "{}: iperf3 needs a forwarding (dokodemo-door) entry",
                s.name
            );
        }
        let iperf = self.bin("iperf3")?;
        let port = procs::free_port()?;
        // On the testbed the server runs in D and the client in A, as loadgen and receiver do.
        let place = |node: &str| -> (Command, String) {
            match self.bed.borrow().as_ref() {
                Some(b) => (b.tb.command(node, &iperf), b.addr(node).to_string()),
                None => (Command::new(&iperf), "127.0.0.1".to_string()),
            }
        };
        let (mut server_cmd, server_addr) = place("d");
        let mut server = server_cmd
            .args(["-s", "-1", "-B", &server_addr, "-p", &port.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .context("starting iperf3 -s")?;
        let res = (|| -> Result<()> {
            let mut chain = self.start_chain(s, &job.imp, dir, port)?;
            let entry = chain.target.connect.port();
            let entry_addr = chain.target.connect.ip().to_string();
            // iperf3 -s in a namespace listens a moment after it starts.
            if self.bed.borrow().is_some() {
                let t0 = Instant::now();
                while !procs::listening_ports_of(server.id()).contains(&port) {
                    if t0.elapsed() > Duration::from_secs(5) {
                        bail!("iperf3 -s did not listen in node D");
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            if let Some(b) = self.bed.borrow().as_ref() {
                b.tb.reset_hops();
            }
            let before = chain.procs.usage();
            let (mut cmd, _) = place("a");
            cmd.args(["-c", &entry_addr, "-p", &entry.to_string(), "-J"])
                .args(["-P", &job.param.to_string(), "-n", &o.amount.to_string()]);
            if job.test == Test::Iperf3Reverse {
                cmd.arg("-R");
            }
            let out = cmd.output().context("running iperf3 -c")?;
            let after = chain.procs.usage();
            chain.procs.check_alive()?;
            let v: serde_json::Value = serde_json::from_slice(&out.stdout)
                .with_context(|| format!("iperf3 -c printed no JSON (exit {})", out.status))?;
            if let Some(e) = v.get("error").and_then(|e| e.as_str()) {
                bail!("iperf3: {e}");
            }
            let sum = &v["end"]["sum_received"];
            let bytes = sum["bytes"].as_f64().unwrap_or(0.0);
            let secs = sum["seconds"].as_f64().unwrap_or(0.0);
            if bytes <= 0.0 || secs <= 0.0 {
                bail!("iperf3 moved nothing");
            }
            row.bytes = bytes as u64;
            row.secs = secs;
            row.mb_per_s = bytes / secs / 1e6;
            row.gbit_per_s = row.mb_per_s * 8.0 / 1000.0;
            row.cpu_secs = after.cpu_secs - before.cpu_secs;
            row.cpu_secs_per_gb = row.cpu_secs / (bytes / 1e9);
            row.peak_rss_kb = after.hwm_kb;
            row.testbed = self.bed_row();
            chain.procs.stop_all();
            Ok(())
        })();
        let _ = server.kill();
        let _ = server.wait();
        res?;
        row.status = Status::Ok;
        Ok(())
    }

    /// The receiver's own counts must agree with what loadgen verified.
    fn check_receiver(&self, reports: &receiver::Reports, job: &Job, per: u64) -> Result<()> {
        let want = job.param + 1; // plus the warm-up connection
        let t0 = Instant::now();
        let mut seen = Vec::new();
        while t0.elapsed() < Duration::from_secs(1) {
            seen.extend(reports.take());
            if seen.len() >= want {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        for r in &seen {
            if let Some(e) = &r.error {
                bail!("receiver: {e}");
            }
            // The receiver must have served the inner TLS asked for (and none when none was).
            let want_tls = self
                .o
                .inner_tls
                .as_ref()
                .map(|t| (t.version.label().to_string(), t.record));
            let got_tls = r.tls.as_ref().map(|t| (t.version.clone(), t.record));
            if want_tls != got_tls {
                bail!("receiver: inner TLS {got_tls:?}, expected {want_tls:?}");
            }
            let expect_mode = if job.test == Test::Reverse {
                crate::wire::Mode::Download
            } else {
                crate::wire::Mode::Upload
            };
            if r.mode == Some(expect_mode) && r.bytes != per && r.bytes != 1 << 20 {
                bail!(
                    "byte-count mismatch at the receiver: {} bytes on a connection that carried {per}",
                    r.bytes
                );
            }
        }
        Ok(())
    }
}

/// Takes the receiver's reports so far: how many were echo connections (an error it reported
/// fails the measurement).
fn echoes(reports: &receiver::Reports) -> Result<usize> {
    let mut n = 0;
    for r in reports.take() {
        if let Some(e) = &r.error {
            bail!("receiver: {e}");
        }
        if r.mode == Some(crate::wire::Mode::Echo) {
            n += 1;
        }
    }
    Ok(n)
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);
impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
