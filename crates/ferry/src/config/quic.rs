//! `hysteriaSettings` (the `hysteria` network) and `finalmask` (UDP masks, `quicParams`), as
//! Xray v26.3.27 reads them, with the later spellings accepted.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::config::reader::{ConfigError, Obj, Result};
use crate::transport::quic::hop::UdpHop;
use crate::transport::quic::{
    parse_bandwidth, Congestion, FinalMask, HysteriaSettings, Masquerade, QuicParams,
};
use crate::transport::udpmask::{Salamander, UdpMask, UdpMasks};

/// `hysteriaSettings`.
pub fn hysteria(o: Option<Obj<'_>>, outbound: bool) -> Result<HysteriaSettings> {
    let mut h = HysteriaSettings::default();
    let Some(o) = o else {
        return Err(ConfigError::new(
            "streamSettings.hysteriaSettings",
            "is required for the hysteria network (version 2)",
        ));
    };
    match o.i64("version")? {
        Some(2) => {}
        v => {
            return Err(ConfigError::new(
                o.key_path("version"),
                format!(
                    "version != 2 ({})",
                    v.map(|v| v.to_string()).unwrap_or("absent".into())
                ),
            ))
        }
    }
    h.auth = o.str("auth")?.unwrap_or_default();
    if let Some(t) = o.i64("udpIdleTimeout")? {
        if !(2..=600).contains(&t) && t != 0 {
            return Err(ConfigError::new(
                o.key_path("udpIdleTimeout"),
                format!("must be within 2-600 seconds, found {t}"),
            ));
        }
        if t != 0 {
            h.udp_idle = Duration::from_secs(t as u64);
        }
    }
    if let Some(m) = o.obj("masquerade")? {
        let masq = masquerade(&m)?;
        if !outbound {
            h.masquerade = masq;
        }
        m.finish();
    }
    for k in ["congestion", "up", "down", "udphop"] {
        if o.has(k) {
            o.diag().warn(
                &o.key_path(k),
                "ignored: moved to finalmask.quicParams (as Xray v26.3.23 onward)",
            );
        }
    }
    o.finish();
    Ok(h)
}

fn masquerade(m: &Obj<'_>) -> Result<Masquerade> {
    let ty = m.str("type")?.unwrap_or_default().to_ascii_lowercase();
    match ty.as_str() {
        "" | "404" => Ok(Masquerade::NotFound),
        "string" => {
            m.ignore(&["dir", "url", "rewriteHost", "insecure"]);
            let status = m.u64("statusCode")?.unwrap_or(0);
            let status = match status {
                0 => 200,
                100..=599 => status as u16,
                _ => {
                    return Err(ConfigError::new(
                        m.key_path("statusCode"),
                        format!("{status} is not an HTTP status"),
                    ))
                }
            };
            let headers = super::headers::headers(m)?
                .into_iter()
                .map(|(k, v)| (k.to_ascii_lowercase(), v))
                .collect();
            let content = Bytes::from(m.str("content")?.unwrap_or_default().into_bytes());
            Ok(Masquerade::Fixed {
                status,
                headers,
                content,
            })
        }
        "file" => {
            m.ignore(&[
                "url",
                "rewriteHost",
                "insecure",
                "content",
                "headers",
                "statusCode",
            ]);
            let dir = m.req_str("dir")?;
            Ok(Masquerade::Dir(dir.into()))
        }
        "proxy" => {
            m.ignore(&["dir", "content", "headers", "statusCode"]);
            let url = m.req_str("url")?;
            let u: http::Uri = url
                .parse()
                .map_err(|e| ConfigError::new(m.key_path("url"), format!("{url:?}: {e}")))?;
            if !matches!(u.scheme_str(), Some("http" | "https")) || u.authority().is_none() {
                return Err(ConfigError::new(
                    m.key_path("url"),
                    format!("{url:?} is not an http:// or https:// URL"),
                ));
            }
            Ok(Masquerade::Proxy {
                url,
                rewrite_host: m.bool("rewriteHost")?.unwrap_or(false),
                insecure: m.bool("insecure")?.unwrap_or(false),
            })
        }
        _ => Err(ConfigError::new(
            m.key_path("type"),
            format!("unknown masq type {ty:?}"),
        )),
    }
}

