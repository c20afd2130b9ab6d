//! `streamSettings`: the transport and security below a protocol, read into the one typed
//! [`StreamSettings`] that builds both the acceptor and the dialer chain.

use std::sync::Arc;
use std::time::Duration;

use crate::config::reader::{ConfigError, Obj, Result};
pub use crate::transport::chain::{Network, Security, StreamSettings};
use crate::transport::grpc::GrpcSettings;
use crate::transport::http_header::{
    HeaderValues, HttpHeaderLayer, RequestTemplate, ResponseTemplate,
};
use crate::transport::upgrade::UpgradeSettings;
use crate::transport::ws::WsSettings;

/// Reads `streamSettings` objects.
pub trait ParseStream: Sized {
    /// Reads `parent.streamSettings` (absent = raw TCP without security).
    fn parse(parent: &Obj<'_>, outbound: bool) -> Result<Self>;
}

impl ParseStream for StreamSettings {
    fn parse(parent: &Obj<'_>, outbound: bool) -> Result<StreamSettings> {
        let Some(s) = parent.obj("streamSettings")? else {
            return Ok(StreamSettings::default());
        };
        let out = parse_stream_obj(&s, outbound, &[])?;
        s.finish();
        Ok(out)
    }
}

/// Reads a stream settings object (`streamSettings`, or XHTTP's `downloadSettings`, whose
/// own keys `skip` names).
pub(crate) fn parse_stream_obj(
    s: &Obj<'_>,
    outbound: bool,
    skip: &[&str],
) -> Result<StreamSettings> {
    {
        s.ignore(skip);
        let mut out = StreamSettings::default();
        let mut default_alpn = super::tls::DEFAULT_ALPN;
        if let Some(n) = s.str_alias(&["network", "method"])? {
            match n.to_ascii_lowercase().as_str() {
                "tcp" | "raw" => {}
                "ws" | "websocket" => {
                    let w = ws_settings(s.obj("wsSettings")?, &mut out, outbound)?;
                    out.network = Network::Ws(Arc::new(w));
                    if outbound {
                        default_alpn = &["http/1.1"];
                    }
                }
                "httpupgrade" => {
                    let h =
                        httpupgrade_settings(s.obj("httpupgradeSettings")?, &mut out, outbound)?;
                    out.network = Network::HttpUpgrade(Arc::new(h));
                    if outbound {
                        default_alpn = &["http/1.1"];
                    }
                }
                "grpc" | "gun" => {
                    let g = grpc_settings(s.obj("grpcSettings")?, outbound)?;
                    out.network = Network::Grpc(Arc::new(g));
                    // gRPC is HTTP/2: Xray forces h2 on the server and a client puts it
                    // first.
                    default_alpn = &["h2"];
                }
                "xhttp" | "splithttp" => {
                    let o = match s.get_alias(&["xhttpSettings", "splithttpSettings"]) {
                        Some((p, v)) => Some(Obj::new(v, p, s.diag())?),
                        None => None,
                    };
                    let x = super::xhttp::parse(o, outbound, parse_stream_obj)?;
                    out.network = Network::Xhttp(Arc::new(x));
                }
                "kcp" | "mkcp" => {
                    let k = super::kcp::parse(s.obj("kcpSettings")?)?;
                    out.network = Network::Kcp(Arc::new(k));
                }
                "hysteria" => {
                    let h = super::quic::hysteria(s.obj("hysteriaSettings")?, outbound)?;
                    out.network = Network::Hysteria(Arc::new(h));
                    default_alpn = &["h3"];
                }
                _ => {
                    let p = s
                        .get_alias(&["network", "method"])
                        .map(|(p, _)| p)
                        .unwrap_or_default();
                    return Err(ConfigError::new(p, format!("{n:?} is not supported")));
                }
            }
        }
        if let Some(sec) = s.str("security")? {
            match sec.to_ascii_lowercase().as_str() {
                "" | "none" => {}
                "tls" if matches!(out.network, Network::Xhttp(_)) && alpn_is_h3(s) => {
                    return Err(ConfigError::new(
                        format!("{}.alpn", s.key_path("tlsSettings")),
                        "XHTTP over HTTP/3 (alpn [\"h3\"]) is not supported by Ferry yet",
                    ));
                }
                "tls" => {
                    let t = s.obj("tlsSettings")?;
                    out.security =
                        Security::Tls(super::tls::parse(t, s.path(), outbound, default_alpn)?);
                }
                "reality" => {
                    // As Xray: REALITY carries RAW, gRPC and XHTTP, nothing else.
                    if !matches!(
                        out.network,
                        Network::Raw | Network::Grpc(_) | Network::Xhttp(_)
                    ) {
                        return Err(ConfigError::new(
                            s.key_path("security"),
                            "REALITY only supports the raw (tcp), grpc and xhttp networks",
                        ));
                    }
                    let r = s.obj("realitySettings")?;
                    out.security = Security::Reality(super::reality::parse(r, s.path(), outbound)?);
                }
                _ => {
                    return Err(ConfigError::new(
                        s.key_path("security"),
                        format!("{sec:?} is not supported yet"),
                    ))
                }
            }
        }
        let quic = matches!(out.network, Network::Hysteria(_));
        if quic && matches!(out.security, Security::Reality(_)) {
            return Err(ConfigError::new(
                s.key_path("security"),
                "the hysteria network runs on TLS (QUIC), not REALITY",
            ));
        }
        let masked = quic || matches!(out.network, Network::Kcp(_));
        out.finalmask = Arc::new(super::quic::finalmask(s.obj("finalmask")?, masked)?);
        for k in ["tlsSettings", "xtlsSettings", "realitySettings"] {
            // Present but unused (security is none): accepted, as Xray does.
            s.ignore(&[k]);
        }
        // Xray reads `rawSettings` when both are given (`tcpSettings` is its older name).
        for key in [["rawSettings", "tcpSettings"]] {
            if let Some((p, v)) = s.get_alias(&key) {
                let t = Obj::new(v, p, s.diag())?;
                if t.bool("acceptProxyProtocol")?.unwrap_or(false) {
                    accept_pp(&mut out, &t, outbound);
                }
                if let Some(h) = t.obj("header")? {
                    let ty = h.str("type")?.unwrap_or_else(|| "none".into());
                    match ty.to_ascii_lowercase().as_str() {
                        "none" | "" => h.ignore(&["request", "response"]),
                        "http" => out.http_header = Some(Arc::new(http_header(&h)?)),
                        _ => {
                            return Err(ConfigError::new(
                                h.key_path("type"),
                                format!("header type {ty:?} is not supported (none or http)"),
                            ))
                        }
                    }
                    h.finish();
                }
                t.finish();
            }
        }
        for k in [
            "wsSettings",
            "httpupgradeSettings",
            "grpcSettings",
            "kcpSettings",
            "xhttpSettings",
            "splithttpSettings",
            "quicSettings",
            "httpSettings",
            "dsSettings",
            "hysteriaSettings",
        ] {
            s.ignore(&[k]);
        }
        if let Some(so) = s.obj("sockopt")? {
            super::sockopt::read(&so, &mut out.sockopt)?;
            if so.bool("acceptProxyProtocol")?.unwrap_or(false) {
                accept_pp(&mut out, &so, outbound);
            }
            if let Some(t) = so.str_list("trustedXForwardedFor")? {
                out.trusted_xff = t.into();
            }
            if let Some(d) = so.str("dialerProxy")?.filter(|d| !d.is_empty()) {
                if outbound {
                    out.dialer_proxy = Some(d);
                } else {
                    s.diag().warn(
                        &so.key_path("dialerProxy"),
                        "applies to outbounds only; ignored",
                    );
                }
            }
            so.finish();
        }
        Ok(out)
    }
}

/// `tlsSettings.alpn` is exactly `["h3"]` (XHTTP over QUIC).
fn alpn_is_h3(s: &Obj<'_>) -> bool {
    s.get("tlsSettings")
        .and_then(|(_, t)| t.get("alpn").cloned())
        .is_some_and(|a| a == serde_json::json!(["h3"]) || a == serde_json::json!("h3"))
}

/// `path`, `host` and `headers` of `httpupgradeSettings`, and the part of `wsSettings` they
/// share. `ws`: a `Host` key in `headers` is the deprecated spelling of `host` (an HTTPUpgrade
/// config with one is an error, as in Xray).
fn upgrade_settings(o: &Obj<'_>, ws: bool) -> Result<UpgradeSettings> {
    let mut u = UpgradeSettings::with_path(&o.str("path")?.unwrap_or_default());
    u.host = o.str("host")?.unwrap_or_default();
    for (k, v) in super::headers::headers(o)? {
        if k.eq_ignore_ascii_case("host") {
            if !ws {
                return Err(ConfigError::new(
                    o.key_path("headers"),
                    "\"headers\" can't contain \"host\"",
                ));
            }
            o.diag().warn(
                &o.key_path("headers"),
                "\"host\" in \"headers\" is deprecated; use \"host\"",
            );
            if u.host.is_empty() {
                u.host = v;
            }
        } else {
            u.headers.push((k, v));
        }
    }
    Ok(u)
}

/// `httpupgradeSettings`.
fn httpupgrade_settings(
    o: Option<Obj<'_>>,
    out: &mut StreamSettings,
    outbound: bool,
) -> Result<UpgradeSettings> {
    let Some(o) = o else {
        return Ok(UpgradeSettings::with_path("/"));
    };
    let u = upgrade_settings(&o, false)?;
    if o.bool("acceptProxyProtocol")?.unwrap_or(false) {
        accept_pp(out, &o, outbound);
    }
    o.finish();
    Ok(u)
}

/// `wsSettings` (Xray's, with v2ray's `maxEarlyData` / `earlyDataHeaderName`).
fn ws_settings(o: Option<Obj<'_>>, out: &mut StreamSettings, outbound: bool) -> Result<WsSettings> {
    let mut w = WsSettings::default();
    let Some(o) = o else {
        return Ok(w);
    };
    w.upgrade = upgrade_settings(&o, true)?;
    if o.bool("acceptProxyProtocol")?.unwrap_or(false) {
        accept_pp(out, &o, outbound);
    }
    if let Some(n) = o.u64("maxEarlyData")? {
        w.upgrade.max_early = n as usize;
    }
    let header = o.str("earlyDataHeaderName")?.unwrap_or_default();
    if !header.is_empty() {
        w.early_header = header;
    } else if o.has("maxEarlyData") && w.upgrade.max_early > 0 {
        return Err(ConfigError::new(
            o.key_path("maxEarlyData"),
            "early data appended to the path (v2ray without earlyDataHeaderName) is not supported; set earlyDataHeaderName to \"Sec-WebSocket-Protocol\"",
        ));
    }
    if let Some(p) = o.u64("heartbeatPeriod")? {
        w.heartbeat = (p > 0).then(|| Duration::from_secs(p));
    }
    o.ignore(&["useBrowserForwarding"]);
    o.finish();
    Ok(w)
}

/// `headers` of an HTTP header template: names to a string or a list of strings, sorted by
/// name as Xray orders them.
fn header_values(o: &Obj<'_>) -> Result<Option<Vec<HeaderValues>>> {
    let Some((p, v)) = o.get("headers") else {
        return Ok(None);
    };
    let Some(m) = v.as_object() else {
        return Err(ConfigError::new(p, "expected an object"));
    };
    let mut out = Vec::new();
    for (k, v) in m {
        let path = crate::config::reader::join(&p, k);
        let vals = crate::config::reader::as_str_list(v, &path)?;
        if vals.iter().any(|v| v.contains(['\r', '\n'])) {
            return Err(ConfigError::new(
                path,
                "a header value may not hold a line break",
            ));
        }
        out.push((k.clone(), vals));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok((!out.is_empty()).then_some(out))
}

/// `tcpSettings.header` with `type: "http"`.
fn http_header(h: &Obj<'_>) -> Result<HttpHeaderLayer> {
    let mut request = RequestTemplate::default();
    if let Some(r) = h.obj("request")? {
        if let Some(v) = r.str("version")?.filter(|v| !v.is_empty()) {
            request.version = v;
        }
        if let Some(m) = r.str("method")?.filter(|v| !v.is_empty()) {
            request.method = m;
        }
        if let Some(p) = r.str_list("path")?.filter(|p| !p.is_empty()) {
            request.paths = p;
        }
        if let Some(hs) = header_values(&r)? {
            request.headers = hs;
        }
        r.finish();
    }
    let mut response = ResponseTemplate::default();
    if let Some(r) = h.obj("response")? {
        if let Some(v) = r.str("version")?.filter(|v| !v.is_empty()) {
            response.version = v;
        }
        if let Some(v) = r.str("status")?.filter(|v| !v.is_empty()) {
            response.status = v;
        }
        if let Some(v) = r.str("reason")?.filter(|v| !v.is_empty()) {
            response.reason = v;
        }
        if let Some(hs) = header_values(&r)? {
            response.headers = hs;
        }
        r.finish();
    }
    Ok(HttpHeaderLayer { request, response })
}

/// `grpcSettings`.
fn grpc_settings(o: Option<Obj<'_>>, outbound: bool) -> Result<GrpcSettings> {
    let Some(o) = o else {
        return GrpcSettings::new("").map_err(|e| ConfigError::new("grpcSettings", e));
    };
    let name = o.str("serviceName")?.unwrap_or_default();
    let mut g =
        GrpcSettings::new(&name).map_err(|e| ConfigError::new(o.key_path("serviceName"), e))?;
    g.multi = o.bool("multiMode")?.unwrap_or(false);
    g.authority = o.str("authority")?.unwrap_or_default();
    g.user_agent = o.str("user_agent")?.unwrap_or_default();
    if let Some(t) = o.i64("idle_timeout")? {
        // As Xray: below 10 s is 10 s; 0 (or less) is no health check.
        g.idle_timeout = (t > 0).then(|| Duration::from_secs(t.max(10) as u64));
    }
    if let Some(t) = o.i64("health_check_timeout")? {
        if t > 0 {
            g.health_check_timeout = Duration::from_secs(t as u64);
        }
    }
    if let Some(w) = o.i64("initial_windows_size")? {
        g.initial_window = w.clamp(0, i32::MAX as i64) as u32;
    }
    o.ignore(&["permit_without_stream"]);
    if !outbound && (g.multi || g.idle_timeout.is_some()) {
        // Client settings on a server: Xray ignores them too.
    }
    o.finish();
    Ok(g)
}

/// `acceptProxyProtocol: true` (inbounds; outbounds ignore it, as Xray does).
fn accept_pp(out: &mut StreamSettings, o: &Obj<'_>, outbound: bool) {
    if outbound {
        o.diag().warn(
            &o.key_path("acceptProxyProtocol"),
            "applies to inbounds only; ignored",
        );
    } else {
        out.accept_proxy_protocol = true;
    }
}
