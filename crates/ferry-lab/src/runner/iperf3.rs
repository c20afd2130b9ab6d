//! The iperf3 tests: `iperf3 -s` as the target and `iperf3 -c` through the chain.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::procs;
use crate::results::{Row, Status};
use crate::scenario::{Entry, Scenario};

use crate::plan::Test;

use super::ctx::Ctx;
use super::jobs::Job;

impl Ctx<'_> {
    /// iperf3 through the chain: `iperf3 -s` is the target, `iperf3 -c` connects to the entry
    /// with `-P conns -n amount` (and `-R` in reverse); throughput is what the receiving side
    /// counted.
    pub(super) fn measure_iperf3(
        &self,
        s: &Scenario,
        job: &Job,
        dir: &Path,
        row: &mut Row,
    ) -> Result<()> {
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
}
