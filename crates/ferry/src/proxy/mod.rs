//! Protocols. Each folder holds one protocol: `codec.rs` (sans-IO), `inbound.rs`, `outbound.rs`.
//! Adding a protocol touches its own folder and one line in [`table::PROTOCOLS`].

pub mod api;
pub mod blackhole;
pub mod dns;
pub mod dokodemo;
pub mod fallback;
pub mod first_payload;
pub mod freedom;
/// The header reader (in `transport`, which parses HTTP heads with it too).
pub use crate::transport::head;
pub mod headed;
pub mod http;
pub mod hysteria;
pub mod mux;
pub mod probe;
pub mod protocol;
pub mod reverse;
pub mod shadowsocks;
pub mod shadowsocksr;
pub mod socks;
pub mod stack_in;
pub mod table;
pub mod trojan;
pub mod tun;
pub mod udp;
pub mod vless;
pub mod vmess;
pub mod wireguard;

use std::io;
use std::sync::Arc;

use async_trait::async_trait;

use crate::app::policy::LevelPolicy;
use crate::common::{Destination, Network};
use crate::config::{Diagnostics, Obj};
pub use crate::session::{ConnInfo, Endpoint, Session, User};
pub use crate::transport::{BoxStream, Dialer, PacketConn};

/// An outbound is a dialer: it turns a destination into a stream or a packet channel, so any
/// outbound can be the dialer of another (`proxySettings.tag`, `sockopt.dialerProxy`).
pub use crate::transport::Dialer as OutboundHandler;

/// What an inbound handler gets for each accepted connection.
#[derive(Clone)]
pub struct InboundCtx {
    pub tag: Arc<str>,
    /// Endpoints and what the acceptor chain learned (SNI, ALPN, path).
    pub info: ConnInfo,
    /// Policy, access log, refusal counts and UDP sessions (an inbound never routes or dials
    /// itself): the dispatcher's.
    pub services: Arc<dyn Services>,
    /// This inbound's counters.
    pub traffic: Arc<crate::session::Traffic>,
    /// The inbound's `sniffing`, when enabled.
    pub sniffing: Option<Arc<crate::sniffing::Sniffing>>,
}

