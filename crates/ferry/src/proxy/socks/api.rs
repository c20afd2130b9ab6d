//! SOCKS in Xray's gRPC API: its account (Ferry manages SOCKS and HTTP accounts too, where
//! Xray answers "proxy is not a UserManager"), server and client configs; the account and
//! client-config codecs HTTP shares.

use serde_json::{json, Value};

use crate::pb;
use crate::proxy::api::{self, address, endpoint, parse, Error};
use crate::proxy::protocol::{Api, Users};

const ACCOUNT: &str = "xray.proxy.socks.Account";

/// SOCKS's API codecs.
pub const API: Api = Api {
    user_pkg: Some("proxy/socks"),
    accounts: &[ACCOUNT],
    account: Some(account),
    user: Some(user),
    inbound_configs: &["xray.proxy.socks.ServerConfig"],
    inbound_settings: Some(inbound_settings),
    list_users: None,
    outbound_configs: &["xray.proxy.socks.ClientConfig"],
    outbound_settings: Some(client_settings),
};

/// A SOCKS or HTTP account as its JSON object in `accounts`; the email is the user name.
pub fn account(u: &pb::User, acc: &pb::TypedMessage) -> Result<Value, Error> {
    let a: pb::PasswordAccount = parse(&acc.value)?;
    let mut o = json!({"user": a.username, "pass": a.password, "level": u.level});
    if !u.email.is_empty() {
        o["email"] = json!(u.email);
    }
    Ok(o)
}

/// A JSON account object as the protobuf user, its account of type `ty`.
pub fn password_user(c: &Value, ty: &str) -> pb::User {
    let a = pb::PasswordAccount {
        username: api::text(c, "user"),
        password: api::text(c, "pass"),
    };
    pb::User {
        level: api::level(c),
        email: api::text(c, "user"),
        account: Some(pb::TypedMessage::of(ty, &a)),
    }
}

fn user(c: &Value, _method: Option<&str>) -> pb::User {
    password_user(c, ACCOUNT)
}

/// A server config's accounts (user name -> password) as JSON `accounts`.
pub fn accounts<'a>(a: impl Iterator<Item = (&'a String, &'a String)>) -> Vec<Value> {
    a.map(|(u, p)| json!({"user": u, "pass": p})).collect()
}

fn inbound_settings(m: &pb::TypedMessage, _users: Users<'_>) -> Result<Value, Error> {
    let c: pb::SocksServerConfig = parse(&m.value)?;
    let mut s = json!({
        "auth": if c.auth_type == 1 { "password" } else { "noauth" },
        "accounts": accounts(c.accounts.iter()),
        "udp": c.udp_enabled,
        "userLevel": c.user_level,
    });
    if let Some(a) = address(&c.address) {
        s["ip"] = json!(a);
    }
    Ok(s)
}

/// A SOCKS or HTTP client config as JSON `settings`.
pub fn client_settings(m: &pb::TypedMessage) -> Result<Value, Error> {
    let c: pb::ServerClientConfig = parse(&m.value)?;
    let (a, p, u) = endpoint(&c.server)?;
    let mut server = json!({"address": a, "port": p});
    if let Some(u) = &u {
        if let Some(acc) = &u.account {
            let pa: pb::PasswordAccount = parse(&acc.value)?;
            server["users"] = json!([{"user": pa.username, "pass": pa.password}]);
        }
    }
    Ok(json!({"servers": [server]}))
}
