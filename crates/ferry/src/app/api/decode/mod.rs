//! The protobuf configs panels send (an `InboundHandlerConfig`, an `OutboundHandlerConfig`,
//! a `User` with its typed account) turned into the Xray JSON shape that Ferry's config
//! reader takes, so one config model serves both front ends. Both `ReceiverConfig` layouts
//! are read (api.md §3.2); what Ferry cannot serve is an error, never silently dropped.
//! Errors are the texts the API answers with.

use std::net::IpAddr;

use prost::Message;
use serde_json::{json, Map, Value};

use super::pb;

mod inbound;
mod outbound;

pub use inbound::inbound_to_json;
pub use outbound::outbound_to_json;

/// Protocol configs Xray has and Ferry does not (an honest error, not "not found").
pub(super) const KNOWN_PROXIES: &[&str] = &[
    "xray.proxy.hysteria.ServerConfig",
    "xray.proxy.wireguard.DeviceConfig",
    "xray.proxy.dns.Config",
    "xray.proxy.loopback.Config",
    "xray.proxy.shadowsocks_2022.RelayServerConfig",
    "xray.proxy.hysteria.ClientConfig",
];

/// An error text as the API returns it.
pub type Error = String;

pub(super) fn parse<M: Message + Default>(b: &[u8]) -> Result<M, Error> {
    M::decode(b).map_err(|_| "proto: cannot parse invalid wire-format data".to_string())
}

/// Xray's error prefix (its package path) for a protocol's user manager.
pub fn user_pkg(protocol: &str) -> &'static str {
    match protocol.to_ascii_lowercase().as_str() {
        "vless" => "proxy/vless",
        "vmess" => "proxy/vmess/inbound",
        "trojan" => "proxy/trojan",
        "socks" | "mixed" => "proxy/socks",
        "http" => "proxy/http",
        "shadowsocksr" | "ssr" => "proxy/shadowsocksr",
        _ => "proxy/shadowsocks",
    }
}

pub(super) const KNOWN_ACCOUNTS: &[&str] = &[
    "xray.proxy.vless.Account",
    "xray.proxy.vmess.Account",
    "xray.proxy.trojan.Account",
    "xray.proxy.shadowsocks.Account",
    "xray.proxy.shadowsocks_2022.Account",
    "xray.proxy.socks.Account",
    "xray.proxy.http.Account",
    "xray.proxy.hysteria.account.Account",
    "xray.proxy.wireguard.PeerConfig",
    "ferry.proxy.shadowsocksr.Account",
];

/// A Shadowsocks `CipherType` as Ferry's method name.
pub(super) fn cipher_name(t: i32) -> Option<&'static str> {
    Some(match t {
        5 => "aes-128-gcm",
        6 => "aes-256-gcm",
        7 => "chacha20-ietf-poly1305",
        8 => "xchacha20-ietf-poly1305",
        9 => "none",
        _ => return None,
    })
}

/// A method name as a Shadowsocks `CipherType` (0 when it has none: stream ciphers, 2022).
pub fn cipher_type(method: &str) -> i32 {
    match method.to_ascii_lowercase().as_str() {
        "aes-128-gcm" | "aead_aes_128_gcm" => 5,
        "aes-256-gcm" | "aead_aes_256_gcm" => 6,
        "chacha20-poly1305" | "aead_chacha20_poly1305" | "chacha20-ietf-poly1305" => 7,
        "xchacha20-poly1305" | "aead_xchacha20_poly1305" | "xchacha20-ietf-poly1305" => 8,
        "none" | "plain" => 9,
        _ => 0,
    }
}

/// A VMess `SecurityType` as Ferry's name.
pub(super) fn vmess_security(t: i32) -> &'static str {
    match t {
        3 => "aes-128-gcm",
        4 => "chacha20-poly1305",
        5 => "none",
        6 => "zero",
        _ => "auto",
    }
}

