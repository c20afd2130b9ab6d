//! The protobuf configs panels send (an `InboundHandlerConfig`, an `OutboundHandlerConfig`,
//! a `User` with its typed account) turned into the Xray JSON shape that Ferry's config
//! reader takes, so one config model serves both front ends. Both `ReceiverConfig` layouts
//! are read (api.md §3.2); what Ferry cannot serve is an error, never silently dropped.
//! Errors are the texts the API answers with.

use std::net::IpAddr;

use prost::Message;
use serde_json::{json, Map, Value};

use super::pb;

/// An error text as the API returns it.
pub type Error = String;

fn parse<M: Message + Default>(b: &[u8]) -> Result<M, Error> {
    M::decode(b).map_err(|_| "proto: cannot parse invalid wire-format data".to_string())
}

/// Xray's error prefix (its package path) for a protocol's user manager.
pub fn user_pkg(protocol: &str) -> &'static str {
    match protocol.to_ascii_lowercase().as_str() {
        "vless" => "proxy/vless",
        "vmess" => "proxy/vmess/inbound",
        "trojan" => "proxy/trojan",
        _ => "proxy/shadowsocks",
    }
}

const KNOWN_ACCOUNTS: &[&str] = &[
    "xray.proxy.vless.Account",
    "xray.proxy.vmess.Account",
    "xray.proxy.trojan.Account",
    "xray.proxy.shadowsocks.Account",
    "xray.proxy.shadowsocks_2022.Account",
    "xray.proxy.socks.Account",
    "xray.proxy.http.Account",
    "xray.proxy.hysteria.account.Account",
    "xray.proxy.wireguard.PeerConfig",
];

/// A Shadowsocks `CipherType` as Ferry's method name.
fn cipher_name(t: i32) -> Option<&'static str> {
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
fn vmess_security(t: i32) -> &'static str {
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
        _ => return Err(wrong()),
    }
    o.insert("email".into(), json!(u.email));
    o.insert("level".into(), json!(u.level));
    Ok(Value::Object(o))
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
        _ => None,
    };
    pb::User {
        level: c.get("level").and_then(Value::as_u64).unwrap_or(0) as u32,
        email: s("email"),
        account,
    }
}

