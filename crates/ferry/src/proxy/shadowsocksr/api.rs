//! ShadowsocksR in the gRPC API: Ferry's own account type (`ferry.proxy.shadowsocksr.Account`)
//! read into a JSON client object and written back for listing.

use serde_json::{json, Map, Value};

use crate::pb;
use crate::proxy::api::{self, parse, Error};
use crate::proxy::protocol::Api;

const ACCOUNT: &str = "ferry.proxy.shadowsocksr.Account";

/// ShadowsocksR's API codecs (users only: Xray has no ShadowsocksR configs).
pub const API: Api = Api {
    user_pkg: Some("proxy/shadowsocksr"),
    accounts: &[ACCOUNT],
    account: Some(account),
    user: Some(user),
    ..Api::NONE
};

fn account(u: &pb::User, acc: &pb::TypedMessage) -> Result<Value, Error> {
    let a: pb::SsrAccount = parse(&acc.value)?;
    let mut o = Map::new();
    o.insert("uid".into(), json!(a.uid));
    o.insert("password".into(), json!(a.password));
    Ok(api::client(o, u))
}

fn user(c: &Value, _method: Option<&str>) -> pb::User {
    let a = pb::SsrAccount {
        uid: c.get("uid").and_then(Value::as_u64).unwrap_or(0) as u32,
        password: api::text(c, "password"),
    };
    api::user(c, Some(pb::TypedMessage::of(ACCOUNT, &a)))
}
