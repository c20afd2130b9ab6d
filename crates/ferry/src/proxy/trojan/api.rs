//! Trojan in Xray's gRPC API: its account, server and client configs read into the JSON its
//! builders take; users written back for listing.

use prost::Message;
use serde_json::{json, Map, Value};

use crate::pb;
use crate::proxy::api::{self, endpoint, fallbacks, parse, Error};
use crate::proxy::protocol::{Api, Users};

const ACCOUNT: &str = "xray.proxy.trojan.Account";

/// Trojan's API codecs.
pub const API: Api = Api {
    user_pkg: Some("proxy/trojan"),
    accounts: &[ACCOUNT],
    account: Some(account),
    user: Some(user),
    inbound_configs: &["xray.proxy.trojan.ServerConfig"],
    inbound_settings: Some(inbound_settings),
    list_users: Some(list_users),
    outbound_configs: &["xray.proxy.trojan.ClientConfig"],
    outbound_settings: Some(outbound_settings),
};

fn account(u: &pb::User, acc: &pb::TypedMessage) -> Result<Value, Error> {
    let a: pb::TrojanAccount = parse(&acc.value)?;
    let mut o = Map::new();
    o.insert("password".into(), json!(a.password));
    Ok(api::client(o, u))
}

fn user(c: &Value, _method: Option<&str>) -> pb::User {
    let a = pb::TrojanAccount {
        password: api::text(c, "password"),
    };
    api::user(c, Some(pb::TypedMessage::of(ACCOUNT, &a)))
}

fn inbound_settings(m: &pb::TypedMessage, users: Users<'_>) -> Result<Value, Error> {
    let c: pb::FallbackServerConfig = parse(&m.value)?;
    let mut s = json!({"clients": users(&c.users)?});
    if !c.fallbacks.is_empty() {
        s["fallbacks"] = fallbacks(&c.fallbacks);
    }
    Ok(s)
}

fn list_users(users: Vec<pb::User>) -> Vec<u8> {
    pb::FallbackServerConfig {
        users,
        decryption: String::new(),
        ..Default::default()
    }
    .encode_to_vec()
}

fn outbound_settings(m: &pb::TypedMessage) -> Result<Value, Error> {
    let c: pb::ServerClientConfig = parse(&m.value)?;
    let (a, p, u) = endpoint(&c.server)?;
    let (acc, u): (pb::TrojanAccount, _) = api::account(&u, ACCOUNT)?;
    Ok(
        json!({"servers": [{"address": a, "port": p, "password": acc.password, "level": u.level, "email": u.email}]}),
    )
}
