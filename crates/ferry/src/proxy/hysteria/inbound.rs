//! The Hysteria inbound: its users, and the QUIC server on the UDP socket the instance binds
//! for it (`networks()` is UDP only: Hysteria listens on nothing else).

use std::io;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::net::UdpSocket;

use super::server::{self, ServerSide, Shared};
use super::{parse_client, Account};
use crate::common::Network;
use crate::config::reader::{Obj, Result};
use crate::proxy::{Accepted, InboundCtx, InboundHandler, UserManager, UserTable};
use crate::registry::{CounterSource, Users};
use crate::transport::BoxStream;

pub struct Inbound {
    shared: Arc<Shared>,
    counters: CounterSource,
}

impl Inbound {
    pub fn new(accounts: Vec<Account>, counters: CounterSource, side: ServerSide) -> Arc<Self> {
        Arc::new(Inbound {
            shared: Arc::new(Shared {
                users: Users::new(accounts),
                side,
            }),
            counters,
        })
    }
}

#[async_trait]
impl InboundHandler for Inbound {
    async fn accept(&self, _stream: BoxStream, _ctx: &InboundCtx) -> io::Result<Accepted> {
        Err(io::Error::other(
            "a Hysteria inbound takes QUIC, not TCP connections",
        ))
    }

    fn networks(&self) -> &[Network] {
        &[Network::Udp]
    }

    async fn serve_udp(&self, socket: Arc<UdpSocket>, ctx: InboundCtx) -> io::Result<()> {
        let socket = Arc::try_unwrap(socket)
            .map_err(|_| io::Error::other("the UDP socket is shared"))?
            .into_std()?;
        server::serve(self.shared.clone(), socket, ctx).await
    }

    fn users(&self) -> Option<&dyn UserManager> {
        Some(self)
    }
}

impl UserTable for Inbound {
    type Entry = Account;
    const SECRET: &'static str = "auth";

    fn user_table(&self) -> &Users<Account> {
        &self.shared.users
    }

    fn read_user(&self, c: &Obj<'_>) -> Result<Account> {
        parse_client(c, &self.counters)
    }
}
