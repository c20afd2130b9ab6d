//! Shadowsocks (and Shadowsocks 2022) in Xray's gRPC API: accounts, server and client configs
//! read into the JSON its builders take; users written back for listing.

use prost::Message;
use serde_json::{json, Map, Value};

use crate::pb;
use crate::proxy::api::{self, address, endpoint, networks, parse, Error};
use crate::proxy::protocol::{Api, Users};

const ACCOUNT: &str = "xray.proxy.shadowsocks.Account";
const ACCOUNT_2022: &str = "xray.proxy.shadowsocks_2022.Account";
const SERVER: &str = "xray.proxy.shadowsocks.ServerConfig";
const SERVER_2022: &str = "xray.proxy.shadowsocks_2022.ServerConfig";
const MULTI_2022: &str = "xray.proxy.shadowsocks_2022.MultiUserServerConfig";
const CLIENT: &str = "xray.proxy.shadowsocks.ClientConfig";
const CLIENT_2022: &str = "xray.proxy.shadowsocks_2022.ClientConfig";

const UNSUPPORTED: &str =
    "proxy/shadowsocks: failed to get cipher > proxy/shadowsocks: Unsupported cipher.";

/// Shadowsocks's API codecs.
pub const API: Api = Api {
    user_pkg: Some("proxy/shadowsocks"),
    accounts: &[ACCOUNT, ACCOUNT_2022],
    account: Some(account),
    user: Some(user),
    inbound_configs: &[SERVER, SERVER_2022, MULTI_2022],
    inbound_settings: Some(inbound_settings),
    list_users: Some(list_users),
    outbound_configs: &[CLIENT, CLIENT_2022],
    outbound_settings: Some(outbound_settings),
};

/// A Shadowsocks `CipherType` as Ferry's method name.
fn cipher_name(t: i32) -> Option<&'static str> {
    Some(match t {
        5 => "aes-128-gcm",
        6 => "aes-256-gcm",
        7 => "chacha20-ietf-poly1305",
        8 => "xchacha20-ietf-poly1305",
        9 => "none",
        _ => return None,
    })
}

/// A method name as a Shadowsocks `CipherType` (0 when it has none: stream ciphers, 2022).
pub fn cipher_type(method: &str) -> i32 {
    match method.to_ascii_lowercase().as_str() {
        "aes-128-gcm" | "aead_aes_128_gcm" => 5,
        "aes-256-gcm" | "aead_aes_256_gcm" => 6,
        "chacha20-poly1305" | "aead_chacha20_poly1305" | "chacha20-ietf-poly1305" => 7,
        "xchacha20-poly1305" | "aead_xchacha20_poly1305" | "xchacha20-ietf-poly1305" => 8,
        "none" | "plain" => 9,
        _ => 0,
    }
}

fn account(u: &pb::User, acc: &pb::TypedMessage) -> Result<Value, Error> {
    let mut o = Map::new();
    if acc.r#type == ACCOUNT_2022 {
        let a: pb::Ss2022Account = parse(&acc.value)?;
        o.insert("password".into(), json!(a.key));
    } else {
        let a: pb::ShadowsocksAccount = parse(&acc.value)?;
        let m = cipher_name(a.cipher_type).ok_or(UNSUPPORTED)?;
        o.insert("password".into(), json!(a.password));
        o.insert("method".into(), json!(m));
    }
    Ok(api::client(o, u))
}

fn user(c: &Value, method: Option<&str>) -> pb::User {
    let m = match api::text(c, "method") {
        m if m.is_empty() => method.unwrap_or("").to_string(),
        m => m,
    };
    let account = if m.starts_with("2022-") {
        pb::TypedMessage::of(
            ACCOUNT_2022,
            &pb::Ss2022Account {
                key: api::text(c, "password"),
            },
        )
    } else {
        pb::TypedMessage::of(
            ACCOUNT,
            &pb::ShadowsocksAccount {
                password: api::text(c, "password"),
                cipher_type: cipher_type(&m),
                iv_check: false,
            },
        )
    };
    api::user(c, Some(account))
}

fn inbound_settings(m: &pb::TypedMessage, users: Users<'_>) -> Result<Value, Error> {
    let (mut s, network) = match m.r#type.as_str() {
        SERVER_2022 => {
            let c: pb::Ss2022ServerConfig = parse(&m.value)?;
            (
                json!({"method": c.method, "password": c.key, "email": c.email, "level": c.level}),
                c.network,
            )
        }
        MULTI_2022 => {
            let c: pb::Ss2022MultiConfig = parse(&m.value)?;
            (
                json!({"method": c.method, "password": c.key, "clients": users(&c.users)?}),
                c.network,
            )
        }
        _ => {
            let c: pb::ShadowsocksServerConfig = parse(&m.value)?;
            (json!({"clients": users(&c.users)?}), c.network)
        }
    };
    if let Some(n) = networks(&network) {
        s["network"] = json!(n);
    }
    Ok(s)
}

fn list_users(users: Vec<pb::User>) -> Vec<u8> {
    pb::ShadowsocksServerConfig {
        users,
        network: Vec::new(),
    }
    .encode_to_vec()
}

fn outbound_settings(m: &pb::TypedMessage) -> Result<Value, Error> {
    if m.r#type == CLIENT_2022 {
        let c: pb::Ss2022ClientConfig = parse(&m.value)?;
        let a = address(&c.address).ok_or("common/protocol: server address is missing")?;
        return Ok(
            json!({"servers": [{"address": a, "port": c.port, "method": c.method, "password": c.key}]}),
        );
    }
    let c: pb::ServerClientConfig = parse(&m.value)?;
    let (a, p, u) = endpoint(&c.server)?;
    let (acc, _): (pb::ShadowsocksAccount, _) = api::account(&u, ACCOUNT)?;
    let method = cipher_name(acc.cipher_type).ok_or(UNSUPPORTED)?;
    Ok(json!({"servers": [{"address": a, "port": p, "method": method, "password": acc.password}]}))
}
