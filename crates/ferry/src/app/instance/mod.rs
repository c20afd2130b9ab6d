//! A running Ferry: listeners bound from the config, the dispatcher behind them, and graceful stop.

mod local;

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::UdpSocket;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::app::dispatcher::Dispatcher;
use crate::app::log::AccessLog;
use crate::app::stats::Stats;
use crate::common::Network;
use crate::config::{Config, Inbound, Listen};
use crate::proxy::{InboundCtx, InboundHandler};
use crate::registry::{CounterSource, OutboundEntry, OutboundTable, Swap};
use crate::session::{ConnInfo, Endpoint, Traffic};
use crate::transport::chain::Acceptor;
use crate::transport::Listener;

/// Counts live connections so a stop can wait for them.
#[derive(Default)]
pub struct Live {
    n: AtomicUsize,
    zero: Notify,
}

/// How long the accept loop waits after a failed accept.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);
/// At most one log line per listener per this interval about failed accepts.
const ACCEPT_LOG_EVERY: Duration = Duration::from_secs(5);

pub use crate::stats::live_connections;
use crate::stats::CONNECTIONS;

pub(crate) struct LiveGuard(Arc<Live>);
impl Drop for LiveGuard {
    fn drop(&mut self) {
        CONNECTIONS.fetch_sub(1, Ordering::Relaxed);
        if self.0.n.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.zero.notify_waiters();
        }
    }
}

impl Live {
    fn enter(self: &Arc<Self>) -> LiveGuard {
        CONNECTIONS.fetch_add(1, Ordering::Relaxed);
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

/// A running inbound: its handler (and user manager), and the tasks serving its listeners.
pub struct RunningInbound {
    pub tag: String,
    pub protocol: String,
    pub handler: Arc<dyn InboundHandler>,
    /// Where it listens (as configured).
    pub listen: Listen,
    /// Its JSON object as configured (the API reads its users' accounts from it; a reload
    /// keeps the inbound when the new config has the same object).
    pub json: serde_json::Value,
    /// The addresses it is bound to (TCP, UDP and unix).
    pub bound: Vec<(Network, Endpoint)>,
    /// What serves its connections (a fallback of another inbound hands it some directly).
    pub(crate) serve: Arc<Serve>,
    tasks: std::sync::Mutex<Vec<JoinHandle<()>>>,
}

impl RunningInbound {
    /// Stops its listeners and waits until their sockets are closed.
    async fn close(&self) {
        let tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|e| e.into_inner()));
        for t in &tasks {
            t.abort();
        }
        for t in tasks {
            let _ = t.await;
        }
    }
}

impl Drop for RunningInbound {
    fn drop(&mut self) {
        for t in self
            .tasks
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            t.abort();
        }
    }
}

