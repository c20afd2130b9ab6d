//! The base configs panels write before they add users through the API: the shape each panel
//! ships today (our own copy of it, ports made free), checked by `ferry test` and by Xray's
//! `run -test` on the same file, then served by `ferry run`.
//!
//! Left out of the shapes, as the features they need land with their own issues: routing rules
//! on geodata (`geoip:private` in `routing`, which needs geoip.dat) and on sniffing
//! (`"protocol": ["bittorrent"]`).

mod common;
use common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Writes `cfg` to a file and asserts that `ferry test` and `xray run -test` both accept it.
fn both_accept(name: &str, cfg: &str) {
    let dir = tempdir::Dir::new(name);
    let path = dir.path().join("config.json");
    std::fs::write(&path, cfg).unwrap();
    let path = path.to_str().unwrap();
    for (bin, args) in [
        (
            std::path::PathBuf::from(env!("CARGO_BIN_EXE_ferry")),
            vec!["test", "-c", path],
        ),
        (peer("xray"), vec!["run", "-test", "-c", path]),
    ] {
        let o = Command::new(&bin)
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{} refused the {name} config:\n{}{}\n{cfg}",
            bin.display(),
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

/// One HTTP GET; returns the whole response.
fn get(port: u16, path: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// 3x-ui (internal/web/service/config.json): the API reached through a `tunnel` inbound with
/// only `rewriteAddress`, `metrics` with a listen address and a tag, `log.maskAddress` and
/// `log.dnsLog`, freedom `finalRules` blocking `geoip:private`, stats on per user and inbound.
#[test]
fn three_x_ui_default() {
    let (api, metrics) = (free_port(), free_port());
    let cfg = format!(
        r#"{{
  "api": {{"services": ["HandlerService", "LoggerService", "StatsService", "RoutingService"], "tag": "api"}},
  "inbounds": [{{"listen": "127.0.0.1", "port": {api}, "protocol": "tunnel",
                 "settings": {{"rewriteAddress": "127.0.0.1"}}, "tag": "api"}}],
  "log": {{"access": "none", "dnsLog": false, "error": "", "loglevel": "warning", "maskAddress": ""}},
  "metrics": {{"listen": "127.0.0.1:{metrics}", "tag": "metrics_out"}},
  "outbounds": [
    {{"protocol": "freedom", "tag": "direct",
      "settings": {{"domainStrategy": "AsIs",
                    "finalRules": [{{"action": "block", "ip": ["geoip:private"]}}, {{"action": "allow"}}]}}}},
    {{"protocol": "blackhole", "settings": {{}}, "tag": "blocked"}}
  ],
  "policy": {{
    "levels": {{"0": {{"statsUserDownlink": true, "statsUserUplink": true}}}},
    "system": {{"statsInboundDownlink": true, "statsInboundUplink": true,
                "statsOutboundDownlink": false, "statsOutboundUplink": false}}
  }},
  "routing": {{"domainStrategy": "AsIs",
               "rules": [{{"inboundTag": ["api"], "outboundTag": "api", "type": "field"}}]}},
  "stats": {{}}
}}"#
    );
    both_accept("3x-ui", &cfg);
    let f = ferry(&cfg, &[api, metrics]);
    let vars = get(metrics, "/debug/vars");
    assert!(vars.starts_with("HTTP/1.1 200"), "{vars}\n{}", f.output());
    assert!(vars.contains("\"stats\""), "{vars}");
    // The API inbound is up; its tag refuses until the API lands, and Ferry keeps running.
    let mut s = TcpStream::connect(("127.0.0.1", api)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
    let _ = s.read(&mut [0u8; 16]);
    assert!(get(metrics, "/metrics").starts_with("HTTP/1.1 200"));
}

/// Marzban's single-port default (xray_config.json): one Shadowsocks inbound with
/// `"clients": []` and no method, users come later through the API, each with its own method.
#[test]
fn marzban_single_port_default() {
    let port = free_port();
    let cfg = format!(
        r#"{{
  "log": {{"loglevel": "warning"}},
  "routing": {{"rules": []}},
  "inbounds": [{{"tag": "Shadowsocks TCP", "listen": "127.0.0.1", "port": {port},
                 "protocol": "shadowsocks", "settings": {{"clients": [], "network": "tcp,udp"}}}}],
  "outbounds": [{{"protocol": "freedom", "tag": "DIRECT"}}, {{"protocol": "blackhole", "tag": "BLOCK"}}]
}}"#
    );
    both_accept("marzban", &cfg);
    let f = ferry(&cfg, &[port]);
    // Nobody is a user yet: a client is drained, not answered, and the server keeps serving.
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    s.write_all(&[0x42; 64]).unwrap();
    let r = s.read(&mut [0u8; 16]);
    assert!(
        r.is_err(),
        "answered or closed at once: {r:?}\n{}",
        f.output()
    );
    wait_listening(port, &f);
}

