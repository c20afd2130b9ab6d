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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follow_redirect_is_carried_to_the_json() {
        let none = |_: &[pb::User]| Ok(Vec::new());
        let c = pb::DokodemoConfig {
            follow_redirect: true,
            networks: vec![2, 3],
            ..Default::default()
        };
        let m = pb::TypedMessage::of("xray.proxy.dokodemo.Config", &c);
        let j = inbound_settings(&m, &none).unwrap();
        assert_eq!(j["followRedirect"], true);
        let c = pb::DokodemoConfig::default();
        let m = pb::TypedMessage::of("xray.proxy.dokodemo.Config", &c);
        assert!(inbound_settings(&m, &none)
            .unwrap()
            .get("followRedirect")
            .is_none());
    }
}
