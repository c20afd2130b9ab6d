//! Building a testbed's chain: namespaces, veth pairs, node addresses and routes, link
//! shaping and impairment hops, each a counted step (a test may fail the set-up after any).

use std::fs::File;
use std::net::Ipv4Addr;

use anyhow::{anyhow, bail, Context, Result};

use crate::impair::Hop;

use super::host::{allow_congestion, in_ns, ip, NS_PREFIX};
use super::{Node, Spec, Testbed};

/// The chain as namespaces, in order: each with Some(node index), or None for a hop.
type Path = Vec<(String, Option<usize>)>;

/// Counts the set-up's steps, failing at the one `fail_after` names.
struct Steps<'a> {
    done: usize,
    fail_after: &'a Option<usize>,
}

impl Steps<'_> {
    fn step(&mut self, what: &str) -> Result<()> {
        self.done += 1;
        if self.fail_after.is_some_and(|n| self.done > n) {
            bail!("injected failure before {what}");
        }
        Ok(())
    }
}

/// An interface's name inside a namespace is "to-<neighbour>": this end's neighbour's part
/// (node name, or "hop").
fn short(spec: &Spec, p: &(String, Option<usize>)) -> String {
    match p.1 {
        Some(i) => spec.nodes[i].clone(),
        None => "hop".to_string(),
    }
}

impl Testbed {
    pub(super) fn set_up(&mut self, spec: &Spec) -> Result<()> {
        let mut steps = Steps {
            done: 0,
            fail_after: &spec.fail_after,
        };
        let path = self.plan_path(spec);
        self.add_namespaces(spec, &path, &mut steps)?;
        add_veths(spec, &path, &mut steps)?;
        self.add_routes(spec, &path)?;
        add_shaping(spec, &path, &mut steps)?;
        self.add_hops(spec, &path, &mut steps)?;
        steps.step("done")?;
        Ok(())
    }

    /// The chain as namespaces: nodes, and a hop namespace inside each impaired link.
    fn plan_path(&mut self, spec: &Spec) -> Path {
        let mut path: Path = Vec::new();
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
        path
    }

    fn add_namespaces(&mut self, spec: &Spec, path: &Path, steps: &mut Steps) -> Result<()> {
        for (ns, _) in path {
            steps.step("a namespace")?;
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
        Ok(())
    }

    /// Node addresses on loopback, and routes to every other node along the chain.
    fn add_routes(&self, spec: &Spec, path: &Path) -> Result<()> {
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
                        format!("to-{}", short(spec, &path[p + 1])),
                    )
                } else {
                    (
                        format!("198.19.{}.1", p),
                        format!("to-{}", short(spec, &path[p - 1])),
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
        Ok(())
    }

    /// Impairment hops: a TUN device, and every packet from either side routed into it.
    fn add_hops(&mut self, spec: &Spec, path: &Path, steps: &mut Steps) -> Result<()> {
        for (p, (ns, node)) in path.iter().enumerate() {
            if node.is_some() {
                continue;
            }
            steps.step("an impairment hop")?;
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
                format!("to-{}", short(spec, &path[p - 1])),
                format!("to-{}", short(spec, &path[p + 1])),
            );
            for dev in [&ldev, &rdev] {
                ip(&["-n", ns, "rule", "add", "iif", dev, "lookup", "100"])?;
            }
            ip(&[
                "-n", ns, "route", "add", "default", "dev", "impair0", "table", "100",
            ])?;
        }
        Ok(())
    }
}

/// A veth pair between each two neighbours of the path, segment k being 198.19.k.0/24.
fn add_veths(spec: &Spec, path: &Path, steps: &mut Steps) -> Result<()> {
    for k in 0..path.len() - 1 {
        steps.step("a veth pair")?;
        let (l, r) = (&path[k], &path[k + 1]);
        let (ldev, rdev) = (
            format!("to-{}", short(spec, r)),
            format!("to-{}", short(spec, l)),
        );
        ip(&[
            "link", "add", &ldev, "netns", &l.0, "type", "veth", "peer", "name", &rdev, "netns",
            &r.0,
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
    Ok(())
}

/// Shaping: tbf on both ends' egress of each limited link.
fn add_shaping(spec: &Spec, path: &Path, steps: &mut Steps) -> Result<()> {
    for (i, l) in spec.links.iter().enumerate() {
        let Some(rate) = l.rate_mbit else { continue };
        steps.step("link shaping")?;
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
            let dev = format!("to-{}", short(spec, &path[dev_to]));
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
    Ok(())
}