/// `finalmask`. `quic`: the network runs on QUIC (`quicParams` applies).
pub fn finalmask(o: Option<Obj<'_>>, quic: bool) -> Result<FinalMask> {
    let mut f = FinalMask::default();
    let Some(o) = o else {
        return Ok(f);
    };
    let mut masks: Vec<Arc<dyn UdpMask>> = Vec::new();
    for m in o.objs(&["udp"])? {
        let ty = m.req_str("type")?.to_ascii_lowercase();
        if !quic {
            return Err(ConfigError::new(
                m.key_path("type"),
                format!("UDP mask {ty:?} on this network is not supported by Ferry yet (hysteria has UDP masks)"),
            ));
        }
        match ty.as_str() {
            "salamander" => {
                let s = m.obj("settings")?;
                let pw = match &s {
                    Some(s) => s.str("password")?.unwrap_or_default(),
                    None => String::new(),
                };
                if pw.len() < Salamander::MIN_PASSWORD {
                    return Err(ConfigError::new(
                        m.key_path("settings.password"),
                        format!(
                            "a Salamander password needs at least {} bytes",
                            Salamander::MIN_PASSWORD
                        ),
                    ));
                }
                if let Some(s) = s {
                    s.finish();
                }
                masks.push(Arc::new(Salamander::new(pw.as_bytes())));
            }
            _ => {
                return Err(ConfigError::new(
                    m.key_path("type"),
                    format!("UDP mask {ty:?} is not supported by Ferry yet (salamander is)"),
                ))
            }
        }
        m.finish();
    }
    f.udp = UdpMasks(masks);
    if let Some((p, v)) = o.get("tcp") {
        if v.as_array().is_some_and(|a| !a.is_empty()) {
            return Err(ConfigError::new(
                p,
                "finalmask's TCP masks are not supported by Ferry yet",
            ));
        }
    }
    if let Some(q) = o.obj("quicParams")? {
        if !quic {
            return Err(ConfigError::new(
                q.path(),
                "applies to QUIC networks only (hysteria)",
            ));
        }
        f.quic = quic_params(&q)?;
        q.finish();
    }
    o.finish();
    Ok(f)
}

/// `udpHop`: `ports` as Xray's port list (`"20000-30000,443"`, a number or a list), `interval`
/// seconds (at least 5) or a `"min-max"` range.
fn udp_hop(h: &Obj<'_>) -> Result<UdpHop> {
    let (pp, pv) = h
        .get("ports")
        .ok_or_else(|| ConfigError::new(h.key_path("ports"), "is required"))?;
    let ports = crate::matchers::port::parse_ports(pv, &pp)?;
    if ports.is_empty() {
        return Err(ConfigError::new(pp, "names no port"));
    }
    let (ip, iv) = h.get("interval").ok_or_else(|| {
        ConfigError::new(
            h.key_path("interval"),
            "is required with ports (Xray v26.3.27 fails without it)",
        )
    })?;
    let (lo, hi) = crate::config::reader::int32_range(iv, &ip)?;
    if lo < 5 {
        return Err(ConfigError::new(
            ip,
            format!("must be at least 5 seconds, found {lo}"),
        ));
    }
    Ok(UdpHop {
        ports,
        interval: (
            Duration::from_secs(lo as u64),
            Duration::from_secs(hi.max(lo) as u64),
        ),
    })
}

