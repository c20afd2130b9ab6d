//! `streamSettings.sockopt`: the socket fields, as Xray's JSON reader takes them (the
//! stream-level ones, `acceptProxyProtocol`, `trustedXForwardedFor`, `dialerProxy`, are read
//! with the stream settings).

use std::time::Duration;

use crate::common::Network;
use crate::config::reader::{ConfigError, Obj, Result};
use crate::transport::sockopt::{
    CustomOpt, CustomValue, DomainStrategy, HappyEyeballs, SockOpts, TProxy,
};

/// Reads the socket options of `so` into `out`.
pub fn read(so: &Obj<'_>, out: &mut SockOpts) -> Result<()> {
    out.mark = so.u64("mark")?.unwrap_or(0) as u32;
    // Xray's int32s: a negative one turns keepalive off.
    let int32 = |k: &str| -> Result<i32> {
        let n = so.i64(k)?.unwrap_or(0);
        i32::try_from(n)
            .map_err(|_| ConfigError::new(so.key_path(k), format!("{n} is out of range")))
    };
    out.keepalive_idle = int32("tcpKeepAliveIdle")?;
    out.keepalive_interval = int32("tcpKeepAliveInterval")?;
    out.interface = so.str("interface")?.filter(|s| !s.is_empty());
    if let Some(t) = so.str("tproxy")? {
        out.tproxy = match t.to_ascii_lowercase().as_str() {
            "redirect" => TProxy::Redirect,
            "tproxy" => TProxy::TProxy,
            "off" | "" => TProxy::Off,
            _ => {
                // Xray reads any other value as off.
                so.diag().warn(
                    &so.key_path("tproxy"),
                    format!("{t:?} is not redirect, tproxy or off: off"),
                );
                TProxy::Off
            }
        };
    }
    if let Some((p, v)) = so.get("tcpFastOpen") {
        // Xray's numbers: true = 256, false = -1, a number as given.
        out.fast_open = Some(match v {
            serde_json::Value::Bool(true) => 256,
            serde_json::Value::Bool(false) => -1,
            v => v
                .as_i64()
                .and_then(|n| i32::try_from(n).ok())
                .ok_or_else(|| ConfigError::new(p, "expected true, false or a number"))?,
        });
    }
    out.congestion = so.str("tcpCongestion")?.filter(|s| !s.is_empty());
    out.user_timeout_ms = u32_of(so, "tcpUserTimeout")?;
    out.max_seg = u32_of(so, "tcpMaxSeg")?;
    out.window_clamp = u32_of(so, "tcpWindowClamp")?;
    out.v6only = so.bool("v6only")?.unwrap_or(false) || so.bool("V6Only")?.unwrap_or(false);
    out.mptcp = so.bool("tcpMptcp")?.unwrap_or(false);
    if let Some(d) = so.str("domainStrategy")? {
        out.domain_strategy = DomainStrategy::parse(&d).ok_or_else(|| {
            ConfigError::new(
                so.key_path("domainStrategy"),
                format!("unknown domain strategy {d:?}"),
            )
        })?;
    }
    if let Some(h) = so.obj("happyEyeballs")? {
        let mut he = HappyEyeballs::default();
        if let Some(ms) = h.u64("tryDelayMs")? {
            he.try_delay = Duration::from_millis(ms);
        }
        if let Some(b) = h.bool("prioritizeIPv6")? {
            he.prioritize_ipv6 = b;
        }
        if let Some(n) = h.u64("interleave")? {
            he.interleave = n.clamp(1, 64) as u32;
        }
        if let Some(n) = h.u64("maxConcurrentTry")? {
            he.max_concurrent = n.clamp(1, 64) as u32;
        }
        h.finish();
        out.happy_eyeballs = Some(he);
    }
    for c in so.objs(&["customSockopt"])? {
        if let Some(o) = custom(&c)? {
            out.custom.push(o);
        }
        c.finish();
    }
    for k in ["penetrate", "addressPortStrategy"] {
        if so.has(k) {
            so.diag().warn(&so.key_path(k), "not applied by Ferry yet");
        }
    }
    Ok(())
}

/// A non-negative number of `key` (0 when absent).
fn u32_of(so: &Obj<'_>, key: &str) -> Result<u32> {
    match so.i64(key)? {
        None => Ok(0),
        Some(n) => u32::try_from(n).map_err(|_| {
            ConfigError::new(so.key_path(key), format!("expected 0 to 2^32-1, found {n}"))
        }),
    }
}

