//! Xray-shaped JSON configuration: reading, validation with JSON-path errors, typed results.
//!
//! Every protocol reads its own `settings` through [`reader::Obj`]; this module reads the
//! frame around them (`routing`, `policy`, `stats`, `dns`), [`inbound`] and [`outbound`] read
//! `inbounds` and `outbounds`, [`services`] reads `log`, `metrics` and `api`, and [`merge`]
//! merges several files into one document.

pub mod api;
pub mod headers;
mod inbound;
pub mod kcp;
mod merge;
mod outbound;
mod protocol;
pub mod quic;
/// The JSON reader and comment stripper (in `common`: every layer parses its own settings).
pub use crate::common::{json, reader};
pub mod reality;
pub mod services;
mod sockopt;
pub mod stream;
pub mod tls;
pub mod xhttp;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;

use serde_json::Value;

pub use inbound::{parse_inbound, Inbound, Listen};
pub use merge::{merge, merge_named};
pub use outbound::{parse_outbound, Outbound};
pub use reader::{ConfigError, Diagnostics, Obj};

use crate::app::log::LogConfig;
use crate::app::policy::Policy;
use crate::app::router::Router;
use crate::app::stats::Stats;
use crate::registry::{CounterSource, Outbounds};

/// A whole, validated configuration.
pub struct Config {
    pub log: LogConfig,
    pub inbounds: Vec<Inbound>,
    pub outbounds: Vec<Outbound>,
    pub router: Router,
    pub policy: Policy,
    /// `Some` when the `stats` object is present: the counters every layer adds to.
    pub stats: Option<Arc<Stats>>,
    pub metrics: Option<SocketAddr>,
    /// The outbound registry chained outbounds dial through (filled when the instance starts).
    pub registry: Arc<Outbounds>,
    /// Resolves the counters of inbounds, outbounds and users.
    pub counters: CounterSource,
    /// The gRPC API (`api`), when configured.
    pub api: Option<api::ApiConfig>,
    /// The bridges of the legacy `reverse` object (VLESS Reverse bridges are their outbounds').
    pub bridges: Vec<crate::proxy::reverse::Bridge>,
}

pub use crate::matchers::port::parse_ports;

/// What a reloaded config takes over from the running one, so counters and chained outbounds
/// keep working across the reload.
#[derive(Clone, Default)]
pub struct Reuse {
    /// The running stats: counters keep their values when the new config has `stats` too.
    pub stats: Option<Arc<Stats>>,
    /// The running outbound registry, which chained outbounds and the dispatcher dial through.
    pub registry: Option<Arc<Outbounds>>,
}

impl Config {
    /// Reads a merged JSON document into a config; warnings go to `diag`.
    pub fn from_value(v: &Value, diag: &Diagnostics) -> reader::Result<Config> {
        Config::from_value_reusing(v, diag, &Reuse::default())
    }

    /// [`Config::from_value`] for a reload: the stats and the outbound registry are the
    /// running instance's (see [`Reuse`]).
    pub fn from_value_reusing(
        v: &Value,
        diag: &Diagnostics,
        reuse: &Reuse,
    ) -> reader::Result<Config> {
        let root = Obj::new(v, "", diag)?;
        let log = services::parse_log(&root, diag)?;
        let policy = match root.obj("policy")? {
            Some(p) => {
                let r = Policy::parse(&p)?;
                p.finish();
                r
            }
            None => Policy::default(),
        };
        let stats = match root.obj("stats")? {
            Some(s) => {
                s.finish();
                Some(reuse.stats.clone().unwrap_or_default())
            }
            None => None,
        };
        let counters = CounterSource {
            stats: stats.clone(),
            policy: policy.clone(),
        };
        let (metrics, api, special_outbounds) = services::parse_services(&root, &stats, diag)?;
        let dns = parse_dns(&root, diag)?;
        // The dns outbound resolves with it, or with the system's resolver without one.
        let out_dns = dns
            .clone()
            .unwrap_or_else(|| Arc::new(crate::app::dns::Dns::system()));
        // The registry chained outbounds dial through; the instance fills it.
        let registry = reuse.registry.clone().unwrap_or_default();
        let (mut outbounds, mut tags) =
            outbound::parse_outbounds(&root, &registry, &out_dns, special_outbounds, diag)?;
        let bridges = parse_reverse(&root, &mut outbounds, &mut tags)?;
        let inbounds = inbound::parse_inbounds(&root, &counters, diag)?;
        reverse_user_tags(&root, &mut tags);
        let router = parse_routing(&root, dns, &tags)?;
        root.ignore(&["api", "transport", "fakedns"]);
        root.finish();
        Ok(Config {
            log,
            inbounds,
            outbounds,
            router,
            policy,
            stats,
            metrics,
            registry,
            counters,
            api,
            bridges,
        })
    }
}

