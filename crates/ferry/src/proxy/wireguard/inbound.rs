//! The WireGuard inbound: a server on the UDP socket the instance binds. Its stack is
//! promiscuous, as Xray's: a client's TCP connection or UDP flow to any address becomes a
//! session (source = the client's address inside the tunnel, destination = where it went,
//! user = the peer that owns that address), routed like any inbound's.

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use tokio::net::UdpSocket;
use tokio::sync::mpsc;

use super::config::Settings;
use super::device::{self, Device, Link, Outgoing};
use crate::common::{Address, Destination, Network};
use crate::netstack::{self, Stack, UdpIn};
use crate::proxy::udp::{UdpReply, UdpSessions};
use crate::proxy::{Accepted, InboundCtx, InboundHandler};
use crate::registry::CounterSource;
use crate::session::{ConnInfo, Endpoint};
use crate::transport::BoxStream;

pub struct Inbound {
    settings: Settings,
    counters: CounterSource,
}

impl Inbound {
    pub fn new(settings: Settings, counters: CounterSource) -> Arc<Inbound> {
        Arc::new(Inbound { settings, counters })
    }
}

/// A session's context: the inbound's, with the client inside the tunnel as its source.
fn inner_ctx(ctx: &InboundCtx, src: SocketAddr, dst: SocketAddr) -> InboundCtx {
    let mut c = ctx.clone();
    c.info = ConnInfo::new(Endpoint::Ip(src), Endpoint::Ip(dst));
    c
}

/// UDP from the stack into the dispatcher's session table; replies back as IP packets.
struct Udp {
    dev: std::sync::Weak<Device>,
    sessions: Mutex<Option<Arc<dyn UdpSessions>>>,
    ctx: InboundCtx,
}

impl UdpIn for Udp {
    fn datagram(&self, src: SocketAddr, dst: SocketAddr, data: &[u8]) {
        let Some(dev) = self.dev.upgrade() else {
            return;
        };
        let Some(sessions) = self
            .sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        else {
            return;
        };
        let ctx = inner_ctx(&self.ctx, src, dst);
        let mut s = ctx.session(
            Destination::new(Address::Ip(dst.ip()), dst.port()),
            Network::Udp,
            super::PROTOCOL.name(),
        );
        s.user = dev.owner(src.ip()).and_then(|p| p.user.clone());
        sessions.send(src, s, Bytes::copy_from_slice(data));
    }
}

struct Reply(Stack);

#[async_trait]
impl UdpReply for Reply {
    async fn reply(&self, client: SocketAddr, data: &[u8], from: &Destination) -> io::Result<()> {
        let Address::Ip(ip) = from.addr else {
            return Ok(());
        };
        let from = SocketAddr::new(ip, from.port);
        if from.is_ipv4() == client.is_ipv4() {
            self.0.send_udp(from, client, data).await;
        }
        Ok(())
    }
}

#[async_trait]
impl InboundHandler for Inbound {
    async fn accept(&self, _stream: BoxStream, _ctx: &InboundCtx) -> io::Result<Accepted> {
        Err(io::Error::other(
            "a WireGuard inbound takes UDP datagrams, not TCP connections",
        ))
    }

    fn networks(&self) -> &[Network] {
        &[Network::Udp]
    }

    async fn serve_udp(&self, socket: Arc<UdpSocket>, ctx: InboundCtx) -> io::Result<()> {
        device::size_buffers(&socket);
        let (out, packets) = mpsc::channel(1024);
        let holder: Arc<Mutex<Option<Arc<Udp>>>> = Arc::new(Mutex::new(None));
        let udp_in = Arc::new(Forward(holder.clone()));
        let (stack, accept) = Stack::new(
            &netstack::Config {
                addrs: self.settings.address.clone(),
                mtu: self.settings.mtu,
                promiscuous: true,
            },
            out,
            Some(udp_in as Arc<dyn UdpIn>),
        );
        let accept = accept.ok_or_else(|| io::Error::other("no accept queue"))?;
        let dev = Device::new(self.settings.secret_key, stack.clone(), None);
        for p in &self.settings.peers {
            let user = self.counters.user(&p.email, p.level);
            dev.add_peer(p, Link::Socket(socket.clone()), Some(user));
        }
        let idle = ctx.services.level(0).conn_idle;
        let sessions =
            ctx.services
                .clone()
                .udp_sessions(Arc::new(Reply(stack.clone())), idle, &ctx);
        *holder.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(Udp {
            dev: Arc::downgrade(&dev),
            sessions: Mutex::new(Some(sessions)),
            ctx: ctx.clone(),
        }));
        let tasks = [
            tokio::spawn(Device::send_loop(Arc::downgrade(&dev), packets)),
            tokio::spawn(Device::timers(Arc::downgrade(&dev))),
            tokio::spawn(accept_tcp(Arc::downgrade(&dev), ctx.clone(), accept)),
        ];
        let _abort = Abort(tasks.iter().map(|t| t.abort_handle()).collect());
        let mut d = vec![0u8; device::BUF];
        let mut buf = vec![0u8; device::BUF];
        let mut out = Outgoing::default();
        loop {
            let (n, from) = socket.recv_from(&mut d).await?;
            dev.receive(from, &mut d[..n], &mut buf, &mut out, &socket)
                .await;
        }
    }
}

/// Stops the inbound's tasks when its serving ends.
struct Abort(Vec<tokio::task::AbortHandle>);

impl Drop for Abort {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

/// The stack's UDP handler, set once the device exists (the device needs the stack first).
struct Forward(Arc<Mutex<Option<Arc<Udp>>>>);

impl UdpIn for Forward {
    fn datagram(&self, src: SocketAddr, dst: SocketAddr, data: &[u8]) {
        let u = self.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(u) = u {
            u.datagram(src, dst, data);
        }
    }
}

/// Hands every TCP connection the stack accepted to the dispatcher.
async fn accept_tcp(dev: std::sync::Weak<Device>, ctx: InboundCtx, mut accept: netstack::Accept) {
    while let Some(flow) = accept.tcp.recv().await {
        let (Some(src), Some(dst)) = (flow.remote(), flow.local()) else {
            continue;
        };
        let Some(d) = dev.upgrade() else { return };
        let ctx = inner_ctx(&ctx, src, dst);
        let mut s = ctx.session(
            Destination::new(Address::Ip(dst.ip()), dst.port()),
            Network::Tcp,
            super::PROTOCOL.name(),
        );
        s.user = d.owner(src.ip()).and_then(|p| p.user.clone());
        drop(d);
        let services = ctx.services.clone();
        tokio::spawn(async move {
            let a = Accepted::Stream(s, Box::new(flow));
            if let Err(e) = services.serve_accepted(a, ctx.clone()).await {
                tracing::debug!("[{}] wireguard: connection ended: {e}", ctx.tag);
            }
        });
    }
}
