//! Reloading a running instance: the new config's outbounds, routing, policy and observatory
//! swapped in at once, and its inbounds matched with the running ones.

use std::sync::Arc;

use super::running::RunningInbound;
use super::{Core, Instance};
use crate::config::{Config, Inbound};
use crate::registry::{OutboundEntry, OutboundTable};

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
    pub async fn reload(&mut self, mut cfg: Config) -> Reloaded {
        let core = self.core.clone();
        let inbounds = std::mem::take(&mut cfg.inbounds);
        self.start_bridges(&cfg);
        self.reload_services(cfg);
        core.reload_inbounds(inbounds).await
    }

    /// The new outbounds, policy, counters, DNS route, observatory and router.
    fn reload_services(&mut self, cfg: Config) {
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
        core.dispatcher.register_portals();
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
    }
}

impl Core {
    /// The new config's inbounds: each running one is matched with at most one new one of the
    /// same tag and JSON object (kept); the others stop, and the new ones start.
    async fn reload_inbounds(&self, inbounds: Vec<Inbound>) -> Reloaded {
        let running = self.inbounds.load();
        let mut keep = vec![false; running.len()];
        let mut start = Vec::new();
        let mut out = Reloaded::default();
        for ib in inbounds {
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
        self.remove_inbounds(|r| dropped.iter().any(|d| Arc::ptr_eq(d, r)))
            .await;
        let mut replaced = std::collections::HashSet::new();
        for ib in start {
            let tag = ib.tag.clone();
            let was = dropped.iter().any(|d| d.tag == tag);
            match self.add_inbound(ib).await {
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
