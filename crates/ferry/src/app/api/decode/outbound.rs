//! `OutboundHandlerConfig` -> a JSON outbound object: sender settings (sendThrough, stream
//! settings, proxySettings, mux), and the proxy settings read by the protocol whose config
//! they are.

use serde_json::{json, Map, Value};

use super::stream::stream;
use super::{unknown_config, Error};
use crate::pb;
use crate::proxy::api::{address, parse};
use crate::proxy::table;

/// An outbound's protocol settings: (protocol name, JSON `settings`), by the protocol whose
/// config type it is.
fn outbound_proxy(m: &pb::TypedMessage) -> Result<(&'static str, Value), Error> {
    let p = table::by_outbound_config(&m.r#type).ok_or_else(|| unknown_config(&m.r#type))?;
    let decode = p
        .api
        .outbound_settings
        .ok_or_else(|| unknown_config(&m.r#type))?;
    Ok((p.name(), decode(m)?))
}

/// An `OutboundHandlerConfig` as a JSON outbound object.
pub fn outbound_to_json(c: &pb::OutboundHandlerConfig) -> Result<Value, Error> {
    let ps = c
        .proxy_settings
        .as_ref()
        .ok_or("app/proxyman/outbound: proxy settings are missing")?;
    let (protocol, settings) = outbound_proxy(ps)?;
    let mut o = Map::new();
    o.insert("tag".into(), json!(c.tag));
    o.insert("protocol".into(), json!(protocol));
    o.insert("settings".into(), settings);
    if let Some(ss) = &c.sender_settings {
        if ss.r#type != "xray.app.proxyman.SenderConfig" {
            return Err(format!(
                "app/proxyman/outbound: not a SenderConfig: {}",
                ss.r#type
            ));
        }
        let s: pb::SenderConfig = parse(&ss.value)?;
        if let Some(v) = address(&s.via) {
            o.insert("sendThrough".into(), json!(v));
        }
        if let Some(st) = &s.stream_settings {
            o.insert("streamSettings".into(), stream(st, true)?);
        }
        if let Some(p) = s.proxy_settings.filter(|p| !p.tag.is_empty()) {
            o.insert("proxySettings".into(), json!({"tag": p.tag}));
        }
        if let Some(m) = s.multiplex_settings.filter(|m| m.enabled) {
            let mut mux = json!({"enabled": true, "concurrency": m.concurrency, "xudpConcurrency": m.xudp_concurrency});
            if !m.xudp_proxy_udp443.is_empty() {
                mux["xudpProxyUDP443"] = json!(m.xudp_proxy_udp443);
            }
            o.insert("mux".into(), mux);
        }
    }
    Ok(Value::Object(o))
}
