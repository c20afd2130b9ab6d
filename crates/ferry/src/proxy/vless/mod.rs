//! VLESS (Xray's `proxy/vless`): a UUID, a command and a target in front of plain bytes.
//! Inbound and outbound over TCP (commands TCP, UDP and Mux: Mux.Cool and XUDP, in
//! `proxy/mux`), XTLS Vision, the fallbacks, and VLESS Encryption (`decryption` /
//! `encryption`, [`crate::transport::vlessenc`]) under the header; the reverse proxy arrives
//! with its issue and is refused clearly until then.

pub mod api;
pub mod codec;
pub mod inbound;
pub mod link;
pub mod outbound;
pub mod vision;

use std::sync::Arc;

use super::{InboundBuild, InboundHandler, OutboundBuild, OutboundHandler};
use crate::common::uuid::parse_id;
use crate::common::{Address, Destination};
use crate::config::reader::{ConfigError, Obj, Result};
use crate::session::User;
use crate::transport::vlessenc;

/// vless's entry in the protocol table.
pub const PROTOCOL: crate::proxy::protocol::Protocol = crate::proxy::protocol::Protocol {
    inbound: Some(build_inbound),
    outbound: Some(build_outbound),
    guarded: true,
    muxable: true,
    api: api::API,
    links: link::LINKS,
    ..crate::proxy::protocol::Protocol::named(module_path!(), &["vless"])
};

/// `flow` of a user: plain VLESS or XTLS Vision.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Flow {
    #[default]
    None,
    /// `xtls-rprx-vision`.
    Vision,
    /// `xtls-rprx-vision-udp443` (outbound only): Vision that lets UDP to port 443 through.
    VisionUdp443,
}

impl Flow {
    pub fn is_vision(self) -> bool {
        self != Flow::None
    }
}

