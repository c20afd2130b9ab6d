//! VMess client: builds the request header (AEAD, or legacy when the user has alterId > 0),
//! sends it with the first payload, and reads the response header before the body.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;

use super::body::{
    BodyParams, Opener, Sealer, Security, OPT_AUTH_LENGTH, OPT_CHUNK_MASKING, OPT_CHUNK_STREAM,
    OPT_GLOBAL_PADDING,
};
use super::header::{self, Command, Request};
use super::inbound::now_secs;
use super::stream::{ReadHead, VmessStream, HEADER_HOLD};
use super::{parse_alter_id, parse_security, parse_uuid, Account, SecurityChoice};
use crate::common::{Address, Destination};
use crate::config::reader::{ConfigError, Obj, Result};
use crate::proxy::{OutboundBuild, OutboundHandler, PacketConn, Session};
use crate::transport::{BoxStream, Dialer};

/// One user of a server, as the client uses it.
#[derive(Clone)]
pub struct ClientUser {
    pub account: Account,
    pub security: SecurityChoice,
    pub auth_length: bool,
    /// Alter ids (legacy header) when `alter_id > 0`.
    pub alter_ids: Vec<[u8; 16]>,
}

pub struct Server {
    pub dest: Destination,
    pub users: Vec<ClientUser>,
}

pub struct Outbound {
    servers: Vec<Server>,
    next: AtomicUsize,
    dialer: Arc<dyn Dialer>,
}

fn parse_user(u: Obj<'_>) -> Result<ClientUser> {
    let uuid = parse_uuid(&u)?;
    let alter = parse_alter_id(&u, 0)?;
    let level = u.u64("level")?.unwrap_or(0) as u32;
    let email = u.str("email")?.unwrap_or_default();
    let sec_name = u.str("security")?.unwrap_or_default();
    let security = parse_security(&sec_name).ok_or_else(|| {
        ConfigError::new(
            u.key_path("security"),
            format!("unknown security {sec_name:?}"),
        )
    })?;
    let experiments = u.str("experiments")?.unwrap_or_default();
    let auth_length = experiments
        .split('|')
        .any(|e| e.trim() == "AuthenticatedLength");
    for e in experiments
        .split('|')
        .map(str::trim)
        .filter(|e| !e.is_empty())
    {
        if e != "AuthenticatedLength" && e != "NoTerminationSignal" {
            return Err(ConfigError::new(
                u.key_path("experiments"),
                format!("unknown experiment {e:?}"),
            ));
        }
    }
    u.finish();
    Ok(ClientUser {
        alter_ids: header::alter_ids(&uuid, alter as usize),
        account: Account::new(uuid, alter, &email, level),
        security,
        auth_length,
    })
}

pub fn build(o: &Obj<'_>, b: &OutboundBuild<'_>) -> Result<Arc<dyn OutboundHandler>> {
    let mut servers = Vec::new();
    for s in o.objs(&["vnext"])? {
        let addr = s.req_str("address")?;
        let port = s
            .port("port")?
            .ok_or_else(|| ConfigError::new(s.key_path("port"), "is required"))?;
        let mut users = Vec::new();
        for u in s.objs(&["users"])? {
            users.push(parse_user(u)?);
        }
        if users.is_empty() {
            return Err(ConfigError::new(
                s.key_path("users"),
                "needs at least one user",
            ));
        }
        s.finish();
        servers.push(Server {
            dest: Destination::new(Address::parse(&addr), port),
            users,
        });
    }
    if servers.is_empty() {
        return Err(ConfigError::new(
            o.key_path("vnext"),
            "needs at least one server",
        ));
    }
    Ok(Arc::new(Outbound {
        servers,
        next: AtomicUsize::new(0),
        dialer: b.dialer.clone(),
    }))
}

fn random<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    crate::common::rand::fill(&mut b);
    b
}

/// The request header bytes and the body stream's parts for one connection.
pub struct ClientHandshake {
    pub header: Vec<u8>,
    pub sealer: Sealer,
    pub opener: Opener,
    pub head: ReadHead,
}

