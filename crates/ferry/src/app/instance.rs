//! A running Ferry: listeners bound from the config, the dispatcher behind them, and graceful stop.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::app::dispatcher::Dispatcher;
use crate::app::log::AccessLog;
use crate::app::stats::Stats;
use crate::common::Network;
use crate::config::{Config, Listen};
use crate::proxy::{InboundCtx, InboundHandler};
use crate::transport::tcp;
use crate::transport::tcp::SockOpts;

/// Counts live connections so a stop can wait for them.
#[derive(Default)]
pub struct Live {
    n: AtomicUsize,
    zero: Notify,
}

struct LiveGuard(Arc<Live>);
impl Drop for LiveGuard {
    fn drop(&mut self) {
        if self.0.n.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.zero.notify_waiters();
        }
    }
}

impl Live {
    fn enter(self: &Arc<Self>) -> LiveGuard {
        self.n.fetch_add(1, Ordering::AcqRel);
        LiveGuard(self.clone())
    }
    pub fn count(&self) -> usize {
        self.n.load(Ordering::Acquire)
    }
    /// Waits until no connection is live, or `grace` passes. Returns the number still live.
    pub async fn drain(&self, grace: Duration) -> usize {
        let _ = tokio::time::timeout(grace, async {
            loop {
                let notified = self.zero.notified();
                if self.count() == 0 {
                    return;
                }
                notified.await;
            }
        })
        .await;
        self.count()
    }
}

/// A started instance.
pub struct Instance {
    pub dispatcher: Arc<Dispatcher>,
    pub stats: Option<Arc<Stats>>,
    /// Every bound address, by inbound tag (TCP and UDP).
    pub bound: Vec<(String, Network, SocketAddr)>,
    pub live: Arc<Live>,
    listeners: Vec<JoinHandle<()>>,
}

impl Instance {
    /// Binds every inbound and starts serving.
    pub async fn start(cfg: Config) -> io::Result<Instance> {
        let stats = cfg.stats.then(|| Arc::new(Stats::default()));
        let access = AccessLog::open(&cfg.log).unwrap_or_else(|e| {
            tracing::error!("access log: {e}; access logging disabled");
            AccessLog::disabled()
        });
        let default_outbound = cfg
            .outbounds
            .first()
            .map(|o| o.tag.clone())
            .unwrap_or_default();
        let outbounds: HashMap<_, _> = cfg
            .outbounds
            .iter()
            .map(|o| (o.tag.clone(), o.handler.clone()))
            .collect();
        let dispatcher = Arc::new(Dispatcher {
            router: cfg.router.clone(),
            outbounds,
            default_outbound,
            policy: cfg.policy.clone(),
            stats: stats.clone(),
            access,
        });
        let live = Arc::new(Live::default());
        let mut listeners = Vec::new();
        let mut bound = Vec::new();
        for ib in &cfg.inbounds {
            let Listen::Ip(ip, ranges) = &ib.listen;
            for (a, b) in ranges {
                for port in *a..=*b {
                    let addr = SocketAddr::new(*ip, port);
                    let tag: Arc<str> = ib.tag.as_str().into();
                    if ib.handler.networks().contains(&Network::Tcp) {
                        let l = tcp::listen(addr).map_err(|e| {
                            io::Error::new(
                                e.kind(),
                                format!("inbound {:?}: listen tcp {addr}: {e}", ib.tag),
                            )
                        })?;
                        let local = l.local_addr()?;
                        bound.push((ib.tag.clone(), Network::Tcp, local));
                        tracing::info!(
                            "inbound {:?} ({}) listening on tcp {local}",
                            ib.tag,
                            ib.protocol
                        );
                        listeners.push(tokio::spawn(accept_loop(
                            l,
                            ib.handler.clone(),
                            tag.clone(),
                            dispatcher.clone(),
                            ib.sockopt.clone(),
                            live.clone(),
                        )));
                    }
                    if ib.handler.networks().contains(&Network::Udp) {
                        let u = UdpSocket::bind(addr).await.map_err(|e| {
                            io::Error::new(
                                e.kind(),
                                format!("inbound {:?}: listen udp {addr}: {e}", ib.tag),
                            )
                        })?;
                        let local = u.local_addr()?;
                        bound.push((ib.tag.clone(), Network::Udp, local));
                        tracing::info!(
                            "inbound {:?} ({}) listening on udp {local}",
                            ib.tag,
                            ib.protocol
                        );
                        let ctx = InboundCtx {
                            tag,
                            source: local,
                            local,
                            dispatcher: dispatcher.clone(),
                        };
                        let h = ib.handler.clone();
                        listeners.push(tokio::spawn(async move {
                            if let Err(e) = h.serve_udp(Arc::new(u), ctx).await {
                                tracing::error!("udp inbound on {local} stopped: {e}");
                            }
                        }));
                    }
                }
            }
        }
        if let (Some(addr), Some(st)) = (cfg.metrics, stats.as_ref()) {
            let l = crate::app::metrics::bind(addr).await?;
            tracing::info!(
                "metrics on http://{}/debug/vars and /metrics",
                l.local_addr()?
            );
            listeners.push(tokio::spawn(crate::app::metrics::serve(l, st.clone())));
        } else if cfg.metrics.is_some() {
            tracing::warn!("metrics: the stats object is absent, so there is nothing to expose");
        }
        Ok(Instance {
            dispatcher,
            stats,
            bound,
            live,
            listeners,
        })
    }

    /// Stops accepting new connections and waits up to `grace` for live ones. Returns how many
    /// were still live when the grace period ended.
    pub async fn stop(self, grace: Duration) -> usize {
        for l in &self.listeners {
            l.abort();
        }
        self.live.drain(grace).await
    }
}

async fn accept_loop(
    l: TcpListener,
    handler: Arc<dyn InboundHandler>,
    tag: Arc<str>,
    dispatcher: Arc<Dispatcher>,
    opts: SockOpts,
    live: Arc<Live>,
) {
    let local = l
        .local_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    loop {
        let (sock, peer) = match l.accept().await {
            Ok(x) => x,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!("accept on {local}: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if let Err(e) = tcp::accepted(&sock, &opts) {
            tracing::debug!("socket options on {peer}: {e}");
        }
        let guard = live.enter();
        let ctx = InboundCtx {
            tag: tag.clone(),
            source: peer,
            // The address this connection arrived on (the listener's may be unspecified).
            local: sock.local_addr().unwrap_or(local),
            dispatcher: dispatcher.clone(),
        };
        let h = handler.clone();
        let t = tag.clone();
        tokio::spawn(async move {
            let _guard = guard;
            if let Err(e) = h.handle_tcp(Box::new(sock), ctx).await {
                tracing::info!("[{t}] connection from {peer} ended: {e}");
            }
        });
    }
}
