//! `vless://` and `trojan://` share links in the form Xray's clients exchange (v2rayN,
//! v2rayNG, Nekoray, Hiddify, the panels): `SCHEME://USER@HOST:PORT?QUERY#NAME`, USER the
//! VLESS id or the Trojan password, QUERY `type`, `security` (`tls`, `reality`, `none`),
//! `sni`, `fp`, `alpn`, `pbk`, `sid`, `spx`, `flow`, `encryption`, `serviceName`, `mode`,
//! `path`, `host`, `headerType`. A link becomes an outbound; an inbound of a config becomes a
//! link per user (REALITY's `pbk` derived from the inbound's private key).

use serde_json::{json, Map, Value};

/// A parsed share link.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ShareLink {
    /// `vless` or `trojan`.
    pub scheme: String,
    /// The VLESS id or the Trojan password.
    pub user: String,
    pub address: String,
    pub port: u16,
    /// Query parameters in order.
    pub params: Vec<(String, String)>,
    pub name: String,
}

pub use crate::common::text::{percent_decode, percent_encode};

impl ShareLink {
    /// Parses a `vless://` or `trojan://` link.
    pub fn parse(link: &str) -> Result<ShareLink, String> {
        let (scheme, rest) = link
            .split_once("://")
            .ok_or_else(|| "not a share link (no ://)".to_string())?;
        let scheme = scheme.to_ascii_lowercase();
        if scheme != "vless" && scheme != "trojan" {
            return Err(format!("{scheme}:// is not a vless:// or trojan:// link"));
        }
        let (rest, name) = match rest.split_once('#') {
            Some((r, n)) => (r, percent_decode(n)?),
            None => (rest, String::new()),
        };
        let (authority, query) = rest.split_once('?').unwrap_or((rest, ""));
        let authority = authority.trim_end_matches('/');
        let (user, hostport) = authority
            .rsplit_once('@')
            .ok_or_else(|| "no user@ in the link".to_string())?;
        let (host, port) = hostport
            .rsplit_once(':')
            .ok_or_else(|| "no :port in the link".to_string())?;
        let port: u16 = port
            .parse()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| format!("bad port {port:?}"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let mut params = Vec::new();
        for kv in query.split('&').filter(|kv| !kv.is_empty()) {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            params.push((percent_decode(k)?, percent_decode(v)?));
        }
        Ok(ShareLink {
            scheme,
            user: percent_decode(user)?,
            address: host.to_string(),
            port,
            params,
            name,
        })
    }

    /// A query parameter ("" when absent).
    pub fn param(&self, k: &str) -> &str {
        self.params
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
            .unwrap_or("")
    }

    /// The link's text.
    pub fn encode(&self) -> String {
        let host = match self.address.contains(':') {
            true => format!("[{}]", self.address),
            false => self.address.clone(),
        };
        let q: Vec<String> = self
            .params
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| format!("{}={}", percent_encode(k), percent_encode(v)))
            .collect();
        let mut s = format!(
            "{}://{}@{host}:{}?{}",
            self.scheme,
            percent_encode(&self.user),
            self.port,
            q.join("&")
        );
        if !self.name.is_empty() {
            s.push('#');
            s.push_str(&percent_encode(&self.name));
        }
        s
    }

