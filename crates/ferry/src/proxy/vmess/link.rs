//! `vmess://` share links in the common form (v2rayN): `vmess://` + base64 of a JSON object
//! `{"v":"2","ps","add","port","id","aid","scy","net","type","host","path","tls","sni"}`.

use serde_json::{json, Map, Value};

use crate::common::text::{base64_decode, base64_std};

/// One VMess server and user, as a share link carries it.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct VmessLink {
    /// Remark (`ps`).
    pub name: String,
    pub address: String,
    pub port: u16,
    pub id: String,
    pub alter_id: u16,
    /// `scy`: auto, aes-128-gcm, chacha20-poly1305, none, zero.
    pub security: String,
    /// `net`: tcp, ws, grpc, ...
    pub network: String,
    /// `type`: header type for tcp ("none").
    pub header_type: String,
    pub host: String,
    pub path: String,
    /// `tls`: "" or "tls".
    pub tls: String,
    pub sni: String,
}

fn field_str(m: &Map<String, Value>, k: &str) -> String {
    match m.get(k) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => String::new(),
    }
}

fn field_num(m: &Map<String, Value>, k: &str) -> Result<u64, String> {
    match m.get(k) {
        None | Some(Value::Null) => Ok(0),
        Some(Value::Number(n)) => n.as_u64().ok_or_else(|| format!("{k}: not a number")),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(0),
        Some(Value::String(s)) => s
            .trim()
            .parse()
            .map_err(|_| format!("{k}: {s:?} is not a number")),
        Some(_) => Err(format!("{k}: not a number")),
    }
}

