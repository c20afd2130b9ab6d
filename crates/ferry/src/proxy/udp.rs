//! What a datagram inbound needs of the UDP session table above it (the dispatcher's `udp` has the table):
//! how it sends a reply in its own framing, how sessions are keyed, and the table's two calls.

use std::io;
use std::net::SocketAddr;

use async_trait::async_trait;
use bytes::Bytes;

use crate::common::Destination;
use crate::session::Session;

/// Sends a reply datagram back to a client, in whatever framing the inbound speaks.
#[async_trait]
pub trait UdpReply: Send + Sync + 'static {
    async fn reply(&self, client: SocketAddr, data: &[u8], from: &Destination) -> io::Result<()>;
}

/// Largest datagram Ferry relays.
pub const MAX_DATAGRAM: usize = 65535;

/// What a NAT session is keyed by.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum NatKey {
    /// The client's source address.
    Addr(SocketAddr),
    /// A session the inbound tells apart itself (Shadowsocks 2022: the client session), whose
    /// replies go to the address it last sent from (a roaming client keeps its session).
    Session(u64),
    /// A client's source and the destination it sent to (a transparent inbound: each flow
    /// routed on its own, as Xray keys them).
    Flow(SocketAddr, SocketAddr),
}

/// An inbound's table of UDP sessions: each routed by its first datagram, with one outbound
/// packet channel, replies going back through the inbound's [`UdpReply`].
pub trait UdpSessions: Send + Sync {
    /// Forwards one datagram from `client` (as `session`) to `session.dest`, opening a session
    /// for that client if needed.
    fn send(&self, client: SocketAddr, session: Session, data: Bytes);
    /// [`send`](Self::send) for the session `key`, whose datagram came from `client` (where its
    /// replies go from now on).
    fn send_keyed(&self, key: NatKey, client: SocketAddr, session: Session, data: Bytes);
}
