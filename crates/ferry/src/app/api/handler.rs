//! HandlerService (`xray.app.proxyman.command`): inbounds and outbounds added, removed and
//! listed at run time; users added and removed by `AlterInbound` operations and listed.
//! Error texts are Xray's (panels match on them, api.md §1.3 and §11); where Xray crashes
//! on bad input, this answers with an error.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use prost::Message;
use serde_json::Value;
use tonic::Status;

use super::decode;
use super::pb;
use super::state::{decode, unknown, Api, State};
use crate::app::instance::RunningInbound;
use crate::config::{Diagnostics, Obj};
use crate::registry::OutboundEntry;

const ADD_USER: &str = "xray.app.proxyman.command.AddUserOperation";
const REMOVE_USER: &str = "xray.app.proxyman.command.RemoveUserOperation";
/// Messages of the command package that are not operations.
const NOT_OPERATIONS: &[&str] = &[
    "xray.app.proxyman.command.AddInboundRequest",
    "xray.app.proxyman.command.RemoveInboundRequest",
    "xray.app.proxyman.command.AlterInboundRequest",
    "xray.app.proxyman.command.AddOutboundRequest",
    "xray.app.proxyman.command.RemoveOutboundRequest",
    "xray.app.proxyman.command.AlterOutboundRequest",
    "xray.app.proxyman.command.ListInboundsRequest",
    "xray.app.proxyman.command.ListOutboundsRequest",
    "xray.app.proxyman.command.GetInboundUserRequest",
    "xray.app.proxyman.command.Config",
    "xray.common.protocol.User",
    "xray.core.InboundHandlerConfig",
    "xray.core.OutboundHandlerConfig",
];

/// Runs `method`; `None` when the service has no such method.
pub async fn call(api: &Api, method: &str, req: Bytes) -> Option<Result<Vec<u8>, Status>> {
    Some(match method {
        "AddInbound" => add_inbound(api, &req).await,
        "RemoveInbound" => remove_inbound(api, &req).await,
        "AlterInbound" => alter_inbound(api, &req).await,
        "ListInbounds" => list_inbounds(api, &req).await,
        "GetInboundUsers" => inbound_users(api, &req, false).await,
        "GetInboundUsersCount" => inbound_users(api, &req, true).await,
        "AddOutbound" => add_outbound(api, &req).await,
        "RemoveOutbound" => remove_outbound(api, &req).await,
        "AlterOutbound" => alter_outbound(&req),
        "ListOutbounds" => list_outbounds(api).await,
        _ => return None,
    })
}

fn handler_not_found(tag: &str) -> Status {
    unknown(format!(
        "app/proxyman/command: failed to get handler: {tag} > app/proxyman/inbound: handler not found: {tag}"
    ))
}

async fn add_inbound(api: &Api, req: &[u8]) -> Result<Vec<u8>, Status> {
    let r: pb::AddInboundRequest = decode(req)?;
    let cfg = r
        .inbound
        .ok_or_else(|| unknown("app/proxyman/inbound: inbound config is missing"))?;
    let json = decode::inbound_to_json(&cfg).map_err(unknown)?;
    let mut st = api.handler.inner.lock().await;
    if !cfg.tag.is_empty() && api.core.inbound(&cfg.tag).is_some() {
        return Err(unknown(format!(
            "app/proxyman/inbound: existing tag found: {}",
            cfg.tag
        )));
    }
    let diag = Diagnostics::default();
    let ib = Obj::new(&json, "inbound", &diag)
        .and_then(|o| {
            let ib =
                crate::config::parse_inbound(&o, cfg.tag.clone(), &api.core.counters.load(), &diag);
            o.ignore(&["tag"]);
            o.finish();
            ib
        })
        .map_err(|e| {
            unknown(format!(
                "app/proxyman/inbound: failed to build inbound > {e}"
            ))
        })?;
    for w in diag.take() {
        tracing::warn!("api: AddInbound {:?}: {w}", cfg.tag);
    }
    api.core.add_inbound(ib).await.map_err(|e| {
        let tail = if e.kind() == std::io::ErrorKind::AddrInUse {
            " > bind: address already in use"
        } else {
            ""
        };
        unknown(format!(
            "app/proxyman/inbound: failed to listen > {e}{tail}"
        ))
    })?;
    tracing::info!("api: inbound {:?} added", cfg.tag);
    st.accounts.remove(&cfg.tag);
    st.inbounds.insert(cfg.tag.clone(), cfg);
    Ok(Vec::new())
}