impl VmessLink {
    /// Parses `vmess://BASE64` (standard or URL-safe alphabet, padding optional).
    pub fn parse(link: &str) -> Result<VmessLink, String> {
        let b64 = link
            .trim()
            .strip_prefix("vmess://")
            .ok_or("not a vmess:// link")?;
        let raw = base64_decode(b64).map_err(|e| format!("bad base64: {e}"))?;
        let v: Value = serde_json::from_slice(&raw).map_err(|e| format!("bad JSON: {e}"))?;
        let m = v.as_object().ok_or("the link's JSON is not an object")?;
        let port = field_num(m, "port")?;
        let port = u16::try_from(port)
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| format!("port {port} out of range"))?;
        let aid = field_num(m, "aid")?;
        let alter_id = u16::try_from(aid).map_err(|_| format!("aid {aid} out of range"))?;
        let l = VmessLink {
            name: field_str(m, "ps"),
            address: field_str(m, "add"),
            port,
            id: field_str(m, "id"),
            alter_id,
            security: field_str(m, "scy"),
            network: field_str(m, "net"),
            header_type: field_str(m, "type"),
            host: field_str(m, "host"),
            path: field_str(m, "path"),
            tls: field_str(m, "tls"),
            sni: field_str(m, "sni"),
        };
        if l.address.is_empty() || l.id.is_empty() {
            return Err("the link has no address or id".into());
        }
        Ok(l)
    }

    /// Formats as `vmess://BASE64` (standard alphabet, padded), fields in the usual order.
    pub fn to_link(&self) -> String {
        let v = json!({
            "v": "2",
            "ps": self.name,
            "add": self.address,
            "port": self.port.to_string(),
            "id": self.id,
            "aid": self.alter_id.to_string(),
            "scy": if self.security.is_empty() { "auto" } else { &self.security },
            "net": if self.network.is_empty() { "tcp" } else { &self.network },
            "type": if self.header_type.is_empty() { "none" } else { &self.header_type },
            "host": self.host,
            "path": self.path,
            "tls": self.tls,
            "sni": self.sni,
        });
        format!("vmess://{}", base64_std(v.to_string().as_bytes()))
    }

    /// An Xray/V2Ray outbound object for this link.
    pub fn to_outbound(&self) -> Value {
        let mut user = json!({"id": self.id, "alterId": self.alter_id});
        if !self.security.is_empty() {
            user["security"] = json!(self.security);
        }
        let mut stream =
            json!({"network": if self.network.is_empty() { "tcp" } else { &self.network }});
        if self.tls == "tls" {
            stream["security"] = json!("tls");
            if !self.sni.is_empty() {
                stream["tlsSettings"] = json!({"serverName": self.sni});
            }
        }
        if self.network == "ws" {
            stream["wsSettings"] = json!({"path": self.path, "headers": {"Host": self.host}});
        }
        let mut out = json!({
            "protocol": "vmess",
            "settings": {"vnext": [{"address": self.address, "port": self.port, "users": [user]}]},
            "streamSettings": stream,
        });
        if !self.name.is_empty() {
            out["tag"] = json!(self.name);
        }
        out
    }

    /// Links for every user of every `vmess` outbound in a config (`tag` becomes the remark).
    pub fn from_config(cfg: &Value) -> Vec<VmessLink> {
        let mut out = Vec::new();
        let empty = Vec::new();
        let obs = cfg
            .get("outbounds")
            .and_then(Value::as_array)
            .unwrap_or(&empty);
        for ob in obs {
            if !ob
                .get("protocol")
                .and_then(Value::as_str)
                .is_some_and(|p| p.eq_ignore_ascii_case("vmess"))
            {
                continue;
            }
            let tag = ob.get("tag").and_then(Value::as_str).unwrap_or("");
            let stream = ob.get("streamSettings");
            let s = |k: &str| {
                stream
                    .and_then(|s| s.get(k))
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            };
            let vnext = ob
                .pointer("/settings/vnext")
                .and_then(Value::as_array)
                .unwrap_or(&empty);
            for srv in vnext {
                let address = srv.get("address").and_then(Value::as_str).unwrap_or("");
                let port = srv.get("port").and_then(Value::as_u64).unwrap_or(0);
                let users = srv.get("users").and_then(Value::as_array).unwrap_or(&empty);
                for u in users {
                    out.push(VmessLink {
                        name: tag.to_string(),
                        address: address.to_string(),
                        port: u16::try_from(port).unwrap_or(0),
                        id: u
                            .get("id")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string(),
                        alter_id: u
                            .get("alterId")
                            .and_then(Value::as_u64)
                            .and_then(|a| u16::try_from(a).ok())
                            .unwrap_or(0),
                        security: u
                            .get("security")
                            .and_then(Value::as_str)
                            .unwrap_or("auto")
                            .to_string(),
                        network: s("network"),
                        header_type: "none".into(),
                        tls: s("security"),
                        sni: stream
                            .and_then(|s| s.pointer("/tlsSettings/serverName"))
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string(),
                        ..VmessLink::default()
                    });
                }
            }
        }
        out
    }
}

