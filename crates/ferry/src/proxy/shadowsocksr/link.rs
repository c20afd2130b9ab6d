//! `ssr://` links (§7): `ssr://B64(host:port:protocol:method:obfs:B64(password)/?obfsparam=B64
//! &protoparam=B64&remarks=B64&group=B64)`, B64 = URL-safe base64 without padding. Decoding is
//! lenient as the C# client is (standard or URL-safe alphabet, padded or not, IPv6 hosts, no
//! `/?` part); encoding writes the canonical form.

use serde_json::{json, Value};

use crate::common::text::{base64_decode, base64_url};
use crate::config::reader::{Diagnostics, Obj};

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Link {
    pub host: String,
    pub port: u16,
    pub protocol: String,
    pub method: String,
    pub obfs: String,
    pub password: String,
    pub obfs_param: String,
    pub protocol_param: String,
    pub remarks: String,
    pub group: String,
}

fn enc(s: &str) -> String {
    base64_url(s.as_bytes())
}

fn dec(s: &str) -> Result<String, String> {
    String::from_utf8(base64_decode(s)?).map_err(|_| "not UTF-8".to_string())
}

fn strip_compatible(s: &str) -> String {
    s.strip_suffix("_compatible").unwrap_or(s).to_string()
}

impl Link {
    pub fn encode(&self) -> String {
        let mut body = format!(
            "{}:{}:{}:{}:{}:{}",
            self.host,
            self.port,
            strip_compatible(&self.protocol),
            self.method,
            strip_compatible(&self.obfs),
            enc(&self.password)
        );
        let mut q = Vec::new();
        for (k, v) in [
            ("obfsparam", &self.obfs_param),
            ("protoparam", &self.protocol_param),
            ("remarks", &self.remarks),
            ("group", &self.group),
        ] {
            if !v.is_empty() {
                q.push(format!("{k}={}", enc(v)));
            }
        }
        if !q.is_empty() {
            body.push_str("/?");
            body.push_str(&q.join("&"));
        }
        format!("ssr://{}", enc(&body))
    }

    pub fn decode(link: &str) -> Result<Link, String> {
        let b = link
            .trim()
            .strip_prefix("ssr://")
            .ok_or("not an ssr:// link")?;
        let body = dec(b)?;
        let (main, query) = match body.split_once('?') {
            Some((m, q)) => (m, q),
            None => (body.as_str(), ""),
        };
        let main = main.strip_suffix('/').unwrap_or(main);
        // host:port:protocol:method:obfs:password — the host may hold ':' (IPv6).
        let mut f: Vec<&str> = main.rsplitn(6, ':').collect();
        if f.len() != 6 {
            return Err("expected host:port:protocol:method:obfs:password".into());
        }
        f.reverse();
        let port: u16 = f[1].parse().map_err(|_| format!("bad port {:?}", f[1]))?;
        let host = f[0].trim_start_matches('[').trim_end_matches(']');
        let mut l = Link {
            host: host.to_string(),
            port,
            protocol: if f[2].is_empty() { "origin" } else { f[2] }.to_string(),
            method: f[3].to_string(),
            obfs: if f[4].is_empty() { "plain" } else { f[4] }.to_string(),
            password: dec(f[5])?,
            ..Link::default()
        };
        for kv in query.split('&') {
            let Some((k, v)) = kv.split_once('=') else {
                continue;
            };
            let v = dec(v)?;
            match k {
                "obfsparam" => l.obfs_param = v,
                "protoparam" => l.protocol_param = v,
                "remarks" => l.remarks = v,
                "group" => l.group = v,
                _ => {}
            }
        }
        Ok(l)
    }

