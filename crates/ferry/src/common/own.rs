//! The sockets this process listens on (inbounds, `api.listen`, `metrics`). Freedom refuses
//! them as destinations for proxy users: a VLESS user must not reach the API or a local inbound
//! through the server, whichever address names the socket (its own, a public address of the
//! host when it listens on every address, `0.0.0.0`, loopback).

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;

use super::Network;

static NEXT: AtomicU64 = AtomicU64::new(1);
static OWN: RwLock<Vec<(u64, Network, SocketAddr)>> = RwLock::new(Vec::new());

/// A listening socket's entry; dropping it removes the entry (keep it as long as the socket).
#[must_use = "the entry is removed when this is dropped"]
#[derive(Debug)]
pub struct Registration(u64);

/// Records that this process listens on `addr` for `network`.
pub fn register(network: Network, addr: SocketAddr) -> Registration {
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    let addr = SocketAddr::new(addr.ip().to_canonical(), addr.port());
    OWN.write()
        .unwrap_or_else(|e| e.into_inner())
        .push((id, network, addr));
    Registration(id)
}

impl Drop for Registration {
    fn drop(&mut self) {
        OWN.write()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(id, _, _)| *id != self.0);
    }
}

/// Whether a connection to `dest` over `network` would reach one of this process's listeners.
pub fn is_own(network: Network, dest: SocketAddr) -> bool {
    let ip = dest.ip().to_canonical();
    let mut wildcard = false;
    {
        let own = OWN.read().unwrap_or_else(|e| e.into_inner());
        for (_, n, a) in own.iter() {
            if *n != network || a.port() != dest.port() {
                continue;
            }
            if a.ip() == ip {
                return true;
            }
            wildcard |= a.ip().is_unspecified();
        }
    }
    wildcard && is_local(ip)
}

/// Whether `ip` is an address of this host: the unspecified address and loopback always are,
/// others when a socket can be bound to them (the kernel's own answer, no interface list kept).
fn is_local(ip: IpAddr) -> bool {
    ip.is_unspecified() || ip.is_loopback() || UdpSocket::bind((ip, 0)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_is_own_while_registered() {
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert!(!is_own(Network::Tcp, a));
        let r = register(Network::Tcp, a);
        assert!(is_own(Network::Tcp, a));
        // The IPv4-mapped spelling is the same socket; another network or port is not.
        assert!(is_own(
            Network::Tcp,
            "[::ffff:127.0.0.1]:1".parse().unwrap()
        ));
        assert!(!is_own(Network::Udp, a));
        assert!(!is_own(Network::Tcp, "127.0.0.1:2".parse().unwrap()));
        drop(r);
        assert!(!is_own(Network::Tcp, a));
    }

    #[test]
    fn a_wildcard_listener_is_reached_by_every_local_address() {
        let _r = register(Network::Tcp, "[::]:3".parse().unwrap());
        for own in ["127.0.0.1:3", "127.0.0.9:3", "0.0.0.0:3", "[::1]:3"] {
            assert!(is_own(Network::Tcp, own.parse().unwrap()), "{own}");
        }
        // A documentation address is no address of this host.
        assert!(!is_own(Network::Tcp, "192.0.2.7:3".parse().unwrap()));
        assert!(!is_own(Network::Tcp, "127.0.0.1:4".parse().unwrap()));
    }
}
