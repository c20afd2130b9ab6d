//! The dispatcher: the one place that acts on what an inbound accepted. It routes a session,
//! dials its outbound, and relays with live counters (or serves its packets).

pub mod fallback;
pub mod mux;
pub mod reverse;
mod services;
pub mod udp;

use std::io;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use crate::app::log::AccessLog;
use crate::app::policy::Policy;
use crate::app::router::Router;
use crate::app::stats::Stats;

use crate::proxy::freedom::{describe, Blocked};
use crate::proxy::{Accepted, InboundCtx, InboundHandler, PacketConn, Session};
use crate::registry::{OutboundEntry, Outbounds, Swap};
use crate::relay::{self, Counters, RelayStats};
use crate::session::Traffic;
use crate::transport::BoxStream;

/// Shared by every inbound: the routing table, the outbounds, policy, and stats.
pub struct Dispatcher {
    pub router: Swap<Router>,
    pub outbounds: Arc<Outbounds>,
    /// The policy (levels and system switches); a reload swaps it.
    pub policy: Swap<Policy>,
    /// `Some` when the `stats` object is present.
    pub stats: Option<Arc<Stats>>,
    pub access: AccessLog,
    /// The instance's running inbounds: a fallback whose destination is one of them is handed
    /// over in-process (weak: the inbounds hold the dispatcher).
    pub local: std::sync::Weak<dyn fallback::LocalInbounds>,
    /// VLESS Reverse portals (their outbounds are registered with their first tunnel).
    pub portals: reverse::Portals,
}

/// Sniffs a stream session when its inbound asks (the future is boxed: most connections
/// never sniff, and those that do keep none of its state while relaying).
async fn sniffed(
    d: &Dispatcher,
    ctx: &InboundCtx,
    mut session: Session,
    stream: BoxStream,
) -> (Session, BoxStream) {
    match &ctx.sniffing {
        Some(cfg) => {
            let router = d.router.load();
            let fake = router.dns.as_deref().and_then(|d| d.fake());
            let stream = Box::pin(crate::app::sniff::io::stream(
                cfg,
                fake,
                &mut session,
                stream,
            ))
            .await;
            (session, stream)
        }
        None => (session, stream),
    }
}

/// Counters one UDP session adds to, packet by packet.
pub type UdpCounters = Counters;

fn push(v: &mut Vec<Arc<AtomicU64>>, c: &Option<Arc<AtomicU64>>) {
    if let Some(c) = c {
        v.push(c.clone());
    }
}

impl Dispatcher {
    /// The policy of a user level (the defaults for a level the config does not name).
    pub fn level(&self, level: u32) -> crate::app::policy::LevelPolicy {
        self.policy.load().level(level)
    }

    /// The handshake timeout for an inbound connection (level 0 until a user is known).
    pub fn handshake_timeout(&self) -> Duration {
        self.level(0).handshake
    }

