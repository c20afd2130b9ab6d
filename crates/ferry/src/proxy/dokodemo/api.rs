//! Dokodemo-door in Xray's gRPC API: its config read into the JSON its builder takes.

use serde_json::{json, Map, Value};

use crate::pb;
use crate::proxy::api::{address, networks, parse, Error};
use crate::proxy::protocol::{Api, Users};

/// Dokodemo-door's API codecs.
pub const API: Api = Api {
    inbound_configs: &["xray.proxy.dokodemo.Config"],
    inbound_settings: Some(inbound_settings),
    ..Api::NONE
};

fn inbound_settings(m: &pb::TypedMessage, _users: Users<'_>) -> Result<Value, Error> {
    let c: pb::DokodemoConfig = parse(&m.value)?;
    let mut s = Map::new();
    if c.follow_redirect {
        s.insert("followRedirect".into(), json!(true));
    }
    if let Some(a) = address(&c.address) {
        s.insert("address".into(), json!(a));
    }
    if c.port != 0 {
        s.insert("port".into(), json!(c.port));
    }
    if !c.port_map.is_empty() {
        s.insert("portMap".into(), json!(c.port_map));
    }
    if let Some(n) = networks(&c.networks) {
        s.insert("network".into(), json!(n));
    }
    if c.user_level != 0 {
        s.insert("userLevel".into(), json!(c.user_level));
    }
    Ok(Value::Object(s))
}