/// Reads `fakedns` and `dns`: the DNS the router and the dns outbound resolve with, if any.
fn parse_dns(
    root: &Obj<'_>,
    diag: &Diagnostics,
) -> reader::Result<Option<Arc<crate::app::dns::Dns>>> {
    let fake = match root.get("fakedns") {
        Some((p, v)) => Some(crate::app::dns::fake::FakeDns::parse(v, &p, diag)?),
        None => None,
    };
    let dns = match root.obj("dns")? {
        Some(d) => {
            let dns = crate::app::dns::parse(&d, &crate::app::router::Assets::from_env())?;
            d.finish();
            Some(Arc::new(dns.with_fake(fake)))
        }
        // Pools without a `dns` object: sniffing can still map them (nothing hands them out).
        None => fake.map(|f| Arc::new(crate::app::dns::Dns::system().with_fake(Some(f)))),
    };
    Ok(dns)
}

/// Reads `routing` and the observatory (`observatory` or `burstObservatory`) into the router,
/// and warns of each rule whose outbound is none of `tags`.
fn parse_routing(
    root: &Obj<'_>,
    dns: Option<Arc<crate::app::dns::Dns>>,
    tags: &HashSet<String>,
) -> reader::Result<Router> {
    let router = match root.obj("routing")? {
        Some(r) => {
            let router = Router::parse(&r)?;
            r.finish();
            router
        }
        None => Router::default(),
    }
    .with_dns(dns);
    let mut observatory = None;
    for (k, burst) in [("observatory", false), ("burstObservatory", true)] {
        if let Some(o) = root.obj(k)? {
            if observatory.is_some() {
                return Err(ConfigError::new(
                    o.path(),
                    "only one of observatory and burstObservatory is supported",
                ));
            }
            let obs = if burst {
                crate::app::observatory::Observatory::parse_burst(&o)?
            } else {
                crate::app::observatory::Observatory::parse(&o)?
            };
            o.finish();
            observatory = Some(Arc::new(obs));
        }
    }
    let router = router.with_observatory(observatory)?;
    if let Some((rp, Value::Array(rules))) = root
        .get("routing")
        .and_then(|(p, v)| v.get("rules").map(|r| (p, r)))
    {
        // Xray starts with such a rule and closes what it matches ("non existing outTag"),
        // which is also what an outbound the API adds later fixes: a warning, not an error.
        let _ = rules;
        for (i, rule) in router.rules.iter().enumerate() {
            if rule.balancer.is_none() && !tags.contains(&rule.outbound) {
                root.diag().warn(
                    &format!("{rp}.rules[{i}].outboundTag"),
                    format!(
                        "no outbound is tagged {:?}: what this rule matches is closed",
                        rule.outbound
                    ),
                );
            }
        }
    }
    Ok(router)
}

/// Reads the legacy `reverse` object (Xray v26.3.27 still runs it): each portal becomes an
/// outbound after the configured ones; the bridges are returned for the instance to start.
fn parse_reverse(
    root: &Obj<'_>,
    outbounds: &mut Vec<outbound::Outbound>,
    tags: &mut HashSet<String>,
) -> reader::Result<Vec<crate::proxy::reverse::Bridge>> {
    let Some(r) = root.obj("reverse")? else {
        return Ok(Vec::new());
    };
    let (portals, bridges) = crate::proxy::reverse::parse_legacy(&r)?;
    let path = r.path().to_string();
    r.finish();
    for (i, (tag, domain)) in portals.into_iter().enumerate() {
        if !tags.insert(tag.clone()) {
            return Err(ConfigError::new(
                format!("{path}.portals[{i}].tag"),
                format!("outbound tag {tag:?} is already taken"),
            ));
        }
        outbounds.push(outbound::Outbound {
            handler: crate::proxy::reverse::Portal::legacy(&tag, &domain),
            tag,
            protocol: crate::app::dispatcher::reverse::PORTAL.into(),
            bridge: None,
        });
    }
    Ok(bridges)
}

/// The outbound tags VLESS Reverse portals register at run time (`clients[].reverse.tag`), so
/// rules naming them are not warned about.
fn reverse_user_tags(root: &Obj<'_>, tags: &mut HashSet<String>) {
    let Some((_, Value::Array(ibs))) = root.get("inbounds") else {
        return;
    };
    for ib in ibs {
        let clients = ib.pointer("/settings/clients").and_then(Value::as_array);
        for c in clients.into_iter().flatten() {
            if let Some(t) = c.pointer("/reverse/tag").and_then(Value::as_str) {
                tags.insert(t.to_string());
            }
        }
    }
}

#[cfg(test)]
mod tests;