    /// The outbound an Xray config would have for this link.
    pub fn to_outbound(&self) -> Result<Value, String> {
        let settings = match self.scheme.as_str() {
            "vless" => {
                let mut user = Map::new();
                user.insert("id".into(), json!(self.user));
                let enc = self.param("encryption");
                user.insert(
                    "encryption".into(),
                    json!(if enc.is_empty() { "none" } else { enc }),
                );
                if !self.param("flow").is_empty() {
                    user.insert("flow".into(), json!(self.param("flow")));
                }
                json!({"vnext": [{"address": self.address, "port": self.port, "users": [user]}]})
            }
            _ => {
                json!({"servers": [{"address": self.address, "port": self.port, "password": self.user}]})
            }
        };
        let network = match self.param("type") {
            "" => "tcp",
            n => n,
        };
        let mut stream = Map::new();
        stream.insert("network".into(), json!(network));
        match network {
            "tcp" | "raw" => {
                if self.param("headerType") == "http" {
                    let mut req = json!({"path": [if self.param("path").is_empty() { "/" } else { self.param("path") }]});
                    if !self.param("host").is_empty() {
                        req["headers"] =
                            json!({"Host": self.param("host").split(',').collect::<Vec<_>>()});
                    }
                    stream.insert(
                        "tcpSettings".into(),
                        json!({"header": {"type": "http", "request": req}}),
                    );
                }
            }
            "grpc" | "gun" => {
                stream.insert(
                    "grpcSettings".into(),
                    json!({"serviceName": self.param("serviceName"), "multiMode": self.param("mode") == "multi"}),
                );
            }
            "ws" | "httpupgrade" => {
                let key = if network == "ws" {
                    "wsSettings"
                } else {
                    "httpupgradeSettings"
                };
                stream.insert(
                    key.into(),
                    json!({"path": self.param("path"), "host": self.param("host")}),
                );
            }
            other => return Err(format!("type={other} is not a transport Ferry speaks yet")),
        }
        let security = match self.param("security") {
            "" if self.scheme == "trojan" => "tls",
            "" => "none",
            s => s,
        };
        stream.insert("security".into(), json!(security));
        match security {
            "none" => {}
            "tls" => {
                let mut t = Map::new();
                if !self.param("sni").is_empty() {
                    t.insert("serverName".into(), json!(self.param("sni")));
                }
                if !self.param("fp").is_empty() {
                    t.insert("fingerprint".into(), json!(self.param("fp")));
                }
                if !self.param("alpn").is_empty() {
                    t.insert(
                        "alpn".into(),
                        json!(self.param("alpn").split(',').collect::<Vec<_>>()),
                    );
                }
                if !self.param("pcs").is_empty() {
                    t.insert("pinnedPeerCertSha256".into(), json!(self.param("pcs")));
                }
                stream.insert("tlsSettings".into(), Value::Object(t));
            }
            "reality" => {
                if self.param("pbk").is_empty() {
                    return Err("security=reality needs pbk (the server's public key)".into());
                }
                let fp = match self.param("fp") {
                    "" => "chrome",
                    f => f,
                };
                stream.insert(
                    "realitySettings".into(),
                    json!({
                        "serverName": self.param("sni"),
                        "fingerprint": fp,
                        "password": self.param("pbk"),
                        "shortId": self.param("sid"),
                        "spiderX": self.param("spx"),
                    }),
                );
            }
            other => return Err(format!("security={other} is not supported")),
        }
        let mut out =
            json!({"protocol": self.scheme, "settings": settings, "streamSettings": stream});
        if !self.name.is_empty() {
            out["tag"] = json!(self.name);
        }
        Ok(out)
    }
}

fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("")
}

/// Links for the users of a VLESS or Trojan inbound reached at `host:port`: (email, link).
pub fn links_for_inbound(
    inbound: &Value,
    host: &str,
    port: u16,
) -> Result<Vec<(String, ShareLink)>, String> {
    let proto = s(inbound, "protocol").to_ascii_lowercase();
    let scheme = match proto.as_str() {
        "vless" | "trojan" => proto.clone(),
        _ => return Ok(Vec::new()),
    };
    let null = Value::Null;
    let settings = inbound.get("settings").unwrap_or(&null);
    let stream = inbound.get("streamSettings").unwrap_or(&null);
    let mut common: Vec<(String, String)> = Vec::new();
    let network = match s(stream, "network") {
        "" | "raw" => "tcp",
        n => n,
    };
    common.push(("type".into(), network.into()));
    if scheme == "vless" {
        common.push(("encryption".into(), "none".into()));
    }
    match network {
        "grpc" | "gun" => {
            let g = stream.get("grpcSettings").unwrap_or(&null);
            common.push(("serviceName".into(), s(g, "serviceName").into()));
            if g.get("multiMode").and_then(Value::as_bool) == Some(true) {
                common.push(("mode".into(), "multi".into()));
            }
        }
        "ws" | "httpupgrade" => {
            let key = if network == "ws" {
                "wsSettings"
            } else {
                "httpupgradeSettings"
            };
            let w = stream.get(key).unwrap_or(&null);
            common.push(("path".into(), s(w, "path").into()));
            common.push(("host".into(), s(w, "host").into()));
        }
        _ => {}
    }
    let security = s(stream, "security").to_ascii_lowercase();
    match security.as_str() {
        "reality" => {
            let r = stream.get("realitySettings").unwrap_or(&null);
            let private = crate::config::reality::key32(s(r, "privateKey"))
                .ok_or("realitySettings.privateKey is not a REALITY private key")?;
            let public = crate::transport::reality::keys::x25519_public(&private);
            let first = |k: &str| {
                r.get(k)
                    .and_then(Value::as_array)
                    .and_then(|a| a.first())
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            };
            common.push(("security".into(), "reality".into()));
            common.push(("sni".into(), first("serverNames")));
            common.push(("fp".into(), "chrome".into()));
            common.push(("pbk".into(), crate::config::reality::b64(&public)));
            common.push(("sid".into(), first("shortIds")));
            common.push(("spx".into(), "/".into()));
        }
        "tls" => {
            common.push(("security".into(), "tls".into()));
            if host.parse::<std::net::IpAddr>().is_err() {
                common.push(("sni".into(), host.into()));
            }
        }
        _ => common.push(("security".into(), "none".into())),
    }
    let clients = settings
        .get("clients")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut out = Vec::new();
    for c in &clients {
        let user = match scheme.as_str() {
            "vless" => s(c, "id"),
            _ => s(c, "password"),
        };
        if user.is_empty() {
            continue;
        }
        let mut params = common.clone();
        if scheme == "vless" && !s(c, "flow").is_empty() {
            params.push(("flow".into(), s(c, "flow").into()));
        }
        let email = s(c, "email").to_string();
        out.push((
            email.clone(),
            ShareLink {
                scheme: scheme.clone(),
                user: user.into(),
                address: host.into(),
                port,
                params,
                name: email,
            },
        ));
    }
    Ok(out)
}

