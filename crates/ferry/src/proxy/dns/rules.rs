//! The `dns` outbound's rules: reading `rules` (or the legacy `nonIPQuery` / `blockTypes`),
//! and what each message gets.

use serde_json::Value;

use super::DnsOutbound;
use crate::common::dns_message::{self as message, Query, A, AAAA};
use crate::common::{Destination, Network};
use crate::config::reader::{self, ConfigError, Obj, Result};
use crate::matchers::{DomainSet, DomainType};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Action {
    Direct,
    Drop,
    Return,
    Hijack,
}

/// One `rules` entry.
#[derive(Debug)]
pub(super) struct Rule {
    action: Action,
    /// Inclusive ranges of query types; empty matches every type.
    qtypes: Vec<(u16, u16)>,
    domains: Option<DomainSet>,
    rcode: u8,
}

impl Rule {
    fn applies(&self, q: &Query) -> bool {
        (self.qtypes.is_empty()
            || self
                .qtypes
                .iter()
                .any(|(a, b)| (*a..=*b).contains(&q.qtype)))
            && self.domains.as_ref().is_none_or(|d| d.matches(&q.name))
    }
}

fn parse_rcode(o: &Obj<'_>) -> Result<u8> {
    match o.u64("rCode")? {
        None => Ok(0),
        Some(n) if n <= 65535 => Ok((n & 0x0f) as u8),
        Some(n) => Err(ConfigError::new(
            o.key_path("rCode"),
            format!("rCode out of range: {n}"),
        )),
    }
}

pub(super) fn parse_rule(o: &Obj<'_>) -> Result<Rule> {
    let action = match o.req_str("action")?.to_ascii_lowercase().as_str() {
        "direct" => Action::Direct,
        "drop" => Action::Drop,
        "return" => Action::Return,
        "hijack" => Action::Hijack,
        other => {
            return Err(ConfigError::new(
                o.key_path("action"),
                format!("unknown action {other:?} (direct, drop, return or hijack)"),
            ))
        }
    };
    let qtypes = match o.get("qType") {
        Some((p, v)) => crate::config::parse_ports(v, &p)?,
        None => Vec::new(),
    };
    let domains = match o.get("domain") {
        Some((p, v)) => {
            let list = reader::as_str_list(v, &p)?;
            let assets = crate::app::router::Assets::from_env();
            Some(DomainSet::parse_with(
                &list,
                &p,
                DomainType::Substr,
                &assets,
            )?)
        }
        None => None,
    };
    Ok(Rule {
        action,
        qtypes,
        domains,
        rcode: parse_rcode(o)?,
    })
}

/// The rules Xray builds from `nonIPQuery` and `blockTypes`.
pub(super) fn legacy_rules(o: &Obj<'_>) -> Result<Vec<Rule>> {
    let mode = o
        .str("nonIPQuery")?
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| "reject".into());
    let (other, rcode) = match mode.as_str() {
        "reject" => (Action::Return, 5),
        "drop" => (Action::Drop, 0),
        "skip" => (Action::Direct, 0),
        m => {
            return Err(ConfigError::new(
                o.key_path("nonIPQuery"),
                format!("unknown nonIPQuery {m:?} (reject, drop or skip)"),
            ))
        }
    };
    let mut rules = Vec::new();
    if let Some((p, v)) = o.get("blockTypes") {
        let Value::Array(items) = v else {
            return Err(ConfigError::new(p, "expected an array of query types"));
        };
        let mut qtypes = Vec::new();
        for (i, t) in items.iter().enumerate() {
            let t = t
                .as_u64()
                .and_then(|t| u16::try_from(t).ok())
                .ok_or_else(|| {
                    ConfigError::new(
                        format!("{p}[{i}]"),
                        format!("{} is not a query type (0-65535)", reader::show(t)),
                    )
                })?;
            qtypes.push((t, t));
        }
        if !qtypes.is_empty() {
            let reject = mode == "reject";
            rules.push(Rule {
                action: if reject { Action::Return } else { Action::Drop },
                qtypes,
                domains: None,
                rcode: if reject { 5 } else { 0 },
            });
        }
    }
    rules.push(Rule {
        action: Action::Hijack,
        qtypes: vec![(A, A), (AAAA, AAAA)],
        domains: None,
        rcode: 0,
    });
    rules.push(Rule {
        action: other,
        qtypes: Vec::new(),
        domains: None,
        rcode,
    });
    Ok(rules)
}

/// What to do with one message.
pub(super) enum Step {
    /// Answer at once.
    Reply(Vec<u8>),
    /// Resolve, then answer.
    Lookup(Query),
    /// Send upstream unchanged.
    Forward,
    Drop,
}

impl DnsOutbound {
    pub(super) fn decide(&self, msg: &[u8]) -> Step {
        let Some(q) = message::parse_query(msg) else {
            tracing::debug!("dns out: a message without a readable question, dropped");
            return Step::Drop;
        };
        let (action, rcode) = self
            .rules
            .iter()
            .find(|r| r.applies(&q))
            .map(|r| (r.action, r.rcode))
            .unwrap_or(if q.qtype == A || q.qtype == AAAA {
                (Action::Hijack, 0)
            } else {
                (Action::Return, 0)
            });
        match action {
            Action::Drop => {
                tracing::info!("dns out: dropped type {} query for {}", q.qtype, q.name);
                Step::Drop
            }
            Action::Return => {
                tracing::info!(
                    "dns out: answered type {} query for {} with rcode {rcode}",
                    q.qtype,
                    q.name
                );
                Step::Reply(message::reply(&q, rcode, &[], 0))
            }
            Action::Hijack if q.qtype == A || q.qtype == AAAA => Step::Lookup(q),
            Action::Hijack => {
                tracing::warn!(
                    "dns out: only A and AAAA can be hijacked; type {} query for {} answered with rcode {rcode}",
                    q.qtype,
                    q.name
                );
                Step::Reply(message::reply(&q, rcode, &[], 0))
            }
            Action::Direct => Step::Forward,
        }
    }

    /// Where direct queries go, and over which network.
    pub(super) fn upstream_dest(
        &self,
        dest: &Destination,
        source: Network,
    ) -> (Destination, Network) {
        let mut d = dest.clone();
        if let Some(a) = &self.address {
            d.addr = a.clone();
        }
        if let Some(p) = self.port {
            d.port = p;
        }
        (d, self.network.unwrap_or(source))
    }
}
