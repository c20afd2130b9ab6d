//! Reading `routing`: the domain strategy, the rules with their conditions, and the balancers.

use std::sync::Arc;

use super::rule::{Cond, Rule};
use super::Assets;
use super::{balancer, webhook, DomainSet, DomainStrategy, DomainType, IpSet, PortSet, Router};
use crate::common::Network;
use crate::config::reader::{self, ConfigError, Obj, Result};

impl Router {
    /// Reads `routing`, finding geodata files in the default asset locations.
    pub fn parse(o: &Obj<'_>) -> Result<Router> {
        Self::parse_with(o, &Assets::from_env())
    }

    /// Reads `routing` with geodata files looked up in `assets`.
    pub fn parse_with(o: &Obj<'_>, assets: &Assets) -> Result<Router> {
        let r = Self::parse_parts(o, assets)?;
        for (i, rule) in r.rules.iter().enumerate() {
            if let Some(t) = &rule.balancer {
                if r.balancer(t).is_none() {
                    return Err(ConfigError::new(
                        format!("{}.rules[{i}].balancerTag", o.path()),
                        format!("no balancer is tagged {t:?}"),
                    ));
                }
            }
        }
        Ok(r)
    }

    /// Reads `routing`'s rules and balancers without checking that the balancers the rules
    /// name are among them (the API adds rules naming balancers it already has).
    pub fn parse_parts(o: &Obj<'_>, assets: &Assets) -> Result<Router> {
        let strategy = match o.str("domainStrategy")? {
            None => DomainStrategy::AsIs,
            Some(s) => match s.to_ascii_lowercase().replace(['_', '-'], "").as_str() {
                "asis" | "" => DomainStrategy::AsIs,
                "ipifnonmatch" => DomainStrategy::IpIfNonMatch,
                "ipondemand" => DomainStrategy::IpOnDemand,
                // Xray's router treats UseIP like AsIs.
                "alwaysip" | "useip" => DomainStrategy::AsIs,
                // Xray's router takes any other value as AsIs.
                _ => {
                    o.diag().warn(
                        &o.key_path("domainStrategy"),
                        format!("unknown domain strategy {s:?}; AsIs, as Xray does"),
                    );
                    DomainStrategy::AsIs
                }
            },
        };
        o.ignore(&["domainMatcher"]);
        let mut rules = Vec::new();
        for r in o.objs(&["rules"])? {
            rules.push(parse_rule(&r, assets)?);
            r.finish();
        }
        let mut balancers: Vec<std::sync::Arc<balancer::Balancer>> = Vec::new();
        for b in o.objs(&["balancers"])? {
            let bal = balancer::Balancer::parse(&b)?;
            if balancers.iter().any(|x| x.tag == bal.tag) {
                return Err(ConfigError::new(
                    b.key_path("tag"),
                    format!("duplicate balancer tag {:?}", bal.tag),
                ));
            }
            balancers.push(std::sync::Arc::new(bal));
            b.finish();
        }
        let mut r = Router::new(rules, strategy);
        r.balancers = balancers;
        Ok(r)
    }
}

/// Reads one rule: its conditions, then the outbound or balancer it names.
fn parse_rule(r: &Obj<'_>, assets: &Assets) -> Result<Rule> {
    r.ignore(&["type", "domainMatcher"]);
    let conds = parse_conds(r, assets)?;
    for k in ["vlessRoute", "process"] {
        if r.has(k) {
            return Err(ConfigError::new(
                r.key_path(k),
                format!("rule field {k:?} is not supported yet"),
            ));
        }
    }
    // `outboundTag` wins over `balancerTag`, as in Xray.
    let (outbound, balancer) = match (r.str("outboundTag")?, r.str("balancerTag")?) {
        (Some(t), _) if !t.is_empty() => (t, None),
        (_, Some(b)) if !b.is_empty() => (String::new(), Some(b)),
        _ => {
            return Err(ConfigError::new(
                r.path(),
                "a rule needs an outboundTag or a balancerTag",
            ))
        }
    };
    let tag = r.str("ruleTag")?;
    if conds.is_empty() {
        // Xray refuses such a rule rather than letting it match everything.
        return Err(ConfigError::new(
            r.path(),
            "this rule has no effective fields",
        ));
    }
    let mut rule = Rule::new(conds, outbound, tag);
    rule.balancer = balancer;
    if let Some(w) = r.obj("webhook")? {
        rule.webhook = webhook::Webhook::parse(&w)?.map(Arc::new);
        w.finish();
    }
    Ok(rule)
}