fn address(a: &Option<pb::IpOrDomain>) -> Option<String> {
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

fn networks(n: &[i32]) -> Option<String> {
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

/// `ReceiverConfig` in either layout: since v25.10.15 stream settings are field 3 and
/// sniffing field 6; before, field 3 was the allocation strategy, stream settings field 4
/// (length-delimited) and sniffing 7. A field-4 message or a field 5/7 means the old layout.
pub fn receiver(b: &[u8]) -> Result<pb::ReceiverConfig, Error> {
    let mut old = false;
    let mut buf = b;
    while !buf.is_empty() {
        let (tag, wt) = prost::encoding::decode_key(&mut buf)
            .map_err(|_| "proto: cannot parse invalid wire-format data".to_string())?;
        if (tag == 4 && wt == prost::encoding::WireType::LengthDelimited) || tag == 5 || tag == 7 {
            old = true;
        }
        prost::encoding::skip_field(wt, tag, &mut buf, Default::default())
            .map_err(|_| "proto: cannot parse invalid wire-format data".to_string())?;
    }
    if !old {
        return parse(b);
    }
    let o: pb::ReceiverConfigOld = parse(b)?;
    Ok(pb::ReceiverConfig {
        port_list: o.port_list,
        listen: o.listen,
        stream_settings: o.stream_settings,
        receive_original_destination: o.receive_original_destination,
        sniffing_settings: o.sniffing_settings,
    })
}

/// Stream settings as JSON `streamSettings` (raw TCP, TLS, PROXY protocol, socket options).
fn stream(s: &pb::StreamConfig, outbound: bool) -> Result<Value, Error> {
    let mut o = Map::new();
    let net = if !s.protocol_name.is_empty() {
        s.protocol_name.clone()
    } else if s.protocol == 0 {
        "tcp".into()
    } else {
        format!("transport #{}", s.protocol)
    };
    if !matches!(net.as_str(), "tcp" | "raw") {
        return Err(format!(
            "transport/internet: transport {net:?} is not supported by Ferry yet (raw TCP is)"
        ));
    }
    o.insert("network".into(), json!("raw"));
    for t in &s.transport_settings {
        let name = if t.protocol_name.is_empty() {
            "tcp"
        } else {
            t.protocol_name.as_str()
        };
        if !matches!(name, "tcp" | "raw") {
            continue;
        }
        if let Some(ts) = &t.settings {
            let tcp: pb::TcpConfig = parse(&ts.value)?;
            if let Some(h) = &tcp.header_settings {
                if !h.r#type.ends_with("noop.Config") && !h.r#type.is_empty() {
                    return Err(format!(
                        "transport/internet/tcp: header {} is not supported by Ferry yet",
                        h.r#type
                    ));
                }
            }
            if tcp.accept_proxy_protocol {
                o.insert("rawSettings".into(), json!({"acceptProxyProtocol": true}));
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

fn fallbacks(f: &[pb::Fallback]) -> Value {
    Value::Array(
        f.iter()
            .map(|f| {
                let mut o = Map::new();
                for (k, v) in [
                    ("name", &f.name),
                    ("alpn", &f.alpn),
                    ("path", &f.path),
                    ("type", &f.r#type),
                ] {
                    if !v.is_empty() {
                        o.insert(k.into(), json!(v));
                    }
                }
                o.insert("dest".into(), json!(f.dest));
                o.insert("xver".into(), json!(f.xver));
                Value::Object(o)
            })
            .collect(),
    )
}

fn users(protocol: &str, us: &[pb::User]) -> Result<Vec<Value>, Error> {
    us.iter().map(|u| user_to_json(protocol, u)).collect()
}

/// The VLESS inbound config in either layout: since v25.9.5 fallbacks are field 2 and
/// `decryption` field 3; before, the other way round. The new layout is tried first; an old
/// client's `decryption` ("none") does not parse as a fallback, and an old client's fallback
/// read as `decryption` holds control bytes no decryption setting has.
fn vless_inbound(b: &[u8]) -> Result<pb::FallbackServerConfig, Error> {
    if let Ok(c) = parse::<pb::FallbackServerConfig>(b) {
        if !c.decryption.chars().any(char::is_control) {
            return Ok(c);
        }
    }
    let o: pb::VlessInboundConfigOld = parse(b)?;
    Ok(pb::FallbackServerConfig {
        users: o.users,
        fallbacks: o.fallbacks,
        decryption: o.decryption,
    })
}

/// An inbound's protocol settings: (protocol name, JSON `settings`).
fn inbound_proxy(m: &pb::TypedMessage) -> Result<(&'static str, Value), Error> {
    Ok(match m.r#type.as_str() {
        "xray.proxy.vless.inbound.Config" => {
            let c = vless_inbound(&m.value)?;
            let mut s = json!({"clients": users("vless", &c.users)?, "decryption": if c.decryption.is_empty() { "none" } else { c.decryption.as_str() }});
            if !c.fallbacks.is_empty() {
                s["fallbacks"] = fallbacks(&c.fallbacks);
            }
            ("vless", s)
        }
        "xray.proxy.vmess.inbound.Config" => {
            let c: pb::VmessInboundConfig = parse(&m.value)?;
            let mut s = json!({"clients": users("vmess", &c.user)?});
            if let Some(d) = c.default {
                s["default"] = json!({"level": d.level});
            }
            ("vmess", s)
        }
        "xray.proxy.trojan.ServerConfig" => {
            let c: pb::FallbackServerConfig = parse(&m.value)?;
            let mut s = json!({"clients": users("trojan", &c.users)?});
            if !c.fallbacks.is_empty() {
                s["fallbacks"] = fallbacks(&c.fallbacks);
            }
            ("trojan", s)
        }
        "xray.proxy.shadowsocks.ServerConfig" => {
            let c: pb::ShadowsocksServerConfig = parse(&m.value)?;
            let mut s = json!({"clients": users("shadowsocks", &c.users)?});
            if let Some(n) = networks(&c.network) {
                s["network"] = json!(n);
            }
            ("shadowsocks", s)
        }
        "xray.proxy.shadowsocks_2022.ServerConfig" => {
            let c: pb::Ss2022ServerConfig = parse(&m.value)?;
            let mut s =
                json!({"method": c.method, "password": c.key, "email": c.email, "level": c.level});
            if let Some(n) = networks(&c.network) {
                s["network"] = json!(n);
            }
            ("shadowsocks", s)
        }
        "xray.proxy.shadowsocks_2022.MultiUserServerConfig" => {
            let c: pb::Ss2022MultiConfig = parse(&m.value)?;
            let mut s = json!({"method": c.method, "password": c.key, "clients": users("shadowsocks", &c.users)?});
            if let Some(n) = networks(&c.network) {
                s["network"] = json!(n);
            }
            ("shadowsocks", s)
        }
        "xray.proxy.dokodemo.Config" => {
            let c: pb::DokodemoConfig = parse(&m.value)?;
            if c.follow_redirect {
                return Err("proxy/dokodemo: followRedirect is not supported by Ferry yet".into());
            }
            let mut s = Map::new();
            if let Some(a) = address(&c.address) {
                s.insert("address".into(), json!(a));
            }
            if c.port != 0 {
                s.insert("port".into(), json!(c.port));
            }
            if !c.port_map.is_empty() {
                s.insert("portMap".into(), json!(c.port_map));
            }
            if let Some(n) = networks(&c.networks) {
                s.insert("network".into(), json!(n));
            }
            if c.user_level != 0 {
                s.insert("userLevel".into(), json!(c.user_level));
            }
            ("dokodemo-door", Value::Object(s))
        }
        "xray.proxy.socks.ServerConfig" => {
            let c: pb::SocksServerConfig = parse(&m.value)?;
            let accounts: Vec<Value> = c
                .accounts
                .iter()
                .map(|(u, p)| json!({"user": u, "pass": p}))
                .collect();
            let mut s = json!({
                "auth": if c.auth_type == 1 { "password" } else { "noauth" },
                "accounts": accounts,
                "udp": c.udp_enabled,
                "userLevel": c.user_level,
            });
            if let Some(a) = address(&c.address) {
                s["ip"] = json!(a);
            }
            ("socks", s)
        }
        "xray.proxy.http.ServerConfig" => {
            let c: pb::HttpServerConfig = parse(&m.value)?;
            let accounts: Vec<Value> = c
                .accounts
                .iter()
                .map(|(u, p)| json!({"user": u, "pass": p}))
                .collect();
            (
                "http",
                json!({"accounts": accounts, "allowTransparent": c.allow_transparent, "userLevel": c.user_level}),
            )
        }
        t if KNOWN_PROXIES.contains(&t) => {
            return Err(format!("{t}: this protocol is not supported by Ferry yet"))
        }
        _ => return Err("proto: not found".into()),
    })
}

/// Protocol configs Xray has and Ferry does not (an honest error, not "not found").
const KNOWN_PROXIES: &[&str] = &[
    "xray.proxy.hysteria.ServerConfig",
    "xray.proxy.wireguard.DeviceConfig",
    "xray.proxy.dns.Config",
    "xray.proxy.loopback.Config",
    "xray.proxy.shadowsocks_2022.RelayServerConfig",
    "xray.proxy.hysteria.ClientConfig",
];

/// An `InboundHandlerConfig` as a JSON inbound object.
pub fn inbound_to_json(c: &pb::InboundHandlerConfig) -> Result<Value, Error> {
    let rs = c
        .receiver_settings
        .as_ref()
        .ok_or("app/proxyman/inbound: receiver settings are missing")?;
    if rs.r#type != "xray.app.proxyman.ReceiverConfig" {
        return Err(format!(
            "app/proxyman/inbound: not a ReceiverConfig: {}",
            rs.r#type
        ));
    }
    let ps = c
        .proxy_settings
        .as_ref()
        .ok_or("app/proxyman/inbound: proxy settings are missing")?;
    let r = receiver(&rs.value)?;
    let (protocol, settings) = inbound_proxy(ps)?;
    let mut o = Map::new();
    o.insert("tag".into(), json!(c.tag));
    o.insert("protocol".into(), json!(protocol));
    let listen = address(&r.listen);
    let unix = listen
        .as_deref()
        .is_some_and(|l| l.starts_with('/') || l.starts_with('@'));
    if let Some(l) = listen {
        o.insert("listen".into(), json!(l));
    }
    if !unix {
        let ranges: Vec<String> = r
            .port_list
            .as_ref()
            .map(|p| p.range.as_slice())
            .unwrap_or(&[])
            .iter()
            .map(|p| {
                if p.from == p.to {
                    p.from.to_string()
                } else {
                    format!("{}-{}", p.from, p.to)
                }
            })
            .collect();
        if ranges.is_empty() {
            return Err("app/proxyman/inbound: no port given".into());
        }
        o.insert("port".into(), json!(ranges.join(",")));
    }
    if r.receive_original_destination {
        return Err("app/proxyman/inbound: followRedirect is not supported by Ferry yet".into());
    }
    o.insert("settings".into(), settings);
    if let Some(s) = &r.stream_settings {
        o.insert("streamSettings".into(), stream(s, false)?);
    }
    Ok(Value::Object(o))
}

fn endpoint(e: &Option<pb::ServerEndpoint>) -> Result<(String, u32, Option<pb::User>), Error> {
    let e = e.as_ref().ok_or("common/protocol: server is missing")?;
    let a = address(&e.address).ok_or("common/protocol: server address is missing")?;
    Ok((a, e.port, e.user.clone()))
}

fn account<M: Message + Default>(u: &Option<pb::User>, ty: &str) -> Result<(M, pb::User), Error> {
    let u = u.clone().ok_or("common/protocol: user is missing")?;
    let a = u
        .account
        .as_ref()
        .ok_or("common/protocol: Account is missing")?;
    if a.r#type != ty {
        return Err(format!("{} is not a {ty}", a.r#type));
    }
    Ok((parse(&a.value)?, u))
}

/// An outbound's protocol settings: (protocol name, JSON `settings`).
fn outbound_proxy(m: &pb::TypedMessage) -> Result<(&'static str, Value), Error> {
    Ok(match m.r#type.as_str() {
        "xray.proxy.freedom.Config" => {
            let c: pb::FreedomConfig = parse(&m.value)?;
            let ds = [
                "AsIs",
                "UseIP",
                "UseIPv4",
                "UseIPv6",
                "UseIPv46",
                "UseIPv64",
                "ForceIP",
                "ForceIPv4",
                "ForceIPv6",
                "ForceIPv46",
                "ForceIPv64",
            ];
            let mut s = json!({"domainStrategy": ds.get(c.domain_strategy as usize).copied().unwrap_or("AsIs")});
            if let Some(d) = &c.destination_override {
                let (a, p, _) = endpoint(&d.server)?;
                s["redirect"] = json!(format!("{a}:{p}"));
            }
            if c.user_level != 0 {
                s["userLevel"] = json!(c.user_level);
            }
            ("freedom", s)
        }
        "xray.proxy.blackhole.Config" => {
            let c: pb::BlackholeConfig = parse(&m.value)?;
            let http = c
                .response
                .is_some_and(|r| r.r#type == "xray.proxy.blackhole.HTTPResponse");
            (
                "blackhole",
                json!({"response": {"type": if http { "http" } else { "none" }}}),
            )
        }
        "xray.proxy.vless.outbound.Config" => {
            let c: pb::ServerClientConfig = parse(&m.value)?;
            let (a, p, u) = endpoint(&c.server)?;
            let (acc, u): (pb::VlessAccount, _) = account(&u, "xray.proxy.vless.Account")?;
            let mut user =
                json!({"id": acc.id, "encryption": "none", "level": u.level, "email": u.email});
            if !acc.flow.is_empty() {
                user["flow"] = json!(acc.flow);
            }
            (
                "vless",
                json!({"vnext": [{"address": a, "port": p, "users": [user]}]}),
            )
        }
        "xray.proxy.vmess.outbound.Config" => {
            let c: pb::ServerClientConfig = parse(&m.value)?;
            let (a, p, u) = endpoint(&c.server)?;
            let (acc, u): (pb::VmessAccount, _) = account(&u, "xray.proxy.vmess.Account")?;
            let sec = vmess_security(acc.security_settings.map(|s| s.r#type).unwrap_or(0));
            (
                "vmess",
                json!({"vnext": [{"address": a, "port": p, "users": [{"id": acc.id, "security": sec, "level": u.level, "email": u.email}]}]}),
            )
        }
        "xray.proxy.trojan.ClientConfig" => {
            let c: pb::ServerClientConfig = parse(&m.value)?;
            let (a, p, u) = endpoint(&c.server)?;
            let (acc, u): (pb::TrojanAccount, _) = account(&u, "xray.proxy.trojan.Account")?;
            (
                "trojan",
                json!({"servers": [{"address": a, "port": p, "password": acc.password, "level": u.level, "email": u.email}]}),
            )
        }
        "xray.proxy.shadowsocks.ClientConfig" => {
            let c: pb::ServerClientConfig = parse(&m.value)?;
            let (a, p, u) = endpoint(&c.server)?;
            let (acc, _): (pb::ShadowsocksAccount, _) =
                account(&u, "xray.proxy.shadowsocks.Account")?;
            let method = cipher_name(acc.cipher_type).ok_or(
                "proxy/shadowsocks: failed to get cipher > proxy/shadowsocks: Unsupported cipher.",
            )?;
            (
                "shadowsocks",
                json!({"servers": [{"address": a, "port": p, "method": method, "password": acc.password}]}),
            )
        }
        "xray.proxy.shadowsocks_2022.ClientConfig" => {
            let c: pb::Ss2022ClientConfig = parse(&m.value)?;
            let a = address(&c.address).ok_or("common/protocol: server address is missing")?;
            (
                "shadowsocks",
                json!({"servers": [{"address": a, "port": c.port, "method": c.method, "password": c.key}]}),
            )
        }
        "xray.proxy.socks.ClientConfig" | "xray.proxy.http.ClientConfig" => {
            let c: pb::ServerClientConfig = parse(&m.value)?;
            let (a, p, u) = endpoint(&c.server)?;
            let mut server = json!({"address": a, "port": p});
            if let Some(u) = &u {
                if let Some(acc) = &u.account {
                    let pa: pb::PasswordAccount = parse(&acc.value)?;
                    server["users"] = json!([{"user": pa.username, "pass": pa.password}]);
                }
            }
            let name = if m.r#type.contains("socks") {
                "socks"
            } else {
                "http"
            };
            (name, json!({"servers": [server]}))
        }
        t if KNOWN_PROXIES.contains(&t) => {
            return Err(format!("{t}: this protocol is not supported by Ferry yet"))
        }
        _ => return Err("proto: not found".into()),
    })
}

/// An `OutboundHandlerConfig` as a JSON outbound object.
pub fn outbound_to_json(c: &pb::OutboundHandlerConfig) -> Result<Value, Error> {
    let ps = c
        .proxy_settings
        .as_ref()
        .ok_or("app/proxyman/outbound: proxy settings are missing")?;
    let (protocol, settings) = outbound_proxy(ps)?;
    let mut o = Map::new();
    o.insert("tag".into(), json!(c.tag));
    o.insert("protocol".into(), json!(protocol));
    o.insert("settings".into(), settings);
    if let Some(ss) = &c.sender_settings {
        if ss.r#type != "xray.app.proxyman.SenderConfig" {
            return Err(format!(
                "app/proxyman/outbound: not a SenderConfig: {}",
                ss.r#type
            ));
        }
        let s: pb::SenderConfig = parse(&ss.value)?;
        if let Some(v) = address(&s.via) {
            o.insert("sendThrough".into(), json!(v));
        }
        if let Some(st) = &s.stream_settings {
            o.insert("streamSettings".into(), stream(st, true)?);
        }
        if let Some(p) = s.proxy_settings.filter(|p| !p.tag.is_empty()) {
            o.insert("proxySettings".into(), json!({"tag": p.tag}));
        }
        if let Some(m) = s.multiplex_settings.filter(|m| m.enabled) {
            let mut mux = json!({"enabled": true, "concurrency": m.concurrency, "xudpConcurrency": m.xudp_concurrency});
            if !m.xudp_proxy_udp443.is_empty() {
                mux["xudpProxyUDP443"] = json!(m.xudp_proxy_udp443);
            }
            o.insert("mux".into(), mux);
        }
    }
    Ok(Value::Object(o))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receiver_bytes(stream_field: u32) -> Vec<u8> {
        // port_list {range {from: 1000, to: 1000}}, then a StreamConfig{protocol_name: "tcp",
        // security_type: "x"} under `stream_field`.
        let mut b = pb::PortList {
            range: vec![pb::PortRange {
                from: 1000,
                to: 1000,
            }],
        };
        let mut out = Vec::new();
        prost::encoding::message::encode(1, &b, &mut out);
        let sc = pb::StreamConfig {
            protocol_name: "tcp".into(),
            security_type: "x".into(),
            ..Default::default()
        };
        prost::encoding::message::encode(stream_field, &sc, &mut out);
        b.range.clear();
        out
    }

    #[test]
    fn both_receiver_layouts_keep_their_stream_settings() {
        for field in [3, 4] {
            let r = receiver(&receiver_bytes(field)).unwrap();
            assert_eq!(r.port_list.unwrap().range[0].from, 1000);
            assert_eq!(
                r.stream_settings
                    .expect("stream settings kept")
                    .security_type,
                "x",
                "layout with stream settings in field {field}"
            );
        }
        assert!(receiver(&[0xff, 0xff]).is_err());
    }

    #[test]
    fn both_vless_inbound_layouts_keep_decryption_and_fallbacks() {
        let fb = pb::Fallback {
            dest: "8080".into(),
            ..Default::default()
        };
        let new = pb::FallbackServerConfig {
            users: vec![],
            fallbacks: vec![fb.clone()],
            decryption: "none".into(),
        };
        let old = pb::VlessInboundConfigOld {
            users: vec![],
            decryption: "none".into(),
            fallbacks: vec![fb.clone()],
        };
        let old_no_decryption = pb::VlessInboundConfigOld {
            decryption: String::new(),
            ..old.clone()
        };
        for (what, bytes, dec) in [
            ("new", new.encode_to_vec(), "none"),
            ("old", old.encode_to_vec(), "none"),
            (
                "old without decryption",
                old_no_decryption.encode_to_vec(),
                "",
            ),
        ] {
            let c = vless_inbound(&bytes).unwrap();
            assert_eq!(c.decryption, dec, "{what}");
            assert_eq!(c.fallbacks, vec![fb.clone()], "{what}");
        }
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
