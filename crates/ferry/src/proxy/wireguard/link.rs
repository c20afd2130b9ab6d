//! `wireguard://` (and `wg://`) share links, in the form v2rayN, Hiddify and sing-box's
//! importers exchange: `wireguard://SECRETKEY@HOST:PORT/?publickey=..&address=10.0.0.2/32,
//! fd00::2/128&reserved=1,2,3&mtu=1420&presharedkey=..#NAME`, the keys in base64
//! percent-encoded. A link becomes Xray's `wireguard` outbound; a config's `wireguard`
//! outbounds become a link per peer. A server's inbound has no link: it holds its peers'
//! public keys only, and a link carries the client's secret key.

use serde_json::{json, Value};

use crate::common::text::{percent_decode, percent_encode};

/// A `wireguard://` link as Xray's outbound object.
pub fn parse(link: &str) -> Result<Value, String> {
    let (scheme, rest) = link
        .trim()
        .split_once("://")
        .ok_or_else(|| "not a share link (no ://)".to_string())?;
    if !["wireguard", "wg"].contains(&scheme.to_ascii_lowercase().as_str()) {
        return Err(format!("{scheme}:// is not a wireguard:// link"));
    }
    let (rest, name) = match rest.split_once('#') {
        Some((r, n)) => (r, percent_decode(n)?),
        None => (rest, String::new()),
    };
    let (authority, query) = rest.split_once('?').unwrap_or((rest, ""));
    let authority = authority.trim_end_matches('/');
    let (secret, hostport) = authority
        .rsplit_once('@')
        .ok_or("no secret key before @ in the link")?;
    let secret = percent_decode(secret)?;
    let (host, port) = hostport
        .rsplit_once(':')
        .filter(|(h, p)| !h.is_empty() && !p.contains(']'))
        .ok_or_else(|| format!("no host:port in {hostport:?}"))?;
    let port: u16 = port
        .parse()
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| format!("bad port {port:?}"))?;
    let mut params = Vec::new();
    for kv in query.split('&').filter(|kv| !kv.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        params.push((percent_decode(k)?.to_ascii_lowercase(), percent_decode(v)?));
    }
    let param = |keys: &[&str]| {
        params
            .iter()
            .find(|(k, _)| keys.contains(&k.as_str()))
            .map(|(_, v)| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    let public = param(&["publickey", "peer_public_key", "public_key"])
        .ok_or("the link has no publickey")?;
    let mut peer = json!({"publicKey": public, "endpoint": format!("{host}:{port}")});
    if let Some(psk) = param(&["presharedkey", "pre_shared_key", "psk"]) {
        peer["preSharedKey"] = json!(psk);
    }
    let mut settings = json!({"secretKey": secret, "peers": [peer]});
    if let Some(a) = param(&["address", "ip", "local_address"]) {
        let list: Vec<String> = a
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| match (s.contains('/'), s.contains(':')) {
                (true, _) => s.to_string(),
                (false, true) => format!("{s}/128"),
                (false, false) => format!("{s}/32"),
            })
            .collect();
        settings["address"] = json!(list);
    }
    if let Some(r) = param(&["reserved"]) {
        let bytes: Result<Vec<u8>, _> = r.split(',').map(|b| b.trim().parse::<u8>()).collect();
        match bytes {
            Ok(b) if b.len() == 3 => settings["reserved"] = json!(b),
            // Xray also takes the three bytes as base64.
            _ if r.len() == 4 => settings["reserved"] = json!(r),
            _ => return Err(format!("reserved {r:?} is not three bytes")),
        }
    }
    if let Some(m) = param(&["mtu"]) {
        let mtu: u16 = m.parse().map_err(|_| format!("bad mtu {m:?}"))?;
        settings["mtu"] = json!(mtu);
    }
    let mut out = json!({"protocol": "wireguard", "settings": settings});
    if !name.is_empty() {
        out["tag"] = json!(name);
    }
    Ok(out)
}

