//! `shadowsocksr` (SSR): a protocol plugin, a stream cipher and an obfs plugin per connection
//! (specs/shadowsocksr.md), server and client, TCP and UDP.
//!
//! * `cipher.rs`: the stream methods (the Shadowsocks ones plus SSR's own).
//! * `protocol/`: origin, verify_deflate, auth_sha1_v4, auth_aes128_*, auth_chain_a–e.
//! * `obfs/`: plain, http_simple, http_post, random_head, tls1.2_ticket_auth/fastauth.
//! * `stream.rs`: the three composed in wire order; `udp.rs`: the datagram form.
//! * `inbound.rs` / `outbound.rs`: the async adapters; `link.rs`: `ssr://` links.
//!
//! Every codec is sans-IO and returns [`util::Error`] on bad input; the server never answers
//! one (it drains, as its Shadowsocks server does, see `inbound.rs`).

pub mod api;
pub mod cipher;
#[cfg(any(test, feature = "fuzzing"))]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "fuzz harnesses: a broken invariant must panic for the fuzzer to see it"
)]
pub mod fuzz;
pub mod inbound;
pub mod link;
pub mod obfs;
pub mod outbound;
pub mod protocol;
pub mod stream;
pub mod udp;
pub mod util;

use crate::common::{Address, Destination, Network};
use crate::config::reader::{ConfigError, Obj, Result};
use crate::proxy::User;

pub use inbound::build as build_inbound;
pub use outbound::build as build_outbound;

/// shadowsocksr's entry in the protocol table.
pub const PROTOCOL: crate::proxy::protocol::Protocol = crate::proxy::protocol::Protocol {
    inbound: Some(build_inbound),
    outbound: Some(build_outbound),
    guarded: true,
    api: api::API,
    links: link::LINKS,
    ..crate::proxy::protocol::Protocol::named(module_path!(), &["shadowsocksr", "ssr"])
};

/// What both sides configure: method, password and the two plugins.
#[derive(Clone, Debug, PartialEq)]
pub struct Common {
    pub method: cipher::Method,
    pub password: String,
    pub protocol: protocol::Kind,
    pub protocol_param: String,
    pub obfs: obfs::Kind,
    pub obfs_param: String,
}

impl Common {
    pub fn key(&self) -> Vec<u8> {
        self.method.key(&self.password)
    }

    /// obfs + protocol overhead (§1.3).
    pub fn overhead(&self) -> usize {
        self.obfs.overhead() + self.protocol.overhead()
    }
}

