//! `InboundHandlerConfig` -> a JSON inbound object: both `ReceiverConfig` layouts, both VLESS
//! inbound layouts, every server protocol Ferry has.

use serde_json::{json, Map, Value};

use super::{address, networks, parse, stream, user_to_json, Error, KNOWN_PROXIES};
use crate::app::api::pb;

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

fn fallbacks(f: &[pb::Fallback]) -> Value {
    Value::Array(
        f.iter()
            .map(|f| {
                let mut o = Map::new();
                for (k, v) in [
                    ("name", &f.name),
                    ("alpn", &f.alpn),
                    ("path", &f.path),
                    ("type", &f.r#type),
                ] {
                    if !v.is_empty() {
                        o.insert(k.into(), json!(v));
                    }
                }
                o.insert("dest".into(), json!(f.dest));
                o.insert("xver".into(), json!(f.xver));
                Value::Object(o)
            })
            .collect(),
    )
}

fn users(protocol: &str, us: &[pb::User]) -> Result<Vec<Value>, Error> {
    us.iter().map(|u| user_to_json(protocol, u)).collect()
}

/// The VLESS inbound config in either layout: since v25.9.5 fallbacks are field 2 and
/// `decryption` field 3; before, the other way round. The new layout is tried first; an old
/// client's `decryption` ("none") does not parse as a fallback, and an old client's fallback
/// read as `decryption` holds control bytes no decryption setting has.
fn vless_inbound(b: &[u8]) -> Result<pb::FallbackServerConfig, Error> {
    if let Ok(c) = parse::<pb::FallbackServerConfig>(b) {
        if !c.decryption.chars().any(char::is_control) {
            return Ok(c);
        }
    }
    let o: pb::VlessInboundConfigOld = parse(b)?;
    Ok(pb::FallbackServerConfig {
        users: o.users,
        fallbacks: o.fallbacks,
        decryption: o.decryption,
    })
}

/// An inbound's protocol settings: (protocol name, JSON `settings`).
fn inbound_proxy(m: &pb::TypedMessage) -> Result<(&'static str, Value), Error> {
    Ok(match m.r#type.as_str() {
        "xray.proxy.vless.inbound.Config" => {
            let c = vless_inbound(&m.value)?;
            let mut s = json!({"clients": users("vless", &c.users)?, "decryption": if c.decryption.is_empty() { "none" } else { c.decryption.as_str() }});
            if !c.fallbacks.is_empty() {
                s["fallbacks"] = fallbacks(&c.fallbacks);
            }
            ("vless", s)
        }
        "xray.proxy.vmess.inbound.Config" => {
            let c: pb::VmessInboundConfig = parse(&m.value)?;
            let mut s = json!({"clients": users("vmess", &c.user)?});
            if let Some(d) = c.default {
                s["default"] = json!({"level": d.level});
            }
            ("vmess", s)
        }
        "xray.proxy.trojan.ServerConfig" => {
            let c: pb::FallbackServerConfig = parse(&m.value)?;
            let mut s = json!({"clients": users("trojan", &c.users)?});
            if !c.fallbacks.is_empty() {
                s["fallbacks"] = fallbacks(&c.fallbacks);
            }
            ("trojan", s)
        }
        "xray.proxy.shadowsocks.ServerConfig" => {
            let c: pb::ShadowsocksServerConfig = parse(&m.value)?;
            let mut s = json!({"clients": users("shadowsocks", &c.users)?});
            if let Some(n) = networks(&c.network) {
                s["network"] = json!(n);
            }
            ("shadowsocks", s)
        }
        "xray.proxy.shadowsocks_2022.ServerConfig" => {
            let c: pb::Ss2022ServerConfig = parse(&m.value)?;
            let mut s =
                json!({"method": c.method, "password": c.key, "email": c.email, "level": c.level});
            if let Some(n) = networks(&c.network) {
                s["network"] = json!(n);
            }
            ("shadowsocks", s)
        }
        "xray.proxy.shadowsocks_2022.MultiUserServerConfig" => {
            let c: pb::Ss2022MultiConfig = parse(&m.value)?;
            let mut s = json!({"method": c.method, "password": c.key, "clients": users("shadowsocks", &c.users)?});
            if let Some(n) = networks(&c.network) {
                s["network"] = json!(n);
            }
            ("shadowsocks", s)
        }
        "xray.proxy.dokodemo.Config" => {
            let c: pb::DokodemoConfig = parse(&m.value)?;
            if c.follow_redirect {
                return Err("proxy/dokodemo: followRedirect is not supported by Ferry yet".into());
            }
            let mut s = Map::new();
            if let Some(a) = address(&c.address) {
                s.insert("address".into(), json!(a));
            }
            if c.port != 0 {
                s.insert("port".into(), json!(c.port));
            }
            if !c.port_map.is_empty() {
                s.insert("portMap".into(), json!(c.port_map));
            }
            if let Some(n) = networks(&c.networks) {
                s.insert("network".into(), json!(n));
            }
            if c.user_level != 0 {
                s.insert("userLevel".into(), json!(c.user_level));
            }
            ("dokodemo-door", Value::Object(s))
        }
        "xray.proxy.socks.ServerConfig" => {
            let c: pb::SocksServerConfig = parse(&m.value)?;
            let accounts: Vec<Value> = c
                .accounts
                .iter()
                .map(|(u, p)| json!({"user": u, "pass": p}))
                .collect();
            let mut s = json!({
                "auth": if c.auth_type == 1 { "password" } else { "noauth" },
                "accounts": accounts,
                "udp": c.udp_enabled,
                "userLevel": c.user_level,
            });
            if let Some(a) = address(&c.address) {
                s["ip"] = json!(a);
            }
            ("socks", s)
        }
        "xray.proxy.http.ServerConfig" => {
            let c: pb::HttpServerConfig = parse(&m.value)?;
            let accounts: Vec<Value> = c
                .accounts
                .iter()
                .map(|(u, p)| json!({"user": u, "pass": p}))
                .collect();
            (
                "http",
                json!({"accounts": accounts, "allowTransparent": c.allow_transparent, "userLevel": c.user_level}),
            )
        }
        t if KNOWN_PROXIES.contains(&t) => {
            return Err(format!("{t}: this protocol is not supported by Ferry yet"))
        }
        _ => return Err("proto: not found".into()),
    })
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
    if r.receive_original_destination {
        return Err("app/proxyman/inbound: followRedirect is not supported by Ferry yet".into());
    }
    o.insert("settings".into(), settings);
    if let Some(s) = &r.stream_settings {
        o.insert("streamSettings".into(), stream(s, false)?);
    }
    Ok(Value::Object(o))
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

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

    #[test]
    fn both_vless_inbound_layouts_keep_decryption_and_fallbacks() {
        let fb = pb::Fallback {
            dest: "8080".into(),
            ..Default::default()
        };
        let new = pb::FallbackServerConfig {
            users: vec![],
            fallbacks: vec![fb.clone()],
            decryption: "none".into(),
        };
        let old = pb::VlessInboundConfigOld {
            users: vec![],
            decryption: "none".into(),
            fallbacks: vec![fb.clone()],
        };
        let old_no_decryption = pb::VlessInboundConfigOld {
            decryption: String::new(),
            ..old.clone()
        };
        for (what, bytes, dec) in [
            ("new", new.encode_to_vec(), "none"),
            ("old", old.encode_to_vec(), "none"),
            (
                "old without decryption",
                old_no_decryption.encode_to_vec(),
                "",
            ),
        ] {
            let c = vless_inbound(&bytes).unwrap();
            assert_eq!(c.decryption, dec, "{what}");
            assert_eq!(c.fallbacks, vec![fb.clone()], "{what}");
        }
    }
}