/// Aborts the tasks of an inbound that failed to start.
struct Tasks(Vec<JoinHandle<()>>);
impl Drop for Tasks {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

/// The running inbounds of an instance.
pub type RunningInbounds = Swap<Vec<Arc<RunningInbound>>>;

/// What the parts of a running instance share: the dispatcher, the running inbounds and what
/// builds new ones. The API holds it too.
pub struct Core {
    pub dispatcher: Arc<Dispatcher>,
    pub stats: Option<Arc<Stats>>,
    pub live: Arc<Live>,
    /// The running inbounds (add and remove them at run time); the dispatcher looks fallback
    /// destinations up in them.
    pub inbounds: Arc<RunningInbounds>,
    /// Resolves the counters of inbounds, outbounds and users added at run time (a reload
    /// swaps it with the policy).
    pub counters: Swap<CounterSource>,
    /// The log settings (the API's RestartLogger reopens the access log).
    pub log: crate::app::log::LogConfig,
    /// When the instance started (the API's GetSysStats uptime).
    pub started: std::time::Instant,
}

/// A started instance.
pub struct Instance {
    core: Arc<Core>,
    listeners: Vec<JoinHandle<()>>,
    /// The observatory's probing task (a reload replaces it).
    observatory: Option<JoinHandle<()>>,
}

impl std::ops::Deref for Instance {
    type Target = Core;
    fn deref(&self) -> &Core {
        &self.core
    }
}

impl Instance {
    /// Binds every inbound and starts serving, metrics included (the API, which sits above the
    /// instance, is started over it by `app::api::start_instance`; `cfg.api` is not read here).
    pub async fn start(cfg: Config) -> io::Result<Instance> {
        let stats = cfg.stats.clone();
        let access = AccessLog::open(&cfg.log).unwrap_or_else(|e| {
            tracing::error!("access log: {e}; access logging disabled");
            AccessLog::disabled()
        });
        let entries = cfg
            .outbounds
            .iter()
            .map(|o| {
                Arc::new(OutboundEntry {
                    tag: o.tag.as_str().into(),
                    protocol: o.protocol.clone(),
                    handler: o.handler.clone(),
                    traffic: cfg.counters.outbound(&o.tag),
                })
            })
            .collect();
        cfg.registry.store(OutboundTable::new(entries));
        let inbounds = Arc::new(Swap::new(Vec::new()));
        let dispatcher = Arc::new(Dispatcher {
            router: Swap::new(cfg.router.clone()),
            outbounds: cfg.registry.clone(),
            policy: Swap::new(cfg.policy.clone()),
            stats: stats.clone(),
            access,
            local: {
                let weak: std::sync::Weak<RunningInbounds> = Arc::downgrade(&inbounds);
                weak
            },
        });
        // Routed DNS servers are dialed through the dispatcher (a weak handle: the dispatcher
        // owns the resolver through its router).
        if let Some(dns) = &cfg.router.dns {
            let route: Arc<dyn crate::app::dns::Route> = dispatcher.clone();
            dns.set_route(Arc::downgrade(&route));
        }
        let core = Arc::new(Core {
            dispatcher,
            stats: stats.clone(),
            live: Arc::new(Live::default()),
            inbounds,
            counters: Swap::new(cfg.counters.clone()),
            log: cfg.log.clone(),
            started: std::time::Instant::now(),
        });
        let mut inst = Instance {
            core,
            listeners: Vec::new(),
            observatory: None,
        };
        inst.observatory = cfg
            .router
            .observatory
            .as_ref()
            .map(|obs| tokio::spawn(obs.clone().run(cfg.registry.clone())));
        for ib in cfg.inbounds {
            inst.add_inbound(ib).await?;
        }
        if let (Some(addr), Some(st)) = (cfg.metrics, stats.as_ref()) {
            let l = crate::app::metrics::bind(addr).await?;
            tracing::info!(
                "metrics on http://{}/debug/vars and /metrics",
                l.local_addr()?
            );
            let own = crate::common::own::register(Network::Tcp, l.local_addr()?);
            let st = st.clone();
            inst.listeners.push(tokio::spawn(async move {
                let _own = own;
                crate::app::metrics::serve(l, st).await
            }));
        } else if cfg.metrics.is_some() {
            tracing::warn!("metrics: the stats object is absent, so there is nothing to expose");
        }
        Ok(inst)
    }

    /// The shared core (what the API holds).
    pub fn core(&self) -> &Arc<Core> {
        &self.core
    }

    /// Tasks of a service started over this instance (the API's), aborted when it stops.
    pub fn add_tasks(&mut self, tasks: impl IntoIterator<Item = JoinHandle<()>>) {
        self.listeners.extend(tasks);
    }

    /// Stops accepting new connections and waits up to `grace` for live ones. Returns how many
    /// were still live when the grace period ended.
    pub async fn stop(self, grace: Duration) -> usize {
        for l in self.listeners.iter().chain(&self.observatory) {
            l.abort();
        }
        self.core.inbounds.store(Vec::new());
        self.core.live.drain(grace).await
    }
}

/// What a reload did, by inbound (tags; `""` for an untagged one).
#[derive(Debug, Default)]
pub struct Reloaded {
    /// Inbounds whose object is the same: listeners, live connections and users added through
    /// the API all kept.
    pub kept: Vec<String>,
    /// Inbounds whose object changed: the old listeners closed (their live connections go on
    /// with the old settings), new ones bound.
    pub replaced: Vec<String>,
    /// Inbounds new in the config.
    pub added: Vec<String>,
    /// Inbounds gone from the config: listeners closed, live connections go on.
    pub removed: Vec<String>,
    /// Inbounds of the new config that could not be started, with why.
    pub failed: Vec<(String, String)>,
}

impl Instance {
    /// What a config read for a reload takes over from this instance (its stats and its
    /// outbound registry).
    pub fn reuse(&self) -> crate::config::Reuse {
        crate::config::Reuse {
            stats: self.core.stats.clone(),
            registry: Some(self.core.dispatcher.outbounds.clone()),
        }
    }

