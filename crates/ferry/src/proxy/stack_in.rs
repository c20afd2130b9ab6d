//! An inbound on a promiscuous userspace stack ([`crate::netstack`]): WireGuard's server and
//! the TUN device. Every TCP connection and UDP flow the stack terminates becomes a session of
//! the inbound (source = the client's address on the stack's network, destination = where it
//! went, user = whoever the inbound says owns the source), routed like any inbound's; UDP
//! replies go back as IP packets from whatever address answered (full cone).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::mpsc;

use super::udp::{UdpReply, UdpSessions};
use super::{Accepted, InboundCtx};
use crate::common::{Address, Destination, Network};
use crate::netstack::{self, Stack, UdpIn, WeakStack};
use crate::session::{ConnInfo, Endpoint, User};

/// The user a flow from this source address belongs to.
pub type Owner = Arc<dyn Fn(IpAddr) -> Option<User> + Send + Sync>;

/// A running stack inbound: the stack and the task accepting its connections, stopped when
/// this is dropped.
pub struct StackInbound {
    pub stack: Stack,
    _tasks: Abort,
}

/// Starts a promiscuous stack for inbound `ctx` whose sessions speak `protocol`, idle after
/// level `level`'s `connIdle`; `owner` (set whenever the inbound knows it, or never) names
/// each flow's user. The packets the stack writes toward the clients come out of the receiver.
pub fn start(
    addrs: Vec<IpAddr>,
    mtu: usize,
    ctx: &InboundCtx,
    protocol: &'static str,
    level: u32,
    owner: Arc<OnceLock<Owner>>,
) -> io::Result<(StackInbound, mpsc::Receiver<Vec<u8>>)> {
    let (out, packets) = mpsc::channel(1024);
    let udp = Arc::new(Udp {
        sessions: OnceLock::new(),
        ctx: ctx.clone(),
        protocol,
        owner: owner.clone(),
    });
    let (stack, accept) = Stack::new(
        &netstack::Config {
            addrs,
            mtu,
            promiscuous: true,
        },
        out,
        Some(udp.clone() as Arc<dyn UdpIn>),
    );
    let accept = accept.ok_or_else(|| io::Error::other("no accept queue"))?;
    let idle = ctx.services.level(level).conn_idle;
    let sessions = ctx
        .services
        .clone()
        .udp_sessions(Arc::new(Reply(stack.downgrade())), idle, ctx);
    let _ = udp.sessions.set(sessions);
    let task = tokio::spawn(accept_tcp(ctx.clone(), protocol, owner, accept));
    let si = StackInbound {
        stack,
        _tasks: Abort(vec![task.abort_handle()]),
    };
    Ok((si, packets))
}

/// Aborts tasks when dropped.
pub struct Abort(pub Vec<tokio::task::AbortHandle>);

impl Drop for Abort {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

/// A session's context: the inbound's, with the client on the stack's network as its source.
fn inner_ctx(ctx: &InboundCtx, src: SocketAddr, dst: SocketAddr) -> InboundCtx {
    let mut c = ctx.clone();
    c.info = ConnInfo::new(Endpoint::Ip(src), Endpoint::Ip(dst));
    c
}

fn user_of(owner: &OnceLock<Owner>, src: IpAddr) -> Option<User> {
    owner.get().and_then(|f| f(src))
}

/// UDP from the stack into the dispatcher's session table.
struct Udp {
    sessions: OnceLock<Arc<dyn UdpSessions>>,
    ctx: InboundCtx,
    protocol: &'static str,
    owner: Arc<OnceLock<Owner>>,
}

impl UdpIn for Udp {
    fn datagram(&self, src: SocketAddr, dst: SocketAddr, data: &[u8]) {
        let Some(sessions) = self.sessions.get() else {
            return;
        };
        let ctx = inner_ctx(&self.ctx, src, dst);
        let mut s = ctx.session(
            Destination::new(Address::Ip(dst.ip()), dst.port()),
            Network::Udp,
            self.protocol,
        );
        s.user = user_of(&self.owner, src.ip());
        sessions.send(src, s, Bytes::copy_from_slice(data));
    }
}

/// Replies back into the stack as IP packets from the address that answered (a reply of the
/// other family than the client's is dropped, as Xray's). Weak: the stack holds the session
/// table that holds this.
struct Reply(WeakStack);

#[async_trait]
impl UdpReply for Reply {
    async fn reply(&self, client: SocketAddr, data: &[u8], from: &Destination) -> io::Result<()> {
        let Address::Ip(ip) = from.addr else {
            return Ok(());
        };
        let from = SocketAddr::new(ip, from.port);
        if let Some(stack) = self.0.upgrade() {
            if from.is_ipv4() == client.is_ipv4() {
                stack.send_udp(from, client, data).await;
            }
        }
        Ok(())
    }
}

/// Hands every TCP connection the stack accepted to the dispatcher.
async fn accept_tcp(
    ctx: InboundCtx,
    protocol: &'static str,
    owner: Arc<OnceLock<Owner>>,
    mut accept: netstack::Accept,
) {
    while let Some(flow) = accept.tcp.recv().await {
        let (Some(src), Some(dst)) = (flow.remote(), flow.local()) else {
            continue;
        };
        let ctx = inner_ctx(&ctx, src, dst);
        let mut s = ctx.session(
            Destination::new(Address::Ip(dst.ip()), dst.port()),
            Network::Tcp,
            protocol,
        );
        s.user = user_of(&owner, src.ip());
        let services = ctx.services.clone();
        tokio::spawn(async move {
            let a = Accepted::Stream(s, Box::new(flow));
            if let Err(e) = services.serve_accepted(a, ctx.clone()).await {
                tracing::debug!("[{}] {protocol}: connection ended: {e}", ctx.tag);
            }
        });
    }
}
