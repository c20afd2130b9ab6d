//! VLESS Reverse and the legacy `reverse` object on the dispatcher's side: the portals'
//! outbounds (registered when their first tunnel arrives, as Xray registers them) and the
//! bridges (each a loop that keeps enough tunnels open to its portal and serves the sessions
//! the portal opens in them, routed as from the inbound named by the bridge's tag).

use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::mux::{serve_on, Tunnel};
use super::Dispatcher;
use crate::common::{Address, Destination, Network};
use crate::counters::CounterSource;
use crate::proxy::mux::link::Link;
use crate::proxy::reverse::{
    rvs_cool, Bridge, Portal, Via, BRIDGE_PROTOCOL, MONITOR, SESSIONS_PER_WORKER,
};
use crate::registry::OutboundEntry;
use crate::session::{Endpoint, Session, Traffic, User};
use crate::transport::BoxStream;

/// The protocol name of a portal's outbound in the registry.
pub const PORTAL: &str = "reverse";
/// How long a bridge waits for its tunnel to be dialed.
const DIAL: Duration = Duration::from_secs(16);
/// Capacity of the pipe a legacy bridge's tunnel runs over.
const PIPE: usize = 64 * 1024;

/// The VLESS Reverse portals of an instance, by tag.
#[derive(Default)]
pub struct Portals {
    map: Mutex<HashMap<Arc<str>, Arc<Portal>>>,
}

impl Dispatcher {
    /// A portal user's tunnel (`Accepted::Reverse`): a worker of the outbound `tag` until it
    /// closes.
    pub(super) async fn serve_reverse(
        &self,
        session: Session,
        stream: BoxStream,
        tag: &str,
        inbound: &Traffic,
    ) -> io::Result<()> {
        let portal = self.portal(tag)?;
        // The tunnel's bytes count as the bridge user's and the inbound's (as Xray's WrapLink).
        let mut counters = crate::relay::Counters::default();
        if self.stats.is_some() {
            if let Some(u) = &session.user {
                u.traffic.in_use();
            }
            let traffic = [Some(inbound), session.user.as_ref().map(|u| &*u.traffic)];
            for t in traffic.into_iter().flatten() {
                counters.up.extend(t.up.clone());
                counters.down.extend(t.down.clone());
            }
        }
        let stream: BoxStream = Box::new(Counted {
            inner: stream,
            counters,
        });
        let who = session.user.as_ref().map(|u| &*u.email).unwrap_or("");
        tracing::info!(
            "[{}] reverse tunnel from {} ({who}) for outbound {tag}",
            session.inbound_tag,
            session.source
        );
        portal.serve_worker(stream).await;
        Ok(())
    }

    /// Registers again the VLESS Reverse portals a reload left out of the outbounds (their
    /// tunnels stay up).
    pub fn register_portals(&self) {
        let tags: Vec<Arc<str>> = {
            let m = self.portals.map.lock().unwrap_or_else(|e| e.into_inner());
            m.keys().cloned().collect()
        };
        for t in tags {
            if let Err(e) = self.portal(&t) {
                tracing::warn!("{e}");
            }
        }
    }

    /// The portal tagged `tag`, registered as an outbound (again, after a reload replaced the
    /// outbounds) unless an outbound of another kind has the tag.
    fn portal(&self, tag: &str) -> io::Result<Arc<Portal>> {
        let portal = {
            let mut m = self.portals.map.lock().unwrap_or_else(|e| e.into_inner());
            m.entry(tag.into())
                .or_insert_with(|| Portal::vless(tag))
                .clone()
        };
        match self.outbounds.load().get(tag) {
            Some(e) if e.protocol == PORTAL => return Ok(portal),
            Some(_) => {
                return Err(io::Error::other(format!(
                    "reverse: outbound {tag} is not type Reverse"
                )))
            }
            None => {}
        }
        let counters = CounterSource {
            stats: self.stats.clone(),
            policy: (*self.policy.load()).clone(),
        };
        self.outbounds.add(OutboundEntry {
            tag: tag.into(),
            protocol: PORTAL.into(),
            handler: portal.clone(),
            traffic: counters.outbound(tag),
        });
        tracing::info!("reverse: outbound {tag} registered");
        Ok(portal)
    }
}

fn unspecified() -> Endpoint {
    Endpoint::Ip(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)))
}

/// One tunnel of a bridge.
struct Worker {
    link: Arc<Link>,
    tunnel: Arc<Tunnel>,
}

impl Worker {
    fn active(&self) -> bool {
        self.tunnel.active() && !self.link.is_closed()
    }
}

