//! TCP listen and dial with the socket options Ferry applies.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use socket2::{SockRef, TcpKeepalive};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

use crate::common::{Address, Destination};

/// Socket options from `streamSettings.sockopt` that Ferry honours.
#[derive(Clone, Debug, Default)]
pub struct SockOpts {
    /// `SO_MARK` (needs CAP_NET_ADMIN).
    pub mark: u32,
    /// TCP keepalive idle seconds (0 = system default).
    pub keepalive_idle: u32,
    /// TCP keepalive interval seconds (0 = system default).
    pub keepalive_interval: u32,
    /// `TCP_NODELAY`; Ferry always sets it, as Xray does.
    pub no_delay: bool,
    /// `SO_BINDTODEVICE` interface name.
    pub interface: Option<String>,
    /// Source address to bind outgoing sockets to (`sendThrough`).
    pub bind: Option<std::net::IpAddr>,
}

impl SockOpts {
    fn apply(&self, s: &SockRef<'_>) -> io::Result<()> {
        s.set_tcp_nodelay(true)?;
        if self.keepalive_idle > 0 || self.keepalive_interval > 0 {
            let mut ka = TcpKeepalive::new();
            if self.keepalive_idle > 0 {
                ka = ka.with_time(Duration::from_secs(self.keepalive_idle.into()));
            }
            if self.keepalive_interval > 0 {
                ka = ka.with_interval(Duration::from_secs(self.keepalive_interval.into()));
            }
            s.set_tcp_keepalive(&ka)?;
        }
        if self.mark != 0 {
            s.set_mark(self.mark)?;
        }
        if let Some(dev) = &self.interface {
            s.bind_device(Some(dev.as_bytes()))?;
        }
        Ok(())
    }
}

/// Binds a listening socket with `SO_REUSEADDR`.
pub fn listen(addr: SocketAddr) -> io::Result<TcpListener> {
    let sock = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    sock.set_reuseaddr(true)?;
    sock.bind(addr)?;
    sock.listen(1024)
}

/// Applies per-connection options to an accepted socket.
pub fn accepted(s: &TcpStream, opts: &SockOpts) -> io::Result<()> {
    opts.apply(&SockRef::from(s))
}

/// Resolves a destination to socket addresses (system resolver for domains).
pub async fn resolve(dest: &Destination) -> io::Result<Vec<SocketAddr>> {
    match &dest.addr {
        Address::Ip(ip) => Ok(vec![SocketAddr::new(*ip, dest.port)]),
        Address::Domain(d) => {
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((d.as_str(), dest.port))
                .await?
                .collect();
            if addrs.is_empty() {
                Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("{d}: no address"),
                ))
            } else {
                Ok(addrs)
            }
        }
    }
}

/// Connects to one socket address with the options applied before connect.
pub async fn connect_addr(addr: SocketAddr, opts: &SockOpts) -> io::Result<TcpStream> {
    let sock = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    opts.apply(&SockRef::from(&sock))?;
    if let Some(ip) = opts.bind {
        if ip.is_ipv4() == addr.is_ipv4() {
            sock.bind(SocketAddr::new(ip, 0))?;
        }
    }
    sock.connect(addr).await
}

/// Resolves and connects, trying each address in turn.
pub async fn dial(dest: &Destination, opts: &SockOpts) -> io::Result<TcpStream> {
    let mut last = None;
    for addr in resolve(dest).await? {
        match connect_addr(addr, opts).await {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no address")))
}