    /// Picks the outbound for a session (awaits only when the domain strategy resolves).
    /// The flag tells whether a routing rule chose it (`false`: the default outbound).
    pub async fn pick(&self, s: &Session) -> io::Result<(Arc<OutboundEntry>, bool)> {
        // No proxy protocol carries a longer name (one length byte), and no resolver takes
        // one: refused here, as Xray's address writer refuses it, rather than cut short by an
        // outbound's encoder (a sniffed SNI or Host, a dokodemo address can be longer).
        if let Some(d) = s.dest.addr.domain().filter(|d| d.len() > 255) {
            tracing::info!(
                "[{}] connection from {}: destination name of {} bytes is too long (255 at most)",
                s.inbound_tag,
                s.source,
                d.len()
            );
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "destination name longer than 255 bytes",
            ));
        }
        let router = self.router.load();
        let rule = router.route(s).await;
        self.outbound_for(&router, rule, s)
    }

    /// The outbound a matched rule (or none: the default) names.
    fn outbound_for(
        &self,
        router: &Router,
        rule: Option<&crate::app::router::Rule>,
        s: &Session,
    ) -> io::Result<(Arc<OutboundEntry>, bool)> {
        let table = self.outbounds.load();
        let routed = match rule {
            Some(rule) => {
                if let Some(t) = &rule.tag {
                    tracing::debug!("[{}] {} matched rule {t}", s.inbound_tag, s.dest);
                }
                let picked = match rule.balancer.as_deref().and_then(|b| router.balancer(b)) {
                    Some(b) => {
                        let cands = b.candidates(table.list().iter().map(|e| &*e.tag));
                        // No pick (and no fallbackTag): the default outbound, as in Xray. A
                        // pick naming no outbound (an override target, a fallbackTag) closes
                        // the connection, as Xray's "non existing outTag" does.
                        match b.pick(&cands, router.observatory.as_deref()) {
                            Some(t) => match table.get(&t) {
                                Some(e) => Some(e.clone()),
                                None => {
                                    return Err(io::Error::new(
                                        io::ErrorKind::NotFound,
                                        format!("non existing outTag: {t}"),
                                    ))
                                }
                            },
                            None => None,
                        }
                    }
                    // A rule naming no outbound closes what it matches, as Xray's "non
                    // existing outTag" does (not the default outbound).
                    None => match table.get(&rule.outbound) {
                        Some(e) => Some(e.clone()),
                        None => {
                            tracing::warn!(
                                "[{}] {} from {}: non existing outTag: {}",
                                s.inbound_tag,
                                s.dest,
                                s.source,
                                rule.outbound
                            );
                            return Err(io::Error::new(
                                io::ErrorKind::NotFound,
                                format!("non existing outTag: {}", rule.outbound),
                            ));
                        }
                    },
                };
                if let (Some(w), Some(e)) = (&rule.webhook, &picked) {
                    w.fire(s, &e.tag);
                }
                picked
            }
            None => None,
        };
        match routed {
            Some(e) => Ok((e, true)),
            None => table
                .default_outbound()
                .cloned()
                .map(|e| (e, false))
                .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no outbound")),
        }
    }

    /// The counters a session adds to: its inbound's, its outbound's and its user's, all
    /// resolved when they were built (empty when stats are off).
    pub fn counters(&self, s: &Session, inbound: &Traffic, outbound: &OutboundEntry) -> Counters {
        let mut c = Counters::default();
        if self.stats.is_none() {
            return c;
        }
        push(&mut c.up, &inbound.up);
        push(&mut c.down, &inbound.down);
        push(&mut c.up, &outbound.traffic.up);
        push(&mut c.down, &outbound.traffic.down);
        if let Some(u) = &s.user {
            u.traffic.in_use();
            push(&mut c.up, &u.traffic.up);
            push(&mut c.down, &u.traffic.down);
        }
        c
    }

    /// Serves one accepted connection to its end: the inbound reads its header and says what
    /// to forward, and this acts on it. Laid out so that only the relay's state outlives the
    /// handshake: the accepted description is taken apart before the relay is awaited.
    #[allow(clippy::manual_async_fn)]
    pub fn serve<'a>(
        self: &'a Arc<Self>,
        handler: &'a dyn InboundHandler,
        stream: BoxStream,
        ctx: &'a InboundCtx,
    ) -> impl std::future::Future<Output = io::Result<()>> + Send + 'a {
        async move {
            let accepted = handler.accept(stream, ctx).await?;
            self.serve_accepted(accepted, ctx).await
        }
    }

    /// Acts on what an inbound accepted, to its end (a user's connection counted and cut
    /// when the user is removed).
    #[allow(clippy::manual_async_fn)]
    pub fn serve_accepted<'a>(
        self: &'a Arc<Self>,
        accepted: Accepted,
        ctx: &'a InboundCtx,
    ) -> impl std::future::Future<Output = io::Result<()>> + Send + 'a {
        async move {
            let user = match &accepted {
                Accepted::Stream(s, _)
                | Accepted::Packets(s, _)
                | Accepted::Mux(s, _)
                | Accepted::Reverse(s, _, _) => {
                    s.user.as_ref().filter(|u| !u.email.is_empty()).cloned()
                }
                _ => None,
            };
            if let Some(user) = user {
                return Box::pin(self.serve_user(accepted, user, ctx)).await;
            }
            // Moving the whole value into the match (not matching on the local in place)
            // keeps its storage from living next to the relay's.
            let (session, stream) = match std::convert::identity(accepted) {
                Accepted::Stream(session, stream) => (session, stream),
                other => return Box::pin(self.serve_other(other, ctx)).await,
            };
            let (session, stream) = sniffed(self, ctx, session, stream).await;
            self.dispatch_tcp(session, stream, &ctx.traffic)
                .await
                .map(|_| ())
        }
    }

    /// Serves a connection of a user with an email: counted in the user's online map (when
    /// the level's policy asks) while it lasts, and ended when the user is removed.
    async fn serve_user(
        self: &Arc<Self>,
        accepted: Accepted,
        user: crate::session::User,
        ctx: &InboundCtx,
    ) -> io::Result<()> {
        let revoked = user.traffic.revoked.clone();
        if revoked.is_fired() {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("user {} was removed", user.email),
            ));
        }
        let _online = match (&self.stats, ctx.info.source.ip()) {
            (Some(st), Some(ip)) if self.level(user.level).stats_user_online => st
                .online_map(&crate::stats::online_name(&user.email))
                .enter(ip),
            _ => None,
        };
        tokio::select! {
            r = self.serve_other(accepted, ctx) => r,
            _ = revoked.wait() => {
                tracing::info!(
                    "[{}] connection from {} closed: user {} removed",
                    ctx.tag,
                    ctx.info.source,
                    user.email
                );
                Ok(())
            }
        }
    }

    /// Everything an inbound asks for besides relaying a stream.
    async fn serve_other(self: &Arc<Self>, accepted: Accepted, ctx: &InboundCtx) -> io::Result<()> {
        match accepted {
            Accepted::Stream(session, stream) => {
                let (session, stream) = sniffed(self, ctx, session, stream).await;
                self.dispatch_tcp(session, stream, &ctx.traffic)
                    .await
                    .map(|_| ())
            }
            Accepted::Packets(session, client) => {
                udp::serve_packets_sniffed(
                    self,
                    session,
                    client,
                    &ctx.traffic,
                    ctx.sniffing.as_deref(),
                )
                .await
            }
            Accepted::Mux(session, stream) => {
                mux::serve(
                    self.clone(),
                    session,
                    stream,
                    ctx.traffic.clone(),
                    ctx.sniffing.clone(),
                )
                .await
            }
            Accepted::Reverse(session, stream, tag) => {
                self.serve_reverse(session, stream, &tag, &ctx.traffic)
                    .await
            }
            Accepted::Fallback(stream, fb, closes) => {
                self.fall_back(stream, &fb, closes, ctx).await
            }
            Accepted::Done => Ok(()),
        }
    }

    /// Routes, dials and relays one TCP session to its end. `stream` is the client side,
    /// positioned after the protocol header. This future is most of what an idle connection
    /// costs: `fn -> impl Future` keeps `session` once (an `async fn` keeps each argument
    /// twice), and only the relay options outlive the dial.
    #[allow(clippy::manual_async_fn)]
    pub fn dispatch_tcp<'a>(
        &'a self,
        session: Session,
        stream: BoxStream,
        inbound: &'a Traffic,
    ) -> impl std::future::Future<Output = io::Result<RelayStats>> + Send + 'a {
        async move {
            let (outbound, routed) = self.pick(&session).await?;
            self.access.accepted(&session, &outbound.tag, routed);
            let (handshake, opts) = {
                let level = self.level(session.level());
                (level.handshake, relay::RelayOpts::for_level(&level))
            };
            let remote = match tokio::time::timeout(
                handshake.max(Duration::from_secs(1)),
                outbound.handler.dial_tcp_for(&session),
            )
            .await
            {
                Ok(Ok(s)) => s,
                Ok(Err(e)) if Blocked::of(&e).is_some() => {
                    drop(outbound);
                    return blackhole(&session, stream, &e).await;
                }
                Ok(Err(e)) => {
                    tracing::info!(
                        "[{}] failed to dial {} via {}: {}",
                        session.inbound_tag,
                        session.dest,
                        outbound.tag,
                        e
                    );
                    return Err(e);
                }
                Err(_) => {
                    tracing::info!(
                        "[{}] dial {} via {} timed out",
                        session.inbound_tag,
                        session.dest,
                        outbound.tag
                    );
                    return Err(io::ErrorKind::TimedOut.into());
                }
            };
            let counters = self.counters(&session, inbound, &outbound);
            drop(outbound);
            let (st, r) = relay::run(stream, remote, &opts, &counters).await;
            // What moved is logged however the relay ended: a reset at the end of a long
            // transfer still carried every byte counted here.
            let ended = match &r {
                Ok(()) => format!("timeout {:?}", st.timed_out),
                Err(e) => format!("error: {e}"),
            };
            tracing::debug!(
                "[{}] {} done: up {} down {} spliced {}/{} {}",
                session.inbound_tag,
                session.dest,
                st.up,
                st.down,
                st.up_spliced,
                st.down_spliced,
                ended
            );
            r.map(|()| st)
        }
    }

    /// Routes a UDP session (by its first destination) and opens the outbound's packet channel.
    pub async fn open_udp(
        &self,
        session: &Session,
        inbound: &Traffic,
    ) -> io::Result<(Box<dyn PacketConn>, UdpCounters, Arc<str>)> {
        let (outbound, routed) = self.pick(session).await?;
        self.access.accepted(session, &outbound.tag, routed);
        let pc = outbound.handler.dial_udp_for(session).await?;
        Ok((
            pc,
            self.counters(session, inbound, &outbound),
            outbound.tag.clone(),
        ))
    }
}

