//! Scenarios as data: a TOML file per scenario under `scenarios/`, naming for each implementation
//! the processes of its chain (entry inbound -> client -> server -> exit) and their config
//! templates. Templates use `{{name}}` placeholders; every `{{..._port}}` gets a free port.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use serde::Deserialize;

/// How loadgen reaches the chain.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Entry {
    /// A dokodemo-style inbound on `entry_port` forwarding to the receiver.
    #[default]
    Dokodemo,
    /// A SOCKS5 inbound on `entry_port`; loadgen CONNECTs to the receiver.
    Socks,
    /// No proxy: loadgen talks to the receiver itself.
    Direct,
    /// Loadgen and iperf3 talk to the receiver's own address, and the client node carries the
    /// connections anyway: a TUN device or a transparent-proxy rule takes what its LAN side
    /// forwards (the testbed only: the client's `setup` installs the routes or rules).
    Transparent,
}

/// One scenario file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    #[serde(skip)]
    pub name: String,
    pub description: String,
    #[serde(default)]
    pub entry: Entry,
    /// Generate a self-signed certificate for the run (`{{cert}}`, `{{key}}`, `{{cert_sha256}}`).
    #[serde(default)]
    pub tls: bool,
    /// Extra placeholder values shared by this scenario's templates.
    #[serde(default)]
    pub vars: BTreeMap<String, String>,
    #[serde(default, rename = "impl")]
    pub impls: BTreeMap<String, ImplSpec>,
}

/// How one implementation runs the chain.
#[derive(Clone, Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ImplSpec {
    /// Reuse another implementation's processes and configs with this one's binary (Ferry reads
    /// Xray's config format, so `ferry` is usually `same_as = "xray"`).
    pub same_as: Option<String>,
    #[serde(default)]
    pub process: Vec<ProcSpec>,
}

/// One process of a chain, started in file order; each must listen on its `listen` ports
/// before the next one starts.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcSpec {
    /// Role, e.g. "server" or "client"; also the config file's stem.
    pub name: String,
    /// Binary name in the peers folder (`ferry` means the workspace build).
    pub bin: String,
    #[serde(default)]
    pub args: Vec<String>,
    /// Config template file, relative to the scenarios folder.
    pub template: Option<String>,
    /// Inline config template.
    pub config: Option<String>,
    /// Placeholder names of the ports this process listens on (e.g. "server_port").
    #[serde(default)]
    pub listen: Vec<String>,
    /// Placeholder names of the UDP ports it binds (a QUIC server).
    #[serde(default)]
    pub listen_udp: Vec<String>,
    /// A network device the process creates (a TUN inbound's), waited for until it is up.
    pub tun: Option<String>,
    /// Commands run in the process's node once it is ready (after `listen` and `tun`), each
    /// an argv with placeholders: the routes into a TUN device, transparent-proxy rules. They
    /// go with the testbed's namespaces.
    #[serde(default)]
    pub setup: Vec<Vec<String>>,
}

impl ProcSpec {
    /// Config file extension: the template's, else json.
    pub fn config_ext(&self) -> &str {
        self.template
            .as_deref()
            .and_then(|t| Path::new(t).extension())
            .and_then(|e| e.to_str())
            .unwrap_or("json")
    }
}

/// The folder holding the shipped scenarios.
pub fn default_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios")
}

/// Names of every scenario in `dir`, sorted.
pub fn list(dir: &Path) -> Result<Vec<String>> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let p = e?.path();
        if p.extension().and_then(|e| e.to_str()) == Some("toml") {
            if let Some(s) = p.file_stem().and_then(|s| s.to_str()) {
                v.push(s.to_string());
            }
        }
    }
    v.sort();
    Ok(v)
}

