//! `routing`: rules matched in order; the first match names the outbound; no match -> default.
//!
//! Every matcher is compiled once when the config is read: `full:` names go into a hash set,
//! `domain:` suffixes into another (a lookup per label), substrings into one literal regex,
//! `regexp:` patterns into one `RegexSet`, and CIDRs into sorted, merged ranges searched by
//! bisection. Routing only awaits when `domainStrategy` asks to resolve a domain destination.

use std::borrow::Cow;
use std::collections::HashSet;
use std::net::IpAddr;
use std::time::Duration;

use regex::{Regex, RegexSet};
use serde_json::Value;

use crate::common::{Address, Network};
use crate::config::reader::{self, ConfigError, Obj, Result};
use crate::proxy::Session;

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

// ---------------------------------------------------------------- domains

/// A compiled set of domain patterns (Xray's plain / `full:` / `domain:` / `keyword:` /
/// `regexp:` / `dotless:`). Matching is on the lower-cased domain, as in Xray.
#[derive(Debug, Clone, Default)]
pub struct DomainSet {
    full: HashSet<String>,
    suffix: HashSet<String>,
    substr: Option<Regex>,
    regex: Option<RegexSet>,
}

impl DomainSet {
    /// Compiles the patterns of one rule; `path` names the list for errors.
    pub fn parse(items: &[String], path: &str) -> Result<DomainSet> {
        let mut d = DomainSet::default();
        let mut substr = Vec::new();
        let mut regexps = Vec::new();
        for (i, raw) in items.iter().enumerate() {
            let p = format!("{path}[{i}]");
            let s = raw.trim();
            let (kind, val) = match s.split_once(':') {
                Some((k, v))
                    if !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphabetic() || b == b'-') =>
                {
                    (k.to_ascii_lowercase(), v)
                }
                _ => (String::new(), s),
            };
            match kind.as_str() {
                "" | "keyword" => {
                    if val.is_empty() {
                        return Err(ConfigError::new(p, "empty domain pattern"));
                    }
                    substr.push(regex::escape(&val.to_ascii_lowercase()));
                }
                "full" => {
                    d.full.insert(val.to_ascii_lowercase());
                }
                "domain" => {
                    let v = val.trim_start_matches('.').to_ascii_lowercase();
                    if v.is_empty() {
                        return Err(ConfigError::new(p, "empty domain pattern"));
                    }
                    d.suffix.insert(v);
                }
                "regexp" => {
                    Regex::new(val).map_err(|e| {
                        ConfigError::new(p.clone(), format!("invalid regexp {val:?}: {e}"))
                    })?;
                    regexps.push(val.to_string());
                }
                "dotless" => {
                    if val.contains('.') {
                        return Err(ConfigError::new(
                            p,
                            "a dotless: pattern must not contain a dot",
                        ));
                    }
                    regexps.push(format!(
                        "^[^.]*{}[^.]*$",
                        regex::escape(&val.to_ascii_lowercase())
                    ));
                }
                "geosite" | "ext" | "ext-domain" => {
                    return Err(ConfigError::new(
                        p,
                        format!("{s:?}: geosite/geoip data files are not supported yet"),
                    ))
                }
                _ => {
                    // Not a known prefix (e.g. "localhost:8080"-like text): a plain substring.
                    substr.push(regex::escape(&s.to_ascii_lowercase()));
                }
            }
        }
        if !substr.is_empty() {
            d.substr = Some(
                Regex::new(&substr.join("|"))
                    .map_err(|e| ConfigError::new(path, format!("domain keywords: {e}")))?,
            );
        }
        if !regexps.is_empty() {
            d.regex = Some(
                RegexSet::new(&regexps)
                    .map_err(|e| ConfigError::new(path, format!("domain regexps: {e}")))?,
            );
        }
        Ok(d)
    }

    /// Whether `domain` (any case) meets one of the patterns.
    pub fn matches(&self, domain: &str) -> bool {
        let domain: Cow<'_, str> = if domain.bytes().any(|b| b.is_ascii_uppercase()) {
            Cow::Owned(domain.to_ascii_lowercase())
        } else {
            Cow::Borrowed(domain)
        };
        let d = domain.as_ref();
        if !self.full.is_empty() && self.full.contains(d) {
            return true;
        }
        if !self.suffix.is_empty() {
            let mut rest = d;
            loop {
                if self.suffix.contains(rest) {
                    return true;
                }
                match rest.find('.') {
                    Some(i) => rest = &rest[i + 1..],
                    None => break,
                }
            }
        }
        if let Some(r) = &self.substr {
            if r.is_match(d) {
                return true;
            }
        }
        if let Some(r) = &self.regex {
            if r.is_match(d) {
                return true;
            }
        }
        false
    }
}

// ---------------------------------------------------------------- IPs