/// A VMess security name as its `SecurityType`.
pub fn vmess_security_type(s: &str) -> i32 {
    match s.to_ascii_lowercase().as_str() {
        "aes-128-gcm" => 3,
        "chacha20-poly1305" => 4,
        "none" => 5,
        "zero" => 6,
        _ => 2,
    }
}

fn check_uuid(pkg: &str, id: &str) -> Result<(), Error> {
    let ok = (id.len() == 32 || id.len() == 36) && uuid::Uuid::parse_str(id).is_ok();
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{pkg}: failed to parse ID > common/uuid: invalid UUID: {id}"
        ))
    }
}

/// A user of an inbound of `protocol` as its JSON client object. The account must be of the
/// inbound's protocol (Xray crashes on another protocol's account; this is an error).
pub fn user_to_json(protocol: &str, u: &pb::User) -> Result<Value, Error> {
    let acc = u
        .account
        .as_ref()
        .ok_or("common/protocol: Account is missing")?;
    let ty = acc.r#type.as_str();
    if !KNOWN_ACCOUNTS.contains(&ty) {
        return Err("proto: not found".into());
    }
    let p = protocol.to_ascii_lowercase();
    let wrong = || format!("{ty} is not an account of a {protocol} inbound");
    let mut o = Map::new();
    match ty {
        "xray.proxy.vless.Account" if p == "vless" => {
            let a: pb::VlessAccount = parse(&acc.value)?;
            check_uuid("proxy/vless", &a.id)?;
            o.insert("id".into(), json!(a.id));
            // Hiddify sends "\0" for no flow.
            let flow = a.flow.trim_matches('\0');
            if !flow.is_empty() {
                o.insert("flow".into(), json!(flow));
            }
        }
        "xray.proxy.vmess.Account" if p == "vmess" => {
            let a: pb::VmessAccount = parse(&acc.value)?;
            check_uuid("proxy/vmess", &a.id)?;
            o.insert("id".into(), json!(a.id));
        }
        "xray.proxy.trojan.Account" if p == "trojan" => {
            let a: pb::TrojanAccount = parse(&acc.value)?;
            o.insert("password".into(), json!(a.password));
        }
        "xray.proxy.shadowsocks.Account" if p == "shadowsocks" || p == "ss" => {
            let a: pb::ShadowsocksAccount = parse(&acc.value)?;
            let m = cipher_name(a.cipher_type).ok_or(
                "proxy/shadowsocks: failed to get cipher > proxy/shadowsocks: Unsupported cipher.",
            )?;
            o.insert("password".into(), json!(a.password));
            o.insert("method".into(), json!(m));
        }
        "xray.proxy.shadowsocks_2022.Account" if p == "shadowsocks" || p == "ss" => {
            let a: pb::Ss2022Account = parse(&acc.value)?;
            o.insert("password".into(), json!(a.key));
        }
        // Xray answers "proxy is not a UserManager" for these inbounds; Ferry manages their
        // accounts too (proxy/socks/accounts.rs). The email is the user name.
        "xray.proxy.socks.Account" if p == "socks" || p == "mixed" => {
            let a: pb::PasswordAccount = parse(&acc.value)?;
            return Ok(password_account(a, u));
        }
        "xray.proxy.http.Account" if p == "http" => {
            let a: pb::PasswordAccount = parse(&acc.value)?;
            return Ok(password_account(a, u));
        }
        "ferry.proxy.shadowsocksr.Account" if p == "shadowsocksr" || p == "ssr" => {
            let a: pb::SsrAccount = parse(&acc.value)?;
            o.insert("uid".into(), json!(a.uid));
            o.insert("password".into(), json!(a.password));
        }
        _ => return Err(wrong()),
    }
    o.insert("email".into(), json!(u.email));
    o.insert("level".into(), json!(u.level));
    Ok(Value::Object(o))
}

