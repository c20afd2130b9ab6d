//! What every layer knows about one connection: its endpoints, the facts the acceptor chain
//! learned on the way in ([`ConnInfo`]), the authenticated [`User`], and the [`Session`] that the
//! router and the outbound see. This module sits low in the tree: `proxy`, `app` and `config`
//! all use it, and it uses none of them.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use crate::common::{Destination, Network};

/// One end of a connection: an IP socket address, or a unix socket (path, `@abstract` or
/// `@@padded`, as the listener was configured; a unix peer has no address of its own).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Endpoint {
    Ip(SocketAddr),
    Unix(Arc<str>),
}

impl Endpoint {
    /// The IP address, for IP endpoints.
    pub fn ip(&self) -> Option<IpAddr> {
        match self {
            Endpoint::Ip(a) => Some(a.ip()),
            Endpoint::Unix(_) => None,
        }
    }

    /// The port (0 for a unix socket).
    pub fn port(&self) -> u16 {
        match self {
            Endpoint::Ip(a) => a.port(),
            Endpoint::Unix(_) => 0,
        }
    }

    /// The socket address, for IP endpoints.
    pub fn socket_addr(&self) -> Option<SocketAddr> {
        match self {
            Endpoint::Ip(a) => Some(*a),
            Endpoint::Unix(_) => None,
        }
    }
}

impl From<SocketAddr> for Endpoint {
    fn from(a: SocketAddr) -> Self {
        Endpoint::Ip(a)
    }
}

impl FromStr for Endpoint {
    type Err = std::net::AddrParseError;
    /// `ip:port`; anything starting with `/` or `@` is a unix endpoint.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.starts_with('/') || s.starts_with('@') {
            return Ok(Endpoint::Unix(s.into()));
        }
        s.parse().map(Endpoint::Ip)
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Ip(a) => a.fmt(f),
            Endpoint::Unix(p) => write!(f, "unix:{p}"),
        }
    }
}

/// What the acceptor chain learned about a connection before the protocol read it: the
/// endpoints (the PROXY protocol layer replaces the source with the real client), and what
/// TLS and the transports saw (used by fallbacks and routing).
#[derive(Clone, Debug)]
pub struct ConnInfo {
    pub source: Endpoint,
    /// The local address the connection arrived on.
    pub local: Endpoint,
    /// TLS server name the client asked for.
    pub sni: Option<Arc<str>>,
    /// TLS ALPN protocol negotiated.
    pub alpn: Option<Arc<str>>,
    /// HTTP request path (WebSocket / HTTPUpgrade transports, fallbacks).
    pub path: Option<Arc<str>>,
    /// Where the connection was going before a transparent-proxy rule (`REDIRECT`, `TPROXY`)
    /// delivered it to this listener (`sockopt.tproxy`; none on other listeners).
    pub original: Option<std::net::SocketAddr>,
}

impl ConnInfo {
    /// A connection known only by its endpoints.
    pub fn new(source: Endpoint, local: Endpoint) -> Self {
        ConnInfo {
            source,
            local,
            sni: None,
            alpn: None,
            path: None,
            original: None,
        }
    }
}

/// Live byte counters (uplink: client -> server) of an inbound, an outbound or a user,
/// resolved once when it is added, so a connection never looks a counter up by name.
#[derive(Clone, Debug, Default)]
pub struct Traffic {
    pub up: Option<Arc<AtomicU64>>,
    pub down: Option<Arc<AtomicU64>>,
    /// A user's counters are made when the user is added but listed in the stats from its
    /// first connection on (as Xray lists them); this lists them once.
    pub listing: Option<Arc<Listing>>,
    /// A user's: fired when the user is removed, which ends the user's live connections.
    pub revoked: Arc<Revoke>,
}

/// A one-shot signal: once fired, [`Revoke::wait`] returns at once, now and later.
#[derive(Debug, Default)]
pub struct Revoke {
    fired: std::sync::atomic::AtomicBool,
    notify: tokio::sync::Notify,
}

impl Revoke {
    /// Fires the signal (for good).
    pub fn fire(&self) {
        self.fired.store(true, std::sync::atomic::Ordering::Release);
        self.notify.notify_waiters();
    }

