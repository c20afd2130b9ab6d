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
use crate::proxy::{mux, OutboundBuild, OutboundHandler, PacketConn};
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
    /// UDP goes as XUDP (except to ports 53 and 443), as Xray's full-cone mode.
    cone: bool,
}

/// Reads one user's fields (`id`, `alterId`, `level`, `email`, `security`, `experiments`) from `u`:
/// a `users[i]` object, or the flat settings object itself. The caller calls `finish`.
fn parse_user(u: &Obj<'_>) -> Result<ClientUser> {
    let uuid = parse_uuid(u)?;
    let alter = parse_alter_id(u, 0)?;
    let level = u.u64("level")?.unwrap_or(0) as u32;
    let email = u.str("email")?.unwrap_or_default();
    let sec_name = u.str("security")?.unwrap_or_default();
    // Xray takes any other name as auto.
    let security = parse_security(&sec_name).unwrap_or_else(|| {
        u.diag().warn(
            &u.key_path("security"),
            format!("unknown security {sec_name:?}; auto, as Xray does"),
        );
        crate::proxy::vmess::SecurityChoice::Body(crate::proxy::vmess::auto_security())
    });
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
    Ok(ClientUser {
        alter_ids: header::alter_ids(&uuid, alter as usize),
        account: Account::new(uuid, alter, &email, level),
        security,
        auth_length,
    })
}

/// Reads the servers of a VMess outbound's `settings`: the `vnext` list
/// (`[{address, port, users: [{id, ...}]}]`), or Xray's flat form with one server and one user
/// (`{address, port, id, security, level, email, experiments, alterId}`).
pub fn parse_servers(o: &Obj<'_>) -> Result<Vec<Server>> {
    let vnext = o.objs(&["vnext"])?;
    if vnext.is_empty() && o.has("address") {
        let addr = o.req_str("address")?;
        let port = o
            .port("port")?
            .ok_or_else(|| ConfigError::new(o.key_path("port"), "is required"))?;
        let user = parse_user(o)?;
        return Ok(vec![Server {
            dest: Destination::new(Address::parse(&addr), port),
            users: vec![user],
        }]);
    }
    let mut servers = Vec::new();
    for s in vnext {
        let addr = s.req_str("address")?;
        let port = s
            .port("port")?
            .ok_or_else(|| ConfigError::new(s.key_path("port"), "is required"))?;
        let mut users = Vec::new();
        for u in s.objs(&["users"])? {
            users.push(parse_user(&u)?);
            u.finish();
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
            "needs at least one server (or give address, port and id directly)",
        ));
    }
    Ok(servers)
}