fn read_common(o: &Obj<'_>) -> Result<Common> {
    let m = o.req_str("method")?;
    let method = cipher::Method::parse(&m).ok_or_else(|| {
        ConfigError::new(
            o.key_path("method"),
            format!(
                "unknown or unsupported method {m:?} (supported: {}; SSR has no AEAD methods)",
                cipher::Method::ALL
                    .iter()
                    .map(|m| m.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
    })?;
    let password = o.str("password")?.unwrap_or_default();
    let p = o.str("protocol")?.unwrap_or_default();
    let protocol = parse_plugin(o, "protocol", &p, protocol::Kind::parse, || {
        protocol::Kind::ALL.iter().map(|k| k.name()).collect()
    })?;
    let f = o.str("obfs")?.unwrap_or_default();
    let obfs = parse_plugin(o, "obfs", &f, obfs::Kind::parse, || {
        obfs::Kind::ALL.iter().map(|k| k.name()).collect()
    })?;
    let protocol_param = o
        .str_alias(&["protocolParam", "protocol_param", "protoparam"])?
        .unwrap_or_default();
    let obfs_param = o
        .str_alias(&["obfsParam", "obfs_param", "obfsparam"])?
        .unwrap_or_default();
    Ok(Common {
        method,
        password,
        protocol,
        protocol_param,
        obfs,
        obfs_param,
    })
}

fn parse_plugin<K>(
    o: &Obj<'_>,
    key: &str,
    name: &str,
    parse: fn(&str) -> Option<K>,
    all: impl Fn() -> Vec<&'static str>,
) -> Result<K> {
    if let Some(k) = parse(name) {
        return Ok(k);
    }
    let why = if name.ends_with("_compatible") {
        "the _compatible fallback to plain Shadowsocks is not supported (name the plugin without it)"
            .to_string()
    } else if name.starts_with("auth_chain_f") {
        "auth_chain_f is not supported (no peer to test it against: its Python client crashes)"
            .to_string()
    } else {
        format!("unknown {key} {name:?}")
    };
    Err(ConfigError::new(
        o.key_path(key),
        format!("{why} (supported: {})", all().join(", ")),
    ))
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

/// A server's settings.
pub struct ServerConfig {
    pub common: Common,
    pub users: Vec<protocol::SsrUser>,
    pub networks: Vec<Network>,
    /// The user of a single-user server (its `email`, if any).
    pub user: User,
    /// `redirect`: the decoy a failed handshake is handed to (with every byte it sent).
    pub redirect: Option<std::sync::Arc<crate::proxy::fallback::Fallback>>,
}

/// `redirect`: `"host:port"` (port 80 by default), or the Python server's list, whose first
/// plain entry is taken (its `regex#dest` entries are refused).
fn read_redirect(o: &Obj<'_>) -> Result<Option<std::sync::Arc<crate::proxy::fallback::Fallback>>> {
    let list = o.str_list("redirect")?.unwrap_or_default();
    let Some(first) = list.iter().find(|s| !s.trim().is_empty()) else {
        return Ok(None);
    };
    if first.contains('#') {
        return Err(ConfigError::new(
            o.key_path("redirect"),
            "pattern entries (regex#host:port) are not supported: give host:port",
        ));
    }
    let t = first.trim();
    let dest = Destination::parse(t)
        .or_else(|| Destination::parse(&format!("{t}:80")))
        .ok_or_else(|| {
            ConfigError::new(o.key_path("redirect"), format!("{t:?} is not host:port"))
        })?;
    Ok(Some(std::sync::Arc::new(
        crate::proxy::fallback::Fallback { dest, xver: 0 },
    )))
}

fn read_user(c: &Obj<'_>) -> Result<protocol::SsrUser> {
    let uid = c
        .u64("uid")?
        .ok_or_else(|| ConfigError::new(c.key_path("uid"), "is required"))?;
    let uid =
        u32::try_from(uid).map_err(|_| ConfigError::new(c.key_path("uid"), "must fit 32 bits"))?;
    let password = c.req_str("password")?;
    let email = c.str("email")?.unwrap_or_else(|| uid.to_string());
    let level = c.u64("level")?.unwrap_or(0) as u32;
    Ok(protocol::SsrUser {
        uid,
        password: password.into_bytes(),
        user: User::new(email.as_str(), level),
    })
}

/// Reads an inbound's `settings`.
pub fn parse_server(o: &Obj<'_>) -> Result<ServerConfig> {
    let common = read_common(o)?;
    let networks = networks(o)?;
    let email = o.str("email")?.unwrap_or_default();
    let level = o.u64("level")?.unwrap_or(0) as u32;
    let mut users = Vec::new();
    for c in o.client_objs(&["users", "clients"])? {
        users.push(read_user(&c)?);
        c.finish();
    }
    // The Python server's form: `max_client#uid:password,uid:password`.
    if let Some((_, list)) = common.protocol_param.split_once('#') {
        for item in list.split(',').filter(|s| !s.trim().is_empty()) {
            let (uid, pw) = item
                .split_once(':')
                .and_then(|(u, p)| Some((u.trim().parse::<u32>().ok()?, p)))
                .ok_or_else(|| {
                    ConfigError::new(
                        o.key_path("protocolParam"),
                        format!("{item:?} is not uid:password"),
                    )
                })?;
            users.push(protocol::SsrUser {
                uid,
                password: pw.as_bytes().to_vec(),
                user: User::new(uid.to_string().as_str(), 0),
            });
        }
    }
    if !users.is_empty() && !common.protocol.multi_user() {
        return Err(ConfigError::new(
            o.key_path("users"),
            format!(
                "{} carries no user id: several users need auth_aes128_* or auth_chain_*",
                common.protocol.name()
            ),
        ));
    }
    let mut seen = std::collections::HashSet::new();
    for u in &users {
        if !seen.insert(u.uid) {
            return Err(ConfigError::new(
                o.key_path("users"),
                format!("uid {} appears twice", u.uid),
            ));
        }
    }
    if users.is_empty() && o.str("password")?.is_none() {
        return Err(ConfigError::new(o.key_path("password"), "is required"));
    }
    if networks.contains(&Network::Udp)
        && !matches!(
            common.protocol,
            protocol::Kind::Origin
                | protocol::Kind::AuthSha1V4
                | protocol::Kind::AuthAes128Md5
                | protocol::Kind::AuthAes128Sha1
                | protocol::Kind::AuthChainA
                | protocol::Kind::AuthChainB
                | protocol::Kind::AuthChainC
                | protocol::Kind::AuthChainD
                | protocol::Kind::AuthChainE
        )
    {
        return Err(ConfigError::new(
            o.key_path("network"),
            format!("{} has no UDP form", common.protocol.name()),
        ));
    }
    o.ignore(&["udp", "timeout"]);
    Ok(ServerConfig {
        redirect: read_redirect(o)?,
        common,
        users,
        networks,
        user: User::new(email.as_str(), level),
    })
}

/// A client's settings: one server.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    pub server: Destination,
    pub common: Common,
}

/// Reads an outbound's `settings`: `servers[0]` or the flat form.
pub fn parse_client(o: &Obj<'_>) -> Result<ClientConfig> {
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
    let common = read_common(s)?;
    if s.str("password")?.is_none() {
        return Err(ConfigError::new(s.key_path("password"), "is required"));
    }
    s.ignore(&["email", "level", "remarks", "group", "udp"]);
    Ok(ClientConfig {
        server: Destination::new(Address::parse(&addr), port),
        common,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Diagnostics;
    use serde_json::json;

    fn client(v: serde_json::Value) -> Result<ClientConfig> {
        let d = Diagnostics::default();
        parse_client(&Obj::new(&v, "s", &d)?)
    }

    fn server(v: serde_json::Value) -> Result<ServerConfig> {
        let d = Diagnostics::default();
        parse_server(&Obj::new(&v, "s", &d)?)
    }

    #[test]
    fn outbound_forms_and_aliases() {
        let flat = json!({"address": "ssr.example", "port": 443, "method": "chacha20-ietf",
            "password": "pw", "protocol": "auth_chain_a", "protocol_param": "1024:pass",
            "obfs": "tls1.2_ticket_auth", "obfs_param": "cdn.example"});
        let list = json!({"servers": [{"address": "ssr.example", "port": 443,
            "method": "chacha20-ietf", "password": "pw", "protocol": "auth_chain_a",
            "protocolParam": "1024:pass", "obfs": "tls1.2_ticket_auth",
            "obfsParam": "cdn.example"}]});
        for v in [flat, list] {
            let c = client(v).unwrap();
            assert_eq!(c.server, Destination::parse("ssr.example:443").unwrap());
            assert_eq!(c.common.method, cipher::Method::Chacha20Ietf);
            assert_eq!(c.common.protocol, protocol::Kind::AuthChainA);
            assert_eq!(c.common.protocol_param, "1024:pass");
            assert_eq!(c.common.obfs, obfs::Kind::TlsTicketAuth);
            assert_eq!(c.common.obfs_param, "cdn.example");
        }
        // Empty plugin names are origin/plain, as in links.
        let c =
            client(json!({"address": "a", "port": 1, "method": "none", "password": "p"})).unwrap();
        assert_eq!(
            (c.common.protocol, c.common.obfs),
            (protocol::Kind::Origin, obfs::Kind::Plain)
        );
    }

    #[test]
    fn config_errors_name_their_field() {
        let e = |v| client(v).err().map(|e| e.path);
        assert_eq!(
            e(json!({"address": "a", "port": 1, "method": "aes-128-gcm", "password": "p"})),
            Some("s.method".into())
        );
        assert_eq!(
            e(
                json!({"address": "a", "port": 1, "method": "none", "password": "p",
                "protocol": "auth_chain_f"})
            ),
            Some("s.protocol".into())
        );
        assert_eq!(
            e(
                json!({"address": "a", "port": 1, "method": "none", "password": "p",
                "obfs": "http_simple_compatible"})
            ),
            Some("s.obfs".into())
        );
        let err = server(
            json!({"method": "none", "password": "p", "protocol": "origin",
            "users": [{"uid": 1, "password": "x"}]}),
        )
        .err()
        .unwrap();
        assert_eq!(err.path, "s.users");
    }

    #[test]
    fn server_users_from_the_list_and_the_python_param() {
        let s = server(json!({"method": "aes-256-cfb", "password": "p",
            "protocol": "auth_aes128_md5", "protocolParam": "64#1025:other",
            "users": [{"uid": 1024, "password": "userpass", "email": "a@x"}]}))
        .unwrap();
        let got: Vec<(u32, String)> = s
            .users
            .iter()
            .map(|u| (u.uid, u.user.email.to_string()))
            .collect();
        assert_eq!(got, [(1024, "a@x".to_string()), (1025, "1025".to_string())]);
    }
}
