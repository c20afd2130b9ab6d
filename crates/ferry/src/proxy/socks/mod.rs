//! `socks` (alias `mixed`): SOCKS5 with optional username/password, UDP ASSOCIATE, SOCKS4/4a,
//! and HTTP proxy requests on the same port (told apart by the first byte). Outbound: SOCKS5
//! CONNECT and UDP ASSOCIATE through a server.

pub mod accounts;
pub mod api;
pub mod codec;
pub mod inbound;
pub mod outbound;

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::sync::Arc;

use super::{InboundBuild, InboundHandler, OutboundBuild, OutboundHandler};
use crate::common::{Address, Destination};
use crate::config::reader::{ConfigError, Obj, Result};

/// socks's entry in the protocol table.
pub const PROTOCOL: crate::proxy::protocol::Protocol = crate::proxy::protocol::Protocol {
    inbound_aliases: &["mixed"],
    inbound: Some(build_inbound),
    outbound: Some(build_outbound),
    api: api::API,
    ..crate::proxy::protocol::Protocol::named(module_path!(), &["socks"])
};

/// Reads one SOCKS message with `parse` and consumes it; a malformed one becomes `bad(e)`.
async fn read_msg<T>(
    r: &mut super::head::HeadReader,
    parse: impl Fn(&[u8]) -> codec::Parsed<T>,
    bad: impl FnOnce(codec::Error) -> io::Error,
) -> io::Result<T> {
    let (v, n) = r.read_until(parse).await?.map_err(bad)?;
    r.consume(n);
    Ok(v)
}

/// `user` -> `pass` of an inbound's `accounts` (alias `users`).
pub type Accounts = HashMap<String, String>;

/// Reads `accounts` (alias `users`): `[{"user": "u", "pass": "p"}]`.
pub fn parse_accounts(o: &Obj<'_>) -> Result<Accounts> {
    let mut accounts = Accounts::new();
    for a in o.objs(&["accounts", "users"])? {
        let user = a.req_str("user")?;
        let pass = a.str("pass")?.unwrap_or_default();
        if user.is_empty() || user.len() > 255 || pass.len() > 255 {
            return Err(ConfigError::new(
                a.key_path("user"),
                "user and pass must be 1-255 bytes",
            ));
        }
        a.ignore(&["email", "level"]);
        a.finish();
        accounts.insert(user, pass);
    }
    Ok(accounts)
}

/// Settings of a `socks` inbound.
#[derive(Clone, Debug, Default)]
pub struct InboundConfig {
    /// `Some` when `auth` is `"password"` (possibly empty: accounts come through the
    /// management interface later).
    pub accounts: Option<Accounts>,
    pub udp: bool,
    /// `ip`: the address put into UDP ASSOCIATE replies (default: the connection's local IP).
    pub ip: Option<IpAddr>,
    pub level: u32,
}

pub fn build_inbound(o: &Obj<'_>, b: &InboundBuild<'_>) -> Result<Arc<dyn InboundHandler>> {
    let accounts = parse_accounts(o)?;
    let auth = o.str("auth")?.unwrap_or_default();
    let accounts = match auth.to_ascii_lowercase().as_str() {
        "" | "noauth" => {
            if !accounts.is_empty() {
                o.diag().warn(
                    &o.key_path("accounts"),
                    "accounts are ignored with auth \"noauth\"",
                );
            }
            None
        }
        // No account yet is fine (Xray too): nobody gets in until one is added.
        "password" => Some(accounts),
        other => {
            return Err(ConfigError::new(
                o.key_path("auth"),
                format!("unknown auth method {other:?} (noauth or password)"),
            ))
        }
    };
    let ip = match o.str("ip")?.filter(|s| !s.is_empty()) {
        Some(s) => Some(s.parse::<IpAddr>().map_err(|_| {
            ConfigError::new(o.key_path("ip"), format!("{s:?} is not an IP address"))
        })?),
        None => None,
    };
    let level = user_level(o)?;
    o.ignore(&["timeout"]);
    Ok(Arc::new(inbound::SocksInbound::new(
        InboundConfig {
            accounts,
            udp: o.bool("udp")?.unwrap_or(false),
            ip,
            level,
        },
        b.counters,
    )))
}

/// `userLevel` (default 0).
pub fn user_level(o: &Obj<'_>) -> Result<u32> {
    match o.u64("userLevel")? {
        None => Ok(0),
        Some(n) => u32::try_from(n)
            .map_err(|_| ConfigError::new(o.key_path("userLevel"), "level is too large")),
    }
}

/// One proxy server of a `socks` or `http` outbound, with its optional credentials.
#[derive(Clone, Debug)]
pub struct Server {
    pub dest: Destination,
    pub user: Option<(String, String)>,
}