fn quic_params(q: &Obj<'_>) -> Result<QuicParams> {
    let mut p = QuicParams::default();
    let cc = q
        .str("congestion")?
        .unwrap_or_default()
        .to_ascii_lowercase();
    p.congestion = match cc.as_str() {
        "" | "brutal" => Congestion::Negotiated,
        "force-brutal" => Congestion::ForceBrutal,
        "bbr" => Congestion::Bbr,
        "reno" => Congestion::Reno,
        _ => {
            return Err(ConfigError::new(
                q.key_path("congestion"),
                format!("unknown congestion {cc:?} (brutal, force-brutal, bbr, reno)"),
            ))
        }
    };
    let rate = |k: &str| -> Result<u64> {
        let Some((path, v)) = q.get(k) else {
            return Ok(0);
        };
        let s = match v {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Number(n) => n.to_string(),
            _ => {
                return Err(ConfigError::new(
                    path,
                    "expected a bandwidth such as \"100 mbps\"",
                ))
            }
        };
        if s.trim().is_empty() {
            return Ok(0);
        }
        let bps = parse_bandwidth(&s)
            .ok_or_else(|| ConfigError::new(&path, format!("{s:?} is not a bandwidth")))?;
        if bps < 65536 {
            return Err(ConfigError::new(
                path,
                format!("{s:?} is below 65536 bytes/s"),
            ));
        }
        Ok(bps)
    };
    p.brutal_up = rate("brutalUp")?;
    p.brutal_down = rate("brutalDown")?;
    if p.congestion == Congestion::ForceBrutal && p.brutal_up == 0 {
        return Err(ConfigError::new(
            q.key_path("brutalUp"),
            "force-brutal needs brutalUp",
        ));
    }
    let window = |k: &str| -> Result<Option<u64>> {
        match q.u64(k)? {
            Some(v) if v < 16384 => Err(ConfigError::new(
                q.key_path(k),
                format!("must be at least 16384, found {v}"),
            )),
            v => Ok(v),
        }
    };
    let _ = window("initStreamReceiveWindow")?;
    p.stream_window = window("maxStreamReceiveWindow")?;
    let _ = window("initConnectionReceiveWindow")?;
    p.conn_window = window("maxConnectionReceiveWindow")?;
    let secs = |k: &str, lo: u64, hi: u64| -> Result<Option<Duration>> {
        match q.u64(k)? {
            None | Some(0) => Ok(None),
            Some(v) if (lo..=hi).contains(&v) => Ok(Some(Duration::from_secs(v))),
            Some(v) => Err(ConfigError::new(
                q.key_path(k),
                format!("must be within {lo}-{hi} seconds, found {v}"),
            )),
        }
    };
    p.max_idle = secs("maxIdleTimeout", 4, 120)?;
    p.keep_alive = secs("keepAlivePeriod", 2, 60)?;
    p.disable_mtu_discovery = q.bool("disablePathMTUDiscovery")?.unwrap_or(false);
    if let Some(n) = q.u64("maxIncomingStreams")? {
        if n != 0 && n < 8 {
            return Err(ConfigError::new(
                q.key_path("maxIncomingStreams"),
                "must be at least 8",
            ));
        }
        p.max_incoming_streams = Some(n).filter(|n| *n != 0);
    }
    if let Some(h) = q.obj("udpHop")? {
        p.udp_hop = Some(udp_hop(&h)?);
        h.finish();
    }
    q.ignore(&["debug", "bbrProfile"]);
    Ok(p)
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use crate::config::{Config, Diagnostics};

    fn load(stream: Value, settings: Value, outbound: bool) -> Result<(), String> {
        let mut ob =
            json!({"protocol": "hysteria", "settings": settings, "streamSettings": stream});
        let v = if outbound {
            json!({"outbounds": [ob]})
        } else {
            ob["port"] = json!(1);
            ob["listen"] = json!("127.0.0.1");
            json!({"inbounds": [ob], "outbounds": [{"protocol": "freedom"}]})
        };
        Config::from_value(&v, &Diagnostics::default())
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    fn client(extra: Value) -> Value {
        let mut s = json!({"network": "hysteria", "security": "tls",
            "tlsSettings": {"serverName": "hy.test"},
            "hysteriaSettings": {"version": 2, "auth": "pw"}});
        if let (Some(m), Some(e)) = (s.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                m.insert(k.clone(), v.clone());
            }
        }
        s
    }

    #[test]
    fn xray_configs_read_as_xray_reads_them() {
        let srv = json!({"version": 2, "address": "127.0.0.1", "port": 8443});
        load(client(json!({})), srv.clone(), true).unwrap();
        let fm = |q: Value| client(json!({"finalmask": {"quicParams": q}}));
        load(
            fm(
                json!({"congestion": "brutal", "brutalUp": "50 mbps", "brutalDown": "100 mbps",
            "keepAlivePeriod": 10, "maxIdleTimeout": 30}),
            ),
            srv.clone(),
            true,
        )
        .unwrap();
        let e = load(client(json!({})), json!({"address": "h", "port": 1}), true).unwrap_err();
        assert!(e.contains("version != 2"), "{e}");
        let e = load(fm(json!({"congestion": "force-brutal"})), srv.clone(), true).unwrap_err();
        assert!(e.contains("brutalUp"), "{e}");
        let e = load(fm(json!({"congestion": "cubic"})), srv.clone(), true).unwrap_err();
        assert!(e.contains("quicParams.congestion"), "{e}");
        let e = load(fm(json!({"brutalUp": "10 kbps"})), srv.clone(), true).unwrap_err();
        assert!(e.contains("65536"), "{e}");
        let e = load(fm(json!({"keepAlivePeriod": 90})), srv.clone(), true).unwrap_err();
        assert!(e.contains("keepAlivePeriod"), "{e}");
        load(
            fm(json!({"udpHop": {"ports": "20000-20010,443", "interval": "5-10"}})),
            srv.clone(),
            true,
        )
        .unwrap();
        let e = load(
            fm(json!({"udpHop": {"ports": "20000-20010"}})),
            srv.clone(),
            true,
        )
        .unwrap_err();
        assert!(e.contains("udpHop.interval"), "{e}");
        let e = load(
            fm(json!({"udpHop": {"ports": "20000-20010", "interval": 3}})),
            srv.clone(),
            true,
        )
        .unwrap_err();
        assert!(e.contains("at least 5"), "{e}");
        let short = client(
            json!({"finalmask": {"udp": [{"type": "salamander", "settings": {"password": "abc"}}]}}),
        );
        let e = load(short, srv.clone(), true).unwrap_err();
        assert!(e.contains("finalmask.udp[0].settings.password"), "{e}");
        let mut none = client(json!({}));
        none["security"] = json!("none");
        let e = load(none, srv.clone(), true).unwrap_err();
        assert!(e.contains("tls config is nil"), "{e}");
        // A server needs its certificate; masquerade types Ferry has not are named.
        let mut s = client(json!({}));
        s["tlsSettings"] = json!({"alpn": ["h3"]});
        let users = json!({"version": 2, "clients": [{"auth": "a", "email": "u"}]});
        let e = load(s.clone(), users.clone(), false).unwrap_err();
        assert!(e.contains("certificate"), "{e}");
        s["hysteriaSettings"]["masquerade"] = json!({"type": "proxy", "url": "ftp://example.com/"});
        let e = load(s.clone(), users.clone(), false).unwrap_err();
        assert!(e.contains("masquerade.url"), "{e}");
        s["hysteriaSettings"]["masquerade"] = json!({"type": "bogus"});
        let e = load(s, users, false).unwrap_err();
        assert!(e.contains("unknown masq type"), "{e}");
        // finalmask on a network that is not QUIC: not yet, by its path.
        let e = load(
            json!({"network": "tcp", "finalmask": {"udp": [{"type": "salamander"}]}}),
            json!({"clients": [{"id": "27848739-7e62-4138-9fd3-098a63964b6b"}]}),
            false,
        );
        assert!(e.is_err());
        // VLESS on the hysteria network: not yet, by its path.
        let cert = crate::transport::tls::generate_self_signed(&["hy.test".into()], 1).unwrap();
        let mut st = client(json!({}));
        st["tlsSettings"] = json!({"certificates": [{"certificate": cert.cert_pem.lines().collect::<Vec<_>>(),
            "key": cert.key_pem.lines().collect::<Vec<_>>()}]});
        let v = json!({"inbounds": [{"port": 1, "protocol": "vless",
            "settings": {"clients": [{"id": "27848739-7e62-4138-9fd3-098a63964b6b"}], "decryption": "none"},
            "streamSettings": st}]});
        let e = Config::from_value(&v, &Diagnostics::default())
            .err()
            .unwrap();
        assert_eq!(e.path, "inbounds[0].streamSettings.network");
    }
}
