//! The `tun` inbound (Xray's since v26.1.13, Linux): opens a TUN device and terminates the TCP
//! connections and UDP flows of the packets the system routes into it on Ferry's userspace
//! stack; each becomes a session (source = the packet's source, destination = where it went,
//! sniffing as configured), routed like any inbound's. As in Xray v26.3.27 the inbound only
//! creates the device, sets its MTU and sets its link up; routes and rules are the operator's
//! (and the outbounds leave through `sockopt.interface` or `sockopt.mark` rules). Addresses
//! too, unless the config gives sing-box's `address` (which v26.3.27 ignores): each is added
//! to the device, and goes with it. sing-box's `auto_route` installs the routes and rules
//! that send the machine's traffic into the device ([`route`]), removed on stop.
//! ICMP echo to any address through the device is answered by the stack.

mod inbound;
pub mod route;

use std::net::IpAddr;
use std::sync::Arc;

use super::{InboundBuild, InboundHandler};
use crate::common::reader::{ConfigError, Obj, Result};

/// tun's entry in the protocol table: an inbound without address or port of its own.
pub const PROTOCOL: crate::proxy::protocol::Protocol = crate::proxy::protocol::Protocol {
    inbound: Some(build),
    portless: true,
    ..crate::proxy::protocol::Protocol::named(module_path!(), &["tun"])
};

/// The device as configured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// `name`: the interface (Xray's default `xray0`).
    pub name: String,
    /// `MTU` (`mtu`): 1500 by default.
    pub mtu: u32,
    /// `userLevel`: the policy level of its sessions.
    pub level: u32,
    /// `address` (sing-box's; Xray has none): prefixes added to the device, e.g. 172.19.0.1/30.
    pub address: Vec<(IpAddr, u8)>,
    /// sing-box's `auto_route` and its scope (off by default, as Xray has none).
    pub route: route::AutoRoute,
}

/// The keys later Xray versions read (v26.4.13 on): accepted, as v26.3.27 ignores them.
const LATER_KEYS: &[&str] = &[
    "gateway",
    "dns",
    "autoSystemRoutingTable",
    "autoOutboundsInterface",
    "desc",
];

pub fn parse(o: &Obj<'_>) -> Result<Settings> {
    o.ignore(LATER_KEYS);
    let name = o.str("name")?.unwrap_or_else(|| "xray0".into());
    if name.is_empty() || name.len() > 15 || name.contains(['/', ' ', '\0']) {
        return Err(ConfigError::new(
            o.key_path("name"),
            format!("{name:?} is not an interface name (1 to 15 bytes, no '/' or space)"),
        ));
    }
    let mtu = match o.get("MTU") {
        None => 1500,
        Some((p, _)) => match o.u64("MTU")? {
            Some(m) if (576..=65535).contains(&m) => m as u32,
            Some(0) | None => 1500,
            Some(m) => {
                return Err(ConfigError::new(
                    p,
                    format!("MTU must be 576 to 65535, found {m}"),
                ))
            }
        },
    };
    let level = crate::proxy::socks::user_level(o)?;
    let mut address = Vec::new();
    for (i, a) in o
        .str_list("address")?
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let p = format!("{}[{i}]", o.key_path("address"));
        match crate::common::addr::parse_prefix(a) {
            Some(prefix) if a.contains('/') => address.push(prefix),
            _ => return Err(ConfigError::new(p, format!("{a:?} is not an address with a prefix length (172.19.0.1/30, fdfe:dcba:9876::1/126)"))),
        }
    }
    let route = route::parse(o)?;
    if route.enabled && address.is_empty() {
        return Err(ConfigError::new(
            o.key_path("address"),
            "auto_route needs the device's address (172.19.0.1/30, fdfe:dcba:9876::1/126)",
        ));
    }
    Ok(Settings {
        name,
        mtu,
        level,
        address,
        route,
    })
}

pub fn build(o: &Obj<'_>, _b: &InboundBuild<'_>) -> Result<Arc<dyn InboundHandler>> {
    Ok(Arc::new(inbound::Tun::new(parse(o)?)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::reader::Diagnostics;
    use serde_json::{json, Value};

    fn parsed(v: Value) -> Result<Settings> {
        let d = Diagnostics::default();
        let o = Obj::new(&v, "inbounds[0].settings", &d)?;
        parse(&o)
    }

    #[test]
    fn reads_xrays_settings_and_defaults() {
        assert_eq!(
            parsed(json!({})).unwrap(),
            Settings {
                name: "xray0".into(),
                mtu: 1500,
                level: 0,
                address: vec![],
                route: route::AutoRoute {
                    table: 2022,
                    rule_index: 9000,
                    ..Default::default()
                },
            }
        );
        let s = parsed(json!({"address": ["172.19.0.1/30", "fdfe:dcba:9876::1/126"]})).unwrap();
        assert_eq!(
            s.address,
            [
                ("172.19.0.1".parse().unwrap(), 30),
                ("fdfe:dcba:9876::1".parse().unwrap(), 126)
            ]
        );
        let s = parsed(json!({"name": "ft-tun0", "mtu": 9000, "userLevel": 1})).unwrap();
        assert_eq!((s.name.as_str(), s.mtu, s.level), ("ft-tun0", 9000, 1));
        let s = parsed(json!({"MTU": 1400, "gateway": ["10.0.0.1"], "autoSystemRoutingTable": []}))
            .unwrap();
        assert_eq!(s.mtu, 1400);
    }

    #[test]
    fn bad_settings_name_their_path() {
        let e = parsed(json!({"name": "a-name-far-too-long"})).unwrap_err();
        assert!(
            e.to_string().starts_with("inbounds[0].settings.name:"),
            "{e}"
        );
        for bad in ["172.19.0.1", "172.19.0.1/33", "tun0"] {
            let e = parsed(json!({"address": ["10.0.0.1/8", bad]})).unwrap_err();
            assert!(
                e.to_string()
                    .starts_with("inbounds[0].settings.address[1]:"),
                "{e}"
            );
        }
        let e = parsed(json!({"MTU": 70000})).unwrap_err();
        assert_eq!(
            e.to_string(),
            "inbounds[0].settings.MTU: MTU must be 576 to 65535, found 70000"
        );
    }
}