async fn remove_inbound(api: &Api, req: &[u8]) -> Result<Vec<u8>, Status> {
    let r: pb::RemoveInboundRequest = decode(req)?;
    let mut st = api.handler.inner.lock().await;
    if r.tag.is_empty() || !api.core.remove_inbound(&r.tag).await {
        return Err(unknown(
            "common: not enough information for making a decision",
        ));
    }
    tracing::info!("api: inbound {:?} removed", r.tag);
    st.inbounds.remove(&r.tag);
    st.accounts.remove(&r.tag);
    Ok(Vec::new())
}

/// The operation a TypedMessage carries, with Xray's errors for what is not one.
enum Operation {
    Add(pb::User),
    Remove(String),
}

fn operation(op: Option<pb::TypedMessage>) -> Result<Operation, Status> {
    let op = op
        .ok_or_else(|| unknown("app/proxyman/command: unknown operation > operation is missing"))?;
    let bad = || {
        unknown("app/proxyman/command: unknown operation > proto: cannot parse invalid wire-format data")
    };
    match op.r#type.as_str() {
        ADD_USER => {
            let a = pb::AddUserOperation::decode(op.value.as_slice()).map_err(|_| bad())?;
            Ok(Operation::Add(a.user.unwrap_or_default()))
        }
        REMOVE_USER => {
            let r = pb::RemoveUserOperation::decode(op.value.as_slice()).map_err(|_| bad())?;
            Ok(Operation::Remove(r.email))
        }
        t if NOT_OPERATIONS.contains(&t) || t.starts_with("xray.proxy.") => {
            Err(unknown("app/proxyman/command: not an inbound operation"))
        }
        _ => Err(unknown(
            "app/proxyman/command: unknown operation > proto: not found",
        )),
    }
}

/// The accounts of `ib` by lower-cased email, read from its config when first asked for.
fn accounts<'a>(st: &'a mut State, ib: &RunningInbound) -> &'a mut BTreeMap<String, pb::User> {
    st.accounts.entry(ib.tag.clone()).or_insert_with(|| {
        let settings = ib.json.get("settings").cloned().unwrap_or(Value::Null);
        let method = settings.get("method").and_then(Value::as_str);
        let mut m = BTreeMap::new();
        for key in ["clients", "users"] {
            for c in settings
                .get(key)
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or(&[])
            {
                let u = decode::user_from_json(&ib.protocol, c, method);
                if !u.email.is_empty() {
                    m.insert(u.email.to_lowercase(), u);
                }
            }
        }
        m
    })
}

/// The user with this email (case-insensitively), as the inbound keeps it.
async fn alter_inbound(api: &Api, req: &[u8]) -> Result<Vec<u8>, Status> {
    let r: pb::AlterInboundRequest = decode(req)?;
    let op = operation(r.operation)?;
    let mut st = api.handler.inner.lock().await;
    let ib = api
        .core
        .inbound(&r.tag)
        .ok_or_else(|| handler_not_found(&r.tag))?;
    let um = ib
        .handler
        .users()
        .ok_or_else(|| unknown("app/proxyman/command: proxy is not a UserManager"))?;
    let pkg = decode::user_pkg(&ib.protocol);
    match op {
        Operation::Add(user) => {
            let json = decode::user_to_json(&ib.protocol, &user).map_err(|e| {
                unknown(format!("app/proxyman/command: failed to parse user > {e}"))
            })?;
            if !user.email.is_empty() && um.find_user(&user.email).is_some() {
                return Err(unknown(format!(
                    "{pkg}: User {} already exists.",
                    user.email
                )));
            }
            let added = um
                .add_user(&json)
                .map_err(|e| unknown(format!("{pkg}: failed to add user > {}", e.msg)))?;
            // A SOCKS/HTTP account's email is its user name, whatever the request carried.
            if !added.email.is_empty() {
                let method = ib
                    .json
                    .get("settings")
                    .and_then(|s| s.get("method"))
                    .and_then(Value::as_str)
                    .map(str::to_string);
                let stored = decode::user_from_json(&ib.protocol, &json, method.as_deref());
                accounts(&mut st, &ib).insert(added.email.to_lowercase(), stored);
            }
            tracing::info!("api: user {:?} added to {:?}", user.email, r.tag);
        }
        Operation::Remove(email) => {
            if email.is_empty() {
                return Err(unknown(format!("{pkg}: Email must not be empty.")));
            }
            let user = um
                .find_user(&email)
                .ok_or_else(|| unknown(format!("{pkg}: User {email} not found.")))?;
            um.remove_user(&user.email);
            // Its live connections end too (Xray leaves them running: api.md §7).
            user.traffic.revoked.fire();
            let removed_email = user.email.clone();
            drop(user);
            if let Some(stats) = &api.core.stats {
                stats.forget_unlisted_user(&removed_email);
            }
            accounts(&mut st, &ib).remove(&email.to_lowercase());
            tracing::info!("api: user {:?} removed from {:?}", email, r.tag);
        }
    }
    Ok(Vec::new())
}