/// A link for each peer of each `wireguard` outbound of the merged config.
pub fn outbound_links(cfg: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let obs = cfg.get("outbounds").and_then(Value::as_array);
    for o in obs.into_iter().flatten() {
        if o.get("protocol").and_then(Value::as_str) != Some("wireguard") {
            continue;
        }
        let s = &o["settings"];
        let Some(secret) = s.get("secretKey").and_then(Value::as_str) else {
            continue;
        };
        let tag = o.get("tag").and_then(Value::as_str).unwrap_or("");
        let mut common = Vec::new();
        if let Some(a) = s.get("address").and_then(Value::as_array) {
            let a: Vec<&str> = a.iter().filter_map(Value::as_str).collect();
            common.push(format!("address={}", percent_encode(&a.join(","))));
        }
        match s.get("reserved") {
            Some(Value::Array(r)) => {
                let r: Vec<String> = r.iter().map(|b| b.to_string()).collect();
                common.push(format!("reserved={}", r.join(",")));
            }
            Some(Value::String(r)) => common.push(format!("reserved={}", percent_encode(r))),
            _ => {}
        }
        if let Some(m) = s.get("mtu").and_then(Value::as_u64) {
            common.push(format!("mtu={m}"));
        }
        let peers = s.get("peers").and_then(Value::as_array);
        for p in peers.into_iter().flatten() {
            let (Some(public), Some(endpoint)) = (
                p.get("publicKey").and_then(Value::as_str),
                p.get("endpoint").and_then(Value::as_str),
            ) else {
                continue;
            };
            let mut q = vec![format!("publickey={}", percent_encode(public))];
            if let Some(psk) = p.get("preSharedKey").and_then(Value::as_str) {
                q.push(format!("presharedkey={}", percent_encode(psk)));
            }
            q.extend(common.iter().cloned());
            out.push(format!(
                "wireguard://{}@{endpoint}/?{}#{}",
                percent_encode(secret),
                q.join("&"),
                percent_encode(tag)
            ));
        }
    }
    out
}

/// wireguard's share links in the protocol table.
pub const LINKS: crate::proxy::protocol::Links = crate::proxy::protocol::Links {
    schemes: &["wireguard", "wg"],
    parse: Some(parse),
    inbound: None,
    outbounds: Some(outbound_links),
};

#[cfg(test)]
mod tests {
    use super::*;

    const SK: &str = "yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=";
    const PK: &str = "bmXOC+F1FxEMF9dyiK2H5/1SUtzH0JuVo51h2wPfgyo=";

    #[test]
    fn a_v2rayn_link_becomes_xrays_outbound() {
        let l = format!(
            "wireguard://{}@162.159.192.1:2408/?publickey={}&reserved=1%2C2%2C3&address=172.16.0.2%2C2606%3A4700%3A110%3A8a36%3A%3A1&mtu=1280#WARP",
            percent_encode(SK),
            percent_encode(PK)
        );
        let o = parse(&l).unwrap();
        assert_eq!(o["tag"], "WARP");
        let s = &o["settings"];
        assert_eq!(s["secretKey"], SK);
        assert_eq!(s["peers"][0]["publicKey"], PK);
        assert_eq!(s["peers"][0]["endpoint"], "162.159.192.1:2408");
        assert_eq!(s["reserved"], json!([1, 2, 3]));
        assert_eq!(
            s["address"],
            json!(["172.16.0.2/32", "2606:4700:110:8a36::1/128"])
        );
        assert_eq!(s["mtu"], 1280);
        let o = parse(&format!("wg://{SK}@[2001:db8::1]:51820?publickey={PK}")).unwrap();
        assert_eq!(o["settings"]["peers"][0]["endpoint"], "[2001:db8::1]:51820");
        assert!(parse(&format!("wireguard://{SK}@h:1?reserved=1,2")).is_err());
        assert!(
            parse(&format!("wireguard://{SK}@h:1")).is_err(),
            "no publickey"
        );
        assert!(
            parse("wireguard://h:1?publickey=x").is_err(),
            "no secret key"
        );
    }

    #[test]
    fn outbounds_become_links_that_read_back() {
        let cfg = json!({"outbounds": [{"tag": "warp", "protocol": "wireguard", "settings": {
            "secretKey": SK, "address": ["172.16.0.2/32", "fd01::2/128"], "mtu": 1280,
            "reserved": [7, 8, 9], "peers": [{"publicKey": PK, "preSharedKey": SK,
            "endpoint": "engage.cloudflareclient.com:2408"}]}},
            {"protocol": "freedom"}]});
        let links = outbound_links(&cfg);
        assert_eq!(links.len(), 1);
        let o = parse(&links[0]).unwrap();
        assert_eq!(o["tag"], "warp");
        let s = &o["settings"];
        assert_eq!(s["secretKey"], SK);
        assert_eq!(s["peers"][0]["preSharedKey"], SK);
        assert_eq!(
            s["peers"][0]["endpoint"],
            "engage.cloudflareclient.com:2408"
        );
        assert_eq!(s["reserved"], json!([7, 8, 9]));
        assert_eq!(s["address"], json!(["172.16.0.2/32", "fd01::2/128"]));
        assert_eq!(s["mtu"], 1280);
    }
}