    /// Whether it has fired.
    pub fn is_fired(&self) -> bool {
        self.fired.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Returns once the signal has fired.
    pub async fn wait(&self) {
        loop {
            // Made before the check, so a fire between the check and the await is not lost.
            let n = self.notify.notified();
            if self.is_fired() {
                return;
            }
            n.await;
        }
    }
}

/// Counters to list on first use.
pub struct Listing {
    pub stats: Arc<crate::stats::Stats>,
    /// The user's email, which names its counters.
    pub email: Arc<str>,
    pub done: std::sync::atomic::AtomicBool,
}

impl fmt::Debug for Listing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Listing")
            .field("email", &self.email)
            .finish()
    }
}

impl Traffic {
    /// Lists counters made ahead, the first time a connection uses them.
    #[inline]
    pub fn in_use(&self) {
        use std::sync::atomic::Ordering;
        if let Some(l) = &self.listing {
            if !l.done.load(Ordering::Relaxed) && !l.done.swap(true, Ordering::AcqRel) {
                for (c, dir) in [(&self.up, "uplink"), (&self.down, "downlink")] {
                    if c.is_some() {
                        l.stats.list(&crate::stats::name("user", &l.email, dir));
                    }
                }
            }
        }
    }
}

/// An authenticated user of an inbound.
#[derive(Clone, Debug)]
pub struct User {
    /// The email the stats counters are named after (`user>>>EMAIL>>>traffic>>>uplink`).
    pub email: Arc<str>,
    pub level: u32,
    /// This user's counters (empty when stats are off).
    pub traffic: Arc<Traffic>,
}

impl User {
    /// A user without counters of its own.
    pub fn new(email: impl Into<Arc<str>>, level: u32) -> Self {
        User {
            email: email.into(),
            level,
            traffic: Arc::default(),
        }
    }
}

impl PartialEq for User {
    fn eq(&self, o: &Self) -> bool {
        self.email == o.email && self.level == o.level
    }
}

impl Eq for User {}

/// What the router and the outbound need to know about one connection.
#[derive(Clone, Debug)]
pub struct Session {
    pub inbound_tag: Arc<str>,
    pub source: Endpoint,
    /// The local address the connection arrived on.
    pub local: Endpoint,
    pub dest: Destination,
    pub network: Network,
    pub user: Option<User>,
    /// The protocol the inbound spoke (for logs).
    pub protocol: &'static str,
    /// What sniffing found in the client's first bytes (`None` without sniffing).
    pub sniffed: Option<Box<Sniffed>>,
}

/// What sniffing found in a connection's first bytes (routing.md §3).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sniffed {
    /// `tls`, `http1`, `quic`, `bittorrent`.
    pub protocol: &'static str,
    /// The name asked for (verbatim for TLS/QUIC, lower-cased for HTTP); empty for BitTorrent.
    pub domain: String,
    /// HTTP headers (lower-case keys) with `:method` and `:path`, for `attrs` rules.
    pub attrs: Vec<(String, String)>,
    /// `routeOnly`: `domain` is what routing matches while the destination stays as sent.
    pub route_target: bool,
    /// `domain` is the name FakeDNS gave the destination address (`protocol` stays what the
    /// content sniffers found, or `fakedns` when they found nothing).
    pub fake_domain: bool,
}

impl Session {
    /// The domain routing matches: a route-only sniffed name first, then a domain destination.
    pub fn route_domain(&self) -> Option<&str> {
        match &self.sniffed {
            Some(s) if s.route_target && !s.domain.is_empty() => Some(&s.domain),
            _ => self.dest.addr.domain(),
        }
    }
}

impl Session {
    /// The user level for policy lookups (0 when anonymous).
    pub fn level(&self) -> u32 {
        self.user.as_ref().map(|u| u.level).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse_and_show() {
        let e: Endpoint = "127.0.0.1:80".parse().unwrap();
        assert_eq!(e.port(), 80);
        assert_eq!(e.ip(), Some(IpAddr::from([127, 0, 0, 1])));
        assert_eq!(e.to_string(), "127.0.0.1:80");
        let u: Endpoint = "@@ferry".parse().unwrap();
        assert_eq!(u.ip(), None);
        assert_eq!(u.port(), 0);
        assert_eq!(u.to_string(), "unix:@@ferry");
        assert!("nonsense".parse::<Endpoint>().is_err());
    }
}
