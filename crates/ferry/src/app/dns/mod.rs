//! The `dns` object (routing.md §4): hosts, servers chosen by their `domains`, answers filtered
//! by `expectedIPs` / `unexpectedIPs`, query strategy and a per-server cache. Routing's
//! `IPIfNonMatch` / `IPOnDemand` resolve through it.
//!
//! Servers: plain UDP (`8.8.8.8`, `8.8.8.8:53`, `udp://…`, a host name), TCP (`tcp://`,
//! `tcp+local://`), DNS over HTTPS (`https://`, `https+local://`, and in clear `h2c://`,
//! `h2c+local://`: [`doh`]), `localhost` (the system resolver) and `fakedns` ([`fake`], for
//! the `dns` outbound only). DNS over QUIC and parallel queries are a config error naming them
//! ("not yet"). As in Xray (routing.md §4.7), queries to a server without `+local` go through
//! routing, as a connection from the inbound tag `tag` (the server's, else the object's) to the
//! server's address; `+local` servers and `localhost` are dialed directly. Until an instance
//! gives the resolver its [`Route`] (and in `ferry test`), every server is dialed directly.

pub mod doh;
pub mod fake;
/// The DNS message codec (in `common`: the DNS outbound reads and writes messages too).
pub use crate::common::dns_message as message;
mod resolve;

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use serde_json::Value;

use crate::app::router::{Assets, DomainSet, DomainType, IpSet};
use crate::common::Destination;
use crate::config::reader::{self, ConfigError, Obj, Result};
use crate::transport::{BoxStream, PacketConn};

pub use crate::common::dns_message::Answer;
pub use resolve::Dns;

/// Which address families a lookup asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Families {
    pub v4: bool,
    pub v6: bool,
}

impl Families {
    pub const BOTH: Families = Families { v4: true, v6: true };

    fn parse(s: &str) -> Families {
        let k = s.to_ascii_lowercase().replace(['_', '-'], "");
        match k.as_str() {
            "useipv4" | "useip4" | "ipv4" | "ip4" | "useipv4only" => Families {
                v4: true,
                v6: false,
            },
            "useipv6" | "useip6" | "ipv6" | "ip6" => Families {
                v4: false,
                v6: true,
            },
            _ => Families::BOTH,
        }
    }

    fn and(self, o: Families) -> Families {
        Families {
            v4: self.v4 && o.v4,
            v6: self.v6 && o.v6,
        }
    }
}

/// How a server is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// UDP to host:port (a host name is resolved by the system).
    Udp(String, u16),
    /// TCP with the two-byte length prefix.
    Tcp(String, u16),
    /// DNS over HTTPS, or over h2c (one connection per server, shared by its clones).
    Doh(Arc<doh::Doh>),
    /// The system resolver.
    Localhost,
    /// The fake pools (answers only the `dns` outbound's lookups).
    Fake,
}

/// Where queries to a routed server go: the instance's dispatcher routes a connection from
/// inbound tag `tag` to `dest` (without resolving a domain: the resolver would ask itself)
/// and dials the outbound it picks.
#[async_trait]
pub trait Route: Send + Sync {
    async fn dial_tcp(&self, tag: &str, dest: &Destination) -> io::Result<BoxStream>;
    async fn dial_udp(&self, tag: &str, dest: &Destination) -> io::Result<Box<dyn PacketConn>>;
}

/// One `servers` entry.
#[derive(Debug, Clone)]
pub struct Server {
    pub transport: Transport,
    /// The inbound tag its queries are routed with; `None`: dialed directly (`+local`,
    /// `localhost`, `fakedns`).
    pub route_tag: Option<Arc<str>>,
    pub domains: Option<DomainSet>,
    pub expect: Option<(IpSet, bool)>,
    pub unexpect: Option<(IpSet, bool)>,
    pub skip_fallback: bool,
    pub final_query: bool,
    pub client_ip: Option<IpAddr>,
    pub families: Families,
    pub timeout: Duration,
    pub disable_cache: bool,
    /// The address as written (logs).
    pub name: String,
}

