//! TCP listen and dial with the socket options Ferry applies.

use std::io;
use std::net::SocketAddr;

use socket2::{Domain, Protocol, SockRef, Socket, Type};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

use super::sockopt::HappyEyeballs;
use crate::common::{Address, Destination, Network};

pub use super::sockopt::{SockOpts, TProxy};

/// Binds a listening socket with `SO_REUSEADDR`.
pub fn listen(addr: SocketAddr) -> io::Result<TcpListener> {
    listen_with(addr, &SockOpts::default())
}

/// Binds a listening socket with `SO_REUSEADDR` and the listener's own options of `opts`
/// ([`SockOpts::apply_listener`]).
pub fn listen_with(addr: SocketAddr, opts: &SockOpts) -> io::Result<TcpListener> {
    let sock = new_socket(addr, opts)?;
    sock.set_reuseaddr(true)?;
    opts.apply_listener(&SockRef::from(&sock), addr, Network::Tcp)?;
    sock.bind(addr)?;
    sock.listen(1024)
}

/// A TCP socket for `addr`'s family: Multipath TCP with `tcpMptcp` where the kernel has it
/// (else plain TCP, as Go falls back).
fn new_socket(addr: SocketAddr, opts: &SockOpts) -> io::Result<TcpSocket> {
    if opts.mptcp {
        let s = Socket::new(
            Domain::for_address(addr),
            Type::STREAM,
            Some(Protocol::MPTCP),
        );
        match s {
            Ok(s) => {
                s.set_nonblocking(true)?;
                return Ok(TcpSocket::from_std_stream(s.into()));
            }
            Err(e) => tracing::debug!("sockopt.tcpMptcp: {e}; plain TCP"),
        }
    }
    if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
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
    let sock = new_socket(addr, opts)?;
    opts.apply_dialer(&SockRef::from(&sock))?;
    if let Some(ip) = opts.bind {
        if ip.is_ipv4() == addr.is_ipv4() {
            sock.bind(SocketAddr::new(ip, 0))?;
        }
    }
    sock.connect(addr).await
}

/// Resolves and connects: the addresses `sockopt.domainStrategy` picks, one after another, or
/// raced as `sockopt.happyEyeballs` says when the target is a domain.
pub async fn dial(dest: &Destination, opts: &SockOpts) -> io::Result<TcpStream> {
    let mut addrs = resolve(dest).await?;
    if dest.addr.domain().is_some() {
        addrs = opts.domain_strategy.pick(addrs)?;
        if let Some(he) = opts
            .happy_eyeballs
            .filter(|h| !h.try_delay.is_zero() && addrs.len() > 1)
            .filter(|_| opts.domain_strategy.family != super::sockopt::Family::AsIs)
        {
            return race(he.order(addrs), &he, opts).await;
        }
    }
    let mut last = None;
    for addr in addrs {
        match connect_addr(addr, opts).await {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no address")))
}

/// Happy Eyeballs: an attempt starts every `try_delay` (or at once when one fails) while
/// fewer than `max_concurrent` are in flight; the first connection wins, the rest are dropped.
async fn race(
    addrs: Vec<SocketAddr>,
    he: &HappyEyeballs,
    opts: &SockOpts,
) -> io::Result<TcpStream> {
    let mut pending = addrs.into_iter();
    let mut flying = tokio::task::JoinSet::new();
    let mut last = None;
    loop {
        if flying.len() < he.max_concurrent.max(1) as usize {
            if let Some(a) = pending.next() {
                let o = opts.clone();
                flying.spawn(async move { connect_addr(a, &o).await });
            }
        }
        if flying.is_empty() {
            return Err(
                last.unwrap_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no address"))
            );
        }
        let more = pending.len() > 0;
        tokio::select! {
            done = flying.join_next() => match done {
                Some(Ok(Ok(s))) => return Ok(s),
                Some(Ok(Err(e))) => last = Some(e),
                Some(Err(e)) => last = Some(io::Error::other(e)),
                None => {}
            },
            _ = tokio::time::sleep(he.try_delay), if more => {}
        }
    }
}
