//! VLESS server: reads the header, finds the user by UUID (bytes 6-7 ignored, as Xray), and
//! says what to forward: TCP as a stream (spliced once the response went out), UDP as
//! datagrams, Mux.Cool (and XUDP, its full-cone UDP) to the mux server; with XTLS Vision
//! (`flow` in the request and on the user, as Xray checks them) TCP and Mux go through a
//! [`VisionStream`]. What is not VLESS goes to the fallbacks; a bad header is logged and the
//! connection closed.

use std::io;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::time::{timeout_at, Instant};

use super::codec::{self, CMD_MUX, CMD_RVS, CMD_TCP, CMD_UDP};
use super::outbound::Datagrams;
use super::vision::{self, VisionStream};
use super::{parse_client, Account, ClientDefaults, Flow};
use crate::common::{ct, Network};
use crate::config::reader::{Obj, Result};
use crate::proxy::fallback::{divert, first_read, Fallbacks};
use crate::proxy::head::HeadReader;
use crate::proxy::headed::ServerStream;
use crate::proxy::mux::mux_cool;
use crate::proxy::reverse::rvs_cool;
use crate::proxy::{Accepted, InboundCtx, InboundHandler, UserManager, UserTable};
use crate::registry::{CounterSource, Users};
use crate::transport::{vlessenc, BoxStream};

/// The longest header: 1 + 16 + 1 + 255 + 1 + 2 + 1 + 1 + 255.
const MAX_HEADER: usize = 533;

/// How long an unfinished VLESS Encryption handshake is held (Xray's default `connIdle`).
const ENCRYPTION_HOLD: std::time::Duration = std::time::Duration::from_secs(300);

/// VLESS Encryption's server side (`decryption`).
pub struct Decryption {
    pub server: Arc<vlessenc::Server>,
    /// The stream under is a bare socket.
    pub splice_ok: bool,
}

pub struct Inbound {
    users: Users<Account>,
    decryption: Option<Decryption>,
    counters: CounterSource,
    fallbacks: Option<Arc<Fallbacks>>,
    /// For users added later.
    defaults: ClientDefaults,
}

impl Inbound {
    pub fn new(
        accounts: Vec<Account>,
        counters: CounterSource,
        fallbacks: Option<Arc<Fallbacks>>,
        defaults: ClientDefaults,
        decryption: Option<Decryption>,
    ) -> Self {
        Inbound {
            users: Users::new(accounts),
            decryption,
            counters,
            fallbacks,
            defaults,
        }
    }
}

