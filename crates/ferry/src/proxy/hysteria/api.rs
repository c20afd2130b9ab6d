//! Hysteria in Xray's gRPC API: its account (`auth`), server config (users) and client config
//! (the server) read into the JSON its builders take; users written back for listing. The
//! `hysteria` network's own settings come with the stream settings.

use prost::Message;
use serde_json::{json, Map, Value};

use crate::pb;
use crate::proxy::api::{self, endpoint, parse, Error};
use crate::proxy::protocol::{Api, Users};

const ACCOUNT: &str = "xray.proxy.hysteria.account.Account";

/// Hysteria's API codecs.
pub const API: Api = Api {
    user_pkg: Some("proxy/hysteria"),
    accounts: &[ACCOUNT],
    account: Some(account),
    user: Some(user),
    inbound_configs: &["xray.proxy.hysteria.ServerConfig"],
    inbound_settings: Some(inbound_settings),
    list_users: Some(list_users),
    outbound_configs: &["xray.proxy.hysteria.ClientConfig"],
    outbound_settings: Some(outbound_settings),
};

fn account(u: &pb::User, acc: &pb::TypedMessage) -> Result<Value, Error> {
    let a: pb::HysteriaAccount = parse(&acc.value)?;
    let mut o = Map::new();
    o.insert("auth".into(), json!(a.auth));
    Ok(api::client(o, u))
}

fn user(c: &Value, _method: Option<&str>) -> pb::User {
    let a = pb::HysteriaAccount {
        auth: api::text(c, "auth"),
    };
    api::user(c, Some(pb::TypedMessage::of(ACCOUNT, &a)))
}

fn inbound_settings(m: &pb::TypedMessage, users: Users<'_>) -> Result<Value, Error> {
    let c: pb::UsersServerConfig = parse(&m.value)?;
    Ok(json!({"version": 2, "clients": users(&c.users)?}))
}

fn list_users(users: Vec<pb::User>) -> Vec<u8> {
    pb::UsersServerConfig { users }.encode_to_vec()
}

fn outbound_settings(m: &pb::TypedMessage) -> Result<Value, Error> {
    let c: pb::ServerClientConfig = parse(&m.value)?;
    let (a, p, _) = endpoint(&c.server)?;
    Ok(json!({"version": 2, "address": a, "port": p}))
}
