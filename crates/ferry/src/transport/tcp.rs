//! TCP listen and dial with the socket options Ferry applies.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use socket2::{SockRef, TcpKeepalive};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

use crate::common::{Address, Destination};

/// `sockopt.tproxy`: whether a listener is transparent (`IP_TRANSPARENT`) and how a TCP
/// connection's original destination is read: `redirect` from `SO_ORIGINAL_DST` (iptables
/// `REDIRECT`, nft `redirect`), `tproxy` from the accepted socket's local address (`TPROXY`).
/// A UDP listener in either mode reads each datagram's original destination.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TProxy {
    #[default]
    Off,
    Redirect,
    TProxy,
}

/// Socket options from `streamSettings.sockopt` that Ferry honours.
#[derive(Clone, Debug, Default)]
pub struct SockOpts {
    /// `tproxy` (listeners).
    pub tproxy: TProxy,
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
    listen_with(addr, &SockOpts::default())
}

/// Binds a listening socket with `SO_REUSEADDR` and the listener's own options of `opts`:
/// `IP_TRANSPARENT` in either tproxy mode and `SO_MARK` (both need CAP_NET_ADMIN; failing
/// to set them fails the bind, as in Xray).
pub fn listen_with(addr: SocketAddr, opts: &SockOpts) -> io::Result<TcpListener> {
    let sock = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    sock.set_reuseaddr(true)?;
    listener_opts(&SockRef::from(&sock), addr, opts)?;
    sock.bind(addr)?;
    sock.listen(1024)
}

/// What a TCP or UDP listener of `opts` sets before it binds `addr`.
pub fn listener_opts(s: &SockRef<'_>, addr: SocketAddr, opts: &SockOpts) -> io::Result<()> {
    let named = |what: &str, e: io::Error| io::Error::new(e.kind(), format!("{what}: {e}"));
    if opts.tproxy != TProxy::Off {
        if addr.is_ipv4() {
            s.set_ip_transparent_v4(true)
        } else {
            s.set_ip_transparent_v6(true)
        }
        .map_err(|e| named("IP_TRANSPARENT (sockopt.tproxy)", e))?;
    }
    if opts.mark != 0 {
        s.set_mark(opts.mark)
            .map_err(|e| named("SO_MARK (sockopt.mark)", e))?;
    }
    Ok(())
}

/// The destination a connection accepted on a listener of `mode` was sent to before the
/// kernel delivered it here: `SO_ORIGINAL_DST` in redirect mode (none when the connection was
/// not redirected and conntrack has no entry), the local address in tproxy mode.
pub fn original_dst(s: &TcpStream, mode: TProxy) -> Option<SocketAddr> {
    match mode {
        TProxy::Off => None,
        TProxy::TProxy => s.local_addr().ok(),
        TProxy::Redirect => {
            let r = SockRef::from(s);
            let v4 = s.local_addr().ok()?.ip().to_canonical().is_ipv4();
            let a = if v4 {
                r.original_dst_v4()
            } else {
                r.original_dst_v6()
            };
            a.ok()?.as_socket()
        }
    }
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
