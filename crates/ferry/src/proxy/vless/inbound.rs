//! VLESS server: reads the header, finds the user by UUID (bytes 6-7 ignored, as Xray), and
//! says what to forward: TCP as a stream (spliced once the response went out), UDP as
//! datagrams, Mux.Cool (and XUDP, its full-cone UDP) to the mux server. A bad header is logged and the connection closed (fallbacks: their issue).

use std::io;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::time::{timeout_at, Instant};

use super::codec::{self, CMD_MUX, CMD_RVS, CMD_TCP, CMD_UDP};
use super::outbound::Datagrams;
use super::{parse_client, Account};
use crate::common::Network;
use crate::config::reader::{ConfigError, Obj, Result};
use crate::config::Diagnostics;
use crate::proxy::fallback::{divert, first_read, Fallbacks};
use crate::proxy::head::HeadReader;
use crate::proxy::headed::ServerStream;
use crate::proxy::mux::mux_cool;
use crate::proxy::{Accepted, InboundCtx, InboundHandler, User, UserManager};
use crate::registry::{CounterSource, Users};
use crate::transport::BoxStream;

/// The longest header: 1 + 16 + 1 + 255 + 1 + 2 + 1 + 1 + 255.
const MAX_HEADER: usize = 533;

pub struct Inbound {
    users: Users<Account>,
    counters: CounterSource,
    fallbacks: Option<Arc<Fallbacks>>,
}

impl Inbound {
    pub fn new(
        accounts: Vec<Account>,
        counters: CounterSource,
        fallbacks: Option<Arc<Fallbacks>>,
    ) -> Self {
        Inbound {
            users: Users::new(accounts),
            counters,
            fallbacks,
        }
    }
}

#[async_trait]
impl InboundHandler for Inbound {
    async fn accept(&self, stream: BoxStream, ctx: &InboundCtx) -> io::Result<Accepted> {
        let deadline = Instant::now() + ctx.dispatcher.handshake_timeout();
        let mut r = HeadReader::new(stream, MAX_HEADER);
        let fbs = self.fallbacks.as_deref();
        if fbs.is_some() {
            // As Xray: one read decides. Shorter than version + UUID, another version, or an
            // unknown UUID is not VLESS; errors after a known UUID close the connection.
            if !first_read(&mut r, deadline, ctx, "vless").await {
                return Ok(Accepted::Done);
            }
            if r.buf.len() < 18 || r.buf[0] != 0 {
                return Ok(divert(fbs, r, ctx, "vless", &"not VLESS"));
            }
            let mut uuid = [0u8; 16];
            uuid.copy_from_slice(&r.buf[1..17]);
            let key = codec::lookup_key(&uuid);
            if !self.users.load().iter().any(|a| a.key == key) {
                return Ok(divert(fbs, r, ctx, "vless", &"unknown user"));
            }
        }
        let req = match timeout_at(deadline, r.read_until(codec::decode_request)).await {
            Err(_) => {
                tracing::info!(
                    "[{}] vless from {}: handshake timed out",
                    ctx.tag,
                    ctx.info.source
                );
                return Ok(Accepted::Done);
            }
            Ok(Err(e)) => {
                tracing::info!(
                    "[{}] vless from {}: reading header: {e}",
                    ctx.tag,
                    ctx.info.source
                );
                return Ok(Accepted::Done);
            }
            Ok(Ok(Err(e))) => {
                tracing::warn!(
                    "[{}] vless from {}: invalid request: {e}",
                    ctx.tag,
                    ctx.info.source
                );
                return Ok(Accepted::Done);
            }
            Ok(Ok(Ok((req, n)))) => {
                r.consume(n);
                req
            }
        };
        let key = codec::lookup_key(&req.uuid);
        let users = self.users.load();
        let Some(acct) = users.iter().find(|a| a.key == key) else {
            tracing::warn!(
                "[{}] vless from {}: invalid request: unknown user {}",
                ctx.tag,
                ctx.info.source,
                crate::common::uuid::format(&req.uuid)
            );
            return Ok(Accepted::Done);
        };
        if !req.flow.is_empty() {
            tracing::warn!(
                "[{}] vless from {} ({}): flow {:?} is not supported yet",
                ctx.tag,
                ctx.info.source,
                acct.user.email,
                req.flow
            );
            return Ok(Accepted::Done);
        }
        let (network, dest) = match (req.cmd, req.dest) {
            (CMD_TCP, Some(d)) => (Network::Tcp, d),
            (CMD_UDP, Some(d)) => (Network::Udp, d),
            (CMD_MUX, _) => {
                let mut session = ctx.session(mux_cool(), Network::Tcp, "vless");
                session.user = Some(acct.user.clone());
                let stream = ServerStream::new(r.into_stream(), codec::RESPONSE.to_vec());
                return Ok(Accepted::Mux(session, Box::new(stream)));
            }
            (CMD_RVS, _) => {
                tracing::warn!(
                    "[{}] vless from {} ({}): reverse proxy (command 4) is not supported yet",
                    ctx.tag,
                    ctx.info.source,
                    acct.user.email
                );
                return Ok(Accepted::Done);
            }
            _ => return Ok(Accepted::Done),
        };
        let mut session = ctx.session(dest.clone(), network, "vless");
        session.user = Some(acct.user.clone());
        let stream: BoxStream =
            Box::new(ServerStream::new(r.into_stream(), codec::RESPONSE.to_vec()));
        Ok(match network {
            Network::Tcp => Accepted::Stream(session, stream),
            Network::Udp => Accepted::Packets(session, Box::new(Datagrams::new(stream, dest))),
        })
    }

    fn users(&self) -> Option<&dyn UserManager> {
        Some(self)
    }
}

impl UserManager for Inbound {
    fn add_user(&self, v: &serde_json::Value) -> Result<User> {
        let diag = Diagnostics::default();
        let c = Obj::new(v, "user", &diag)?;
        let a = parse_client(&c, &self.counters)?;
        c.finish();
        self.users
            .add_user(a)
            .ok_or_else(|| ConfigError::new("user", "a user with this id or email exists already"))
    }

    fn remove_user(&self, email: &str) -> bool {
        self.users.remove_email(email)
    }

    fn list_users(&self) -> Vec<User> {
        self.users.list()
    }
}
