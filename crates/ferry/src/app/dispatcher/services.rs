//! What the layers below ask of the dispatcher, as traits they define: the inbounds' services
//! (policy, access log, refusal counts, UDP session tables) and the DNS module's routed dials.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::{udp, Dispatcher};
use crate::app::dns::Route;
use crate::common::{Destination, Network};
use crate::proxy::{InboundCtx, OutboundHandler, PacketConn, Session};
use crate::session::Endpoint;
use crate::transport::BoxStream;

impl crate::proxy::Services for Dispatcher {
    fn handshake_timeout(&self) -> Duration {
        Dispatcher::handshake_timeout(self)
    }

    fn level(&self, level: u32) -> crate::app::policy::LevelPolicy {
        Dispatcher::level(self, level)
    }

    fn rejected(&self, source: &Endpoint, why: &str) {
        self.access.rejected(source, why);
    }

    fn count_reject(&self, tag: &str, reason: &'static str) {
        if let Some(st) = &self.stats {
            st.rejects.count(tag, reason);
        }
    }

    fn udp_sessions(
        self: Arc<Self>,
        reply: Arc<dyn crate::proxy::udp::UdpReply>,
        idle: Duration,
        ctx: &InboundCtx,
    ) -> Arc<dyn crate::proxy::udp::UdpSessions> {
        let nat = udp::UdpNat::new(self, reply, idle, ctx.traffic.clone(), ctx.sniffing.clone());
        Arc::new(udp::NatHandle(nat))
    }

    fn serve_accepted(
        self: Arc<Self>,
        accepted: crate::proxy::Accepted,
        ctx: InboundCtx,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = io::Result<()>> + Send>> {
        Box::pin(async move { Dispatcher::serve_accepted(&self, accepted, &ctx).await })
    }
}

impl Dispatcher {
    /// Routes a connection of the DNS module (inbound tag `tag`) to `dest` without resolving
    /// it (the resolver would ask itself), and gives the dialer that carries it: the picked
    /// outbound, or, when that is a `dns` outbound, its upstream (the module's own queries
    /// are forwarded, never answered by the outbound: routing.md §4.8).
    fn dns_dialer(
        &self,
        tag: &str,
        dest: &Destination,
        network: Network,
    ) -> io::Result<(Arc<dyn OutboundHandler>, Destination)> {
        let s = Session {
            inbound_tag: tag.into(),
            source: Endpoint::Ip(([0, 0, 0, 0], 0).into()),
            local: Endpoint::Ip(([0, 0, 0, 0], 0).into()),
            dest: dest.clone(),
            network,
            user: None,
            protocol: "dns",
            sniffed: None,
        };
        let router = self.router.load();
        let (outbound, routed) = self.outbound_for(&router, router.route_unresolved(&s), &s)?;
        self.access.accepted(&s, &outbound.tag, routed);
        tracing::debug!("dns: query to {dest} over {network} via {}", outbound.tag);
        Ok(match outbound.handler.dns_forward(dest) {
            Some(forward) => forward,
            None => (outbound.handler.clone(), dest.clone()),
        })
    }
}

#[async_trait]
impl Route for Dispatcher {
    async fn dial_tcp(&self, tag: &str, dest: &Destination) -> io::Result<BoxStream> {
        let (d, dest) = self.dns_dialer(tag, dest, Network::Tcp)?;
        d.dial_tcp(&dest).await
    }

    async fn dial_udp(&self, tag: &str, dest: &Destination) -> io::Result<Box<dyn PacketConn>> {
        let (d, to) = self.dns_dialer(tag, dest, Network::Udp)?;
        let pc = d.dial_udp(&to).await?;
        if &to == dest {
            return Ok(pc);
        }
        Ok(Box::new(Redirected { pc, to }))
    }
}

/// A packet channel whose datagrams go to `to` whatever destination they are sent to (the
/// `dns` outbound's upstream in place of the server the module asked).
struct Redirected {
    pc: Box<dyn PacketConn>,
    to: Destination,
}

#[async_trait]
impl PacketConn for Redirected {
    async fn send_to(&self, data: &[u8], _dest: &Destination) -> io::Result<()> {
        self.pc.send_to(data, &self.to).await
    }

    async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, Destination)> {
        self.pc.recv_from(buf).await
    }

    async fn ready(&self) -> io::Result<()> {
        self.pc.ready().await
    }
}
