//! `routing`: rules matched in order; the first match names the outbound; no match -> default.
//!
//! Every matcher is compiled once when the config is read: `full:` names go into a hash set,
//! `domain:` suffixes into another (a lookup per label), substrings into one literal regex,
//! `regexp:` patterns into one `RegexSet`, and CIDRs into sorted, merged ranges searched by
//! bisection (the matchers live in `crate::matchers`). Routing only awaits
//! when `domainStrategy` asks to resolve a domain destination.

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::common::{Address, Network};
use crate::config::reader::{self, ConfigError, Obj, Result};
use crate::proxy::Session;

pub mod balancer;
pub mod webhook;

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

// ---------------------------------------------------------------- rules

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
    has_ip: bool,
}

/// Result of checking one rule.
#[derive(Debug, PartialEq, Eq)]
enum Eval {
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

    fn eval(&self, s: &Session, ips: Option<&[IpAddr]>) -> Eval {
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

fn parse_rule(r: &Obj<'_>, assets: &Assets) -> Result<Rule> {
    r.ignore(&["type", "domainMatcher"]);
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
        if !want.is_empty() {
            conds.push(Cond::Attrs(want));
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::Destination;
    use crate::config::Diagnostics;
    use serde_json::{json, Value};
    use std::net::SocketAddr;

    fn sess(dest: &str) -> Session {
        Session {
            inbound_tag: "in".into(),
            source: "10.1.2.3:4444".parse().unwrap(),
            local: "127.0.0.1:1080".parse().unwrap(),
            dest: Destination::parse(dest).unwrap(),
            network: Network::Tcp,
            user: None,
            protocol: "test",
            sniffed: None,
        }
    }

    fn router(v: Value) -> Result<Router> {
        let d = Diagnostics::default();
        let o = Obj::new(&v, "routing", &d)?;
        Router::parse(&o)
    }

    fn route(r: &Router, s: &Session) -> Option<String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(r.route(s)).map(|r| r.outbound.clone())
    }

    #[test]
    fn missing_geo_files_are_an_error_naming_the_path() {
        let empty = std::env::temp_dir().join(format!("ferry-nogeo-{}", std::process::id()));
        std::fs::create_dir_all(&empty).unwrap();
        let assets = Assets::only(&empty);
        let parse = |v: Value| {
            let d = Diagnostics::default();
            let o = Obj::new(&v, "routing", &d)?;
            Router::parse_with(&o, &assets)
        };
        let e =
            parse(json!({"rules": [{"domain": ["full:a.com", "geosite:cn"], "outboundTag": "x"}]}))
                .unwrap_err();
        assert_eq!(e.path, "routing.rules[0].domain[1]");
        assert!(e.msg.contains("geosite.dat"), "{e}");
        let e =
            parse(json!({"rules": [{"ip": ["geoip:private"], "outboundTag": "x"}]})).unwrap_err();
        assert_eq!(e.path, "routing.rules[0].ip[0]");
        let e = parse(json!({"rules": [{"domains": ["ext:h2y.dat:ads"], "outboundTag": "x"}]}))
            .unwrap_err();
        assert_eq!(e.path, "routing.rules[0].domains[0]");
        assert!(e.msg.contains("h2y.dat"), "{e}");
    }

    #[test]
    fn geo_rules_route() {
        let dir = geodata::tests::fixture();
        let d = Diagnostics::default();
        let v = json!({"rules": [
            {"ip": ["geoip:private"], "outboundTag": "private"},
            {"domain": ["geosite:google@ads"], "outboundTag": "ads"},
            {"domain": ["geosite:google", "geosite:cn"], "outboundTag": "site"},
            {"ip": ["geoip:!cn"], "outboundTag": "notcn"},
            {"source": ["ext:ext/custom.dat:office"], "outboundTag": "office"}
        ]});
        let o = Obj::new(&v, "routing", &d).unwrap();
        let r = Router::parse_with(&o, &Assets::only(&dir)).unwrap();
        assert_eq!(route(&r, &sess("10.0.0.1:80")).as_deref(), Some("private"));
        assert_eq!(
            route(&r, &sess("ads.google.com:80")).as_deref(),
            Some("ads")
        );
        assert_eq!(
            route(&r, &sess("www.google.com:80")).as_deref(),
            Some("site")
        );
        assert_eq!(route(&r, &sess("x.cn:80")).as_deref(), Some("site"));
        assert_eq!(route(&r, &sess("9.9.9.9:80")).as_deref(), Some("notcn"));
        assert_eq!(route(&r, &sess("1.0.1.1:80")), None);
        let mut s = sess("1.0.1.1:80");
        s.source = "172.16.0.9:1".parse::<SocketAddr>().unwrap().into();
        assert_eq!(route(&r, &s).as_deref(), Some("office"));
    }

    #[test]
    fn each_rule_field_routes() {
        let r = router(json!({"rules": [
            {"type": "field", "inboundTag": ["other"], "outboundTag": "tag"},
            {"network": "udp", "outboundTag": "udp"},
            {"user": ["a@b.c"], "outboundTag": "user"},
            {"domain": ["full:x.com"], "outboundTag": "full"},
            {"domain": ["domain:y.com"], "outboundTag": "suffix"},
            {"ip": ["1.2.3.0/24", "2001:db8::/32"], "outboundTag": "ip"},
            {"port": "7000-7100", "outboundTag": "port"},
            {"sourcePort": 5555, "outboundTag": "sport"},
            {"source": ["10.9.0.0/16"], "outboundTag": "src"},
            {"sourceIP": ["10.8.0.1"], "outboundTag": "src2"},
            {"ruleTag": "t", "domain": ["regexp:^re\\."], "outboundTag": "re"}
        ]}))
        .unwrap();
        let mut s = sess("a.com:80");
        assert_eq!(route(&r, &s), None, "no match -> default");
        s.inbound_tag = "other".into();
        assert_eq!(route(&r, &s).as_deref(), Some("tag"));
        let mut s = sess("a.com:80");
        s.network = Network::Udp;
        assert_eq!(route(&r, &s).as_deref(), Some("udp"));
        let mut s = sess("a.com:80");
        s.user = Some(crate::proxy::User::new("a@b.c", 0));
        assert_eq!(route(&r, &s).as_deref(), Some("user"));
        assert_eq!(route(&r, &sess("x.com:1")).as_deref(), Some("full"));
        assert_eq!(route(&r, &sess("www.x.com:1")), None);
        assert_eq!(route(&r, &sess("www.y.com:1")).as_deref(), Some("suffix"));
        assert_eq!(route(&r, &sess("1.2.3.4:1")).as_deref(), Some("ip"));
        assert_eq!(route(&r, &sess("[2001:db8::1]:1")).as_deref(), Some("ip"));
        assert_eq!(route(&r, &sess("a.com:7050")).as_deref(), Some("port"));
        let mut s = sess("a.com:1");
        s.source = "10.0.0.1:5555".parse::<SocketAddr>().unwrap().into();
        assert_eq!(route(&r, &s).as_deref(), Some("sport"));
        s.source = "10.9.3.3:1".parse::<SocketAddr>().unwrap().into();
        assert_eq!(route(&r, &s).as_deref(), Some("src"));
        s.source = "10.8.0.1:1".parse::<SocketAddr>().unwrap().into();
        assert_eq!(route(&r, &s).as_deref(), Some("src2"));
        let rule = rt_route(&r, &sess("re.example:1")).unwrap();
        assert_eq!((rule.0.as_str(), rule.1.as_deref()), ("re", Some("t")));
    }

    fn rt_route(r: &Router, s: &Session) -> Option<(String, Option<String>)> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(r.route(s))
            .map(|r| (r.outbound.clone(), r.tag.clone()))
    }

    #[test]
    fn conditions_are_and_lists_are_or_first_match_wins() {
        let r = router(json!({"rules": [
            {"domain": ["domain:a.com", "full:b.com"], "port": 443, "outboundTag": "first"},
            {"domain": ["domain:a.com"], "outboundTag": "second"},
            {"port": "443", "outboundTag": "third"}
        ]}))
        .unwrap();
        assert_eq!(route(&r, &sess("www.a.com:443")).as_deref(), Some("first"));
        assert_eq!(route(&r, &sess("b.com:443")).as_deref(), Some("first"));
        assert_eq!(route(&r, &sess("www.a.com:80")).as_deref(), Some("second"));
        assert_eq!(route(&r, &sess("c.com:443")).as_deref(), Some("third"));
        assert_eq!(route(&r, &sess("c.com:80")), None);
    }

    #[test]
    fn domain_strategy_resolves_localhost() {
        let rules = json!([
            {"domain": ["full:nomatch.invalid"], "outboundTag": "d"},
            {"ip": ["127.0.0.0/8", "::1"], "outboundTag": "loop"}
        ]);
        let asis = router(json!({"rules": rules})).unwrap();
        assert_eq!(route(&asis, &sess("localhost:80")), None);
        for st in ["IPIfNonMatch", "IPOnDemand"] {
            let r = router(json!({"domainStrategy": st, "rules": rules})).unwrap();
            assert_eq!(
                route(&r, &sess("localhost:80")).as_deref(),
                Some("loop"),
                "{st}"
            );
            assert_eq!(
                route(&r, &sess("nomatch.invalid:80")).as_deref(),
                Some("d"),
                "{st}"
            );
        }
        // An unknown strategy is AsIs, as in Xray, with a warning naming it.
        let d = Diagnostics::default();
        let v = json!({"domainStrategy": "Sometimes"});
        let r = Router::parse(&Obj::new(&v, "routing", &d).unwrap()).unwrap();
        assert!(matches!(r.strategy, DomainStrategy::AsIs));
        let w = d.take();
        assert!(
            w.iter()
                .any(|w| w.starts_with("routing.domainStrategy: unknown")),
            "{w:?}"
        );
    }

    #[test]
    fn ip_on_demand_resolves_in_rule_order() {
        // The IP rule comes first, so IPOnDemand takes it; IPIfNonMatch prefers the domain rule.
        let rules = json!([
            {"ip": ["127.0.0.0/8", "::1"], "outboundTag": "ip"},
            {"domain": ["full:localhost"], "outboundTag": "dom"}
        ]);
        let r = router(json!({"domainStrategy": "IPOnDemand", "rules": rules})).unwrap();
        assert_eq!(route(&r, &sess("localhost:80")).as_deref(), Some("ip"));
        let r = router(json!({"domainStrategy": "IPIfNonMatch", "rules": rules})).unwrap();
        assert_eq!(route(&r, &sess("localhost:80")).as_deref(), Some("dom"));
    }
}
