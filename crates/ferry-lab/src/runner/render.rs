//! Rendering a scenario's templates into configs and command lines, and `ferry test -c` on
//! ferry's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{anyhow, Context, Result};

use crate::procs;
use crate::results::Status;
use crate::scenario::{self, Scenario};

use super::cert::SERVER_NAME;
use super::ctx::Ctx;

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
    // The client node's LAN side on the testbed (B's veth towards A), where a transparent
    // scenario's rules take loadgen's connections.
    v.insert("lan_dev".into(), "to-a".into());
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

impl Ctx<'_> {
    /// Renders every config of `imp` into `dir`; returns (process, bin, args, config path, listen ports).
    #[allow(clippy::type_complexity)]
    pub(super) fn render(
        &self,
        s: &Scenario,
        imp: &str,
        dir: &Path,
        target_port: u16,
    ) -> Result<(
        Vec<(String, PathBuf, Vec<String>, Listen)>,
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
            names.extend(p.listen_udp.iter().cloned());
            names.extend(
                p.setup
                    .iter()
                    .flatten()
                    .flat_map(|a| scenario::placeholders(a)),
            );
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
            let ports = |names: &[String]| {
                names
                    .iter()
                    .map(|n| {
                        vars.get(n)
                            .and_then(|v| v.parse().ok())
                            .ok_or_else(|| anyhow!("listen port {n} is unknown"))
                    })
                    .collect::<Result<Vec<u16>>>()
            };
            let setup = p
                .setup
                .iter()
                .map(|argv| {
                    let mut argv = argv
                        .iter()
                        .map(|a| scenario::render(a, &pv))
                        .collect::<Result<Vec<_>>>()?;
                    if argv.is_empty() {
                        return Err(anyhow!(
                            "{}: {imp}/{}: an empty setup command",
                            s.name,
                            p.name
                        ));
                    }
                    // ip and sysctl are the system's; nft and the rest come from the peers.
                    if !["ip", "sysctl"].contains(&argv[0].as_str()) {
                        argv[0] = self.bin(&argv[0])?.display().to_string();
                    }
                    Ok(argv)
                })
                .collect::<Result<Vec<_>>>()?;
            let listen = Listen {
                tcp: ports(&p.listen)?,
                udp: ports(&p.listen_udp)?,
                tun: p.tun.clone(),
                setup,
            };
            out.push((p.name.clone(), self.bin(&p.bin)?, args, listen));
        }
        Ok((out, vars))
    }

    /// `ferry test -c` on each of ferry's configs for `s`.
    pub(super) fn ferry_check(&self, s: &Scenario) -> Result<(), (Status, String)> {
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
}

/// What a process must have done before the next one starts: the ports it listens on, the
/// device it creates; then the commands run beside it.
pub struct Listen {
    pub tcp: Vec<u16>,
    pub udp: Vec<u16>,
    pub tun: Option<String>,
    pub setup: Vec<Vec<String>>,
}
