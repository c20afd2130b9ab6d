//! `shadowsocks`: stream ciphers (+ OTA), AEAD (SIP004), and 2022 (SIP022/SIP023), TCP and UDP.
//!
//! * `cipher.rs`: methods, key derivation, the AEAD enum. `stream_cipher.rs`: legacy ciphers,
//!   `ota.rs`: their one-time auth.
//! * `aead.rs`: the chunk codec; `ss2022.rs`: 2022 headers and EIH; `udp.rs`: packet codecs.
//! * `conn.rs`: the stream the relay copies through; `replay.rs`: salt filters.
//! * `inbound.rs` / `outbound.rs`: the thin async adapters; `udp_server.rs`: the inbound's UDP
//!   side; `link.rs`: SIP002 `ss://` links.

pub mod aead;
pub mod api;
pub mod cipher;
pub mod conn;
/// Fuzz entry points: built for this crate's tests and with the `fuzzing` feature (the cargo-fuzz
/// targets in `fuzz/`), never in the shipped library.
#[cfg(any(test, feature = "fuzzing"))]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "fuzz harnesses: a broken invariant must panic for the fuzzer to see it"
)]
pub mod fuzz;
pub mod inbound;
pub mod link;
pub mod ota;
pub mod outbound;
pub mod replay;
pub mod ss2022;
pub mod stream_cipher;
pub mod udp;
pub mod udp_server;

use std::sync::Arc;

use crate::common::Network;
use crate::config::reader::{ConfigError, Obj, Result};
use crate::proxy::User;
use cipher::{Kind, Method};

pub use inbound::build as build_inbound;
pub use outbound::build as build_outbound;

/// shadowsocks's entry in the protocol table.
pub const PROTOCOL: crate::proxy::protocol::Protocol = crate::proxy::protocol::Protocol {
    inbound: Some(build_inbound),
    outbound: Some(build_outbound),
    guarded: true,
    api: api::API,
    links: link::LINKS,
    ..crate::proxy::protocol::Protocol::named(module_path!(), &["shadowsocks", "ss"])
};

/// One user a server accepts.
#[derive(Clone)]
pub struct Account {
    pub method: Method,
    /// Master key (stream/AEAD) or uPSK (2022).
    pub key: Vec<u8>,
    pub user: User,
    /// BLAKE3(key)[..16]: how 2022 EIH names this user.
    pub hash: [u8; 16],
}

impl crate::registry::UserEntry for Account {
    fn email(&self) -> &str {
        &self.user.email
    }
    fn user(&self) -> User {
        self.user.clone()
    }
    fn same_secret(&self, other: &Self) -> bool {
        self.key == other.key
    }
}

/// A server's settings.
pub struct ServerConfig {
    /// The method of a 2022 or single-user server (multi-user AEAD: per user).
    pub method: Method,
    /// 2022 with users: the server's identity PSK (EIH mode).
    pub ipsk: Option<Vec<u8>>,
    pub users: Vec<Account>,
    pub networks: Vec<Network>,
    /// One-time auth (stream ciphers): `Some(true)` requires it, `Some(false)` refuses it,
    /// `None` accepts both (V2Ray's "auto").
    pub ota: Option<bool>,
    /// Multi-user AEAD: the server-level `method`, taken by users that name none.
    pub default_method: Option<Method>,
    /// 2022 configured with `"clients": []`: while it has no user, the server key alone is
    /// served (what Xray makes of this config: a single-key inbound); once users are added
    /// through the management interface, identity headers choose them.
    pub key_while_empty: Option<Account>,
}

