//! The `socks`/`mixed` inbound: reads the first byte and serves SOCKS5, SOCKS4/4a or HTTP.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::BytesMut;
use tokio::io::AsyncReadExt;
use tokio::net::UdpSocket;
use tokio::time::{timeout_at, Instant};

use super::accounts::AccountBook;
use super::codec::{self, Error as CodecError};
use super::read_msg;
use super::InboundConfig;
use crate::common::addr::AddrError;
use crate::common::{Address, Destination, Network};
use crate::proxy::head::HeadReader;
use crate::proxy::http::inbound::{HttpConfig, HttpInbound};
use crate::proxy::{Accepted, InboundCtx, InboundHandler, PacketConn, User, UserManager};
use crate::transport::BoxStream;

/// Serves SOCKS5, SOCKS4/4a and (like Xray's socks inbound) HTTP proxy requests on one port.
pub struct SocksInbound {
    cfg: InboundConfig,
    http: HttpInbound,
    /// Shared with the HTTP half.
    accounts: Arc<AccountBook>,
}

impl SocksInbound {
    pub fn new(cfg: InboundConfig, counters: &crate::registry::CounterSource) -> Self {
        let accounts = Arc::new(AccountBook::new(
            cfg.accounts.as_ref(),
            cfg.accounts.is_some(),
            cfg.level,
            counters,
        ));
        let http = HttpInbound::new(HttpConfig {
            accounts: accounts.clone(),
            allow_transparent: false,
            level: cfg.level,
        });
        SocksInbound {
            cfg,
            http,
            accounts,
        }
    }

    /// The user of an unauthenticated connection: an anonymous one carrying `userLevel` so
    /// the level's policy applies.
    fn anonymous(&self) -> Option<User> {
        (self.cfg.level != 0).then(|| User::new("", self.cfg.level))
    }
}

fn invalid(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "handshake timed out")
}

/// A malformed SOCKS message from the client.
fn bad(e: CodecError) -> io::Error {
    invalid(e.to_string())
}

/// What a finished SOCKS handshake asks for.
enum Next {
    Connect(Destination, Option<User>),
    Udp(Destination, Option<User>),
}

#[async_trait]
impl InboundHandler for SocksInbound {
    async fn accept(&self, stream: BoxStream, ctx: &InboundCtx) -> io::Result<Accepted> {
        let deadline = Instant::now() + ctx.services.handshake_timeout();
        let mut stream = stream;
        let mut first = [0u8; 1];
        let n = match timeout_at(deadline, stream.read(&mut first)).await {
            Ok(r) => r?,
            Err(_) => return Err(timed_out()),
        };
        if n == 0 {
            // A connect-and-close health check.
            return Ok(Accepted::Done);
        }
        let mut r =
            HeadReader::with_prefix(stream, &first, crate::proxy::http::codec::MAX_HEAD + 1);
        let next = match first[0] {
            codec::VER5 => timeout_at(deadline, self.socks5(&mut r, ctx)).await,
            codec::VER4 => timeout_at(deadline, self.socks4(&mut r, ctx)).await,
            _ => return self.http.serve(r, ctx, deadline).await,
        };
        match next {
            Err(_) => Err(timed_out()),
            Ok(Err(e)) => Err(e),
            Ok(Ok(Next::Connect(dest, user))) => {
                let mut s = ctx.session(dest, Network::Tcp, "socks");
                s.user = user;
                Ok(Accepted::Stream(s, r.into_stream()))
            }
            Ok(Ok(Next::Udp(client, user))) => self.udp_associate(r, client, user, ctx).await,
        }
    }

    fn users(&self) -> Option<&dyn UserManager> {
        Some(&*self.accounts)
    }
}

