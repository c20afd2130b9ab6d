//! The protocol table: every protocol Ferry has, once. The config reader, freedom's default
//! rule, the API's decoders and `ferry link` look protocols up here instead of matching
//! names. Adding a protocol is its folder plus one line in [`PROTOCOLS`].

use super::protocol::Protocol;
use super::{
    blackhole, dns, dokodemo, freedom, http, hysteria, shadowsocks, shadowsocksr, socks, trojan,
    tun, vless, vmess, wireguard, InboundBuilder, OutboundBuilder,
};

/// Every protocol, inbound and outbound.
pub const PROTOCOLS: &[&Protocol] = &[
    &dokodemo::PROTOCOL,
    &freedom::PROTOCOL,
    &blackhole::PROTOCOL,
    &dns::PROTOCOL,
    &socks::PROTOCOL,
    &http::PROTOCOL,
    &hysteria::PROTOCOL,
    &vmess::PROTOCOL,
    &vless::PROTOCOL,
    &trojan::PROTOCOL,
    &shadowsocks::PROTOCOL,
    &shadowsocksr::PROTOCOL,
    &wireguard::PROTOCOL,
    &tun::PROTOCOL,
];

/// Protocols Xray/V2Ray have that Ferry does not have yet (for a clear config error).
pub const KNOWN_ELSEWHERE: &[&str] = &["loopback", "mtproto"];

/// The protocol with an inbound called `name` (or its alias).
pub fn inbound(name: &str) -> Option<&'static Protocol> {
    PROTOCOLS
        .iter()
        .copied()
        .find(|p| p.inbound.is_some() && p.is(name, true))
}

/// The protocol with an outbound called `name` (or its alias).
pub fn outbound(name: &str) -> Option<&'static Protocol> {
    PROTOCOLS
        .iter()
        .copied()
        .find(|p| p.outbound.is_some() && p.is(name, false))
}

pub fn inbound_builder(name: &str) -> Option<InboundBuilder> {
    inbound(name).and_then(|p| p.inbound)
}

pub fn outbound_builder(name: &str) -> Option<OutboundBuilder> {
    outbound(name).and_then(|p| p.outbound)
}

/// Whether sessions of an inbound speaking `protocol` fall under freedom's default rule.
pub fn guarded(protocol: &str) -> bool {
    inbound(protocol).is_some_and(|p| p.guarded)
}

/// Whether an outbound of `protocol` can carry Mux.Cool.
pub fn muxable(protocol: &str) -> bool {
    outbound(protocol).is_some_and(|p| p.muxable)
}

/// The protocol whose inbound config (API `TypedMessage` type) is `ty`.
pub fn by_inbound_config(ty: &str) -> Option<&'static Protocol> {
    PROTOCOLS
        .iter()
        .copied()
        .find(|p| p.api.inbound_configs.contains(&ty))
}

/// The protocol whose outbound config (API `TypedMessage` type) is `ty`.
pub fn by_outbound_config(ty: &str) -> Option<&'static Protocol> {
    PROTOCOLS
        .iter()
        .copied()
        .find(|p| p.api.outbound_configs.contains(&ty))
}

/// Whether some protocol's users have accounts of type `ty`.
pub fn is_account(ty: &str) -> bool {
    PROTOCOLS.iter().any(|p| p.api.accounts.contains(&ty))
}

/// What a share link of no known scheme is read as: Shadowsocks's reader says what it is
/// not (and takes an `ss://` link with blanks around it).
const DEFAULT_LINK: &Protocol = &shadowsocks::PROTOCOL;

/// A share link as an outbound JSON object, read by the protocol of its scheme.
pub fn parse_link(link: &str) -> Result<serde_json::Value, String> {
    let p = PROTOCOLS
        .iter()
        .copied()
        .find(|p| {
            p.links.schemes.iter().any(|s| {
                link.strip_prefix(s)
                    .is_some_and(|rest| rest.starts_with("://"))
            })
        })
        .unwrap_or(DEFAULT_LINK);
    let parse = p.links.parse.ok_or("no share links for this protocol")?;
    parse(link)
}

#[cfg(test)]
#[path = "table_names.rs"]
mod names;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_per_direction() {
        let mut seen = std::collections::HashSet::new();
        for p in PROTOCOLS {
            for n in p.names.iter().chain(p.inbound_aliases) {
                if p.inbound.is_some() {
                    assert!(seen.insert(("in", n.to_ascii_lowercase())), "{n}");
                }
                if p.outbound.is_some() && !p.inbound_aliases.contains(n) {
                    assert!(seen.insert(("out", n.to_ascii_lowercase())), "{n}");
                }
            }
        }
    }
}
