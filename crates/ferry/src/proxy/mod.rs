//! Protocols. Each folder holds one protocol: `codec.rs` (sans-IO), `inbound.rs`, `outbound.rs`.
//! Adding a protocol touches its own folder and one line in [`INBOUNDS`] or [`OUTBOUNDS`].

pub mod blackhole;
pub mod dokodemo;
pub mod freedom;
pub mod head;
pub mod http;
pub mod shadowsocks;
pub mod socks;
pub mod vmess;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use async_trait::async_trait;

use crate::app::dispatcher::Dispatcher;
use crate::common::{Destination, Network};
use crate::config::{Diagnostics, Obj};
use crate::transport::{BoxStream, Dialer};

/// An authenticated user of an inbound.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    /// The email the stats counters are named after (`user>>>EMAIL>>>traffic>>>uplink`).
    pub email: Arc<str>,
    pub level: u32,
}

/// What the router and the outbound need to know about one connection.
#[derive(Clone, Debug)]
pub struct Session {
    pub inbound_tag: Arc<str>,
    pub source: SocketAddr,
    /// The local address the connection arrived on.
    pub local: SocketAddr,
    pub dest: Destination,
    pub network: Network,
    pub user: Option<User>,
    /// The protocol the inbound spoke (for logs).
    pub protocol: &'static str,
}

impl Session {
    /// The user level for policy lookups (0 when anonymous).
    pub fn level(&self) -> u32 {
        self.user.as_ref().map(|u| u.level).unwrap_or(0)
    }
}

/// What an inbound handler gets for each accepted connection.
#[derive(Clone)]
pub struct InboundCtx {
    pub tag: Arc<str>,
    pub source: SocketAddr,
    pub local: SocketAddr,
    pub dispatcher: Arc<Dispatcher>,
}

impl InboundCtx {
    /// Starts a session for `dest` from this connection.
    pub fn session(&self, dest: Destination, network: Network, protocol: &'static str) -> Session {
        Session {
            inbound_tag: self.tag.clone(),
            source: self.source,
            local: self.local,
            dest,
            network,
            user: None,
            protocol,
        }
    }
}

/// Serves one protocol on accepted streams.
#[async_trait]
pub trait InboundHandler: Send + Sync + 'static {
    /// Reads the protocol header from `stream`, then hands the session to `ctx.dispatcher`.
    /// Errors are logged by the caller; the handler must enforce its own handshake timeout
    /// (use [`Dispatcher::handshake_timeout`]).
    async fn handle_tcp(&self, stream: BoxStream, ctx: InboundCtx) -> io::Result<()>;

    /// The networks this inbound listens on (dokodemo-door can ask for UDP).
    fn networks(&self) -> &[Network] {
        &[Network::Tcp]
    }

    /// Serves a bound UDP socket (only called when `networks()` includes UDP).
    async fn serve_udp(
        &self,
        _socket: Arc<tokio::net::UdpSocket>,
        _ctx: InboundCtx,
    ) -> io::Result<()> {
        Ok(())
    }
}

/// A datagram channel to many destinations (freedom's UDP socket, a proxy's UDP relay).
#[async_trait]
pub trait PacketConn: Send + Sync + 'static {
    async fn send_to(&self, data: &[u8], dest: &Destination) -> io::Result<()>;
    /// Receives one datagram and the address it came from.
    async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, Destination)>;
}

/// An outbound: a dialer that turns a destination into a stream (or a packet channel).
#[async_trait]
pub trait OutboundHandler: Send + Sync + 'static {
    async fn dial_tcp(&self, session: &Session) -> io::Result<BoxStream>;
    async fn dial_udp(&self, session: &Session) -> io::Result<Box<dyn PacketConn>>;
}

/// What an inbound builder gets besides its `settings` object.
pub struct InboundBuild<'a> {
    pub tag: &'a str,
    pub diag: &'a Diagnostics,
}

/// What an outbound builder gets besides its `settings` object.
pub struct OutboundBuild<'a> {
    pub tag: &'a str,
    pub diag: &'a Diagnostics,
    /// Reaches this outbound's server through its stream settings (tcp, later tls/ws, chains).
    pub dialer: Arc<dyn Dialer>,
}

pub type InboundBuilder =
    fn(&Obj<'_>, &InboundBuild<'_>) -> crate::config::reader::Result<Arc<dyn InboundHandler>>;
pub type OutboundBuilder =
    fn(&Obj<'_>, &OutboundBuild<'_>) -> crate::config::reader::Result<Arc<dyn OutboundHandler>>;

/// Inbound protocols by name (and Xray's aliases).
pub const INBOUNDS: &[(&[&str], InboundBuilder)] = &[
    (&["dokodemo-door", "tunnel"], dokodemo::build),
    (&["socks", "mixed"], socks::build_inbound),
    (&["http"], http::build_inbound),
    (&["vmess"], vmess::build_inbound),
    (&["shadowsocks", "ss"], shadowsocks::build_inbound),
];

/// Outbound protocols by name (and Xray's aliases).
pub const OUTBOUNDS: &[(&[&str], OutboundBuilder)] = &[
    (&["freedom", "direct"], freedom::build),
    (&["blackhole", "block"], blackhole::build),
    (&["socks"], socks::build_outbound),
    (&["http"], http::build_outbound),
    (&["vmess"], vmess::build_outbound),
    (&["shadowsocks", "ss"], shadowsocks::build_outbound),
];

/// Protocols Xray/V2Ray have that Ferry does not have yet (for a clear config error).
pub const KNOWN_ELSEWHERE: &[&str] = &[
    "vless",
    "trojan",
    "dns",
    "wireguard",
    "hysteria",
    "loopback",
    "shadowsocksr",
    "mtproto",
];

fn find<T: Copy>(table: &[(&[&str], T)], name: &str) -> Option<T> {
    table
        .iter()
        .find(|(names, _)| names.iter().any(|n| n.eq_ignore_ascii_case(name)))
        .map(|(_, b)| *b)
}

pub fn inbound_builder(name: &str) -> Option<InboundBuilder> {
    find(INBOUNDS, name)
}

pub fn outbound_builder(name: &str) -> Option<OutboundBuilder> {
    find(OUTBOUNDS, name)
}