/// IPs and CIDRs as sorted, merged ranges.
#[derive(Debug, Clone, Default)]
pub struct IpSet {
    v4: Vec<(u32, u32)>,
    v6: Vec<(u128, u128)>,
}

fn merge<T: Ord + Copy>(mut v: Vec<(T, T)>, next: impl Fn(T) -> Option<T>) -> Vec<(T, T)> {
    v.sort_unstable();
    let mut out: Vec<(T, T)> = Vec::with_capacity(v.len());
    for (a, b) in v {
        if let Some(last) = out.last_mut() {
            if next(last.1).is_none_or(|n| a <= n) {
                if b > last.1 {
                    last.1 = b;
                }
                continue;
            }
        }
        out.push((a, b));
    }
    out
}

fn in_ranges<T: Ord + Copy>(v: &[(T, T)], x: T) -> bool {
    // The last range starting at or before x.
    let i = v.partition_point(|(a, _)| *a <= x);
    i > 0 && v.get(i - 1).is_some_and(|(_, b)| x <= *b)
}

/// Maps `::ffff:a.b.c.d` to `a.b.c.d` so IPv4 rules see it.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    }
}

impl IpSet {
    /// Reads `IP` and `IP/len` entries; `geoip:`/`ext:` are an error naming the entry.
    pub fn parse(items: &[String], path: &str) -> Result<IpSet> {
        let (mut v4, mut v6) = (Vec::new(), Vec::new());
        for (i, raw) in items.iter().enumerate() {
            let p = format!("{path}[{i}]");
            let s = raw.trim();
            let lower = s.to_ascii_lowercase();
            if lower.starts_with("geoip:")
                || lower.starts_with("ext:")
                || lower.starts_with("ext-ip:")
            {
                return Err(ConfigError::new(
                    p,
                    format!("{s:?}: geosite/geoip data files are not supported yet"),
                ));
            }
            let bad = || ConfigError::new(p.clone(), format!("{s:?} is not an IP or CIDR"));
            let (ip, len) = match s.split_once('/') {
                Some((ip, len)) => (
                    ip.parse::<IpAddr>().map_err(|_| bad())?,
                    Some(len.parse::<u8>().map_err(|_| bad())?),
                ),
                None => (s.parse::<IpAddr>().map_err(|_| bad())?, None),
            };
            match canonical(ip) {
                IpAddr::V4(a) => {
                    let len = match (ip, len) {
                        // A v4-mapped CIDR counts its prefix in IPv6 bits.
                        (IpAddr::V6(_), Some(l)) => l.checked_sub(96).ok_or_else(bad)?,
                        (_, l) => l.unwrap_or(32),
                    };
                    if len > 32 {
                        return Err(bad());
                    }
                    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
                    let start = u32::from(a) & mask;
                    v4.push((start, start | !mask));
                }
                IpAddr::V6(a) => {
                    let len = len.unwrap_or(128);
                    if len > 128 {
                        return Err(bad());
                    }
                    let mask = if len == 0 {
                        0
                    } else {
                        u128::MAX << (128 - len)
                    };
                    let start = u128::from(a) & mask;
                    v6.push((start, start | !mask));
                }
            }
        }
        Ok(IpSet {
            v4: merge(v4, |x: u32| x.checked_add(1)),
            v6: merge(v6, |x: u128| x.checked_add(1)),
        })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        match canonical(ip) {
            IpAddr::V4(a) => in_ranges(&self.v4, u32::from(a)),
            IpAddr::V6(a) => in_ranges(&self.v6, u128::from(a)),
        }
    }
}

// ---------------------------------------------------------------- ports

/// Port ranges (`53`, `"1000-2000"`, `"53,443,1000-2000"`, or a list of those).
#[derive(Debug, Clone, Default)]
pub struct PortSet(Vec<(u16, u16)>);

impl PortSet {
    pub fn parse(v: &Value, path: &str) -> Result<PortSet> {
        let mut out = Vec::new();
        match v {
            Value::Array(items) => {
                for (i, it) in items.iter().enumerate() {
                    out.extend(crate::config::parse_ports(it, &format!("{path}[{i}]"))?);
                }
            }
            other => out.extend(crate::config::parse_ports(other, path)?),
        }
        Ok(PortSet(merge(out, |x: u16| x.checked_add(1))))
    }

    pub fn contains(&self, p: u16) -> bool {
        in_ranges(&self.0, p)
    }
}

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
}

