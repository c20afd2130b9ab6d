//! `freedom` (alias `direct`): connects to the destination itself.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use async_trait::async_trait;
use tokio::net::UdpSocket;

use super::{OutboundBuild, OutboundHandler, PacketConn, Session};
use crate::common::{Address, Destination};
use crate::config::reader::{ConfigError, Obj, Result};
use crate::transport::tcp::{self, SockOpts};
use crate::transport::BoxStream;

/// `domainStrategy` of freedom.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Strategy {
    #[default]
    AsIs,
    UseIp,
    UseIpv4,
    UseIpv6,
}

#[derive(Clone, Default)]
pub struct Freedom {
    pub strategy: Strategy,
    /// `redirect`: host and/or port that replace the destination's (`None` keeps it).
    pub redirect: Option<(Option<Address>, Option<u16>)>,
    pub sockopt: SockOpts,
}

pub fn build(o: &Obj<'_>, b: &OutboundBuild<'_>) -> Result<Arc<dyn OutboundHandler>> {
    let _ = b;
    let strategy = match o
        .str("domainStrategy")?
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
                o.key_path("domainStrategy"),
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
    for k in ["fragment", "noises"] {
        if o.has(k) {
            return Err(ConfigError::new(o.key_path(k), "is not supported yet"));
        }
    }
    o.ignore(&["userLevel", "timeout", "finalRules"]);
    Ok(Arc::new(Freedom {
        strategy,
        redirect,
        sockopt: SockOpts::default(),
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

#[async_trait]
impl OutboundHandler for Freedom {
    async fn dial_tcp(&self, s: &Session) -> io::Result<BoxStream> {
        let dest = self.target(&s.dest);
        let mut last = None;
        for a in self.resolve(&dest).await? {
            match tcp::connect_addr(a, &self.sockopt).await {
                Ok(c) => return Ok(Box::new(c)),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::ErrorKind::NotFound.into()))
    }

    async fn dial_udp(&self, _s: &Session) -> io::Result<Box<dyn PacketConn>> {
        Ok(Box::new(FreedomUdp {
            sock: bind_dual_stack().await?,
            freedom: self.clone(),
            resolved: std::sync::Mutex::new(HashMap::new()),
        }))
    }
}

/// A UDP socket that reaches IPv4 and IPv6 (v4-mapped) destinations alike.
async fn bind_dual_stack() -> io::Result<UdpSocket> {
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
