//! Starting a scenario's chain of processes (in their nodes on the testbed) and the target
//! loadgen connects to; a started measurement.

use std::path::Path;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};

use crate::loadgen::Target;
use crate::procs::{self, ProcSet};
use crate::receiver;
use crate::scenario::{Entry, Scenario};

use super::bed::node_of;
use super::ctx::Ctx;

/// A started chain.
pub(super) struct Chain {
    pub(super) procs: ProcSet,
    pub(super) target: Target,
}

/// A started measurement: the chain, where loadgen connects, what the receiver saw, and the
/// chain's usage after the warm-up (fields drop in order: the chain stops first).
pub(super) struct Live {
    pub(super) chain: Chain,
    pub(super) target: Target,
    pub(super) reports: receiver::Reports,
    pub(super) before: procs::Usage,
}

impl Ctx<'_> {
    pub(super) fn start_chain(
        &self,
        s: &Scenario,
        imp: &str,
        dir: &Path,
        target_port: u16,
    ) -> Result<Chain> {
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
                set.wait_listening(&listen.tcp, Duration::from_secs(15))?;
                set.wait_bound_udp(&listen.udp, Duration::from_secs(15))?;
                self.set_up_beside(&mut set, &name, node_of(&name, count), &listen)?;
            }
            // A transparent chain has no entry: loadgen talks to the receiver itself (the
            // target below), and the client node takes the connections on the way.
            if s.entry != Entry::Transparent {
                entry = Some(
                    vars.get("entry_port")
                        .and_then(|p| p.parse::<u16>().ok())
                        .ok_or_else(|| {
                            anyhow!("{}: no {{{{entry_port}}}} in {imp}'s configs", s.name)
                        })?,
                );
            }
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

    /// What a process needs beside it before the next starts: its TUN device up, then its
    /// setup commands (routes, rules) in its node.
    fn set_up_beside(
        &self,
        set: &mut ProcSet,
        name: &str,
        node: &str,
        listen: &super::render::Listen,
    ) -> Result<()> {
        if listen.tun.is_none() && listen.setup.is_empty() {
            return Ok(());
        }
        let bed = self.bed.borrow();
        let Some(b) = bed.as_ref() else {
            bail!("{name} sets up devices or rules: it runs on the testbed only (--testbed)");
        };
        if let Some(dev) = &listen.tun {
            let t0 = std::time::Instant::now();
            while b.tb.link_up(node, dev) != Some(true) {
                set.check_alive()?;
                if t0.elapsed() > Duration::from_secs(15) {
                    bail!("{name}: its device {dev} never came up in node {node}");
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        for argv in &listen.setup {
            b.tb.run_in(node, argv)
                .with_context(|| format!("{name}'s setup in node {node}"))?;
        }
        Ok(())
    }
}
