//! One protocol's entry in the table ([`super::table`]): its names, its builders from JSON,
//! its API codecs (Xray's protobuf configs and accounts -> the JSON its builders take, users
//! back to protobuf) and what the rest of Ferry asks of it by name. Each protocol's folder defines its own
//! `PROTOCOL`; the table lists them.

use serde_json::Value;

use super::api::Error;
use super::{InboundBuilder, OutboundBuilder};
use crate::pb;

/// A protocol as the config reader, freedom's default rule, the API and `ferry link` see it.
#[derive(Clone, Copy)]
pub struct Protocol {
    /// The module that defines it (`module_path!()`: its folder or file under `proxy/`).
    pub module: &'static str,
    /// Its name, then Xray's aliases (config `protocol`, compared ignoring case).
    pub names: &'static [&'static str],
    /// Aliases its inbound alone answers to (`mixed` is a SOCKS inbound, never an outbound).
    pub inbound_aliases: &'static [&'static str],
    pub inbound: Option<InboundBuilder>,
    pub outbound: Option<OutboundBuilder>,
    /// Its inbound's sessions are a proxy user's: freedom's default rule keeps them off
    /// private destinations (Xray's list).
    pub guarded: bool,
    /// Its outbound can carry Mux.Cool (`mux.enabled`).
    pub muxable: bool,
    /// Its inbound opens a device of its own instead of listening (`tun`: no `listen`, no
    /// `port`).
    pub portless: bool,
    /// What the API reads and writes for it.
    pub api: Api,
    /// Its share links (`ferry link`).
    pub links: Links,
}

/// A protocol's share links.
#[derive(Clone, Copy)]
pub struct Links {
    /// The link schemes it reads (`vless` for `vless://`).
    pub schemes: &'static [&'static str],
    /// A link of one of `schemes` as an outbound JSON object.
    pub parse: Option<LinkParser>,
    /// Links for the users of its inbound (the inbound's JSON object), reached at
    /// `host:port`: `(email, link)`.
    pub inbound: Option<InboundLinks>,
    /// Links for a config's outbounds of this protocol (the merged config).
    pub outbounds: Option<fn(&Value) -> Vec<String>>,
}

/// A share link -> an outbound JSON object.
pub type LinkParser = fn(&str) -> Result<Value, String>;

/// An inbound's JSON object, host and port -> `(email, link)` for each of its users.
pub type InboundLinks = fn(&Value, &str, u16) -> Result<Vec<(String, String)>, String>;

impl Links {
    /// No share links.
    pub const NONE: Links = Links {
        schemes: &[],
        parse: None,
        inbound: None,
        outbounds: None,
    };
}

/// Users' accounts as JSON client objects of the inbound being decoded: the API's own
/// check (the account must be the inbound protocol's), handed to an inbound decoder.
pub type Users<'a> = &'a dyn Fn(&[pb::User]) -> Result<Vec<Value>, Error>;

/// A user and its account message -> its inbound's JSON client object.
pub type AccountDecoder = fn(&pb::User, &pb::TypedMessage) -> Result<Value, Error>;
/// An inbound config -> JSON `settings` (its users read with the [`Users`] given).
pub type InboundDecoder = fn(&pb::TypedMessage, Users<'_>) -> Result<Value, Error>;
/// An outbound config -> JSON `settings`.
pub type OutboundDecoder = fn(&pb::TypedMessage) -> Result<Value, Error>;

/// A protocol's codecs for Xray's gRPC API (`HandlerService`).
#[derive(Clone, Copy)]
pub struct Api {
    /// Xray's package path that prefixes its user manager's errors.
    pub user_pkg: Option<&'static str>,
    /// The account types (`TypedMessage.type`) its users have.
    pub accounts: &'static [&'static str],
    /// A user with one of `accounts` (the message given) as its inbound's JSON client object.
    pub account: Option<AccountDecoder>,
    /// A JSON client object of its inbound as the protobuf user (GetInboundUsers); the
    /// inbound's own `method` for Shadowsocks users that name none.
    pub user: Option<fn(&Value, Option<&str>) -> pb::User>,
    /// Its inbound config types; the first is what ListInbounds names.
    pub inbound_configs: &'static [&'static str],
    /// An inbound config of one of `inbound_configs` as JSON `settings`.
    pub inbound_settings: Option<InboundDecoder>,
    /// Its inbound's users as the config ListInbounds answers with (the bytes of the first
    /// of `inbound_configs`); empty without.
    pub list_users: Option<fn(Vec<pb::User>) -> Vec<u8>>,
    /// Its outbound config types; the first is what ListOutbounds names.
    pub outbound_configs: &'static [&'static str],
    /// An outbound config of one of `outbound_configs` as JSON `settings`.
    pub outbound_settings: Option<OutboundDecoder>,
}

impl Api {
    /// No API codecs.
    pub const NONE: Api = Api {
        user_pkg: None,
        accounts: &[],
        account: None,
        user: None,
        inbound_configs: &[],
        inbound_settings: None,
        list_users: None,
        outbound_configs: &[],
        outbound_settings: None,
    };
}

impl Protocol {
    /// An entry of `module` with nothing but its names (each protocol fills in what it has).
    pub const fn named(module: &'static str, names: &'static [&'static str]) -> Protocol {
        Protocol {
            module,
            names,
            inbound_aliases: &[],
            inbound: None,
            outbound: None,
            guarded: false,
            muxable: false,
            portless: false,
            api: Api::NONE,
            links: Links::NONE,
        }
    }

    /// Its name (the first of `names`).
    pub fn name(&self) -> &'static str {
        self.names.first().copied().unwrap_or("")
    }

    /// Whether `name` names it (any direction's alias included when `inbound`).
    pub fn is(&self, name: &str, inbound: bool) -> bool {
        let extra = if inbound { self.inbound_aliases } else { &[] };
        self.names
            .iter()
            .chain(extra)
            .any(|n| n.eq_ignore_ascii_case(name))
    }
}
