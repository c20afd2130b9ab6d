//! Processes the runner starts: spawn with logs to files, wait for their listening ports, sample
//! CPU time and memory from /proc, and stop every one of them (by PID) whatever happened.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// One started process.
pub struct Managed {
    pub name: String,
    pub child: Child,
    pub log: PathBuf,
}

impl Managed {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The last lines the process wrote (stdout and stderr share one log).
    pub fn log_tail(&self) -> String {
        let s = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        let from = lines.len().saturating_sub(15);
        lines[from..].join("\n")
    }
}

/// Every process started for one measurement; dropping it stops them all.
#[derive(Default)]
pub struct ProcSet {
    pub procs: Vec<Managed>,
}

impl ProcSet {
    /// Starts `bin args...` with output to `dir/<name>.log`.
    pub fn spawn(&mut self, name: &str, bin: &Path, args: &[String], dir: &Path) -> Result<u32> {
        let mut cmd = Command::new(bin);
        cmd.args(args);
        self.spawn_cmd(name, cmd, dir)
            .with_context(|| format!("starting {name}: {}", bin.display()))
    }

    /// Starts `cmd` (a testbed node's `ip netns exec ...`, for example) with output to
    /// `dir/<name>.log`.
    pub fn spawn_cmd(&mut self, name: &str, mut cmd: Command, dir: &Path) -> Result<u32> {
        let log = dir.join(format!("{name}.log"));
        let out =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone()?;
        let child = cmd
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("starting {name}: {cmd:?}"))?;
        let pid = child.id();
        self.procs.push(Managed {
            name: name.to_string(),
            child,
            log,
        });
        Ok(pid)
    }

    /// Waits until the last started process listens on every port, or fails with its log.
    pub fn wait_listening(&mut self, ports: &[u16], timeout: Duration) -> Result<()> {
        let Some(p) = self.procs.last_mut() else {
            return Ok(());
        };
        let t0 = Instant::now();
        loop {
            if let Ok(Some(st)) = p.child.try_wait() {
                bail!(
                    "{} exited ({st}) before listening\n{}",
                    p.name,
                    p.log_tail()
                );
            }
            let listening = listening_ports_of(p.pid());
            if ports.iter().all(|x| listening.contains(x)) {
                return Ok(());
            }
            if t0.elapsed() > timeout {
                bail!(
                    "{} did not listen on {ports:?} within {}s\n{}",
                    p.name,
                    timeout.as_secs(),
                    p.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until UDP sockets are bound on every port (a QUIC server), or fails with the
    /// last process's log.
    pub fn wait_bound_udp(&mut self, ports: &[u16], timeout: Duration) -> Result<()> {
        let Some(p) = self.procs.last_mut() else {
            return Ok(());
        };
        let t0 = Instant::now();
        while !ports.iter().all(|x| bound_udp_ports(p.pid()).contains(x)) {
            if let Ok(Some(st)) = p.child.try_wait() {
                bail!("{} exited ({st}) before binding\n{}", p.name, p.log_tail());
            }
            if t0.elapsed() > timeout {
                bail!(
                    "{} did not bind UDP {ports:?} within {}s\n{}",
                    p.name,
                    timeout.as_secs(),
                    p.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Fails if any process has exited.
    pub fn check_alive(&mut self) -> Result<()> {
        for p in &mut self.procs {
            if let Ok(Some(st)) = p.child.try_wait() {
                bail!("{} exited ({st})\n{}", p.name, p.log_tail());
            }
        }
        Ok(())
    }

    /// PIDs of the processes and their descendants (nginx workers, for example).
    pub fn all_pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self.procs.iter().map(|p| p.pid()).collect();
        let mut i = 0;
        let table = ppid_table();
        while i < pids.len() {
            let parent = pids[i];
            for (pid, ppid) in &table {
                if *ppid == parent && !pids.contains(pid) {
                    pids.push(*pid);
                }
            }
            i += 1;
        }
        pids
    }

    /// Usage of each started process with its descendants, by process name (a scenario's
    /// role: "client", "server", "target", ...), in start order.
    pub fn usage_by_name(&self) -> Vec<(String, Usage)> {
        let table = ppid_table();
        self.procs
            .iter()
            .map(|p| {
                let mut pids = vec![p.pid()];
                let mut i = 0;
                while i < pids.len() {
                    let parent = pids[i];
                    for (pid, ppid) in &table {
                        if *ppid == parent && !pids.contains(pid) {
                            pids.push(*pid);
                        }
                    }
                    i += 1;
                }
                let mut u = Usage::default();
                for pid in pids {
                    if let Some(x) = usage_of(pid) {
                        u.cpu_secs += x.cpu_secs;
                        u.rss_kb += x.rss_kb;
                        u.hwm_kb += x.hwm_kb;
                    }
                }
                (p.name.clone(), u)
            })
            .collect()
    }

    /// Summed usage of every process (and descendants).
    pub fn usage(&self) -> Usage {
        let mut u = Usage::default();
        for pid in self.all_pids() {
            if let Some(x) = usage_of(pid) {
                u.cpu_secs += x.cpu_secs;
                u.rss_kb += x.rss_kb;
                u.hwm_kb += x.hwm_kb;
            }
        }
        u
    }

    /// SIGTERM to each (last started first), then SIGKILL to any still running after 3 s.
    pub fn stop_all(&mut self) {
        for p in self.procs.iter().rev() {
            crate::sys::signal(p.pid(), libc::SIGTERM);
        }
        let t0 = Instant::now();
        for p in self.procs.iter_mut().rev() {
            loop {
                match p.child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if t0.elapsed() > Duration::from_secs(3) => {
                        let _ = p.child.kill();
                        let _ = p.child.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        }
        self.procs.clear();
    }
}

impl Drop for ProcSet {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// CPU and memory of a process.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Usage {
    /// utime + stime, seconds.
    pub cpu_secs: f64,
    /// Current resident set (VmRSS), KiB.
    pub rss_kb: u64,
    /// Peak resident set (VmHWM), KiB.
    pub hwm_kb: u64,
}

/// Reads /proc/PID/stat and /proc/PID/status.
pub fn usage_of(pid: u32) -> Option<Usage> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may contain spaces) start at state (field 3).
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb = |key: &str| -> u64 {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Some(Usage {
        cpu_secs: (utime + stime) as f64 / crate::sys::clock_ticks(),
        rss_kb: kb("VmRSS:"),
        hwm_kb: kb("VmHWM:"),
    })
}

fn ppid_table() -> Vec<(u32, u32)> {
    let mut v = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return v;
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(close) = stat.rfind(')') else {
            continue;
        };
        let ppid = stat
            .get(close + 2..)
            .and_then(|r| r.split_whitespace().nth(1))
            .and_then(|p| p.parse().ok());
        if let Some(ppid) = ppid {
            v.push((pid, ppid));
        }
    }
    v
}

/// TCP ports in LISTEN state on this machine (from /proc/net/tcp and tcp6).
pub fn listening_ports() -> Vec<u16> {
    listening_ports_at("/proc/net")
}

/// TCP ports listening in the network namespace of `pid` (a process in a testbed node).
pub fn listening_ports_of(pid: u32) -> Vec<u16> {
    listening_ports_at(&format!("/proc/{pid}/net"))
}

fn listening_ports_at(dir: &str) -> Vec<u16> {
    let mut v = Vec::new();
    for f in [format!("{dir}/tcp"), format!("{dir}/tcp6")] {
        let Ok(s) = std::fs::read_to_string(f) else {
            continue;
        };
        for line in s.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            if cols.get(3) != Some(&"0A") {
                continue;
            }
            if let Some(port) = cols
                .get(1)
                .and_then(|a| a.rsplit(':').next())
                .and_then(|p| u16::from_str_radix(p, 16).ok())
            {
                v.push(port);
            }
        }
    }
    v
}

/// UDP ports with a bound socket in the network namespace of `pid`.
pub fn bound_udp_ports(pid: u32) -> Vec<u16> {
    let mut v = Vec::new();
    for f in ["udp", "udp6"] {
        let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/net/{f}")) else {
            continue;
        };
        for line in s.lines().skip(1) {
            if let Some(port) = line
                .split_whitespace()
                .nth(1)
                .and_then(|a| a.rsplit(':').next())
                .and_then(|p| u16::from_str_radix(p, 16).ok())
            {
                v.push(port);
            }
        }
    }
    v
}

/// Whether a PID is still a live (not zombie) process.
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s
            .rfind(')')
            .and_then(|i| s.get(i + 2..i + 3))
            .is_some_and(|st| st != "Z" && st != "X"),
        Err(_) => false,
    }
}

/// A free TCP port on 127.0.0.1 that no other call in this process has handed out.
pub fn free_port() -> Result<u16> {
    use std::sync::Mutex;
    static GIVEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    for _ in 0..100 {
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        let p = l.local_addr()?.port();
        let mut g = GIVEN
            .lock()
            .map_err(|_| anyhow::anyhow!("port table poisoned"))?;
        if !g.contains(&p) {
            g.push(p);
            return Ok(p);
        }
    }
    bail!("no free port found")
}
