//! SIP002 `ss://` links: `ss://USERINFO@HOST:PORT[/][?plugin=…][#TAG]`, where USERINFO is
//! base64url(`method:password`) for stream/AEAD methods and percent-encoded `method:password`
//! for 2022 methods (SIP002 requires the plain form there).

use serde_json::{json, Value};

use super::cipher::{Kind, Method};
use crate::common::text::{base64_decode, base64_url, percent_decode, percent_encode};
use crate::config::reader::{Diagnostics, Obj};

/// A decoded link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub method: Method,
    pub password: String,
    pub host: String,
    pub port: u16,
    pub tag: String,
    pub plugin: Option<String>,
}

impl Link {
    /// Formats the link (IPv6 hosts in brackets).
    pub fn encode(&self) -> String {
        let ui = if self.method.kind() == Kind::Aead2022 {
            format!(
                "{}:{}",
                percent_encode(self.method.name()),
                percent_encode(&self.password)
            )
        } else {
            base64_url(format!("{}:{}", self.method.name(), self.password).as_bytes())
        };
        let host = if self.host.contains(':') && !self.host.starts_with('[') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        let mut s = format!("ss://{ui}@{host}:{}", self.port);
        if let Some(p) = &self.plugin {
            s.push_str(&format!("/?plugin={}", percent_encode(p)));
        }
        if !self.tag.is_empty() {
            s.push('#');
            s.push_str(&percent_encode(&self.tag));
        }
        s
    }

    /// Parses a SIP002 link (base64 with or without padding, url-safe or standard).
    pub fn decode(link: &str) -> Result<Link, String> {
        let rest = link
            .trim()
            .strip_prefix("ss://")
            .ok_or("not an ss:// link")?;
        let (rest, tag) = match rest.split_once('#') {
            Some((r, t)) => (r, percent_decode(t)?),
            None => (rest, String::new()),
        };
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        let rest = rest.trim_end_matches('/');
        let (ui, hostport) = rest.rsplit_once('@').ok_or("missing '@'")?;
        let userinfo = if ui.contains(':') || ui.contains('%') {
            percent_decode(ui)?
        } else {
            let bytes =
                base64_decode(ui).map_err(|_| "user info is neither base64 nor method:password")?;
            String::from_utf8(bytes).map_err(|_| "user info is not UTF-8")?
        };
        let (m, password) = userinfo.split_once(':').ok_or("user info lacks ':'")?;
        let method = Method::parse(m).ok_or_else(|| format!("unknown method {m:?}"))?;
        let (host, port) = hostport.rsplit_once(':').ok_or("missing port")?;
        let port: u16 = port.parse().map_err(|_| format!("bad port {port:?}"))?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let mut plugin = None;
        for kv in query.unwrap_or("").split('&') {
            if let Some(v) = kv.strip_prefix("plugin=") {
                plugin = Some(percent_decode(v)?);
            }
        }
        Ok(Link {
            method,
            password: password.to_string(),
            host,
            port,
            tag,
            plugin,
        })
    }

    /// An Xray/Ferry outbound object for this link.
    pub fn to_outbound(&self) -> Result<Value, String> {
        if let Some(p) = &self.plugin {
            return Err(format!("SIP003 plugins are not supported ({p})"));
        }
        let mut o = json!({
            "protocol": "shadowsocks",
            "settings": {"servers": [{
                "address": self.host, "port": self.port,
                "method": self.method.name(), "password": self.password
            }]}
        });
        if !self.tag.is_empty() {
            o["tag"] = json!(self.tag);
        }
        Ok(o)
    }
}

