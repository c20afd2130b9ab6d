//! RoutingService (`xray.app.router.command`): the calls panels make that Ferry's router can
//! answer — TestRoute (which outbound a connection would take), AddRule (rules and balancers
//! of an `xray.app.router.Config` as Xray v26.3 lays it out, turned into Ferry's JSON),
//! ListRule and RemoveRule by `ruleTag`, and the balancer calls: GetBalancerInfo (the
//! override target and the strategy's "principle targets") and OverrideBalancerTarget.

use std::net::IpAddr;

use serde_json::{json, Map, Value};

use bytes::Bytes;
use prost::Message;
use tonic::Status;

use super::state::{decode, unknown, Api};
use crate::common::{Address, Destination, Network};
use crate::session::{Endpoint, Session, User};

/// `xray.app.router.command.RoutingContext` (the fields a route depends on).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RoutingContext {
    #[prost(string, tag = "1")]
    pub inbound_tag: String,
    #[prost(int32, tag = "2")]
    pub network: i32,
    #[prost(bytes = "vec", repeated, tag = "3")]
    pub source_ips: Vec<Vec<u8>>,
    #[prost(bytes = "vec", repeated, tag = "4")]
    pub target_ips: Vec<Vec<u8>>,
    #[prost(uint32, tag = "5")]
    pub source_port: u32,
    #[prost(uint32, tag = "6")]
    pub target_port: u32,
    #[prost(string, tag = "7")]
    pub target_domain: String,
    #[prost(string, tag = "8")]
    pub protocol: String,
    #[prost(string, tag = "9")]
    pub user: String,
    #[prost(string, tag = "12")]
    pub outbound_tag: String,
    #[prost(bytes = "vec", repeated, tag = "13")]
    pub local_ips: Vec<Vec<u8>>,
    #[prost(uint32, tag = "14")]
    pub local_port: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