    /// An outbound object for this link (checked by the config reader).
    pub fn to_outbound(&self) -> Result<Value, String> {
        let mut o = json!({
            "protocol": "shadowsocksr",
            "settings": {"servers": [{
                "address": self.host, "port": self.port, "method": self.method,
                "password": self.password, "protocol": self.protocol,
                "protocolParam": self.protocol_param, "obfs": self.obfs,
                "obfsParam": self.obfs_param
            }]}
        });
        let d = Diagnostics::default();
        let s = &o["settings"];
        super::parse_client(&Obj::new(s, "settings", &d).map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
        if !self.remarks.is_empty() {
            o["tag"] = json!(self.remarks);
        }
        Ok(o)
    }
}

/// Links for every user of an SSR inbound's `settings`, reached at `host:port`: `(email, link)`.
pub fn links_for_inbound(
    settings: &Value,
    host: &str,
    port: u16,
) -> Result<Vec<(String, Link)>, String> {
    let d = Diagnostics::default();
    let o = Obj::new(settings, "settings", &d).map_err(|e| e.to_string())?;
    let cfg = super::parse_server(&o).map_err(|e| e.to_string())?;
    let c = &cfg.common;
    let base = Link {
        host: host.to_string(),
        port,
        protocol: c.protocol.name().to_string(),
        method: c.method.name().to_string(),
        obfs: c.obfs.name().to_string(),
        password: c.password.clone(),
        obfs_param: c.obfs_param.clone(),
        ..Link::default()
    };
    if cfg.users.is_empty() {
        let email = cfg.user.email.to_string();
        return Ok(vec![(
            email.clone(),
            Link {
                remarks: email,
                ..base
            },
        )]);
    }
    Ok(cfg
        .users
        .iter()
        .map(|u| {
            let email = u.user.email.to_string();
            let l = Link {
                protocol_param: format!("{}:{}", u.uid, String::from_utf8_lossy(&u.password)),
                remarks: email.clone(),
                ..base.clone()
            };
            (email, l)
        })
        .collect())
}

/// ShadowsocksR's share links: `ssr://` read, and written for its inbounds' users.
pub const LINKS: crate::proxy::protocol::Links = crate::proxy::protocol::Links {
    schemes: &["ssr"],
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
    fn wiki_example() {
        let s = "ssr://MTI3LjAuMC4xOjEyMzQ6YXV0aF9hZXMxMjhfbWQ1OmFlcy0xMjgtY2ZiOnRsczEuMl90aWNrZXRfYXV0aDpZV0ZoWW1KaS8_b2Jmc3BhcmFtPVluSmxZV3QzWVRFeExtMXZaUSZyZW1hcmtzPTVyV0w2Sy1WNUxpdDVwYUg";
        let l = Link::decode(s).unwrap();
        assert_eq!(
            (
                l.host.as_str(),
                l.port,
                l.protocol.as_str(),
                l.method.as_str()
            ),
            ("127.0.0.1", 1234, "auth_aes128_md5", "aes-128-cfb")
        );
        assert_eq!(
            (l.obfs.as_str(), l.password.as_str(), l.obfs_param.as_str()),
            ("tls1.2_ticket_auth", "aaabbb", "breakwa11.moe")
        );
        assert_eq!(l.remarks, "测试中文");
        assert_eq!(l.encode(), s);
        let no_remarks = Link {
            remarks: String::new(),
            ..l.clone()
        };
        assert!(no_remarks
            .encode()
            .ends_with("8_b2Jmc3BhcmFtPVluSmxZV3QzWVRFeExtMXZaUQ"));
        let o = l.to_outbound().unwrap();
        assert_eq!(o["protocol"], "shadowsocksr");
        assert_eq!(o["settings"]["servers"][0]["obfsParam"], "breakwa11.moe");
    }

    #[test]
    fn built_example_with_every_parameter() {
        let s = "ssr://c3NyLmV4YW1wbGUubmV0OjQ0MzphdXRoX2NoYWluX2E6Y2hhY2hhMjAtaWV0ZjpodHRwX3NpbXBsZTpjRUJ6Y3pwM01ISmtMeXMvP29iZnNwYXJhbT1ZMlJ1TG1WNFlXMXdiR1V1WTI5dExITjBZWFJwWXk1bGVHRnRjR3hsTG1OdmJTTlZjMlZ5TFVGblpXNTBPaUJOYjNwcGJHeGhMelV1TUZ4dVFXTmpaWEIwT2lBcUx5byZwcm90b3BhcmFtPU1UQXlORHAxYzJWeWNHRnpjdyZyZW1hcmtzPTZJcUM1NEs1SUVFJmdyb3VwPVJtVnljbms";
        let l = Link::decode(s).unwrap();
        assert_eq!(l.host, "ssr.example.net");
        assert_eq!(l.password, "p@ss:w0rd/+");
        assert_eq!(
            l.obfs_param,
            "cdn.example.com,static.example.com#User-Agent: Mozilla/5.0\\nAccept: */*"
        );
        assert_eq!(l.protocol_param, "1024:userpass");
        assert_eq!((l.remarks.as_str(), l.group.as_str()), ("节点 A", "Ferry"));
        assert_eq!(l.encode(), s);
    }

    #[test]
    fn lenient_decoding() {
        let l = Link {
            host: "2001:db8::1".into(),
            port: 8388,
            protocol: "origin".into(),
            method: "rc4-md5".into(),
            obfs: "plain".into(),
            password: "x".into(),
            ..Link::default()
        };
        let s = l.encode();
        assert_eq!(Link::decode(&s).unwrap(), l);
        // Standard alphabet with padding, and `_compatible` names written without the suffix.
        let body = "1.2.3.4:80:auth_sha1_v4_compatible:none:http_simple_compatible:cA==";
        let std = format!("ssr://{}", crate::common::text::base64_std(body.as_bytes()));
        let d = Link::decode(&std).unwrap();
        assert_eq!(d.password, "p");
        assert!(
            !d.encode().contains("compatible")
                || !dec(&d.encode()[6..]).unwrap().contains("compatible")
        );
        assert!(Link::decode("ssr://!!").is_err());
        assert!(Link::decode("ss://abc").is_err());
    }

    #[test]
    fn inbound_users_become_links() {
        let settings = json!({"method": "aes-256-cfb", "password": "server",
            "protocol": "auth_aes128_md5", "obfs": "http_simple",
            "users": [{"uid": 1024, "password": "userpass", "email": "alice"}]});
        let v = links_for_inbound(&settings, "203.0.113.1", 8388).unwrap();
        assert_eq!(v[0].0, "alice");
        let l = Link::decode(&v[0].1.encode()).unwrap();
        assert_eq!(l.protocol_param, "1024:userpass");
        assert_eq!(l.password, "server");
    }
}
