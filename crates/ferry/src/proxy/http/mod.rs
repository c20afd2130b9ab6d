//! `http`: an HTTP proxy inbound (CONNECT tunnels and plain forward requests, Basic auth) and
//! an outbound that tunnels through an HTTP proxy with CONNECT.

pub mod api;
/// HTTP/1 heads, sans-IO (in `common`: the HTTP-based transports parse them too).
pub use crate::common::http1 as codec;
pub mod inbound;
pub mod outbound;

use std::sync::Arc;

use super::socks::{parse_accounts, parse_server, user_level};
use super::{InboundBuild, InboundHandler, OutboundBuild, OutboundHandler};
use crate::config::reader::{as_str, ConfigError, Obj, Result};

/// http's entry in the protocol table.
pub const PROTOCOL: crate::proxy::protocol::Protocol = crate::proxy::protocol::Protocol {
    inbound: Some(build_inbound),
    outbound: Some(build_outbound),
    api: api::API,
    ..crate::proxy::protocol::Protocol::named(module_path!(), &["http"])
};

pub fn build_inbound(o: &Obj<'_>, b: &InboundBuild<'_>) -> Result<Arc<dyn InboundHandler>> {
    let accounts = parse_accounts(o)?;
    let allow_transparent = o.bool("allowTransparent")?.unwrap_or(false);
    let level = user_level(o)?;
    o.ignore(&["timeout"]);
    let required = !accounts.is_empty();
    let accounts =
        super::socks::accounts::AccountBook::new(Some(&accounts), required, level, b.counters);
    Ok(Arc::new(inbound::HttpInbound::new(inbound::HttpConfig {
        accounts: Arc::new(accounts),
        allow_transparent,
        level,
    })))
}

pub fn build_outbound(o: &Obj<'_>, b: &OutboundBuild<'_>) -> Result<Arc<dyn OutboundHandler>> {
    let server = parse_server(o)?;
    let mut headers = Vec::new();
    if let Some((p, v)) = o.get("headers") {
        let Some(m) = v.as_object() else {
            return Err(ConfigError::new(
                p,
                "expected an object of header names to values",
            ));
        };
        for (k, val) in m {
            let val = as_str(val, &format!("{p}.{k}"))?;
            let bad = |s: &str| s.bytes().any(|c| c == b'\r' || c == b'\n');
            if k.is_empty() || bad(k) || bad(val) || k.contains(':') {
                return Err(ConfigError::new(
                    format!("{p}.{k}"),
                    "is not a valid header",
                ));
            }
            headers.push((k.clone(), val.to_string()));
        }
    }
    Ok(Arc::new(outbound::HttpOutbound::new(
        server,
        headers,
        b.dialer.clone(),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::Destination;
    use crate::config::Diagnostics;
    use serde_json::json;

    #[test]
    fn outbound_servers_list_and_flat_forms_read_the_same_fields() {
        let d = Diagnostics::default();
        let list = json!({"servers": [{"address": "proxy.example", "port": 3128,
            "users": [{"user": "u", "pass": "p"}]}], "headers": {"X-A": "1"}});
        let flat = json!({"address": "proxy.example", "port": 3128, "user": "u", "pass": "p",
            "headers": {"X-A": "1"}});
        for v in [list, flat] {
            let o = Obj::new(&v, "s", &d).unwrap();
            let s = parse_server(&o).unwrap();
            assert_eq!(s.dest, Destination::parse("proxy.example:3128").unwrap());
            assert_eq!(s.user, Some(("u".into(), "p".into())));
        }
        let v = json!({"address": "10.0.0.1", "port": 8080});
        let s = parse_server(&Obj::new(&v, "s", &d).unwrap()).unwrap();
        assert_eq!(s.dest, Destination::parse("10.0.0.1:8080").unwrap());
        assert_eq!(s.user, None);
    }
}
