//! VMess server: finds the user by AuthID (or, when enabled, by the legacy user hash), opens the
//! request header, answers with the response header on the first reply, and hands the body
//! stream to the dispatcher. Bad requests are drained, as Xray does, then closed.

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;

use super::drain::DrainSize;
use tokio::io::{AsyncRead, AsyncReadExt};

use super::body::{BodyParams, Opener, Sealer, Security, OPT_CHUNK_MASKING, OPT_GLOBAL_PADDING};
use super::header::{self, Command, HeaderError, Request};
use super::replay::ReplayFilter;
use super::stream::{ReadHead, VmessStream};
use super::{parse_alter_id, parse_uuid, Account};
use crate::common::Network;
use crate::config::reader::{ConfigError, Diagnostics, Obj, Result};
use crate::proxy::{Accepted, InboundBuild, InboundCtx, InboundHandler, UserManager, UserTable};
use crate::registry::{CounterSource, Users};
use crate::transport::BoxStream;

/// Bound on remembered AuthIDs / sessions per generation.
const REPLAY_CAP: usize = 1 << 20;

pub struct Inbound {
    /// The users, swapped whole when one is added or removed (a handshake keeps a snapshot).
    accounts: Users<Account>,
    /// Gives added users their counters.
    counters: CounterSource,
    legacy_table: Mutex<LegacyTable>,
    disable_insecure: bool,
    auth_ids: ReplayFilter<[u8; 16]>,
    sessions: ReplayFilter<([u8; 16], [u8; 16], [u8; 16])>,
    /// Bytes to drain before closing a bad connection, as Xray sizes it.
    drain_size: DrainSize,
}

/// Reads one entry of `clients` (the API's AddUser gives the same shape).
/// Reads one entry of `clients` (the API's AddUser gives the same shape); the caller finishes `c`.
fn parse_client(
    c: &Obj<'_>,
    def_level: u32,
    def_alter: u16,
    diag: &Diagnostics,
) -> Result<Account> {
    let uuid = parse_uuid(c)?;
    let level = c.u64("level")?.map(|l| l as u32).unwrap_or(def_level);
    let alter = parse_alter_id(c, def_alter)?;
    let email = c.str("email")?.unwrap_or_default();
    c.ignore(&["security", "flow", "experiments"]);
    let path = c.path().to_string();
    if alter > 0 {
        diag.warn(
            &path,
            format!(
                "client {:?} has alterId {alter}: the legacy VMess header (MD5 auth, no replay \
                 protection worth the name) is accepted for it; set alterId 0 to refuse it",
                if email.is_empty() {
                    "(no email)"
                } else {
                    &email
                }
            ),
        );
    }
    Ok(Account::new(uuid, alter, &email, level))
}

pub fn build(o: &Obj<'_>, b: &InboundBuild<'_>) -> Result<Arc<dyn InboundHandler>> {
    let (def_level, def_alter) = match o.obj("default")? {
        Some(d) => {
            let l = d.u64("level")?.unwrap_or(0) as u32;
            let a = parse_alter_id(&d, 0)?;
            d.finish();
            (l, a)
        }
        None => (0, 0),
    };
    let mut accounts = Vec::new();
    for c in o.client_objs(&["clients", "users"])? {
        let mut a = parse_client(&c, def_level, def_alter, b.diag)?;
        c.finish();
        a.traffic = b.counters.user(&a.email, a.level).traffic;
        accounts.push(a);
    }
    if o.has("detour") {
        return Err(ConfigError::new(
            o.key_path("detour"),
            "dynamic port (detour) is not supported",
        ));
    }
    let disable_insecure = o.bool("disableInsecureEncryption")?.unwrap_or(false);
    let mut ib = Inbound::new(accounts, disable_insecure);
    ib.counters = b.counters.clone();
    Ok(Arc::new(ib))
}

impl Inbound {
    pub fn new(accounts: Vec<Account>, disable_insecure: bool) -> Inbound {
        // Derived from the user ids as Xray does (stable across restarts).
        let drain_size =
            DrainSize::from_ids(accounts.iter().map(|a| &a.uuid)).unwrap_or_else(DrainSize::random);
        Inbound {
            accounts: Users::new(accounts),
            counters: CounterSource::default(),
            legacy_table: Mutex::new(LegacyTable::default()),
            disable_insecure,
            auth_ids: ReplayFilter::new(Duration::from_secs(120), REPLAY_CAP),
            sessions: ReplayFilter::new(Duration::from_secs(90), REPLAY_CAP),
            drain_size,
        }
    }

    fn drain_total(&self) -> usize {
        self.drain_size.draw()
    }
}

pub fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Legacy user hashes of every id for every second of the window, rebuilt every 10 s and
/// whenever the users change (indices point into the snapshot it was built from).
#[derive(Default)]
struct LegacyTable {
    built: i64,
    from: Option<Arc<Vec<Account>>>,
    map: HashMap<[u8; 16], (usize, i64)>,
}

