//! Shadowsocks server: authenticates the request header, then hands an [`SsStream`] to the
//! dispatcher. UDP: per-packet (stream/AEAD) or per-session (2022) relay, served by
//! `udp_server.rs`.
//!
//! Probing resistance: a prober sees what shadowsocks-rust shows. AEAD and stream ciphers: a
//! connection that fails at any byte (short salt, wrong key, replayed salt, bad length, bad
//! address chunk) is never closed at once, which would tell how many bytes the server wanted:
//! the raw socket is read and discarded until the client closes (bounded by the level's
//! `connIdle`). 2022: the salt and fixed header must come in the first read, and any failure
//! up to the variable header (short first read, wrong key, skewed clock, replayed salt, bad
//! header) is answered at once with an RST; a variable header still incomplete is waited for.
//! Ferry is stricter than shadowsocks-rust in one place: a replayed AEAD salt is drained, not
//! served. Each rejection is logged at info level and counted per inbound by reason.

use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::UdpSocket;

use super::aead::{ChunkOpener, ChunkSealer, Error, AEAD_MAX_CHUNK, LEN_BLOCK, SS2022_MAX_CHUNK};
use super::cipher::{aead_subkey, random, session_subkey_2022, AeadAlg, AeadCipher, Kind};
use super::conn::{Opener, Sealer, ServerParts, SsStream};
use super::ota::{self, OtaServer};
use super::replay::{BloomPair, SaltPool};
use super::stream_cipher::{StreamCrypt, OTA_FLAG, OTA_MAC_LEN};
use super::udp::SessionTable;
use super::udp_server::UdpServer;
pub use super::udp_server::{Sessions2022, UdpPeer, UdpPeer2022};
use super::{parse_server, ss2022, Account, ServerConfig};
use crate::common::addr::socks;
use crate::common::{ct, Destination, Network};
use crate::config::reader::{Obj, Result};
use crate::proxy::{
    Accepted, InboundBuild, InboundCtx, InboundHandler, User, UserManager, UserTable,
};
use crate::registry::{CounterSource, Users};
use crate::transport::BoxStream;

/// Read buffer of an AEAD-edition connection: four full chunks per read syscall. Buffers are
/// pooled and held only while they hold bytes (see `conn.rs`).
pub const AEAD_RBUF: usize = 4 * (LEN_BLOCK + AEAD_MAX_CHUNK + 16);
/// Read buffer of a 2022 connection: two full chunks.
pub const SS2022_RBUF: usize = 2 * (LEN_BLOCK + SS2022_MAX_CHUNK + 16);
/// Read buffer of a stream-cipher connection.
pub const STREAM_RBUF: usize = 64 * 1024;

pub struct Inbound {
    cfg: ServerConfig,
    /// The users now (`cfg.users` is where they started), swapped whole on add/remove.
    users: Users<Account>,
    counters: CounterSource,
    bloom: BloomPair,
    pool: SaltPool,
    /// 2022 UDP: per client session, the server's side of it (idle ones expire).
    udp: Mutex<Sessions2022>,
}

pub fn build(o: &Obj<'_>, b: &InboundBuild<'_>) -> Result<Arc<dyn InboundHandler>> {
    let mut cfg = parse_server(o)?;
    for a in &mut cfg.users {
        a.user = b.counters.user(&a.user.email, a.user.level);
    }
    let mut ib = Inbound::new(cfg);
    ib.counters = b.counters.clone();
    Ok(Arc::new(ib))
}

/// What a server learned from a request header.
struct Handshake {
    user: User,
    dest: Option<Destination>,
    parts: ServerParts,
    /// Stream ciphers: the client's IV and the master key (one-time auth keys).
    ota_keys: Option<(Vec<u8>, Vec<u8>)>,
}

impl Inbound {
    pub fn new(cfg: ServerConfig) -> Inbound {
        Inbound {
            users: Users::new(cfg.users.clone()),
            counters: CounterSource::default(),
            cfg,
            bloom: BloomPair::default(),
            pool: SaltPool::default(),
            udp: Mutex::new(SessionTable::new(Duration::from_secs(300))),
        }
    }