/// A SOCKS or HTTP account as its JSON object in `accounts`.
fn password_account(a: pb::PasswordAccount, u: &pb::User) -> Value {
    let mut o = json!({"user": a.username, "pass": a.password, "level": u.level});
    if !u.email.is_empty() {
        o["email"] = json!(u.email);
    }
    o
}

/// A JSON client object of an inbound of `protocol` as the protobuf user panels read back
/// (GetInboundUsers). `method` is the inbound's own, for Shadowsocks users that name none.
pub fn user_from_json(protocol: &str, c: &Value, method: Option<&str>) -> pb::User {
    let s = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let p = protocol.to_ascii_lowercase();
    let account = match p.as_str() {
        "vless" => Some(pb::TypedMessage::of(
            "xray.proxy.vless.Account",
            &pb::VlessAccount {
                id: s("id"),
                flow: s("flow"),
                encryption: "none".into(),
            },
        )),
        "vmess" => Some(pb::TypedMessage::of(
            "xray.proxy.vmess.Account",
            &pb::VmessAccount {
                id: s("id"),
                security_settings: Some(pb::SecurityConfig {
                    r#type: vmess_security_type(&s("security")),
                }),
            },
        )),
        "trojan" => Some(pb::TypedMessage::of(
            "xray.proxy.trojan.Account",
            &pb::TrojanAccount {
                password: s("password"),
            },
        )),
        "shadowsocks" | "ss" => {
            let m = match s("method") {
                m if m.is_empty() => method.unwrap_or("").to_string(),
                m => m,
            };
            if m.starts_with("2022-") {
                Some(pb::TypedMessage::of(
                    "xray.proxy.shadowsocks_2022.Account",
                    &pb::Ss2022Account { key: s("password") },
                ))
            } else {
                Some(pb::TypedMessage::of(
                    "xray.proxy.shadowsocks.Account",
                    &pb::ShadowsocksAccount {
                        password: s("password"),
                        cipher_type: cipher_type(&m),
                        iv_check: false,
                    },
                ))
            }
        }
        "shadowsocksr" | "ssr" => Some(pb::TypedMessage::of(
            "ferry.proxy.shadowsocksr.Account",
            &pb::SsrAccount {
                uid: c.get("uid").and_then(Value::as_u64).unwrap_or(0) as u32,
                password: s("password"),
            },
        )),
        "socks" | "mixed" | "http" => {
            let ty = if p == "http" {
                "xray.proxy.http.Account"
            } else {
                "xray.proxy.socks.Account"
            };
            let a = pb::PasswordAccount {
                username: s("user"),
                password: s("pass"),
            };
            return pb::User {
                level: c.get("level").and_then(Value::as_u64).unwrap_or(0) as u32,
                email: s("user"),
                account: Some(pb::TypedMessage::of(ty, &a)),
            };
        }
        _ => None,
    };
    pb::User {
        level: c.get("level").and_then(Value::as_u64).unwrap_or(0) as u32,
        email: s("email"),
        account,
    }
}

pub(super) fn address(a: &Option<pb::IpOrDomain>) -> Option<String> {
    match a.as_ref()?.address.as_ref()? {
        pb::Address::Ip(b) => match b.len() {
            4 => <[u8; 4]>::try_from(b.as_slice())
                .ok()
                .map(|x| IpAddr::from(x).to_string()),
            16 => <[u8; 16]>::try_from(b.as_slice())
                .ok()
                .map(|x| IpAddr::from(x).to_string()),
            _ => None,
        },
        pb::Address::Domain(d) => Some(d.clone()),
    }
}

pub(super) fn networks(n: &[i32]) -> Option<String> {
    let names: Vec<&str> = n
        .iter()
        .filter_map(|x| match *x {
            pb::network::TCP => Some("tcp"),
            pb::network::UDP => Some("udp"),
            _ => None,
        })
        .collect();
    (!names.is_empty()).then(|| names.join(","))
}

