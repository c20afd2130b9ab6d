//! WireGuard (Xray's `wireguard` protocol), inbound and outbound, on Ferry's userspace stack
//! ([`crate::netstack`]). `config` reads Xray's settings, `device` is one interface (boringtun's
//! Noise state machine per peer, the UDP link, the stack), `outbound` and `inbound` the two
//! ends.

pub mod config;
pub mod device;
pub mod inbound;
pub mod link;
pub mod outbound;

use std::sync::Arc;

use super::{InboundBuild, InboundHandler, OutboundBuild, OutboundHandler};
use crate::config::reader::{Obj, Result};

/// wireguard's entry in the protocol table.
pub const PROTOCOL: crate::proxy::protocol::Protocol = crate::proxy::protocol::Protocol {
    inbound: Some(build_inbound),
    outbound: Some(build_outbound),
    guarded: true,
    links: link::LINKS,
    ..crate::proxy::protocol::Protocol::named(module_path!(), &["wireguard"])
};

pub fn build_inbound(o: &Obj<'_>, b: &InboundBuild<'_>) -> Result<Arc<dyn InboundHandler>> {
    o.ignore(&["reserved", "domainStrategy"]);
    let s = config::parse(o)?;
    Ok(inbound::Inbound::new(s, b.counters.clone()))
}

pub fn build_outbound(o: &Obj<'_>, b: &OutboundBuild<'_>) -> Result<Arc<dyn OutboundHandler>> {
    let s = config::parse(o)?;
    Ok(Arc::new(outbound::Outbound::new(
        s,
        b.dialer.clone(),
        b.dns.clone(),
    )))
}