/// Metrics the way Xray's docs set them up without `metrics.listen`: a tunnel inbound routed to
/// the outbound `metrics.tag` names.
#[test]
fn metrics_through_a_routed_inbound() {
    let port = free_port();
    let cfg = format!(
        r#"{{
  "stats": {{}},
  "metrics": {{"tag": "metrics_out"}},
  "inbounds": [{{"tag": "metrics_in", "listen": "127.0.0.1", "port": {port}, "protocol": "tunnel",
                 "settings": {{"rewriteAddress": "127.0.0.1", "rewritePort": 11111}}}}],
  "outbounds": [{{"protocol": "freedom", "tag": "direct"}}],
  "routing": {{"rules": [{{"inboundTag": ["metrics_in"], "outboundTag": "metrics_out"}}]}}
}}"#
    );
    both_accept("metrics", &cfg);
    let f = ferry(&cfg, &[port]);
    let vars = get(port, "/debug/vars");
    assert!(vars.starts_with("HTTP/1.1 200"), "{vars}\n{}", f.output());
    assert!(vars.contains("\"stats\""), "{vars}");
    let prom = get(port, "/metrics");
    assert!(prom.contains("ferry_traffic_bytes_total"), "{prom}");
}

/// The config Marzban starts the core with (app/xray/config.py adds to the base): the API
/// behind a `dokodemo-door` inbound with only `address` (so the port is the one it listens
/// on), stats with per-user and per-outbound counters, and the API routing rule first.
#[test]
fn marzban_as_it_starts_the_core() {
    let (api, port) = (free_port(), free_port());
    let cfg = format!(
        r#"{{
  "log": {{"loglevel": "warning"}},
  "routing": {{"rules": [{{"inboundTag": ["API_INBOUND"], "outboundTag": "API", "type": "field"}}]}},
  "inbounds": [
    {{"listen": "127.0.0.1", "port": {api}, "protocol": "dokodemo-door",
      "settings": {{"address": "127.0.0.1"}}, "tag": "API_INBOUND"}},
    {{"tag": "Shadowsocks TCP", "listen": "127.0.0.1", "port": {port}, "protocol": "shadowsocks",
      "settings": {{"clients": [{{"method": "chacha20-ietf-poly1305", "password": "p1", "email": "1.alice"}}],
                    "network": "tcp,udp"}}}}],
  "outbounds": [{{"protocol": "freedom", "tag": "DIRECT"}}, {{"protocol": "blackhole", "tag": "BLOCK"}}],
  "api": {{"services": ["HandlerService", "StatsService", "LoggerService"], "tag": "API"}},
  "stats": {{}},
  "policy": {{
    "levels": {{"0": {{"statsUserUplink": true, "statsUserDownlink": true}}}},
    "system": {{"statsInboundDownlink": false, "statsInboundUplink": false,
                "statsOutboundDownlink": true, "statsOutboundUplink": true}}
  }}
}}"#
    );
    both_accept("marzban-core", &cfg);
    let _f = ferry(&cfg, &[api, port]);
}

