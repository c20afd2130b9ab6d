//! VLESS in Xray's gRPC API: its account, its inbound config (both layouts) and its outbound
//! config read into the JSON its builders take; users written back for listing.

use prost::Message;
use serde_json::{json, Map, Value};

use crate::pb;
use crate::proxy::api::{self, check_uuid, endpoint, fallbacks, parse, Error};
use crate::proxy::protocol::{Api, Users};

const ACCOUNT: &str = "xray.proxy.vless.Account";

/// VLESS's API codecs.
pub const API: Api = Api {
    user_pkg: Some("proxy/vless"),
    accounts: &[ACCOUNT],
    account: Some(account),
    user: Some(user),
    inbound_configs: &["xray.proxy.vless.inbound.Config"],
    inbound_settings: Some(inbound_settings),
    list_users: Some(list_users),
    outbound_configs: &["xray.proxy.vless.outbound.Config"],
    outbound_settings: Some(outbound_settings),
};

fn account(u: &pb::User, acc: &pb::TypedMessage) -> Result<Value, Error> {
    let a: pb::VlessAccount = parse(&acc.value)?;
    check_uuid("proxy/vless", &a.id)?;
    let mut o = Map::new();
    o.insert("id".into(), json!(a.id));
    // Hiddify sends "\0" for no flow.
    let flow = a.flow.trim_matches('\0');
    if !flow.is_empty() {
        o.insert("flow".into(), json!(flow));
    }
    if let Some(r) = &a.reverse {
        o.insert("reverse".into(), json!({"tag": r.tag}));
    }
    Ok(api::client(o, u))
}

fn user(c: &Value, _method: Option<&str>) -> pb::User {
    let a = pb::VlessAccount {
        id: api::text(c, "id"),
        flow: api::text(c, "flow"),
        encryption: "none".into(),
        reverse: c
            .pointer("/reverse/tag")
            .and_then(Value::as_str)
            .map(|t| pb::VlessReverse { tag: t.into() }),
    };
    api::user(c, Some(pb::TypedMessage::of(ACCOUNT, &a)))
}

/// The VLESS inbound config in either layout: since v25.9.5 fallbacks are field 2 and
/// `decryption` field 3; before, the other way round. The new layout is tried first; an old
/// client's `decryption` ("none") does not parse as a fallback, and an old client's fallback
/// read as `decryption` holds control bytes no decryption setting has.
fn vless_inbound(b: &[u8]) -> Result<pb::FallbackServerConfig, Error> {
    if let Ok(c) = parse::<pb::FallbackServerConfig>(b) {
        if !c.decryption.chars().any(char::is_control) {
            return Ok(c);
        }
    }
    let o: pb::VlessInboundConfigOld = parse(b)?;
    Ok(pb::FallbackServerConfig {
        users: o.users,
        fallbacks: o.fallbacks,
        decryption: o.decryption,
    })
}

fn inbound_settings(m: &pb::TypedMessage, users: Users<'_>) -> Result<Value, Error> {
    let c = vless_inbound(&m.value)?;
    let decryption = if c.decryption.is_empty() {
        "none"
    } else {
        c.decryption.as_str()
    };
    let mut s = json!({"clients": users(&c.users)?, "decryption": decryption});
    if !c.fallbacks.is_empty() {
        s["fallbacks"] = fallbacks(&c.fallbacks);
    }
    Ok(s)
}

fn list_users(users: Vec<pb::User>) -> Vec<u8> {
    pb::FallbackServerConfig {
        users,
        decryption: "none".into(),
        ..Default::default()
    }
    .encode_to_vec()
}

fn outbound_settings(m: &pb::TypedMessage) -> Result<Value, Error> {
    let c: pb::ServerClientConfig = parse(&m.value)?;
    let (a, p, u) = endpoint(&c.server)?;
    let (acc, u): (pb::VlessAccount, _) = api::account(&u, ACCOUNT)?;
    let mut user = json!({"id": acc.id, "encryption": "none", "level": u.level, "email": u.email});
    if !acc.flow.is_empty() {
        user["flow"] = json!(acc.flow);
    }
    Ok(json!({"vnext": [{"address": a, "port": p, "users": [user]}]}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_vless_inbound_layouts_keep_decryption_and_fallbacks() {
        let fb = pb::Fallback {
            dest: "8080".into(),
            ..Default::default()
        };
        let new = pb::FallbackServerConfig {
            users: vec![],
            fallbacks: vec![fb.clone()],
            decryption: "none".into(),
        };
        let old = pb::VlessInboundConfigOld {
            users: vec![],
            decryption: "none".into(),
            fallbacks: vec![fb.clone()],
        };
        let old_no_decryption = pb::VlessInboundConfigOld {
            decryption: String::new(),
            ..old.clone()
        };
        for (what, bytes, dec) in [
            ("new", new.encode_to_vec(), "none"),
            ("old", old.encode_to_vec(), "none"),
            (
                "old without decryption",
                old_no_decryption.encode_to_vec(),
                "",
            ),
        ] {
            let c = vless_inbound(&bytes).unwrap();
            assert_eq!(c.decryption, dec, "{what}");
            assert_eq!(c.fallbacks, vec![fb.clone()], "{what}");
        }
    }
}
