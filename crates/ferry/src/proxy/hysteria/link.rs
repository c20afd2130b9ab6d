//! `hysteria2://` (and `hy2://`) share links, in the official URI scheme that v2rayN, Nekoray,
//! Hiddify, sing-box and the panels exchange: `hysteria2://AUTH@HOST:PORT/?sni=..&obfs=
//! salamander&obfs-password=..&insecure=0|1&pinSHA256=..#NAME`. A link becomes Xray's
//! `hysteria` outbound; an inbound of a config becomes a link per user.

use serde_json::{json, Value};

use crate::common::text::{percent_decode, percent_encode};

/// A `hysteria2://` link as Xray's outbound object.
pub fn parse(link: &str) -> Result<Value, String> {
    let (scheme, rest) = link
        .trim()
        .split_once("://")
        .ok_or_else(|| "not a share link (no ://)".to_string())?;
    if !["hysteria2", "hy2"].contains(&scheme.to_ascii_lowercase().as_str()) {
        return Err(format!("{scheme}:// is not a hysteria2:// link"));
    }
    let (rest, name) = match rest.split_once('#') {
        Some((r, n)) => (r, percent_decode(n)?),
        None => (rest, String::new()),
    };
    let (authority, query) = rest.split_once('?').unwrap_or((rest, ""));
    let authority = authority.trim_end_matches('/');
    let (auth, hostport) = match authority.rsplit_once('@') {
        Some((a, h)) => (percent_decode(a)?, h),
        None => (String::new(), authority),
    };
    let (host, port) = match hostport.rsplit_once(':').filter(|(h, _)| !h.ends_with(':')) {
        Some((h, p)) if !h.is_empty() && !p.contains(']') => (h, p),
        _ => (hostport, "443"),
    };
    // Several ports (`443,5000-6000`): the client hops over them, every 30 s as the official
    // client does by default.
    let hop = port.contains([',', '-']).then(|| port.to_string());
    let first = port.split([',', '-']).next().unwrap_or("");
    let port: u16 = first
        .parse()
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| format!("bad port {port:?}"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err("no host in the link".into());
    }
    let mut params = Vec::new();
    for kv in query.split('&').filter(|kv| !kv.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        params.push((percent_decode(k)?, percent_decode(v)?));
    }
    let param = |k: &str| {
        params
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
            .unwrap_or("")
    };
    let mut tls = json!({"alpn": ["h3"]});
    let sni = param("sni");
    if !sni.is_empty() {
        tls["serverName"] = json!(sni);
    }
    let pin = param("pinSHA256").replace(':', "").to_ascii_lowercase();
    if !pin.is_empty() {
        tls["pinnedPeerCertSha256"] = json!(pin);
    }
    if param("insecure") == "1" && pin.is_empty() {
        tls["allowInsecure"] = json!(true);
    }
    let mut stream = json!({
        "network": "hysteria",
        "security": "tls",
        "tlsSettings": tls,
        "hysteriaSettings": {"version": 2, "auth": auth},
    });
    match param("obfs") {
        "" | "none" => {}
        "salamander" => {
            stream["finalmask"] = json!({"udp": [{"type": "salamander",
                "settings": {"password": param("obfs-password")}}]});
        }
        o => return Err(format!("obfs {o:?} is not supported (salamander is)")),
    }
    if let Some(ports) = hop {
        stream["finalmask"]["quicParams"] = json!({"udpHop": {"ports": ports, "interval": 30}});
    }
    let mut out = json!({
        "protocol": "hysteria",
        "settings": {"version": 2, "address": host, "port": port},
        "streamSettings": stream,
    });
    if !name.is_empty() {
        out["tag"] = json!(name);
    }
    Ok(out)
}

fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("")
}