impl LegacyTable {
    fn refresh(&mut self, accounts: &Arc<Vec<Account>>, now: i64) {
        let same = self.from.as_ref().is_some_and(|f| Arc::ptr_eq(f, accounts));
        if same && !self.map.is_empty() && (now - self.built).abs() < 10 {
            return;
        }
        self.from = Some(accounts.clone());
        self.map.clear();
        self.built = now;
        for (i, a) in accounts.iter().enumerate() {
            if a.alter_id == 0 {
                continue;
            }
            let mut ids = vec![a.uuid];
            ids.extend(header::alter_ids(&a.uuid, a.alter_id as usize));
            for id in &ids {
                for ts in now - 130..=now + 130 {
                    self.map.insert(header::legacy_user_hash(id, ts), (i, ts));
                }
            }
        }
    }
}

/// Reads until `buf` holds at least `n` bytes.
/// The most one read of a VMess handshake takes (Xray's buffer size).
const XRAY_READ: usize = 8192;

async fn fill<R: AsyncRead + Unpin + ?Sized>(
    s: &mut R,
    buf: &mut Vec<u8>,
    n: usize,
) -> io::Result<()> {
    while buf.len() < n {
        // Reads as large as Xray's (one 8 KiB buffer): what a bad request leaves unread in the
        // kernel decides whether the close is a FIN or an RST.
        let start = buf.len();
        buf.resize(start + XRAY_READ, 0);
        let k = match s.read(&mut buf[start..]).await {
            Ok(k) => k,
            Err(e) => {
                buf.truncate(start);
                return Err(e);
            }
        };
        buf.truncate(start + k);
        if k == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(())
}

/// A parsed request and what the reply needs.
struct Handshake {
    account: usize,
    req: Request,
    aead: bool,
    /// Bytes after the header.
    rest: Vec<u8>,
}

enum Failure {
    Io(io::Error),
    Bad(HeaderError),
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Self {
        Failure::Io(e)
    }
}

impl From<HeaderError> for Failure {
    fn from(e: HeaderError) -> Self {
        Failure::Bad(e)
    }
}

impl Inbound {
    async fn read_request(
        &self,
        s: &mut BoxStream,
        buf: &mut Vec<u8>,
        accounts: &Arc<Vec<Account>>,
    ) -> std::result::Result<Handshake, Failure> {
        fill(s, buf, 16).await?;
        let mut eauid = [0u8; 16];
        eauid.copy_from_slice(&buf[..16]);
        let now = now_secs();
        // AEAD: the first account whose AuthID key yields a valid CRC (as Xray: no second try).
        if let Some((i, ts)) = accounts
            .iter()
            .enumerate()
            .find_map(|(i, a)| a.auth.open(&eauid).map(|t| (i, t)))
        {
            header::check_time(ts, now)?;
            if !self.auth_ids.check(eauid) {
                return Err(HeaderError::Replay.into());
            }
            let a = &accounts[i];
            fill(s, buf, header::AEAD_PREFIX).await?;
            let mut sealed_len = [0u8; 18];
            sealed_len.copy_from_slice(&buf[16..34]);
            let mut nonce = [0u8; 8];
            nonce.copy_from_slice(&buf[34..42]);
            let l = header::open_aead_length(&a.cmd_key, &eauid, &sealed_len, &nonce)?;
            let end = header::AEAD_PREFIX + l + 16;
            fill(s, buf, end).await?;
            let req = header::open_aead_instruction(
                &a.cmd_key,
                &eauid,
                &nonce,
                &mut buf[header::AEAD_PREFIX..end],
            )?;
            return Ok(Handshake {
                account: i,
                req,
                aead: true,
                rest: buf[end..].to_vec(),
            });
        }
        if !accounts.iter().any(|a| a.alter_id > 0) {
            return Err(HeaderError::NoUser.into());
        }
        let found = {
            let mut t = self.legacy_table.lock().unwrap_or_else(|e| e.into_inner());
            t.refresh(accounts, now);
            t.map.get(&eauid).copied()
        };
        let Some((i, ts)) = found else {
            return Err(HeaderError::NoUser.into());
        };
        let a = &accounts[i];
        loop {
            match header::open_legacy_instruction(&a.cmd_key, ts, &buf[16..])? {
                Some((req, n)) => {
                    return Ok(Handshake {
                        account: i,
                        req,
                        aead: false,
                        rest: buf[16 + n..].to_vec(),
                    })
                }
                None => {
                    if buf.len() >= 16 + header::MAX_INSTRUCTION {
                        return Err(HeaderError::Truncated.into());
                    }
                    let want = buf.len() + 1;
                    fill(s, buf, want).await?;
                }
            }
        }
    }

    /// Reads and discards until `total` bytes were read (counting the `seen` ones) or the
    /// handshake deadline, as Xray does for bad requests: each read takes up to 8 KiB, however
    /// few bytes are still wanted, as Xray's buffered reader does.
    async fn drain(&self, s: &mut BoxStream, seen: usize, deadline: tokio::time::Instant) {
        let left = self.drain_total().saturating_sub(seen);
        crate::proxy::probe::drain_bytes(s, left, XRAY_READ, deadline).await;
    }
}

impl Inbound {
    /// The handshake of one connection: the session and the body stream, or `None` when the
    /// request was refused (logged, drained where the protocol says so).
    async fn accept_tcp(
        &self,
        mut stream: BoxStream,
        ctx: &InboundCtx,
    ) -> io::Result<Option<(crate::proxy::Session, VmessStream)>> {
        let limit = ctx.services.handshake_timeout();
        let deadline = tokio::time::Instant::now() + limit;
        let mut buf = Vec::with_capacity(512);
        let accounts = self.accounts.load();
        let acc = match tokio::time::timeout_at(
            deadline,
            self.read_request(&mut stream, &mut buf, &accounts),
        )
        .await
        {
            Ok(Ok(a)) => a,
            Ok(Err(Failure::Io(e))) => {
                ctx.reject("vmess", "truncated", &format_args!("reading header: {e}"));
                return Ok(None);
            }
            Ok(Err(Failure::Bad(e))) => {
                ctx.reject(
                    "vmess",
                    e.reason(),
                    &format_args!("invalid request: {e}; draining"),
                );
                self.drain(&mut stream, buf.len(), deadline).await;
                return Ok(None);
            }
            Err(_) => {
                ctx.reject("vmess", "timeout", &"handshake timed out");
                return Ok(None);
            }
        };
        let a = &accounts[acc.account];
        let req = acc.req;
        let reject = |reason: &'static str, why: String| {
            ctx.reject("vmess", reason, &format_args!("{} {why}", a.email));
            Ok(None)
        };
        if !self.sessions.check((a.uuid, req.key, req.iv)) {
            return reject("replay", "replayed session (same key and iv)".into());
        }
        let Some(security) = Security::from_wire(req.security) else {
            return reject(
                "unsupported",
                format!("unsupported security {}", req.security),
            );
        };
        if self.disable_insecure && matches!(security, Security::None | Security::Legacy) {
            return reject(
                "unsupported",
                format!("insecure security {security:?} refused by disableInsecureEncryption"),
            );
        }
        if req.opt & OPT_GLOBAL_PADDING != 0 && req.opt & OPT_CHUNK_MASKING == 0 {
            return reject("bad_header", "global padding without chunk masking".into());
        }
        let network = match req.cmd {
            Command::Tcp | Command::Mux => Network::Tcp,
            Command::Udp => Network::Udp,
        };
        let (rkey, riv) = if acc.aead {
            header::response_keys_aead(&req.key, &req.iv)
        } else {
            header::response_keys_legacy(&req.key, &req.iv)
        };
        let mut resp = Vec::with_capacity(64);
        let wcfb = if acc.aead {
            header::seal_aead_response(&rkey, &riv, req.v, &mut resp);
            Some(header::cfb_enc(&rkey, &riv))
        } else {
            let mut enc = header::cfb_enc(&rkey, &riv);
            let mut h = [req.v, 0, 0, 0];
            enc.encrypt(&mut h);
            resp.extend_from_slice(&h);
            Some(enc)
        };
        let packet = network == Network::Udp;
        let (up, down) =
            BodyParams::pair(security, req.opt, packet, (req.key, req.iv), (rkey, riv));
        let mut opener =
            Opener::new(&up, Some(header::cfb_dec(&req.key, &req.iv))).map_err(io::Error::from)?;
        if !packet {
            opener.tolerate_empty_first();
        }
        let sealer = Sealer::new(&down, wcfb).map_err(io::Error::from)?;
        let body = VmessStream::new(
            stream,
            sealer,
            opener,
            ReadHead::None,
            resp,
            None,
            &acc.rest,
            packet,
        );
        let mut session = ctx.session(req.dest, network, "vmess");
        session.user = Some(a.user());
        tracing::debug!(
            "[{}] vmess {} {} {} security {:?} opt {:#x}{}",
            ctx.tag,
            a.email,
            network,
            session.dest,
            security,
            req.opt,
            if acc.aead { "" } else { " (legacy header)" }
        );
        Ok(Some((session, body)))
    }
}

#[async_trait]
impl InboundHandler for Inbound {
    async fn accept(&self, stream: BoxStream, ctx: &InboundCtx) -> io::Result<Accepted> {
        let Some((session, body)) = self.accept_tcp(stream, ctx).await? else {
            return Ok(Accepted::Done);
        };
        if crate::proxy::mux::is_mux_cool(&session.dest) {
            return Ok(Accepted::Mux(session, Box::new(body)));
        }
        Ok(match session.network {
            Network::Tcp => Accepted::Stream(session, Box::new(body)),
            Network::Udp => {
                let dest = session.dest.clone();
                Accepted::Packets(session, Box::new(super::udp::Datagrams::server(body, dest)))
            }
        })
    }

    fn users(&self) -> Option<&dyn UserManager> {
        Some(self)
    }
}

impl UserTable for Inbound {
    type Entry = Account;
    const SECRET: &'static str = "id";

    fn user_table(&self) -> &Users<Account> {
        &self.accounts
    }

    fn read_user(&self, c: &Obj<'_>) -> Result<Account> {
        let mut a = parse_client(c, 0, 0, &Diagnostics::default())?;
        a.traffic = self.counters.user(&a.email, a.level).traffic;
        Ok(a)
    }
}
