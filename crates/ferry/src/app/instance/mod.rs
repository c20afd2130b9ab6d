//! A running Ferry: listeners bound from the config, the dispatcher behind them, and graceful stop.

mod accept_log;
mod live;
mod local;
mod reload;
mod running;
mod serve;

use std::io;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::app::dispatcher::Dispatcher;
use crate::app::log::AccessLog;
use crate::app::stats::Stats;
use crate::common::Network;
use crate::config::Config;
use crate::registry::{CounterSource, OutboundEntry, OutboundTable, Swap};

pub use crate::stats::live_connections;
pub use live::Live;
pub use reload::Reloaded;
pub use running::{RunningInbound, RunningInbounds};
pub(crate) use serve::Serve;

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
    /// The reverse bridges' tasks (a reload restarts them).
    bridges: Vec<JoinHandle<()>>,
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
            portals: Default::default(),
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
            bridges: Vec::new(),
        };
        inst.observatory = cfg
            .router
            .observatory
            .as_ref()
            .map(|obs| tokio::spawn(obs.clone().run(cfg.registry.clone())));
        inst.start_bridges(&cfg);
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

    /// Starts the config's reverse bridges (the legacy object's and VLESS outbounds' with
    /// `reverse`), stopping those running.
    fn start_bridges(&mut self, cfg: &Config) {
        for b in self.bridges.drain(..) {
            b.abort();
        }
        let bridges = cfg
            .bridges
            .iter()
            .chain(cfg.outbounds.iter().filter_map(|o| o.bridge.as_ref()));
        for b in bridges {
            let traffic = Arc::new(cfg.counters.inbound(&b.tag));
            let d = self.core.dispatcher.clone();
            let b = b.clone();
            self.bridges
                .push(tokio::spawn(crate::app::dispatcher::reverse::run_bridge(
                    d, b, traffic,
                )));
        }
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
        for l in self
            .listeners
            .iter()
            .chain(&self.observatory)
            .chain(&self.bridges)
        {
            l.abort();
        }
        self.core.inbounds.store(Vec::new());
        self.core.live.drain(grace).await
    }
}