    async fn handshake(&self, s: &mut BoxStream) -> std::result::Result<Handshake, Error> {
        match self.cfg.method.kind() {
            Kind::Aead2022 => self.handshake_2022(s).await,
            Kind::Aead => self.handshake_aead(s).await,
            Kind::Stream | Kind::None => self.handshake_stream(s).await,
        }
    }

    async fn handshake_aead(&self, s: &mut BoxStream) -> std::result::Result<Handshake, Error> {
        let users = self.users.load();
        let max_salt = users
            .iter()
            .map(|u| u.method.salt_len())
            .max()
            .unwrap_or(32);
        let mut head = vec![0u8; max_salt + LEN_BLOCK];
        read_exact(s, &mut head).await?;
        let (acct, cipher, len) = try_users(&users, &head).ok_or(Error::Auth)?;
        let sl = acct.method.salt_len();
        if !self.bloom.check_and_insert(&head[..sl]) {
            return Err(Error::Replay);
        }
        let nl = acct.method.nonce_len();
        let mut opener = ChunkOpener::new(cipher, nl, AEAD_MAX_CHUNK);
        opener.resume_with_len(len)?;
        let (sealer, salt) = aead_sealer(acct);
        let parts = ServerParts {
            opener: Opener::Aead(opener),
            prefill: head[sl + LEN_BLOCK..].to_vec(),
            front: Bytes::new(),
            sealer: Sealer::Aead(sealer),
            head: salt,
            rcap: AEAD_RBUF,
        };
        Ok(Handshake {
            user: acct.user.clone(),
            dest: None,
            parts,
            ota_keys: None,
        })
    }

    async fn handshake_stream(&self, s: &mut BoxStream) -> std::result::Result<Handshake, Error> {
        let users = self.users.load();
        let acct = users.first().ok_or(Error::UnknownUser)?;
        let m = acct.method;
        let mut iv = vec![0u8; m.salt_len()];
        read_exact(s, &mut iv).await?;
        if m.kind() == Kind::Stream && !self.bloom.check_and_insert(&iv) {
            return Err(Error::Replay);
        }
        let opener = match m.kind() {
            Kind::Stream => {
                Opener::Stream(StreamCrypt::new(m, &acct.key, &iv, false).ok_or(Error::Auth)?)
            }
            _ => Opener::Plain,
        };
        let mut siv = vec![0u8; m.salt_len()];
        random(&mut siv);
        let sealer = match m.kind() {
            Kind::Stream => {
                Sealer::Stream(StreamCrypt::new(m, &acct.key, &siv, true).ok_or(Error::Auth)?)
            }
            _ => Sealer::Plain,
        };
        let parts = ServerParts {
            opener,
            prefill: Vec::new(),
            front: Bytes::new(),
            sealer,
            head: siv,
            rcap: STREAM_RBUF,
        };
        Ok(Handshake {
            user: acct.user.clone(),
            dest: None,
            parts,
            ota_keys: (m.kind() == Kind::Stream).then(|| (iv, acct.key.clone())),
        })
    }

