//! UDP listeners with the listener options of `sockopt`, and what a transparent (TPROXY) UDP
//! inbound needs of the kernel: each datagram's original destination, and replies sent from
//! that address (a socket bound to an address that is not this host's, `IP_TRANSPARENT`).

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, SockRef, Socket, Type};
use tokio::io::Interest;
use tokio::net::UdpSocket;

use super::sockopt::{SockOpts, TProxy};
use crate::common::{sys, Network};

/// Binds a UDP listener: in either tproxy mode transparent and told each datagram's original
/// destination ([`recv_orig`]), with `SO_MARK` when `opts` has one.
pub fn bind(addr: SocketAddr, opts: &SockOpts) -> io::Result<UdpSocket> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    opts.apply_listener(&SockRef::from(&s), addr, Network::Udp)?;
    if opts.tproxy != TProxy::Off {
        let fd = s.as_raw_fd();
        let named = |e: io::Error| io::Error::new(e.kind(), format!("IP_RECVORIGDSTADDR: {e}"));
        if addr.is_ipv6() {
            sys::set_int_opt(fd, libc::SOL_IPV6, libc::IPV6_RECVORIGDSTADDR, 1).map_err(named)?;
        }
        // Also on a dual-stack IPv6 socket: its IPv4 datagrams carry the IPv4 message.
        let v4 = sys::set_int_opt(fd, libc::SOL_IP, libc::IP_RECVORIGDSTADDR, 1);
        if addr.is_ipv4() {
            v4.map_err(named)?;
        }
    }
    s.bind(&addr.into())?;
    s.set_nonblocking(true)?;
    UdpSocket::from_std(s.into())
}

/// Receives one datagram on a socket [`bind`] made transparent: its length, its source, and
/// the destination the client sent it to (none when the kernel gave none).
pub async fn recv_orig(
    sock: &UdpSocket,
    buf: &mut [u8],
) -> io::Result<(usize, SocketAddr, Option<SocketAddr>)> {
    let fd = sock.as_raw_fd();
    sock.async_io(Interest::READABLE, || sys::recv_orig_dst(fd, buf))
        .await
}

/// The most reply sockets a transparent inbound keeps (one per address replies come from).
pub const MAX_FORGED: usize = 1024;
/// A reply socket unused this long is closed when room is needed.
const FORGED_IDLE: Duration = Duration::from_secs(60);

/// The sockets a transparent UDP inbound sends replies from, one per source address, bound
/// to that address so the client sees the reply come from where it sent its datagram (or,
/// full cone, from the host that answered). Bounded: at its cap the idle ones, then
/// the least recently used, are closed. They are never connected, so the kernel's TPROXY
/// lookup never takes a client's datagram for one of them.
pub struct Forged {
    mark: u32,
    cap: usize,
    socks: Mutex<HashMap<SocketAddr, (Arc<UdpSocket>, Instant)>>,
}

impl Forged {
    /// Reply sockets marked `mark` (`SO_MARK`, 0 for none), so the rules that sent the
    /// client's datagram here let the reply pass.
    pub fn new(mark: u32) -> Forged {
        Forged::with_cap(mark, MAX_FORGED)
    }

    /// [`new`](Self::new) keeping at most `cap` sockets.
    pub fn with_cap(mark: u32, cap: usize) -> Forged {
        Forged {
            mark,
            cap: cap.max(1),
            socks: Mutex::new(HashMap::new()),
        }
    }

