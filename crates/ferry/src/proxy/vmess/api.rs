//! VMess in Xray's gRPC API: its account, inbound and outbound configs read into the JSON its
//! builders take; users written back for listing.

use prost::Message;
use serde_json::{json, Map, Value};

use crate::pb;
use crate::proxy::api::{self, check_uuid, endpoint, parse, Error};
use crate::proxy::protocol::{Api, Users};

const ACCOUNT: &str = "xray.proxy.vmess.Account";

/// VMess's API codecs.
pub const API: Api = Api {
    user_pkg: Some("proxy/vmess/inbound"),
    accounts: &[ACCOUNT],
    account: Some(account),
    user: Some(user),
    inbound_configs: &["xray.proxy.vmess.inbound.Config"],
    inbound_settings: Some(inbound_settings),
    list_users: Some(list_users),
    outbound_configs: &["xray.proxy.vmess.outbound.Config"],
    outbound_settings: Some(outbound_settings),
};

/// A VMess `SecurityType` as Ferry's name.
fn security(t: i32) -> &'static str {
    match t {
        3 => "aes-128-gcm",
        4 => "chacha20-poly1305",
        5 => "none",
        6 => "zero",
        _ => "auto",
    }
}

/// A VMess security name as its `SecurityType`.
pub fn security_type(s: &str) -> i32 {
    match s.to_ascii_lowercase().as_str() {
        "aes-128-gcm" => 3,
        "chacha20-poly1305" => 4,
        "none" => 5,
        "zero" => 6,
        _ => 2,
    }
}

fn account(u: &pb::User, acc: &pb::TypedMessage) -> Result<Value, Error> {
    let a: pb::VmessAccount = parse(&acc.value)?;
    check_uuid("proxy/vmess", &a.id)?;
    let mut o = Map::new();
    o.insert("id".into(), json!(a.id));
    Ok(api::client(o, u))
}

fn user(c: &Value, _method: Option<&str>) -> pb::User {
    let a = pb::VmessAccount {
        id: api::text(c, "id"),
        security_settings: Some(pb::SecurityConfig {
            r#type: security_type(&api::text(c, "security")),
        }),
    };
    api::user(c, Some(pb::TypedMessage::of(ACCOUNT, &a)))
}

fn inbound_settings(m: &pb::TypedMessage, users: Users<'_>) -> Result<Value, Error> {
    let c: pb::VmessInboundConfig = parse(&m.value)?;
    let mut s = json!({"clients": users(&c.user)?});
    if let Some(d) = c.default {
        s["default"] = json!({"level": d.level});
    }
    Ok(s)
}

fn list_users(user: Vec<pb::User>) -> Vec<u8> {
    pb::VmessInboundConfig {
        user,
        default: None,
    }
    .encode_to_vec()
}

fn outbound_settings(m: &pb::TypedMessage) -> Result<Value, Error> {
    let c: pb::ServerClientConfig = parse(&m.value)?;
    let (a, p, u) = endpoint(&c.server)?;
    let (acc, u): (pb::VmessAccount, _) = api::account(&u, ACCOUNT)?;
    let sec = security(acc.security_settings.map(|s| s.r#type).unwrap_or(0));
    Ok(
        json!({"vnext": [{"address": a, "port": p, "users": [{"id": acc.id, "security": sec, "level": u.level, "email": u.email}]}]}),
    )
}