    /// Switches to `cfg` (read with [`Instance::reuse`]) without dropping connections: new
    /// connections get the new outbounds, routing, DNS, policy and observatory at once; an
    /// inbound whose JSON object is unchanged keeps running as it is; a changed or removed one
    /// stops accepting while its live connections finish on the old settings. The API, the
    /// metrics listener, the log and the presence of `stats` stay as they started (the caller
    /// says so when the config changes them).
    pub async fn reload(&mut self, cfg: Config) -> Reloaded {
        let core = self.core.clone();
        // Outbounds: the new list in the shared registry. The api and metrics outbounds are
        // bound to the services this instance started, so the running ones stay.
        let old = core.dispatcher.outbounds.load();
        let counters = cfg.counters.clone();
        let entries = cfg
            .outbounds
            .iter()
            .map(|o| {
                let service = matches!(o.protocol.as_str(), "api" | "metrics");
                match old
                    .list()
                    .iter()
                    .find(|e| service && e.protocol == o.protocol)
                {
                    Some(e) => e.clone(),
                    None => Arc::new(OutboundEntry {
                        tag: o.tag.as_str().into(),
                        protocol: o.protocol.clone(),
                        handler: o.handler.clone(),
                        traffic: counters.outbound(&o.tag),
                    }),
                }
            })
            .collect();
        core.dispatcher.outbounds.store(OutboundTable::new(entries));
        core.dispatcher.policy.store(cfg.policy.clone());
        core.counters.store(counters);
        if let Some(dns) = &cfg.router.dns {
            let route: Arc<dyn crate::app::dns::Route> = core.dispatcher.clone();
            dns.set_route(Arc::downgrade(&route));
        }
        if let Some(t) = self.observatory.take() {
            t.abort();
        }
        self.observatory = cfg
            .router
            .observatory
            .as_ref()
            .map(|obs| tokio::spawn(obs.clone().run(core.dispatcher.outbounds.clone())));
        core.dispatcher.router.store(cfg.router);

        // Inbounds: each running one is matched with at most one new one of the same tag and
        // JSON object.
        let running = core.inbounds.load();
        let mut keep = vec![false; running.len()];
        let mut start = Vec::new();
        let mut out = Reloaded::default();
        for ib in cfg.inbounds {
            let same = running
                .iter()
                .enumerate()
                .find(|(i, r)| !keep[*i] && r.tag == ib.tag && r.json == ib.json);
            match same {
                Some((i, _)) => {
                    keep[i] = true;
                    out.kept.push(ib.tag);
                }
                None => start.push(ib),
            }
        }
        let dropped: Vec<Arc<RunningInbound>> = running
            .iter()
            .zip(&keep)
            .filter(|(_, k)| !**k)
            .map(|(r, _)| r.clone())
            .collect();
        // The old listeners close first, so a changed inbound can bind its port again.
        core.remove_inbounds(|r| dropped.iter().any(|d| Arc::ptr_eq(d, r)))
            .await;
        let mut replaced = std::collections::HashSet::new();
        for ib in start {
            let tag = ib.tag.clone();
            let was = dropped.iter().any(|d| d.tag == tag);
            match core.add_inbound(ib).await {
                Ok(()) if was => {
                    replaced.insert(tag.clone());
                    out.replaced.push(tag);
                }
                Ok(()) => out.added.push(tag),
                Err(e) => out.failed.push((tag, e.to_string())),
            }
        }
        out.removed = dropped
            .iter()
            .filter(|d| !replaced.contains(&d.tag))
            .map(|d| d.tag.clone())
            .collect();
        out
    }
}

impl Core {
    /// Binds one inbound's listeners and starts serving it. Its tag must be new; when a
    /// listener cannot be bound, nothing of it stays running.
    pub async fn add_inbound(&self, ib: Inbound) -> io::Result<()> {
        if !ib.tag.is_empty() && self.inbound(&ib.tag).is_some() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("inbound {:?} exists", ib.tag),
            ));
        }
        let tag: Arc<str> = ib.tag.as_str().into();
        let serve = Arc::new(Serve {
            handler: ib.handler.clone(),
            tag: tag.clone(),
            dispatcher: self.dispatcher.clone(),
            acceptor: ib.stream.acceptor(),
            traffic: Arc::new(self.counters.load().inbound(&ib.tag)),
            live: self.live.clone(),
            sniffing: ib.sniffing.clone(),
        });
        let mut tasks = Tasks(Vec::new());
        let mut bound = Vec::new();
        let named = |e: io::Error, what: String| {
            io::Error::new(
                e.kind(),
                format!("inbound {:?}: listen {what}: {e}", ib.tag),
            )
        };
        let mut addrs = Vec::new();
        match &ib.listen {
            Listen::Ip(ip, ranges) => {
                for (a, b) in ranges {
                    for port in *a..=*b {
                        addrs.push(SocketAddr::new(*ip, port));
                    }
                }
            }
            Listen::Unix(path) => {
                let l = Listener::unix(path).map_err(|e| named(e, path.text()))?;
                let local = l.local()?;
                bound.push((Network::Tcp, local));
                tasks.0.push(tokio::spawn(serve.clone().accept_loop(l)));
            }
        }
        for addr in addrs {
            if ib.handler.networks().contains(&Network::Tcp) {
                let l = Listener::tcp(addr, ib.stream.sockopt.clone())
                    .map_err(|e| named(e, format!("tcp {addr}")))?;
                let local = l.local()?;
                bound.push((Network::Tcp, local));
                tasks.0.push(tokio::spawn(serve.clone().accept_loop(l)));
            }
            if ib.handler.networks().contains(&Network::Udp) {
                let u = UdpSocket::bind(addr)
                    .await
                    .map_err(|e| named(e, format!("udp {addr}")))?;
                let local = u.local_addr()?;
                bound.push((Network::Udp, local.into()));
                let ctx = serve.ctx(ConnInfo::new(local.into(), local.into()));
                let h = ib.handler.clone();
                let own = crate::common::own::register(Network::Udp, local);
                tasks.0.push(tokio::spawn(async move {
                    let _own = own;
                    if let Err(e) = h.serve_udp(Arc::new(u), ctx).await {
                        tracing::error!("udp inbound on {local} stopped: {e}");
                    }
                }));
            }
        }
        for (net, local) in &bound {
            tracing::info!(
                "inbound {:?} ({}) listening on {net} {local}",
                ib.tag,
                ib.protocol
            );
        }
        let running = Arc::new(RunningInbound {
            tag: ib.tag,
            protocol: ib.protocol,
            handler: ib.handler,
            listen: ib.listen,
            json: ib.json,
            bound,
            serve,
            tasks: std::sync::Mutex::new(std::mem::take(&mut tasks.0)),
        });
        self.inbounds.update(|v| {
            let mut n = v.clone();
            n.push(running);
            (n, ())
        });
        Ok(())
    }

    /// Every address bound now, by inbound tag (TCP, UDP and unix).
    pub fn bound(&self) -> Vec<(String, Network, Endpoint)> {
        self.inbounds
            .load()
            .iter()
            .flat_map(|i| i.bound.iter().map(|(n, e)| (i.tag.clone(), *n, e.clone())))
            .collect()
    }

    /// Stops one inbound's listeners (its live connections go on) and returns once its ports
    /// are free; false when no inbound has this tag.
    pub async fn remove_inbound(&self, tag: &str) -> bool {
        self.remove_inbounds(|i| i.tag == tag).await > 0
    }

    /// Stops the listeners of every inbound `which` picks (their live connections go on) and
    /// returns how many once their ports are free.
    async fn remove_inbounds(&self, which: impl Fn(&Arc<RunningInbound>) -> bool) -> usize {
        let gone = self.inbounds.update(|v| {
            let (out, keep): (Vec<_>, Vec<_>) = v.iter().cloned().partition(|i| which(i));
            (keep, out)
        });
        let n = gone.len();
        for i in gone {
            i.close().await;
        }
        n
    }

    /// The running inbound with this tag.
    pub fn inbound(&self, tag: &str) -> Option<Arc<RunningInbound>> {
        self.inbounds.load().iter().find(|i| i.tag == tag).cloned()
    }
}