/// Marzban's fallback variant (xray-fallback.json): one Trojan port that only falls back, by
/// path to WebSocket inbounds (VLESS, VMess, Trojan) and by ALPN or default to raw inbounds, all
/// on abstract sockets behind PROXY v2, every user list empty, sniffing on. Left out as above:
/// the `dns` outbound and the geoip/bittorrent rules.
#[test]
fn marzban_fallback_variant() {
    let (port, ss) = (free_port(), free_port());
    let tag = format!("mzb{}", std::process::id());
    let sniff = r#""sniffing": {"enabled": true, "destOverride": ["http", "tls"]}"#;
    let ws = |name: &str, proto: &str, path: &str, extra: &str| {
        format!(
            r#"{{"tag": "{name}", "listen": "@{tag}-{name}", "protocol": "{proto}",
                "settings": {{"clients": []{extra}}},
                "streamSettings": {{"network": "ws", "security": "none",
                  "wsSettings": {{"acceptProxyProtocol": true, "path": "{path}"}}}}, {sniff}}}"#
        )
    };
    let raw = |name: &str, proto: &str, extra: &str| {
        format!(
            r#"{{"tag": "{name}", "listen": "@{tag}-{name}", "protocol": "{proto}",
                "settings": {{"clients": []{extra}}},
                "streamSettings": {{"network": "tcp", "security": "none",
                  "tcpSettings": {{"acceptProxyProtocol": true}}}}, {sniff}}}"#
        )
    };
    let cfg = format!(
        r#"{{
  "log": {{"loglevel": "info"}},
  "inbounds": [
    {{"tag": "TROJAN_FALLBACK_INBOUND", "listen": "127.0.0.1", "port": {port}, "protocol": "trojan",
      "settings": {{"clients": [], "decryption": "none", "fallbacks": [
        {{"path": "/lw", "dest": "@{tag}-vlws", "xver": 2}},
        {{"path": "/mw", "dest": "@{tag}-vmws", "xver": 2}},
        {{"path": "/tw", "dest": "@{tag}-trws", "xver": 2}},
        {{"alpn": "h2", "dest": "@{tag}-trtcp", "xver": 2}},
        {{"dest": "@{tag}-vltcp", "xver": 2}}]}},
      "streamSettings": {{"network": "tcp"}}, {sniff}}},
    {}, {}, {}, {}, {},
    {{"tag": "VMESS_TCP_INBOUND", "listen": "@{tag}-vmtcp", "protocol": "vmess",
      "settings": {{"clients": []}},
      "streamSettings": {{"network": "tcp", "security": "none", "tcpSettings": {{"acceptProxyProtocol": true}}}}, {sniff}}},
    {{"listen": "127.0.0.1", "port": {ss}, "protocol": "shadowsocks", "settings": {{"clients": []}},
      "network": "tcp,udp", "tag": "SHADOWSOCKS_INBOUND"}}
  ],
  "outbounds": [{{"protocol": "freedom", "settings": {{}}}}, {{"protocol": "blackhole", "tag": "blackhole"}}],
  "routing": {{"domainStrategy": "AsIs", "settings": {{"rules": []}}}}
}}"#,
        ws("vlws", "vless", "/lw", r#", "decryption": "none""#),
        ws("vmws", "vmess", "/mw", ""),
        ws("trws", "trojan", "/tw", ""),
        raw("trtcp", "trojan", ""),
        raw(
            "vltcp",
            "vless",
            &format!(
                r#", "decryption": "none", "fallbacks": [{{"dest": "@{tag}-vmtcp", "xver": 2}}]"#
            )
        ),
    );
    // The tags of the shape, as Marzban names them.
    let cfg = cfg
        .replace("\"tag\": \"vlws\"", "\"tag\": \"VLESS_WS_INBOUND\"")
        .replace("\"tag\": \"vmws\"", "\"tag\": \"VMESS_WS_INBOUND\"")
        .replace("\"tag\": \"trws\"", "\"tag\": \"TROJAN_WS_INBOUND\"")
        .replace("\"tag\": \"trtcp\"", "\"tag\": \"TROJAN_TCP_H2_INBOUND\"")
        .replace("\"tag\": \"vltcp\"", "\"tag\": \"VLESS_TCP_INBOUND\"");
    both_accept("marzban-fallback", &cfg);
    let f = ferry(&cfg, &[port, ss]);
    // Nobody is a user yet: a GET for /lw goes through the Trojan port's path fallback to the
    // VLESS ws inbound, which answers it as Xray's does (not an upgrade: 400); another path
    // reaches the VLESS raw inbound, which has nothing to say to HTTP.
    let r = get(port, "/lw");
    assert!(r.starts_with("HTTP/1.1 400 "), "{r:?}\n{}", f.output());
    let out = f.output();
    assert!(out.contains("to fallback @"), "{out}");
}
