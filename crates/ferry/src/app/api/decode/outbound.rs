//! `OutboundHandlerConfig` -> a JSON outbound object: sender settings (sendThrough, stream
//! settings, proxySettings, mux) and every client protocol Ferry has.

use prost::Message;
use serde_json::{json, Map, Value};

use super::{address, cipher_name, parse, stream, vmess_security, Error, KNOWN_PROXIES};
use crate::app::api::pb;

fn endpoint(e: &Option<pb::ServerEndpoint>) -> Result<(String, u32, Option<pb::User>), Error> {
    let e = e.as_ref().ok_or("common/protocol: server is missing")?;
    let a = address(&e.address).ok_or("common/protocol: server address is missing")?;
    Ok((a, e.port, e.user.clone()))
}

fn account<M: Message + Default>(u: &Option<pb::User>, ty: &str) -> Result<(M, pb::User), Error> {
    let u = u.clone().ok_or("common/protocol: user is missing")?;
    let a = u
        .account
        .as_ref()
        .ok_or("common/protocol: Account is missing")?;
    if a.r#type != ty {
        return Err(format!("{} is not a {ty}", a.r#type));
    }
    Ok((parse(&a.value)?, u))
}

/// An outbound's protocol settings: (protocol name, JSON `settings`).
fn outbound_proxy(m: &pb::TypedMessage) -> Result<(&'static str, Value), Error> {
    Ok(match m.r#type.as_str() {
        "xray.proxy.freedom.Config" => {
            let c: pb::FreedomConfig = parse(&m.value)?;
            let ds = [
                "AsIs",
                "UseIP",
                "UseIPv4",
                "UseIPv6",
                "UseIPv46",
                "UseIPv64",
                "ForceIP",
                "ForceIPv4",
                "ForceIPv6",
                "ForceIPv46",
                "ForceIPv64",
            ];
            let mut s = json!({"domainStrategy": ds.get(c.domain_strategy as usize).copied().unwrap_or("AsIs")});
            if let Some(d) = &c.destination_override {
                let (a, p, _) = endpoint(&d.server)?;
                s["redirect"] = json!(format!("{a}:{p}"));
            }
            if c.user_level != 0 {
                s["userLevel"] = json!(c.user_level);
            }
            ("freedom", s)
        }
        "xray.proxy.blackhole.Config" => {
            let c: pb::BlackholeConfig = parse(&m.value)?;
            let http = c
                .response
                .is_some_and(|r| r.r#type == "xray.proxy.blackhole.HTTPResponse");
            (
                "blackhole",
                json!({"response": {"type": if http { "http" } else { "none" }}}),
            )
        }
        "xray.proxy.vless.outbound.Config" => {
            let c: pb::ServerClientConfig = parse(&m.value)?;
            let (a, p, u) = endpoint(&c.server)?;
            let (acc, u): (pb::VlessAccount, _) = account(&u, "xray.proxy.vless.Account")?;
            let mut user =
                json!({"id": acc.id, "encryption": "none", "level": u.level, "email": u.email});
            if !acc.flow.is_empty() {
                user["flow"] = json!(acc.flow);
            }
            (
                "vless",
                json!({"vnext": [{"address": a, "port": p, "users": [user]}]}),
            )
        }
        "xray.proxy.vmess.outbound.Config" => {
            let c: pb::ServerClientConfig = parse(&m.value)?;
            let (a, p, u) = endpoint(&c.server)?;
            let (acc, u): (pb::VmessAccount, _) = account(&u, "xray.proxy.vmess.Account")?;
            let sec = vmess_security(acc.security_settings.map(|s| s.r#type).unwrap_or(0));
            (
                "vmess",
                json!({"vnext": [{"address": a, "port": p, "users": [{"id": acc.id, "security": sec, "level": u.level, "email": u.email}]}]}),
            )
        }
        "xray.proxy.trojan.ClientConfig" => {
            let c: pb::ServerClientConfig = parse(&m.value)?;
            let (a, p, u) = endpoint(&c.server)?;
            let (acc, u): (pb::TrojanAccount, _) = account(&u, "xray.proxy.trojan.Account")?;
            (
                "trojan",
                json!({"servers": [{"address": a, "port": p, "password": acc.password, "level": u.level, "email": u.email}]}),
            )
        }
        "xray.proxy.shadowsocks.ClientConfig" => {
            let c: pb::ServerClientConfig = parse(&m.value)?;
            let (a, p, u) = endpoint(&c.server)?;
            let (acc, _): (pb::ShadowsocksAccount, _) =
                account(&u, "xray.proxy.shadowsocks.Account")?;
            let method = cipher_name(acc.cipher_type).ok_or(
                "proxy/shadowsocks: failed to get cipher > proxy/shadowsocks: Unsupported cipher.",
            )?;
            (
                "shadowsocks",
                json!({"servers": [{"address": a, "port": p, "method": method, "password": acc.password}]}),
            )
        }
        "xray.proxy.shadowsocks_2022.ClientConfig" => {
            let c: pb::Ss2022ClientConfig = parse(&m.value)?;
            let a = address(&c.address).ok_or("common/protocol: server address is missing")?;
            (
                "shadowsocks",
                json!({"servers": [{"address": a, "port": c.port, "method": c.method, "password": c.key}]}),
            )
        }
        "xray.proxy.socks.ClientConfig" | "xray.proxy.http.ClientConfig" => {
            let c: pb::ServerClientConfig = parse(&m.value)?;
            let (a, p, u) = endpoint(&c.server)?;
            let mut server = json!({"address": a, "port": p});
            if let Some(u) = &u {
                if let Some(acc) = &u.account {
                    let pa: pb::PasswordAccount = parse(&acc.value)?;
                    server["users"] = json!([{"user": pa.username, "pass": pa.password}]);
                }
            }
            let name = if m.r#type.contains("socks") {
                "socks"
            } else {
                "http"
            };
            (name, json!({"servers": [server]}))
        }
        t if KNOWN_PROXIES.contains(&t) => {
            return Err(format!("{t}: this protocol is not supported by Ferry yet"))
        }
        _ => return Err("proto: not found".into()),
    })
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