impl SocksInbound {
    async fn socks5(&self, r: &mut HeadReader, ctx: &InboundCtx) -> io::Result<Next> {
        let want = if self.accounts.required() {
            codec::METHOD_PASSWORD
        } else {
            codec::METHOD_NONE
        };
        let offered = read_msg(
            r,
            |b| codec::parse_greeting(b).map(|o| o.map(|(m, n)| (m.contains(&want), n))),
            bad,
        )
        .await?;
        if !offered {
            r.write_all(&[codec::VER5, codec::METHOD_REJECT]).await?;
            return Err(invalid(format!(
                "socks5: client did not offer method {want:#04x}"
            )));
        }
        r.write_all(&[codec::VER5, want]).await?;
        let mut user = self.anonymous();
        if self.accounts.required() {
            let (name, pass) = read_msg(
                r,
                |b| {
                    codec::parse_userpass(b)
                        .map(|o| o.map(|((u, p), n)| ((u.to_vec(), p.to_vec()), n)))
                },
                bad,
            )
            .await?;
            let name = String::from_utf8_lossy(&name).into_owned();
            let Some(known) = self.accounts.check(&name, &pass) else {
                r.write_all(&[1, 0xff]).await?;
                ctx.services
                    .rejected(&ctx.info.source, "socks5: invalid user");
                return Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!("socks5: wrong username or password for {name:?}"),
                ));
            };
            r.write_all(&[1, 0]).await?;
            user = Some(known);
        }
        let req = loop {
            match codec::parse_request(&r.buf) {
                Ok(Some((req, n))) => {
                    r.consume(n);
                    break req;
                }
                Ok(None) => r.fill().await?,
                Err(e) => {
                    if let CodecError::Addr(AddrError::BadType(_)) = e {
                        let _ = r
                            .write_all(&reply(codec::REP_ATYP_UNSUPPORTED, &zero()))
                            .await;
                    }
                    return Err(invalid(format!("socks5 request: {e}")));
                }
            }
        };
        match req.cmd {
            codec::CMD_CONNECT | codec::CMD_TOR_RESOLVE | codec::CMD_TOR_RESOLVE_PTR => {
                // Like Xray: success at once, bound to the inbound's address; a failure to
                // reach the target shows as the connection closing.
                let bound = ctx
                    .info
                    .local
                    .socket_addr()
                    .map_or_else(zero, Destination::from);
                r.write_all(&reply(codec::REP_OK, &bound)).await?;
                Ok(Next::Connect(req.dest, user))
            }
            codec::CMD_UDP if self.cfg.udp => Ok(Next::Udp(req.dest, user)),
            cmd => {
                r.write_all(&reply(codec::REP_CMD_UNSUPPORTED, &zero()))
                    .await?;
                Err(invalid(format!(
                    "socks5: command {cmd:#04x} is not supported"
                )))
            }
        }
    }

    async fn socks4(&self, r: &mut HeadReader, _ctx: &InboundCtx) -> io::Result<Next> {
        let req = read_msg(r, codec::parse_socks4, bad).await?;
        if self.accounts.required() {
            r.write_all(&codec::socks4_reply(codec::SOCKS4_REJECTED))
                .await?;
            return Err(invalid(
                "socks4 has no password method; this inbound needs one",
            ));
        }
        if req.cmd != codec::CMD_CONNECT {
            r.write_all(&codec::socks4_reply(codec::SOCKS4_REJECTED))
                .await?;
            return Err(invalid(format!(
                "socks4: command {:#04x} is not supported",
                req.cmd
            )));
        }
        r.write_all(&codec::socks4_reply(codec::SOCKS4_GRANTED))
            .await?;
        Ok(Next::Connect(req.dest, self.anonymous()))
    }

    /// Opens one UDP association: binds its relay socket, answers, and hands the datagrams
    /// (alive while the control connection is open) to the dispatcher.
    async fn udp_associate(
        &self,
        mut r: HeadReader,
        client: Destination,
        user: Option<User>,
        ctx: &InboundCtx,
    ) -> io::Result<Accepted> {
        let loopback = IpAddr::from([127, 0, 0, 1]);
        let local_ip = ctx.info.local.ip().unwrap_or(loopback).to_canonical();
        let sock = match UdpSocket::bind(SocketAddr::new(local_ip, 0)).await {
            Ok(s) => s,
            Err(e) => {
                let _ = r.write_all(&reply(codec::REP_FAILURE, &zero())).await;
                return Err(e);
            }
        };
        let port = sock.local_addr()?.port();
        let reply_ip = self.cfg.ip.unwrap_or(local_ip);
        r.write_all(&reply(
            codec::REP_OK,
            &SocketAddr::new(reply_ip, port).into(),
        ))
        .await?;
        let allowed = Allowed::new(&client, ctx.info.source.ip().unwrap_or(loopback));
        let mut s = ctx.session(client, Network::Udp, "socks");
        s.user = user;
        let packets = Association {
            sock,
            allowed,
            ctrl: tokio::sync::Mutex::new(r.into_stream()),
            client: std::sync::Mutex::new(None),
            tag: ctx.tag.clone(),
        };
        Ok(Accepted::Packets(s, Box::new(packets)))
    }
}