/// One user of an inbound.
#[derive(Clone, Debug)]
pub struct Account {
    pub uuid: [u8; 16],
    /// `uuid` with bytes 6 and 7 zeroed (how Xray looks users up).
    pub key: [u8; 16],
    pub user: User,
    pub flow: Flow,
    /// Vision's padding seeds (`testseed`).
    pub seeds: [u32; 4],
    /// VLESS Reverse: the tag of the reverse outbound this user's tunnels serve (such a user
    /// may not proxy forward).
    pub reverse: Option<Arc<str>>,
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

fn parse_uuid(o: &Obj<'_>) -> Result<[u8; 16]> {
    let id = o.req_str("id")?;
    parse_id(&id).map_err(|e| ConfigError::new(o.key_path("id"), e))
}

/// Reads `flow` ("" when absent); `udp443` allows the outbound-only variant.
fn parse_flow(o: &Obj<'_>, udp443: bool) -> Result<Option<Flow>> {
    match o.str("flow")?.unwrap_or_default().as_str() {
        "" => Ok(None),
        "none" => Ok(Some(Flow::None)),
        vision::FLOW => Ok(Some(Flow::Vision)),
        vision::FLOW_UDP443 if udp443 => Ok(Some(Flow::VisionUdp443)),
        f => Err(ConfigError::new(
            o.key_path("flow"),
            format!(
                "{f:?} is not a VLESS flow (\"xtls-rprx-vision\"{})",
                match udp443 {
                    true => " or \"xtls-rprx-vision-udp443\"",
                    false => "",
                }
            ),
        )),
    }
}

/// Reads `testseed` (Vision's padding seeds): four numbers, or fewer for the default.
fn parse_seeds(o: &Obj<'_>) -> Result<Option<[u32; 4]>> {
    let Some((path, v)) = o.get("testseed") else {
        return Ok(None);
    };
    let Some(a) = v.as_array() else {
        return Err(ConfigError::new(path, "must be an array of numbers"));
    };
    let mut n = Vec::new();
    for (i, x) in a.iter().enumerate() {
        match x.as_u64().and_then(|x| u32::try_from(x).ok()) {
            Some(x) => n.push(x),
            None => {
                return Err(ConfigError::new(
                    format!("{path}[{i}]"),
                    "must be a number below 2^32",
                ))
            }
        }
    }
    if n.len() < 4 {
        return Ok(None);
    }
    Ok(Some([n[0], n[1], n[2], n[3]]))
}

/// Vision needs TLS right under VLESS, or VLESS Encryption (on any transport).
fn check_vision_stream(o: &Obj<'_>, flow: Flow, tls: bool) -> Result<()> {
    if flow.is_vision() && !tls {
        return Err(ConfigError::new(
            o.key_path("flow"),
            "XTLS Vision needs streamSettings.security \"tls\" (or \"reality\") or VLESS \
             Encryption under VLESS",
        ));
    }
    Ok(())
}

/// The stream under VLESS is a bare socket (raw, no security): Vision over VLESS Encryption
/// may splice it, as Xray's `IsRAWTransportWithoutSecurity`.
fn bare_socket(s: &crate::transport::StreamSettings) -> bool {
    use crate::transport::chain::{Network, Security};
    matches!(s.network, Network::Raw)
        && matches!(s.security, Security::None)
        && s.http_header.is_none()
        && s.dialer_proxy.is_none()
}

/// What an inbound's `settings` give every client that does not say otherwise.
#[derive(Clone, Debug)]
pub struct ClientDefaults {
    pub flow: Flow,
    pub seeds: [u32; 4],
    /// The inbound's stream is TLS (Vision's condition).
    pub tls: bool,
}

impl Default for ClientDefaults {
    fn default() -> Self {
        ClientDefaults {
            flow: Flow::None,
            seeds: vision::DEFAULT_SEEDS,
            tls: false,
        }
    }
}

/// Reads one entry of an inbound's `clients` (the API's AddUser gives the same shape).
pub fn parse_client(
    c: &Obj<'_>,
    counters: &crate::registry::CounterSource,
    defaults: &ClientDefaults,
) -> Result<Account> {
    let uuid = parse_uuid(c)?;
    let flow = parse_flow(c, false)?.unwrap_or(defaults.flow);
    check_vision_stream(c, flow, defaults.tls)?;
    let seeds = parse_seeds(c)?.unwrap_or(defaults.seeds);
    let email = c.str("email")?.unwrap_or_default();
    let level = c.u64("level")?.unwrap_or(0) as u32;
    c.ignore(&["encryption"]);
    let reverse = match c.obj("reverse")? {
        Some(r) => {
            let tag = r.str("tag")?.unwrap_or_default();
            if tag.is_empty() {
                return Err(ConfigError::new(
                    r.key_path("tag"),
                    "VLESS clients: \"tag\" can't be empty for \"reverse\"",
                ));
            }
            if r.has("sniffing") {
                return Err(ConfigError::new(
                    r.key_path("sniffing"),
                    "VLESS clients: inbound's \"reverse\" can't have \"sniffing\"",
                ));
            }
            r.finish();
            Some(tag.into())
        }
        None => None,
    };
    Ok(Account {
        uuid,
        key: codec::lookup_key(&uuid),
        user: counters.user(&email, level),
        flow,
        seeds,
        reverse,
    })
}

/// An inbound's `decryption`: `none`, or VLESS Encryption's server side.
fn parse_decryption(o: &Obj<'_>) -> Result<Option<vlessenc::ServerConfig>> {
    let s = o.str("decryption")?.unwrap_or_default();
    vlessenc::ServerConfig::parse(&s).map_err(|e| ConfigError::new(o.key_path("decryption"), e))
}

/// An outbound user's `encryption`: `none` (or absent), or VLESS Encryption's client side.
fn parse_encryption(o: &Obj<'_>) -> Result<Option<Arc<vlessenc::Client>>> {
    let Some(s) = o.str("encryption")? else {
        return Ok(None);
    };
    match vlessenc::ClientConfig::parse(&s) {
        Ok(c) => Ok(c.map(vlessenc::Client::new)),
        Err(e) => Err(ConfigError::new(o.key_path("encryption"), e)),
    }
}

pub fn build_inbound(o: &Obj<'_>, b: &InboundBuild<'_>) -> Result<Arc<dyn InboundHandler>> {
    let decryption = match o.has("decryption") {
        true => parse_decryption(o)?,
        false => None,
    };
    let fallbacks = crate::proxy::fallback::Fallbacks::parse(o)?;
    if decryption.is_some() && fallbacks.is_some() {
        return Err(ConfigError::new(
            o.key_path("fallbacks"),
            "\"fallbacks\" can not be used together with \"decryption\"",
        ));
    }
    let tls = decryption.is_some()
        || !matches!(b.stream.security, crate::transport::chain::Security::None);
    let defaults = ClientDefaults {
        flow: parse_flow(o, false)?.unwrap_or_default(),
        seeds: parse_seeds(o)?.unwrap_or(vision::DEFAULT_SEEDS),
        tls,
    };
    let mut accounts = Vec::new();
    for c in o.client_objs(&["clients", "users"])? {
        accounts.push(parse_client(&c, b.counters, &defaults)?);
        c.finish();
    }
    let decryption = decryption.map(|d| inbound::Decryption {
        server: Arc::new(vlessenc::Server::new(d)),
        splice_ok: bare_socket(b.stream),
    });
    Ok(Arc::new(inbound::Inbound::new(
        accounts,
        b.counters.clone(),
        fallbacks,
        defaults,
        decryption,
    )))
}

/// The server an outbound talks to and the user it is.
#[derive(Clone, Debug)]
pub struct Server {
    pub dest: Destination,
    pub uuid: [u8; 16],
    pub flow: Flow,
    pub seeds: [u32; 4],
    /// VLESS Encryption's client side, when `encryption` is not `none`.
    pub encryption: Option<Arc<vlessenc::Client>>,
}

/// Reads `vnext: [{address, port, users: [{id, encryption, flow}]}]` or Xray's flat form
/// (`address`, `port`, `id` directly in `settings`); `tls`: the outbound's stream is TLS.
pub fn parse_server(o: &Obj<'_>, tls: bool) -> Result<Server> {
    let vnext = o.objs(&["vnext"])?;
    if vnext.is_empty() && o.has("address") {
        let addr = o.req_str("address")?;
        let port = o
            .port("port")?
            .ok_or_else(|| ConfigError::new(o.key_path("port"), "is required"))?;
        let flow = parse_flow(o, true)?.unwrap_or_default();
        let encryption = parse_encryption(o)?;
        check_vision_stream(o, flow, tls || encryption.is_some())?;
        o.ignore(&["level", "email", "reverse"]);
        return Ok(Server {
            dest: Destination::new(Address::parse(&addr), port),
            uuid: parse_uuid(o)?,
            flow,
            seeds: parse_seeds(o)?.unwrap_or(vision::DEFAULT_SEEDS),
            encryption,
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
    let flow = parse_flow(u, true)?.unwrap_or_default();
    let encryption = parse_encryption(u)?;
    check_vision_stream(u, flow, tls || encryption.is_some())?;
    let seeds = parse_seeds(u)?.unwrap_or(vision::DEFAULT_SEEDS);
    u.ignore(&["level", "email"]);
    if u.has("reverse") {
        return Err(ConfigError::new(
            u.key_path("reverse"),
            "VLESS users: please use simplified outbound's config style to use \"reverse\"",
        ));
    }
    let uuid = parse_uuid(u)?;
    for u in users {
        u.finish();
    }
    let dest = Destination::new(Address::parse(&addr), port);
    for v in vnext {
        v.finish();
    }
    Ok(Server {
        dest,
        uuid,
        flow,
        seeds,
        encryption,
    })
}

pub fn build_outbound(o: &Obj<'_>, b: &OutboundBuild<'_>) -> Result<Arc<dyn OutboundHandler>> {
    let tls = !matches!(b.stream.security, crate::transport::chain::Security::None);
    let server = parse_server(o, tls)?;
    let out = Arc::new(outbound::Outbound {
        server,
        splice_ok: bare_socket(b.stream),
        dialer: b.dialer.clone(),
        cone: crate::proxy::mux::cone(),
    });
    if let Some(r) = o.obj("reverse")? {
        let (tag, sniffing) = crate::proxy::reverse::parse_outbound_reverse(&r)?;
        r.finish();
        let email = o.str("email")?.unwrap_or_default();
        let _ = b.bridge.set(crate::proxy::reverse::Bridge {
            tag,
            via: crate::proxy::reverse::Via::Vless {
                dialer: out.clone(),
                email: email.into(),
                sniffing,
            },
        });
    }
    Ok(out)
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
        let s = parse_server(&Obj::new(&v, "s", &d).unwrap(), false).unwrap();
        assert_eq!(s.dest.to_string(), "a.example:443");
        // Every field of the server and its user was read: no "unknown field" warning.
        assert_eq!(d.take(), Vec::<String>::new());
        let v = json!({"vnext": [{"address": "a.example", "port": 443, "extra": 1,
            "users": [{"id": "example", "encryption": "none"}]}]});
        parse_server(&Obj::new(&v, "s", &d).unwrap(), false).unwrap();
        let w = d.take();
        assert!(w.len() == 1 && w[0].contains("s.vnext[0].extra"), "{w:?}");
        assert_eq!(
            crate::common::uuid::format(&s.uuid),
            "feb54431-301b-52bb-a6dd-e1e93e81bb9e"
        );
        let v = json!({"address": "1.2.3.4", "port": 8443, "id": "2418d087-648d-4990-86e8-19dca1d006d3"});
        let s = parse_server(&Obj::new(&v, "s", &d).unwrap(), false).unwrap();
        assert_eq!(s.dest.to_string(), "1.2.3.4:8443");
        // Vision needs TLS under it; the udp443 variant is an outbound flow; others are not.
        let v = json!({"address": "1.2.3.4", "port": 1, "id": "x", "flow": "xtls-rprx-vision"});
        let e = parse_server(&Obj::new(&v, "s", &d).unwrap(), false).unwrap_err();
        assert_eq!(e.path, "s.flow");
        assert!(e.to_string().contains("security"), "{e}");
        let s = parse_server(&Obj::new(&v, "s", &d).unwrap(), true).unwrap();
        assert_eq!(s.flow, Flow::Vision);
        let v = json!({"vnext": [{"address": "a", "port": 1, "users": [{"id": "x",
            "flow": "xtls-rprx-vision-udp443", "testseed": [1, 2, 3, 4]}]}]});
        let s = parse_server(&Obj::new(&v, "s", &d).unwrap(), true).unwrap();
        assert_eq!((s.flow, s.seeds), (Flow::VisionUdp443, [1, 2, 3, 4]));
        let v = json!({"address": "1.2.3.4", "port": 1, "id": "x", "flow": "xtls-rprx-direct"});
        let e = parse_server(&Obj::new(&v, "s", &d).unwrap(), true).unwrap_err();
        assert_eq!(e.path, "s.flow");
        // Inbound clients take the settings' flow; the udp443 variant is refused there.
        let counters = crate::registry::CounterSource::default();
        let defaults = ClientDefaults {
            flow: Flow::Vision,
            tls: true,
            ..Default::default()
        };
        let c = json!({"id": "x"});
        let a = parse_client(&Obj::new(&c, "c", &d).unwrap(), &counters, &defaults).unwrap();
        assert_eq!(a.flow, Flow::Vision);
        let c = json!({"id": "x", "flow": "xtls-rprx-vision-udp443"});
        let e = parse_client(&Obj::new(&c, "c", &d).unwrap(), &counters, &defaults).unwrap_err();
        assert_eq!(e.path, "c.flow");
        let no_tls = ClientDefaults::default();
        let c = json!({"id": "x", "flow": "xtls-rprx-vision"});
        let e = parse_client(&Obj::new(&c, "c", &d).unwrap(), &counters, &no_tls).unwrap_err();
        assert_eq!(e.path, "c.flow");
        let c = json!({"id": "x", "testseed": [1, "a"]});
        let e = parse_client(&Obj::new(&c, "c", &d).unwrap(), &counters, &no_tls).unwrap_err();
        assert_eq!(e.path, "c.testseed[1]");
        let v = json!({"address": "1.2.3.4", "port": 1, "id": "x", "encryption": "mlkem768"});
        let e = parse_server(&Obj::new(&v, "s", &d).unwrap(), false).unwrap_err();
        assert_eq!(e.path, "s.encryption");
    }
}