/// Scenario names with groups expanded: a name with no file of its own that is the prefix of
/// others (`ssr-ciphers` for `ssr-ciphers-*.toml`) stands for all of them, in name order.
pub fn expand(dir: &Path, names: &[String]) -> Vec<String> {
    let all = list(dir).unwrap_or_default();
    let mut out = Vec::new();
    for n in names {
        let members: Vec<&String> = all
            .iter()
            .filter(|s| s.starts_with(&format!("{n}-")))
            .collect();
        if all.contains(n) || members.is_empty() {
            out.push(n.clone());
        } else {
            out.extend(members.into_iter().cloned());
        }
    }
    out
}

/// Loads a scenario by name; an unknown name lists the known ones.
pub fn load(dir: &Path, name: &str) -> Result<Scenario> {
    let path = dir.join(format!("{name}.toml"));
    if !path.exists() {
        let known = list(dir).unwrap_or_default().join(", ");
        bail!("unknown scenario {name:?}; known: {known}");
    }
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut s: Scenario =
        toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    s.name = name.to_string();
    for (k, i) in &s.impls {
        if let Some(o) = &i.same_as {
            if s.impls.get(o).is_none_or(|x| x.same_as.is_some()) {
                bail!("{name}: impl {k} is same_as {o:?}, which is missing or itself same_as");
            }
        } else if i.process.is_empty() {
            bail!("{name}: impl {k} has no process");
        }
        for p in &i.process {
            if p.template.is_some() && p.config.is_some() {
                bail!("{name}: {k}/{}: give template or config, not both", p.name);
            }
        }
    }
    if s.entry != Entry::Direct && s.impls.is_empty() {
        bail!("{name}: no implementation");
    }
    Ok(s)
}

impl Scenario {
    /// The processes `imp` runs, with `same_as` resolved.
    pub fn processes(&self, imp: &str) -> Option<Vec<ProcSpec>> {
        let spec = self.impls.get(imp)?;
        match &spec.same_as {
            None => Some(spec.process.clone()),
            Some(other) => {
                let base = self.impls.get(other)?;
                Some(
                    base.process
                        .iter()
                        .map(|p| {
                            let mut p = p.clone();
                            if p.bin == *other {
                                p.bin = imp.to_string();
                            }
                            p
                        })
                        .collect(),
                )
            }
        }
    }

    /// The raw template text of a process.
    pub fn template_text(&self, dir: &Path, p: &ProcSpec) -> Result<Option<String>> {
        if let Some(c) = &p.config {
            return Ok(Some(c.clone()));
        }
        if let Some(t) = &p.template {
            let path = dir.join(t);
            return std::fs::read_to_string(&path)
                .map(Some)
                .with_context(|| format!("{}: template {}", self.name, path.display()));
        }
        Ok(None)
    }
}

/// Every `{{name}}` placeholder in `text`.
pub fn placeholders(text: &str) -> Vec<String> {
    let mut v = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("{{") {
        let after = &rest[i + 2..];
        let Some(j) = after.find("}}") else { break };
        v.push(after[..j].trim().to_string());
        rest = &after[j + 2..];
    }
    v
}

/// Replaces each `{{name}}` with its value; an unknown name is an error.
pub fn render(text: &str, vars: &BTreeMap<String, String>) -> Result<String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("{{") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let j = after
            .find("}}")
            .ok_or_else(|| anyhow!("unclosed {{{{ in template"))?;
        let name = after[..j].trim();
        let v = vars
            .get(name)
            .ok_or_else(|| anyhow!("unknown placeholder {{{{{name}}}}}"))?;
        out.push_str(v);
        rest = &after[j + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_replaces_and_rejects_unknown() {
        let mut v = BTreeMap::new();
        v.insert("a_port".to_string(), "1080".to_string());
        assert_eq!(
            render("x{{a_port}}y{{ a_port }}", &v).unwrap(),
            "x1080y1080"
        );
        assert!(render("{{nope}}", &v).is_err());
        assert!(render("{{a_port", &v).is_err());
        assert_eq!(placeholders("{{a}} {{ b_port }}"), vec!["a", "b_port"]);
    }
}
