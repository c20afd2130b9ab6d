//! The `dns` outbound (routing.md §4.8): answers the DNS that routing sends it (a
//! dokodemo-door on port 53, a `"port": 53` rule), one message at a time, over TCP (two-byte
//! length prefix) or UDP (one message per datagram).
//!
//! Each query's first question picks an action: the first `rules` entry whose `qType` and
//! `domain` match it, else A/AAAA are hijacked and the rest answered NOERROR with no records.
//! - `hijack`: A/AAAA answered from Ferry's own resolver (the `dns` object; the system's without
//!   one), other types answered with the rule's `rCode`. A lookup that gets no verdict (every
//!   server timed out) gets no answer, as in Xray.
//! - `direct`: the message goes, unchanged, to the destination (or `address`/`port`/`network`,
//!   alias `rewriteAddress`/`rewritePort`/`rewriteNetwork`) through this outbound's dialer; the
//!   upstream is dialed at the first such message and its replies come back as they are.
//! - `drop`: no answer. `return`: an answer with `rCode` (default 0) and no records.
//!
//! The older `nonIPQuery` (`reject` by default: rcode 5; `drop`; `skip` = direct) and
//! `blockTypes` are read as the rules Xray turns them into; mixing them with `rules` is an error,
//! as in Xray. Messages that carry no question are dropped.

mod rules;
mod session;
mod settings;
mod upstream;

use std::io;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::{OutboundBuild, OutboundHandler, PacketConn};
use crate::common::dns_message::Answer;
use crate::common::{Address, Destination, Network};
use crate::config::reader::{Obj, Result};
use crate::transport::{BoxStream, Dialer};
use rules::Rule;
use session::{serve_stream, DnsPackets, Session};

/// dns's entry in the protocol table.
pub const PROTOCOL: crate::proxy::protocol::Protocol = crate::proxy::protocol::Protocol {
    outbound: Some(build),
    ..crate::proxy::protocol::Protocol::named(module_path!(), &["dns"])
};

/// Replies waiting for the client, per session.
const REPLY_QUEUE: usize = 64;
/// Lookups in flight per session; queries past it are dropped (with a log line).
const MAX_LOOKUPS: usize = 256;
/// How long a TCP session waits, after the client's end, for the upstream's last replies.
const DRAIN: Duration = Duration::from_secs(5);
/// The largest DNS message over TCP.
const MAX_MESSAGE: usize = 65535;

pub struct DnsOutbound {
    dns: Arc<dyn Resolve>,
    rules: Vec<Rule>,
    network: Option<Network>,
    address: Option<Address>,
    port: Option<u16>,
    dialer: Arc<dyn Dialer>,
}

pub fn build(o: &Obj<'_>, b: &OutboundBuild<'_>) -> Result<Arc<dyn OutboundHandler>> {
    Ok(Arc::new(Shared(Arc::new(settings::parse(o, b)?))))
}

/// The instance's resolver (the `dns` object's, FakeDNS included) as this outbound asks it:
/// `app::dns` provides it.
#[async_trait]
pub trait Resolve: Send + Sync {
    /// The addresses of `name` of the families a query asks (`v4`: A, `v6`: AAAA), or `None`
    /// when the lookup got no verdict.
    async fn answer(&self, name: &str, v4: bool, v6: bool) -> Option<Answer>;

    /// The same without FakeDNS: real addresses to dial (freedom's `domainStrategy`, a
    /// WireGuard endpoint), as Xray's internal lookups never take fake ones.
    async fn lookup(&self, name: &str, v4: bool, v6: bool) -> Option<Answer>;
}

/// The handler is shared by every session; each session keeps it alive.
struct Shared(Arc<DnsOutbound>);

#[async_trait]
impl OutboundHandler for Shared {
    async fn dial_tcp(&self, dest: &Destination) -> io::Result<BoxStream> {
        let (near, far) = tokio::io::duplex(MAX_MESSAGE + 2);
        let (session, replies) = Session::new(self.0.clone(), dest.clone(), Network::Tcp);
        tokio::spawn(serve_stream(session, replies, far));
        Ok(Box::new(near))
    }

    fn dns_forward(&self, dest: &Destination) -> Option<(Arc<dyn Dialer>, Destination)> {
        let (to, _) = self.0.upstream_dest(dest, Network::Udp);
        Some((self.0.dialer.clone(), to))
    }

    async fn dial_udp(&self, dest: &Destination) -> io::Result<Box<dyn PacketConn>> {
        let (session, replies) = Session::new(self.0.clone(), dest.clone(), Network::Udp);
        Ok(Box::new(DnsPackets {
            session,
            replies: tokio::sync::Mutex::new(replies),
        }))
    }
}
