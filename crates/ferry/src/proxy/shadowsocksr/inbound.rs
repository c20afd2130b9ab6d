//! SSR server: runs the codecs until the request address is out, then hands the stream to the
//! dispatcher. UDP: per-datagram auth (§4.8).
//!
//! Bad input (shadowsocksr.md §10): the Python server closes at once past a length threshold and
//! waits for the idle timeout below it, so its close time tells a prober where the threshold is.
//! Ferry never answers a failed handshake and never closes early: whatever fails (obfs, first
//! packet, MAC, replay, time window, address, a truncated frame, the handshake timeout), the raw
//! socket is read and discarded until the client closes or the level's `connIdle` passes, as its
//! Shadowsocks server does; or, with `redirect` set, the connection goes to that decoy with
//! every byte the client sent (the reference forwards only its last read). Each rejection is
//! logged at info and counted by reason.

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use tokio::io::AsyncReadExt;
use tokio::net::UdpSocket;

use super::obfs::{self, Obfs, TlsServerShared};
use super::protocol::{self, Protocol, ServerShared, SsrUser};
use super::stream::{Parts, SsrStream};
use super::util::{codec_error, random_bytes, Error};
use super::{parse_server, udp, ServerConfig};
use crate::common::addr::socks;
use crate::common::{Destination, Network};
use crate::config::reader::{Obj, Result};
use crate::proxy::shadowsocks::inbound::drain;
use crate::proxy::shadowsocks::udp::SessionTable;
use crate::proxy::udp::{UdpReply, MAX_DATAGRAM};
use crate::proxy::{Accepted, InboundBuild, InboundCtx, InboundHandler, UserManager};
use crate::registry::CounterSource;
use crate::transport::BoxStream;

pub struct Inbound {
    cfg: ServerConfig,
    key: Arc<[u8]>,
    shared: Arc<ServerShared>,
    tls: Arc<TlsServerShared>,
    counters: CounterSource,
}

pub fn build(o: &Obj<'_>, b: &InboundBuild<'_>) -> Result<Arc<dyn InboundHandler>> {
    let mut cfg = parse_server(o)?;
    for u in &mut cfg.users {
        u.user = b.counters.user(&u.user.email, u.user.level);
    }
    if !cfg.user.email.is_empty() {
        cfg.user = b.counters.user(&cfg.user.email, cfg.user.level);
    }
    let mut ib = Inbound::new(cfg);
    ib.counters = b.counters.clone();
    Ok(Arc::new(ib))
}

impl Inbound {
    pub fn new(cfg: ServerConfig) -> Inbound {
        let shared = Arc::new(ServerShared::new(cfg.users.clone(), cfg.user.clone()));
        Inbound {
            key: cfg.common.key().into(),
            cfg,
            shared,
            tls: Arc::default(),
            counters: CounterSource::default(),
        }
    }

    /// The codecs of one new connection.
    fn parts(&self) -> Parts {
        let c = &self.cfg.common;
        let iv = random_bytes(c.method.iv_len());
        let pinfo = protocol::Info {
            key: self.key.clone(),
            iv: iv.clone(),
            overhead: c.overhead(),
            tcp_mss: protocol::TCP_MSS,
        };
        let oinfo = obfs::Info {
            host: String::new(),
            port: 0,
            param: c.obfs_param.clone(),
            key: self.key.clone(),
            head_size: 0,
        };
        Parts {
            obfs: Obfs::new(c.obfs, oinfo, obfs::Side::Server(self.tls.clone())),
            proto: Protocol::new(
                c.protocol,
                pinfo,
                protocol::Side::Server(self.shared.clone()),
            ),
            method: c.method,
            key: self.key.clone(),
            iv,
        }
    }

    async fn accept_tcp(&self, stream: BoxStream, ctx: &InboundCtx) -> io::Result<Accepted> {
        let limit = ctx.services.handshake_timeout();
        let idle = ctx.services.level(0).conn_idle.max(Duration::from_secs(1));
        let mut s = SsrStream::server(stream, self.parts())?;
        if self.cfg.redirect.is_some() {
            s.start_recording();
        }
        let res = tokio::time::timeout(limit, read_address(&mut s)).await;
        let (reason, detail) = match res {
            Ok(Ok(dest)) => {
                let user = s
                    .protocol()
                    .user()
                    .map(|u| u.user.clone())
                    .unwrap_or_else(|| self.shared.default_user.clone());
                s.stop_recording();
                let mut session = ctx.session(dest, Network::Tcp, "shadowsocksr");
                session.user = Some(user).filter(|u| !u.email.is_empty() || u.level != 0);
                return Ok(Accepted::Stream(session, Box::new(s)));
            }
            Ok(Err(e)) => match codec_error(&e) {
                Some(c) => (c.reason(), c.to_string()),
                None if e.kind() == io::ErrorKind::UnexpectedEof => {
                    ("truncated", "closed before the request was complete".into())
                }
                None => ("bad_request", e.to_string()),
            },
            Err(_) => ("timeout", "handshake timed out".into()),
        };
        let (mut raw, seen) = s.into_recorded();
        if let (Some(fb), Some(seen)) = (&self.cfg.redirect, seen) {
            // The decoy gets every byte the client sent, and answers in its own name.
            ctx.reject(
                "shadowsocksr",
                reason,
                &format_args!("{detail}; to the redirect decoy {}", fb.dest),
            );
            let stream: BoxStream = Box::new(crate::transport::Prefixed::new(seen.into(), raw));
            return Ok(Accepted::Fallback(stream, fb.clone(), true));
        }
        ctx.reject("shadowsocksr", reason, &format_args!("{detail}; draining"));
        drain(&mut raw, idle).await;
        Ok(Accepted::Done)
    }
}

