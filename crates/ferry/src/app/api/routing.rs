//! RoutingService (`xray.app.router.command`): the calls panels make that Ferry's router can
//! answer — TestRoute (which outbound a connection would take), ListRule and RemoveRule by
//! `ruleTag`. AddRule (it carries a whole `xray.app.router.Config`) and the balancer calls
//! (Ferry has no balancers yet) answer with an error naming what is missing.

use std::net::IpAddr;

use bytes::Bytes;
use prost::Message;
use tonic::Status;

use super::grpc::{decode, unknown, Api};
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
                let mut n = old.clone();
                n.rules.retain(|x| x.tag.as_deref() != Some(r.rule_tag.as_str()));
                (n, ())
            });
            Ok(Vec::new())
        }),
        "AddRule" => Err(unknown(
            "app/router/command: AddRule is not supported by Ferry yet (routing rules come from the config)",
        )),
        "GetBalancerInfo" | "OverrideBalancerTarget" => Err(unknown(
            "app/router/command: Ferry has no balancers yet",
        )),
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
    };
    let router = api.core.dispatcher.router.load();
    let rule = router
        .route(&session)
        .await
        .ok_or_else(|| unknown("common: not enough information for making a decision"))?;
    ctx.outbound_tag = rule.outbound.clone();
    Ok(ctx.encode_to_vec())
}
