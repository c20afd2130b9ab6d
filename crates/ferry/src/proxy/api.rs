//! What the protocols' API codecs share: the configs and accounts panels send through Xray's
//! gRPC API (protobuf, [`crate::pb`]) read into the JSON their builders take, and users
//! written back as protobuf. Errors are the texts the API answers with.

use std::net::IpAddr;

use prost::Message;
use serde_json::{json, Map, Value};

use crate::pb;

/// An error text as the API returns it.
pub type Error = String;

/// A protobuf message from its bytes.
pub fn parse<M: Message + Default>(b: &[u8]) -> Result<M, Error> {
    M::decode(b).map_err(|_| "proto: cannot parse invalid wire-format data".to_string())
}

/// An `IPOrDomain` as text.
pub fn address(a: &Option<pb::IpOrDomain>) -> Option<String> {
    match a.as_ref()?.address.as_ref()? {
        pb::Address::Ip(b) => match b.len() {
            4 => <[u8; 4]>::try_from(b.as_slice())
                .ok()
                .map(|x| IpAddr::from(x).to_string()),
            16 => <[u8; 16]>::try_from(b.as_slice())
                .ok()
                .map(|x| IpAddr::from(x).to_string()),
            _ => None,
        },
        pb::Address::Domain(d) => Some(d.clone()),
    }
}

/// `Network` values as a JSON `network` text (`"tcp,udp"`), none when empty.
pub fn networks(n: &[i32]) -> Option<String> {
    let names: Vec<&str> = n
        .iter()
        .filter_map(|x| match *x {
            pb::network::TCP => Some("tcp"),
            pb::network::UDP => Some("udp"),
            _ => None,
        })
        .collect();
    (!names.is_empty()).then(|| names.join(","))
}

/// A user id as Xray checks it (`pkg` prefixes the error).
pub fn check_uuid(pkg: &str, id: &str) -> Result<(), Error> {
    let ok = (id.len() == 32 || id.len() == 36) && uuid::Uuid::parse_str(id).is_ok();
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{pkg}: failed to parse ID > common/uuid: invalid UUID: {id}"
        ))
    }
}

/// An account's fields with the user's email and level: a JSON client object.
pub fn client(mut o: Map<String, Value>, u: &pb::User) -> Value {
    o.insert("email".into(), json!(u.email));
    o.insert("level".into(), json!(u.level));
    Value::Object(o)
}

/// A client object's level.
pub fn level(c: &Value) -> u32 {
    c.get("level").and_then(Value::as_u64).unwrap_or(0) as u32
}

/// A client object's text field (empty when missing).
pub fn text(c: &Value, k: &str) -> String {
    c.get(k).and_then(Value::as_str).unwrap_or("").to_string()
}

/// A JSON client object as the protobuf user, with this account.
pub fn user(c: &Value, account: Option<pb::TypedMessage>) -> pb::User {
    pb::User {
        level: level(c),
        email: text(c, "email"),
        account,
    }
}

/// Fallbacks (VLESS, Trojan) as their JSON array.
pub fn fallbacks(f: &[pb::Fallback]) -> Value {
    Value::Array(
        f.iter()
            .map(|f| {
                let mut o = Map::new();
                for (k, v) in [
                    ("name", &f.name),
                    ("alpn", &f.alpn),
                    ("path", &f.path),
                    ("type", &f.r#type),
                ] {
                    if !v.is_empty() {
                        o.insert(k.into(), json!(v));
                    }
                }
                o.insert("dest".into(), json!(f.dest));
                o.insert("xver".into(), json!(f.xver));
                Value::Object(o)
            })
            .collect(),
    )
}

/// A client config's server: (address, port, user).
pub fn endpoint(e: &Option<pb::ServerEndpoint>) -> Result<(String, u32, Option<pb::User>), Error> {
    let e = e.as_ref().ok_or("common/protocol: server is missing")?;
    let a = address(&e.address).ok_or("common/protocol: server address is missing")?;
    Ok((a, e.port, e.user.clone()))
}

/// A client config's user with its account, which must be of type `ty`.
pub fn account<M: Message + Default>(
    u: &Option<pb::User>,
    ty: &str,
) -> Result<(M, pb::User), Error> {
    let u = u.clone().ok_or("common/protocol: user is missing")?;
    let a = u
        .account
        .as_ref()
        .ok_or("common/protocol: Account is missing")?;
    if a.r#type != ty {
        return Err(format!("{} is not a {ty}", a.r#type));
    }
    Ok((parse(&a.value)?, u))
}