async fn inbound_users(api: &Api, req: &[u8], count: bool) -> Result<Vec<u8>, Status> {
    let r: pb::GetInboundUserRequest = decode(req)?;
    let mut st = api.handler.inner.lock().await;
    let ib = api
        .core
        .inbound(&r.tag)
        .ok_or_else(|| handler_not_found(&r.tag))?;
    let um = ib
        .handler
        .users()
        .ok_or_else(|| unknown("app/proxyman/command: proxy is not a UserManager"))?;
    let want = r.email.to_lowercase();
    let live: Vec<_> = um
        .list_users()
        .into_iter()
        .filter(|u| !u.email.is_empty())
        .filter(|u| want.is_empty() || u.email.to_lowercase() == want)
        .collect();
    if count {
        return Ok(pb::GetInboundUsersCountResponse {
            count: live.len() as i64,
        }
        .encode_to_vec());
    }
    let known = accounts(&mut st, &ib);
    let users = live
        .iter()
        .map(|u| {
            known
                .get(&u.email.to_lowercase())
                .cloned()
                .unwrap_or_else(|| pb::User {
                    level: u.level,
                    email: u.email.to_string(),
                    account: None,
                })
        })
        .collect();
    Ok(pb::GetInboundUserResponse { users }.encode_to_vec())
}

/// The proxy settings of an inbound of `protocol` with these users (ListInbounds): its
/// protocol's config (users in it where it has them), a dokodemo-door one for the others.
fn inbound_proxy(protocol: &str, users: Vec<pb::User>) -> pb::TypedMessage {
    let p = crate::proxy::table::inbound(protocol);
    match p.and_then(|p| p.api.inbound_configs.first()) {
        Some(ty) => pb::TypedMessage {
            r#type: ty.to_string(),
            value: p
                .and_then(|p| p.api.list_users)
                .map(|f| f(users))
                .unwrap_or_default(),
        },
        None => pb::TypedMessage {
            r#type: "xray.proxy.dokodemo.Config".into(),
            value: Vec::new(),
        },
    }
}

/// An inbound from the config file as an `InboundHandlerConfig`: where it listens, its
/// protocol and its users.
fn describe_inbound(st: &mut State, ib: &RunningInbound) -> pb::InboundHandlerConfig {
    let (listen, ports) = match &ib.listen {
        crate::config::Listen::Ip(ip, ranges) => (
            pb::Address::Ip(match ip {
                std::net::IpAddr::V4(a) => a.octets().to_vec(),
                std::net::IpAddr::V6(a) => a.octets().to_vec(),
            }),
            ranges
                .iter()
                .map(|(a, b)| pb::PortRange {
                    from: *a as u32,
                    to: *b as u32,
                })
                .collect(),
        ),
        crate::config::Listen::Unix(p) => (pb::Address::Domain(p.text()), Vec::new()),
        crate::config::Listen::Device => (pb::Address::Domain(String::new()), Vec::new()),
    };
    let receiver = pb::ReceiverConfig {
        port_list: (!ports.is_empty()).then_some(pb::PortList { range: ports }),
        listen: Some(pb::IpOrDomain {
            address: Some(listen),
        }),
        ..Default::default()
    };
    let users: Vec<pb::User> = accounts(st, ib).values().cloned().collect();
    pb::InboundHandlerConfig {
        tag: ib.tag.clone(),
        receiver_settings: Some(pb::TypedMessage::of(
            "xray.app.proxyman.ReceiverConfig",
            &receiver,
        )),
        proxy_settings: Some(inbound_proxy(&ib.protocol, users)),
    }
}