fn parse_method(o: &Obj<'_>, key: &str) -> Result<Option<Method>> {
    let Some(m) = o.str(key)? else {
        return Ok(None);
    };
    Method::parse(&m).map(Some).ok_or_else(|| {
        ConfigError::new(
            o.key_path(key),
            format!(
                "unknown method {m:?} (supported: {})",
                Method::ALL
                    .iter()
                    .map(|m| m.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
    })
}

fn key_for(o: &Obj<'_>, method: Method, password: &str) -> Result<Vec<u8>> {
    method
        .key_from_password(password)
        .map_err(|e| ConfigError::new(o.key_path("password"), e))
}

fn user_of(o: &Obj<'_>, default_email: &str) -> Result<User> {
    let email = o.str("email")?.unwrap_or_else(|| default_email.to_string());
    let level = o.u64("level")?.unwrap_or(0) as u32;
    Ok(User::new(email.as_str(), level))
}

fn networks(o: &Obj<'_>) -> Result<Vec<Network>> {
    let mut v = Vec::new();
    for n in o.str_list("network")?.unwrap_or_else(|| vec!["tcp".into()]) {
        match n.to_ascii_lowercase().as_str() {
            "tcp" => v.push(Network::Tcp),
            "udp" => v.push(Network::Udp),
            other => {
                return Err(ConfigError::new(
                    o.key_path("network"),
                    format!("unknown network {other:?}"),
                ))
            }
        }
    }
    Ok(v)
}

/// Reads an inbound's `settings` (Xray's single-user, multi-user AEAD and 2022 EIH forms).
pub fn parse_server(o: &Obj<'_>) -> Result<ServerConfig> {
    let method = parse_method(o, "method")?;
    let default_method = method;
    let password = o.str("password")?;
    let clients = o.client_objs(&["clients", "users"])?;
    // `"clients": []` (a panel adds the users later) is a multi-user inbound with no users yet.
    let has_clients = o.get_alias(&["clients", "users"]).is_some();
    o.ignore(&["ivCheck", "udp"]);
    let networks = networks(o)?;
    let ota = o.bool("ota")?;
    let top_user = user_of(o, "")?;
    if let Some(m) = method.filter(|m| m.kind() == Kind::Aead2022) {
        if ota == Some(true) {
            return Err(ConfigError::new(
                o.key_path("ota"),
                "one-time auth exists only for the stream ciphers (e.g. aes-256-cfb)",
            ));
        }
        return parse_server_2022(o, m, password, clients, has_clients, networks, top_user);
    }
    let users = if !has_clients {
        vec![single_user(o, method, password, top_user)?]
    } else {
        listed_users(o, method, password, clients)?
    };
    // With no users yet only the kind matters: the AEAD handshake tries each user's own method.
    let method = users
        .first()
        .map(|u| u.method)
        .or(method)
        .unwrap_or(Method::Aes256Gcm);
    if ota == Some(true) && method.kind() != Kind::Stream {
        return Err(ConfigError::new(
            o.key_path("ota"),
            "one-time auth exists only for the stream ciphers (e.g. aes-256-cfb)",
        ));
    }
    Ok(ServerConfig {
        method,
        ipsk: None,
        users,
        networks,
        ota,
        default_method: default_method.filter(|_| has_clients),
        key_while_empty: None,
    })
}

/// A 2022 server (method `m`): single key, or identity PSK with users (EIH).
fn parse_server_2022(
    o: &Obj<'_>,
    m: Method,
    password: Option<String>,
    clients: Vec<Obj<'_>>,
    has_clients: bool,
    networks: Vec<Network>,
    top_user: User,
) -> Result<ServerConfig> {
    let pw = password.ok_or_else(|| ConfigError::new(o.key_path("password"), "is required"))?;
    let psk = key_for(o, m, &pw)?;
    if clients.is_empty() {
        let single = Account {
            method: m,
            hash: cipher::psk_hash16(&psk),
            key: psk.clone(),
            user: top_user,
        };
        // `"clients": []`: a panel adds the users later (identity headers need AES).
        if has_clients && m != Method::Blake3Chacha20Poly1305 {
            return Ok(ServerConfig {
                method: m,
                ipsk: Some(psk),
                users: Vec::new(),
                networks,
                ota: None,
                default_method: None,
                key_while_empty: Some(single),
            });
        }
        return Ok(ServerConfig {
            method: m,
            ipsk: None,
            users: vec![single],
            networks,
            ota: None,
            default_method: None,
            key_while_empty: None,
        });
    }
    if m == Method::Blake3Chacha20Poly1305 {
        return Err(ConfigError::new(
            o.key_path("clients"),
            "2022-blake3-chacha20-poly1305 has no multi-user mode (identity headers need AES)",
        ));
    }
    let users = users_2022(m, clients)?;
    Ok(ServerConfig {
        method: m,
        ipsk: Some(psk),
        users,
        networks,
        ota: None,
        default_method: None,
        key_while_empty: None,
    })
}

/// The users of a 2022 EIH server: keys only, under the server's method `m`.
fn users_2022(m: Method, clients: Vec<Obj<'_>>) -> Result<Vec<Account>> {
    let mut users = Vec::new();
    for c in &clients {
        if let Some(um) = parse_method(c, "method")? {
            if um != m {
                return Err(ConfigError::new(
                    c.key_path("method"),
                    "users of a 2022 server must not set their own method",
                ));
            }
        }
        if c.has("address") || c.has("port") {
            return Err(ConfigError::new(
                c.path(),
                "Shadowsocks 2022 relay users (address/port) are not supported",
            ));
        }
        let pw = c.req_str("password")?;
        let key = key_for(c, m, &pw)?;
        users.push(Account {
            method: m,
            hash: cipher::psk_hash16(&key),
            key,
            user: user_of(c, "")?,
        });
    }
    for c in clients {
        c.finish();
    }
    Ok(users)
}

/// The one user of a server without a clients list: its `method` and `password`.
fn single_user(
    o: &Obj<'_>,
    method: Option<Method>,
    password: Option<String>,
    top_user: User,
) -> Result<Account> {
    let m = method.ok_or_else(|| ConfigError::new(o.key_path("method"), "is required"))?;
    let pw = password.ok_or_else(|| ConfigError::new(o.key_path("password"), "is required"))?;
    let key = key_for(o, m, &pw)?;
    Ok(Account {
        method: m,
        hash: [0; 16],
        key,
        user: top_user,
    })
}

/// The users of a stream/AEAD server with a clients list (each may name its own method,
/// else the server's `method`).
fn listed_users(
    o: &Obj<'_>,
    method: Option<Method>,
    password: Option<String>,
    clients: Vec<Obj<'_>>,
) -> Result<Vec<Account>> {
    let mut users = Vec::new();
    for c in &clients {
        let m = parse_method(c, "method")?
            .or(method)
            .ok_or_else(|| ConfigError::new(c.key_path("method"), "is required"))?;
        if m.kind() == Kind::Aead2022 {
            return Err(ConfigError::new(
                c.key_path("method"),
                "a 2022 method belongs on the inbound, with users carrying only keys",
            ));
        }
        let pw = c.req_str("password")?;
        users.push(Account {
            method: m,
            hash: [0; 16],
            key: key_for(c, m, &pw)?,
            user: user_of(c, "")?,
        });
    }
    if users.len() > 1 && users.iter().any(|u| u.method.kind() != Kind::Aead) {
        return Err(ConfigError::new(
            o.key_path("clients"),
            "several users on one port need AEAD methods (stream ciphers cannot tell users apart)",
        ));
    }
    for c in clients {
        c.finish();
    }
    if users.is_empty() {
        if password.as_deref().is_some_and(|p| !p.is_empty()) {
            o.diag().warn(
                &o.key_path("password"),
                "ignored: the inbound has a clients list (its users carry their passwords)",
            );
        }
        if let Some(m) = method.filter(|m| m.kind() != Kind::Aead) {
            return Err(ConfigError::new(
                o.key_path("method"),
                format!(
                    "an inbound that starts without users takes AEAD users only, not {:?}",
                    m.name()
                ),
            ));
        }
    }
    Ok(users)
}

/// Reads a user added at run time (`{password, email, level}`, and `method` for AEAD) into an
/// account that fits the server `cfg` with its current users `now`.
pub fn parse_added_user(c: &Obj<'_>, cfg: &ServerConfig, now: &[Account]) -> Result<Account> {
    let pw = c.req_str("password")?;
    let user = user_of(c, "")?;
    if cfg.method.kind() == Kind::Aead2022 {
        if cfg.ipsk.is_none() {
            return Err(ConfigError::new(
                c.path(),
                "this 2022 inbound has a single key; configure it with \"clients\": [] to add users",
            ));
        }
        if let Some(m) = parse_method(c, "method")?.filter(|m| *m != cfg.method) {
            return Err(ConfigError::new(
                c.key_path("method"),
                format!("users of this inbound use {:?}, not {m:?}", cfg.method),
            ));
        }
        let key = key_for(c, cfg.method, &pw)?;
        return Ok(Account {
            method: cfg.method,
            hash: cipher::psk_hash16(&key),
            key,
            user,
        });
    }
    let m = parse_method(c, "method")?
        .or(cfg.default_method)
        // An inbound configured with users: a new one takes the method they have. One that
        // started empty with no server-level method: each user names its own.
        .or_else(|| (!cfg.users.is_empty()).then(|| now.first().map_or(cfg.method, |a| a.method)))
        .ok_or_else(|| {
            ConfigError::new(
                c.key_path("method"),
                "is required (the inbound has no server-level method)",
            )
        })?;
    if m.kind() != Kind::Aead || now.iter().any(|a| a.method.kind() != Kind::Aead) {
        return Err(ConfigError::new(
            c.path(),
            "several users on one port need AEAD methods (stream ciphers cannot tell users apart)",
        ));
    }
    Ok(Account {
        method: m,
        hash: [0; 16],
        key: key_for(c, m, &pw)?,
        user,
    })
}

/// A client's settings: one server, one user.
#[derive(Clone)]
pub struct ClientConfig {
    pub server: crate::common::Destination,
    pub method: Method,
    /// Master key (stream/AEAD) or uPSK (2022).
    pub key: Vec<u8>,
    /// 2022 identity keys in front of the user key (EIH), in order.
    pub ipsks: Vec<Vec<u8>>,
    /// One-time auth on requests (stream ciphers only).
    pub ota: bool,
}

impl ClientConfig {
    /// Builds from method and password (2022: `iPSK1:…:uPSK`).
    pub fn new(
        server: crate::common::Destination,
        method: Method,
        password: &str,
    ) -> std::result::Result<ClientConfig, String> {
        if method.kind() == Kind::Aead2022 {
            let mut keys = password
                .split(':')
                .map(|k| cipher::decode_psk(k, method.key_len()))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            let key = keys.pop().ok_or("empty password")?;
            if !keys.is_empty() && method == Method::Blake3Chacha20Poly1305 {
                return Err("identity keys (EIH) need a 2022 AES method".into());
            }
            return Ok(ClientConfig {
                server,
                method,
                key,
                ipsks: keys,
                ota: false,
            });
        }
        Ok(ClientConfig {
            server,
            method,
            key: method.key_from_password(password)?,
            ipsks: Vec::new(),
            ota: false,
        })
    }
}

/// Reads an outbound's `settings`: `servers[0]` or the flattened form.
pub fn parse_client(o: &Obj<'_>) -> Result<(ClientConfig, Arc<str>)> {
    let servers = o.objs(&["servers"])?;
    let s = match servers.len() {
        0 => None,
        1 => servers.into_iter().next(),
        _ => {
            return Err(ConfigError::new(
                o.key_path("servers"),
                "exactly one server is supported (use several outbounds and a balancer)",
            ))
        }
    };
    let s = s.as_ref().unwrap_or(o);
    let addr = s.req_str("address")?;
    let port = s
        .port("port")?
        .ok_or_else(|| ConfigError::new(s.key_path("port"), "is required"))?;
    let method = parse_method(s, "method")?
        .ok_or_else(|| ConfigError::new(s.key_path("method"), "is required"))?;
    let pw = s.req_str("password")?;
    let email = s.str("email")?.unwrap_or_default();
    let ota = s.bool("ota")?.unwrap_or(false);
    s.ignore(&["level", "ivCheck", "uot", "UoTVersion"]);
    let dest = crate::common::Destination::new(crate::common::Address::parse(&addr), port);
    let mut cfg = ClientConfig::new(dest, method, &pw)
        .map_err(|e| ConfigError::new(s.key_path("password"), e))?;
    if ota && method.kind() != Kind::Stream {
        return Err(ConfigError::new(
            s.key_path("ota"),
            "one-time auth exists only for the stream ciphers (e.g. aes-256-cfb)",
        ));
    }
    cfg.ota = ota;
    Ok((cfg, email.as_str().into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::Destination;
    use crate::config::Diagnostics;
    use serde_json::json;

    fn client(v: serde_json::Value) -> Result<(ClientConfig, Arc<str>)> {
        let d = Diagnostics::default();
        parse_client(&Obj::new(&v, "s", &d)?)
    }

    #[test]
    fn outbound_servers_list_and_flat_forms_read_the_same_fields() {
        let list = json!({"servers": [{"address": "ss.example", "port": 8388,
            "method": "aes-128-gcm", "password": "pw", "email": "u@x", "level": 0}]});
        let flat = json!({"address": "ss.example", "port": 8388, "method": "aes-128-gcm",
            "password": "pw", "email": "u@x", "level": 0});
        for v in [list, flat] {
            let (c, email) = client(v).unwrap();
            assert_eq!(c.server, Destination::parse("ss.example:8388").unwrap());
            assert_eq!(c.method, Method::Aes128Gcm);
            assert_eq!(c.key, Method::Aes128Gcm.key_from_password("pw").unwrap());
            assert!(!c.ota);
            assert_eq!(&*email, "u@x");
        }
        let (c, _) = client(json!({"address": "1.2.3.4", "port": "9000",
            "method": "aes-256-cfb", "password": "x", "ota": true}))
        .unwrap();
        assert_eq!(c.server, Destination::parse("1.2.3.4:9000").unwrap());
        assert_eq!((c.method, c.ota), (Method::Aes256Cfb, true));
    }

    #[test]
    fn outbound_server_errors_name_their_path() {
        let path = |v| client(v).err().map(|e| e.path);
        assert_eq!(path(json!({})), Some("s.address".into()));
        assert_eq!(
            path(json!({"address": "a", "method": "aes-128-gcm", "password": "p"})),
            Some("s.port".into())
        );
        assert_eq!(
            path(json!({"servers": [{"address": "a", "port": 1, "password": "p"}]})),
            Some("s.servers[0].method".into())
        );
        let two = json!({"address": "a", "port": 1, "method": "aes-128-gcm", "password": "p"});
        assert_eq!(
            path(json!({"servers": [two.clone(), two]})),
            Some("s.servers".into())
        );
    }

    fn server(v: serde_json::Value) -> Result<ServerConfig> {
        let d = Diagnostics::default();
        parse_server(&Obj::new(&v, "s", &d)?)
    }

    #[test]
    fn empty_clients_start_without_users_and_take_each_users_method() {
        // Marzban: no server-level method, users added later with their own.
        let cfg = server(json!({"clients": [], "network": "tcp,udp"})).unwrap();
        assert!(cfg.users.is_empty());
        assert_eq!(cfg.method.kind(), Kind::Aead);
        let d = Diagnostics::default();
        let add = |v: serde_json::Value, now: &[Account]| {
            parse_added_user(&Obj::new(&v, "user", &d).unwrap(), &cfg, now)
        };
        let a = add(
            json!({"method": "chacha20-ietf-poly1305", "password": "p1", "email": "a"}),
            &[],
        )
        .unwrap();
        assert_eq!(a.method, Method::Chacha20Poly1305);
        let b = add(
            json!({"method": "aes-128-gcm", "password": "p2", "email": "b"}),
            std::slice::from_ref(&a),
        )
        .unwrap();
        assert_eq!(b.method, Method::Aes128Gcm);
        assert_eq!(
            add(json!({"password": "p3"}), &[]).err().unwrap().path,
            "user.method"
        );
        assert!(add(json!({"method": "aes-256-cfb", "password": "p4"}), &[]).is_err());
        // A server-level method is the default for users that name none.
        let cfg = server(json!({"method": "aes-128-gcm", "clients": []})).unwrap();
        let a = parse_added_user(
            &Obj::new(&json!({"password": "p"}), "user", &d).unwrap(),
            &cfg,
            &[],
        )
        .unwrap();
        assert_eq!(a.method, Method::Aes128Gcm);
        assert_eq!(
            server(json!({"method": "rc4-md5", "clients": []}))
                .err()
                .unwrap()
                .path,
            "s.method"
        );
        // Without a clients list, method and password are still required.
        assert_eq!(server(json!({})).err().unwrap().path, "s.method");
    }
}