/// `tcpSettings.header` for an HTTP header config.
fn http_header(c: &pb::HttpHeaderConfig) -> Value {
    let headers = |hs: &[pb::HttpHeader]| -> Map<String, Value> {
        hs.iter()
            .map(|h| (h.name.clone(), json!(h.value)))
            .collect()
    };
    let mut j = json!({"type": "http"});
    if let Some(r) = &c.request {
        let mut o = Map::new();
        if let Some(v) = &r.version {
            o.insert("version".into(), json!(v.value));
        }
        if let Some(m) = &r.method {
            o.insert("method".into(), json!(m.value));
        }
        if !r.uri.is_empty() {
            o.insert("path".into(), json!(r.uri));
        }
        if !r.header.is_empty() {
            o.insert("headers".into(), Value::Object(headers(&r.header)));
        }
        j["request"] = Value::Object(o);
    }
    if let Some(r) = &c.response {
        let mut o = Map::new();
        if let Some(v) = &r.version {
            o.insert("version".into(), json!(v.value));
        }
        if let Some(st) = &r.status {
            o.insert("status".into(), json!(st.code));
            o.insert("reason".into(), json!(st.reason));
        }
        if !r.header.is_empty() {
            o.insert("headers".into(), Value::Object(headers(&r.header)));
        }
        j["response"] = Value::Object(o);
    }
    j
}