#[async_trait]
impl InboundHandler for Inbound {
    async fn accept(&self, stream: BoxStream, ctx: &InboundCtx) -> io::Result<Accepted> {
        let mut stream = stream;
        if let Some(d) = &self.decryption {
            // Xray sets no deadline on this handshake (a prober's partial flight is held):
            // Ferry holds it as long as Xray's default idle timeout, then closes.
            let hs = d.server.handshake(stream, d.splice_ok);
            stream = match tokio::time::timeout(ENCRYPTION_HOLD, hs).await {
                Err(_) => {
                    ctx.reject("vless", "timeout", &"VLESS Encryption handshake timed out");
                    return Ok(Accepted::Done);
                }
                Ok(Err(e)) => {
                    let why = format_args!("ML-KEM-768 handshake failed: {e}");
                    ctx.reject("vless", e.kind, &why);
                    return Ok(Accepted::Done);
                }
                Ok(Ok(s)) => Box::new(s),
            };
        }
        // The header's deadline starts after VLESS Encryption's handshake, as Xray's.
        let deadline = Instant::now() + ctx.services.handshake_timeout();
        if let Some(tls) = stream.outer_tls() {
            // Until the header says whether this is Vision, decrypt nothing past the record
            // being read: a Vision client may write on the bare socket right after it.
            tls.set_record_at_a_time(true);
        }
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
            if ct::find(&self.users.load(), |a| &a.key, &key).is_none() {
                return Ok(divert(fbs, r, ctx, "vless", &"unknown user"));
            }
        }
        let req = match timeout_at(deadline, r.read_until(codec::decode_request)).await {
            Err(_) => {
                ctx.reject("vless", "timeout", &"handshake timed out");
                return Ok(Accepted::Done);
            }
            Ok(Err(e)) => {
                ctx.reject("vless", "truncated", &format_args!("reading header: {e}"));
                return Ok(Accepted::Done);
            }
            Ok(Ok(Err(e))) => {
                ctx.reject("vless", "bad_header", &e);
                return Ok(Accepted::Done);
            }
            Ok(Ok(Ok((req, n)))) => {
                r.consume(n);
                req
            }
        };
        let key = codec::lookup_key(&req.uuid);
        let users = self.users.load();
        let Some(acct) = ct::find(&users, |a| &a.key, &key) else {
            let id = crate::common::uuid::format(&req.uuid);
            ctx.reject("vless", "unknown_user", &format_args!("unknown user {id}"));
            return Ok(Accepted::Done);
        };
        if acct.reverse.is_some() != (req.cmd == CMD_RVS) {
            let id = crate::common::uuid::format(&acct.uuid);
            let why = match acct.reverse {
                Some(_) => {
                    format!("for safety reasons, user {id} is not allowed to use forward proxy")
                }
                None => format!("reverse: user {id} is not allowed to create reverse proxy"),
            };
            tracing::warn!(
                "[{}] vless from {} ({}): {why}",
                ctx.tag,
                ctx.info.source,
                acct.user.email
            );
            return Ok(Accepted::Done);
        }
        let vision = match check_flow(&req, acct, &mut r) {
            Ok(v) => v,
            Err(why) => {
                tracing::warn!(
                    "[{}] vless from {} ({}): {why}",
                    ctx.tag,
                    ctx.info.source,
                    acct.user.email
                );
                return Ok(Accepted::Done);
            }
        };
        match (vision, req.cmd, &req.dest) {
            (true, CMD_TCP, Some(dest)) => {
                let mut session = ctx.session(dest.clone(), Network::Tcp, "vless");
                session.user = Some(acct.user.clone());
                let pre = r.buf.to_vec();
                let s = VisionStream::server(r.stream, pre, req.uuid, acct.seeds);
                return Ok(Accepted::Stream(session, Box::new(s)));
            }
            (true, CMD_RVS, _) => {
                let mut session = ctx.session(rvs_cool(), Network::Tcp, "vless");
                session.user = Some(acct.user.clone());
                let pre = r.buf.to_vec();
                let s = VisionStream::server(r.stream, pre, req.uuid, acct.seeds);
                let tag = acct.reverse.clone().unwrap_or_default();
                return Ok(Accepted::Reverse(session, Box::new(s), tag));
            }
            (true, CMD_MUX, _) => {
                // Under Vision, Mux carries UDP only (XUDP), as Xray allows it.
                let mut session = ctx.session(mux_cool(), Network::Udp, "vless");
                session.user = Some(acct.user.clone());
                let pre = r.buf.to_vec();
                let s = VisionStream::server(r.stream, pre, req.uuid, acct.seeds);
                return Ok(Accepted::Mux(session, Box::new(s)));
            }
            _ => {}
        }
        if let Some(tls) = r.stream.outer_tls() {
            tls.set_record_at_a_time(false);
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
                let mut session = ctx.session(rvs_cool(), Network::Tcp, "vless");
                session.user = Some(acct.user.clone());
                let stream = ServerStream::new(r.into_stream(), codec::RESPONSE.to_vec());
                let tag = acct.reverse.clone().unwrap_or_default();
                return Ok(Accepted::Reverse(session, Box::new(stream), tag));
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

/// Whether this request runs XTLS Vision, or why it is refused (as Xray's inbound decides).
fn check_flow(
    req: &codec::Request,
    acct: &Account,
    r: &mut HeadReader,
) -> std::result::Result<bool, String> {
    match req.flow.as_str() {
        vision::FLOW if acct.flow == Flow::Vision => {
            if req.cmd == CMD_UDP {
                return Err(format!("{} doesn't support UDP", vision::FLOW));
            }
            match r.stream.outer_tls() {
                Some(t) if t.is_tls13() => Ok(true),
                Some(_) => Err(format!(
                    "failed to use {}: the outer TLS is not TLS 1.3",
                    vision::FLOW
                )),
                None => Err("XTLS only supports TLS directly under VLESS".into()),
            }
        }
        vision::FLOW => Err(format!(
            "account {} is not able to use the flow {}",
            crate::common::uuid::format(&acct.uuid),
            vision::FLOW
        )),
        "" => {
            if acct.flow == Flow::Vision
                && (req.cmd == CMD_TCP || (req.cmd == CMD_MUX && mux_not_xudp(&r.buf)))
            {
                return Err(format!(
                    "account {} is rejected since the client flow is empty (plain TLS \
                     proxying shows TLS in TLS)",
                    crate::common::uuid::format(&acct.uuid)
                ));
            }
            Ok(false)
        }
        f => Err(format!("unknown request flow {f:?}")),
    }
}

/// A Mux.Cool connection whose first frame is not a new XUDP session (Xray's
/// `isMuxAndNotXUDP`: session id 0 and network UDP).
fn mux_not_xudp(first: &[u8]) -> bool {
    if first.len() < 7 {
        return true;
    }
    !(first[2] == 0 && first[3] == 0 && first[6] == 2)
}

impl UserTable for Inbound {
    type Entry = Account;
    const SECRET: &'static str = "id";

    fn user_table(&self) -> &Users<Account> {
        &self.users
    }

    fn read_user(&self, c: &Obj<'_>) -> Result<Account> {
        parse_client(c, &self.counters, &self.defaults)
    }
}