/// Reads `servers: [{address, port, users: [{user, pass}]}]`, or the flat form
/// `{address, port, user, pass}` newer Xray also accepts. Exactly one server.
pub fn parse_server(o: &Obj<'_>) -> Result<Server> {
    let servers = o.objs(&["servers"])?;
    if servers.len() > 1 {
        return Err(ConfigError::new(
            o.key_path("servers"),
            "only one server is supported; use several outbounds and a balancer",
        ));
    }
    let (s, flat) = match servers.into_iter().next() {
        Some(s) => (s, false),
        None if o.has("address") => (
            Obj::new(&serde_json::Value::Null, o.path(), o.diag())?,
            true,
        ),
        None => return Err(ConfigError::new(o.key_path("servers"), "is required")),
    };
    let src = if flat { o } else { &s };
    let address = src.req_str("address")?;
    let port = src
        .port("port")?
        .ok_or_else(|| ConfigError::new(src.key_path("port"), "is required"))?;
    let mut user = None;
    if flat {
        if let Some(u) = o.str("user")? {
            user = Some((u, o.str("pass")?.unwrap_or_default()));
        }
        o.ignore(&["level", "email"]);
    } else {
        let users = s.objs(&["users"])?;
        if users.len() > 1 {
            o.diag()
                .warn(&s.key_path("users"), "only the first user is used");
        }
        for (i, u) in users.into_iter().enumerate() {
            let name = u.req_str("user")?;
            let pass = u.str("pass")?.unwrap_or_default();
            if name.len() > 255 || pass.len() > 255 {
                return Err(ConfigError::new(
                    u.key_path("user"),
                    "user and pass must be at most 255 bytes",
                ));
            }
            u.ignore(&["level", "email"]);
            u.finish();
            if i == 0 {
                user = Some((name, pass));
            }
        }
        s.finish();
    }
    Ok(Server {
        dest: Destination::new(Address::parse(&address), port),
        user,
    })
}

pub fn build_outbound(o: &Obj<'_>, b: &OutboundBuild<'_>) -> Result<Arc<dyn OutboundHandler>> {
    let server = parse_server(o)?;
    if let Some(v) = o.str("version")? {
        if v != "5" {
            return Err(ConfigError::new(
                o.key_path("version"),
                "only SOCKS version 5 is supported as an outbound",
            ));
        }
    }
    Ok(Arc::new(outbound::SocksOutbound {
        server,
        dialer: b.dialer.clone(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Diagnostics;
    use serde_json::json;

    fn inbound(v: serde_json::Value) -> std::result::Result<(), ConfigError> {
        let d = Diagnostics::default();
        let o = Obj::new(&v, "inbounds[0].settings", &d)?;
        build_inbound(
            &o,
            &InboundBuild {
                tag: "t",
                diag: &d,
                counters: &Default::default(),
                stream: &Default::default(),
            },
        )
        .map(|_| ())
    }

    #[test]
    fn inbound_settings_errors_name_their_path() {
        assert!(inbound(json!({"auth": "noauth", "udp": true, "ip": "127.0.0.1"})).is_ok());
        assert!(
            inbound(json!({"auth": "password", "users": [{"user": "a", "pass": "b"}]})).is_ok()
        );
        // No account yet (as Xray accepts): nobody gets in until one is added.
        assert!(inbound(json!({"auth": "password"})).is_ok());
        assert!(inbound(json!({"auth": "password", "accounts": []})).is_ok());
        assert_eq!(
            inbound(json!({"auth": "gssapi"})).unwrap_err().path,
            "inbounds[0].settings.auth"
        );
        assert_eq!(
            inbound(json!({"ip": "nope"})).unwrap_err().path,
            "inbounds[0].settings.ip"
        );
        assert_eq!(
            inbound(json!({"auth": "password", "accounts": [{"pass": "x"}]}))
                .unwrap_err()
                .path,
            "inbounds[0].settings.accounts[0].user"
        );
    }

    #[test]
    fn outbound_server_forms() {
        let d = Diagnostics::default();
        let v = json!({"servers": [{"address": "1.2.3.4", "port": 1080,
            "users": [{"user": "u", "pass": "p", "level": 0}]}]});
        let s = parse_server(&Obj::new(&v, "s", &d).unwrap()).unwrap();
        assert_eq!(s.dest, Destination::parse("1.2.3.4:1080").unwrap());
        assert_eq!(s.user, Some(("u".into(), "p".into())));
        let v = json!({"address": "h", "port": "8080", "user": "u", "pass": "p"});
        let s = parse_server(&Obj::new(&v, "s", &d).unwrap()).unwrap();
        assert_eq!(s.dest, Destination::parse("h:8080").unwrap());
        assert_eq!(s.user, Some(("u".into(), "p".into())));
        let v = json!({"servers": [{"address": "a", "port": 1}, {"address": "b", "port": 2}]});
        assert_eq!(
            parse_server(&Obj::new(&v, "s", &d).unwrap())
                .unwrap_err()
                .path,
            "s.servers"
        );
        let v = json!({"servers": [{"address": "a"}]});
        assert_eq!(
            parse_server(&Obj::new(&v, "s", &d).unwrap())
                .unwrap_err()
                .path,
            "s.servers[0].port"
        );
        assert_eq!(
            parse_server(&Obj::new(&json!({}), "s", &d).unwrap())
                .unwrap_err()
                .path,
            "s.servers"
        );
    }
}
