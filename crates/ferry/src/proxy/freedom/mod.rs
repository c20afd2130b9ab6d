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
use crate::session::Session;

pub mod api;
mod rules;

use crate::transport::tcp::{self, SockOpts};
use crate::transport::{BoxStream, Dialer, SocketDialer};
pub use rules::{describe, guarded, is_private, Blocked, DefaultRule, FinalRule, Guard};

/// freedom's entry in the protocol table.
pub const PROTOCOL: crate::proxy::protocol::Protocol = crate::proxy::protocol::Protocol {
    outbound: Some(build),
    api: api::API,
    ..crate::proxy::protocol::Protocol::named(module_path!(), &["freedom", "direct"])
};

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
    /// The `dns` object, which resolves a name under a strategy other than `AsIs` (as Xray's
    /// freedom asks its DNS client; `None`: the system resolver).
    pub dns: Option<Arc<dyn crate::proxy::dns::Resolve>>,
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
            dns: None,
        }
    }
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
        dns: Some(b.dns.clone()),
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
        if let (Address::Domain(name), Some(dns)) = (&dest.addr, &self.dns) {
            let (v4, v6) = match self.strategy {
                Strategy::AsIs => (false, false),
                Strategy::UseIp => (true, true),
                Strategy::UseIpv4 => (true, false),
                Strategy::UseIpv6 => (false, true),
            };
            if v4 || v6 {
                let wanted = |ip: &&IpAddr| if ip.is_ipv4() { v4 } else { v6 };
                let addrs: Vec<SocketAddr> = dns
                    .lookup(name, v4, v6)
                    .await
                    .map(|a| {
                        a.ips
                            .iter()
                            .filter(wanted)
                            .map(|ip| SocketAddr::new(*ip, dest.port))
                            .collect()
                    })
                    .unwrap_or_default();
                if !addrs.is_empty() {
                    return Ok(addrs);
                }
                // Xray logs the failed lookup and dials the name itself.
                tracing::debug!(
                    "freedom: the dns object has no address for {name}; the system resolver's"
                );
            }
        }
        let mut addrs = tcp::resolve(dest).await?;
        // The strategy picks among a name's addresses; an address is dialled as it is (Xray's
        // freedom resolves only domains: UseIPv4 still dials an IPv6 literal).
        if matches!(dest.addr, Address::Ip(_)) {
            return Ok(addrs);
        }
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

impl Freedom {
    fn guard(&self, default_rule: DefaultRule) -> Guard<'_> {
        Guard {
            rules: &self.final_rules,
            default_rule,
        }
    }

    /// Resolves the destination (after `redirect`) and dials the first address the rules let
    /// through; when they let none through, the refusal of the first.
    async fn dial_guarded(
        &self,
        dest: &Destination,
        default_rule: DefaultRule,
    ) -> io::Result<BoxStream> {
        let dest = self.target(dest);
        let guard = self.guard(default_rule);
        let mut refused = None;
        let mut last = None;
        for a in self.resolve(&dest).await? {
            if let Err(b) = guard.check(Network::Tcp, a) {
                refused.get_or_insert(b);
                continue;
            }
            match self.dialer.dial_tcp(&a.into()).await {
                Ok(c) => return Ok(c),
                Err(e) => last = Some(e),
            }
        }
        Err(last
            .or_else(|| refused.map(Blocked::into_io))
            .unwrap_or_else(|| io::ErrorKind::NotFound.into()))
    }

    async fn open_udp(&self, default_rule: DefaultRule) -> io::Result<Box<dyn PacketConn>> {
        Ok(Box::new(FreedomUdp {
            sock: {
                let s = bind_dual_stack(self.sockopt.bind).await?;
                self.sockopt
                    .apply_any(&socket2::SockRef::from(&s), crate::common::Network::Udp)?;
                s
            },
            freedom: self.clone(),
            default_rule,
            resolved: std::sync::Mutex::new(HashMap::new()),
        }))
    }
}

#[async_trait]
impl OutboundHandler for Freedom {
    /// Dialed for no routed session (a chain's hop, the DNS module): the user's rules only.
    async fn dial_tcp(&self, dest: &Destination) -> io::Result<BoxStream> {
        self.dial_guarded(dest, DefaultRule::Open).await
    }

    async fn dial_udp(&self, _dest: &Destination) -> io::Result<Box<dyn PacketConn>> {
        self.open_udp(DefaultRule::Open).await
    }

    async fn dial_tcp_for(&self, session: &Session) -> io::Result<BoxStream> {
        self.dial_guarded(&session.dest, guarded(session.protocol))
            .await
    }

    async fn dial_udp_for(&self, session: &Session) -> io::Result<Box<dyn PacketConn>> {
        self.open_udp(guarded(session.protocol)).await
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
    /// The session came in through a proxy protocol: the default rule applies.
    default_rule: DefaultRule,
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
        if let Err(b) = self
            .freedom
            .guard(self.default_rule)
            .check(Network::Udp, addr)
        {
            tracing::debug!("freedom udp: dropped a datagram to {}: {b}", target);
            return Ok(());
        }
        let v6 = self.sock.local_addr()?.is_ipv6();
        let addr = match (v6, addr.ip()) {
            (true, IpAddr::V4(ip)) => SocketAddr::new(IpAddr::V6(ip.to_ipv6_mapped()), addr.port()),
            _ => addr,
        };
        self.sock.send_to(data, addr).await.map(|_| ())
    }

    async fn ready(&self) -> io::Result<()> {
        self.sock.readable().await
    }

    async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, Destination)> {
        loop {
            let (n, from) = self.sock.recv_from(buf).await?;
            let from = SocketAddr::new(from.ip().to_canonical(), from.port());
            // A datagram from a source the session could not send to is dropped too.
            match self
                .freedom
                .guard(self.default_rule)
                .check(Network::Udp, from)
            {
                Ok(()) => return Ok((n, from.into())),
                Err(b) => tracing::debug!("freedom udp: dropped a datagram from {from}: {b}"),
            }
        }
    }
}