/// What an inbound gets from the layers above it (the dispatcher provides it).
pub trait Services: Send + Sync + 'static {
    /// The handshake timeout (level 0's, until a user is known).
    fn handshake_timeout(&self) -> std::time::Duration;
    /// A user level's policy.
    fn level(&self, level: u32) -> LevelPolicy;
    /// Writes a refused client to the access log.
    fn rejected(&self, source: &Endpoint, why: &str);
    /// Counts a refused handshake of inbound `tag` by `reason` (when stats are on).
    fn count_reject(&self, tag: &str, reason: &'static str);
    /// A table of UDP sessions for the datagram inbound of `ctx`, replies going through
    /// `reply`, sessions idle after `idle`.
    fn udp_sessions(
        self: Arc<Self>,
        reply: Arc<dyn udp::UdpReply>,
        idle: std::time::Duration,
        ctx: &InboundCtx,
    ) -> Arc<dyn udp::UdpSessions>;
    /// Serves, to its end, what an inbound that reads its connections itself accepted (each
    /// stream and datagram session of a QUIC connection), as if `accept` had returned it.
    fn serve_accepted(
        self: Arc<Self>,
        accepted: Accepted,
        ctx: InboundCtx,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = io::Result<()>> + Send>>;
}

impl InboundCtx {
    /// Starts a session for `dest` from this connection.
    pub fn session(&self, dest: Destination, network: Network, protocol: &'static str) -> Session {
        Session {
            inbound_tag: self.tag.clone(),
            source: self.info.source.clone(),
            local: self.info.local.clone(),
            dest,
            network,
            user: None,
            protocol,
            sniffed: None,
        }
    }

    /// Records a refused handshake: logged at info with the connection's source, and counted
    /// per inbound by `reason` (a short stable name) when stats are on.
    pub fn reject(&self, protocol: &str, reason: &'static str, detail: &dyn std::fmt::Display) {
        tracing::info!(
            "[{}] {protocol}: rejected {} ({reason}): {detail}",
            self.tag,
            self.info.source
        );
        self.services.count_reject(&self.tag, reason);
    }
}

/// What an inbound asks for once it has read a connection's protocol header: the one place
/// in `app/` that routes, dials and relays acts on it.
pub enum Accepted {
    /// Relay this TCP session over this stream (positioned after the protocol header).
    Stream(Session, BoxStream),
    /// Serve this client's datagrams: `recv_from` yields what the client sends and where to,
    /// `send_to` carries a reply back. The session's destination is replaced by the first
    /// datagram's, which routes it.
    Packets(Session, Box<dyn PacketConn>),
    /// Serve Mux.Cool on this stream (VLESS/VMess command 3, positioned after the header): each
    /// session the client opens is routed, dialed and counted like a connection of its own,
    /// as this session's user (`app/mux.rs`).
    Mux(Session, BoxStream),
    /// A VLESS Reverse tunnel (command 4 from a user with `reverse`): the stream becomes a
    /// worker of the reverse outbound with this tag, registered when the first one arrives.
    Reverse(Session, BoxStream, Arc<str>),
    /// Not this protocol's traffic: hand the stream (which replays every byte the client sent)
    /// to the fallback the inbound chose. The flag: the client is closed as soon as the
    /// fallback ends (a TLS client, as Xray's TLS connection closes with its writer); without
    /// it the client gets no FIN and is closed `uplinkOnly` later (Xray's raw TCP and REALITY).
    Fallback(BoxStream, Arc<fallback::Fallback>, bool),
    /// Nothing more to do (answered, refused or drained; already logged).
    Done,
}

/// Serves one protocol on accepted streams.
#[async_trait]
pub trait InboundHandler: Send + Sync + 'static {
    /// Reads the protocol header from `stream` and says what to forward. Errors are logged by
    /// the caller; the handler enforces its own handshake timeout
    /// ([`Services::handshake_timeout`]).
    async fn accept(&self, stream: BoxStream, ctx: &InboundCtx) -> io::Result<Accepted>;

    /// The networks this inbound listens on (dokodemo-door can ask for UDP).
    fn networks(&self) -> &[Network] {
        &[Network::Tcp]
    }

    /// Whether it forwards each connection to where it was going before a transparent-proxy
    /// rule sent it here (dokodemo-door's `followRedirect`): its listeners are then
    /// transparent, in `redirect` mode when `sockopt.tproxy` says neither, as in Xray.
    fn follows_redirect(&self) -> bool {
        false
    }

    /// Serves a bound UDP socket (only called when `networks()` includes UDP).
    async fn serve_udp(
        &self,
        _socket: Arc<tokio::net::UdpSocket>,
        _ctx: InboundCtx,
    ) -> io::Result<()> {
        Ok(())
    }

    /// Opens the device of an inbound without a listener (a protocol marked `portless`:
    /// `tun`). Called once at start, so a device that cannot be opened fails the start; the
    /// task serves it until it is dropped.
    fn open_device(&self, _ctx: InboundCtx) -> io::Result<DeviceTask> {
        Err(io::Error::other("this inbound has no device of its own"))
    }

    /// The user manager of an inbound that has users (add/remove/list at run time).
    fn users(&self) -> Option<&dyn UserManager> {
        None
    }
}

/// What serves an inbound's own device until it fails or is dropped.
pub type DeviceTask = std::pin::Pin<Box<dyn std::future::Future<Output = io::Result<()>> + Send>>;

