//! `InboundHandlerConfig` -> a JSON inbound object: both `ReceiverConfig` layouts, and the
//! proxy settings read by the protocol whose config they are.

use serde_json::{json, Map, Value};

use super::stream::stream;
use super::{unknown_config, user_to_json, Error};
use crate::pb;
use crate::proxy::api::{address, parse};
use crate::proxy::table;

/// `ReceiverConfig` in either layout: since v25.10.15 stream settings are field 3 and
/// sniffing field 6; before, field 3 was the allocation strategy, stream settings field 4
/// (length-delimited) and sniffing 7. A field-4 message or a field 5/7 means the old layout.
pub fn receiver(b: &[u8]) -> Result<pb::ReceiverConfig, Error> {
    let mut old = false;
    let mut buf = b;
    while !buf.is_empty() {
        let (tag, wt) = prost::encoding::decode_key(&mut buf)
            .map_err(|_| "proto: cannot parse invalid wire-format data".to_string())?;
        if (tag == 4 && wt == prost::encoding::WireType::LengthDelimited) || tag == 5 || tag == 7 {
            old = true;
        }
        prost::encoding::skip_field(wt, tag, &mut buf, Default::default())
            .map_err(|_| "proto: cannot parse invalid wire-format data".to_string())?;
    }
    if !old {
        return parse(b);
    }
    let o: pb::ReceiverConfigOld = parse(b)?;
    Ok(pb::ReceiverConfig {
        port_list: o.port_list,
        listen: o.listen,
        stream_settings: o.stream_settings,
        receive_original_destination: o.receive_original_destination,
        sniffing_settings: o.sniffing_settings,
    })
}

/// An inbound's protocol settings: (protocol name, JSON `settings`), by the protocol whose
/// config type it is.
fn inbound_proxy(m: &pb::TypedMessage) -> Result<(&'static str, Value), Error> {
    let p = table::by_inbound_config(&m.r#type).ok_or_else(|| unknown_config(&m.r#type))?;
    let decode = p
        .api
        .inbound_settings
        .ok_or_else(|| unknown_config(&m.r#type))?;
    let name = p.name();
    let users = |us: &[pb::User]| us.iter().map(|u| user_to_json(name, u)).collect();
    Ok((name, decode(m, &users)?))
}

/// An `InboundHandlerConfig` as a JSON inbound object.
pub fn inbound_to_json(c: &pb::InboundHandlerConfig) -> Result<Value, Error> {
    let rs = c
        .receiver_settings
        .as_ref()
        .ok_or("app/proxyman/inbound: receiver settings are missing")?;
    if rs.r#type != "xray.app.proxyman.ReceiverConfig" {
        return Err(format!(
            "app/proxyman/inbound: not a ReceiverConfig: {}",
            rs.r#type
        ));
    }
    let ps = c
        .proxy_settings
        .as_ref()
        .ok_or("app/proxyman/inbound: proxy settings are missing")?;
    let r = receiver(&rs.value)?;
    let (protocol, settings) = inbound_proxy(ps)?;
    let mut o = Map::new();
    o.insert("tag".into(), json!(c.tag));
    o.insert("protocol".into(), json!(protocol));
    let listen = address(&r.listen);
    let unix = listen
        .as_deref()
        .is_some_and(|l| l.starts_with('/') || l.starts_with('@'));
    if let Some(l) = listen {
        o.insert("listen".into(), json!(l));
    }
    if !unix {
        let ranges: Vec<String> = r
            .port_list
            .as_ref()
            .map(|p| p.range.as_slice())
            .unwrap_or(&[])
            .iter()
            .map(|p| {
                if p.from == p.to {
                    p.from.to_string()
                } else {
                    format!("{}-{}", p.from, p.to)
                }
            })
            .collect();
        if ranges.is_empty() {
            return Err("app/proxyman/inbound: no port given".into());
        }
        o.insert("port".into(), json!(ranges.join(",")));
    }
    // `receive_original_destination` is what Xray's JSON reader sets for dokodemo-door's
    // `followRedirect`, which the protocol's own settings carry here too.
    o.insert("settings".into(), settings);
    if let Some(s) = &r.stream_settings {
        o.insert("streamSettings".into(), stream(s, false)?);
    }
    Ok(Value::Object(o))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receiver_bytes(stream_field: u32) -> Vec<u8> {
        // port_list {range {from: 1000, to: 1000}}, then a StreamConfig{protocol_name: "tcp",
        // security_type: "x"} under `stream_field`.
        let mut b = pb::PortList {
            range: vec![pb::PortRange {
                from: 1000,
                to: 1000,
            }],
        };
        let mut out = Vec::new();
        prost::encoding::message::encode(1, &b, &mut out);
        let sc = pb::StreamConfig {
            protocol_name: "tcp".into(),
            security_type: "x".into(),
            ..Default::default()
        };
        prost::encoding::message::encode(stream_field, &sc, &mut out);
        b.range.clear();
        out
    }

    #[test]
    fn both_receiver_layouts_keep_their_stream_settings() {
        for field in [3, 4] {
            let r = receiver(&receiver_bytes(field)).unwrap();
            assert_eq!(r.port_list.unwrap().range[0].from, 1000);
            assert_eq!(
                r.stream_settings
                    .expect("stream settings kept")
                    .security_type,
                "x",
                "layout with stream settings in field {field}"
            );
        }
        assert!(receiver(&[0xff, 0xff]).is_err());
    }
}
