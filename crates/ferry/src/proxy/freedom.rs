//! `freedom` (alias `direct`): connects to the destination itself.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use async_trait::async_trait;
use tokio::net::UdpSocket;

use super::{OutboundBuild, OutboundHandler, PacketConn};
use crate::common::{Address, Destination, Network};
use crate::config::reader::{ConfigError, Obj, Result};
use crate::transport::tcp::{self, SockOpts};
use crate::transport::{BoxStream, Dialer, SocketDialer};

/// `domainStrategy` of freedom.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Strategy {
    #[default]
    AsIs,
    UseIp,
    UseIpv4,
    UseIpv6,
}

#[derive(Clone)]
pub struct Freedom {
    pub strategy: Strategy,
    /// `redirect`: host and/or port that replace the destination's (`None` keeps it).
    pub redirect: Option<(Option<Address>, Option<u16>)>,
    /// Dials each resolved address (`sendThrough`, `sockopt`, or a `dialerProxy` chain).
    pub dialer: Arc<dyn Dialer>,
    /// Socket options of its own UDP socket (`sendThrough` binds it).
    pub sockopt: SockOpts,
    /// `finalRules`: allow or block the final (resolved) destination.
    pub final_rules: Vec<FinalRule>,
}

impl Default for Freedom {
    fn default() -> Self {
        Freedom {
            strategy: Strategy::AsIs,
            redirect: None,
            dialer: Arc::new(SocketDialer {
                opts: SockOpts::default(),
            }),
            sockopt: SockOpts::default(),
            final_rules: Vec::new(),
        }
    }
}

/// One of freedom's `finalRules`: when every condition it has matches the final destination,
/// its action decides. Rules are tried in order; when none matches, the connection goes.
#[derive(Clone, Debug)]
pub struct FinalRule {
    pub allow: bool,
    pub networks: Option<Vec<Network>>,
    pub ports: Option<Vec<(u16, u16)>>,
    pub ips: Option<Vec<(IpAddr, u8)>>,
}

/// `geoip:private`: the ranges Xray's private list holds (RFC 1918, loopback, link-local,
/// CGNAT, multicast and the reserved blocks, and their IPv6 kin).
const PRIVATE: &[&str] = &[
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.0.2.0/24",
    "192.88.99.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "224.0.0.0/3",
    "::/127",
    "fc00::/7",
    "fe80::/10",
    "ff00::/8",
];

fn parse_cidr(s: &str) -> Option<(IpAddr, u8)> {
    let (ip, bits) = match s.split_once('/') {
        Some((ip, b)) => (ip.parse::<IpAddr>().ok()?, b.parse::<u8>().ok()?),
        None => {
            let ip = s.parse::<IpAddr>().ok()?;
            (ip, if ip.is_ipv4() { 32 } else { 128 })
        }
    };
    let max = if ip.is_ipv4() { 32 } else { 128 };
    (bits <= max).then_some((ip, bits))
}

fn in_cidr(ip: IpAddr, (net, bits): (IpAddr, u8)) -> bool {
    match (ip.to_canonical(), net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let m = if bits == 0 {
                0
            } else {
                u32::MAX << (32 - bits)
            };
            u32::from(a) & m == u32::from(n) & m
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let m = if bits == 0 {
                0
            } else {
                u128::MAX << (128 - bits)
            };
            u128::from(a) & m == u128::from(n) & m
        }
        _ => false,
    }
}

impl FinalRule {
    fn parse(r: &Obj<'_>) -> Result<FinalRule> {
        let allow = match r.req_str("action")?.to_ascii_lowercase().as_str() {
            "allow" => true,
            "block" => false,
            other => {
                return Err(ConfigError::new(
                    r.key_path("action"),
                    format!("unknown action {other:?} (allow or block)"),
                ))
            }
        };
        let networks = match r.str_list("network")? {
            None => None,
            Some(list) => {
                let mut v = Vec::new();
                for n in list.iter().flat_map(|n| n.split(',')).map(str::trim) {
                    v.push(match n.to_ascii_lowercase().as_str() {
                        "tcp" => Network::Tcp,
                        "udp" => Network::Udp,
                        other => {
                            return Err(ConfigError::new(
                                r.key_path("network"),
                                format!("unknown network {other:?}"),
                            ))
                        }
                    });
                }
                Some(v)
            }
        };
        let ports = match r.get("port") {
            Some((p, v)) => Some(crate::config::parse_ports(v, &p)?),
            None => None,
        };
        let ips = match r.str_list("ip")? {
            None => None,
            Some(list) => {
                let mut v = Vec::new();
                for s in list {
                    if s.eq_ignore_ascii_case("geoip:private") {
                        v.extend(PRIVATE.iter().filter_map(|c| parse_cidr(c)));
                        continue;
                    }
                    v.push(parse_cidr(&s).ok_or_else(|| {
                        ConfigError::new(
                            r.key_path("ip"),
                            format!("{s:?} is not an IP or CIDR (geoip: lists other than private are not supported yet)"),
                        )
                    })?);
                }
                Some(v)
            }
        };
        Ok(FinalRule {
            allow,
            networks,
            ports,
            ips,
        })
    }