/// One UDP association: datagrams from the client to the relay socket, replies back to the
/// client address that last sent one. It ends when the control connection closes.
struct Association {
    sock: UdpSocket,
    allowed: Allowed,
    ctrl: tokio::sync::Mutex<BoxStream>,
    client: std::sync::Mutex<Option<SocketAddr>>,
    tag: std::sync::Arc<str>,
}

#[async_trait]
impl PacketConn for Association {
    async fn send_to(&self, data: &[u8], from: &Destination) -> io::Result<()> {
        let Some(client) = *self.client.lock().unwrap_or_else(|e| e.into_inner()) else {
            return Ok(());
        };
        let len = codec::udp_header_len(from) + data.len();
        if len > MAX_UDP_PAYLOAD {
            tracing::debug!("socks udp: {len}-byte reply to {client} does not fit; dropped");
            return Ok(());
        }
        let mut pkt = Vec::with_capacity(len);
        if let Err(e) = codec::encode_udp_header(from, &mut pkt) {
            tracing::debug!("socks udp: reply from {from} to {client}: {e}; dropped");
            return Ok(());
        }
        pkt.extend_from_slice(data);
        self.sock.send_to(&pkt, client).await.map(|_| ())
    }

    async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, Destination)> {
        let mut ctrl = self.ctrl.lock().await;
        let mut cbuf = [0u8; 256];
        loop {
            tokio::select! {
                n = ctrl.read(&mut cbuf) => match n {
                    Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                    Ok(_) => continue,
                    Err(e) => return Err(e),
                },
                m = self.sock.recv_from(buf) => {
                    let (n, from) = m?;
                    if !self.allowed.accepts(from) {
                        tracing::debug!("[{}] socks udp: datagram from unexpected {from} dropped", self.tag);
                        continue;
                    }
                    let Some(pkt) = buf.get(..n) else { continue };
                    match codec::parse_udp(pkt) {
                        Ok((dest, hl)) => {
                            *self.client.lock().unwrap_or_else(|e| e.into_inner()) = Some(from);
                            buf.copy_within(hl..n, 0);
                            return Ok((n - hl, dest));
                        }
                        Err(e) => {
                            tracing::debug!("[{}] socks udp from {from}: {e}; dropped", self.tag);
                        }
                    }
                }
            }
        }
    }
}

fn zero() -> Destination {
    Destination::new(Address::Ip(IpAddr::from([0u8, 0, 0, 0])), 0)
}

fn reply(rep: u8, bound: &Destination) -> BytesMut {
    let mut b = BytesMut::with_capacity(32);
    codec::encode_reply(rep, bound, &mut b);
    b
}

/// Which UDP senders an association accepts (as Xray): the control connection's peer IP on any
/// port when the request named no usable address, otherwise that exact IP (and port, if not 0).
struct Allowed {
    ip: IpAddr,
    port: u16,
}

impl Allowed {
    fn new(requested: &Destination, peer: IpAddr) -> Self {
        match requested.addr {
            Address::Ip(ip) if !ip.is_unspecified() => Allowed {
                ip: ip.to_canonical(),
                port: requested.port,
            },
            _ => Allowed {
                ip: peer.to_canonical(),
                port: 0,
            },
        }
    }

    fn accepts(&self, from: SocketAddr) -> bool {
        from.ip().to_canonical() == self.ip && (self.port == 0 || self.port == from.port())
    }
}

/// The largest UDP payload (IPv4: 65535 - 20 - 8).
const MAX_UDP_PAYLOAD: usize = 65507;
