//! Hysteria 2 (Xray's `hysteria` protocol over the `hysteria` network): QUIC with an HTTP/3
//! authentication, one bidirectional stream per TCP connection, UDP in QUIC datagrams.
//! `codec` holds the frames (sans-IO), `server` and `inbound` the server, `client` and
//! `outbound` the client, `udp` the datagram sessions both ends share, `h3conn` the QUIC
//! connection as the HTTP/3 server sees it.

pub mod api;
pub mod client;
pub mod codec;
mod h3conn;
pub mod inbound;
pub mod link;
mod masq;
mod masq_proxy;
pub mod outbound;
mod server;
pub mod udp;

use std::sync::Arc;

use super::{InboundBuild, InboundHandler, OutboundBuild, OutboundHandler};
use crate::config::reader::{ConfigError, Obj, Result};
use crate::session::User;
use crate::transport::chain::{Network, Security};
use crate::transport::quic::HysteriaSettings;
use crate::transport::StreamSettings;

/// hysteria's entry in the protocol table.
pub const PROTOCOL: crate::proxy::protocol::Protocol = crate::proxy::protocol::Protocol {
    inbound: Some(build_inbound),
    outbound: Some(build_outbound),
    guarded: true,
    api: api::API,
    links: link::LINKS,
    ..crate::proxy::protocol::Protocol::named(module_path!(), &["hysteria"])
};

/// One user of an inbound: its credential.
#[derive(Clone, Debug)]
pub struct Account {
    pub auth: String,
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
        self.auth == other.auth
    }
}

/// Reads one entry of an inbound's `clients` (`{auth, email, level}`).
pub fn parse_client(c: &Obj<'_>, counters: &crate::registry::CounterSource) -> Result<Account> {
    let auth = c.str_alias(&["auth", "password"])?.unwrap_or_default();
    if auth.is_empty() {
        return Err(ConfigError::new(c.key_path("auth"), "must not be empty"));
    }
    let email = c.str("email")?.unwrap_or_default();
    let level = c.u64("level")?.unwrap_or(0) as u32;
    Ok(Account {
        auth,
        user: counters.user(&email, level),
    })
}

/// The hysteria network's settings and its TLS, which this protocol needs under it.
fn transport<'a>(
    s: &'a StreamSettings,
    path: &str,
) -> Result<(&'a HysteriaSettings, &'a crate::transport::tls::TlsLayer)> {
    let Network::Hysteria(h) = &s.network else {
        return Err(ConfigError::new(
            format!("{path}.streamSettings.network"),
            "the hysteria protocol runs on the hysteria network",
        ));
    };
    let Security::Tls(t) = &s.security else {
        return Err(ConfigError::new(
            format!("{path}.streamSettings.security"),
            "tls config is nil (the hysteria network needs security \"tls\")",
        ));
    };
    Ok((h, t))
}

pub fn build_inbound(o: &Obj<'_>, b: &InboundBuild<'_>) -> Result<Arc<dyn InboundHandler>> {
    let parent = o.path().trim_end_matches(".settings").to_string();
    let (h, t) = transport(b.stream, &parent)?;
    o.ignore(&["version"]);
    let mut accounts = Vec::new();
    for c in o.client_objs(&["clients", "users"])? {
        accounts.push(parse_client(&c, b.counters)?);
        c.finish();
    }
    if accounts.is_empty() && !h.auth.is_empty() {
        // As Xray v26.4.15 onward: the transport's `auth` when there are no clients.
        accounts.push(Account {
            auth: h.auth.clone(),
            user: b.counters.user("", 0),
        });
    }
    let tls = t
        .settings()
        .quic_server_config()
        .and_then(crate::transport::quic::server_tls)
        .map_err(|e| ConfigError::new(format!("{parent}.streamSettings.tlsSettings"), e))?;
    Ok(inbound::Inbound::new(
        accounts,
        b.counters.clone(),
        server::ServerSide {
            tls,
            params: b.stream.finalmask.quic.clone(),
            masks: b.stream.finalmask.udp.clone(),
            udp_idle: h.udp_idle,
            masquerade: h.masquerade.clone(),
            masq_tls: masq_tls(&h.masquerade).map_err(|e| {
                ConfigError::new(
                    format!("{parent}.streamSettings.hysteriaSettings.masquerade"),
                    e,
                )
            })?,
        },
    ))
}

pub fn build_outbound(o: &Obj<'_>, b: &OutboundBuild<'_>) -> Result<Arc<dyn OutboundHandler>> {
    let parent = o.path().trim_end_matches(".settings").to_string();
    let (h, t) = transport(b.stream, &parent)?;
    match o.i64("version")? {
        Some(2) => {}
        _ => return Err(ConfigError::new(o.key_path("version"), "version != 2")),
    }
    let addr = o.req_str("address")?;
    let port = o
        .port("port")?
        .ok_or_else(|| ConfigError::new(o.key_path("port"), "is required"))?;
    let server = crate::common::Destination::new(crate::common::Address::parse(&addr), port);
    let tls = t
        .settings()
        .quic_client_config()
        .and_then(crate::transport::quic::client_tls)
        .map_err(|e| ConfigError::new(format!("{parent}.streamSettings.tlsSettings"), e))?;
    let sni = t
        .server_name()
        .map(str::to_string)
        .unwrap_or_else(|| server.addr.to_string().trim_matches(['[', ']']).to_string());
    Ok(Arc::new(outbound::Outbound::new(client::Client::new(
        client::ClientSide {
            server,
            sni,
            tls,
            params: b.stream.finalmask.quic.clone(),
            masks: b.stream.finalmask.udp.clone(),
            auth: h.auth.clone(),
        },
    ))))
}

/// The TLS client of a masquerade proxy to an `https://` URL (`insecure` skips verification).
fn masq_tls(
    m: &crate::transport::quic::Masquerade,
) -> std::result::Result<Option<Arc<crate::transport::tls::TlsLayer>>, String> {
    let crate::transport::quic::Masquerade::Proxy { url, insecure, .. } = m else {
        return Ok(None);
    };
    if !url.to_ascii_lowercase().starts_with("https:") {
        return Ok(None);
    }
    let s = crate::transport::tls::TlsSettings {
        alpn: vec!["http/1.1".into()],
        allow_insecure: *insecure,
        ..Default::default()
    };
    crate::transport::tls::TlsLayer::client(&s).map(|t| Some(Arc::new(t)))
}