    fn matches(&self, network: Network, addr: SocketAddr) -> bool {
        self.networks.as_ref().is_none_or(|n| n.contains(&network))
            && self
                .ports
                .as_ref()
                .is_none_or(|p| p.iter().any(|(a, b)| (*a..=*b).contains(&addr.port())))
            && self
                .ips
                .as_ref()
                .is_none_or(|c| c.iter().any(|c| in_cidr(addr.ip(), *c)))
    }
}

/// Whether the final rules let a connection to `addr` go (the first matching rule decides).
pub fn allowed(rules: &[FinalRule], network: Network, addr: SocketAddr) -> bool {
    rules
        .iter()
        .find(|r| r.matches(network, addr))
        .is_none_or(|r| r.allow)
}

pub fn build(o: &Obj<'_>, b: &OutboundBuild<'_>) -> Result<Arc<dyn OutboundHandler>> {
    // `targetStrategy` is Xray's current name; it wins over `domainStrategy` when set.
    let target = o.str("targetStrategy")?.filter(|s| !s.is_empty());
    let strategy_key = if target.is_some() {
        "targetStrategy"
    } else {
        "domainStrategy"
    };
    let strategy = match target
        .or(o.str("domainStrategy")?)
        .unwrap_or_default()
        .to_ascii_lowercase()
        .as_str()
    {
        "" | "asis" => Strategy::AsIs,
        "useip" | "forceip" => Strategy::UseIp,
        "useipv4" | "forceipv4" | "useipv4v6" | "forceipv4v6" => Strategy::UseIpv4,
        "useipv6" | "forceipv6" | "useipv6v4" | "forceipv6v4" => Strategy::UseIpv6,
        other => {
            return Err(ConfigError::new(
                o.key_path(strategy_key),
                format!("unknown strategy {other:?}"),
            ))
        }
    };
    let redirect = match o.str("redirect")?.filter(|r| !r.is_empty()) {
        None => None,
        Some(r) => {
            let bad =
                || ConfigError::new(o.key_path("redirect"), format!("{r:?} is not host:port"));
            let (h, p) = r.rsplit_once(':').ok_or_else(bad)?;
            let h = h.trim_start_matches('[').trim_end_matches(']');
            let port = if p.is_empty() {
                None
            } else {
                Some(p.parse::<u16>().map_err(|_| bad())?).filter(|p| *p != 0)
            };
            let host = if h.is_empty() {
                None
            } else {
                Some(Address::parse(h))
            };
            Some((host, port))
        }
    };
    if o.u64("proxyProtocol")?.unwrap_or(0) != 0 {
        return Err(ConfigError::new(
            o.key_path("proxyProtocol"),
            "PROXY protocol on freedom is not supported yet",
        ));
    }
    if o.has("ipsBlocked") {
        o.diag().warn(
            &o.key_path("ipsBlocked"),
            "removed in Xray (use finalRules); ignored",
        );
    }
    for k in ["fragment", "noise", "noises"] {
        // An empty list does nothing in Xray either (3x-ui's base config has `"noises": []`
        // on its direct outbound since v2.5).
        let empty = o
            .get(k)
            .is_some_and(|(_, v)| v.as_array().is_some_and(|a| a.is_empty()));
        if o.has(k) && !(k != "fragment" && empty) {
            return Err(ConfigError::new(o.key_path(k), "is not supported yet"));
        }
    }
    let mut final_rules = Vec::new();
    for r in o.objs(&["finalRules"])? {
        final_rules.push(FinalRule::parse(&r)?);
        r.finish();
    }
    o.ignore(&["userLevel", "timeout"]);
    Ok(Arc::new(Freedom {
        strategy,
        redirect,
        dialer: b.dialer.clone(),
        sockopt: b.sockopt.clone(),
        final_rules,
    }))
}

