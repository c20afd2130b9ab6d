//! HTTP in Xray's gRPC API: its account, server and client configs (the account and client
//! codecs are SOCKS's).

use serde_json::{json, Value};

use crate::pb;
use crate::proxy::api::{parse, Error};
use crate::proxy::protocol::{Api, Users};
use crate::proxy::socks::api::{accounts, client_settings, password_user};

const ACCOUNT: &str = "xray.proxy.http.Account";

/// HTTP's API codecs.
pub const API: Api = Api {
    user_pkg: Some("proxy/http"),
    accounts: &[ACCOUNT],
    account: Some(crate::proxy::socks::api::account),
    user: Some(user),
    inbound_configs: &["xray.proxy.http.ServerConfig"],
    inbound_settings: Some(inbound_settings),
    list_users: None,
    outbound_configs: &["xray.proxy.http.ClientConfig"],
    outbound_settings: Some(client_settings),
};

fn user(c: &Value, _method: Option<&str>) -> pb::User {
    password_user(c, ACCOUNT)
}

fn inbound_settings(m: &pb::TypedMessage, _users: Users<'_>) -> Result<Value, Error> {
    let c: pb::HttpServerConfig = parse(&m.value)?;
    Ok(
        json!({"accounts": accounts(c.accounts.iter()), "allowTransparent": c.allow_transparent, "userLevel": c.user_level}),
    )
}