/// Reads the request address (`ATYP|ADDR|PORT`) off the decoded stream.
async fn read_address(s: &mut SsrStream) -> io::Result<Destination> {
    let mut buf = Vec::with_capacity(64);
    let mut tmp = [0u8; 512];
    loop {
        if let Some(&first) = buf.first() {
            // 0x08 asks for UDP over TCP (Python server only, §3): not served.
            if !matches!(first, 1 | 3 | 4) {
                return Err(Error::Address.into());
            }
            match socks::decode(&buf) {
                Ok(Some((dest, n))) => {
                    s.unread(&buf[n..]);
                    return Ok(dest);
                }
                Ok(None) => {}
                Err(_) => return Err(Error::Address.into()),
            }
        }
        let n = s.read(&mut tmp).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&tmp[..n]);
    }
}

#[async_trait]
impl InboundHandler for Inbound {
    async fn accept(&self, stream: BoxStream, ctx: &InboundCtx) -> io::Result<Accepted> {
        if !self.cfg.networks.contains(&Network::Tcp) {
            return Ok(Accepted::Done);
        }
        self.accept_tcp(stream, ctx).await
    }

    fn networks(&self) -> &[Network] {
        &self.cfg.networks
    }

    fn users(&self) -> Option<&dyn UserManager> {
        Some(self)
    }

    async fn serve_udp(&self, socket: Arc<UdpSocket>, ctx: InboundCtx) -> io::Result<()> {
        let idle = ctx.services.level(0).conn_idle;
        let keep = if idle.is_zero() {
            Duration::from_secs(300)
        } else {
            idle
        };
        let reply = Arc::new(Reply {
            socket: socket.clone(),
            kind: self.cfg.common.protocol,
            method: self.cfg.common.method,
            key: self.key.clone(),
            peers: Mutex::new(SessionTable::new(keep)),
        });
        let nat = ctx.services.clone().udp_sessions(reply.clone(), idle, &ctx);
        let mut buf = vec![0u8; MAX_DATAGRAM];
        loop {
            let (n, from) = socket.recv_from(&mut buf).await?;
            let k = udp::Keys {
                kind: self.cfg.common.protocol,
                method: self.cfg.common.method,
                key: &self.key,
            };
            let users = self.shared.users.load();
            let multi = self.shared.multi.load(std::sync::atomic::Ordering::Relaxed);
            let res = udp::server_open(&k, &users, multi, &buf[..n]).and_then(|(plain, user)| {
                match socks::decode(&plain) {
                    Ok(Some((dest, at))) => Ok((dest, Bytes::copy_from_slice(&plain[at..]), user)),
                    _ => Err(Error::Address),
                }
            });
            match res {
                Ok((dest, payload, user)) => {
                    let u = user
                        .as_ref()
                        .map(|u| u.user.clone())
                        .unwrap_or_else(|| self.shared.default_user.clone());
                    reply.set(from, user);
                    let mut s = ctx.session(dest, Network::Udp, "shadowsocksr");
                    s.source = from.into();
                    s.user = Some(u).filter(|u| !u.email.is_empty() || u.level != 0);
                    nat.send(from, s, payload);
                }
                Err(e) => tracing::info!(
                    "[{}] shadowsocksr udp: dropped packet from {from}: {e}",
                    ctx.tag
                ),
            }
        }
    }
}

struct Reply {
    socket: Arc<UdpSocket>,
    kind: protocol::Kind,
    method: super::cipher::Method,
    key: Arc<[u8]>,
    /// The user of each client address (auth_chain replies are keyed by it).
    peers: Mutex<SessionTable<Option<SsrUser>>>,
}

impl Reply {
    fn set(&self, client: SocketAddr, u: Option<SsrUser>) {
        let mut m = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        m.insert(client, u, Instant::now());
    }
}

#[async_trait]
impl UdpReply for Reply {
    async fn reply(&self, client: SocketAddr, data: &[u8], from: &Destination) -> io::Result<()> {
        let user = {
            let mut m = self.peers.lock().unwrap_or_else(|e| e.into_inner());
            match m.get(&client, Instant::now()) {
                Some(u) => u.clone(),
                None => return Ok(()),
            }
        };
        let mut plain = socks::to_bytes(from).to_vec();
        plain.extend_from_slice(data);
        let k = udp::Keys {
            kind: self.kind,
            method: self.method,
            key: &self.key,
        };
        let mut out = Vec::with_capacity(plain.len() + 160);
        udp::server_seal(&k, user.as_ref(), &plain, &mut out);
        self.socket.send_to(&out, client).await.map(|_| ())
    }
}

impl crate::proxy::UserTable for Inbound {
    type Entry = super::protocol::SsrUser;
    const SECRET: &'static str = "uid";

    fn user_table(&self) -> &crate::registry::Users<Self::Entry> {
        &self.shared.users
    }

    /// `{uid, password, email, level}` (auth_aes128_* and auth_chain_* inbounds).
    fn read_user(
        &self,
        c: &Obj<'_>,
    ) -> std::result::Result<Self::Entry, crate::config::ConfigError> {
        let mut u = super::read_user(c)?;
        u.user = self.counters.user(&u.user.email, u.user.level);
        Ok(u)
    }

    fn can_add(&self) -> std::result::Result<(), crate::config::ConfigError> {
        if self.cfg.common.protocol.multi_user() {
            return Ok(());
        }
        Err(crate::config::ConfigError::new(
            "user",
            format!(
                "{} carries no user id: users need auth_aes128_* or auth_chain_*",
                self.cfg.common.protocol.name()
            ),
        ))
    }

    fn added(&self) {
        self.shared
            .multi
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
}