/// Adds, removes and lists an inbound's users while it runs; live connections keep going.
pub trait UserManager: Send + Sync {
    /// Adds a user from its JSON object as it appears in the inbound's `clients`/`users`
    /// (the API turns its protobuf accounts into this shape).
    fn add_user(&self, user: &serde_json::Value) -> Result<User, crate::config::ConfigError>;
    /// Removes the user with this email; false when there was none.
    fn remove_user(&self, email: &str) -> bool;
    /// The current users.
    fn list_users(&self) -> Vec<User>;
    /// The user with this email (compared ignoring case), if any.
    fn find_user(&self, email: &str) -> Option<User> {
        self.list_users()
            .into_iter()
            .find(|u| !u.email.is_empty() && crate::registry::same_email(&u.email, email))
    }
}

/// An inbound whose users live in a [`Users`](crate::users::Users) table: its
/// [`UserManager`] is the table's (the API's adds, removes and lookups, one way for all).
pub trait UserTable: Send + Sync {
    type Entry: crate::users::UserEntry;
    /// What tells two users apart besides their email, for the duplicate error (`id`, ...).
    const SECRET: &'static str;
    fn user_table(&self) -> &crate::users::Users<Self::Entry>;
    /// Reads an added user's JSON object (as the inbound's `clients` hold it).
    fn read_user(&self, c: &Obj<'_>) -> Result<Self::Entry, crate::config::ConfigError>;
    /// Whether this inbound takes users at all (the error says why not).
    fn can_add(&self) -> Result<(), crate::config::ConfigError> {
        Ok(())
    }
    /// After a user went in.
    fn added(&self) {}
}

impl<T: UserTable> UserManager for T {
    fn add_user(&self, user: &serde_json::Value) -> Result<User, crate::config::ConfigError> {
        let diag = Diagnostics::default();
        let c = Obj::new(user, "user", &diag)?;
        self.can_add()?;
        let entry = self.read_user(&c)?;
        c.finish();
        let user = self.user_table().add_user(entry).ok_or_else(|| {
            crate::config::ConfigError::new(
                "user",
                format!("a user with this {} or email exists already", T::SECRET),
            )
        })?;
        self.added();
        Ok(user)
    }

    fn remove_user(&self, email: &str) -> bool {
        self.user_table().remove_email(email)
    }

    fn list_users(&self) -> Vec<User> {
        self.user_table().list()
    }

    fn find_user(&self, email: &str) -> Option<User> {
        self.user_table().find_email(email)
    }
}

/// What an inbound builder gets besides its `settings` object.
pub struct InboundBuild<'a> {
    pub tag: &'a str,
    pub diag: &'a Diagnostics,
    /// Gives users their counters when they are added.
    pub counters: &'a crate::registry::CounterSource,
    /// The inbound's stream settings (what is under the protocol).
    pub stream: &'a crate::transport::StreamSettings,
}

/// What an outbound builder gets besides its `settings` object.
pub struct OutboundBuild<'a> {
    pub tag: &'a str,
    pub diag: &'a Diagnostics,
    /// Reaches this outbound's server through its stream settings (tcp|unix, later tls/ws),
    /// or through another outbound (`proxySettings.tag`, `sockopt.dialerProxy`).
    pub dialer: Arc<dyn Dialer>,
    /// Socket options, with `sendThrough` as the bind address (freedom's own UDP socket).
    pub sockopt: crate::transport::tcp::SockOpts,
    /// The outbound's stream settings (what is under the protocol).
    pub stream: &'a crate::transport::StreamSettings,
    /// The resolver of the `dns` object (the system's without one): the `dns` outbound's.
    pub dns: Arc<dyn dns::Resolve>,
    /// Where an outbound that is a VLESS Reverse bridge puts its bridge (the instance starts it).
    pub bridge: &'a std::cell::OnceCell<reverse::Bridge>,
}

pub type InboundBuilder =
    fn(&Obj<'_>, &InboundBuild<'_>) -> crate::config::reader::Result<Arc<dyn InboundHandler>>;
pub type OutboundBuilder =
    fn(&Obj<'_>, &OutboundBuild<'_>) -> crate::config::reader::Result<Arc<dyn OutboundHandler>>;

pub use table::{inbound_builder, outbound_builder, KNOWN_ELSEWHERE};