/// Links for the users of a VMess inbound reached at `host:port`, in v2rayN's form: (email,
/// link). The transport's path and host (WebSocket, HTTPUpgrade), service name (gRPC) or
/// header type (TCP's `http` header) and TLS come from the inbound's `streamSettings`.
pub fn links_for_inbound(inbound: &Value, host: &str, port: u16) -> Vec<(String, VmessLink)> {
    let null = Value::Null;
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let stream = inbound.get("streamSettings").unwrap_or(&null);
    let network = match s(stream, "network").as_str() {
        "" | "raw" => "tcp".to_string(),
        n => n.to_string(),
    };
    let (mut path, mut ws_host) = (String::new(), String::new());
    let mut header_type = String::from("none");
    match network.as_str() {
        "ws" | "httpupgrade" => {
            let key = if network == "ws" {
                "wsSettings"
            } else {
                "httpupgradeSettings"
            };
            let w = stream.get(key).unwrap_or(&null);
            (path, ws_host) = (s(w, "path"), s(w, "host"));
        }
        "grpc" => {
            // v2rayN carries the service name in `path`, the mode in `type`.
            let g = stream.get("grpcSettings").unwrap_or(&null);
            path = s(g, "serviceName");
            let multi = g.get("multiMode").and_then(Value::as_bool) == Some(true);
            header_type = if multi { "multi" } else { "gun" }.into();
        }
        "tcp" => {
            let h = stream.pointer("/tcpSettings/header").unwrap_or(&null);
            if s(h, "type") == "http" {
                header_type = "http".into();
                let r = h.get("request").unwrap_or(&null);
                let first = |k: &str| {
                    let v = r.pointer(k);
                    v.and_then(Value::as_array)
                        .and_then(|a| a.first())
                        .or(v)
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string()
                };
                (path, ws_host) = (first("/path"), first("/headers/Host"));
            }
        }
        _ => {}
    }
    let tls = s(stream, "security").eq_ignore_ascii_case("tls");
    let sni = match stream
        .pointer("/tlsSettings/serverName")
        .and_then(Value::as_str)
    {
        Some(n) if tls => n.to_string(),
        _ if tls && host.parse::<std::net::IpAddr>().is_err() => host.to_string(),
        _ => String::new(),
    };
    let empty = Vec::new();
    let clients = inbound
        .pointer("/settings/clients")
        .and_then(Value::as_array)
        .unwrap_or(&empty);
    clients
        .iter()
        .filter(|c| !s(c, "id").is_empty())
        .map(|c| {
            let email = s(c, "email");
            let link = VmessLink {
                name: email.clone(),
                address: host.to_string(),
                port,
                id: s(c, "id"),
                alter_id: c
                    .get("alterId")
                    .and_then(Value::as_u64)
                    .and_then(|a| u16::try_from(a).ok())
                    .unwrap_or(0),
                security: "auto".into(),
                network: network.clone(),
                header_type: header_type.clone(),
                host: ws_host.clone(),
                path: path.clone(),
                tls: if tls { "tls" } else { "" }.into(),
                sni: sni.clone(),
            };
            (email, link)
        })
        .collect()
}