struct TestRouteRequest {
    #[prost(message, optional, tag = "1")]
    routing_context: Option<RoutingContext>,
    #[prost(string, repeated, tag = "2")]
    field_selectors: Vec<String>,
    #[prost(bool, tag = "3")]
    publish_result: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RemoveRuleRequest {
    #[prost(string, tag = "1")]
    rule_tag: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ListRuleItem {
    #[prost(string, tag = "1")]
    tag: String,
    #[prost(string, tag = "2")]
    rule_tag: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ListRuleResponse {
    #[prost(message, repeated, tag = "1")]
    rules: Vec<ListRuleItem>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct GetBalancerInfoRequest {
    #[prost(string, tag = "1")]
    tag: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct OverrideInfo {
    #[prost(string, tag = "2")]
    target: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct PrincipleTargetInfo {
    #[prost(string, repeated, tag = "1")]
    tag: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct BalancerMsg {
    #[prost(message, optional, tag = "5")]
    r#override: Option<OverrideInfo>,
    #[prost(message, optional, tag = "6")]
    principle_target: Option<PrincipleTargetInfo>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct GetBalancerInfoResponse {
    #[prost(message, optional, tag = "1")]
    balancer: Option<BalancerMsg>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct OverrideBalancerTargetRequest {
    #[prost(string, tag = "1")]
    balancer_tag: String,
    #[prost(string, tag = "2")]
    target: String,
}

/// GetBalancerInfo as Xray answers it: the override target (empty when none) and the
/// candidates as the strategy ranks them; an unknown tag is Xray's "cannot find tag".
fn balancer_info(api: &Api, req: &[u8]) -> Result<Vec<u8>, Status> {
    let r: GetBalancerInfoRequest = decode(req)?;
    let router = api.core.dispatcher.router.load();
    let b = router
        .balancer(&r.tag)
        .ok_or_else(|| unknown("app/router: cannot find tag"))?;
    let table = api.core.dispatcher.outbounds.load();
    let cands = b.candidates(table.list().iter().map(|e| &*e.tag));
    Ok(GetBalancerInfoResponse {
        balancer: Some(BalancerMsg {
            r#override: Some(OverrideInfo {
                target: b.override_target(),
            }),
            principle_target: Some(PrincipleTargetInfo {
                tag: b.principle_targets(&cands, router.observatory.as_deref()),
            }),
        }),
    }
    .encode_to_vec())
}

/// OverrideBalancerTarget: every later pick of the balancer is `target` (`""` clears it).
/// Xray takes any target, even one no outbound has (connections then close).
fn override_balancer(api: &Api, req: &[u8]) -> Result<Vec<u8>, Status> {
    let r: OverrideBalancerTargetRequest = decode(req)?;
    let router = api.core.dispatcher.router.load();
    let b = router
        .balancer(&r.balancer_tag)
        .ok_or_else(|| unknown("app/router: cannot find tag"))?;
    b.set_override(&r.target);
    Ok(Vec::new())
}

#[derive(Clone, PartialEq, prost::Message)]
struct AddRuleRequest {
    #[prost(message, optional, tag = "1")]
    config: Option<super::pb::TypedMessage>,
    #[prost(bool, tag = "2")]
    should_append: bool,
}

/// `xray.app.router.Config` (v26.3 layout).
#[derive(Clone, PartialEq, prost::Message)]
struct RouterConfig {
    #[prost(int32, tag = "1")]
    domain_strategy: i32,
    #[prost(message, repeated, tag = "2")]
    rule: Vec<RoutingRule>,
    #[prost(message, repeated, tag = "3")]
    balancing_rule: Vec<BalancingRule>,
}

/// `xray.app.router.BalancingRule`.
#[derive(Clone, PartialEq, prost::Message)]
struct BalancingRule {
    #[prost(string, tag = "1")]
    tag: String,
    #[prost(string, repeated, tag = "2")]
    outbound_selector: Vec<String>,
    #[prost(string, tag = "3")]
    strategy: String,
    #[prost(message, optional, tag = "4")]
    strategy_settings: Option<super::pb::TypedMessage>,
    #[prost(string, tag = "5")]
    fallback_tag: String,
}

/// `xray.app.router.StrategyWeight`.
#[derive(Clone, PartialEq, prost::Message)]
struct StrategyWeight {
    #[prost(bool, tag = "1")]
    regexp: bool,
    #[prost(string, tag = "2")]
    r#match: String,
    #[prost(float, tag = "3")]
    value: f32,
}

/// `xray.app.router.StrategyLeastLoadConfig` (durations in nanoseconds).
#[derive(Clone, PartialEq, prost::Message)]
struct StrategyLeastLoadConfig {
    #[prost(message, repeated, tag = "2")]
    costs: Vec<StrategyWeight>,
    #[prost(int64, repeated, tag = "3")]
    baselines: Vec<i64>,
    #[prost(int32, tag = "4")]
    expected: i32,
    #[prost(int64, tag = "5")]
    max_rtt: i64,
    #[prost(float, tag = "6")]
    tolerance: f32,
}

/// One balancing rule as Ferry's JSON balancer object.
fn balancer_json(b: &BalancingRule) -> Result<Value, String> {
    let ty = b.strategy.to_ascii_lowercase();
    let mut strategy = json!({ "type": if ty.is_empty() { "random" } else { ty.as_str() } });
    if ty == "leastload" {
        let m = b
            .strategy_settings
            .as_ref()
            .filter(|m| m.r#type == "xray.app.router.StrategyLeastLoadConfig")
            .ok_or("not a StrategyLeastLoadConfig")?;
        let c = <StrategyLeastLoadConfig as Message>::decode(m.value.as_slice())
            .map_err(|_| "proto: cannot parse invalid wire-format data".to_string())?;
        let mut o = Map::new();
        o.insert("expected".into(), json!(c.expected.max(0)));
        if c.max_rtt > 0 {
            o.insert("maxRTT".into(), json!(format!("{}ns", c.max_rtt)));
        }
        o.insert("tolerance".into(), json!(f64::from(c.tolerance)));
        let baselines: Vec<String> = c
            .baselines
            .iter()
            .map(|n| format!("{}ns", n.max(&0)))
            .collect();
        o.insert("baselines".into(), json!(baselines));
        let costs: Vec<Value> = c
            .costs
            .iter()
            .map(|w| json!({"regexp": w.regexp, "match": w.r#match, "value": f64::from(w.value)}))
            .collect();
        o.insert("costs".into(), json!(costs));
        strategy["settings"] = Value::Object(o);
    } else if !matches!(ty.as_str(), "" | "random" | "roundrobin" | "leastping") {
        return Err("unrecognized balancer type".into());
    }
    let mut o = json!({"tag": b.tag, "selector": b.outbound_selector, "strategy": strategy});
    if !b.fallback_tag.is_empty() {
        o["fallbackTag"] = json!(b.fallback_tag);
    }
    Ok(o)
}

/// `xray.app.router.RoutingRule`: the conditions Ferry's router has.
#[derive(Clone, PartialEq, prost::Message)]
struct RoutingRule {
    #[prost(string, tag = "1")]
    tag: String,
    #[prost(string, tag = "12")]
    balancing_tag: String,
    #[prost(string, tag = "19")]
    rule_tag: String,
    #[prost(message, repeated, tag = "2")]
    domain: Vec<Domain>,
    #[prost(message, repeated, tag = "10")]
    geoip: Vec<GeoIp>,
    #[prost(message, optional, tag = "14")]
    port_list: Option<super::pb::PortList>,
    #[prost(int32, repeated, tag = "13")]
    networks: Vec<i32>,
    #[prost(message, repeated, tag = "11")]
    source_geoip: Vec<GeoIp>,
    #[prost(message, optional, tag = "16")]
    source_port_list: Option<super::pb::PortList>,
    #[prost(string, repeated, tag = "7")]
    user_email: Vec<String>,
    #[prost(string, repeated, tag = "8")]
    inbound_tag: Vec<String>,
    #[prost(string, repeated, tag = "9")]
    protocol: Vec<String>,
    #[prost(map = "string, string", tag = "15")]
    attributes: std::collections::HashMap<String, String>,
    #[prost(message, repeated, tag = "17")]
    local_geoip: Vec<GeoIp>,
    #[prost(message, optional, tag = "18")]
    local_port_list: Option<super::pb::PortList>,
    #[prost(string, repeated, tag = "21")]
    process: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Domain {
    /// Plain = 0 (keyword), Regex = 1, Domain = 2, Full = 3.
    #[prost(int32, tag = "1")]
    r#type: i32,
    #[prost(string, tag = "2")]
    value: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct GeoIp {
    #[prost(string, tag = "1")]
    country_code: String,
    #[prost(message, repeated, tag = "2")]
    cidr: Vec<Cidr>,
    #[prost(bool, tag = "3")]
    reverse_match: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Cidr {
    #[prost(bytes = "vec", tag = "1")]
    ip: Vec<u8>,
    #[prost(uint32, tag = "2")]
    prefix: u32,
}

fn ports(p: &Option<super::pb::PortList>) -> Option<String> {
    let r = &p.as_ref()?.range;
    (!r.is_empty()).then(|| {
        r.iter()
            .map(|p| {
                if p.from == p.to {
                    p.from.to_string()
                } else {
                    format!("{}-{}", p.from, p.to)
                }
            })
            .collect::<Vec<_>>()
            .join(",")
    })
}

fn cidrs(g: &[GeoIp], what: &str) -> Result<Option<Vec<String>>, String> {
    let mut out = Vec::new();
    for g in g {
        if !g.country_code.is_empty() || g.reverse_match {
            return Err(format!(
                "{what}: geoip lists are not supported by Ferry yet (custom CIDRs are)"
            ));
        }
        for c in &g.cidr {
            let ip = ip_of(&c.ip).ok_or_else(|| format!("{what}: bad IP {:?}", c.ip))?;
            out.push(format!("{ip}/{}", c.prefix));
        }
    }
    Ok((!out.is_empty()).then_some(out))
}

/// One rule as Ferry's JSON rule object.
fn rule_json(r: &RoutingRule) -> Result<Value, String> {
    for (on, what) in [
        (!r.protocol.is_empty(), "protocol"),
        (!r.attributes.is_empty(), "attributes"),
        (!r.local_geoip.is_empty(), "localIP"),
        (r.local_port_list.is_some(), "localPort"),
        (!r.process.is_empty(), "process"),
    ] {
        if on {
            return Err(format!(
                "rule condition {what} is not supported by Ferry yet"
            ));
        }
    }
    let mut o = Map::new();
    // Xray takes the balancer when the rule names one (its `tag` is then empty).
    if r.balancing_tag.is_empty() {
        o.insert("outboundTag".into(), json!(r.tag));
    } else {
        o.insert("balancerTag".into(), json!(r.balancing_tag));
    }
    if !r.rule_tag.is_empty() {
        o.insert("ruleTag".into(), json!(r.rule_tag));
    }
    if !r.domain.is_empty() {
        let d: Vec<String> = r
            .domain
            .iter()
            .map(|d| match d.r#type {
                1 => format!("regexp:{}", d.value),
                2 => format!("domain:{}", d.value),
                3 => format!("full:{}", d.value),
                _ => format!("keyword:{}", d.value),
            })
            .collect();
        o.insert("domain".into(), json!(d));
    }
    if let Some(ips) = cidrs(&r.geoip, "ip")? {
        o.insert("ip".into(), json!(ips));
    }
    if let Some(ips) = cidrs(&r.source_geoip, "source")? {
        o.insert("source".into(), json!(ips));
    }
    if let Some(p) = ports(&r.port_list) {
        o.insert("port".into(), json!(p));
    }
    if let Some(p) = ports(&r.source_port_list) {
        o.insert("sourcePort".into(), json!(p));
    }
    let nets: Vec<&str> = r
        .networks
        .iter()
        .filter_map(|n| match *n {
            super::pb::network::TCP => Some("tcp"),
            super::pb::network::UDP => Some("udp"),
            _ => None,
        })
        .collect();
    if !nets.is_empty() {
        o.insert("network".into(), json!(nets.join(",")));
    }
    if !r.user_email.is_empty() {
        o.insert("user".into(), json!(r.user_email));
    }
    if !r.inbound_tag.is_empty() {
        o.insert("inboundTag".into(), json!(r.inbound_tag));
    }
    Ok(Value::Object(o))
}

/// Adds the rules and balancers of a router config after the running ones (`shouldAppend`),
/// or replaces them all, as Xray does (a replaced balancer loses its override). Nothing
/// changes when any of it is refused (Xray may keep half of it).
fn add_rule(api: &Api, req: &[u8]) -> Result<Vec<u8>, Status> {
    let r: AddRuleRequest = decode(req)?;
    let err = |e: String| unknown(format!("app/router: failed to add rules > {e}"));
    let cfg = r
        .config
        .ok_or_else(|| err("the router config is missing".into()))?;
    if cfg.r#type != "xray.app.router.Config" {
        return Err(err(format!("not a router config: {}", cfg.r#type)));
    }
    let c = <RouterConfig as Message>::decode(cfg.value.as_slice())
        .map_err(|_| err("proto: cannot parse invalid wire-format data".into()))?;
    let rules = c
        .rule
        .iter()
        .map(rule_json)
        .collect::<Result<Vec<_>, _>>()
        .map_err(err)?;
    let balancers = c
        .balancing_rule
        .iter()
        .map(balancer_json)
        .collect::<Result<Vec<_>, _>>()
        .map_err(err)?;
    let table = api.core.dispatcher.outbounds.load();
    for j in &rules {
        if let Some(t) = j["outboundTag"].as_str() {
            if table.get(t).is_none() {
                return Err(err(format!("no outbound is tagged {t:?}")));
            }
        }
    }
    let doc = json!({ "rules": rules, "balancers": balancers });
    let diag = crate::config::Diagnostics::default();
    let assets = crate::app::router::geodata::Assets::from_env();
    let parsed = crate::config::Obj::new(&doc, "routing", &diag)
        .and_then(|o| crate::app::router::Router::parse_parts(&o, &assets))
        .map_err(|e| err(e.to_string()))?;
    api.core.dispatcher.router.update(|old| {
        let refuse = |e: String| (old.clone(), Err(unknown(format!("app/router: {e}"))));
        let (mut all, mut bals) = if r.should_append {
            (old.rules.clone(), old.balancers.clone())
        } else {
            (Vec::new(), Vec::new())
        };
        for b in &parsed.balancers {
            if bals.iter().any(|x| x.tag == b.tag) {
                return refuse("duplicate balancer tag".into());
            }
            if b.needs_observatory() && old.observatory.is_none() {
                return refuse(format!(
                    "balancer {:?} needs an observatory or burstObservatory (its strategy or fallbackTag reads probe results)",
                    b.tag
                ));
            }
            bals.push(b.clone());
        }
        for rule in &parsed.rules {
            if let Some(t) = rule.tag.as_deref().filter(|t| !t.is_empty()) {
                if all.iter().any(|x| x.tag.as_deref() == Some(t)) {
                    return refuse(format!("duplicate ruleTag {t}"));
                }
            }
            if let Some(b) = &rule.balancer {
                if !bals.iter().any(|x| &x.tag == b) {
                    return refuse(format!("balancer {b} not found"));
                }
            }
            all.push(rule.clone());
        }
        let mut new = crate::app::router::Router::new(all, old.strategy).with_dns(old.dns.clone());
        new.balancers = bals;
        new.observatory = old.observatory.clone();
        (new, Ok(()))
    })?;
    Ok(Vec::new())
}

/// Runs `method`; `None` when the service has no such method.
pub async fn call(api: &Api, method: &str, req: Bytes) -> Option<Result<Vec<u8>, Status>> {
    let router = &api.core.dispatcher.router;
    Some(match method {
        "TestRoute" => test_route(api, &req).await,
        "ListRule" => Ok(ListRuleResponse {
            rules: router
                .load()
                .rules
                .iter()
                .map(|r| ListRuleItem {
                    tag: r.outbound.clone(),
                    rule_tag: r.tag.clone().unwrap_or_default(),
                })
                .collect(),
        }
        .encode_to_vec()),
        "RemoveRule" => decode::<RemoveRuleRequest>(&req).and_then(|r| {
            if r.rule_tag.is_empty() {
                return Err(unknown("empty tag name!"));
            }
            router.update(|old| {
                let rules = old
                    .rules
                    .iter()
                    .filter(|x| x.tag.as_deref() != Some(r.rule_tag.as_str()))
                    .cloned()
                    .collect();
                (
                    crate::app::router::Router::new(rules, old.strategy)
                        .with_dns(old.dns.clone())
                        .keep_balancers(old),
                    (),
                )
            });
            Ok(Vec::new())
        }),
        "AddRule" => add_rule(api, &req),
        "GetBalancerInfo" => balancer_info(api, &req),
        "OverrideBalancerTarget" => override_balancer(api, &req),
        "SubscribeRoutingStats" => Err(unknown("Routing statistics not enabled.")),
        _ => return None,
    })
}

fn ip_of(b: &[u8]) -> Option<IpAddr> {
    match b.len() {
        4 => <[u8; 4]>::try_from(b).ok().map(IpAddr::from),
        16 => <[u8; 16]>::try_from(b).ok().map(IpAddr::from),
        _ => None,
    }
}

/// Routes the described connection with the running router; the answer is the context with
/// `OutboundTag` set. No matching rule: Xray's "not enough information" (panels read it as
/// "the default outbound").
async fn test_route(api: &Api, req: &[u8]) -> Result<Vec<u8>, Status> {
    let r: TestRouteRequest = decode(req)?;
    let mut ctx = r
        .routing_context
        .ok_or_else(|| unknown("Invalid routing request."))?;
    let dest_addr = match ctx.target_ips.first().and_then(|b| ip_of(b)) {
        _ if !ctx.target_domain.is_empty() => Address::Domain(ctx.target_domain.clone()),
        Some(ip) => Address::Ip(ip),
        None => Address::Domain(String::new()),
    };
    let endpoint = |ips: &[Vec<u8>], port: u32| {
        let ip = ips
            .first()
            .and_then(|b| ip_of(b))
            .unwrap_or(IpAddr::from([0, 0, 0, 0]));
        Endpoint::Ip(std::net::SocketAddr::new(ip, port as u16))
    };
    let session = Session {
        inbound_tag: ctx.inbound_tag.as_str().into(),
        source: endpoint(&ctx.source_ips, ctx.source_port),
        local: endpoint(&ctx.local_ips, ctx.local_port),
        dest: Destination::new(dest_addr, ctx.target_port as u16),
        network: if ctx.network == super::pb::network::UDP {
            Network::Udp
        } else {
            Network::Tcp
        },
        user: (!ctx.user.is_empty()).then(|| User::new(ctx.user.as_str(), 0)),
        protocol: "api",
        sniffed: None,
    };
    let router = api.core.dispatcher.router.load();
    let rule = router
        .route(&session)
        .await
        .ok_or_else(|| unknown("common: not enough information for making a decision"))?;
    ctx.outbound_tag = rule.outbound.clone();
    Ok(ctx.encode_to_vec())
}