/// When an accept loop logs its failures (EMFILE, ENFILE, ENOBUFS): at most one failure line per
/// `ACCEPT_LOG_EVERY`, with the count of the silent ones since the last line, and one line when
/// accepts succeed again after a logged failure. A listener that flaps (one accept fails, the next
/// succeeds and its dial fails for want of descriptors, ...) thus logs at most two lines per
/// interval, not two every back-off.
#[derive(Default)]
struct AcceptLog {
    /// When the last failure line was logged.
    last_line: Option<std::time::Instant>,
    /// Failures since that line, not logged.
    silent: u64,
    /// Failures since the last successful accept that was logged as a recovery.
    all: u64,
    /// A failure line was logged and no recovery line since.
    announced: bool,
}

impl AcceptLog {
    /// One failed accept at `now`: `Some(silent failures since the last line)` when it is to be
    /// logged, `None` when it is only counted.
    fn failed(&mut self, now: std::time::Instant) -> Option<u64> {
        self.all += 1;
        match self.last_line {
            Some(at) if now.duration_since(at) < ACCEPT_LOG_EVERY => {
                self.silent += 1;
                None
            }
            _ => {
                let n = std::mem::take(&mut self.silent);
                self.last_line = Some(now);
                self.announced = true;
                Some(n)
            }
        }
    }

