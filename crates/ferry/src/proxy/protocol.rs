//! One protocol's entry in the table ([`super::table`]): its names, its builders from JSON
//! and what the rest of Ferry asks of it by name. Each protocol's folder defines its own
//! `PROTOCOL`; the table lists them.

use super::{InboundBuilder, OutboundBuilder};

/// A protocol as the config reader, freedom's default rule, the API and `ferry link` see it.
#[derive(Clone, Copy)]
pub struct Protocol {
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
}

impl Protocol {
    /// An entry with nothing but its names (each protocol fills in what it has).
    pub const fn named(names: &'static [&'static str]) -> Protocol {
        Protocol {
            names,
            inbound_aliases: &[],
            inbound: None,
            outbound: None,
            guarded: false,
            muxable: false,
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