    /// How many reply sockets are open.
    pub fn len(&self) -> usize {
        self.socks.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether none is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sends `data` to `client` from `from`.
    pub async fn send(&self, from: SocketAddr, client: SocketAddr, data: &[u8]) -> io::Result<()> {
        let from = SocketAddr::new(from.ip().to_canonical(), from.port());
        // An IPv4 source answers an IPv4 client, also one a dual-stack listener saw as
        // IPv4-mapped.
        let client = match (from.ip(), client.ip().to_canonical()) {
            (IpAddr::V4(_), c @ IpAddr::V4(_)) => SocketAddr::new(c, client.port()),
            _ => client,
        };
        let sock = self.socket(from)?;
        sock.send_to(data, client).await.map(|_| ())
    }

    fn socket(&self, from: SocketAddr) -> io::Result<Arc<UdpSocket>> {
        let now = Instant::now();
        let mut m = self.socks.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((s, used)) = m.get_mut(&from) {
            *used = now;
            return Ok(s.clone());
        }
        if m.len() >= self.cap {
            m.retain(|_, (_, used)| now.duration_since(*used) < FORGED_IDLE);
            if m.len() >= self.cap {
                if let Some(oldest) = m.iter().min_by_key(|(_, (_, u))| *u).map(|(a, _)| *a) {
                    m.remove(&oldest);
                }
            }
        }
        let s = Arc::new(forge(from, self.mark)?);
        m.insert(from, (s.clone(), now));
        Ok(s)
    }
}

/// A socket bound to `from` whether or not it is an address of this host.
fn forge(from: SocketAddr, mark: u32) -> io::Result<UdpSocket> {
    let s = Socket::new(Domain::for_address(from), Type::DGRAM, Some(Protocol::UDP))?;
    s.set_reuse_address(true)?;
    s.set_reuse_port(true)?;
    if from.is_ipv4() {
        s.set_ip_transparent_v4(true)?;
    } else {
        s.set_only_v6(true)?;
        s.set_ip_transparent_v6(true)?;
    }
    if mark != 0 {
        s.set_mark(mark)?;
    }
    s.bind(&from.into())
        .map_err(|e| io::Error::new(e.kind(), format!("reply socket on {from}: {e}")))?;
    s.set_nonblocking(true)?;
    UdpSocket::from_std(s.into())
}

/// Where a reply whose source is a domain (not an address) is sent from: the unspecified
/// address of the client's family, at the reply's port.
pub fn unspecified_for(client: SocketAddr, port: u16) -> SocketAddr {
    match client.ip().to_canonical() {
        IpAddr::V4(_) => SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), port),
        IpAddr::V6(_) => SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), port),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_tproxy_listener_reads_each_datagrams_destination() {
        // Root can make a transparent socket; the destination of a datagram sent straight to
        // it is its own address.
        let opts = SockOpts {
            tproxy: TProxy::TProxy,
            ..Default::default()
        };
        let l = bind("127.0.0.1:0".parse().unwrap(), &opts).unwrap();
        let at = l.local_addr().unwrap();
        assert!(SockRef::from(&l).ip_transparent_v4().unwrap());
        let c = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        c.send_to(b"hello", at).await.unwrap();
        let mut buf = [0u8; 64];
        let (n, src, orig) = recv_orig(&l, &mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"hello");
        assert_eq!(src, c.local_addr().unwrap());
        assert_eq!(orig, Some(at));
        // Without tproxy the listener is plain.
        let plain = bind("127.0.0.1:0".parse().unwrap(), &SockOpts::default()).unwrap();
        assert!(!SockRef::from(&plain).ip_transparent_v4().unwrap());
    }

    #[tokio::test]
    async fn replies_come_from_the_forged_source_and_sockets_are_bounded() {
        let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let to = client.local_addr().unwrap();
        let f = Forged::with_cap(0, 8);
        // 127.0.0.7 is loopback (the whole /8 is), bound as a source like any address.
        let from: SocketAddr = "127.0.0.7:5353".parse().unwrap();
        f.send(from, to, b"reply").await.unwrap();
        let mut buf = [0u8; 16];
        let (n, src) = client.recv_from(&mut buf).await.unwrap();
        assert_eq!((&buf[..n], src), (&b"reply"[..], from));
        // The same source reuses its socket.
        f.send(from, to, b"again").await.unwrap();
        assert_eq!(f.len(), 1);
        for p in 0..20 {
            let from = SocketAddr::new([127, 0, 0, 8].into(), 20000 + p);
            f.send(from, to, b"x").await.unwrap();
        }
        assert_eq!(f.len(), 8);
        // The least recently used went first: the newest source is still open.
        assert!(f
            .socks
            .lock()
            .unwrap()
            .contains_key(&"127.0.0.8:20019".parse().unwrap()));
        assert!(!f.socks.lock().unwrap().contains_key(&from));
    }
}
