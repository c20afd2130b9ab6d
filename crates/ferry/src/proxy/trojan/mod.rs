//! Trojan (trojan-gfw's protocol): a SHA-224 password hash, a command and a target in
//! front of plain bytes, no response. Inbound and outbound over TCP (TLS arrives with its own
//! step of the same issue); connections that are not Trojan's go to the fallback once it exists.

pub mod api;
pub mod codec;
pub mod inbound;
pub mod outbound;

use std::sync::Arc;

use super::{InboundBuild, InboundHandler, OutboundBuild, OutboundHandler};
use crate::common::{Address, Destination};
use crate::config::reader::{ConfigError, Obj, Result};
use crate::session::User;

/// trojan's entry in the protocol table.
pub const PROTOCOL: crate::proxy::protocol::Protocol = crate::proxy::protocol::Protocol {
    inbound: Some(build_inbound),
    outbound: Some(build_outbound),
    guarded: true,
    api: api::API,
    links: crate::proxy::protocol::Links {
        schemes: &["trojan"],
        ..crate::proxy::vless::link::LINKS
    },
    ..crate::proxy::protocol::Protocol::named(module_path!(), &["trojan"])
};

/// One user of an inbound.
#[derive(Clone, Debug)]
pub struct Account {
    pub hash: [u8; codec::HASH_LEN],
    pub user: User,
}

impl crate::registry::UserEntry for Account {
    fn email(&self) -> &str {
        &self.user.email
    }
    fn user(&self) -> User {
        self.user.clone()
    }
    fn same_secret(&self, other: &Self) -> bool {
        self.hash == other.hash
    }
}

/// Reads one entry of an inbound's `clients` (the API's AddUser gives the same shape).
pub fn parse_client(c: &Obj<'_>, counters: &crate::registry::CounterSource) -> Result<Account> {
    let pw = c.req_str("password")?;
    if pw.is_empty() {
        return Err(ConfigError::new(
            c.key_path("password"),
            "must not be empty",
        ));
    }
    if let Some(f) = c.str("flow")?.filter(|f| !f.is_empty()) {
        return Err(ConfigError::new(
            c.key_path("flow"),
            format!("Trojan has no flow {f:?}"),
        ));
    }
    let email = c.str("email")?.unwrap_or_default();
    let level = c.u64("level")?.unwrap_or(0) as u32;
    Ok(Account {
        hash: codec::password_hash(&pw),
        user: counters.user(&email, level),
    })
}

pub fn build_inbound(o: &Obj<'_>, b: &InboundBuild<'_>) -> Result<Arc<dyn InboundHandler>> {
    let fallbacks = crate::proxy::fallback::Fallbacks::parse(o)?;
    let mut accounts = Vec::new();
    for c in o.client_objs(&["clients", "users"])? {
        accounts.push(parse_client(&c, b.counters)?);
        c.finish();
    }
    Ok(Arc::new(inbound::Inbound::new(
        accounts,
        b.counters.clone(),
        fallbacks,
    )))
}

/// The server an outbound talks to.
#[derive(Clone, Debug)]
pub struct Server {
    pub dest: Destination,
    pub hash: [u8; codec::HASH_LEN],
}

/// Reads `servers: [{address, port, password}]` or the flat form.
pub fn parse_server(o: &Obj<'_>) -> Result<Server> {
    let servers = o.objs(&["servers"])?;
    let flat = servers.is_empty() && o.has("address");
    let s = match (flat, servers.len()) {
        (true, _) => o,
        (false, 1) => &servers[0],
        _ => {
            return Err(ConfigError::new(
                o.key_path("servers"),
                "needs exactly one server (or give address, port and password directly)",
            ))
        }
    };
    let addr = s.req_str("address")?;
    let port = s
        .port("port")?
        .ok_or_else(|| ConfigError::new(s.key_path("port"), "is required"))?;
    let pw = s.req_str("password")?;
    s.ignore(&["email", "level", "flow"]);
    let server = Server {
        dest: Destination::new(Address::parse(&addr), port),
        hash: codec::password_hash(&pw),
    };
    for s in servers {
        s.finish();
    }
    Ok(server)
}

pub fn build_outbound(o: &Obj<'_>, b: &OutboundBuild<'_>) -> Result<Arc<dyn OutboundHandler>> {
    Ok(Arc::new(outbound::Outbound {
        server: parse_server(o)?,
        dialer: b.dialer.clone(),
    }))
}
