//! The WireGuard inbound: a server on the UDP socket the instance binds. Its stack is
//! promiscuous, as Xray's: a client's TCP connection or UDP flow to any address becomes a
//! session (source = the client's address inside the tunnel, destination = where it went,
//! user = the peer that owns that address), routed like any inbound's ([`stack_in`]).

use std::io;
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use tokio::net::UdpSocket;

use super::config::Settings;
use super::device::{self, Device, Link, Outgoing};
use crate::common::Network;
use crate::proxy::stack_in::{self, Owner};
use crate::proxy::{Accepted, InboundCtx, InboundHandler};
use crate::registry::CounterSource;
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
        // The device needs the stack first; flows ask it for their user once it exists.
        let owner = Arc::new(OnceLock::<Owner>::new());
        let (si, packets) = stack_in::start(
            self.settings.address.clone(),
            self.settings.mtu,
            &ctx,
            super::PROTOCOL.name(),
            0,
            owner.clone(),
        )?;
        let dev = Device::new(self.settings.secret_key, si.stack.clone(), None);
        for p in &self.settings.peers {
            let user = self.counters.user(&p.email, p.level);
            dev.add_peer(p, Link::Socket(socket.clone()), Some(user));
        }
        let weak = Arc::downgrade(&dev);
        let _ = owner.set(Arc::new(move |ip| {
            weak.upgrade()
                .and_then(|d| d.owner(ip))
                .and_then(|p| p.user.clone())
        }));
        let tasks = [
            tokio::spawn(Device::send_loop(Arc::downgrade(&dev), packets)),
            tokio::spawn(Device::timers(Arc::downgrade(&dev))),
        ];
        let _abort = stack_in::Abort(tasks.iter().map(|t| t.abort_handle()).collect());
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