/// VLESS's share links: `vless://` read, and written for its inbounds' users (Trojan's
/// entry takes these with its own scheme).
pub const LINKS: crate::proxy::protocol::Links = crate::proxy::protocol::Links {
    schemes: &["vless"],
    parse: Some(|l| ShareLink::parse(l)?.to_outbound()),
    inbound: Some(inbound_links),
    outbounds: None,
};

fn inbound_links(ib: &Value, host: &str, port: u16) -> Result<Vec<(String, String)>, String> {
    Ok(links_for_inbound(ib, host, port)?
        .into_iter()
        .map(|(e, l)| (e, l.encode()))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reality_link_becomes_the_outbound_xray_would_have() {
        let l = "vless://5c6f2a1e-9b0d-4e3f-8a7c-2d1b0e9f8a7c@203.0.113.7:443?encryption=none&flow=xtls-rprx-vision&security=reality&sni=www.example.com&fp=chrome&pbk=B6N8vBQgk8i3VdwbEOhstCY3StFqqFPtC9_AsrhtHHw&sid=0123456789abcdef&spx=%2F&type=tcp&headerType=none#my%20server";
        let p = ShareLink::parse(l).unwrap();
        assert_eq!(
            (p.address.as_str(), p.port, p.name.as_str()),
            ("203.0.113.7", 443, "my server")
        );
        let o = p.to_outbound().unwrap();
        assert_eq!(
            o["settings"]["vnext"][0]["users"][0]["flow"],
            "xtls-rprx-vision"
        );
        let r = &o["streamSettings"]["realitySettings"];
        assert_eq!(r["password"], "B6N8vBQgk8i3VdwbEOhstCY3StFqqFPtC9_AsrhtHHw");
        assert_eq!(
            (
                r["serverName"].as_str(),
                r["shortId"].as_str(),
                r["spiderX"].as_str()
            ),
            (Some("www.example.com"), Some("0123456789abcdef"), Some("/"))
        );
        // Round trip through the text.
        assert_eq!(ShareLink::parse(&p.encode()).unwrap(), p);
    }

    #[test]
    fn an_inbound_gives_one_link_per_user_with_the_public_key() {
        let ib: Value = serde_json::from_str(
            r#"{"protocol":"vless","port":443,"settings":{"clients":[
                {"id":"5c6f2a1e-9b0d-4e3f-8a7c-2d1b0e9f8a7c","flow":"xtls-rprx-vision","email":"a@x"},
                {"id":"6c6f2a1e-9b0d-4e3f-8a7c-2d1b0e9f8a7c","email":"b@x"}],"decryption":"none"},
              "streamSettings":{"network":"raw","security":"reality","realitySettings":{
                "target":"www.example.com:443","serverNames":["www.example.com"],
                "privateKey":"AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA","shortIds":["0123456789abcdef",""]}}}"#,
        )
        .unwrap();
        let links = links_for_inbound(&ib, "203.0.113.7", 443).unwrap();
        assert_eq!(links.len(), 2);
        let (email, l) = &links[0];
        assert_eq!(email, "a@x");
        assert_eq!(
            l.param("pbk"),
            "B6N8vBQgk8i3VdwbEOhstCY3StFqqFPtC9_AsrhtHHw"
        );
        assert_eq!(
            (l.param("sid"), l.param("flow"), l.param("sni")),
            ("0123456789abcdef", "xtls-rprx-vision", "www.example.com")
        );
        assert_eq!(links[1].1.param("flow"), "");
        let o = ShareLink::parse(&l.encode())
            .unwrap()
            .to_outbound()
            .unwrap();
        assert_eq!(o["streamSettings"]["security"], "reality");
    }

    #[test]
    fn bad_links_are_refused() {
        for bad in [
            "vmess://x",
            "vless://id@host",
            "vless://host:443",
            "vless://id@h:0",
            "vless://id@h:1?x=%zz",
        ] {
            assert!(ShareLink::parse(bad).is_err(), "{bad}");
        }
        let no_key = ShareLink::parse("vless://id@h:443?security=reality").unwrap();
        assert!(no_key.to_outbound().is_err());
    }
}
