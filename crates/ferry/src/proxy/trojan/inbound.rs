//! Trojan server: reads the request; a known password hash relays (TCP as a stream, spliced
//! at once: Trojan has no response; UDP as frames); anything else is not Trojan's and goes to
//! the fallback, with every byte the client sent, as Xray does (closed while there is none).

use std::io;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::time::{timeout_at, Instant};

use super::codec::{self, CMD_UDP};
use super::outbound::Frames;
use super::{parse_client, Account};
use crate::common::{ct, Network};
use crate::config::reader::{Obj, Result};
use crate::proxy::fallback::{divert, first_read, Fallbacks};
use crate::proxy::head::HeadReader;
use crate::proxy::{Accepted, InboundCtx, InboundHandler, UserManager, UserTable};
use crate::registry::{CounterSource, Users};
use crate::transport::BoxStream;

/// The longest request: 56 + 2 + 1 + 1 + 1 + 255 + 2 + 2.
const MAX_HEADER: usize = 320;

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
        let deadline = Instant::now() + ctx.services.handshake_timeout();
        let mut r = HeadReader::new(stream, MAX_HEADER);
        let fbs = self.fallbacks.as_deref();
        // As Xray, with or without fallbacks: one read decides; too short for a Trojan request,
        // no CR after the hash, or an unknown hash is not Trojan (closed at once when there is
        // no fallback; a short HTTP request must not wait for more bytes).
        if !first_read(&mut r, deadline, ctx, "trojan").await {
            return Ok(Accepted::Done);
        }
        if r.buf.len() < 58 || r.buf[56] != b'\r' {
            return Ok(divert(fbs, r, ctx, "trojan", &"not Trojan"));
        }
        let users = self.users.load();
        let Some(acct) = ct::find(&users, |a| &a.hash[..], &r.buf[..codec::HASH_LEN]) else {
            return Ok(divert(fbs, r, ctx, "trojan", &"unknown password"));
        };
        let (req, n) = match timeout_at(deadline, r.read_until(codec::decode_request)).await {
            Err(_) => {
                ctx.reject("trojan", "timeout", &"handshake timed out");
                return Ok(Accepted::Done);
            }
            Ok(Err(e)) => {
                ctx.reject("trojan", "truncated", &format_args!("reading request: {e}"));
                return Ok(Accepted::Done);
            }
            // As Xray: a bad address after a known hash is closed, not a fallback's.
            Ok(Ok(Err(e))) => {
                ctx.reject("trojan", "bad_header", &e);
                return Ok(Accepted::Done);
            }
            Ok(Ok(Ok(x))) => x,
        };
        r.consume(n);
        let network = if req.cmd == CMD_UDP {
            Network::Udp
        } else {
            Network::Tcp
        };
        let mut session = ctx.session(req.dest, network, "trojan");
        session.user = Some(acct.user.clone());
        Ok(match network {
            Network::Tcp => Accepted::Stream(session, r.into_stream()),
            Network::Udp => Accepted::Packets(session, Box::new(Frames::new(r.into_stream()))),
        })
    }

    fn users(&self) -> Option<&dyn UserManager> {
        Some(self)
    }
}

impl UserTable for Inbound {
    type Entry = Account;
    const SECRET: &'static str = "password";

    fn user_table(&self) -> &Users<Account> {
        &self.users
    }

    fn read_user(&self, c: &Obj<'_>) -> Result<Account> {
        parse_client(c, &self.counters)
    }
}
