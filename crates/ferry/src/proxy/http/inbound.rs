//! The `http` inbound (and the HTTP half of `socks`/`mixed`).

use std::io;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use tokio::time::{timeout_at, Instant};

use super::codec::{self, Error as CodecError, Target};
use crate::common::{Destination, Network};
use crate::proxy::head::HeadReader;
use crate::proxy::socks::accounts::AccountBook;
use crate::proxy::{Accepted, InboundCtx, InboundHandler, User, UserManager};
use crate::transport::{BoxStream, Prefixed};

/// Settings of an HTTP proxy inbound.
pub struct HttpConfig {
    /// Basic-auth accounts (asked for while `required()`).
    pub accounts: Arc<AccountBook>,
    /// Serve origin-form requests (routed by `Host`) too.
    pub allow_transparent: bool,
    pub level: u32,
}

/// An HTTP proxy inbound.
pub struct HttpInbound {
    cfg: HttpConfig,
}

/// What a request head asks for, once it was checked.
struct Checked {
    dest: Destination,
    user: Option<User>,
    /// Bytes to send upstream before the rest of the client stream (the rewritten head).
    upstream_head: Option<Vec<u8>>,
}

fn invalid(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

impl HttpInbound {
    pub fn new(cfg: HttpConfig) -> Self {
        HttpInbound { cfg }
    }

    /// Reads one request whose first bytes may already be in `r`: the session and the stream
    /// to relay (with the rewritten head in front for a forward-proxy request).
    pub async fn serve(
        &self,
        mut r: HeadReader,
        ctx: &InboundCtx,
        deadline: Instant,
    ) -> io::Result<Accepted> {
        let acc = match timeout_at(deadline, self.handshake(&mut r, ctx)).await {
            Ok(a) => a?,
            Err(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "http: handshake timed out",
                ))
            }
        };
        let mut s = ctx.session(acc.dest, Network::Tcp, "http");
        s.user = acc.user;
        let stream: BoxStream = match acc.upstream_head {
            None => r.into_stream(),
            Some(mut head) => {
                head.extend_from_slice(&r.buf);
                r.buf = BytesMut::new();
                Box::new(Prefixed::new(Bytes::from(head), r.into_stream()))
            }
        };
        Ok(Accepted::Stream(s, stream))
    }

    async fn handshake(&self, r: &mut HeadReader, ctx: &InboundCtx) -> io::Result<Checked> {
        let len = match r.read_until(codec::head_scanner()).await? {
            Ok(n) => n,
            Err(e) => {
                let _ = r.write_all(codec::RESP_431).await;
                return Err(invalid(format!("http: {e}")));
            }
        };
        let head = r.buf.split_to(len);
        let req = match codec::parse_request(&head) {
            Ok(req) => req,
            Err(e) => {
                let _ = r.write_all(codec::RESP_400).await;
                return Err(invalid(format!("http: {e}")));
            }
        };
        let mut user = (self.cfg.level != 0).then(|| User::new("", self.cfg.level));
        if self.cfg.accounts.required() {
            let creds = req
                .header("Proxy-Authorization")
                .and_then(codec::parse_basic);
            let known = creds.and_then(|(u, p)| {
                let u = String::from_utf8(u).ok()?;
                self.cfg.accounts.check(&u, &p)
            });
            let Some(known) = known else {
                let _ = r.write_all(codec::RESP_407).await;
                ctx.services
                    .rejected(&ctx.info.source, "http: invalid user");
                return Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    "http: missing or wrong proxy credentials",
                ));
            };
            user = Some(known);
        }
        match codec::target(&req, self.cfg.allow_transparent) {
            Ok(Target::Connect(dest)) => {
                r.write_all(codec::RESP_200).await?;
                Ok(Checked {
                    dest,
                    user,
                    upstream_head: None,
                })
            }
            Ok(Target::Forward { dest, host, path }) => Ok(Checked {
                upstream_head: Some(codec::rewrite_forward(&req, &host, &path)),
                dest,
                user,
            }),
            Err(e) => {
                let _ = r.write_all(codec::RESP_400).await;
                let what = match e {
                    CodecError::NotProxyRequest => {
                        "origin-form request (allowTransparent is off)".to_string()
                    }
                    e => e.to_string(),
                };
                Err(invalid(format!("http: {what}")))
            }
        }
    }
}

#[async_trait]
impl InboundHandler for HttpInbound {
    async fn accept(&self, stream: BoxStream, ctx: &InboundCtx) -> io::Result<Accepted> {
        let deadline = Instant::now() + ctx.services.handshake_timeout();
        let r = HeadReader::new(stream, codec::MAX_HEAD + 1);
        self.serve(r, ctx, deadline).await
    }

    fn users(&self) -> Option<&dyn UserManager> {
        Some(&*self.cfg.accounts)
    }
}