/// Builds the request for `dest` as user `u` (sans-IO apart from randomness and the clock).
pub fn client_handshake(
    u: &ClientUser,
    cmd: Command,
    dest: &Destination,
) -> io::Result<ClientHandshake> {
    let (security, mut opt) = match u.security {
        SecurityChoice::Zero => (Security::None, 0),
        SecurityChoice::Body(s) => (s, OPT_CHUNK_STREAM),
    };
    if matches!(
        u.security,
        SecurityChoice::Body(Security::Aes128Gcm | Security::Chacha20Poly1305)
    ) {
        opt |= OPT_CHUNK_MASKING | OPT_GLOBAL_PADDING;
    }
    if u.auth_length && matches!(security, Security::Aes128Gcm | Security::Chacha20Poly1305) {
        opt |= OPT_AUTH_LENGTH;
    }
    let r: [u8; 33] = random();
    let mut req = Request {
        iv: [0; 16],
        key: [0; 16],
        v: r[32],
        opt,
        security: security.wire(),
        cmd,
        dest: dest.clone(),
    };
    req.iv.copy_from_slice(&r[..16]);
    req.key.copy_from_slice(&r[16..32]);
    let pad_len = (random::<1>()[0] % 16) as usize;
    let padding: [u8; 15] = random();
    let mut ins = Vec::with_capacity(header::MAX_INSTRUCTION);
    header::encode_instruction(&req, &padding[..pad_len], &mut ins);
    let legacy = u.account.alter_id > 0 && !u.alter_ids.is_empty();
    let mut out = Vec::with_capacity(128);
    let now = now_secs();
    let (rkey, riv) = if legacy {
        let pick = random::<2>();
        let idx = u16::from_be_bytes(pick) as usize % u.alter_ids.len();
        let delta = (random::<1>()[0] % 60) as i64 - 30;
        header::seal_legacy_request(
            &u.account.cmd_key,
            &u.alter_ids[idx],
            now + delta,
            &ins,
            &mut out,
        );
        header::response_keys_legacy(&req.key, &req.iv)
    } else {
        let eauid = u.account.auth.seal(now, random());
        header::seal_aead_request(&u.account.cmd_key, &eauid, &random(), &ins, &mut out);
        header::response_keys_aead(&req.key, &req.iv)
    };
    let packet = cmd == Command::Udp;
    let (up, down) = BodyParams::pair(security, opt, packet, (req.key, req.iv), (rkey, riv));
    let sealer =
        Sealer::new(&up, Some(header::cfb_enc(&req.key, &req.iv))).map_err(io::Error::from)?;
    let (head, ocfb) = if legacy {
        (
            ReadHead::Legacy {
                dec: Box::new(header::cfb_dec(&rkey, &riv)),
                v: req.v,
                cmd_len: None,
                chain: security == Security::Legacy,
            },
            None,
        )
    } else {
        (
            ReadHead::Aead {
                key: rkey,
                iv: riv,
                v: req.v,
            },
            Some(header::cfb_dec(&rkey, &riv)),
        )
    };
    let opener = Opener::new(&down, ocfb).map_err(io::Error::from)?;
    Ok(ClientHandshake {
        header: out,
        sealer,
        opener,
        head,
    })
}

impl Outbound {
    fn pick(&self) -> (&Server, &ClientUser) {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let s = &self.servers[n % self.servers.len()];
        (s, &s.users[(n / self.servers.len()) % s.users.len()])
    }

    async fn open(&self, cmd: Command, dest: &Destination) -> io::Result<VmessStream> {
        let (server, user) = self.pick();
        let conn = self.dialer.dial(&server.dest).await?;
        let h = client_handshake(user, cmd, dest)?;
        Ok(VmessStream::new(
            conn,
            h.sealer,
            h.opener,
            h.head,
            h.header,
            Some(HEADER_HOLD),
            &[],
            cmd == Command::Udp,
        ))
    }
}

#[async_trait]
impl OutboundHandler for Outbound {
    async fn dial_tcp(&self, session: &Session) -> io::Result<BoxStream> {
        Ok(Box::new(self.open(Command::Tcp, &session.dest).await?))
    }

    async fn dial_udp(&self, session: &Session) -> io::Result<Box<dyn PacketConn>> {
        let s = self.open(Command::Udp, &session.dest).await?;
        Ok(Box::new(super::udp::Client::new(s, session.dest.clone())))
    }
}
