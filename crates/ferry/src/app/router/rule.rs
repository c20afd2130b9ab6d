//! A routing rule: its conditions (all must hold), and what it names.

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::Arc;

use super::webhook;
use super::{DomainSet, IpSet, PortSet};
use crate::common::{Address, Network};
use crate::proxy::Session;

/// One condition of a rule (all conditions of a rule must hold).
#[derive(Debug, Clone)]
pub enum Cond {
    InboundTag(Vec<String>),
    Network(Vec<Network>),
    Port(PortSet),
    SourcePort(PortSet),
    LocalPort(PortSet),
    User(HashSet<String>),
    Source(IpSet),
    LocalIp(IpSet),
    Domain(DomainSet),
    /// Destination IP; a domain destination meets it only once resolved.
    Ip(IpSet),
    /// Sniffed protocol, by prefix (`http` meets `http1`).
    Protocol(Vec<String>),
    /// Sniffed HTTP attributes: every (lower-case key, regex) must meet its header.
    Attrs(Vec<(String, regex::Regex)>),
}

impl Cond {
    /// Cheaper conditions are checked first.
    fn cost(&self) -> u8 {
        match self {
            Cond::Network(_) | Cond::Port(_) | Cond::SourcePort(_) | Cond::LocalPort(_) => 0,
            Cond::InboundTag(_) | Cond::User(_) | Cond::Protocol(_) => 1,
            Cond::Source(_) | Cond::LocalIp(_) => 2,
            Cond::Domain(_) | Cond::Attrs(_) => 3,
            Cond::Ip(_) => 4,
        }
    }

    fn matches(&self, s: &Session, ips: Option<&[IpAddr]>) -> bool {
        match self {
            Cond::InboundTag(tags) => tags.iter().any(|t| **t == *s.inbound_tag),
            Cond::Network(n) => n.contains(&s.network),
            Cond::Port(p) => p.contains(s.dest.port),
            Cond::SourcePort(p) => p.contains(s.source.port()),
            Cond::LocalPort(p) => p.contains(s.local.port()),
            Cond::User(u) => s.user.as_ref().is_some_and(|u2| u.contains(&*u2.email)),
            Cond::Source(set) => s.source.ip().is_some_and(|ip| set.contains(ip)),
            Cond::LocalIp(set) => s.local.ip().is_some_and(|ip| set.contains(ip)),
            Cond::Domain(d) => s.route_domain().is_some_and(|x| d.matches(x)),
            // Resolved IPs when there are some; else the destination's own IP.
            Cond::Ip(set) => match (ips, &s.dest.addr) {
                (Some(v), _) if !v.is_empty() => v.iter().any(|ip| set.contains(*ip)),
                (_, Address::Ip(ip)) => set.contains(*ip),
                _ => false,
            },
            Cond::Protocol(p) => s.sniffed.as_ref().is_some_and(|x| {
                !x.protocol.is_empty() && p.iter().any(|p| x.protocol.starts_with(p.as_str()))
            }),
            Cond::Attrs(want) => s.sniffed.as_ref().is_some_and(|x| {
                want.iter().all(|(k, re)| {
                    x.attrs
                        .iter()
                        .find(|(hk, _)| hk == k)
                        .is_some_and(|(_, v)| re.is_match(v))
                })
            }),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Rule {
    pub conds: Vec<Cond>,
    /// The outbound tag (empty when the rule names a balancer).
    pub outbound: String,
    /// `balancerTag`, when the rule names a balancer instead of an outbound.
    pub balancer: Option<String>,
    pub tag: Option<String>,
    /// `webhook`: told when this rule picks a connection's outbound.
    pub webhook: Option<Arc<webhook::Webhook>>,
    pub(super) has_ip: bool,
}

/// Result of checking one rule.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Eval {
    Match,
    NoMatch,
    /// Everything else holds; the destination IP condition needs the domain resolved.
    NeedIps,
}

impl Rule {
    pub fn new(conds: Vec<Cond>, outbound: String, tag: Option<String>) -> Rule {
        let mut conds = conds;
        conds.sort_by_key(Cond::cost);
        let has_ip = conds.iter().any(|c| matches!(c, Cond::Ip(_)));
        Rule {
            conds,
            outbound,
            balancer: None,
            tag,
            webhook: None,
            has_ip,
        }
    }

    pub(super) fn eval(&self, s: &Session, ips: Option<&[IpAddr]>) -> Eval {
        let mut need = false;
        for c in &self.conds {
            // A domain destination, or a route-only sniffed name, meets IP conditions once
            // resolved (an IP destination also meets them by its own IP first).
            if let (Cond::Ip(set), None) = (c, ips) {
                let own = matches!(&s.dest.addr, Address::Ip(ip) if set.contains(*ip));
                if !own && s.route_domain().is_some() {
                    need = true;
                    continue;
                }
            }
            if !c.matches(s, ips) {
                return Eval::NoMatch;
            }
        }
        if need {
            Eval::NeedIps
        } else {
            Eval::Match
        }
    }
}
