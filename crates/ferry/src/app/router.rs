//! `routing`: rules matched in order; the first match names the outbound; no match -> default.

use crate::common::Network;
use crate::config::reader::{ConfigError, Obj, Result};
use crate::proxy::Session;

/// One condition of a rule (all conditions of a rule must hold).
#[derive(Debug, Clone)]
pub enum Cond {
    InboundTag(Vec<String>),
    Network(Vec<Network>),
}

impl Cond {
    fn matches(&self, s: &Session) -> bool {
        match self {
            Cond::InboundTag(tags) => tags.iter().any(|t| **t == *s.inbound_tag),
            Cond::Network(n) => n.contains(&s.network),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Rule {
    pub conds: Vec<Cond>,
    pub outbound: String,
    pub tag: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct Router {
    pub rules: Vec<Rule>,
}

impl Router {
    /// The outbound tag for a session, or `None` for the default outbound.
    pub fn route(&self, s: &Session) -> Option<&str> {
        self.rules
            .iter()
            .find(|r| r.conds.iter().all(|c| c.matches(s)))
            .map(|r| r.outbound.as_str())
    }

    pub fn parse(o: &Obj<'_>) -> Result<Router> {
        o.ignore(&["domainStrategy"]);
        let mut rules = Vec::new();
        for r in o.objs(&["rules"])? {
            r.ignore(&["type"]);
            let mut conds = Vec::new();
            if let Some(t) = r.str_list("inboundTag")? {
                conds.push(Cond::InboundTag(t));
            }
            if let Some(n) = r.str_list("network")? {
                let mut nets = Vec::new();
                for x in n {
                    match x.to_ascii_lowercase().as_str() {
                        "tcp" => nets.push(Network::Tcp),
                        "udp" => nets.push(Network::Udp),
                        other => {
                            return Err(ConfigError::new(
                                r.key_path("network"),
                                format!("unknown network {other:?}"),
                            ))
                        }
                    }
                }
                conds.push(Cond::Network(nets));
            }
            let outbound = match r.str("outboundTag")? {
                Some(t) => t,
                None if r.has("balancerTag") => {
                    return Err(ConfigError::new(
                        r.key_path("balancerTag"),
                        "balancers are not supported yet",
                    ))
                }
                None => return Err(ConfigError::new(r.path(), "a rule needs an outboundTag")),
            };
            let tag = r.str("ruleTag")?;
            r.finish();
            rules.push(Rule {
                conds,
                outbound,
                tag,
            });
        }
        if o.has("balancers") {
            return Err(ConfigError::new(
                o.key_path("balancers"),
                "balancers are not supported yet",
            ));
        }
        Ok(Router { rules })
    }
}