/// One `customSockopt` entry; none when it is for another system.
fn custom(c: &Obj<'_>) -> Result<Option<CustomOpt>> {
    let system = c.str("system")?.unwrap_or_default();
    let number = |key: &str| -> Result<i32> {
        let (p, v) = c
            .get(key)
            .ok_or_else(|| ConfigError::new(c.key_path(key), "missing"))?;
        let n = match v {
            serde_json::Value::String(s) => s.trim().parse::<i64>().ok(),
            v => v.as_i64(),
        };
        n.and_then(|n| i32::try_from(n).ok())
            .ok_or_else(|| ConfigError::new(p, "expected a number"))
    };
    let level = number("level")?;
    let opt = number("opt")?;
    let ty = c.str("type")?.unwrap_or_else(|| "int".into());
    let value = c.str("value")?.unwrap_or_default();
    let value = match ty.to_ascii_lowercase().as_str() {
        "int" => CustomValue::Int(value.trim().parse::<i32>().map_err(|_| {
            ConfigError::new(c.key_path("value"), format!("{value:?} is not a number"))
        })?),
        "str" => CustomValue::Str(value.into_bytes()),
        other => {
            return Err(ConfigError::new(
                c.key_path("type"),
                format!("unknown type {other:?} (int or str)"),
            ))
        }
    };
    let network = match c
        .str("network")?
        .unwrap_or_default()
        .to_ascii_lowercase()
        .as_str()
    {
        "" => None,
        "tcp" => Some(Network::Tcp),
        "udp" => Some(Network::Udp),
        other => {
            return Err(ConfigError::new(
                c.key_path("network"),
                format!("unknown network {other:?}"),
            ))
        }
    };
    if !system.is_empty() && !system.eq_ignore_ascii_case("linux") {
        return Ok(None);
    }
    Ok(Some(CustomOpt {
        level,
        opt,
        value,
        network,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Diagnostics;
    use serde_json::json;

    fn read_json(v: serde_json::Value) -> (Result<SockOpts>, Vec<String>) {
        let d = Diagnostics::default();
        let o = Obj::new(&v, "inbounds[0].streamSettings.sockopt", &d).unwrap();
        let mut out = SockOpts::default();
        let r = read(&o, &mut out).map(|_| out);
        o.finish();
        (r, d.take())
    }

    #[test]
    fn xray_fields_become_socket_options() {
        let (r, warns) = read_json(json!({
            "mark": 255, "interface": "eth0", "tproxy": "tproxy", "tcpFastOpen": true,
            "tcpCongestion": "bbr", "tcpUserTimeout": 10000, "tcpMaxSeg": 1440,
            "tcpWindowClamp": 600, "v6only": true, "tcpMptcp": true,
            "domainStrategy": "ForceIPv6v4",
            "happyEyeballs": {"tryDelayMs": 250, "prioritizeIPv6": true, "interleave": 2, "maxConcurrentTry": 3},
            "customSockopt": [
                {"level": "6", "opt": "3", "value": "1", "type": "int", "network": "tcp"},
                {"system": "windows", "level": "1", "opt": "2", "value": "x", "type": "str"}]
        }));
        assert_eq!(warns, Vec::<String>::new());
        let o = r.unwrap();
        assert_eq!(
            (o.mark, o.interface.as_deref(), o.tproxy),
            (255, Some("eth0"), TProxy::TProxy)
        );
        assert_eq!(
            (o.fast_open, o.congestion.as_deref()),
            (Some(256), Some("bbr"))
        );
        assert_eq!(
            (o.user_timeout_ms, o.max_seg, o.window_clamp),
            (10000, 1440, 600)
        );
        assert!(o.v6only && o.mptcp);
        assert_eq!(
            o.domain_strategy,
            DomainStrategy::parse("forceipv6v4").unwrap()
        );
        let he = o.happy_eyeballs.unwrap();
        assert_eq!(
            (
                he.try_delay.as_millis(),
                he.prioritize_ipv6,
                he.interleave,
                he.max_concurrent
            ),
            (250, true, 2, 3)
        );
        // The Windows entry is not for this system.
        assert_eq!(o.custom.len(), 1);
        assert_eq!(o.custom[0].value, CustomValue::Int(1));
        assert_eq!(
            read_json(json!({"tcpFastOpen": false}))
                .0
                .unwrap()
                .fast_open,
            Some(-1)
        );
        assert_eq!(
            read_json(json!({"tcpFastOpen": 5})).0.unwrap().fast_open,
            Some(5)
        );
        let o = read_json(json!({"tcpKeepAliveIdle": -1, "tcpKeepAliveInterval": 15}))
            .0
            .unwrap();
        assert_eq!((o.keepalive_idle, o.keepalive_interval), (-1, 15));
    }

    #[test]
    fn bad_values_name_their_path() {
        let err = |v| read_json(v).0.err().unwrap().to_string();
        assert_eq!(
            err(json!({"tcpKeepAliveIdle": 1u64 << 40})),
            "inbounds[0].streamSettings.sockopt.tcpKeepAliveIdle: 1099511627776 is out of range"
        );
        assert_eq!(
            err(json!({"domainStrategy": "UseIPv5"})),
            "inbounds[0].streamSettings.sockopt.domainStrategy: unknown domain strategy \"UseIPv5\""
        );
        assert!(err(json!({"tcpFastOpen": "yes"}))
            .starts_with("inbounds[0].streamSettings.sockopt.tcpFastOpen:"));
        assert!(err(json!({"tcpMaxSeg": -1}))
            .starts_with("inbounds[0].streamSettings.sockopt.tcpMaxSeg:"));
        assert!(err(
            json!({"customSockopt": [{"level": "6", "opt": "3", "value": "1", "type": "blob"}]})
        )
        .contains("customSockopt[0].type"));
        let (r, warns) = read_json(json!({"tproxy": "weird", "penetrate": true}));
        assert_eq!(r.unwrap().tproxy, TProxy::Off);
        assert_eq!(warns.len(), 2, "{warns:?}");
    }
}