/// A rule's conditions, in the order of its fields.
fn parse_conds(r: &Obj<'_>, assets: &Assets) -> Result<Vec<Cond>> {
    let mut conds = Vec::new();
    if let Some(t) = r.str_list("inboundTag")? {
        conds.push(Cond::InboundTag(t));
    }
    if let Some((p, v)) = r.get("network") {
        let mut nets = Vec::new();
        for x in reader::as_str_list(v, &p)? {
            match x.to_ascii_lowercase().as_str() {
                "tcp" => nets.push(Network::Tcp),
                "udp" => nets.push(Network::Udp),
                other => return Err(ConfigError::new(p, format!("unknown network {other:?}"))),
            }
        }
        conds.push(Cond::Network(nets));
    }
    // Xray joins the two lists when both are given.
    let domain = r.get("domain");
    let domains = r.get("domains");
    if let Some((p, _)) = domain.as_ref().or(domains.as_ref()) {
        let mut list = Vec::new();
        for (q, v) in domain.iter().chain(&domains) {
            list.extend(reader::as_str_list(v, q)?);
        }
        let p = p.clone();
        conds.push(Cond::Domain(DomainSet::parse_with(
            &list,
            &p,
            DomainType::Substr,
            assets,
        )?));
    }
    if let Some((p, v)) = r.get("ip") {
        let list = reader::as_str_list(v, &p)?;
        conds.push(Cond::Ip(IpSet::parse_with(&list, &p, assets)?));
    }
    if let Some((p, v)) = r.get_alias(&["sourceIP", "source"]) {
        let list = reader::as_str_list(v, &p)?;
        conds.push(Cond::Source(IpSet::parse_with(&list, &p, assets)?));
    }
    if let Some((p, v)) = r.get("localIP") {
        let list = reader::as_str_list(v, &p)?;
        conds.push(Cond::LocalIp(IpSet::parse_with(&list, &p, assets)?));
    }
    if let Some((p, v)) = r.get("port") {
        conds.push(Cond::Port(PortSet::parse(v, &p)?));
    }
    if let Some((p, v)) = r.get("sourcePort") {
        conds.push(Cond::SourcePort(PortSet::parse(v, &p)?));
    }
    if let Some((p, v)) = r.get("localPort") {
        conds.push(Cond::LocalPort(PortSet::parse(v, &p)?));
    }
    if let Some((p, v)) = r.get("user") {
        let list = reader::as_str_list(v, &p)?;
        conds.push(Cond::User(list.into_iter().collect()));
    }
    if let Some(p) = r.str_list("protocol")? {
        conds.push(Cond::Protocol(p));
    }
    if let Some(a) = r.obj("attrs")? {
        let want = parse_attrs(&a)?;
        if !want.is_empty() {
            conds.push(Cond::Attrs(want));
        }
    }
    Ok(conds)
}

/// `attrs`: each header (lower-case) with the regular expression its value must meet.
fn parse_attrs(a: &Obj<'_>) -> Result<Vec<(String, regex::Regex)>> {
    let mut want = Vec::new();
    for (k, v) in a.value().as_object().into_iter().flatten() {
        let p = a.key_path(k);
        let re = v
            .as_str()
            .ok_or_else(|| ConfigError::new(p.clone(), "expected a regular expression"))?;
        let re = regex::Regex::new(re)
            .map_err(|e| ConfigError::new(p.clone(), format!("invalid regexp: {e}")))?;
        want.push((k.to_ascii_lowercase(), re));
        a.ignore(&[k]);
    }
    Ok(want)
}
