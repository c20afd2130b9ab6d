//! The dispatcher: routes a session, dials its outbound, and relays with live counters.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use crate::app::log::AccessLog;
use crate::app::policy::Policy;
use crate::app::router::Router;
use crate::app::stats::{self, Stats};
use crate::proxy::{OutboundHandler, PacketConn, Session};
use crate::relay::{self, Counters, RelayStats};
use crate::transport::BoxStream;

/// Shared by every inbound: the routing table, the outbounds, policy, and stats.
pub struct Dispatcher {
    pub router: Router,
    pub outbounds: HashMap<String, Arc<dyn OutboundHandler>>,
    pub default_outbound: String,
    pub policy: Policy,
    /// `Some` when the `stats` object is present.
    pub stats: Option<Arc<Stats>>,
    pub access: AccessLog,
}

/// Counters one UDP session adds to, packet by packet.
pub type UdpCounters = Counters;

impl Dispatcher {
    /// The handshake timeout for an inbound connection (level 0 until a user is known).
    pub fn handshake_timeout(&self) -> Duration {
        self.policy.level(0).handshake
    }

    /// Picks the outbound for a session (awaits only when the domain strategy resolves).
    /// The flag tells whether a routing rule chose it (`false`: the default outbound).
    pub async fn pick(&self, s: &Session) -> (&str, &Arc<dyn OutboundHandler>, bool) {
        let (tag, routed) = match self.router.route(s).await {
            Some(rule) => {
                if let Some(t) = &rule.tag {
                    tracing::debug!("[{}] {} matched rule {t}", s.inbound_tag, s.dest);
                }
                (rule.outbound.as_str(), true)
            }
            None => (self.default_outbound.as_str(), false),
        };
        match self.outbounds.get_key_value(tag) {
            Some((t, o)) => (t.as_str(), o, routed),
            None => {
                let (t, o) = self
                    .outbounds
                    .get_key_value(&self.default_outbound)
                    .expect("default outbound exists");
                (t.as_str(), o, false)
            }
        }
    }

    /// The counters a session with this outbound adds to (empty when stats are off).
    pub fn counters(&self, s: &Session, outbound: &str) -> Counters {
        let mut c = Counters::default();
        let Some(st) = &self.stats else { return c };
        let sys = &self.policy.system;
        let push = |v: &mut Vec<Arc<AtomicU64>>, on: bool, kind: &str, tag: &str, dir: &str| {
            if on && !tag.is_empty() {
                v.push(st.counter(&stats::name(kind, tag, dir)));
            }
        };
        push(
            &mut c.up,
            sys.stats_inbound_uplink,
            "inbound",
            &s.inbound_tag,
            "uplink",
        );
        push(
            &mut c.down,
            sys.stats_inbound_downlink,
            "inbound",
            &s.inbound_tag,
            "downlink",
        );
        push(
            &mut c.up,
            sys.stats_outbound_uplink,
            "outbound",
            outbound,
            "uplink",
        );
        push(
            &mut c.down,
            sys.stats_outbound_downlink,
            "outbound",
            outbound,
            "downlink",
        );
        if let Some(u) = &s.user {
            let lp = self.policy.level(u.level);
            push(&mut c.up, lp.stats_user_uplink, "user", &u.email, "uplink");
            push(
                &mut c.down,
                lp.stats_user_downlink,
                "user",
                &u.email,
                "downlink",
            );
        }
        c
    }

    /// Routes, dials and relays one TCP session to its end. `stream` is the client side,
    /// positioned after the protocol header. This future is most of what an idle connection
    /// costs: `fn -> impl Future` keeps `session` once (an `async fn` keeps each argument
    /// twice), and only the relay options outlive the dial.
    #[allow(clippy::manual_async_fn)]
    pub fn dispatch_tcp(
        &self,
        session: Session,
        stream: BoxStream,
    ) -> impl std::future::Future<Output = io::Result<RelayStats>> + Send + '_ {
        async move {
            let (tag, outbound, routed) = self.pick(&session).await;
            self.access.accepted(&session, tag, routed);
            let (handshake, opts) = {
                let level = self.policy.level(session.level());
                (level.handshake, level.relay_opts())
            };
            let remote = match tokio::time::timeout(
                handshake.max(Duration::from_secs(1)),
                outbound.dial_tcp(&session),
            )
            .await
            {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::info!(
                        "[{}] failed to dial {} via {}: {}",
                        session.inbound_tag,
                        session.dest,
                        tag,
                        e
                    );
                    return Err(e);
                }
                Err(_) => {
                    tracing::info!(
                        "[{}] dial {} via {} timed out",
                        session.inbound_tag,
                        session.dest,
                        tag
                    );
                    return Err(io::ErrorKind::TimedOut.into());
                }
            };
            let counters = self.counters(&session, tag);
            let r = relay::run(stream, remote, &opts, &counters).await;
            match &r {
                Ok(st) => tracing::debug!(
                    "[{}] {} done: up {} down {} spliced {} timeout {:?}",
                    session.inbound_tag,
                    session.dest,
                    st.up,
                    st.down,
                    st.spliced,
                    st.timed_out
                ),
                Err(e) => tracing::debug!(
                    "[{}] {} relay ended: {}",
                    session.inbound_tag,
                    session.dest,
                    e
                ),
            }
            r
        }
    }

    /// Routes a UDP session (by its first destination) and opens the outbound's packet channel.
    pub async fn open_udp(
        &self,
        session: &Session,
    ) -> io::Result<(Box<dyn PacketConn>, UdpCounters, String)> {
        let (tag, outbound, routed) = self.pick(session).await;
        self.access.accepted(session, tag, routed);
        let pc = outbound.dial_udp(session).await?;
        Ok((pc, self.counters(session, tag), tag.to_string()))
    }
}