/// Links for every user of a shadowsocks inbound's `settings`, reached at `host:port`.
/// Returns `(email, link)`; 2022 users get `iPSK:uPSK` as their password.
pub fn links_for_inbound(
    settings: &Value,
    host: &str,
    port: u16,
) -> Result<Vec<(String, Link)>, String> {
    let d = Diagnostics::default();
    let o = Obj::new(settings, "settings", &d).map_err(|e| e.to_string())?;
    let top_method = o.str("method").map_err(|e| e.to_string())?;
    let top_pw = o.str("password").map_err(|e| e.to_string())?;
    let clients = o.objs(&["clients", "users"]).map_err(|e| e.to_string())?;
    let link = |m: &str, pw: String, tag: &str| -> Result<Link, String> {
        Ok(Link {
            method: Method::parse(m).ok_or_else(|| format!("unknown method {m:?}"))?,
            password: pw,
            host: host.to_string(),
            port,
            tag: tag.to_string(),
            plugin: None,
        })
    };
    let mut out = Vec::new();
    if clients.is_empty() {
        let m = top_method.ok_or("settings.method is missing")?;
        let pw = top_pw.ok_or("settings.password is missing")?;
        let email = o.str("email").ok().flatten().unwrap_or_default();
        out.push((email.clone(), link(&m, pw, &email)?));
        return Ok(out);
    }
    for c in clients {
        let email = c.str("email").ok().flatten().unwrap_or_default();
        let pw = c
            .str("password")
            .ok()
            .flatten()
            .ok_or("a client has no password")?;
        let m = c
            .str("method")
            .ok()
            .flatten()
            .or_else(|| top_method.clone())
            .ok_or("a client has no method")?;
        let is2022 = Method::parse(&m)
            .map(|m| m.kind() == Kind::Aead2022)
            .unwrap_or(false);
        let pw = match (&top_pw, is2022) {
            (Some(server), true) => format!("{server}:{pw}"),
            _ => pw,
        };
        out.push((email.clone(), link(&m, pw, &email)?));
    }
    Ok(out)
}

/// Shadowsocks's share links: `ss://` read, and written for its inbounds' users.
pub const LINKS: crate::proxy::protocol::Links = crate::proxy::protocol::Links {
    schemes: &["ss"],
    parse: Some(|l| Link::decode(l)?.to_outbound()),
    inbound: Some(inbound_links),
    outbounds: None,
};

fn inbound_links(ib: &Value, host: &str, port: u16) -> Result<Vec<(String, String)>, String> {
    let settings = ib.get("settings").cloned().unwrap_or_default();
    Ok(links_for_inbound(&settings, host, port)?
        .into_iter()
        .map(|(e, l)| (e, l.encode()))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sip002_vectors() {
        let l = Link::decode("ss://YWVzLTEyOC1nY206dGVzdA@192.168.100.1:8888#Example1").unwrap();
        assert_eq!(
            (l.method, l.password.as_str(), l.port),
            (Method::Aes128Gcm, "test", 8888)
        );
        assert_eq!(l.tag, "Example1");
        assert_eq!(
            l.encode(),
            "ss://YWVzLTEyOC1nY206dGVzdA@192.168.100.1:8888#Example1"
        );
        let l = Link::decode(
            "ss://cmM0LW1kNTpwYXNzd2Q@192.168.100.1:8888/?plugin=obfs-local%3Bobfs%3Dhttp#Example2",
        )
        .unwrap();
        assert_eq!((l.method, l.password.as_str()), (Method::Rc4Md5, "passwd"));
        assert_eq!(l.plugin.as_deref(), Some("obfs-local;obfs=http"));
        assert!(l.to_outbound().is_err());
        let s = "ss://2022-blake3-aes-256-gcm:YctPZ6U7xPPcU%2Bgp3u%2B0tx%2FtRizJN9K8y%2BuKlW2qjlI%3D@192.168.100.1:8888#Example3";
        let l = Link::decode(s).unwrap();
        assert_eq!(l.password, "YctPZ6U7xPPcU+gp3u+0tx/tRizJN9K8y+uKlW2qjlI=");
        assert_eq!(l.encode(), s);
        assert_eq!(Link::decode(&l.encode()).unwrap(), l);
        assert!(Link::decode("ss://!!@h:1").is_err());
        assert!(Link::decode("vmess://x").is_err());
    }

    #[test]
    fn config_example_link_for_alice() {
        // config.md §8.
        let settings = json!({
            "method": "2022-blake3-aes-128-gcm", "password": "ICEiIyQlJicoKSorLC0uLw==",
            "clients": [{"password": "AAECAwQFBgcICQoLDA0ODw==", "email": "alice"}]
        });
        let v = links_for_inbound(&settings, "203.0.113.10", 8388).unwrap();
        assert_eq!(
            v[0].1.encode(),
            "ss://2022-blake3-aes-128-gcm:ICEiIyQlJicoKSorLC0uLw%3D%3D%3AAAECAwQFBgcICQoLDA0ODw%3D%3D@203.0.113.10:8388#alice"
        );
        let o = v[0].1.to_outbound().unwrap();
        assert_eq!(
            o["settings"]["servers"][0]["password"],
            "ICEiIyQlJicoKSorLC0uLw==:AAECAwQFBgcICQoLDA0ODw=="
        );
    }
}