async fn list_inbounds(api: &Api, req: &[u8]) -> Result<Vec<u8>, Status> {
    let r: pb::ListInboundsRequest = decode(req)?;
    let mut st = api.handler.inner.lock().await;
    let running = api.core.inbounds.load();
    let mut inbounds = Vec::new();
    for ib in running.iter() {
        inbounds.push(if r.is_only_tags {
            pb::InboundHandlerConfig {
                tag: ib.tag.clone(),
                ..Default::default()
            }
        } else if let Some(c) = st.inbounds.get(&ib.tag) {
            c.clone()
        } else {
            describe_inbound(&mut st, ib)
        });
    }
    Ok(pb::ListInboundsResponse { inbounds }.encode_to_vec())
}

async fn add_outbound(api: &Api, req: &[u8]) -> Result<Vec<u8>, Status> {
    let r: pb::AddOutboundRequest = decode(req)?;
    let cfg = r
        .outbound
        .ok_or_else(|| unknown("app/proxyman/outbound: outbound config is missing"))?;
    let json = decode::outbound_to_json(&cfg).map_err(unknown)?;
    let mut st = api.handler.inner.lock().await;
    let table = &api.core.dispatcher.outbounds;
    if !cfg.tag.is_empty() && table.load().get(&cfg.tag).is_some() {
        return Err(unknown(format!(
            "app/proxyman/outbound: existing tag found: {}",
            cfg.tag
        )));
    }
    let diag = Diagnostics::default();
    let (out, _via) = Obj::new(&json, "outbound", &diag)
        .and_then(|o| {
            let dns = api
                .core
                .dispatcher
                .router
                .load()
                .dns
                .clone()
                .unwrap_or_else(|| Arc::new(crate::app::dns::Dns::system()));
            let r = crate::config::parse_outbound(&o, cfg.tag.clone(), table, &dns, &diag);
            o.ignore(&["tag"]);
            o.finish();
            r
        })
        .map_err(|e| {
            unknown(format!(
                "app/proxyman/outbound: failed to build outbound > {e}"
            ))
        })?;
    for w in diag.take() {
        tracing::warn!("api: AddOutbound {:?}: {w}", cfg.tag);
    }
    table.add(OutboundEntry {
        tag: Arc::from(out.tag.as_str()),
        protocol: out.protocol,
        handler: out.handler,
        traffic: api.core.counters.load().outbound(&out.tag),
    });
    tracing::info!("api: outbound {:?} added", cfg.tag);
    st.outbounds.insert(cfg.tag.clone(), cfg);
    Ok(Vec::new())
}

/// Never fails, as in Xray: an unknown tag is no error.
async fn remove_outbound(api: &Api, req: &[u8]) -> Result<Vec<u8>, Status> {
    let r: pb::RemoveOutboundRequest = decode(req)?;
    let mut st = api.handler.inner.lock().await;
    if api.core.dispatcher.outbounds.remove(&r.tag) {
        tracing::info!("api: outbound {:?} removed", r.tag);
    }
    st.outbounds.remove(&r.tag);
    Ok(Vec::new())
}

/// No operation applies to an outbound (as in Xray).
fn alter_outbound(req: &[u8]) -> Result<Vec<u8>, Status> {
    let r: pb::AlterOutboundRequest = decode(req)?;
    match operation(r.operation) {
        Err(e) if e.message().contains("unknown operation") => Err(e),
        _ => Err(unknown("app/proxyman/command: not an outbound operation")),
    }
}

/// The proxy config type ListOutbounds names for an outbound of `protocol`.
fn outbound_type(protocol: &str) -> String {
    match crate::proxy::table::outbound(protocol).and_then(|p| p.api.outbound_configs.first()) {
        Some(ty) => ty.to_string(),
        None => format!("ferry.{protocol}"),
    }
}

async fn list_outbounds(api: &Api) -> Result<Vec<u8>, Status> {
    let st = api.handler.inner.lock().await;
    let outbounds = api
        .core
        .dispatcher
        .outbounds
        .load()
        .list()
        .iter()
        .filter(|o| *o.tag != *api.tag)
        .map(|o| match st.outbounds.get(&*o.tag) {
            Some(c) => c.clone(),
            None => pb::OutboundHandlerConfig {
                tag: o.tag.to_string(),
                sender_settings: Some(pb::TypedMessage::of(
                    "xray.app.proxyman.SenderConfig",
                    &pb::SenderConfig::default(),
                )),
                proxy_settings: Some(pb::TypedMessage {
                    r#type: outbound_type(&o.protocol),
                    value: Vec::new(),
                }),
                ..Default::default()
            },
        })
        .collect();
    Ok(pb::ListOutboundsResponse { outbounds }.encode_to_vec())
}
