//! VLESS (`../shared/specs/vless.md`): a UUID, a command and a target in front of plain bytes.
//! Inbound and outbound over TCP (commands TCP, UDP and Mux: Mux.Cool and XUDP, in
//! `proxy/mux`); XTLS Vision, the reverse proxy and the fallbacks arrive with their issues
//! and are refused clearly until then.

pub mod codec;
pub mod inbound;
pub mod outbound;

use std::sync::Arc;

use super::{InboundBuild, InboundHandler, OutboundBuild, OutboundHandler};
use crate::common::uuid::parse_id;
use crate::common::{Address, Destination};
use crate::config::reader::{ConfigError, Obj, Result};
use crate::session::User;

/// One user of an inbound.
#[derive(Clone, Debug)]
pub struct Account {
    pub uuid: [u8; 16],
    /// `uuid` with bytes 6 and 7 zeroed (how Xray looks users up).
    pub key: [u8; 16],
    pub user: User,
}

impl crate::registry::UserEntry for Account {
    fn user(&self) -> &User {
        &self.user
    }
    fn same_secret(&self, other: &Self) -> bool {
        self.key == other.key
    }
}

fn parse_uuid(o: &Obj<'_>) -> Result<[u8; 16]> {
    let id = o.req_str("id")?;
    parse_id(&id).map_err(|e| ConfigError::new(o.key_path("id"), e))
}

/// A flow other than none is XTLS Vision, which has its own issue.
fn check_flow(o: &Obj<'_>) -> Result<()> {
    match o.str("flow")?.unwrap_or_default().as_str() {
        "" | "none" => Ok(()),
        f @ ("xtls-rprx-vision" | "xtls-rprx-vision-udp443") => Err(ConfigError::new(
            o.key_path("flow"),
            format!("flow {f:?} (XTLS Vision) is not supported yet"),
        )),
        f => Err(ConfigError::new(
            o.key_path("flow"),
            format!("unknown flow {f:?}"),
        )),
    }
}

/// Reads one entry of an inbound's `clients` (the API's AddUser gives the same shape).
pub fn parse_client(c: &Obj<'_>, counters: &crate::registry::CounterSource) -> Result<Account> {
    let uuid = parse_uuid(c)?;
    check_flow(c)?;
    let email = c.str("email")?.unwrap_or_default();
    let level = c.u64("level")?.unwrap_or(0) as u32;
    c.ignore(&["encryption", "reverse"]);
    Ok(Account {
        uuid,
        key: codec::lookup_key(&uuid),
        user: counters.user(&email, level),
    })
}

fn check_decryption(o: &Obj<'_>, key: &str) -> Result<()> {
    match o.str(key)?.as_deref() {
        None | Some("none") | Some("") => Ok(()),
        Some(other) => Err(ConfigError::new(
            o.key_path(key),
            format!("{other:?}: only \"none\" exists (VLESS encryption is not supported yet)"),
        )),
    }
}

pub fn build_inbound(o: &Obj<'_>, b: &InboundBuild<'_>) -> Result<Arc<dyn InboundHandler>> {
    check_decryption(o, "decryption")?;
    let fallbacks = crate::proxy::fallback::Fallbacks::parse(o)?;
    let mut accounts = Vec::new();
    for c in o.objs(&["clients"])? {
        accounts.push(parse_client(&c, b.counters)?);
        c.finish();
    }
    Ok(Arc::new(inbound::Inbound::new(
        accounts,
        b.counters.clone(),
        fallbacks,
    )))
}

/// The server an outbound talks to and the user it is.
#[derive(Clone, Debug)]
pub struct Server {
    pub dest: Destination,
    pub uuid: [u8; 16],
}

/// Reads `vnext: [{address, port, users: [{id, encryption, flow}]}]` or Xray's flat form
/// (`address`, `port`, `id` directly in `settings`).
pub fn parse_server(o: &Obj<'_>) -> Result<Server> {
    let vnext = o.objs(&["vnext"])?;
    if vnext.is_empty() && o.has("address") {
        let addr = o.req_str("address")?;
        let port = o
            .port("port")?
            .ok_or_else(|| ConfigError::new(o.key_path("port"), "is required"))?;
        check_flow(o)?;
        check_decryption(o, "encryption")?;
        o.ignore(&["level", "email"]);
        return Ok(Server {
            dest: Destination::new(Address::parse(&addr), port),
            uuid: parse_uuid(o)?,
        });
    }
    if vnext.len() != 1 {
        return Err(ConfigError::new(
            o.key_path("vnext"),
            "needs exactly one server (or give address, port and id directly)",
        ));
    }
    let s = &vnext[0];
    let addr = s.req_str("address")?;
    let port = s
        .port("port")?
        .ok_or_else(|| ConfigError::new(s.key_path("port"), "is required"))?;
    let users = s.objs(&["users"])?;
    let Some(u) = users.first() else {
        return Err(ConfigError::new(s.key_path("users"), "needs one user"));
    };
    check_flow(u)?;
    check_decryption(u, "encryption")?;
    u.ignore(&["level", "email"]);
    let uuid = parse_uuid(u)?;
    for u in users {
        u.finish();
    }
    let dest = Destination::new(Address::parse(&addr), port);
    for v in vnext {
        v.finish();
    }
    Ok(Server { dest, uuid })
}

pub fn build_outbound(o: &Obj<'_>, b: &OutboundBuild<'_>) -> Result<Arc<dyn OutboundHandler>> {
    let server = parse_server(o)?;
    Ok(Arc::new(outbound::Outbound {
        server,
        dialer: b.dialer.clone(),
        cone: crate::proxy::mux::cone(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Diagnostics;
    use serde_json::json;

    #[test]
    fn outbound_shapes_and_refusals() {
        let d = Diagnostics::default();
        let v = json!({"vnext": [{"address": "a.example", "port": 443,
            "users": [{"id": "example", "encryption": "none"}]}]});
        let s = parse_server(&Obj::new(&v, "s", &d).unwrap()).unwrap();
        assert_eq!(s.dest.to_string(), "a.example:443");
        // Every field of the server and its user was read: no "unknown field" warning.
        assert_eq!(d.take(), Vec::<String>::new());
        let v = json!({"vnext": [{"address": "a.example", "port": 443, "extra": 1,
            "users": [{"id": "example", "encryption": "none"}]}]});
        parse_server(&Obj::new(&v, "s", &d).unwrap()).unwrap();
        let w = d.take();
        assert!(w.len() == 1 && w[0].contains("s.vnext[0].extra"), "{w:?}");
        assert_eq!(
            crate::common::uuid::format(&s.uuid),
            "feb54431-301b-52bb-a6dd-e1e93e81bb9e"
        );
        let v = json!({"address": "1.2.3.4", "port": 8443, "id": "2418d087-648d-4990-86e8-19dca1d006d3"});
        let s = parse_server(&Obj::new(&v, "s", &d).unwrap()).unwrap();
        assert_eq!(s.dest.to_string(), "1.2.3.4:8443");
        let v = json!({"address": "1.2.3.4", "port": 1, "id": "x", "flow": "xtls-rprx-vision"});
        let e = parse_server(&Obj::new(&v, "s", &d).unwrap()).unwrap_err();
        assert_eq!(e.path, "s.flow");
        let v = json!({"address": "1.2.3.4", "port": 1, "id": "x", "encryption": "mlkem768"});
        let e = parse_server(&Obj::new(&v, "s", &d).unwrap()).unwrap_err();
        assert_eq!(e.path, "s.encryption");
    }
}
