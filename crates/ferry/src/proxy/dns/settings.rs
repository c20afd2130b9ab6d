//! The `dns` outbound's settings: where direct queries go, and its rules.

use serde_json::Value;

use super::rules::{legacy_rules, parse_rule};
use super::DnsOutbound;
use crate::common::{Address, Network};
use crate::config::reader::{self, ConfigError, Obj, Result};
use crate::proxy::OutboundBuild;

fn parse_network(v: &Value, path: &str) -> Result<Option<Network>> {
    let s = reader::as_str(v, path)?;
    match s.to_ascii_lowercase().as_str() {
        "" => Ok(None),
        "tcp" => Ok(Some(Network::Tcp)),
        "udp" => Ok(Some(Network::Udp)),
        other => Err(ConfigError::new(
            path,
            format!("unknown network {other:?} (tcp or udp)"),
        )),
    }
}

pub(super) fn parse(o: &Obj<'_>, b: &OutboundBuild<'_>) -> Result<DnsOutbound> {
    // The newer spelling is read first; the older one, when given, wins (as in Xray).
    let mut network = None;
    for k in ["rewriteNetwork", "network"] {
        if let Some((p, v)) = o.get(k) {
            if let Some(n) = parse_network(v, &p)? {
                network = Some(n);
            }
        }
    }
    let mut address = None;
    for k in ["rewriteAddress", "address"] {
        if let Some(a) = o.str(k)?.filter(|a| !a.is_empty()) {
            address = Some(Address::parse(&a));
        }
    }
    let mut port = None;
    for k in ["rewritePort", "port"] {
        if let Some(p) = o.port(k)?.filter(|p| *p != 0) {
            port = Some(p);
        }
    }
    crate::proxy::socks::user_level(o)?;
    let legacy = o.has("nonIPQuery") || o.has("blockTypes");
    let rules = if legacy {
        if o.has("rules") {
            return Err(ConfigError::new(
                o.key_path("rules"),
                "legacy nonIPQuery and blockTypes cannot be mixed with rules",
            ));
        }
        b.diag.warn(
            o.path(),
            "\"nonIPQuery\" and \"blockTypes\" are deprecated; read as the \"rules\" Xray makes of them",
        );
        legacy_rules(o)?
    } else {
        let mut rules = Vec::new();
        for r in o.objs(&["rules"])? {
            rules.push(parse_rule(&r)?);
            r.finish();
        }
        rules
    };
    Ok(DnsOutbound {
        dns: b.dns.clone(),
        rules,
        network,
        address,
        port,
        dialer: b.dialer.clone(),
    })
}
