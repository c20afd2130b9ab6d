//! Stream settings from a panel (`StreamConfig`) as JSON `streamSettings`: the transport
//! (raw TCP and its HTTP header, WebSocket, HTTPUpgrade, gRPC, XHTTP), its security
//! ([`super::security`]) and socket options.

use serde_json::{json, Map, Value};

use super::security;
use super::Error;
use crate::pb;
use crate::proxy::api::{address, parse};

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
pub fn stream(s: &pb::StreamConfig, outbound: bool) -> Result<Value, Error> {
    let mut o = Map::new();
    let net = network(s)?;
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
        transport(&mut o, net, ts, outbound)?;
    }
    security::security(&mut o, s, outbound)?;
    if let Some(so) = &s.socket_settings {
        if let Some(j) = sockopt(so)? {
            o.insert("sockopt".into(), j);
        }
    }
    Ok(Value::Object(o))
}

/// The JSON `network` of a stream config, refused when Ferry has no such transport.
fn network(s: &pb::StreamConfig) -> Result<&'static str, Error> {
    let net = if !s.protocol_name.is_empty() {
        s.protocol_name.clone()
    } else if s.protocol == 0 {
        "tcp".into()
    } else {
        format!("transport #{}", s.protocol)
    };
    Ok(match net.as_str() {
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
    })
}

/// The settings of transport `net` (`rawSettings`, `wsSettings`, ...) put in `o`.
fn transport(
    o: &mut Map<String, Value>,
    net: &str,
    ts: &pb::TypedMessage,
    outbound: bool,
) -> Result<(), Error> {
    match net {
        "raw" => {
            if let Some(raw) = raw(ts)? {
                o.insert("rawSettings".into(), raw);
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
    Ok(())
}

/// `rawSettings` from a TCP `Config` (none when it sets nothing).
fn raw(ts: &pb::TypedMessage) -> Result<Option<Value>, Error> {
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
    Ok((!raw.is_empty()).then_some(Value::Object(raw)))
}

/// `sockopt` from socket settings (none when they set nothing).
fn sockopt(so: &pb::SocketConfig) -> Result<Option<Value>, Error> {
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
    if so.tfo != 0 {
        j.insert("tcpFastOpen".into(), json!(so.tfo));
    }
    if so.v6only {
        j.insert("v6only".into(), json!(true));
    }
    // Xray's DomainStrategy numbers, in its JSON names.
    const STRATEGIES: [&str; 11] = [
        "AsIs",
        "UseIP",
        "UseIPv4",
        "UseIPv6",
        "UseIPv4v6",
        "UseIPv6v4",
        "ForceIP",
        "ForceIPv4",
        "ForceIPv6",
        "ForceIPv4v6",
        "ForceIPv6v4",
    ];
    match usize::try_from(so.domain_strategy)
        .ok()
        .and_then(|i| STRATEGIES.get(i))
    {
        Some(&"AsIs") => {}
        Some(s) => {
            j.insert("domainStrategy".into(), json!(s));
        }
        None => {
            return Err(format!(
                "transport/internet: unknown domain strategy {}",
                so.domain_strategy
            ))
        }
    }
    // Xray's TProxyMode: Off = 0, TProxy = 1, Redirect = 2.
    match so.tproxy {
        0 => {}
        1 => {
            j.insert("tproxy".into(), json!("tproxy"));
        }
        2 => {
            j.insert("tproxy".into(), json!("redirect"));
        }
        n => return Err(format!("transport/internet: unknown tproxy mode {n}")),
    }
    Ok((!j.is_empty()).then_some(Value::Object(j)))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transparent_socket_settings_from_a_panel() {
        let so = |tproxy| pb::SocketConfig {
            tproxy,
            mark: 255,
            ..Default::default()
        };
        // Xray's TProxyMode numbers: 1 is tproxy, 2 is redirect.
        let j = sockopt(&so(1)).unwrap().unwrap();
        assert_eq!(
            (j["tproxy"].as_str(), j["mark"].as_i64()),
            (Some("tproxy"), Some(255))
        );
        assert_eq!(sockopt(&so(2)).unwrap().unwrap()["tproxy"], "redirect");
        assert!(sockopt(&so(0)).unwrap().unwrap().get("tproxy").is_none());
        assert!(sockopt(&so(7)).is_err());
        let j = sockopt(&pb::SocketConfig {
            tfo: 256,
            v6only: true,
            domain_strategy: 7,
            ..Default::default()
        })
        .unwrap()
        .unwrap();
        assert_eq!(j["tcpFastOpen"], 256);
        assert_eq!(j["v6only"], true);
        assert_eq!(j["domainStrategy"], "ForceIPv4");
    }

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
}