    async fn handshake_2022(&self, s: &mut BoxStream) -> std::result::Result<Handshake, Error> {
        let m = self.cfg.method;
        let sl = m.salt_len();
        let users = self.users.load();
        // A 2022 inbound configured with `"clients": []` and no user yet takes the server key.
        let ipsk = match (&self.cfg.ipsk, &self.cfg.key_while_empty) {
            (Some(_), Some(_)) if users.is_empty() => None,
            (k, _) => k.as_ref(),
        };
        let eih = if ipsk.is_some() { 16 } else { 0 };
        let fixed_sealed = ss2022::FIXED_LEN + 16;
        let mut head = vec![0u8; sl + eih + fixed_sealed];
        // As shadowsocks-rust: the salt and the fixed header must come in the first read.
        let n = s.read(&mut head).await.map_err(|_| Error::Truncated)?;
        if n == 0 {
            return Err(Error::Truncated);
        }
        if n < head.len() {
            return Err(Error::ShortHeader(n, head.len()));
        }
        let (salt, rest) = head.split_at_mut(sl);
        let acct = match ipsk {
            Some(ipsk) => {
                let h = ss2022::eih_tcp_open(ipsk, salt, &rest[..16]).ok_or(Error::Auth)?;
                ct::find(&users, |u| &u.hash, &h).ok_or(Error::UnknownUser)?
            }
            None => users
                .first()
                .or(self.cfg.key_while_empty.as_ref())
                .ok_or(Error::UnknownUser)?,
        };
        let alg = AeadAlg::of(m).ok_or(Error::Auth)?;
        let cipher =
            AeadCipher::new(alg, &session_subkey_2022(&acct.key, salt)).ok_or(Error::Auth)?;
        let mut opener = ChunkOpener::new(cipher, 12, SS2022_MAX_CHUNK);
        let fixed = &mut rest[eih..];
        opener.open_block(fixed)?;
        let l = ss2022::parse_fixed(&fixed[..ss2022::FIXED_LEN])?;
        if !self.pool.check_and_insert(salt) {
            return Err(Error::Replay);
        }
        let mut var = vec![0u8; ss2022::sealed_len(l)];
        read_exact(s, &mut var).await?;
        opener.open_block(&mut var)?;
        let (dest, payload) = ss2022::parse_variable(&var[..l])?;
        let mut ssalt = vec![0u8; sl];
        random(&mut ssalt);
        let sc =
            AeadCipher::new(alg, &session_subkey_2022(&acct.key, &ssalt)).ok_or(Error::Auth)?;
        let sealer = ChunkSealer::new(sc, 12, SS2022_MAX_CHUNK)
            .with_first_prefix(ss2022::response_prefix(salt));
        let parts = ServerParts {
            opener: Opener::Aead(opener),
            prefill: Vec::new(),
            front: Bytes::copy_from_slice(&var[payload]),
            sealer: Sealer::Aead(sealer),
            head: ssalt,
            rcap: SS2022_RBUF,
        };
        Ok(Handshake {
            user: acct.user.clone(),
            dest: Some(dest),
            parts,
            ota_keys: None,
        })
    }
}

/// Tries each user's key on the first length block (as Xray does for multi-user AEAD).
/// Returns the user, its keyed opener and the first chunk's length.
pub fn try_users<'a>(
    users: &'a [Account],
    head: &[u8],
) -> Option<(&'a Account, AeadCipher, usize)> {
    for u in users {
        let sl = u.method.salt_len();
        let Some(block) = head.get(sl..sl + LEN_BLOCK) else {
            continue;
        };
        let Some(alg) = AeadAlg::of(u.method) else {
            continue;
        };
        let Some(c) = AeadCipher::new(alg, &aead_subkey(&u.key, &head[..sl])) else {
            continue;
        };
        let mut lb = [0u8; LEN_BLOCK];
        lb.copy_from_slice(block);
        if c.open(&[0u8; 24][..alg.nonce_len()], &mut lb).is_ok() {
            return Some((u, c, u16::from_be_bytes([lb[0], lb[1]]) as usize));
        }
    }
    None
}

#[allow(clippy::expect_used, reason = "AES-256-GCM takes any 32-byte key")]
fn aead_sealer(acct: &Account) -> (ChunkSealer, Vec<u8>) {
    let m = acct.method;
    let mut salt = vec![0u8; m.salt_len()];
    random(&mut salt);
    let alg = AeadAlg::of(m).unwrap_or(AeadAlg::Aes256Gcm);
    let c = AeadCipher::new(alg, &aead_subkey(&acct.key, &salt))
        .or_else(|| AeadCipher::new(AeadAlg::Aes256Gcm, &[0; 32]))
        .expect("a 32-byte AES-256 key is always valid");
    (ChunkSealer::new(c, m.nonce_len(), AEAD_MAX_CHUNK), salt)
}

async fn read_exact<R: AsyncRead + Unpin + ?Sized>(
    s: &mut R,
    buf: &mut [u8],
) -> std::result::Result<(), Error> {
    s.read_exact(buf)
        .await
        .map(|_| ())
        .map_err(|_| Error::Truncated)
}

pub use crate::proxy::probe::drain;
use crate::proxy::probe::reset;