/// Builds a VMess outbound from its `settings` (see [`parse_servers`] for the two shapes).
pub fn build(o: &Obj<'_>, b: &OutboundBuild<'_>) -> Result<Arc<dyn OutboundHandler>> {
    let servers = parse_servers(o)?;
    Ok(Arc::new(Outbound {
        servers,
        next: AtomicUsize::new(0),
        dialer: b.dialer.clone(),
        cone: mux::cone(),
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
        let conn = self.dialer.dial_tcp(&server.dest).await?;
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
    async fn dial_tcp(&self, dest: &Destination) -> io::Result<BoxStream> {
        if mux::is_mux_cool(dest) {
            return Ok(Box::new(self.open(Command::Mux, dest).await?));
        }
        Ok(Box::new(self.open(Command::Tcp, dest).await?))
    }

    async fn dial_udp(&self, dest: &Destination) -> io::Result<Box<dyn PacketConn>> {
        if self.cone && mux::xudp_port(dest.port) {
            let s = self.open(Command::Mux, &mux::mux_cool()).await?;
            return mux::client::xudp(Box::new(s), dest);
        }
        let s = self.open(Command::Udp, dest).await?;
        Ok(Box::new(super::udp::Datagrams::client(s, dest.clone())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::uuid::parse_id;
    use crate::config::Diagnostics;
    use serde_json::json;

    const ID: &str = "b831381d-6324-4d53-ad4f-8cda48b30811";
    const ID2: &str = "27848739-7e62-4138-9fd3-098a63964b6b";

    #[test]
    fn flat_settings_are_one_server_with_one_user() {
        let d = Diagnostics::default();
        let v = json!({"address": "vm.example", "port": 443, "id": ID, "security": "aes-128-gcm",
            "level": 2, "email": "a@x", "experiments": "AuthenticatedLength", "alterId": 0});
        let o = Obj::new(&v, "outbounds[0].settings", &d).unwrap();
        let servers = parse_servers(&o).unwrap();
        o.finish();
        assert!(d.take().is_empty(), "every flat field is read");
        assert_eq!(servers.len(), 1);
        assert_eq!(
            servers[0].dest,
            Destination::parse("vm.example:443").unwrap()
        );
        assert_eq!(servers[0].users.len(), 1);
        let u = &servers[0].users[0];
        assert_eq!(u.account.uuid, parse_id(ID).unwrap());
        assert_eq!((u.account.level, &*u.account.email), (2, "a@x"));
        assert_eq!(u.account.alter_id, 0);
        assert_eq!(u.security, SecurityChoice::Body(Security::Aes128Gcm));
        assert!(u.auth_length);
    }

    #[test]
    fn vnext_list_keeps_every_server_and_user() {
        let d = Diagnostics::default();
        let v = json!({"vnext": [
            {"address": "1.2.3.4", "port": 10086, "users": [
                {"id": ID, "security": "none", "level": 1, "email": "one"},
                {"id": ID2, "alterId": 4}]},
            {"address": "b.example", "port": "8443", "users": [{"id": ID2, "security": "zero"}]}]});
        let o = Obj::new(&v, "s", &d).unwrap();
        let servers = parse_servers(&o).unwrap();
        assert_eq!(servers.len(), 2);
        assert_eq!(
            servers[0].dest,
            Destination::parse("1.2.3.4:10086").unwrap()
        );
        assert_eq!(
            servers[1].dest,
            Destination::parse("b.example:8443").unwrap()
        );
        let u = &servers[0].users;
        assert_eq!(u.len(), 2);
        assert_eq!(u[0].account.uuid, parse_id(ID).unwrap());
        assert_eq!((u[0].account.level, &*u[0].account.email), (1, "one"));
        assert_eq!(u[0].security, SecurityChoice::Body(Security::None));
        assert!(!u[0].auth_length);
        assert_eq!(u[1].account.uuid, parse_id(ID2).unwrap());
        assert_eq!((u[1].account.alter_id, u[1].alter_ids.len()), (4, 4));
        assert_eq!(servers[1].users[0].security, SecurityChoice::Zero);
    }

    #[test]
    fn missing_or_broken_servers_name_their_path() {
        let d = Diagnostics::default();
        let err = |v: serde_json::Value| {
            parse_servers(&Obj::new(&v, "s", &d).unwrap())
                .err()
                .map(|e| e.path)
        };
        assert_eq!(err(json!({})), Some("s.vnext".into()));
        assert_eq!(
            err(json!({"address": "a", "id": ID})),
            Some("s.port".into())
        );
        assert_eq!(err(json!({"address": "a", "port": 1})), Some("s.id".into()));
        // An unknown security is auto, as in Xray, with a warning naming it.
        let v = json!({"address": "a", "port": 1, "id": ID, "security": "rot13"});
        assert!(parse_servers(&Obj::new(&v, "s", &d).unwrap()).is_ok());
        assert!(
            d.take()
                .iter()
                .any(|w| w.starts_with("s.security: unknown")),
            "no warning"
        );
        assert_eq!(
            err(json!({"vnext": [{"address": "a", "port": 1, "users": []}]})),
            Some("s.vnext[0].users".into())
        );
        assert_eq!(
            err(json!({"vnext": [{"address": "a", "port": 1, "users": [{"id": ""}]}]})),
            Some("s.vnext[0].users[0].id".into())
        );
    }
}
