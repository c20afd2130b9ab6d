//! `ferry link --sub FILE|-`: a subscription (what a client app fetches from a subscription
//! URL: the links one per line, base64 of that list, or the list itself) becomes a config
//! fragment with an outbound per link, tagged with the link's name, and with `--balancer`, a
//! `leastPing` balancer over them with the observatory probing them (sing-box's `urltest`).

use std::collections::HashSet;
use std::process::ExitCode;

use anyhow::{anyhow, Result};
use serde_json::{json, Value};

use super::source::read_source;

/// Prints the outbounds of the subscription at `src` (a file, or `-` for stdin).
pub(crate) fn import(src: &str, balancer: bool) -> Result<ExitCode> {
    let (name, text) = read_source(src)?;
    let out = outbounds(&text, balancer).map_err(|e| anyhow!("{name}: {e}"))?;
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(ExitCode::SUCCESS)
}

/// The links of a subscription: base64 of the list (line breaks inside it allowed), or the
/// plain list.
fn links(text: &str) -> Result<Vec<String>, String> {
    let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    let list = if compact.contains("://") {
        text.to_string()
    } else {
        let bytes = ferry::common::text::base64_decode(&compact)
            .map_err(|_| "neither links nor base64 of links".to_string())?;
        String::from_utf8(bytes).map_err(|_| "the decoded subscription is not UTF-8")?
    };
    Ok(list
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect())
}

/// `{"outbounds": [...]}` (and the balancer's `routing` and `observatory` with `balancer`):
/// tags from the links' names, made unique (`name-2`, ...), `proxy-N` for a link without one.
fn outbounds(text: &str, balancer: bool) -> Result<Value, String> {
    let links = links(text)?;
    if links.is_empty() {
        return Err("no links in the subscription".into());
    }
    let mut seen = HashSet::new();
    let mut obs = Vec::new();
    for (i, l) in links.iter().enumerate() {
        let mut o =
            ferry::proxy::table::parse_link(l).map_err(|e| format!("link {}: {e}", i + 1))?;
        let base = o
            .get("tag")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .map(str::to_string)
            .unwrap_or_else(|| format!("proxy-{}", i + 1));
        let mut tag = base.clone();
        let mut n = 1;
        while !seen.insert(tag.clone()) {
            n += 1;
            tag = format!("{base}-{n}");
        }
        o["tag"] = json!(tag);
        obs.push(o);
    }
    let tags: Vec<Value> = obs.iter().map(|o| o["tag"].clone()).collect();
    let mut out = json!({ "outbounds": obs });
    if balancer {
        // Xray's selector matches tag prefixes: the full tags select exactly these.
        // and one rule sends everything through the balancer.
        out["routing"] = json!({
            "balancers": [{
                "tag": "subscription", "selector": tags,
                "strategy": {"type": "leastPing"}, "fallbackTag": tags[0]
            }],
            "rules": [{"network": "tcp,udp", "balancerTag": "subscription"}]
        });
        out["observatory"] = json!({
            "subjectSelector": tags,
            "probeUrl": "https://www.google.com/generate_204",
            "probeInterval": "1m", "enableConcurrency": true
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "trojan://pass@a.example:443?security=tls&sni=a.example#Node";
    const B: &str = "ss://YWVzLTI1Ni1nY206c2VjcmV0@b.example:8388#Node";
    const C: &str = "vless://5783a3e7-e373-51cd-8642-c83782b807c5@c.example:443?security=none";

    #[test]
    fn a_base64_subscription_becomes_uniquely_tagged_outbounds() {
        let list = format!("{A}\n{B}\r\n\n{C}\n");
        let b64 = ferry::common::text::base64_std(list.as_bytes());
        // Wrapped at 76 columns, as some servers send it.
        let wrapped: String = b64
            .as_bytes()
            .chunks(76)
            .map(|c| format!("{}\n", std::str::from_utf8(c).unwrap()))
            .collect();
        for text in [b64.as_str(), wrapped.as_str(), list.as_str()] {
            let v = outbounds(text, false).unwrap();
            let o = v["outbounds"].as_array().unwrap();
            let tags: Vec<&str> = o.iter().map(|o| o["tag"].as_str().unwrap()).collect();
            assert_eq!(tags, ["Node", "Node-2", "proxy-3"], "{text}");
            assert_eq!(o[0]["protocol"], "trojan");
            assert_eq!(o[1]["protocol"], "shadowsocks");
            assert_eq!(o[2]["protocol"], "vless");
            assert!(v.get("routing").is_none());
        }
    }

    #[test]
    fn the_balancer_selects_every_outbound_and_probes_them() {
        let v = outbounds(&format!("{A}\n{C}"), true).unwrap();
        let b = &v["routing"]["balancers"][0];
        assert_eq!(b["selector"], json!(["Node", "proxy-2"]));
        assert_eq!(b["strategy"]["type"], "leastPing");
        assert_eq!(v["routing"]["rules"][0]["balancerTag"], "subscription");
        assert_eq!(
            v["observatory"]["subjectSelector"],
            json!(["Node", "proxy-2"])
        );
    }

    #[test]
    fn garbage_and_bad_links_are_named() {
        assert!(outbounds("!!!", false)
            .unwrap_err()
            .contains("neither links"));
        assert!(outbounds("", false).unwrap_err().contains("no links"));
        let e = outbounds(&format!("{A}\nvless://nope"), false).unwrap_err();
        assert!(e.starts_with("link 2:"), "{e}");
    }
}