impl Cond {
    /// Cheaper conditions are checked first.
    fn cost(&self) -> u8 {
        match self {
            Cond::Network(_) | Cond::Port(_) | Cond::SourcePort(_) | Cond::LocalPort(_) => 0,
            Cond::InboundTag(_) | Cond::User(_) => 1,
            Cond::Source(_) | Cond::LocalIp(_) => 2,
            Cond::Domain(_) => 3,
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
            Cond::Domain(d) => s.dest.addr.domain().is_some_and(|x| d.matches(x)),
            Cond::Ip(set) => match &s.dest.addr {
                Address::Ip(ip) => set.contains(*ip),
                Address::Domain(_) => ips.is_some_and(|v| v.iter().any(|ip| set.contains(*ip))),
            },
        }
    }
}

#[derive(Debug, Clone)]
pub struct Rule {
    pub conds: Vec<Cond>,
    pub outbound: String,
    pub tag: Option<String>,
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
            tag,
            has_ip,
        }
    }

    fn eval(&self, s: &Session, ips: Option<&[IpAddr]>) -> Eval {
        let mut need = false;
        for c in &self.conds {
            if let (Cond::Ip(_), Address::Domain(_), None) = (c, &s.dest.addr, ips) {
                need = true;
                continue;
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
}

async fn resolve(domain: &str, port: u16) -> Vec<IpAddr> {
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
        let domain = match &s.dest.addr {
            Address::Domain(d) if self.has_ip_rules && self.strategy != DomainStrategy::AsIs => d,
            _ => return self.route_sync(s, None),
        };
        let mut ips: Option<Vec<IpAddr>> = None;
        for r in &self.rules {
            match r.eval(s, ips.as_deref()) {
                Eval::Match => return Some(r),
                Eval::NoMatch => {}
                Eval::NeedIps if self.strategy == DomainStrategy::IpOnDemand => {
                    let v = resolve(domain, s.dest.port).await;
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
            let v = resolve(domain, s.dest.port).await;
            if !v.is_empty() {
                return self.route_sync(s, Some(&v));
            }
        }
        None
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
        }
    }

    pub fn parse(o: &Obj<'_>) -> Result<Router> {
        let strategy = match o.str("domainStrategy")? {
            None => DomainStrategy::AsIs,
            Some(s) => match s.to_ascii_lowercase().replace(['_', '-'], "").as_str() {
                "asis" | "" => DomainStrategy::AsIs,
                "ipifnonmatch" => DomainStrategy::IpIfNonMatch,
                "ipondemand" => DomainStrategy::IpOnDemand,
                // Xray's router treats UseIP like AsIs.
                "alwaysip" | "useip" => DomainStrategy::AsIs,
                other => {
                    return Err(ConfigError::new(
                        o.key_path("domainStrategy"),
                        format!("unknown domain strategy {other:?}"),
                    ))
                }
            },
        };
        o.ignore(&["domainMatcher"]);
        let mut rules = Vec::new();
        for r in o.objs(&["rules"])? {
            rules.push(parse_rule(&r)?);
            r.finish();
        }
        if o.has("balancers") {
            return Err(ConfigError::new(
                o.key_path("balancers"),
                "balancers are not supported yet",
            ));
        }
        Ok(Router::new(rules, strategy))
    }
}

fn parse_rule(r: &Obj<'_>) -> Result<Rule> {
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
    if let Some((p, v)) = r.get_alias(&["domain", "domains"]) {
        let list = reader::as_str_list(v, &p)?;
        conds.push(Cond::Domain(DomainSet::parse(&list, &p)?));
    }
    if let Some((p, v)) = r.get("ip") {
        let list = reader::as_str_list(v, &p)?;
        conds.push(Cond::Ip(IpSet::parse(&list, &p)?));
    }
    if let Some((p, v)) = r.get_alias(&["source", "sourceIP"]) {
        let list = reader::as_str_list(v, &p)?;
        conds.push(Cond::Source(IpSet::parse(&list, &p)?));
    }
    if let Some((p, v)) = r.get("localIP") {
        let list = reader::as_str_list(v, &p)?;
        conds.push(Cond::LocalIp(IpSet::parse(&list, &p)?));
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
    if r.has("protocol") {
        return Err(ConfigError::new(
            r.key_path("protocol"),
            "sniffing is not supported yet",
        ));
    }
    for k in ["attrs", "vlessRoute", "process"] {
        if r.has(k) {
            return Err(ConfigError::new(
                r.key_path(k),
                format!("rule field {k:?} is not supported yet"),
            ));
        }
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
    if conds.is_empty() {
        // Xray refuses such a rule rather than letting it match everything.
        return Err(ConfigError::new(
            r.path(),
            "this rule has no effective fields",
        ));
    }
    Ok(Rule::new(conds, outbound, tag))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::Destination;
    use crate::config::Diagnostics;
    use serde_json::json;
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

    fn doms(items: &[&str]) -> DomainSet {
        let v: Vec<String> = items.iter().map(|s| s.to_string()).collect();
        DomainSet::parse(&v, "d").unwrap()
    }

    #[test]
    fn domain_plain_and_keyword_are_substrings() {
        let d = doms(&["goog", "keyword:fac.b"]);
        assert!(d.matches("www.google.com"));
        assert!(d.matches("GOOGLE.com"));
        assert!(d.matches("fac.book"));
        assert!(!d.matches("facebook.com"), "the dot is literal");
        assert!(!d.matches("example.com"));
    }

    #[test]
    fn domain_full() {
        let d = doms(&["full:Example.com"]);
        assert!(d.matches("example.com"));
        assert!(d.matches("EXAMPLE.COM"));
        assert!(!d.matches("www.example.com"));
        assert!(!d.matches("example.co"));
    }

    #[test]
    fn domain_suffix() {
        let d = doms(&["domain:example.com"]);
        assert!(d.matches("example.com"));
        assert!(d.matches("a.b.example.com"));
        assert!(!d.matches("badexample.com"));
        assert!(!d.matches("example.com.evil"));
        assert!(!d.matches("com"));
    }

    #[test]
    fn domain_regexp_and_dotless() {
        let d = doms(&["regexp:^api[0-9]+\\.example\\.(com|net)$"]);
        assert!(d.matches("api12.example.net"));
        assert!(!d.matches("api.example.net"));
        let d = doms(&["dotless:"]);
        assert!(d.matches("localhost"));
        assert!(!d.matches("a.b"));
        let v = vec!["regexp:(".to_string()];
        assert_eq!(
            DomainSet::parse(&v, "r.domain").unwrap_err().path,
            "r.domain[0]"
        );
    }

    #[test]
    fn geo_files_are_an_error_naming_the_path() {
        let e = router(
            json!({"rules": [{"domain": ["full:a.com", "geosite:cn"], "outboundTag": "x"}]}),
        )
        .unwrap_err();
        assert_eq!(e.path, "routing.rules[0].domain[1]");
        assert!(
            e.msg
                .contains("geosite/geoip data files are not supported yet"),
            "{e}"
        );
        let e =
            router(json!({"rules": [{"ip": ["geoip:private"], "outboundTag": "x"}]})).unwrap_err();
        assert_eq!(e.path, "routing.rules[0].ip[0]");
        let e = router(json!({"rules": [{"domains": ["ext:h2y.dat:ads"], "outboundTag": "x"}]}))
            .unwrap_err();
        assert_eq!(e.path, "routing.rules[0].domains[0]");
        let e = router(json!({"rules": [{"protocol": ["bittorrent"], "outboundTag": "x"}]}))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "routing.rules[0].protocol: sniffing is not supported yet"
        );
    }

    #[test]
    fn ip_cidrs_v4_v6() {
        let v: Vec<String> = ["10.0.0.0/8", "192.168.1.7", "fc00::/7", "::1", "11.0.0.0/8"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let s = IpSet::parse(&v, "ip").unwrap();
        assert_eq!(s.v4.len(), 2, "adjacent ranges merge: {:?}", s.v4);
        for ok in [
            "10.255.0.1",
            "11.0.0.0",
            "192.168.1.7",
            "fd12::5",
            "::1",
            "::ffff:10.0.0.1",
        ] {
            assert!(s.contains(ok.parse().unwrap()), "{ok}");
        }
        for no in ["12.0.0.0", "9.255.255.255", "192.168.1.8", "fe80::1", "::2"] {
            assert!(!s.contains(no.parse().unwrap()), "{no}");
        }
        let all = IpSet::parse(&["0.0.0.0/0".to_string()], "ip").unwrap();
        assert!(all.contains("255.255.255.255".parse().unwrap()));
        assert!(!all.contains("::1".parse().unwrap()));
        assert!(IpSet::parse(&["1.2.3.4/33".to_string()], "ip").is_err());
        assert!(IpSet::parse(&["nope".to_string()], "ip").is_err());
    }

    #[test]
    fn ports_forms() {
        let p = PortSet::parse(&json!("53,443,1000-2000"), "p").unwrap();
        for ok in [53, 443, 1000, 1500, 2000] {
            assert!(p.contains(ok), "{ok}");
        }
        for no in [52, 54, 999, 2001, 80] {
            assert!(!p.contains(no), "{no}");
        }
        let p = PortSet::parse(&json!(8080), "p").unwrap();
        assert!(p.contains(8080) && !p.contains(8081));
        let p = PortSet::parse(&json!([80, "443", "8000-8010"]), "p").unwrap();
        assert!(p.contains(80) && p.contains(443) && p.contains(8005) && !p.contains(81));
        assert_eq!(
            PortSet::parse(&json!(["1-x"]), "r.port").unwrap_err().path,
            "r.port[0]"
        );
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
        assert!(router(json!({"domainStrategy": "Sometimes"})).is_err());
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