    /// One successful accept: `Some(failures in all)` when a recovery line is due.
    fn accepted(&mut self) -> Option<u64> {
        if !std::mem::take(&mut self.announced) {
            return None;
        }
        Some(std::mem::take(&mut self.all))
    }
}

/// What every connection of one inbound shares.
/// One inbound's serving state, shared by its accept loops (and by fallbacks of other inbounds
/// that hand it connections).
pub(crate) struct Serve {
    handler: Arc<dyn InboundHandler>,
    tag: Arc<str>,
    dispatcher: Arc<Dispatcher>,
    acceptor: Acceptor,
    traffic: Arc<Traffic>,
    live: Arc<Live>,
    sniffing: Option<Arc<crate::app::sniff::Sniffing>>,
}

impl Serve {
    /// Counts a connection live while the guard lasts.
    pub(crate) fn live_guard(&self) -> LiveGuard {
        self.live.enter()
    }

    pub(crate) fn ctx(&self, info: ConnInfo) -> InboundCtx {
        InboundCtx {
            tag: self.tag.clone(),
            info,
            services: self.dispatcher.clone(),
            traffic: self.traffic.clone(),
            sniffing: self.sniffing.clone(),
        }
    }

    async fn accept_loop(self: Arc<Self>, l: Listener) {
        let local = l
            .local()
            .map(|e| e.to_string())
            .unwrap_or_else(|_| "?".into());
        let mut log = AcceptLog::default();
        loop {
            let (stream, source, local_ep) = match l.accept().await {
                Ok(x) => {
                    if let Some(all) = log.accepted() {
                        tracing::warn!(
                            "accept on {local}: accepting again after {all} failed accept(s)"
                        );
                    }
                    x
                }
                Err(e) => {
                    match log.failed(std::time::Instant::now()) {
                        Some(0) => tracing::warn!(
                            "accept on {local}: {e}; backing off, the listener stays (logged once per {}s)",
                            ACCEPT_LOG_EVERY.as_secs()
                        ),
                        Some(n) => tracing::warn!(
                            "accept on {local}: {e} ({n} more since the last line); backing off, the listener stays"
                        ),
                        None => {}
                    }
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            };
            let guard = self.live.enter();
            // What the task keeps for the connection's life: the guard, this inbound's shared
            // state, the context, and the serve future (set up here and spawned as it is: an
            // `async` block awaiting it would hold it twice).
            let ctx = self.ctx(ConnInfo::new(source, local_ep));
            tokio::spawn(self.clone().serve_conn(stream, ctx, guard));
        }
    }

    /// Serves one connection of this inbound: its transport layers, then its protocol (each
    /// call of a multiplexing transport as a connection of its own). A `fn` returning the future
    /// keeps each argument once, where an `async fn` would keep it twice.
    pub(crate) fn serve_conn(
        self: Arc<Self>,
        stream: crate::transport::BoxStream,
        mut ctx: InboundCtx,
        live: LiveGuard,
    ) -> impl std::future::Future<Output = ()> + Send {
        let me = self;
        async move {
            let _live = live;
            let stream = if me.acceptor.is_empty() {
                stream
            } else {
                let limit = me.dispatcher.handshake_timeout();
                let accepted = me
                    .acceptor
                    .accept_within(stream, &mut ctx.info, limit)
                    .await;
                match accepted {
                    Ok(s) => s,
                    Err(e) => {
                        let probe = e.get_ref().and_then(|e| {
                            e.downcast_ref::<crate::transport::reality::server::Probe>()
                        });
                        match probe {
                            // Not REALITY's: counted as a rejected handshake.
                            Some(p) => ctx.reject("reality", p.reason, &p.detail),
                            None => tracing::info!(
                                "[{}] connection from {}: {e}",
                                me.tag,
                                ctx.info.source
                            ),
                        }
                        return;
                    }
                }
            };
            if let Some(server) = me.acceptor.server().cloned() {
                // Each call of the connection is served as a connection of its own.
                let each = |s: crate::transport::BoxStream, info: ConnInfo| {
                    let me = me.clone();
                    let ctx = me.ctx(info);
                    let guard = me.live.enter();
                    tokio::spawn(async move {
                        let _guard = guard;
                        if let Err(e) = me.dispatcher.serve(&*me.handler, s, &ctx).await {
                            tracing::info!(
                                "[{}] connection from {} ended: {e}",
                                me.tag,
                                ctx.info.source
                            );
                        }
                    });
                };
                if let Err(e) = server.serve(stream, &ctx.info, &each).await {
                    tracing::info!(
                        "[{}] {} connection from {}: {e}",
                        me.tag,
                        server.name(),
                        ctx.info.source
                    );
                }
                return;
            }
            if let Err(e) = me.dispatcher.serve(&*me.handler, stream, &ctx).await {
                tracing::info!(
                    "[{}] connection from {} ended: {e}",
                    me.tag,
                    ctx.info.source
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{AcceptLog, ACCEPT_BACKOFF, ACCEPT_LOG_EVERY};
    use std::time::Instant;

    /// A listener that flaps every back-off for 12 s logs two lines per 5 s interval at most,
    /// and the counts it logs add up to every failure.
    #[test]
    fn a_flapping_listener_logs_twice_per_interval() {
        let mut log = AcceptLog::default();
        let t0 = Instant::now();
        let (mut lines, mut failures, mut counted) = (0, 0u64, 0u64);
        let mut t = t0;
        while t.duration_since(t0).as_secs() < 12 {
            failures += 1;
            if let Some(n) = log.failed(t) {
                lines += 1;
                counted += n + 1;
            }
            if let Some(all) = log.accepted() {
                lines += 1;
                assert!(all >= 1);
            }
            t += ACCEPT_BACKOFF;
        }
        let intervals = 1 + 12 / ACCEPT_LOG_EVERY.as_secs();
        assert_eq!(lines, 2 * intervals, "{lines} lines");
        // The silent failures of the last interval are reported with the next line.
        assert!(counted <= failures && failures - counted < 5_000 / 50 + 1);
    }

    /// Failing without a success in between: one line per interval, the recovery line carries
    /// every failure since the last recovery.
    #[test]
    fn a_long_failure_is_logged_once_per_interval_then_recovery() {
        let mut log = AcceptLog::default();
        let t0 = Instant::now();
        assert_eq!(log.accepted(), None, "no recovery line without a failure");
        assert_eq!(log.failed(t0), Some(0));
        assert_eq!(log.failed(t0 + ACCEPT_BACKOFF), None);
        assert_eq!(log.failed(t0 + ACCEPT_LOG_EVERY), Some(1));
        assert_eq!(log.accepted(), Some(3));
        assert_eq!(log.accepted(), None);
    }
}
