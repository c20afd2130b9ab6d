//! The protobuf configs panels send (an `InboundHandlerConfig`, an `OutboundHandlerConfig`,
//! a `User` with its typed account) turned into the Xray JSON shape that Ferry's config
//! reader takes, so one config model serves both front ends. Both `ReceiverConfig` layouts
//! are read (api.md §3.2); what Ferry cannot serve is an error, never silently dropped.
//! Errors are the texts the API answers with. What is one protocol's (its account, its
//! proxy settings) is in its folder (`proxy/<protocol>/api.rs`), found in the protocol table.

use serde_json::Value;

use super::pb;
use crate::proxy::table;

mod inbound;
mod outbound;
mod security;
mod stream;

pub use crate::proxy::api::Error;
pub use inbound::inbound_to_json;
pub use outbound::outbound_to_json;

/// Protocol configs Xray has and Ferry does not (an honest error, not "not found").
pub(super) const KNOWN_PROXIES: &[&str] = &[
    "xray.proxy.wireguard.DeviceConfig",
    "xray.proxy.dns.Config",
    "xray.proxy.loopback.Config",
    "xray.proxy.shadowsocks_2022.RelayServerConfig",
];

/// Account types Xray has and Ferry does not.
const KNOWN_ACCOUNTS: &[&str] = &["xray.proxy.wireguard.PeerConfig"];

/// The error for a config of a protocol Ferry does not have, or of none.
pub(super) fn unknown_config(ty: &str) -> Error {
    if KNOWN_PROXIES.contains(&ty) {
        format!("{ty}: this protocol is not supported by Ferry yet")
    } else {
        "proto: not found".into()
    }
}

/// Xray's error prefix (its package path) for a protocol's user manager.
pub fn user_pkg(protocol: &str) -> &'static str {
    table::inbound(protocol)
        .and_then(|p| p.api.user_pkg)
        .unwrap_or("proxy/shadowsocks")
}

/// A user of an inbound of `protocol` as its JSON client object. The account must be of the
/// inbound's protocol (Xray crashes on another protocol's account; this is an error).
pub fn user_to_json(protocol: &str, u: &pb::User) -> Result<Value, Error> {
    let acc = u
        .account
        .as_ref()
        .ok_or("common/protocol: Account is missing")?;
    let ty = acc.r#type.as_str();
    if !table::is_account(ty) && !KNOWN_ACCOUNTS.contains(&ty) {
        return Err("proto: not found".into());
    }
    match table::inbound(protocol) {
        Some(p) if p.api.accounts.contains(&ty) => match p.api.account {
            Some(decode) => decode(u, acc),
            None => Err(format!("{ty} is not an account of a {protocol} inbound")),
        },
        _ => Err(format!("{ty} is not an account of a {protocol} inbound")),
    }
}

/// A JSON client object of an inbound of `protocol` as the protobuf user panels read back
/// (GetInboundUsers). `method` is the inbound's own, for Shadowsocks users that name none.
pub fn user_from_json(protocol: &str, c: &Value, method: Option<&str>) -> pb::User {
    match table::inbound(protocol).and_then(|p| p.api.user) {
        Some(f) => f(c, method),
        None => crate::proxy::api::user(c, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn accounts_of_another_protocol_are_an_error_not_a_crash() {
        let u = pb::User {
            level: 0,
            email: "a".into(),
            account: Some(pb::TypedMessage::of(
                "xray.proxy.trojan.Account",
                &pb::TrojanAccount {
                    password: "p".into(),
                },
            )),
        };
        assert!(user_to_json("vless", &u)
            .unwrap_err()
            .contains("not an account"));
        assert_eq!(user_to_json("trojan", &u).unwrap()["password"], "p");
        let none = pb::User {
            account: None,
            ..u.clone()
        };
        assert_eq!(
            user_to_json("trojan", &none).unwrap_err(),
            "common/protocol: Account is missing"
        );
        let unknown = pb::User {
            account: Some(pb::TypedMessage {
                r#type: "x.y".into(),
                value: vec![],
            }),
            ..u
        };
        assert_eq!(
            user_to_json("trojan", &unknown).unwrap_err(),
            "proto: not found"
        );
    }

    #[test]
    fn users_go_to_json_and_back() {
        for (p, c) in [
            (
                "vless",
                json!({"id": "5f1c2a4e-0000-4000-8000-000000000001", "email": "a", "level": 1}),
            ),
            (
                "trojan",
                json!({"password": "pw", "email": "b", "level": 0}),
            ),
            (
                "shadowsocks",
                json!({"password": "pw", "method": "aes-128-gcm", "email": "c", "level": 0}),
            ),
        ] {
            let u = user_from_json(p, &c, None);
            let back = user_to_json(p, &u).unwrap();
            for k in ["email", "id", "password", "method"] {
                assert_eq!(back.get(k), c.get(k), "{p} {k}");
            }
        }
    }
}