/// A `hosts` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostValue {
    Ips(Vec<IpAddr>),
    /// Resolution restarts with this name.
    Alias(String),
    /// Answer with this rcode and no records.
    Rcode(u8),
}

/// One `hosts` key: its matcher, its rank for ordering (full, domain deepest first,
/// keyword, regexp), and its value.
#[derive(Debug, Clone)]
pub struct HostRule {
    pub matcher: DomainSet,
    pub rank: (u8, i32),
    pub value: HostValue,
}

const NOT_YET: &str =
    "is not supported yet (Ferry's dns has UDP, TCP, DoH, h2c, localhost and fakedns servers)";

fn parse_host_port(s: &str, default: u16, path: &str) -> Result<(String, u16)> {
    let bad = || ConfigError::new(path, format!("{s:?} is not host[:port]"));
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok((a.ip().to_string(), a.port()));
    }
    if let Ok(ip) = s.trim_matches(['[', ']']).parse::<IpAddr>() {
        return Ok((ip.to_string(), default));
    }
    match s.rsplit_once(':') {
        Some((h, p)) if !h.is_empty() && !h.contains(':') => {
            Ok((h.to_string(), p.parse().map_err(|_| bad())?))
        }
        Some(_) => Err(bad()),
        None if !s.is_empty() => Ok((s.to_string(), default)),
        None => Err(bad()),
    }
}

/// Reads an address string into a transport; the URL forms Ferry lacks are errors.
fn parse_address(s: &str, port: Option<u16>, path: &str) -> Result<Transport> {
    let lower = s.to_ascii_lowercase();
    if lower == "localhost" {
        return Ok(Transport::Localhost);
    }
    if let Some((scheme, _)) = lower.split_once("://") {
        let url = &s[scheme.len() + 3..];
        let rest = url.split('/').next().unwrap_or(url);
        return match scheme {
            "udp" => {
                let (h, p) = parse_host_port(rest, 53, path)?;
                Ok(Transport::Udp(h, p))
            }
            "tcp" | "tcp+local" => {
                let (h, p) = parse_host_port(rest, 53, path)?;
                Ok(Transport::Tcp(h, p))
            }
            "https" | "https+local" | "h2c" | "h2c+local" => Ok(Transport::Doh(Arc::new(
                doh::Doh::parse(url, scheme.starts_with("https"), path)?,
            ))),
            _ => Err(ConfigError::new(
                path,
                format!("{s:?}: {scheme}:// {NOT_YET}"),
            )),
        };
    }
    if lower == "fakedns" {
        return Ok(Transport::Fake);
    }
    let (h, p) = parse_host_port(s, port.unwrap_or(53), path)?;
    Ok(Transport::Udp(h, port.filter(|&p| p != 0).unwrap_or(p)))
}

/// Whether queries to `address` go through routing (not `+local`, `localhost`, `fakedns`).
fn routed(address: &str) -> bool {
    let lower = address.to_ascii_lowercase();
    match lower.split_once("://") {
        Some((scheme, _)) => !scheme.ends_with("+local"),
        None => lower != "localhost" && lower != "fakedns",
    }
}

/// `expectedIPs`-like list: a `"*"` entry switches to prefer mode.
fn ip_filter(o: &Obj<'_>, names: &[&str], assets: &Assets) -> Result<Option<(IpSet, bool)>> {
    let Some((p, v)) = o.get_alias(names) else {
        return Ok(None);
    };
    let mut list = reader::as_str_list(v, &p)?;
    let prefer = list.iter().any(|x| x == "*");
    list.retain(|x| x != "*");
    if list.is_empty() {
        return Ok(None);
    }
    Ok(Some((IpSet::parse_with(&list, &p, assets)?, prefer)))
}

