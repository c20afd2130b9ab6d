//! `routing`: rules matched in order; the first match names the outbound; no match -> default.
//!
//! Every matcher is compiled once when the config is read: `full:` names go into a hash set,
//! `domain:` suffixes into another (a lookup per label), substrings into one literal regex,
//! `regexp:` patterns into one `RegexSet`, and CIDRs into sorted, merged ranges searched by
//! bisection (the matchers live in `crate::matchers`). Routing only awaits
//! when `domainStrategy` asks to resolve a domain destination.
//!
//! [`rule`] holds a rule and its conditions, [`parse`] reads the `routing` object.

use std::net::IpAddr;
use std::time::Duration;

use crate::config::reader::{ConfigError, Result};
use crate::proxy::Session;

pub mod balancer;
mod parse;
mod rule;
pub mod webhook;

use rule::Eval;
pub use rule::{Cond, Rule};

/// The matchers (in their own layer, below the services that use them).
pub use crate::matchers::{
    geodata, Assets, DomainSet, DomainTable, DomainType, IpRanges, IpSet, PortSet,
};

/// `routing.domainStrategy`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DomainStrategy {
    /// Domains only meet domain conditions.
    #[default]
    AsIs,
    /// When no rule matched a domain destination, resolve it and try the rules again.
    IpIfNonMatch,
    /// Resolve a domain destination as soon as a rule with IP conditions is reached.
    IpOnDemand,
}

/// How long routing waits for the system resolver.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Default)]
pub struct Router {
    pub rules: Vec<Rule>,
    pub strategy: DomainStrategy,
    has_ip_rules: bool,
    /// The `dns` object's resolver (the system resolver without one).
    pub dns: Option<std::sync::Arc<crate::app::dns::Dns>>,
    /// `balancers`.
    pub balancers: Vec<std::sync::Arc<balancer::Balancer>>,
    /// `observatory` / `burstObservatory`, which the balancers read.
    pub observatory: Option<std::sync::Arc<crate::app::observatory::Observatory>>,
}

async fn resolve(dns: Option<&crate::app::dns::Dns>, domain: &str, port: u16) -> Vec<IpAddr> {
    if let Some(d) = dns {
        return d.lookup(domain).await;
    }
    match tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((domain, port))).await {
        Ok(Ok(it)) => it.map(|a| a.ip()).collect(),
        Ok(Err(e)) => {
            tracing::debug!("routing: resolving {domain}: {e}");
            Vec::new()
        }
        Err(_) => {
            tracing::debug!("routing: resolving {domain} timed out");
            Vec::new()
        }
    }
}

impl Router {
    /// The first rule a session meets, or `None` for the default outbound. Awaits only when
    /// the domain strategy needs a domain destination resolved.
    pub async fn route(&self, s: &Session) -> Option<&Rule> {
        let domain = match s.route_domain() {
            Some(d) if self.has_ip_rules && self.strategy != DomainStrategy::AsIs => d,
            _ => return self.route_sync(s, None),
        };
        let mut ips: Option<Vec<IpAddr>> = None;
        for r in &self.rules {
            match r.eval(s, ips.as_deref()) {
                Eval::Match => return Some(r),
                Eval::NoMatch => {}
                Eval::NeedIps if self.strategy == DomainStrategy::IpOnDemand => {
                    let v = resolve(self.dns.as_deref(), domain, s.dest.port).await;
                    let hit = r.eval(s, Some(&v)) == Eval::Match;
                    ips = Some(v);
                    if hit {
                        return Some(r);
                    }
                }
                Eval::NeedIps => {}
            }
        }
        if self.strategy == DomainStrategy::IpIfNonMatch {
            let v = resolve(self.dns.as_deref(), domain, s.dest.port).await;
            if !v.is_empty() {
                return self.route_sync(s, Some(&v));
            }
        }
        None
    }

    /// The first rule a session meets, never resolving its domain (the DNS module's own
    /// connections, as Xray's `SkipDNSResolve`).
    pub fn route_unresolved(&self, s: &Session) -> Option<&Rule> {
        self.route_sync(s, None)
    }

    /// Matching without resolving: IP conditions see only IP destinations (or `ips`).
    fn route_sync(&self, s: &Session, ips: Option<&[IpAddr]>) -> Option<&Rule> {
        self.rules.iter().find(|r| r.eval(s, ips) == Eval::Match)
    }

    pub fn new(rules: Vec<Rule>, strategy: DomainStrategy) -> Router {
        let has_ip_rules = rules.iter().any(|r| r.has_ip);
        Router {
            rules,
            strategy,
            has_ip_rules,
            dns: None,
            balancers: Vec::new(),
            observatory: None,
        }
    }

    /// The balancer tagged `tag`.
    pub fn balancer(&self, tag: &str) -> Option<&balancer::Balancer> {
        self.balancers.iter().find(|b| b.tag == tag).map(|b| &**b)
    }

    /// Keeps the balancers and observatory of `old` (rules changed through the API).
    pub fn keep_balancers(mut self, old: &Router) -> Router {
        self.balancers = old.balancers.clone();
        self.observatory = old.observatory.clone();
        self
    }

    /// Attaches the observatory; a balancer that needs one without it is an error.
    pub fn with_observatory(
        mut self,
        obs: Option<std::sync::Arc<crate::app::observatory::Observatory>>,
    ) -> Result<Router> {
        if obs.is_none() {
            if let Some((i, b)) = self
                .balancers
                .iter()
                .enumerate()
                .find(|(_, b)| b.needs_observatory())
            {
                return Err(ConfigError::new(
                    format!("routing.balancers[{i}]"),
                    format!(
                        "balancer {:?} needs an observatory or burstObservatory (its strategy or fallbackTag reads probe results)",
                        b.tag
                    ),
                ));
            }
        }
        self.observatory = obs;
        Ok(self)
    }

    /// The same router resolving through `dns`.
    pub fn with_dns(mut self, dns: Option<std::sync::Arc<crate::app::dns::Dns>>) -> Router {
        self.dns = dns;
        self
    }
}

#[cfg(test)]
mod tests;