/// An address request: the target, and for one-time auth the flagged header and its MAC.
type Request = (Destination, Option<(Vec<u8>, [u8; OTA_MAC_LEN])>);

/// Reads the target address from the decrypted stream (AEAD/stream editions); with the OTA flag
/// in ATYP, also the header MAC that follows it.
async fn read_address(s: &mut SsStream) -> io::Result<Request> {
    let mut buf = Vec::with_capacity(64);
    let mut tmp = [0u8; 512];
    loop {
        if let Some(&first) = buf.first() {
            let ota = first & OTA_FLAG != 0;
            let mut probe = buf.clone();
            probe[0] &= 0x0F;
            match socks::decode(&probe) {
                Ok(Some((dest, n))) => {
                    let need = if ota { n + OTA_MAC_LEN } else { n };
                    if let Some(mac) = buf.get(n..need) {
                        let auth = ota.then(|| {
                            let mut m = [0u8; OTA_MAC_LEN];
                            m.copy_from_slice(mac);
                            (buf[..n].to_vec(), m)
                        });
                        s.unread(&buf[need..]);
                        return Ok((dest, auth));
                    }
                }
                Ok(None) => {}
                Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
            }
        }
        if buf.len() > 300 {
            return Err(io::ErrorKind::InvalidData.into());
        }
        let n = s.read(&mut tmp).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&tmp[..n]);
    }
}

impl Inbound {
    /// The handshake of one TCP connection: the session and the decrypting stream, or `None`
    /// when it failed (after draining, as shadowsocks-rust does).
    async fn accept_tcp(
        &self,
        mut stream: BoxStream,
        ctx: &InboundCtx,
    ) -> io::Result<Option<(crate::proxy::Session, BoxStream)>> {
        let limit = ctx.services.handshake_timeout();
        let idle = ctx.services.level(0).conn_idle.max(Duration::from_secs(1));
        let acc = match tokio::time::timeout(limit, self.handshake(&mut stream)).await {
            Ok(Ok(a)) => a,
            // A 2022 header that fails (except by the client closing) is answered with an
            // RST at once, as shadowsocks-rust does (SO_LINGER 0).
            Ok(Err(e)) if self.cfg.method.kind() == Kind::Aead2022 && e != Error::Truncated => {
                ctx.reject("shadowsocks", e.reason(), &format_args!("{e}; reset"));
                reset(stream);
                return Ok(None);
            }
            Ok(Err(e)) => {
                ctx.reject("shadowsocks", e.reason(), &format_args!("{e}; draining"));
                drain(&mut stream, idle).await;
                return Ok(None);
            }
            Err(_) => {
                ctx.reject("shadowsocks", "timeout", &"handshake timed out; draining");
                drain(&mut stream, idle).await;
                return Ok(None);
            }
        };
        let Handshake {
            user,
            dest,
            parts,
            ota_keys,
        } = acc;
        let mut ss = SsStream::server(stream, parts);
        // A failure after the header drains the raw socket: the decrypting stream would fail
        // at once on the same bad chunk and close (a reaction shadowsocks-rust does not have).
        let (dest, ota) = match dest {
            Some(d) => (d, None),
            None => match tokio::time::timeout(limit, read_address(&mut ss)).await {
                Ok(Ok((d, auth))) => match self.check_ota(auth, ota_keys.as_ref()) {
                    Ok(ota) => (d, ota),
                    Err(why) => {
                        ctx.reject("shadowsocks", "ota", &format_args!("{why}; draining"));
                        drain(&mut ss.into_inner(), idle).await;
                        return Ok(None);
                    }
                },
                Ok(Err(e)) => {
                    let reason = match e.kind() {
                        io::ErrorKind::UnexpectedEof => "truncated",
                        _ => "bad_request",
                    };
                    ctx.reject(
                        "shadowsocks",
                        reason,
                        &format_args!("bad request: {e}; draining"),
                    );
                    drain(&mut ss.into_inner(), idle).await;
                    return Ok(None);
                }
                Err(_) => {
                    ctx.reject(
                        "shadowsocks",
                        "timeout",
                        &"handshake timed out before the address; draining",
                    );
                    drain(&mut ss.into_inner(), idle).await;
                    return Ok(None);
                }
            },
        };
        let stream: BoxStream = match ota {
            Some(iv) => Box::new(OtaServer::new(ss, &iv)),
            None => Box::new(ss),
        };
        let mut session = ctx.session(dest, Network::Tcp, "shadowsocks");
        if !user.email.is_empty() {
            session.user = Some(user);
        } else {
            session.user = Some(user).filter(|u| u.level != 0);
        }
        Ok(Some((session, stream)))
    }
}

