//! A stream's security from a panel: TLS (`tlsSettings`) and REALITY (`realitySettings`,
//! the server half for inbounds, the client half for outbounds).

use serde_json::{json, Map, Value};

use super::Error;
use crate::pb;
use crate::proxy::api::parse;

/// `security` and its settings, put in `o`; what Ferry does not have is refused.
pub(super) fn security(
    o: &mut Map<String, Value>,
    s: &pb::StreamConfig,
    outbound: bool,
) -> Result<(), Error> {
    let settings = |what: &str| {
        s.security_settings
            .iter()
            .find(|m| m.r#type == s.security_type)
            .ok_or(format!("transport/internet: {what} settings are missing"))
    };
    match s.security_type.as_str() {
        "" => {}
        "xray.transport.internet.tls.Config" => {
            let t: pb::TlsConfig = parse(&settings("TLS")?.value)?;
            o.insert("security".into(), json!("tls"));
            o.insert("tlsSettings".into(), tls(&t, outbound));
        }
        "xray.transport.internet.reality.Config" => {
            let r: pb::RealityConfig = parse(&settings("REALITY")?.value)?;
            o.insert("security".into(), json!("reality"));
            o.insert("realitySettings".into(), reality(&r, outbound));
        }
        other => {
            return Err(format!(
                "transport/internet: security {other} is not supported by Ferry yet"
            ))
        }
    }
    Ok(())
}

/// `realitySettings` from a REALITY `Config`: the server half for inbounds, the client half
/// for outbounds (keys in base64url, short ids in hex, versions as `x.y.z`).
fn reality(r: &pb::RealityConfig, outbound: bool) -> Value {
    let b64 = crate::config::reality::b64;
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let mut o = Map::new();
    if outbound {
        o.insert("fingerprint".into(), json!(r.fingerprint));
        if !r.server_name.is_empty() {
            o.insert("serverName".into(), json!(r.server_name));
        }
        o.insert("password".into(), json!(b64(&r.public_key)));
        o.insert("shortId".into(), json!(hex(&r.short_id)));
        if !r.spider_x.is_empty() {
            o.insert("spiderX".into(), json!(r.spider_x));
        }
        if !r.mldsa65_verify.is_empty() {
            o.insert("mldsa65Verify".into(), json!(b64(&r.mldsa65_verify)));
        }
        return Value::Object(o);
    }
    if r.show {
        o.insert("show".into(), json!(true));
    }
    o.insert("target".into(), json!(r.dest));
    if !r.r#type.is_empty() {
        o.insert("type".into(), json!(r.r#type));
    }
    if r.xver != 0 {
        o.insert("xver".into(), json!(r.xver));
    }
    o.insert("serverNames".into(), json!(r.server_names));
    o.insert("privateKey".into(), json!(b64(&r.private_key)));
    let ids: Vec<String> = r.short_ids.iter().map(|i| hex(i)).collect();
    o.insert("shortIds".into(), json!(ids));
    for (k, v) in [
        ("minClientVer", &r.min_client_ver),
        ("maxClientVer", &r.max_client_ver),
    ] {
        if !v.is_empty() {
            let parts: Vec<String> = v.iter().map(u8::to_string).collect();
            o.insert(k.into(), json!(parts.join(".")));
        }
    }
    if r.max_time_diff != 0 {
        o.insert("maxTimeDiff".into(), json!(r.max_time_diff));
    }
    if !r.mldsa65_seed.is_empty() {
        o.insert("mldsa65Seed".into(), json!(b64(&r.mldsa65_seed)));
    }
    for (k, l) in [
        ("limitFallbackUpload", &r.limit_fallback_upload),
        ("limitFallbackDownload", &r.limit_fallback_download),
    ] {
        if let Some(l) = l {
            o.insert(
                k.into(),
                json!({"afterBytes": l.after_bytes, "bytesPerSec": l.bytes_per_sec,
                       "burstBytesPerSec": l.burst_bytes_per_sec}),
            );
        }
    }
    Value::Object(o)
}

fn tls(t: &pb::TlsConfig, outbound: bool) -> Value {
    let mut o = Map::new();
    let certs: Vec<Value> = t
        .certificate
        .iter()
        .map(|c| {
            let lines = |b: &[u8]| -> Vec<String> {
                String::from_utf8_lossy(b)
                    .lines()
                    .map(str::to_string)
                    .collect()
            };
            let mut e = Map::new();
            e.insert("certificate".into(), json!(lines(&c.certificate)));
            e.insert("key".into(), json!(lines(&c.key)));
            if c.usage == 1 {
                e.insert("usage".into(), json!("verify"));
            } else if c.usage == 2 {
                e.insert("usage".into(), json!("issue"));
            }
            Value::Object(e)
        })
        .collect();
    if !certs.is_empty() {
        o.insert("certificates".into(), json!(certs));
    }
    if !t.server_name.is_empty() {
        o.insert("serverName".into(), json!(t.server_name));
    }
    if !t.next_protocol.is_empty() {
        o.insert("alpn".into(), json!(t.next_protocol));
    }
    for (k, v) in [
        ("minVersion", &t.min_version),
        ("maxVersion", &t.max_version),
    ] {
        if !v.is_empty() {
            o.insert(k.into(), json!(v));
        }
    }
    if t.reject_unknown_sni {
        o.insert("rejectUnknownSni".into(), json!(true));
    }
    if t.enable_session_resumption {
        o.insert("enableSessionResumption".into(), json!(true));
    }
    if t.disable_system_root {
        o.insert("disableSystemRoot".into(), json!(true));
    }
    if outbound && !t.fingerprint.is_empty() {
        o.insert("fingerprint".into(), json!(t.fingerprint));
    }
    if !t.pinned_peer_cert_sha256.is_empty() {
        let pins: Vec<String> = t
            .pinned_peer_cert_sha256
            .iter()
            .map(|p| p.iter().map(|b| format!("{b:02x}")).collect())
            .collect();
        o.insert("pinnedPeerCertSha256".into(), json!(pins));
    }
    Value::Object(o)
}