/// A bridge's tunnels; all of them close when the bridge stops (its task aborted by a stop or a
/// reload).
#[derive(Default)]
struct Workers(Vec<Worker>);

impl Drop for Workers {
    fn drop(&mut self) {
        for w in &self.0 {
            w.link.shutdown();
        }
    }
}

/// Runs a bridge until the task is aborted: 2 s after start and every 2 s after, a new tunnel
/// when none is active or the active ones carry more than 16 sessions each (as Xray's). A
/// tunnel the portal drains stays open for its sessions and closes after them.
pub async fn run_bridge(d: Arc<Dispatcher>, bridge: Bridge, inbound: Arc<Traffic>) {
    let mut workers = Workers::default();
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + MONITOR, MONITOR);
    loop {
        tick.tick().await;
        workers.0.retain(|w| !w.link.is_closed());
        let active: Vec<&Worker> = workers.0.iter().filter(|w| w.active()).collect();
        let sessions: usize = active.iter().map(|w| w.link.active()).sum();
        if active.is_empty() || sessions / active.len() > SESSIONS_PER_WORKER {
            workers.0.push(open(&d, &bridge, &inbound));
        }
    }
}

/// Opens one tunnel of `bridge` and serves it in a task of its own.
fn open(d: &Arc<Dispatcher>, bridge: &Bridge, inbound: &Arc<Traffic>) -> Worker {
    let (link, rx) = Link::new(None);
    let legacy = matches!(bridge.via, Via::Routed { .. });
    let tunnel = Arc::new(Tunnel::new(!legacy, legacy));
    let mut conn = Session {
        inbound_tag: bridge.tag.clone(),
        source: unspecified(),
        local: unspecified(),
        dest: rvs_cool(),
        network: Network::Tcp,
        user: None,
        protocol: BRIDGE_PROTOCOL,
        sniffed: None,
    };
    let (d, inbound, l, t) = (d.clone(), inbound.clone(), link.clone(), tunnel.clone());
    let tag = bridge.tag.clone();
    let via = bridge.via.clone();
    tokio::spawn(async move {
        let (stream, sniffing): (BoxStream, _) = match via {
            Via::Vless {
                dialer,
                email,
                sniffing,
            } => {
                if !email.is_empty() {
                    conn.user = Some(User::new(email.clone(), 0));
                }
                match tokio::time::timeout(DIAL, dialer.dial_tcp(&rvs_cool())).await {
                    Ok(Ok(s)) => (s, sniffing),
                    Ok(Err(e)) => {
                        tracing::info!("[{tag}] reverse bridge: failed to reach the portal: {e}");
                        l.shutdown();
                        return;
                    }
                    Err(_) => {
                        tracing::info!("[{tag}] reverse bridge: reaching the portal timed out");
                        l.shutdown();
                        return;
                    }
                }
            }
            Via::Routed { domain } => {
                // A routed connection to `domain:0`, as from inbound `tag`; its other end is the
                // tunnel.
                let (a, b) = tokio::io::duplex(PIPE);
                let mut s = conn.clone();
                s.dest = Destination::new(Address::Domain(domain), 0);
                let (d2, inb, l2, tag2) = (d.clone(), inbound.clone(), l.clone(), tag.clone());
                tokio::spawn(async move {
                    if let Err(e) = d2.dispatch_tcp(s, Box::new(a), &inb).await {
                        tracing::info!("[{tag2}] reverse bridge: tunnel ended: {e}");
                    }
                    l2.shutdown();
                });
                (Box::new(b) as BoxStream, None)
            }
        };
        tracing::info!("[{tag}] reverse bridge: tunnel open");
        let r = serve_on(d, conn, stream, inbound, sniffing, (l.clone(), rx), Some(t)).await;
        l.shutdown();
        tracing::info!("[{tag}] reverse bridge: tunnel closed ({r:?})");
    });
    Worker { link, tunnel }
}

/// A stream that counts what is read from it as uplink and what is written as downlink.
struct Counted {
    inner: BoxStream,
    counters: crate::relay::Counters,
}

fn add(counters: &[Arc<std::sync::atomic::AtomicU64>], n: usize) {
    for c in counters {
        c.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
    }
}

impl tokio::io::AsyncRead for Counted {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        add(&self.counters.up, n);
        r
    }
}

impl tokio::io::AsyncWrite for Counted {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        data: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.inner).poll_write(cx, data);
        if let std::task::Poll::Ready(Ok(n)) = &r {
            add(&self.counters.down, *n);
        }
        r
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl crate::transport::Stream for Counted {}