/// Reads the `dns` object. Warnings go to the config's diagnostics.
pub fn parse(o: &Obj<'_>, assets: &Assets) -> Result<Dns> {
    let diag = o.diag();
    let families = o
        .str("queryStrategy")?
        .map(|s| Families::parse(&s))
        .unwrap_or(Families::BOTH);
    let client_ip = parse_ip(o, "clientIp")?;
    let disable_cache = o.bool("disableCache")?.unwrap_or(false);
    // Xray's default names no inbound a rule could list.
    let tag: Arc<str> = match o.str("tag")? {
        Some(t) if !t.is_empty() => t.into(),
        _ => format!("xray.system.{}", uuid::Uuid::new_v4()).into(),
    };
    let mut servers = Vec::new();
    if let Some((p, Value::Array(items))) = o.get("servers") {
        for (i, it) in items.iter().enumerate() {
            let ip = format!("{p}[{i}]");
            let s = match it {
                Value::String(s) => Server {
                    transport: parse_address(s, None, &ip)?,
                    route_tag: routed(s).then(|| tag.clone()),
                    domains: None,
                    expect: None,
                    unexpect: None,
                    skip_fallback: false,
                    final_query: false,
                    client_ip,
                    families,
                    timeout: Duration::from_secs(4),
                    disable_cache,
                    name: s.clone(),
                },
                _ => {
                    let so = Obj::new(it, ip.clone(), diag)?;
                    let s = parse_server(&so, families, client_ip, disable_cache, &tag, assets)?;
                    so.finish();
                    s
                }
            };
            servers.push(s);
        }
    } else if let Some((p, _)) = o.get("servers") {
        return Err(ConfigError::new(p, "expected an array"));
    }
    let mut hosts = Vec::new();
    if let Some(h) = o.obj("hosts")? {
        if let Some(m) = h.value().as_object() {
            for (k, v) in m {
                hosts.push(parse_host(&h, k, v, assets)?);
                h.ignore(&[k]);
            }
        }
    }
    if o.bool("useSystemHosts")?.unwrap_or(false) {
        hosts.extend(system_hosts());
    }
    for k in ["serveStale", "serveExpiredTTL"] {
        if o.has(k) {
            diag.warn(
                &o.key_path(k),
                "not supported yet: expired answers are not served",
            );
        }
    }
    if o.bool("enableParallelQuery")?.unwrap_or(false) {
        diag.warn(
            &o.key_path("enableParallelQuery"),
            "not supported yet: servers are queried one after another",
        );
    }
    Ok(Dns::new(
        servers,
        hosts,
        families,
        disable_cache,
        o.bool("disableFallback")?.unwrap_or(false),
        o.bool("disableFallbackIfMatch")?.unwrap_or(false),
    ))
}

fn parse_ip(o: &Obj<'_>, key: &str) -> Result<Option<IpAddr>> {
    match o.str(key)? {
        None => Ok(None),
        Some(s) if s.is_empty() => Ok(None),
        Some(s) => s
            .parse()
            .map(Some)
            .map_err(|_| ConfigError::new(o.key_path(key), format!("{s:?} is not an IP"))),
    }
}