/// A link per user of a `hysteria` inbound reached at `host:port`.
pub fn inbound_links(ib: &Value, host: &str, port: u16) -> Result<Vec<(String, String)>, String> {
    let null = Value::Null;
    let stream = ib.get("streamSettings").unwrap_or(&null);
    let mut q = Vec::new();
    let tls = stream.get("tlsSettings").unwrap_or(&null);
    let sni = match s(tls, "serverName") {
        "" if host.parse::<std::net::IpAddr>().is_err() => host,
        n => n,
    };
    if !sni.is_empty() {
        q.push(format!("sni={}", percent_encode(sni)));
    }
    let masks = stream
        .pointer("/finalmask/udp")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for m in &masks {
        if s(m, "type").eq_ignore_ascii_case("salamander") {
            let pw = m
                .pointer("/settings/password")
                .and_then(Value::as_str)
                .unwrap_or("");
            q.push("obfs=salamander".into());
            q.push(format!("obfs-password={}", percent_encode(pw)));
        }
    }
    let host = match host.contains(':') {
        true => format!("[{host}]"),
        false => host.to_string(),
    };
    let settings = ib.get("settings").unwrap_or(&null);
    let users = settings
        .get("clients")
        .or_else(|| settings.get("users"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut out = Vec::new();
    for u in &users {
        let auth = s(u, "auth");
        if auth.is_empty() {
            continue;
        }
        let email = s(u, "email").to_string();
        let mut link = format!(
            "hysteria2://{}@{host}:{port}/?{}",
            percent_encode(auth),
            q.join("&")
        );
        if !email.is_empty() {
            link.push('#');
            link.push_str(&percent_encode(&email));
        }
        out.push((email, link));
    }
    Ok(out)
}

/// Hysteria's share links.
pub const LINKS: crate::proxy::protocol::Links = crate::proxy::protocol::Links {
    schemes: &["hysteria2", "hy2"],
    parse: Some(parse),
    inbound: Some(inbound_links),
    outbounds: None,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_as_the_official_scheme_writes_them() {
        let o = parse("hysteria2://hy-pass%401@example.com:8443/?sni=hy.test&obfs=salamander&obfs-password=obfs-pass&pinSHA256=AB:cd#my%20node").unwrap();
        assert_eq!(o["protocol"], "hysteria");
        assert_eq!(o["tag"], "my node");
        assert_eq!(
            o["settings"],
            json!({"version": 2, "address": "example.com", "port": 8443})
        );
        let st = &o["streamSettings"];
        assert_eq!(st["hysteriaSettings"]["auth"], "hy-pass@1");
        assert_eq!(st["tlsSettings"]["serverName"], "hy.test");
        assert_eq!(st["tlsSettings"]["pinnedPeerCertSha256"], "abcd");
        assert_eq!(
            st["finalmask"]["udp"][0]["settings"]["password"],
            "obfs-pass"
        );
        let o = parse("hy2://pw@[2001:db8::1]").unwrap();
        assert_eq!(o["settings"]["address"], "2001:db8::1");
        assert_eq!(o["settings"]["port"], 443);
        let o = parse("hysteria2://pw@h:443,5000-6000/").unwrap();
        assert_eq!(o["settings"]["port"], 443);
        assert_eq!(
            o["streamSettings"]["finalmask"]["quicParams"]["udpHop"],
            json!({"ports": "443,5000-6000", "interval": 30})
        );
        assert!(parse("hysteria2://pw@h:1/?obfs=gecko").is_err());
        assert!(parse("vless://x@h:1").is_err());
    }

    #[test]
    fn inbound_users_become_links_that_read_back() {
        let ib = json!({"protocol": "hysteria", "settings": {"version": 2, "clients": [
            {"auth": "a b", "email": "u1@x"}, {"auth": "", "email": "none"}]},
            "streamSettings": {"network": "hysteria", "security": "tls",
                "tlsSettings": {"serverName": "hy.test"},
                "finalmask": {"udp": [{"type": "salamander", "settings": {"password": "pw12"}}]}}});
        let links = inbound_links(&ib, "203.0.113.5", 8443).unwrap();
        assert_eq!(links.len(), 1);
        assert_eq!(links[0].0, "u1@x");
        let o = parse(&links[0].1).unwrap();
        assert_eq!(o["streamSettings"]["hysteriaSettings"]["auth"], "a b");
        assert_eq!(o["streamSettings"]["tlsSettings"]["serverName"], "hy.test");
        assert_eq!(o["settings"]["port"], 8443);
        assert_eq!(
            o["streamSettings"]["finalmask"]["udp"][0]["settings"]["password"],
            "pw12"
        );
    }
}
