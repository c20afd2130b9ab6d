//! Mux.Cool and XUDP (Xray's `common/mux` and `common/xudp`), shared by VLESS and VMess: the frame
//! codec ([`frame`], sans-IO), one connection's session table, reader and writer ([`link`]),
//! sessions as streams and packet channels ([`stream`], [`packets`]), and the client side
//! ([`client`]). The server side routes each session, so it lives in `app/mux.rs`.

pub mod client;
pub mod frame;
pub mod link;
pub mod packets;
pub mod stream;

use crate::common::{Address, Destination};
use crate::config::reader::{ConfigError, Obj, Result};

/// The target a client dials for a Mux connection (VLESS and VMess turn it into command 3).
pub const MUX_COOL: &str = "v1.mux.cool";

/// `v1.mux.cool:9527`, as Xray's mux client dials it.
pub fn mux_cool() -> Destination {
    Destination::new(Address::Domain(MUX_COOL.into()), 9527)
}

/// Whether `dest` asks for a Mux connection.
pub fn is_mux_cool(dest: &Destination) -> bool {
    dest.addr.domain() == Some(MUX_COOL)
}

/// Whether UDP over VLESS/VMess goes as XUDP (Xray's full-cone mode: on unless the environment
/// sets `xray.cone.disabled` / `XRAY_CONE_DISABLED` to `true`, which Xray users set for the
/// same effect).
pub fn cone() -> bool {
    let off = |k: &str| std::env::var(k).is_ok_and(|v| v.eq_ignore_ascii_case("true"));
    !(off("xray.cone.disabled") || off("XRAY_CONE_DISABLED"))
}

/// Whether UDP to this port goes as XUDP when full-cone is on (not DNS, not QUIC/443).
pub fn xudp_port(port: u16) -> bool {
    port != 53 && port != 443
}

/// What an outbound's `mux` does with UDP to port 443.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Udp443 {
    /// Refuse it (Xray's default).
    Reject,
    /// Send it through the mux like other UDP.
    Allow,
    /// Send it through the outbound itself.
    Skip,
}

/// An outbound's `mux` object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MuxSettings {
    pub enabled: bool,
    /// TCP sessions per connection (0: 8; negative: TCP does not use the mux).
    pub concurrency: i16,
    /// UDP sessions per connection of their own (0: UDP shares the TCP connections;
    /// negative: UDP does not use the mux).
    pub xudp_concurrency: i16,
    pub udp443: Udp443,
}

impl MuxSettings {
    /// Reads `{enabled, concurrency, xudpConcurrency, xudpProxyUDP443}`.
    pub fn parse(o: &Obj<'_>) -> Result<MuxSettings> {
        let int = |k: &str| -> Result<i16> {
            match o.i64(k)? {
                None => Ok(0),
                Some(n) => i16::try_from(n)
                    .map_err(|_| ConfigError::new(o.key_path(k), format!("{n} is out of range"))),
            }
        };
        let udp443 = match o.str("xudpProxyUDP443")?.as_deref() {
            None | Some("") | Some("reject") => Udp443::Reject,
            Some("allow") => Udp443::Allow,
            Some("skip") => Udp443::Skip,
            Some(other) => {
                return Err(ConfigError::new(
                    o.key_path("xudpProxyUDP443"),
                    format!("unknown value {other:?} (reject, allow or skip)"),
                ))
            }
        };
        Ok(MuxSettings {
            enabled: o.bool("enabled")?.unwrap_or(false),
            concurrency: int("concurrency")?,
            xudp_concurrency: int("xudpConcurrency")?,
            udp443,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Diagnostics;
    use serde_json::json;

    #[test]
    fn settings_read_as_xray() {
        let d = Diagnostics::default();
        let v = json!({"enabled": true, "concurrency": -1, "xudpConcurrency": 16,
            "xudpProxyUDP443": "skip"});
        let o = Obj::new(&v, "mux", &d).unwrap();
        let s = MuxSettings::parse(&o).unwrap();
        o.finish();
        assert!(d.take().is_empty());
        assert_eq!(
            s,
            MuxSettings {
                enabled: true,
                concurrency: -1,
                xudp_concurrency: 16,
                udp443: Udp443::Skip
            }
        );
        let v = json!({"enabled": true});
        let s = MuxSettings::parse(&Obj::new(&v, "mux", &d).unwrap()).unwrap();
        assert_eq!(
            (s.concurrency, s.xudp_concurrency, s.udp443),
            (0, 0, Udp443::Reject)
        );
        let v = json!({"xudpProxyUDP443": "maybe"});
        let e = MuxSettings::parse(&Obj::new(&v, "mux", &d).unwrap()).unwrap_err();
        assert_eq!(e.path, "mux.xudpProxyUDP443");
        let v = json!({"concurrency": 40000});
        let e = MuxSettings::parse(&Obj::new(&v, "mux", &d).unwrap()).unwrap_err();
        assert_eq!(e.path, "mux.concurrency");
        assert!(is_mux_cool(&mux_cool()));
        assert!(!xudp_port(53) && !xudp_port(443) && xudp_port(8443));
    }
}
