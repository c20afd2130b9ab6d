//! Outbounds: reading one outbound object (its mux, proxy chain and source address), and the
//! `outbounds` list with its dialer chains checked.

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::Arc;

use serde_json::Value;

use super::protocol::{protocol_name, unsupported_protocol};
use super::reader::{self, ConfigError, Diagnostics, Obj};
use super::services::ServiceOutbound;
use super::stream::{ParseStream, StreamSettings};
use crate::proxy::{self, OutboundBuild, OutboundHandler};
use crate::registry::Outbounds;

/// One outbound, ready to dial.
pub struct Outbound {
    pub tag: String,
    pub protocol: String,
    pub handler: Arc<dyn OutboundHandler>,
    /// A VLESS outbound with `reverse`: the bridge the instance starts.
    pub bridge: Option<proxy::reverse::Bridge>,
}

/// Reads the `outbounds` list (a default freedom outbound when it is empty), then the service
/// outbounds (`api`, `metrics`), and checks the dialer chains: the outbounds and their tags.
pub(super) fn parse_outbounds(
    root: &Obj<'_>,
    registry: &Arc<Outbounds>,
    out_dns: &Arc<crate::app::dns::Dns>,
    special_outbounds: Vec<ServiceOutbound>,
    diag: &Diagnostics,
) -> reader::Result<(Vec<Outbound>, HashSet<String>)> {
    let mut outbounds = Vec::new();
    let mut tags = HashSet::new();
    // (path, outbound, the outbound it dials through)
    let mut chains: Vec<(String, String, String)> = Vec::new();
    for o in root.objs(&["outbounds"])? {
        let tag = o.str("tag")?.unwrap_or_default();
        if !tag.is_empty() && !tags.insert(tag.clone()) {
            return Err(ConfigError::new(
                o.key_path("tag"),
                format!("duplicate outbound tag {tag:?}"),
            ));
        }
        let (out, via) = parse_outbound(&o, tag, registry, out_dns, diag)?;
        if let Some(via) = via {
            chains.push((o.path().to_string(), out.tag.clone(), via));
        }
        o.finish();
        outbounds.push(out);
    }
    if outbounds.is_empty() {
        diag.warn(
            "outbounds",
            "no outbound configured; adding a default freedom outbound",
        );
        outbounds.push(Outbound {
            tag: String::new(),
            protocol: proxy::freedom::PROTOCOL.name().into(),
            handler: Arc::new(proxy::freedom::Freedom::default()),
            bridge: None,
        });
    }
    for (path, tag, protocol, handler) in special_outbounds {
        if !tags.insert(tag.clone()) {
            return Err(ConfigError::new(
                path,
                format!("outbound tag {tag:?} is already taken"),
            ));
        }
        outbounds.push(Outbound {
            tag,
            protocol: protocol.into(),
            handler,
            bridge: None,
        });
    }
    check_chains(&chains, &tags)?;
    Ok((outbounds, tags))
}

/// Checks `proxySettings` / `dialerProxy` chains: each names an existing outbound, and no
/// chain loops back to where it started.
fn check_chains(chains: &[(String, String, String)], tags: &HashSet<String>) -> reader::Result<()> {
    let via: std::collections::HashMap<&str, &str> = chains
        .iter()
        .map(|(_, from, to)| (from.as_str(), to.as_str()))
        .collect();
    for (path, from, to) in chains {
        if !tags.contains(to) {
            return Err(ConfigError::new(
                path.as_str(),
                format!("dials through outbound {to:?}, which does not exist"),
            ));
        }
        let mut seen = vec![from.as_str()];
        let mut cur = to.as_str();
        while let Some(next) = via.get(cur) {
            seen.push(cur);
            if seen.contains(next) {
                return Err(ConfigError::new(
                    path.as_str(),
                    format!("dialer chain loops: {} -> {next}", seen.join(" -> ")),
                ));
            }
            cur = next;
        }
    }
    Ok(())
}

/// Reads one outbound object (its tag already read and checked by the caller). Returns the
/// outbound and the tag of the outbound it dials through, if any (for the chain check).
pub fn parse_outbound(
    o: &Obj<'_>,
    tag: String,
    registry: &Arc<Outbounds>,
    dns: &Arc<crate::app::dns::Dns>,
    diag: &Diagnostics,
) -> reader::Result<(Outbound, Option<String>)> {
    let name = protocol_name(o)?;
    let builder =
        proxy::outbound_builder(&name).ok_or_else(|| unsupported_protocol(o, &name, "outbound"))?;
    let ss = StreamSettings::parse(o, true)?;
    super::inbound::quic_network_check(o, &ss, &name)?;
    let mux = match o.obj("mux")? {
        Some(m) => {
            let s = proxy::mux::MuxSettings::parse(&m)?;
            if s.enabled && !proxy::table::muxable(&name) {
                return Err(ConfigError::new(
                    m.key_path("enabled"),
                    format!("mux on a {name} outbound is not supported (vless and vmess have it)"),
                ));
            }
            m.finish();
            s.enabled.then_some(s)
        }
        None => None,
    };
    if let Some(t) = o.str("targetStrategy")? {
        if !t.is_empty() && !t.eq_ignore_ascii_case("asis") {
            return Err(ConfigError::new(
                o.key_path("targetStrategy"),
                format!("{t:?} on the outbound is not supported yet (freedom's settings.domainStrategy is)"),
            ));
        }
    }
    let mut ss = ss;
    if let Some(p) = o.obj("proxySettings")? {
        let t = p
            .str("tag")?
            .filter(|t| !t.is_empty())
            .ok_or_else(|| ConfigError::new(p.key_path("tag"), "is required"))?;
        p.ignore(&["transportLayer"]);
        p.finish();
        ss.dialer_proxy = Some(t);
    }
    let send_through = match o.str("sendThrough")? {
        Some(s) => Some(s.parse::<IpAddr>().map_err(|_| {
            ConfigError::new(
                o.key_path("sendThrough"),
                format!("{s:?} is not an IP address"),
            )
        })?),
        None => None,
    };
    ss.sockopt.bind = send_through;
    if let Some(via) = &ss.dialer_proxy {
        if *via == tag {
            return Err(ConfigError::new(
                o.path(),
                format!("outbound {tag:?} cannot dial through itself"),
            ));
        }
    }
    let chain = ss.dialer_proxy.clone();
    let via = ss.dialer_proxy.clone().map(|t| {
        Arc::new(crate::registry::OutboundRef {
            tag: t,
            table: registry.clone(),
        }) as Arc<dyn crate::transport::Dialer>
    });
    let dialer = ss.dialer(via);
    let settings_v = o.get("settings").map(|(_, v)| v).unwrap_or(&Value::Null);
    let settings = Obj::new(settings_v, o.key_path("settings"), diag)?;
    let bridge = std::cell::OnceCell::new();
    let handler = builder(
        &settings,
        &OutboundBuild {
            tag: &tag,
            diag,
            dialer,
            sockopt: ss.sockopt.clone(),
            stream: &ss,
            dns: dns.clone(),
            bridge: &bridge,
        },
    )?;
    settings.finish();
    let handler = match mux {
        Some(m) => Arc::new(proxy::mux::client::Muxed::new(handler, &m)),
        None => handler,
    };
    Ok((
        Outbound {
            tag,
            protocol: name,
            handler,
            bridge: bridge.into_inner(),
        },
        chain,
    ))
}
