//! Inbounds: where one listens, and reading one inbound object (and the `inbounds` list).

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::Arc;

use serde_json::Value;

use super::protocol::{protocol_name, unsupported_protocol};
use super::reader::{self, ConfigError, Diagnostics, Obj};
use super::stream::{ParseStream, StreamSettings};
use crate::matchers::port::parse_ports;
use crate::proxy::{self, InboundBuild, InboundHandler};
use crate::registry::CounterSource;
use crate::transport::listener::UnixPath;

/// Where an inbound listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Listen {
    /// An IP address and one or more port ranges.
    Ip(IpAddr, Vec<(u16, u16)>),
    /// A unix socket: a path, `@abstract` or `@@padded` (the port is not used).
    Unix(UnixPath),
    /// No listener: the inbound opens a device of its own (`tun`).
    Device,
}

/// One inbound, ready to bind.
pub struct Inbound {
    pub tag: String,
    pub listen: Listen,
    pub protocol: String,
    pub handler: Arc<dyn InboundHandler>,
    /// Socket options and the acceptor chain's layers.
    pub stream: StreamSettings,
    /// The inbound's JSON object as configured.
    pub json: Value,
    /// `sniffing`, when enabled.
    pub sniffing: Option<Arc<crate::app::sniff::Sniffing>>,
}

/// Reads the `inbounds` list: each tag, when set, unique.
pub(super) fn parse_inbounds(
    root: &Obj<'_>,
    counters: &CounterSource,
    diag: &Diagnostics,
) -> reader::Result<Vec<Inbound>> {
    let mut inbounds = Vec::new();
    let mut in_tags = HashSet::new();
    for o in root.objs(&["inbounds"])? {
        let tag = o.str("tag")?.unwrap_or_default();
        if !tag.is_empty() && !in_tags.insert(tag.clone()) {
            return Err(ConfigError::new(
                o.key_path("tag"),
                format!("duplicate inbound tag {tag:?}"),
            ));
        }
        inbounds.push(parse_inbound(&o, tag, counters, diag)?);
        o.finish();
    }
    Ok(inbounds)
}

/// Reads `listen`: an IP address (default 0.0.0.0), or a unix socket; `None` for an IP
/// listener means the caller reads the ports.
fn parse_listen(o: &Obj<'_>) -> reader::Result<Result<IpAddr, UnixPath>> {
    let Some(s) = o.str("listen")? else {
        return Ok(Ok(IpAddr::from([0, 0, 0, 0])));
    };
    let s = match s.strip_prefix("env:") {
        Some(n) => std::env::var(n).map_err(|_| {
            ConfigError::new(
                o.key_path("listen"),
                format!("environment variable {n} is not set"),
            )
        })?,
        None => s,
    };
    if s.eq_ignore_ascii_case("localhost") {
        return Ok(Ok(IpAddr::from([127, 0, 0, 1])));
    }
    if let Some(u) = UnixPath::parse(&s) {
        if matches!(&u, UnixPath::Abstract(n) | UnixPath::Padded(n) if n.is_empty()) {
            return Err(ConfigError::new(
                o.key_path("listen"),
                "an abstract socket needs a name",
            ));
        }
        return Ok(Err(u));
    }
    s.parse().map(Ok).map_err(|_| {
        ConfigError::new(
            o.key_path("listen"),
            format!("{s:?} is not an IP address or a unix socket path"),
        )
    })
}

/// Reads one inbound object (its tag already read and checked by the caller).
pub fn parse_inbound(
    o: &Obj<'_>,
    tag: String,
    counters: &CounterSource,
    diag: &Diagnostics,
) -> reader::Result<Inbound> {
    let name = protocol_name(o)?;
    let builder =
        proxy::inbound_builder(&name).ok_or_else(|| unsupported_protocol(o, &name, "inbound"))?;
    let portless = proxy::table::inbound(&name).is_some_and(|p| p.portless);
    let listen = if portless {
        // Xray reads neither for a TUN inbound.
        o.ignore(&["port", "listen"]);
        Listen::Device
    } else {
        match parse_listen(o)? {
            Ok(ip) => {
                let (pp, pv) = o
                    .get("port")
                    .ok_or_else(|| ConfigError::new(o.key_path("port"), "is required"))?;
                Listen::Ip(ip, parse_ports(pv, &pp)?)
            }
            Err(unix) => {
                // Xray ignores the port of a unix listener.
                o.ignore(&["port"]);
                Listen::Unix(unix)
            }
        }
    };
    let ss = StreamSettings::parse(o, false)?;
    quic_network_check(o, &ss, &name)?;
    if let crate::transport::chain::Security::Reality(r) = &ss.security {
        // REALITY's strangers go to the target through the relay (the transport sits below it).
        r.relay_strangers_with(crate::relay::stranger_to_target);
    }
    let mut sniffing = None;
    if let Some(s) = o.obj("sniffing")? {
        sniffing = crate::app::sniff::Sniffing::parse(&s)?.map(Arc::new);
        s.finish();
    }
    o.ignore(&["allocate"]);
    let settings_v = o.get("settings").map(|(_, v)| v).unwrap_or(&Value::Null);
    let settings = Obj::new(settings_v, o.key_path("settings"), diag)?;
    let handler = builder(
        &settings,
        &InboundBuild {
            tag: &tag,
            diag,
            counters,
            stream: &ss,
        },
    )?;
    settings.finish();
    Ok(Inbound {
        sniffing,
        tag,
        listen,
        protocol: name,
        handler,
        stream: ss,
        json: o.value(),
    })
}

/// The `hysteria` network carries the `hysteria` protocol only (Xray also runs VLESS and others
/// on it; Ferry does not yet).
pub(super) fn quic_network_check(
    o: &Obj<'_>,
    ss: &StreamSettings,
    protocol: &str,
) -> reader::Result<()> {
    let hysteria = &crate::proxy::hysteria::PROTOCOL;
    if matches!(ss.network, crate::transport::chain::Network::Hysteria(_))
        && !hysteria.is(protocol, true)
    {
        return Err(ConfigError::new(
            o.key_path("streamSettings.network"),
            format!(
                "the {} network under {protocol:?} is not supported by Ferry yet (it carries the {} protocol)",
                hysteria.name(),
                hysteria.name()
            ),
        ));
    }
    Ok(())
}