impl Freedom {
    fn target(&self, dest: &Destination) -> Destination {
        let mut d = dest.clone();
        if let Some((h, p)) = &self.redirect {
            if let Some(h) = h {
                d.addr = h.clone();
            }
            if let Some(p) = p {
                d.port = *p;
            }
        }
        d
    }

    async fn resolve(&self, dest: &Destination) -> io::Result<Vec<SocketAddr>> {
        let mut addrs = tcp::resolve(dest).await?;
        match self.strategy {
            Strategy::UseIpv4 => addrs.retain(SocketAddr::is_ipv4),
            Strategy::UseIpv6 => addrs.retain(SocketAddr::is_ipv6),
            Strategy::AsIs | Strategy::UseIp => {}
        }
        if addrs.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{dest}: no address of the wanted family"),
            ));
        }
        Ok(addrs)
    }
}

fn blocked(addr: SocketAddr) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!("{addr} is blocked by freedom's finalRules"),
    )
}

#[async_trait]
impl OutboundHandler for Freedom {
    async fn dial_tcp(&self, dest: &Destination) -> io::Result<BoxStream> {
        let dest = self.target(dest);
        let mut last = None;
        for a in self.resolve(&dest).await? {
            if !allowed(&self.final_rules, Network::Tcp, a) {
                last = Some(blocked(a));
                continue;
            }
            match self.dialer.dial_tcp(&a.into()).await {
                Ok(c) => return Ok(c),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::ErrorKind::NotFound.into()))
    }

    async fn dial_udp(&self, _dest: &Destination) -> io::Result<Box<dyn PacketConn>> {
        Ok(Box::new(FreedomUdp {
            sock: bind_dual_stack(self.sockopt.bind).await?,
            freedom: self.clone(),
            resolved: std::sync::Mutex::new(HashMap::new()),
        }))
    }
}

/// A UDP socket that reaches IPv4 and IPv6 (v4-mapped) destinations alike, or one bound to
/// `sendThrough` when it is set.
async fn bind_dual_stack(bind: Option<IpAddr>) -> io::Result<UdpSocket> {
    if let Some(ip) = bind {
        return UdpSocket::bind(SocketAddr::new(ip, 0)).await;
    }
    let s6 = socket2::Socket::new(
        socket2::Domain::IPV6,
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    );
    if let Ok(s) = s6 {
        if s.set_only_v6(false).is_ok()
            && s.bind(&SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)).into())
                .is_ok()
        {
            s.set_nonblocking(true)?;
            return UdpSocket::from_std(s.into());
        }
    }
    UdpSocket::bind(SocketAddr::from(([0, 0, 0, 0], 0))).await
}

struct FreedomUdp {
    sock: UdpSocket,
    freedom: Freedom,
    /// Domain destinations already resolved in this session (bounded; cleared when full).
    resolved: std::sync::Mutex<HashMap<Destination, SocketAddr>>,
}

/// Domain names one UDP session remembers.
const RESOLVED_MAX: usize = 64;

#[async_trait]
impl PacketConn for FreedomUdp {
    async fn send_to(&self, data: &[u8], dest: &Destination) -> io::Result<()> {
        let target = self.freedom.target(dest);
        let cached = self
            .resolved
            .lock()
            .ok()
            .and_then(|m| m.get(&target).copied());
        let addr = match (cached, target.socket_addr()) {
            (_, Some(a)) if self.freedom.strategy == Strategy::AsIs => a,
            (Some(a), _) => a,
            _ => {
                let a = self.freedom.resolve(&target).await?[0];
                if let Ok(mut m) = self.resolved.lock() {
                    if m.len() >= RESOLVED_MAX {
                        m.clear();
                    }
                    m.insert(target.clone(), a);
                }
                a
            }
        };
        if !allowed(&self.freedom.final_rules, Network::Udp, addr) {
            tracing::debug!("freedom udp: {}", blocked(addr));
            return Ok(());
        }
        let v6 = self.sock.local_addr()?.is_ipv6();
        let addr = match (v6, addr.ip()) {
            (true, IpAddr::V4(ip)) => SocketAddr::new(IpAddr::V6(ip.to_ipv6_mapped()), addr.port()),
            _ => addr,
        };
        self.sock.send_to(data, addr).await.map(|_| ())
    }

    async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, Destination)> {
        let (n, from) = self.sock.recv_from(buf).await?;
        Ok((
            n,
            SocketAddr::new(from.ip().to_canonical(), from.port()).into(),
        ))
    }
}