/// VMess's share links: `vmess://` read, and written for a config's VMess inbounds' users and
/// its VMess outbounds.
pub const LINKS: crate::proxy::protocol::Links = crate::proxy::protocol::Links {
    schemes: &["vmess"],
    parse: Some(|l| Ok(VmessLink::parse(l)?.to_outbound())),
    inbound: Some(|ib, host, port| {
        Ok(links_for_inbound(ib, host, port)
            .into_iter()
            .map(|(e, l)| (e, l.to_link()))
            .collect())
    }),
    outbounds: Some(|cfg| {
        VmessLink::from_config(cfg)
            .iter()
            .map(VmessLink::to_link)
            .collect()
    }),
};

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE};
    use base64::Engine;

    #[test]
    fn round_trip_and_common_variants() {
        let l = VmessLink {
            name: "my server".into(),
            address: "example.com".into(),
            port: 443,
            id: "b831381d-6324-4d53-ad4f-8cda48b30811".into(),
            alter_id: 0,
            security: "aes-128-gcm".into(),
            network: "tcp".into(),
            header_type: "none".into(),
            tls: "tls".into(),
            sni: "example.com".into(),
            ..Default::default()
        };
        let s = l.to_link();
        assert!(s.starts_with("vmess://"));
        assert_eq!(VmessLink::parse(&s).unwrap(), l);
        // Numbers as numbers, no padding, URL-safe alphabet: all accepted.
        let raw = r#"{"v":2,"ps":"a?b>","add":"1.2.3.4","port":8080,"id":"x","aid":4,"net":"tcp"}"#;
        let nopad = STANDARD.encode(raw).trim_end_matches('=').to_string();
        let p = VmessLink::parse(&format!("vmess://{nopad}")).unwrap();
        assert_eq!((p.port, p.alter_id, p.name.as_str()), (8080, 4, "a?b>"));
        let url = URL_SAFE.encode(raw);
        assert_eq!(VmessLink::parse(&format!("vmess://{url}")).unwrap(), p);
    }

    #[test]
    fn rejects_bad_links() {
        for bad in [
            "ss://abc",
            "vmess://!!!",
            &format!("vmess://{}", STANDARD.encode("[1]")),
            &format!(
                "vmess://{}",
                STANDARD.encode(r#"{"add":"a","id":"x","port":70000}"#)
            ),
            &format!(
                "vmess://{}",
                STANDARD.encode(r#"{"add":"","id":"x","port":1}"#)
            ),
        ] {
            assert!(VmessLink::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn outbound_json_builds_and_config_round_trips() {
        let l = VmessLink::parse(
            &VmessLink {
                name: "t".into(),
                address: "127.0.0.1".into(),
                port: 1234,
                id: "b831381d-6324-4d53-ad4f-8cda48b30811".into(),
                security: "chacha20-poly1305".into(),
                ..Default::default()
            }
            .to_link(),
        )
        .unwrap();
        let ob = l.to_outbound();
        let cfg = json!({"outbounds": [ob]});
        let back = VmessLink::from_config(&cfg);
        assert_eq!(back.len(), 1);
        assert_eq!(back[0].to_link(), l.to_link());
        // The outbound is one Ferry itself accepts.
        let diag = crate::config::Diagnostics::default();
        let settings =
            crate::config::Obj::new(&cfg["outbounds"][0]["settings"], "settings", &diag).unwrap();
        let b = crate::proxy::OutboundBuild {
            tag: "t",
            diag: &diag,
            sockopt: Default::default(),
            stream: &Default::default(),
            dns: std::sync::Arc::new(crate::app::dns::Dns::system()),
            bridge: &Default::default(),
            dialer: std::sync::Arc::new(crate::transport::SocketDialer {
                opts: Default::default(),
            }),
        };
        assert!(super::super::outbound::build(&settings, &b).is_ok());
    }

    #[test]
    fn an_inbound_s_users_get_links_that_read_back_as_its_outbound() {
        let ib = json!({"protocol": "vmess", "port": 443, "settings": {"clients": [
            {"id": "b831381d-6324-4d53-ad4f-8cda48b30811", "email": "a@x"},
            {"id": "27848739-7e62-4138-9fd3-098a63964b6b", "alterId": 4}]},
            "streamSettings": {"network": "ws", "security": "tls",
                "wsSettings": {"path": "/ray", "host": "cdn.example.com"}}});
        let links = links_for_inbound(&ib, "example.com", 443);
        assert_eq!(links.len(), 2);
        assert_eq!(links[0].0, "a@x");
        let back = VmessLink::parse(&links[0].1.to_link()).unwrap();
        assert_eq!(
            (back.id.as_str(), back.network.as_str(), back.path.as_str()),
            ("b831381d-6324-4d53-ad4f-8cda48b30811", "ws", "/ray")
        );
        assert_eq!(
            (back.host.as_str(), back.tls.as_str(), back.sni.as_str()),
            ("cdn.example.com", "tls", "example.com")
        );
        assert_eq!(VmessLink::parse(&links[1].1.to_link()).unwrap().alter_id, 4);
        let out = back.to_outbound();
        assert_eq!(out["streamSettings"]["wsSettings"]["path"], "/ray");
        assert_eq!(out["settings"]["vnext"][0]["address"], "example.com");
        // gRPC's service name rides in `path`, its mode in `type`.
        let g = json!({"protocol": "vmess", "settings": {"clients": [{"id": "b831381d-6324-4d53-ad4f-8cda48b30811"}]},
            "streamSettings": {"network": "grpc", "grpcSettings": {"serviceName": "svc", "multiMode": true}}});
        let l = &links_for_inbound(&g, "1.2.3.4", 8443)[0].1;
        assert_eq!(
            (l.path.as_str(), l.header_type.as_str(), l.sni.as_str()),
            ("svc", "multi", "")
        );
    }
}
