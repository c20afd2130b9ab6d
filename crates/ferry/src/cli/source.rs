//! Where a config comes from: files, standard input or the embedded default, merged and read.

use std::io::Read;

use anyhow::{anyhow, Context, Result};

use ferry::config::{self, Config, Diagnostics};

/// Used when `ferry run` gets no config: a SOCKS5+HTTP proxy on 127.0.0.1:1080 going direct.
const DEFAULT_CONFIG: &str = r#"{
  "log": {"loglevel": "warning"},
  "inbounds": [{"tag": "mixed-in", "listen": "127.0.0.1", "port": 1080, "protocol": "mixed",
                "settings": {"auth": "noauth", "udp": true, "ip": "127.0.0.1"}}],
  "outbounds": [{"tag": "direct", "protocol": "freedom"}]
}"#;

pub(crate) fn read_source(src: &str) -> Result<(String, String)> {
    if src == "stdin:" || src == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("reading config from stdin")?;
        return Ok(("stdin".into(), s));
    }
    let lower = src.to_ascii_lowercase();
    if lower.ends_with(".yaml") || lower.ends_with(".yml") || lower.ends_with(".toml") {
        return Err(anyhow!("{src}: only JSON configs are supported yet"));
    }
    let text = std::fs::read_to_string(src).with_context(|| format!("reading {src}"))?;
    Ok((src.to_string(), text))
}

/// Reads and merges the configs (the embedded default without any).
pub(crate) fn read_merged(sources: &[String]) -> Result<serde_json::Value> {
    let mut docs = Vec::new();
    if sources.is_empty() {
        docs.push((
            String::new(),
            config::json::parse(DEFAULT_CONFIG).map_err(|e| anyhow!("embedded config: {e}"))?,
        ));
    }
    for src in sources {
        let (name, text) = read_source(src)?;
        let doc = config::json::parse(&text).map_err(|e| anyhow!("{name}: {e}"))?;
        docs.push((name, doc));
    }
    Ok(config::merge_named(docs))
}

/// The names of the configs, for messages.
pub(crate) fn source_names(sources: &[String]) -> String {
    if sources.is_empty() {
        "the default config".to_string()
    } else {
        sources.join(", ")
    }
}

/// Reads, merges and validates the configs; prints warnings to stderr.
pub(crate) fn load(sources: &[String]) -> Result<(Config, serde_json::Value)> {
    let merged = read_merged(sources)?;
    let diag = Diagnostics::default();
    let cfg = Config::from_value(&merged, &diag);
    for w in diag.take() {
        eprintln!("warning: {w}");
    }
    cfg.map(|c| (c, merged))
        .map_err(|e| anyhow!("{}: {e}", source_names(sources)))
}