/// Stream settings as JSON `streamSettings` (raw TCP with its HTTP header, WebSocket,
/// HTTPUpgrade, gRPC, TLS, PROXY protocol, socket options).
pub(super) fn stream(s: &pb::StreamConfig, outbound: bool) -> Result<Value, Error> {
    let mut o = Map::new();
    let net = if !s.protocol_name.is_empty() {
        s.protocol_name.clone()
    } else if s.protocol == 0 {
        "tcp".into()
    } else {
        format!("transport #{}", s.protocol)
    };
    let net = match net.as_str() {
        "tcp" | "raw" => "raw",
        "websocket" | "ws" => "ws",
        "httpupgrade" => "httpupgrade",
        "grpc" | "gun" => "grpc",
        "splithttp" | "xhttp" => "xhttp",
        _ => {
            return Err(format!(
                "transport/internet: transport {net:?} is not supported by Ferry yet (raw TCP, websocket, httpupgrade, grpc and splithttp/XHTTP are)"
            ))
        }
    };
    o.insert("network".into(), json!(net));
    for t in &s.transport_settings {
        let name = match t.protocol_name.as_str() {
            "" | "tcp" | "raw" => "raw",
            "websocket" | "ws" => "ws",
            "grpc" | "gun" => "grpc",
            "splithttp" | "xhttp" => "xhttp",
            other => other,
        };
        if name != net {
            continue;
        }
        let Some(ts) = &t.settings else { continue };
        match net {
            "raw" => {
                let tcp: pb::TcpConfig = parse(&ts.value)?;
                let mut raw = Map::new();
                if let Some(h) = &tcp.header_settings {
                    if h.r#type.ends_with("headers.http.Config") {
                        let c: pb::HttpHeaderConfig = parse(&h.value)?;
                        raw.insert("header".into(), http_header(&c));
                    } else if !h.r#type.is_empty()
                        // `header: {"type": "none"}` (3x-ui writes it) is noop.ConnectionConfig.
                        && !matches!(
                            h.r#type.as_str(),
                            "xray.transport.internet.headers.noop.Config"
                                | "xray.transport.internet.headers.noop.ConnectionConfig"
                        )
                    {
                        return Err(format!(
                            "transport/internet/tcp: header {} is not supported by Ferry yet",
                            h.r#type
                        ));
                    }
                }
                if tcp.accept_proxy_protocol {
                    raw.insert("acceptProxyProtocol".into(), json!(true));
                }
                if !raw.is_empty() {
                    o.insert("rawSettings".into(), Value::Object(raw));
                }
            }
            "ws" | "httpupgrade" => {
                let c: pb::WsConfig = parse(&ts.value)?;
                let mut path = c.path.clone();
                if c.ed > 0 {
                    path.push(if path.contains('?') { '&' } else { '?' });
                    path.push_str(&format!("ed={}", c.ed));
                }
                let mut j = json!({
                    "host": c.host,
                    "path": path,
                    "headers": c.header,
                    "acceptProxyProtocol": c.accept_proxy_protocol,
                });
                let key = if net == "ws" {
                    if c.heartbeat_period > 0 {
                        j["heartbeatPeriod"] = json!(c.heartbeat_period);
                    }
                    "wsSettings"
                } else {
                    "httpupgradeSettings"
                };
                o.insert(key.into(), j);
            }
            "xhttp" => {
                let c: pb::SplitHttpConfig = parse(&ts.value)?;
                o.insert("xhttpSettings".into(), xhttp(&c, outbound)?);
            }
            _ => {
                let c: pb::GrpcConfig = parse(&ts.value)?;
                o.insert(
                    "grpcSettings".into(),
                    json!({
                        "serviceName": c.service_name,
                        "authority": c.authority,
                        "multiMode": c.multi_mode,
                        "idle_timeout": c.idle_timeout,
                        "health_check_timeout": c.health_check_timeout,
                        "permit_without_stream": c.permit_without_stream,
                        "initial_windows_size": c.initial_windows_size,
                        "user_agent": c.user_agent,
                    }),
                );
            }
        }
    }
    match s.security_type.as_str() {
        "" => {}
        "xray.transport.internet.tls.Config" => {
            let m = s
                .security_settings
                .iter()
                .find(|m| m.r#type == s.security_type)
                .ok_or("transport/internet: TLS settings are missing")?;
            let t: pb::TlsConfig = parse(&m.value)?;
            o.insert("security".into(), json!("tls"));
            o.insert("tlsSettings".into(), tls(&t, outbound));
        }
        "xray.transport.internet.reality.Config" => {
            let m = s
                .security_settings
                .iter()
                .find(|m| m.r#type == s.security_type)
                .ok_or("transport/internet: REALITY settings are missing")?;
            let r: pb::RealityConfig = parse(&m.value)?;
            o.insert("security".into(), json!("reality"));
            o.insert("realitySettings".into(), reality(&r, outbound));
        }
        other => {
            return Err(format!(
                "transport/internet: security {other} is not supported by Ferry yet"
            ))
        }
    }
    if let Some(so) = &s.socket_settings {
        let mut j = Map::new();
        if so.accept_proxy_protocol {
            j.insert("acceptProxyProtocol".into(), json!(true));
        }
        if so.mark != 0 {
            j.insert("mark".into(), json!(so.mark));
        }
        if so.tcp_keep_alive_idle != 0 {
            j.insert("tcpKeepAliveIdle".into(), json!(so.tcp_keep_alive_idle));
        }
        if so.tcp_keep_alive_interval != 0 {
            j.insert(
                "tcpKeepAliveInterval".into(),
                json!(so.tcp_keep_alive_interval),
            );
        }
        if !so.interface.is_empty() {
            j.insert("interface".into(), json!(so.interface));
        }
        if !so.dialer_proxy.is_empty() {
            j.insert("dialerProxy".into(), json!(so.dialer_proxy));
        }
        if so.tproxy != 0 {
            return Err("transport/internet: tproxy is not supported by Ferry yet".into());
        }
        if !j.is_empty() {
            o.insert("sockopt".into(), Value::Object(j));
        }
    }
    Ok(Value::Object(o))
}

/// Xray's `Int32Range` as the JSON text its config reader takes (`"from-to"`, or one number).
fn range(r: &Option<pb::RangeConfig>) -> Option<Value> {
    let r = (*r)?;
    if (r.from, r.to) == (0, 0) {
        return None;
    }
    Some(if r.from == r.to {
        json!(r.from)
    } else {
        json!(format!("{}-{}", r.from, r.to))
    })
}

/// `xhttpSettings` from a splithttp `Config`. `xray api` and panels send it as Xray's JSON
/// reader built it, defaults filled in (`xPaddingKey`, placements, `xmux`): every field is
/// passed on, and the JSON reader refuses what Ferry does not do.
fn xhttp(c: &pb::SplitHttpConfig, outbound: bool) -> Result<Value, Error> {
    let mut o = Map::new();
    let mut put = |k: &str, v: Value| {
        o.insert(k.into(), v);
    };
    for (k, v) in [
        ("host", &c.host),
        ("path", &c.path),
        ("mode", &c.mode),
        ("xPaddingKey", &c.x_padding_key),
        ("xPaddingHeader", &c.x_padding_header),
        ("xPaddingPlacement", &c.x_padding_placement),
        ("xPaddingMethod", &c.x_padding_method),
        ("uplinkHTTPMethod", &c.uplink_http_method),
        ("sessionPlacement", &c.session_placement),
        ("sessionKey", &c.session_key),
        ("seqPlacement", &c.seq_placement),
        ("seqKey", &c.seq_key),
        ("uplinkDataPlacement", &c.uplink_data_placement),
        ("uplinkDataKey", &c.uplink_data_key),
    ] {
        if !v.is_empty() {
            put(k, json!(v));
        }
    }
    if !c.headers.is_empty() {
        put("headers", json!(c.headers));
    }
    for (k, r) in [
        ("xPaddingBytes", &c.x_padding_bytes),
        ("scMaxEachPostBytes", &c.sc_max_each_post_bytes),
        ("scMinPostsIntervalMs", &c.sc_min_posts_interval_ms),
        ("scStreamUpServerSecs", &c.sc_stream_up_server_secs),
        ("uplinkChunkSize", &c.uplink_chunk_size),
    ] {
        if let Some(v) = range(r) {
            put(k, v);
        }
    }
    for (k, on) in [
        ("noGRPCHeader", c.no_grpc_header),
        ("noSSEHeader", c.no_sse_header),
        ("xPaddingObfsMode", c.x_padding_obfs_mode),
    ] {
        if on {
            put(k, json!(true));
        }
    }
    if c.sc_max_buffered_posts != 0 {
        put("scMaxBufferedPosts", json!(c.sc_max_buffered_posts));
    }
    if c.server_max_header_bytes != 0 {
        put("serverMaxHeaderBytes", json!(c.server_max_header_bytes));
    }
    if let Some(x) = &c.xmux {
        let mut m = Map::new();
        for (k, r) in [
            ("maxConcurrency", &x.max_concurrency),
            ("maxConnections", &x.max_connections),
            ("cMaxReuseTimes", &x.c_max_reuse_times),
            ("hMaxRequestTimes", &x.h_max_request_times),
            ("hMaxReusableSecs", &x.h_max_reusable_secs),
        ] {
            if let Some(v) = range(r) {
                m.insert(k.into(), v);
            }
        }
        if x.h_keep_alive_period != 0 {
            m.insert("hKeepAlivePeriod".into(), json!(x.h_keep_alive_period));
        }
        if !m.is_empty() {
            put("xmux", Value::Object(m));
        }
    }
    // The download leg (clients only; Xray's servers ignore it, and so does Ferry's reader).
    if let (Some(d), true) = (&c.download_settings, outbound) {
        let mut j = stream(d, true)?;
        j["address"] =
            json!(address(&d.address).ok_or("splithttp: downloadSettings has no address")?);
        j["port"] = json!(d.port);
        put("downloadSettings", j);
    }
    Ok(Value::Object(o))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transports_from_a_panel_become_stream_settings() {
        let ws = pb::StreamConfig {
            protocol_name: "websocket".into(),
            transport_settings: vec![pb::TransportConfig {
                protocol: 0,
                protocol_name: "websocket".into(),
                settings: Some(pb::TypedMessage::of(
                    "xray.transport.internet.websocket.Config",
                    &pb::WsConfig {
                        path: "/p".into(),
                        ed: 2048,
                        heartbeat_period: 30,
                        ..Default::default()
                    },
                )),
            }],
            ..Default::default()
        };
        let j = stream(&ws, false).unwrap();
        assert_eq!(j["network"], "ws");
        assert_eq!(j["wsSettings"]["path"], "/p?ed=2048");
        assert_eq!(j["wsSettings"]["heartbeatPeriod"], 30);
        let grpc = pb::StreamConfig {
            protocol_name: "grpc".into(),
            transport_settings: vec![pb::TransportConfig {
                protocol: 0,
                protocol_name: "grpc".into(),
                settings: Some(pb::TypedMessage::of(
                    "xray.transport.internet.grpc.encoding.Config",
                    &pb::GrpcConfig {
                        service_name: "svc".into(),
                        multi_mode: true,
                        ..Default::default()
                    },
                )),
            }],
            ..Default::default()
        };
        let j = stream(&grpc, true).unwrap();
        assert_eq!(j["network"], "grpc");
        assert_eq!(j["grpcSettings"]["serviceName"], "svc");
        assert_eq!(j["grpcSettings"]["multiMode"], true);
        let raw = pb::StreamConfig {
            protocol_name: "tcp".into(),
            transport_settings: vec![pb::TransportConfig {
                protocol: 0,
                protocol_name: "tcp".into(),
                settings: Some(pb::TypedMessage::of(
                    "xray.transport.internet.tcp.Config",
                    &pb::TcpConfig {
                        header_settings: Some(pb::TypedMessage::of(
                            "xray.transport.internet.headers.http.Config",
                            &pb::HttpHeaderConfig {
                                request: Some(pb::HttpRequestConfig {
                                    uri: vec!["/a".into()],
                                    ..Default::default()
                                }),
                                response: None,
                            },
                        )),
                        accept_proxy_protocol: false,
                    },
                )),
            }],
            ..Default::default()
        };
        let j = stream(&raw, false).unwrap();
        assert_eq!(j["rawSettings"]["header"]["type"], "http");
        assert_eq!(j["rawSettings"]["header"]["request"]["path"][0], "/a");
        let quic = pb::StreamConfig {
            protocol_name: "kcp".into(),
            ..Default::default()
        };
        assert!(stream(&quic, false).unwrap_err().contains("not supported"));
    }

    #[test]
    fn reality_and_splithttp_become_stream_settings() {
        let reality = pb::RealityConfig {
            dest: "example.com:443".into(),
            r#type: "tcp".into(),
            server_names: vec!["example.com".into()],
            private_key: (1..=32).collect(),
            min_client_ver: vec![1, 8, 0],
            short_ids: vec![vec![0x01, 0x23, 0, 0, 0, 0, 0, 0], vec![0; 8]],
            max_time_diff: 60_000,
            limit_fallback_upload: Some(pb::LimitFallback {
                after_bytes: 1,
                bytes_per_sec: 2,
                burst_bytes_per_sec: 3,
            }),
            ..Default::default()
        };
        let split = pb::SplitHttpConfig {
            path: "/x".into(),
            mode: "packet-up".into(),
            x_padding_bytes: Some(pb::RangeConfig {
                from: 100,
                to: 1000,
            }),
            sc_max_buffered_posts: 30,
            x_padding_placement: "queryInHeader".into(),
            uplink_data_placement: "auto".into(),
            xmux: Some(pb::XmuxConfig {
                max_concurrency: Some(pb::RangeConfig { from: 1, to: 1 }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let s = pb::StreamConfig {
            protocol_name: "splithttp".into(),
            transport_settings: vec![pb::TransportConfig {
                protocol: 0,
                protocol_name: "splithttp".into(),
                settings: Some(pb::TypedMessage::of(
                    "xray.transport.internet.splithttp.Config",
                    &split,
                )),
            }],
            security_type: "xray.transport.internet.reality.Config".into(),
            security_settings: vec![pb::TypedMessage::of(
                "xray.transport.internet.reality.Config",
                &reality,
            )],
            ..Default::default()
        };
        let j = stream(&s, false).unwrap();
        assert_eq!(j["network"], "xhttp");
        assert_eq!(j["security"], "reality");
        let x = &j["xhttpSettings"];
        assert_eq!(
            (&x["path"], &x["mode"], &x["xPaddingBytes"]),
            (&json!("/x"), &json!("packet-up"), &json!("100-1000"))
        );
        assert_eq!(x["scMaxBufferedPosts"], 30);
        assert_eq!(x["xmux"]["maxConcurrency"], 1);
        let r = &j["realitySettings"];
        assert_eq!(r["target"], "example.com:443");
        assert_eq!(
            r["privateKey"],
            "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA"
        );
        assert_eq!(
            r["shortIds"],
            json!(["0123000000000000", "0000000000000000"])
        );
        assert_eq!(r["minClientVer"], "1.8.0");
        assert_eq!(r["maxTimeDiff"], 60_000);
        assert_eq!(r["limitFallbackUpload"]["burstBytesPerSec"], 3);
        // The same message read for an outbound: the client half.
        let client = pb::RealityConfig {
            fingerprint: "chrome".into(),
            server_name: "example.com".into(),
            public_key: vec![7; 32],
            short_id: vec![0xab, 0, 0, 0, 0, 0, 0, 0],
            ..Default::default()
        };
        let mut s = s;
        s.security_settings = vec![pb::TypedMessage::of(
            "xray.transport.internet.reality.Config",
            &client,
        )];
        let r = &stream(&s, true).unwrap()["realitySettings"];
        assert_eq!(r["password"], crate::config::reality::b64(&[7; 32]));
        assert_eq!(r["shortId"], "ab00000000000000");
        assert_eq!(r["serverName"], "example.com");
    }

    #[test]
    fn accounts_of_another_protocol_are_an_error_not_a_crash() {
        let u = pb::User {
            level: 0,
            email: "a".into(),
            account: Some(pb::TypedMessage::of(
                "xray.proxy.trojan.Account",
                &pb::TrojanAccount {
                    password: "p".into(),
                },
            )),
        };
        assert!(user_to_json("vless", &u)
            .unwrap_err()
            .contains("not an account"));
        assert_eq!(user_to_json("trojan", &u).unwrap()["password"], "p");
        let none = pb::User {
            account: None,
            ..u.clone()
        };
        assert_eq!(
            user_to_json("trojan", &none).unwrap_err(),
            "common/protocol: Account is missing"
        );
        let unknown = pb::User {
            account: Some(pb::TypedMessage {
                r#type: "x.y".into(),
                value: vec![],
            }),
            ..u
        };
        assert_eq!(
            user_to_json("trojan", &unknown).unwrap_err(),
            "proto: not found"
        );
    }

    #[test]
    fn users_go_to_json_and_back() {
        for (p, c) in [
            (
                "vless",
                json!({"id": "5f1c2a4e-0000-4000-8000-000000000001", "email": "a", "level": 1}),
            ),
            (
                "trojan",
                json!({"password": "pw", "email": "b", "level": 0}),
            ),
            (
                "shadowsocks",
                json!({"password": "pw", "method": "aes-128-gcm", "email": "c", "level": 0}),
            ),
        ] {
            let u = user_from_json(p, &c, None);
            let back = user_to_json(p, &u).unwrap();
            for k in ["email", "id", "password", "method"] {
                assert_eq!(back.get(k), c.get(k), "{p} {k}");
            }
        }
    }
}