fn parse_server(
    o: &Obj<'_>,
    families: Families,
    client_ip: Option<IpAddr>,
    disable_cache: bool,
    tag: &Arc<str>,
    assets: &Assets,
) -> Result<Server> {
    let address = o.req_str("address")?;
    let port = match o.get("port") {
        Some((p, v)) => Some(
            v.as_u64()
                .and_then(|n| u16::try_from(n).ok())
                .ok_or_else(|| ConfigError::new(p, "expected a port number"))?,
        ),
        None => None,
    };
    let transport = parse_address(&address, port, &o.key_path("address"))?;
    let domains = match o.get("domains") {
        Some((p, v)) => Some(DomainSet::parse_with(
            &reader::as_str_list(v, &p)?,
            &p,
            DomainType::Substr,
            assets,
        )?),
        None => None,
    };
    let mut expect = ip_filter(o, &["expectedIPs"], assets)?;
    if expect.is_none() {
        expect = ip_filter(o, &["expectIPs"], assets)?;
    }
    let unexpect = ip_filter(o, &["unexpectedIPs"], assets)?;
    let timeout = match o.get("timeoutMs") {
        Some((_, v)) => Duration::from_millis(v.as_u64().filter(|&n| n > 0).unwrap_or(4000)),
        None => Duration::from_secs(4),
    };
    let own = o.str("queryStrategy")?.map(|s| Families::parse(&s));
    o.ignore(&["allowUnexpectedIPs"]);
    let route_tag = routed(&address).then(|| match o.str("tag") {
        Ok(Some(t)) if !t.is_empty() => Arc::from(t),
        _ => tag.clone(),
    });
    o.str("tag")?;
    for k in ["serveStale", "serveExpiredTTL"] {
        if o.has(k) {
            o.diag().warn(
                &o.key_path(k),
                "not supported yet: expired answers are not served",
            );
        }
    }
    Ok(Server {
        transport,
        route_tag,
        domains,
        expect,
        unexpect,
        skip_fallback: o.bool("skipFallback")?.unwrap_or(false),
        final_query: o.bool("finalQuery")?.unwrap_or(false),
        client_ip: parse_ip(o, "clientIp")?.or(client_ip),
        families: own.map_or(families, |f| families.and(f)),
        timeout,
        disable_cache: o.bool("disableCache")?.unwrap_or(disable_cache),
        name: address,
    })
}

fn host_value(s: &str) -> HostValue {
    if let Some(n) = s.strip_prefix('#').and_then(|n| n.parse::<u8>().ok()) {
        return HostValue::Rcode(n);
    }
    match s.parse::<IpAddr>() {
        Ok(ip) => HostValue::Ips(vec![ip]),
        Err(_) => HostValue::Alias(s.trim_end_matches('.').to_ascii_lowercase()),
    }
}

fn parse_host(h: &Obj<'_>, key: &str, v: &Value, assets: &Assets) -> Result<HostRule> {
    let p = h.key_path(key);
    let values = reader::as_str_list(v, &p)?;
    let mut ips = Vec::new();
    let mut value = None;
    for x in &values {
        match host_value(x) {
            HostValue::Ips(v) => ips.extend(v),
            other => {
                // The first domain (or rcode) wins; the IPs are dropped.
                value = Some(other);
                break;
            }
        }
    }
    let value = value.unwrap_or(HostValue::Ips(ips));
    let lower = key.to_ascii_lowercase();
    let rank = if let Some(d) = lower.strip_prefix("domain:") {
        (1, -(d.split('.').count() as i32))
    } else if lower.starts_with("keyword:") {
        (2, 0)
    } else if lower.starts_with("regexp:") || lower.starts_with("dotless:") {
        (3, 0)
    } else if lower.starts_with("geosite:") || lower.starts_with("ext:") {
        (1, 0)
    } else {
        (0, 0)
    };
    let matcher = DomainSet::parse_with(&[key.to_string()], &p, DomainType::Full, assets)
        .map_err(|e| ConfigError::new(p.clone(), e.msg))?;
    Ok(HostRule {
        matcher,
        rank,
        value,
    })
}

/// `/etc/hosts` as full-name rules.
fn system_hosts() -> Vec<HostRule> {
    let text = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("");
        let mut it = line.split_whitespace();
        let Some(ip) = it.next().and_then(|s| s.parse::<IpAddr>().ok()) else {
            continue;
        };
        for name in it {
            if let Ok(m) = DomainSet::parse_with(
                &[format!("full:{name}")],
                "hosts",
                DomainType::Full,
                &Assets::only("."),
            ) {
                out.push(HostRule {
                    matcher: m,
                    rank: (0, 0),
                    value: HostValue::Ips(vec![ip]),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