/// A session freedom refused: no dial; what the client sends is read and discarded for the
/// refusal's delay (or until the client closes), then the connection closes, as Xray's freedom
/// blackholes a blocked target (a prober learns nothing from when the server gives up).
async fn blackhole(
    session: &Session,
    mut stream: BoxStream,
    e: &io::Error,
) -> io::Result<RelayStats> {
    use tokio::io::AsyncReadExt;
    let Some(b) = Blocked::of(e) else {
        return Err(io::Error::new(e.kind(), e.to_string()));
    };
    let user = session.user.as_ref().map(|u| &*u.email).unwrap_or("");
    tracing::info!(
        "[{}] {} user {:?}: {}, blackholing connection for {:?}",
        session.inbound_tag,
        session.protocol,
        user,
        describe(&session.dest, b),
        b.delay
    );
    let mut buf = [0u8; 2048];
    let mut drained = 0u64;
    let _ = tokio::time::timeout(b.delay, async {
        while let Ok(n) = stream.read(&mut buf).await {
            if n == 0 {
                break;
            }
            drained += n as u64;
        }
    })
    .await;
    tracing::info!(
        "[{}] closed blackholed connection to blocked target {} ({drained} bytes discarded)",
        session.inbound_tag,
        session.dest
    );
    Ok(RelayStats {
        up: drained,
        down: 0,
        up_spliced: false,
        down_spliced: false,
        timed_out: None,
    })
}