#[async_trait]
impl InboundHandler for Inbound {
    async fn accept(&self, stream: BoxStream, ctx: &InboundCtx) -> io::Result<Accepted> {
        if !self.cfg.networks.contains(&Network::Tcp) {
            return Ok(Accepted::Done);
        }
        Ok(match self.accept_tcp(stream, ctx).await? {
            Some((session, stream)) => Accepted::Stream(session, stream),
            None => Accepted::Done,
        })
    }

    fn networks(&self) -> &[Network] {
        &self.cfg.networks
    }

    fn users(&self) -> Option<&dyn UserManager> {
        Some(self)
    }

    async fn serve_udp(&self, socket: Arc<UdpSocket>, ctx: InboundCtx) -> io::Result<()> {
        UdpServer::new(&self.cfg, &self.users, &self.udp)
            .serve(socket, ctx)
            .await
    }
}

impl Inbound {
    /// Applies the one-time auth policy to a request: the client IV when its chunks must be
    /// checked, `None` for a plain request, or why the request is refused.
    fn check_ota(
        &self,
        auth: Option<(Vec<u8>, [u8; OTA_MAC_LEN])>,
        keys: Option<&(Vec<u8>, Vec<u8>)>,
    ) -> std::result::Result<Option<Vec<u8>>, &'static str> {
        match (auth, keys) {
            (None, _) if self.cfg.ota == Some(true) => {
                Err("sent a request without the one-time auth this server requires")
            }
            (None, _) => Ok(None),
            (Some(_), None) => Err("asked for one-time auth, which AEAD methods do not have"),
            (Some(_), Some(_)) if self.cfg.ota == Some(false) => {
                Err("asked for one-time auth, which this server refuses")
            }
            (Some((header, mac)), Some((iv, key))) => {
                if ota::check_header(iv, key, &header, &mac) {
                    Ok(Some(iv.clone()))
                } else {
                    Err("sent a one-time auth header with a wrong MAC")
                }
            }
        }
    }
}

/// The TCP handshake without a dispatcher, for the fuzz targets: the header, the address, the
/// one-time auth policy, and the stream a session would get; `None` where `accept_tcp` drains.
#[cfg(any(test, feature = "fuzzing"))]
impl Inbound {
    pub(super) async fn handshake_for_fuzz(
        &self,
        mut stream: BoxStream,
    ) -> Option<(Destination, BoxStream)> {
        let acc = self.handshake(&mut stream).await.ok()?;
        let mut ss = SsStream::server(stream, acc.parts);
        let (dest, ota) = match acc.dest {
            Some(d) => (d, None),
            None => {
                let (d, auth) = read_address(&mut ss).await.ok()?;
                (d, self.check_ota(auth, acc.ota_keys.as_ref()).ok()?)
            }
        };
        let s: BoxStream = match ota {
            Some(iv) => Box::new(OtaServer::new(ss, &iv)),
            None => Box::new(ss),
        };
        Some((dest, s))
    }
}

/// Adds `{password, email, level}` (and `method` for a multi-user AEAD inbound): a 2022
/// inbound with an identity key takes users by their key, an AEAD inbound by key trial;
/// a single-user 2022 or stream-cipher inbound cannot tell users apart.
impl UserTable for Inbound {
    type Entry = Account;
    const SECRET: &'static str = "key";

    fn user_table(&self) -> &Users<Account> {
        &self.users
    }

    fn read_user(&self, c: &Obj<'_>) -> crate::config::reader::Result<Account> {
        let mut a = super::parse_added_user(c, &self.cfg, &self.users.load())?;
        a.user = self.counters.user(&a.user.email, a.user.level);
        Ok(a)
    }
}
