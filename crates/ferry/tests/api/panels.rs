//! The base configs panels write before they add users through the API: the shape each panel
//! ships today (our own copy of it, ports made free), checked by `ferry test` and by Xray's
//! `run -test` on the same file, then served by `ferry run`.
//!
//! 3x-ui's default routes `geoip:private` and `"protocol": ["bittorrent"]` to its blackhole:
//! both read a geoip.dat written by the test (XRAY_LOCATION_ASSET). So do Marzban's documented
//! blocking rules, which also send port 53 to its `dns` outbound.
//!
//! The REALITY inbounds the panels write (the default of most panel installs: VLESS + XTLS
//! Vision + REALITY, also over gRPC, and Trojan + REALITY) are served too: an Xray v26.3.27
//! client, keyed with the public half that `ferry x25519 -i` (= `xray x25519 -i`) derives from
//! the shape's `privateKey`, carries a few MB byte-exact to an echo server here, and a prober
//! (curl) meets the camouflage target, a small nginx HTTPS site started by the test.
//!
//! The XHTTP inbounds the panels write (3x-ui's form today and in v2.x, Marzban's documented
//! inbounds, Hiddify's `v10-*-xhttp` and REALITY inbounds behind HAProxy, Remnawave's profile
//! as its node gets it) are served the same way: Xray clients in the inbound's mode (and, for
//! `auto`, in the modes an `auto` server serves), each checked by its own log line to dial the
//! mode and HTTP version meant.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::common;
use crate::route_helpers;
use common::*;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Writes `cfg` to a file and asserts that `ferry test` and `xray run -test` both accept it;
/// returns what `ferry test` warned.
fn both_accept(name: &str, cfg: &str) -> String {
    both_accept_with(name, cfg, None)
}

/// [`both_accept`] with the geodata files in `assets` (XRAY_LOCATION_ASSET, for both).
fn both_accept_with(name: &str, cfg: &str, assets: Option<&std::path::Path>) -> String {
    let dir = tempdir::Dir::new(name);
    let path = dir.path().join("config.json");
    std::fs::write(&path, cfg).unwrap();
    let path = path.to_str().unwrap();
    let mut warnings = String::new();
    for (bin, args) in [
        (
            std::path::PathBuf::from(env!("CARGO_BIN_EXE_ferry")),
            vec!["test", "-c", path],
        ),
        (peer("xray"), vec!["run", "-test", "-c", path]),
    ] {
        let ours = args[0] == "test";
        let mut cmd = Command::new(&bin);
        if let Some(a) = assets {
            cmd.env("XRAY_LOCATION_ASSET", a);
        }
        let o = cmd.args(&args).stdin(Stdio::null()).output().unwrap();
        assert!(
            o.status.success(),
            "{} refused the {name} config:\n{}{}\n{cfg}",
            bin.display(),
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        if ours {
            warnings = String::from_utf8_lossy(&o.stderr).into_owned();
        }
    }
    warnings
}

/// Every field a panel writes in `realitySettings` is one Ferry knows (read, or ignored as
/// Xray ignores it): `ferry test` warns of none there.
fn reality_fields_known(warnings: &str) {
    let odd: Vec<&str> = warnings
        .lines()
        .filter(|l| l.contains("realitySettings"))
        .collect();
    assert!(odd.is_empty(), "ferry test warned: {odd:#?}");
}

/// One HTTP GET; returns the whole response.
fn get(port: u16, path: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    // One write: the server decides on its first read, as Xray's fallbacks do, and `write!`
    // may send the formatted pieces as separate segments ("GET " alone has no path).
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// 3x-ui (internal/web/service/config.json): the API reached through a `tunnel` inbound with
/// only `rewriteAddress`, `metrics` with a listen address and a tag, `log.maskAddress` and
/// `log.dnsLog`, freedom `finalRules` blocking `geoip:private`, stats on per user and inbound,
/// and routing rules sending `geoip:private` and BitTorrent to the blackhole.
#[test]
fn three_x_ui_default() {
    let assets = tempdir::Dir::new("3x-ui-assets");
    route_helpers::write_geodata(assets.path());
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
               "rules": [{{"inboundTag": ["api"], "outboundTag": "api", "type": "field"}},
                         {{"ip": ["geoip:private"], "outboundTag": "blocked", "type": "field"}},
                         {{"outboundTag": "blocked", "protocol": ["bittorrent"], "type": "field"}}]}},
  "stats": {{}}
}}"#
    );
    let warned = both_accept_with("3x-ui", &cfg, Some(assets.path()));
    assert!(!warned.contains("geoip"), "{warned}");
    let f = route_helpers::ferry_with_assets(&cfg, assets.path(), &[api, metrics]);
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
  "outbounds": [{{"protocol": "freedom", "tag": "DIRECT","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}, {{"protocol": "blackhole", "tag": "BLOCK"}}]
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
  "outbounds": [{{"protocol": "freedom", "tag": "direct","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}],
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
  "outbounds": [{{"protocol": "freedom", "tag": "DIRECT","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}, {{"protocol": "blackhole", "tag": "BLOCK"}}],
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
/// on abstract sockets behind PROXY v2, every user list empty, sniffing on; with the routing
/// Marzban's docs add to it ("blocking rules"): private addresses and BitTorrent to the
/// blackhole, DNS (port 53, TCP and UDP) to a `dns` outbound, `DNS-Internal`.
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
  "outbounds": [{{"protocol": "freedom", "settings": {{"finalRules": [{{"action": "allow", "ip": ["127.0.0.0/8", "::1"]}}]}}}}, {{"protocol": "blackhole", "tag": "blackhole"}},
                {{"protocol": "dns", "tag": "DNS-Internal"}}],
  "routing": {{"domainStrategy": "IPIfNonMatch", "rules": [
    {{"type": "field", "outboundTag": "blackhole", "ip": ["geoip:private"]}},
    {{"type": "field", "port": 53, "network": "tcp,udp", "outboundTag": "DNS-Internal"}},
    {{"type": "field", "outboundTag": "blackhole", "protocol": ["bittorrent"]}}]}}
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
    let assets = tempdir::Dir::new("marzban-assets");
    route_helpers::write_geodata(assets.path());
    let warned = both_accept_with("marzban-fallback", &cfg, Some(assets.path()));
    assert!(!warned.contains("DNS-Internal"), "{warned}");
    let f = route_helpers::ferry_with_assets(&cfg, assets.path(), &[port, ss]);
    // Nobody is a user yet: a GET for /lw goes through the Trojan port's path fallback to the
    // VLESS ws inbound, which answers it as Xray's does (not an upgrade: 400); another path
    // reaches the VLESS raw inbound, which has nothing to say to HTTP.
    let r = get(port, "/lw");
    assert!(r.starts_with("HTTP/1.1 400 "), "{r:?}\n{}", f.output());
    let out = f.output();
    assert!(out.contains("to fallback @"), "{out}");
}

// ---------------------------------------------------------------------------------------
// REALITY as the panels write it

const ID: &str = "5c6f2a1e-9b0d-4e3f-8a7c-2d1b0e9f8a7c";
const TROJAN_PW: &str = "k3J9xQ2mZ7";
/// The name the target's certificate and the inbounds' `serverNames` carry.
const SNI: &str = "reality.test";
const PAGE: &str = "panel reality target";
/// What each client carries through: "a few MB".
const BYTES: usize = 4 << 20;

/// The camouflage target: nginx with HTTPS (TLS 1.2 and 1.3, h2) for `reality.test` on a
/// loopback port, serving one small page.
struct Site {
    port: u16,
    proc: Proc,
    /// The certificate and key (removed after nginx ends).
    _dir: tempdir::Dir,
}

fn site() -> Site {
    let dir = tempdir::Dir::new("reality-site");
    let d = dir.path();
    let g = ferry::transport::tls::generate_self_signed(&[SNI.to_string()], 2).unwrap();
    std::fs::write(d.join("cert.pem"), &g.cert_pem).unwrap();
    std::fs::write(d.join("key.pem"), &g.key_pem).unwrap();
    let port = free_port();
    let body = tls_site(port, SNI, &d.join("cert.pem"), &d.join("key.pem"), PAGE);
    let proc = nginx(d, Nginx::Http(&body), &[port]);
    Site {
        port,
        proc,
        _dir: dir,
    }
}

/// The clients' `password` for a `privateKey`: what `ferry x25519 -i` prints, which must be
/// what `xray x25519 -i` prints.
fn public_key(private: &str) -> String {
    let run = |bin: std::path::PathBuf| {
        let o = Command::new(&bin)
            .args(["x25519", "-i", private])
            .output()
            .unwrap();
        assert!(o.status.success(), "{} x25519 -i {private}", bin.display());
        String::from_utf8(o.stdout).unwrap()
    };
    let ours = run(env!("CARGO_BIN_EXE_ferry").into());
    assert_eq!(
        ours,
        run(peer("xray")),
        "ferry and xray derive different keys"
    );
    ours.lines()
        .find_map(|l| l.strip_prefix("Password (PublicKey): "))
        .unwrap_or_else(|| panic!("no public key in {ours:?}"))
        .trim()
        .to_string()
}

/// An Xray client: a dokodemo-door entry on a free port leading to `dest` through
/// `outbound`; returns it once the entry listens.
fn xray_client(dest: u16, outbound: &str) -> (Proc, u16) {
    let entry = free_port();
    let cfg = format!(
        r#"{{"log": {{"loglevel": "debug"}},
  "inbounds": [{{"listen": "127.0.0.1", "port": {entry}, "protocol": "dokodemo-door",
                 "settings": {{"address": "127.0.0.1", "port": {dest}, "network": "tcp"}}}}],
  "outbounds": [{outbound}]}}"#
    );
    let p = spawn_with_config(&peer("xray"), "xray", &cfg, &["run", "-c", "{config}"]);
    wait_listening(entry, &p);
    (p, entry)
}

/// The client side of a panel's share link: `protocol` VLESS (with `flow`) or Trojan to
/// 127.0.0.1:`port` over `network` (Xray's JSON members) and REALITY with `sni`, `pbk`, `sid`.
fn xray_outbound(protocol: &str, flow: &str, port: u16, network: &str, reality: &str) -> String {
    let settings = match protocol {
        "trojan" => format!(
            r#"{{"servers": [{{"address": "127.0.0.1", "port": {port}, "password": "{TROJAN_PW}"}}]}}"#
        ),
        _ => format!(
            r#"{{"vnext": [{{"address": "127.0.0.1", "port": {port},
                 "users": [{{"id": "{ID}", "encryption": "none", "flow": "{flow}"}}]}}]}}"#
        ),
    };
    format!(
        r#"{{"protocol": "{protocol}", "settings": {settings},
  "streamSettings": {{{network}, "security": "reality", "realitySettings": {reality}}}}}"#
    )
}

/// `realitySettings` of a client: `sni` ("" sends none: the address is an IP), fingerprint
/// chrome, spiderX "/".
fn client_reality(sni: &str, pbk: &str, sid: &str) -> String {
    format!(
        r#"{{"serverName": "{sni}", "fingerprint": "chrome", "password": "{pbk}", "shortId": "{sid}", "spiderX": "/"}}"#
    )
}

/// Through `entry`: "hello" there and back first (Xray's Trojan client fails on a first
/// payload over ~8 KiB), then `BYTES` echoed byte-exact.
fn carry(what: &str, entry: u16, logs: &dyn Fn() -> String) {
    let t = Instant::now();
    let r = std::panic::catch_unwind(|| {
        let mut s = TcpStream::connect(("127.0.0.1", entry)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.write_all(b"hello").unwrap();
        let mut b = [0u8; 5];
        s.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"hello");
        let data = pattern(BYTES, entry as u64);
        echo_through(s, &data) == data
    });
    assert!(
        matches!(r, Ok(true)),
        "{what}: the transfer failed or differs ({r:?})\n{}",
        logs()
    );
    eprintln!("{what}: {} MB echoed in {:?}", BYTES >> 20, t.elapsed());
}

/// A prober (curl, no REALITY key) at `port` gets the target's own page.
fn probe_meets_the_site(what: &str, port: u16, logs: &dyn Fn() -> String) {
    let o = Command::new(peer("curl"))
        .args([
            "-sk",
            "--max-time",
            "10",
            "--resolve",
            &format!("{SNI}:{port}:127.0.0.1"),
            &format!("https://{SNI}:{port}/"),
        ])
        .output()
        .unwrap();
    let body = String::from_utf8_lossy(&o.stdout);
    assert!(
        body.trim() == PAGE,
        "{what}: a prober got {body:?} ({})\n{}",
        String::from_utf8_lossy(&o.stderr),
        logs()
    );
}

fn all_logs(ps: &[&Proc]) -> String {
    ps.iter().map(|p| p.output()).collect::<Vec<_>>().join("\n")
}

/// 3x-ui's VLESS + Vision + REALITY inbound as its inbound form saves it (and as its live
/// path, `GenXrayInboundConfig` through the HandlerService, hands it to the core): the client
/// half kept in a nested `realitySettings.settings` object, `maxTimediff` so spelled, every
/// unused string empty, `target`, clients with the panel's own fields (limitIp, totalGB,
/// subId, ...), VLESS `encryption` beside `decryption`, sniffing with `ipsExcluded` and
/// `domainsExcluded`; in 3x-ui's base config (API tunnel, metrics, freedom `finalRules`, which
/// here let loopback through first so the echo server can be reached).
#[test]
fn three_x_ui_vless_vision_reality() {
    const PRIVATE: &str = "YGpxf3mlhKbKTShxFej-PWScuVyBo-kiKVuVlS6fh3k";
    let pbk = public_key(PRIVATE);
    let site = site();
    let echo = echo_server();
    let (api, metrics, port) = (free_port(), free_port(), free_port());
    let cfg = format!(
        r#"{{
  "api": {{"services": ["HandlerService", "LoggerService", "StatsService", "RoutingService"], "tag": "api"}},
  "inbounds": [
    {{"listen": "127.0.0.1", "port": {api}, "protocol": "tunnel", "settings": {{"rewriteAddress": "127.0.0.1"}}, "tag": "api"}},
    {{"listen": "127.0.0.1", "port": {port}, "protocol": "vless", "tag": "inbound-{port}",
      "settings": {{
        "clients": [{{"id": "{ID}", "flow": "xtls-rprx-vision", "email": "k2v8d1x0",
                      "limitIp": 0, "totalGB": 0, "expiryTime": 0, "enable": true, "tgId": 0,
                      "subId": "q9w3e7r1t5y2u8i4", "comment": "", "reset": 0}}],
        "decryption": "none", "encryption": "none", "fallbacks": []}},
      "streamSettings": {{
        "network": "tcp",
        "tcpSettings": {{"acceptProxyProtocol": false, "header": {{"type": "none"}}}},
        "security": "reality",
        "realitySettings": {{
          "show": false, "xver": 0, "target": "127.0.0.1:{site}",
          "serverNames": ["{SNI}", "www.{SNI}"],
          "privateKey": "{PRIVATE}",
          "minClientVer": "", "maxClientVer": "", "maxTimediff": 0,
          "shortIds": ["a3f1", "6ba85179e30d4fc2", "b8c2"],
          "mldsa65Seed": "",
          "settings": {{"publicKey": "{pbk}", "fingerprint": "chrome", "serverName": "",
                        "spiderX": "/", "mldsa65Verify": ""}}}}}},
      "sniffing": {{"enabled": true, "destOverride": ["http", "tls", "quic", "fakedns"],
                    "metadataOnly": false, "routeOnly": false, "ipsExcluded": [], "domainsExcluded": []}}}}
  ],
  "log": {{"access": "none", "dnsLog": false, "error": "", "loglevel": "warning", "maskAddress": ""}},
  "metrics": {{"listen": "127.0.0.1:{metrics}", "tag": "metrics_out"}},
  "outbounds": [
    {{"protocol": "freedom", "tag": "direct",
      "settings": {{"domainStrategy": "AsIs",
                    "finalRules": [{{"action": "allow", "ip": ["127.0.0.0/8"]}},
                                   {{"action": "block", "ip": ["geoip:private"]}}, {{"action": "allow"}}]}}}},
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
}}"#,
        site = site.port
    );
    reality_fields_known(&both_accept("3x-ui-reality", &cfg));
    let f = ferry(&cfg, &[api, metrics, port]);
    let out = xray_outbound(
        "vless",
        "xtls-rprx-vision",
        port,
        r#""network": "tcp""#,
        &client_reality(SNI, &pbk, "6ba85179e30d4fc2"),
    );
    let (c, entry) = xray_client(echo.port(), &out);
    let logs = || all_logs(&[&f, &c, &site.proc]);
    carry("3x-ui VLESS Vision REALITY", entry, &logs);
    probe_meets_the_site("3x-ui VLESS Vision REALITY", port, &logs);
}

/// 3x-ui's VLESS over gRPC + REALITY (grpcSettings as its form writes them: serviceName,
/// authority, multiMode) and Trojan + REALITY, in one config; clients as the panel writes
/// them (VLESS flow "" over gRPC).
#[test]
fn three_x_ui_grpc_and_trojan_reality() {
    const PRIVATE: &str = "WLtkUJFBs6izJqmPF5ZE22sanW2VqpUCkPSwv3mInFY";
    let pbk = public_key(PRIVATE);
    let site = site();
    let echo = echo_server();
    let (grpc, trojan) = (free_port(), free_port());
    let reality = |sids: &str| {
        format!(
            r#""security": "reality",
        "realitySettings": {{
          "show": false, "xver": 0, "target": "127.0.0.1:{site}",
          "serverNames": ["{SNI}"], "privateKey": "{PRIVATE}",
          "minClientVer": "", "maxClientVer": "", "maxTimediff": 0,
          "shortIds": [{sids}], "mldsa65Seed": "",
          "settings": {{"publicKey": "{pbk}", "fingerprint": "firefox", "serverName": "",
                        "spiderX": "/", "mldsa65Verify": ""}}}}"#,
            site = site.port
        )
    };
    let panel_fields = r#""limitIp": 0, "totalGB": 0, "expiryTime": 0, "enable": true, "tgId": 0, "comment": "", "reset": 0"#;
    let sniffing = r#""sniffing": {"enabled": false, "destOverride": ["http", "tls", "quic", "fakedns"], "metadataOnly": false, "routeOnly": false}"#;
    let cfg = format!(
        r#"{{
  "log": {{"access": "none", "error": "", "loglevel": "warning"}},
  "inbounds": [
    {{"listen": "127.0.0.1", "port": {grpc}, "protocol": "vless", "tag": "inbound-{grpc}",
      "settings": {{"clients": [{{"id": "{ID}", "flow": "", "email": "g7h2", "subId": "grpc0001", {panel_fields}}}],
                    "decryption": "none", "encryption": "none", "fallbacks": []}},
      "streamSettings": {{"network": "grpc",
        "grpcSettings": {{"serviceName": "GunService", "authority": "", "multiMode": false}},
        {}}}, {sniffing}}},
    {{"listen": "127.0.0.1", "port": {trojan}, "protocol": "trojan", "tag": "inbound-{trojan}",
      "settings": {{"clients": [{{"password": "{TROJAN_PW}", "email": "t5n1", "subId": "trj00001", {panel_fields}}}],
                    "fallbacks": []}},
      "streamSettings": {{"network": "tcp",
        "tcpSettings": {{"acceptProxyProtocol": false, "header": {{"type": "none"}}}},
        {}}}, {sniffing}}}
  ],
  "outbounds": [{{"protocol": "freedom", "tag": "direct", "settings": {{"domainStrategy": "AsIs", "finalRules": [{{"action": "allow", "ip": ["127.0.0.0/8", "::1"]}}]}}}},
                {{"protocol": "blackhole", "settings": {{}}, "tag": "blocked"}}]
}}"#,
        reality(r#""4e1c", "c0ffee""#),
        reality(r#""9f02d1""#),
    );
    reality_fields_known(&both_accept("3x-ui-reality-grpc-trojan", &cfg));
    let f = ferry(&cfg, &[grpc, trojan]);
    let grpc_out = xray_outbound(
        "vless",
        "",
        grpc,
        r#""network": "grpc", "grpcSettings": {"serviceName": "GunService"}"#,
        &client_reality(SNI, &pbk, "c0ffee"),
    );
    let trojan_out = xray_outbound(
        "trojan",
        "",
        trojan,
        r#""network": "tcp""#,
        &client_reality(SNI, &pbk, "9f02d1"),
    );
    let (cg, eg) = xray_client(echo.port(), &grpc_out);
    let (ct, et) = xray_client(echo.port(), &trojan_out);
    let logs = || all_logs(&[&f, &cg, &ct, &site.proc]);
    carry("3x-ui VLESS gRPC REALITY", eg, &logs);
    carry("3x-ui Trojan REALITY", et, &logs);
    probe_meets_the_site("3x-ui Trojan REALITY", trojan, &logs);
}

/// Marzban's REALITY inbounds (its docs' "VLESS TCP REALITY" and "VLESS GRPC REALITY"):
/// `dest`, `serverNames` with an empty name beside the real one, `SpiderX` so spelled on the
/// server, an empty `tcpSettings`; users put in by Marzban at start (`email` "id.username",
/// flow dropped where Vision cannot go); the API and stats Marzban adds. A client with no SNI
/// at all is served through the "" name.
#[test]
fn marzban_vless_reality() {
    const PRIVATE: &str = "sGtA6bBmaHbm_UYkqChnP6oW8bkbSvbAW0ErxWhymHU";
    let pbk = public_key(PRIVATE);
    let site = site();
    let echo = echo_server();
    let (api, tcp, grpc) = (free_port(), free_port(), free_port());
    let reality = |spider: &str| {
        format!(
            r#""security": "reality",
      "realitySettings": {{"show": false, "dest": "127.0.0.1:{site}", "xver": 0,
        "serverNames": ["{SNI}", ""], "privateKey": "{PRIVATE}",
        "SpiderX": "{spider}", "shortIds": ["ea1058117be12087"]}}"#,
            site = site.port
        )
    };
    let sniffing = r#""sniffing": {"enabled": true, "destOverride": ["http", "tls", "quic"]}"#;
    let cfg = format!(
        r#"{{
  "log": {{"loglevel": "warning"}},
  "routing": {{"rules": [{{"inboundTag": ["API_INBOUND"], "outboundTag": "API", "type": "field"}}]}},
  "inbounds": [
    {{"listen": "127.0.0.1", "port": {api}, "protocol": "dokodemo-door",
      "settings": {{"address": "127.0.0.1"}}, "tag": "API_INBOUND"}},
    {{"tag": "VLESS TCP REALITY", "listen": "127.0.0.1", "port": {tcp}, "protocol": "vless",
      "settings": {{"clients": [{{"email": "1.alice", "id": "{ID}", "flow": "xtls-rprx-vision"}}],
                    "decryption": "none"}},
      "streamSettings": {{"network": "tcp", "tcpSettings": {{}}, {}}}, {sniffing}}},
    {{"tag": "VLESS GRPC REALITY", "listen": "127.0.0.1", "port": {grpc}, "protocol": "vless",
      "settings": {{"clients": [{{"email": "1.alice", "id": "{ID}"}}], "decryption": "none"}},
      "streamSettings": {{"network": "grpc", "grpcSettings": {{"serviceName": "xyz"}}, {}}}, {sniffing}}}
  ],
  "outbounds": [{{"protocol": "freedom", "tag": "DIRECT","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}, {{"protocol": "blackhole", "tag": "BLOCK"}}],
  "api": {{"services": ["HandlerService", "StatsService", "LoggerService"], "tag": "API"}},
  "stats": {{}},
  "policy": {{
    "levels": {{"0": {{"statsUserUplink": true, "statsUserDownlink": true}}}},
    "system": {{"statsInboundDownlink": false, "statsInboundUplink": false,
                "statsOutboundDownlink": true, "statsOutboundUplink": true}}
  }}
}}"#,
        reality("/"),
        reality("/example"),
    );
    reality_fields_known(&both_accept("marzban-reality", &cfg));
    let f = ferry(&cfg, &[api, tcp, grpc]);
    let sid = "ea1058117be12087";
    let vision = |sni: &str| {
        xray_outbound(
            "vless",
            "xtls-rprx-vision",
            tcp,
            r#""network": "raw""#,
            &client_reality(sni, &pbk, sid),
        )
    };
    let grpc_out = xray_outbound(
        "vless",
        "",
        grpc,
        r#""network": "grpc", "grpcSettings": {"serviceName": "xyz"}"#,
        &client_reality(SNI, &pbk, sid),
    );
    let (c1, e1) = xray_client(echo.port(), &vision(SNI));
    let (c2, e2) = xray_client(echo.port(), &vision(""));
    let (c3, e3) = xray_client(echo.port(), &grpc_out);
    let logs = || all_logs(&[&f, &c1, &c2, &c3, &site.proc]);
    carry("Marzban VLESS TCP REALITY", e1, &logs);
    carry("Marzban VLESS TCP REALITY, no SNI", e2, &logs);
    carry("Marzban VLESS GRPC REALITY", e3, &logs);
    probe_meets_the_site("Marzban VLESS TCP REALITY", tcp, &logs);
}

/// A Remnawave config profile's REALITY inbound (its docs' shape: `raw`, `target`,
/// `shortIds: [""]`) as the node starts the core with it: the panel puts users in as
/// `{id, email}` and Vision as the inbound's own `settings.flow`; the node adds its API on a
/// `tunnel` inbound with no settings on an abstract socket, `api`, `stats` and `policy`.
#[test]
fn remnawave_vless_reality() {
    const PRIVATE: &str = "GCBf6nYAUkdcW623U1AJDSB4YI0N-6LscEUm_11Hb0A";
    let pbk = public_key(PRIVATE);
    let site = site();
    let echo = echo_server();
    let port = free_port();
    let sock = format!("@ferry-test-remnawave-api-{}-{port}", std::process::id());
    let cfg = format!(
        r#"{{
  "log": {{"loglevel": "info"}},
  "inbounds": [
    {{"tag": "REMNAWAVE_API_INBOUND", "listen": "{sock}", "protocol": "tunnel"}},
    {{"tag": "VLESS_TCP_REALITY", "port": {port}, "listen": "127.0.0.1", "protocol": "vless",
      "settings": {{"clients": [{{"id": "{ID}", "email": "1"}}], "decryption": "none",
                    "flow": "xtls-rprx-vision"}},
      "sniffing": {{"enabled": true, "destOverride": ["http", "tls", "quic"]}},
      "streamSettings": {{"network": "raw", "security": "reality",
        "realitySettings": {{"target": "127.0.0.1:{site}", "show": false, "xver": 0,
          "shortIds": [""], "privateKey": "{PRIVATE}", "serverNames": ["{SNI}"]}}}}}}
  ],
  "outbounds": [{{"protocol": "freedom", "tag": "DIRECT","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}, {{"protocol": "blackhole", "tag": "BLOCK"}}],
  "routing": {{"rules": [{{"inboundTag": ["REMNAWAVE_API_INBOUND"], "outboundTag": "REMNAWAVE_API"}}]}},
  "stats": {{}},
  "api": {{"services": ["HandlerService", "StatsService", "RoutingService"], "tag": "REMNAWAVE_API"}},
  "policy": {{
    "levels": {{"0": {{"statsUserUplink": true, "statsUserDownlink": true, "statsUserOnline": false}}}},
    "system": {{"statsInboundDownlink": true, "statsInboundUplink": true,
                "statsOutboundDownlink": true, "statsOutboundUplink": true}}
  }}
}}"#,
        site = site.port
    );
    reality_fields_known(&both_accept("remnawave-reality", &cfg));
    let f = ferry(&cfg, &[port]);
    let out = xray_outbound(
        "vless",
        "xtls-rprx-vision",
        port,
        r#""network": "raw""#,
        &client_reality(SNI, &pbk, ""),
    );
    let (c, entry) = xray_client(echo.port(), &out);
    let logs = || all_logs(&[&f, &c, &site.proc]);
    carry("Remnawave VLESS Vision REALITY", entry, &logs);
    probe_meets_the_site("Remnawave VLESS Vision REALITY", port, &logs);
}

/// HAProxy in front of Hiddify's core: takes TCP on a loopback port and relays each
/// connection to the abstract socket `@@name` (padded, as Xray pads it) after a PROXY v2
/// header.
fn haproxy(name: &str) -> u16 {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixStream};
    let mut padded = name.as_bytes().to_vec();
    padded.resize(107, 0);
    let addr = SocketAddr::from_abstract_name(&padded).unwrap();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(c) = c else { continue };
            // The core may still be starting: its abstract sockets come up beside its ports.
            let t = Instant::now();
            let u = loop {
                match UnixStream::connect_addr(&addr) {
                    Ok(u) => break Some(u),
                    Err(_) if t.elapsed() < Duration::from_secs(5) => {
                        std::thread::sleep(Duration::from_millis(20))
                    }
                    Err(_) => break None,
                }
            };
            let Some(u) = u else { continue };
            let (src, dst) = (c.peer_addr().unwrap(), c.local_addr().unwrap());
            let mut h = b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x0c".to_vec();
            for a in [src, dst] {
                let std::net::IpAddr::V4(ip) = a.ip() else {
                    unreachable!()
                };
                h.extend_from_slice(&ip.octets());
            }
            h.extend_from_slice(&src.port().to_be_bytes());
            h.extend_from_slice(&dst.port().to_be_bytes());
            let (mut u2, mut c2) = (u.try_clone().unwrap(), c.try_clone().unwrap());
            if (&u).write_all(&h).is_err() {
                continue;
            }
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut c2, &mut u2);
                let _ = u2.shutdown(Shutdown::Write);
            });
            std::thread::spawn(move || {
                let (mut u, mut c) = (u, c);
                let _ = std::io::copy(&mut u, &mut c);
                let _ = c.shutdown(Shutdown::Write);
            });
        }
    });
    port
}

/// Hiddify-Manager's REALITY inbounds (xray/configs/05_inbounds_02_reality_main.json.j2 as its
/// renderer writes it): VLESS on the padded abstract sockets `@@realityin_PORT` behind HAProxy
/// (`sockopt.acceptProxyProtocol`), Vision over raw with no `network` member, gRPC with flow
/// "", `dest`, `shortIds` starting with "", a fallback to `@@http_in_h2` with PROXY v2; its
/// log, API (`api.listen`), policy and stats files merged in as `-confdir` merges them.
#[test]
fn hiddify_vless_reality() {
    const PRIVATE: &str = "OOp4KEGDcPn99y8ZKE7zYR6SW6SW5RPJUmk55P5XK0k";
    let pbk = public_key(PRIVATE);
    let site = site();
    let echo = echo_server();
    let (api, tcp, grpc) = (free_port(), free_port(), free_port());
    let sid = "3f8a91c2d4e5b607";
    let inbound = |stream: &str, port: u16, flow: &str, network: &str| {
        format!(
            r#"{{"tag": "realityin_{stream}_{port}", "listen": "@@realityin_{port}", "protocol": "vless",
      "settings": {{
        "clients": [{{"id": "{ID}", "email": "{ID}@hiddify.com", "flow": "{flow}"}}],
        "decryption": "none",
        "fallbacks": [{{"dest": "@@http_in_h2", "xver": 2}}]}},
      "streamSettings": {{{network}
        "security": "reality",
        "realitySettings": {{"show": false, "dest": "127.0.0.1:{site}", "xver": 0,
          "serverNames": ["{SNI}"], "privateKey": "{PRIVATE}", "shortIds": ["", "{sid}"]}},
        "sockopt": {{"acceptProxyProtocol": true, "tcpFastOpen": true}}}},
      "sniffing": {{"enabled": true, "destOverride": ["http", "tls", "quic"]}}}}"#,
            site = site.port
        )
    };
    let cfg = format!(
        r#"{{
  "log": {{"loglevel": "warning", "logid": true, "header": true}},
  "api": {{"tag": "api", "listen": "127.0.0.1:{api}", "services": ["HandlerService", "LoggerService", "StatsService"]}},
  "policy": {{
    "levels": {{"0": {{"statsUserUplink": true, "statsUserDownlink": true, "statsUserOnline": true}}}},
    "system": {{"statsInboundUplink": true, "statsInboundDownlink": true,
                "statsOutboundUplink": true, "statsOutboundDownlink": true}}
  }},
  "stats": {{}},
  "inbounds": [{}, {}],
  "outbounds": [{{"tag": "freedom", "protocol": "freedom", "settings": {{"finalRules": [{{"action": "allow", "ip": ["127.0.0.0/8", "::1"]}}]}}}},
                {{"protocol": "blackhole", "tag": "blackhole"}}]
}}"#,
        inbound("tcp", tcp, "xtls-rprx-vision", ""),
        inbound(
            "grpc",
            grpc,
            "",
            r#""network": "grpc", "grpcSettings": {"serviceName": "Hx7vlessgrpc"},"#
        ),
    );
    reality_fields_known(&both_accept("hiddify-reality", &cfg));
    let f = ferry(&cfg, &[api]);
    let (tcp_front, grpc_front) = (
        haproxy(&format!("realityin_{tcp}")),
        haproxy(&format!("realityin_{grpc}")),
    );
    let vision = xray_outbound(
        "vless",
        "xtls-rprx-vision",
        tcp_front,
        r#""network": "raw""#,
        &client_reality(SNI, &pbk, sid),
    );
    let grpc_out = xray_outbound(
        "vless",
        "",
        grpc_front,
        r#""network": "grpc", "grpcSettings": {"serviceName": "Hx7vlessgrpc"}"#,
        &client_reality(SNI, &pbk, ""),
    );
    let (c1, e1) = xray_client(echo.port(), &vision);
    let (c2, e2) = xray_client(echo.port(), &grpc_out);
    let logs = || all_logs(&[&f, &c1, &c2, &site.proc]);
    carry("Hiddify VLESS Vision REALITY", e1, &logs);
    carry("Hiddify VLESS gRPC REALITY", e2, &logs);
    probe_meets_the_site("Hiddify VLESS Vision REALITY", tcp_front, &logs);
}

// ---------------------------------------------------------------------------------------
// XHTTP as the panels write it

/// A certificate for `SNI` in files, as the panels' `tlsSettings` name them, and its pin for
/// the clients (`pinnedPeerCertSha256`).
struct Cert {
    cert: String,
    key: String,
    pin: String,
    _dir: tempdir::Dir,
}

fn cert() -> Cert {
    let dir = tempdir::Dir::new("panel-cert");
    let g = ferry::transport::tls::generate_self_signed(&[SNI.to_string()], 2).unwrap();
    let write = |name: &str, body: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, body).unwrap();
        p.to_str().unwrap().to_string()
    };
    Cert {
        cert: write("cert.pem", &g.cert_pem),
        key: write("key.pem", &g.key_pem),
        pin: g.pin.iter().map(|b| format!("{b:02x}")).collect(),
        _dir: dir,
    }
}

/// An Xray client's outbound to 127.0.0.1:`port`: VLESS, VMess or Trojan (`ID` as the
/// password, as Hiddify has it) with `stream` as the members of its streamSettings.
fn client_outbound(protocol: &str, port: u16, stream: &str) -> String {
    let settings = match protocol {
        "trojan" => format!(
            r#"{{"servers": [{{"address": "127.0.0.1", "port": {port}, "password": "{ID}"}}]}}"#
        ),
        "vmess" => format!(
            r#"{{"vnext": [{{"address": "127.0.0.1", "port": {port},
                 "users": [{{"id": "{ID}", "security": "auto"}}]}}]}}"#
        ),
        _ => format!(
            r#"{{"vnext": [{{"address": "127.0.0.1", "port": {port},
                 "users": [{{"id": "{ID}", "encryption": "none"}}]}}]}}"#
        ),
    };
    format!(
        r#"{{"protocol": "{protocol}", "settings": {settings}, "streamSettings": {{{stream}}}}}"#
    )
}

/// The `security` members of a client: TLS to `SNI`, pinned to `cert`.
fn client_tls(cert: &Cert) -> String {
    format!(
        r#""security": "tls", "tlsSettings": {{"serverName": "{SNI}", "pinnedPeerCertSha256": "{}"}}"#,
        cert.pin
    )
}

/// The `security` members of a client: REALITY to `SNI` with `pbk` and `sid`.
fn client_reality_security(pbk: &str, sid: &str) -> String {
    format!(
        r#""security": "reality", "realitySettings": {}"#,
        client_reality(SNI, pbk, sid)
    )
}

/// Through the client: `carry`, then Xray's own word that it dialed XHTTP in `mode` over HTTP
/// `version` ("XHTTP is dialing to …, mode M, HTTP version V"), so that an `auto` client is
/// known to have picked what it should.
fn carry_xhttp(
    what: &str,
    client: &(Proc, u16),
    mode: &str,
    version: &str,
    logs: &dyn Fn() -> String,
) {
    carry(what, client.1, logs);
    let needle = format!(", mode {mode}, HTTP version {version}");
    let t = Instant::now();
    while !client.0.output().contains(&needle) {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{what}: the client did not dial with {needle:?}\n{}",
            logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// 3x-ui as it writes config.json today (v3, `internal/web/service/xray.go`): VLESS over XHTTP
/// and REALITY with the inbound form's defaults after its wire normalizer
/// (`frontend/src/lib/xray/stream-wire-normalize.ts`, `normalizeXhttpForWire`): `path` "/",
/// `host` "", `mode` "auto", `xPaddingBytes` "100-1000", `scMaxBufferedPosts` 30,
/// `scStreamUpServerSecs` "20-80", every empty or default knob left out; clients rebuilt by
/// the panel as `{email, id}` (no flow off TCP), VLESS `encryption` stripped, REALITY without
/// its client half; in 3x-ui's base config (keys sorted, as Go writes the stream back). The
/// `auto` server serves clients in `auto` (stream-one under REALITY), `packet-up` and
/// `stream-up`.
#[test]
fn three_x_ui_vless_xhttp_reality() {
    const PRIVATE: &str = "WIBQErHhtkqmsVRz36akBn3GyUbFdX50UwGJS_mpWH4";
    let pbk = public_key(PRIVATE);
    let site = site();
    let echo = echo_server();
    let (api, metrics, port) = (free_port(), free_port(), free_port());
    let cfg = format!(
        r#"{{
  "api": {{"services": ["HandlerService", "LoggerService", "StatsService", "RoutingService"], "tag": "api"}},
  "inbounds": [
    {{"listen": "127.0.0.1", "port": {api}, "protocol": "tunnel", "settings": {{"rewriteAddress": "127.0.0.1"}}, "tag": "api"}},
    {{"listen": "127.0.0.1", "port": {port}, "protocol": "vless", "tag": "inbound-{port}",
      "settings": {{"clients": [{{"email": "r4x9m2k7", "id": "{ID}"}}], "decryption": "none"}},
      "sniffing": {{"enabled": true, "destOverride": ["http", "tls", "quic", "fakedns"]}},
      "streamSettings": {{
        "network": "xhttp",
        "realitySettings": {{
          "maxClientVer": "", "maxTimediff": 0, "minClientVer": "", "mldsa65Seed": "",
          "privateKey": "{PRIVATE}", "serverNames": ["{SNI}", "www.{SNI}"],
          "shortIds": ["5e2a", "c4d1b7f03a9e6b28"], "show": false,
          "target": "127.0.0.1:{site}", "xver": 0}},
        "security": "reality",
        "xhttpSettings": {{"host": "", "mode": "auto", "path": "/", "scMaxBufferedPosts": 30,
                          "scStreamUpServerSecs": "20-80", "xPaddingBytes": "100-1000"}}}}}}
  ],
  "log": {{"access": "none", "dnsLog": false, "error": "", "loglevel": "warning", "maskAddress": ""}},
  "metrics": {{"listen": "127.0.0.1:{metrics}", "tag": "metrics_out"}},
  "outbounds": [
    {{"protocol": "freedom", "tag": "direct",
      "settings": {{"domainStrategy": "AsIs",
                    "finalRules": [{{"action": "allow", "ip": ["127.0.0.0/8"]}},
                                   {{"action": "block", "ip": ["geoip:private"]}}, {{"action": "allow"}}]}}}},
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
}}"#,
        site = site.port
    );
    reality_fields_known(&both_accept("3x-ui-xhttp-reality", &cfg));
    let f = ferry(&cfg, &[api, metrics, port]);
    let client = |mode: &str| {
        let out = client_outbound(
            "vless",
            port,
            &format!(
                r#""network": "xhttp", "xhttpSettings": {{"path": "/", "mode": "{mode}"}}, {}"#,
                client_reality_security(&pbk, "c4d1b7f03a9e6b28")
            ),
        );
        xray_client(echo.port(), &out)
    };
    let (auto, packet, stream) = (client("auto"), client("packet-up"), client("stream-up"));
    let logs = || all_logs(&[&f, &auto.0, &packet.0, &stream.0, &site.proc]);
    carry_xhttp("3x-ui XHTTP REALITY, auto", &auto, "stream-one", "2", &logs);
    carry_xhttp(
        "3x-ui XHTTP REALITY, packet-up",
        &packet,
        "packet-up",
        "2",
        &logs,
    );
    carry_xhttp(
        "3x-ui XHTTP REALITY, stream-up",
        &stream,
        "stream-up",
        "2",
        &logs,
    );
    probe_meets_the_site("3x-ui XHTTP REALITY", port, &logs);
}

/// 3x-ui v2.x (v2.5 to v2.9, the form in `web/assets/js/model/inbound.js`, whose
/// `xHTTPStreamSettings.toJson` writes every field it has, empty or not: `headers` {},
/// `scMaxEachPostBytes` "1000000", `noSSEHeader` false, `xPaddingObfsMode` false and its
/// empty `xPaddingKey`/`Header`/`Placement`/`Method`, `uplinkHTTPMethod`, `sessionPlacement`/
/// `Key`, `seqPlacement`/`Key`, `uplinkDataPlacement`/`Key` all "", `uplinkChunkSize` 0), as
/// its API path hands the inbound to the core (`GenXrayInboundConfig`: clients with the
/// panel's own fields, VLESS `encryption`, `externalProxy`, the TLS form's client half in
/// `tlsSettings.settings`). Two inbounds: `packet-up` over TLS (the form's TLS defaults:
/// `minVersion` 1.2, `maxVersion` 1.3, empty `cipherSuites` and `echServerKeys`,
/// `echForceQuery` "none", `alpn` h2 and http/1.1, a certificate file with `usage`,
/// `oneTimeLoading`, `buildChain`) and `stream-up` without TLS; in v2.9's base config
/// (`web/service/config.json`: the API tunnel with `address`, freedom with `redirect` "" and
/// `noises` [], as every 3x-ui from v2.5 to v3.0 installs it and as later versions keep it in
/// an upgraded install's template).
#[test]
fn three_x_ui_v2_xhttp_every_field() {
    let cert = cert();
    let echo = echo_server();
    let (api, metrics, tls, plain) = (free_port(), free_port(), free_port(), free_port());
    let xhttp = |path: &str, mode: &str| {
        format!(
            r#""xhttpSettings": {{"path": "{path}", "host": "", "headers": {{}}, "scMaxBufferedPosts": 30,
          "scMaxEachPostBytes": "1000000", "scStreamUpServerSecs": "20-80", "noSSEHeader": false,
          "xPaddingBytes": "100-1000", "mode": "{mode}", "xPaddingObfsMode": false, "xPaddingKey": "",
          "xPaddingHeader": "", "xPaddingPlacement": "", "xPaddingMethod": "", "uplinkHTTPMethod": "",
          "sessionPlacement": "", "sessionKey": "", "seqPlacement": "", "seqKey": "",
          "uplinkDataPlacement": "", "uplinkDataKey": "", "uplinkChunkSize": 0}}"#
        )
    };
    let inbound = |port: u16, email: &str, stream: String| {
        format!(
            r#"{{"listen": "127.0.0.1", "port": {port}, "protocol": "vless", "tag": "inbound-{port}",
      "settings": {{"clients": [{{"id": "{ID}", "flow": "", "email": "{email}", "limitIp": 0, "totalGB": 0,
                      "expiryTime": 0, "enable": true, "tgId": "", "subId": "{email}0000", "comment": "",
                      "reset": 0, "created_at": 1767225600000, "updated_at": 1767225600000}}],
                    "decryption": "none", "encryption": "none"}},
      "streamSettings": {{{stream}}},
      "sniffing": {{"enabled": false, "destOverride": ["http", "tls", "quic", "fakedns"],
                    "metadataOnly": false, "routeOnly": false, "ipsExcluded": [], "domainsExcluded": []}}}}"#
        )
    };
    let tls_stream = format!(
        r#""network": "xhttp", "security": "tls", "externalProxy": [],
        "tlsSettings": {{"serverName": "{SNI}", "minVersion": "1.2", "maxVersion": "1.3", "cipherSuites": "",
          "rejectUnknownSni": false, "disableSystemRoot": false, "enableSessionResumption": false,
          "certificates": [{{"certificateFile": "{}", "keyFile": "{}", "oneTimeLoading": false,
                             "usage": "encipherment", "buildChain": false}}],
          "alpn": ["h2", "http/1.1"], "echServerKeys": "", "echForceQuery": "none",
          "settings": {{"fingerprint": "chrome", "echConfigList": ""}}}},
        {}"#,
        cert.cert,
        cert.key,
        xhttp("/x7Kp2", "packet-up")
    );
    let plain_stream = format!(
        r#""network": "xhttp", "security": "none", "externalProxy": [], {}"#,
        xhttp("/m3Qz9", "stream-up")
    );
    let cfg = format!(
        r#"{{
  "log": {{"access": "none", "dnsLog": false, "error": "", "loglevel": "warning", "maskAddress": ""}},
  "api": {{"tag": "api", "services": ["HandlerService", "LoggerService", "StatsService"]}},
  "inbounds": [
    {{"tag": "api", "listen": "127.0.0.1", "port": {api}, "protocol": "tunnel", "settings": {{"address": "127.0.0.1"}}}},
    {}, {}
  ],
  "outbounds": [
    {{"tag": "direct", "protocol": "freedom", "settings": {{"domainStrategy": "AsIs", "redirect": "", "noises": [], "finalRules": [{{"action": "allow", "ip": ["127.0.0.0/8", "::1"]}}]}}}},
    {{"tag": "blocked", "protocol": "blackhole", "settings": {{}}}}
  ],
  "policy": {{
    "levels": {{"0": {{"statsUserDownlink": true, "statsUserUplink": true}}}},
    "system": {{"statsInboundDownlink": true, "statsInboundUplink": true,
                "statsOutboundDownlink": false, "statsOutboundUplink": false}}
  }},
  "routing": {{"domainStrategy": "AsIs",
               "rules": [{{"type": "field", "inboundTag": ["api"], "outboundTag": "api"}}]}},
  "stats": {{}},
  "metrics": {{"tag": "metrics_out", "listen": "127.0.0.1:{metrics}"}}
}}"#,
        inbound(tls, "p8w2n5d1", tls_stream),
        inbound(plain, "j6t0c3v9", plain_stream),
    );
    let warnings = both_accept("3x-ui-v2-xhttp", &cfg);
    let odd: Vec<&str> = warnings
        .lines()
        .filter(|l| l.contains("xhttpSettings"))
        .collect();
    assert!(odd.is_empty(), "ferry test warned: {odd:#?}");
    let f = ferry(&cfg, &[api, metrics, tls, plain]);
    let packet = xray_client(
        echo.port(),
        &client_outbound(
            "vless",
            tls,
            &format!(
                r#""network": "xhttp", "xhttpSettings": {{"path": "/x7Kp2", "mode": "packet-up"}}, {}"#,
                client_tls(&cert)
            ),
        ),
    );
    let stream = xray_client(
        echo.port(),
        &client_outbound(
            "vless",
            plain,
            r#""network": "xhttp", "xhttpSettings": {"path": "/m3Qz9", "mode": "stream-up"}"#,
        ),
    );
    let logs = || all_logs(&[&f, &packet.0, &stream.0]);
    carry_xhttp(
        "3x-ui v2 XHTTP TLS, packet-up",
        &packet,
        "packet-up",
        "2",
        &logs,
    );
    carry_xhttp(
        "3x-ui v2 XHTTP, stream-up",
        &stream,
        "stream-up",
        "1.1",
        &logs,
    );
}

/// Marzban's XHTTP inbounds as its docs give them (gozargah.github.io,
/// `marzban/en/docs/xray-inbounds.md`: "VLESS XHTTP REALITY", "VLESS XHTTP TLS", "VLESS XHTTP
/// NoTLS"): `xhttpSettings` of only `"mode": "auto"` (no path: "/"), REALITY with `dest`,
/// `serverNames` with "" beside the name, `SpiderX`; TLS with `serverName`, a certificate file
/// with `ocspStapling`, `minVersion` 1.2 and `cipherSuites` (TLS 1.2 ECDHE suites); users put
/// in by Marzban at start (`{email, id}`, flow dropped off TCP); the API and stats Marzban
/// adds. Clients in `auto`: stream-one over REALITY, packet-up over TLS (HTTP/2) and without
/// TLS (HTTP/1.1).
#[test]
fn marzban_vless_xhttp() {
    const PRIVATE: &str = "kDdwXyZBiBLGTXiK4tiVZpHg5VbyUR6o3TQUdiGUO3E";
    let pbk = public_key(PRIVATE);
    let site = site();
    let cert = cert();
    let echo = echo_server();
    let (api, reality, tls, notls) = (free_port(), free_port(), free_port(), free_port());
    let sniffing = r#""sniffing": {"enabled": true, "destOverride": ["http", "tls", "quic"]}"#;
    let inbound = |tag: &str, port: u16, security: String| {
        format!(
            r#"{{"tag": "{tag}", "listen": "127.0.0.1", "port": {port}, "protocol": "vless",
      "settings": {{"clients": [{{"email": "1.alice", "id": "{ID}"}}], "decryption": "none"}},
      "streamSettings": {{"network": "xhttp", "xhttpSettings": {{"mode": "auto"}}, {security}}},
      {sniffing}}}"#
        )
    };
    let cfg = format!(
        r#"{{
  "log": {{"loglevel": "warning"}},
  "routing": {{"rules": [{{"inboundTag": ["API_INBOUND"], "outboundTag": "API", "type": "field"}}]}},
  "inbounds": [
    {{"listen": "127.0.0.1", "port": {api}, "protocol": "dokodemo-door",
      "settings": {{"address": "127.0.0.1"}}, "tag": "API_INBOUND"}},
    {}, {}, {}
  ],
  "outbounds": [{{"protocol": "freedom", "tag": "DIRECT","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}, {{"protocol": "blackhole", "tag": "BLOCK"}}],
  "api": {{"services": ["HandlerService", "StatsService", "LoggerService"], "tag": "API"}},
  "stats": {{}},
  "policy": {{
    "levels": {{"0": {{"statsUserUplink": true, "statsUserDownlink": true}}}},
    "system": {{"statsInboundDownlink": false, "statsInboundUplink": false,
                "statsOutboundDownlink": true, "statsOutboundUplink": true}}
  }}
}}"#,
        inbound(
            "VLESS XHTTP REALITY",
            reality,
            format!(
                r#""security": "reality",
        "realitySettings": {{"show": false, "dest": "127.0.0.1:{}", "xver": 0,
          "serverNames": ["{SNI}", ""], "privateKey": "{PRIVATE}", "SpiderX": "/",
          "shortIds": ["ea1058117be12087"]}}"#,
                site.port
            )
        ),
        inbound("VLESS XHTTP TLS", tls, marzban_tls(&cert)),
        inbound(
            "VLESS XHTTP NoTLS",
            notls,
            r#""security": "none""#.to_string()
        ),
    );
    reality_fields_known(&both_accept("marzban-xhttp", &cfg));
    let f = ferry(&cfg, &[api, reality, tls, notls]);
    let client = |port: u16, security: &str| {
        let stream =
            format!(r#""network": "xhttp", "xhttpSettings": {{"mode": "auto"}}, {security}"#);
        xray_client(echo.port(), &client_outbound("vless", port, &stream))
    };
    let c1 = client(reality, &client_reality_security(&pbk, "ea1058117be12087"));
    let c2 = client(tls, &client_tls(&cert));
    let c3 = client(notls, r#""security": "none""#);
    let logs = || all_logs(&[&f, &c1.0, &c2.0, &c3.0, &site.proc]);
    carry_xhttp("Marzban VLESS XHTTP REALITY", &c1, "stream-one", "2", &logs);
    carry_xhttp("Marzban VLESS XHTTP TLS", &c2, "packet-up", "2", &logs);
    carry_xhttp("Marzban VLESS XHTTP NoTLS", &c3, "packet-up", "1.1", &logs);
    probe_meets_the_site("Marzban VLESS XHTTP REALITY", reality, &logs);
}

/// Marzban's `tlsSettings` (its docs' TLS inbounds): `serverName`, one certificate file with
/// `ocspStapling`, `minVersion` 1.2, `cipherSuites`.
fn marzban_tls(cert: &Cert) -> String {
    format!(
        r#""security": "tls",
        "tlsSettings": {{"serverName": "{SNI}",
          "certificates": [{{"ocspStapling": 3600, "certificateFile": "{}", "keyFile": "{}"}}],
          "minVersion": "1.2",
          "cipherSuites": "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256:TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256:TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384:TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384:TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256:TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"}}"#,
        cert.cert, cert.key
    )
}

/// Marzban's SplitHTTP inbounds as its docs still give them ("VLESS SplitHTTP TLS", "VMess
/// SplitHTTP NoTLS"): `network` "splithttp" with `splithttpSettings` carrying the fields
/// SplitHTTP dropped long ago (`maxUploadSize`, `maxConcurrentUploads`, which Xray ignores),
/// VMess `settings` with `decryption`, and, in the TLS one, `sniffing` misplaced inside
/// `streamSettings`. Clients by the old names too, in the default mode (packet-up).
#[test]
fn marzban_splithttp() {
    let cert = cert();
    let echo = echo_server();
    let (vless, vmess) = (free_port(), free_port());
    let sniffing = r#""sniffing": {"enabled": true, "destOverride": ["http", "tls", "quic"]}"#;
    let splithttp = r#""splithttpSettings": {"host": "", "path": "/", "maxUploadSize": 1000000, "maxConcurrentUploads": 10}"#;
    let cfg = format!(
        r#"{{
  "log": {{"loglevel": "warning"}},
  "inbounds": [
    {{"tag": "VLESS Splithttp TLS", "listen": "127.0.0.1", "port": {vless}, "protocol": "vless",
      "settings": {{"clients": [{{"email": "1.alice", "id": "{ID}"}}], "decryption": "none"}},
      "streamSettings": {{{splithttp}, "network": "splithttp", {}, {sniffing}}}}},
    {{"tag": "VMESS SplitHTTP NoTLS", "listen": "127.0.0.1", "port": {vmess}, "protocol": "vmess",
      "settings": {{"clients": [{{"email": "1.alice", "id": "{ID}"}}], "decryption": "none"}},
      "streamSettings": {{"network": "splithttp", {splithttp}}}, {sniffing}}}
  ],
  "outbounds": [{{"protocol": "freedom", "tag": "DIRECT","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}, {{"protocol": "blackhole", "tag": "BLOCK"}}]
}}"#,
        marzban_tls(&cert),
    );
    both_accept("marzban-splithttp", &cfg);
    let f = ferry(&cfg, &[vless, vmess]);
    let c1 = xray_client(
        echo.port(),
        &client_outbound(
            "vless",
            vless,
            &format!(
                r#""network": "splithttp", "splithttpSettings": {{"path": "/"}}, {}"#,
                client_tls(&cert)
            ),
        ),
    );
    let c2 = xray_client(
        echo.port(),
        &client_outbound(
            "vmess",
            vmess,
            r#""network": "splithttp", "splithttpSettings": {"path": "/"}"#,
        ),
    );
    let logs = || all_logs(&[&f, &c1.0, &c2.0]);
    carry_xhttp("Marzban VLESS SplitHTTP TLS", &c1, "packet-up", "2", &logs);
    carry_xhttp(
        "Marzban VMess SplitHTTP NoTLS",
        &c2,
        "packet-up",
        "1.1",
        &logs,
    );
}

/// HAProxy's HTTP mode in front of Hiddify's core (`backend v10-*-xhttp-http`: `server xray
/// abns@v10-… send-proxy-v2 proto h2`): nginx terminates TLS (h2) for `SNI` and hands `path`
/// to `upstream` over h2c (`grpc_pass`), where `haproxy()` adds the PROXY v2 header on the way
/// to the abstract socket. Returns nginx and its port.
fn h2_front(cert: &Cert, path: &str, upstream: u16) -> (Proc, u16, tempdir::Dir) {
    let dir = tempdir::Dir::new("h2-front");
    let d = dir.path();
    let port = free_port();
    let body = format!(
        r#"    server {{
        listen 127.0.0.1:{port} ssl http2;
        server_name {SNI};
        ssl_certificate {cert};
        ssl_certificate_key {key};
        location {path} {{
            grpc_pass grpc://127.0.0.1:{upstream};
            grpc_read_timeout 1h;
            grpc_send_timeout 1h;
            client_max_body_size 0;
        }}
    }}"#,
        cert = cert.cert,
        key = cert.key,
    );
    let proc = nginx(d, Nginx::Http(&body), &[port]);
    (proc, port, dir)
}

/// Hiddify-Manager's XHTTP inbounds (xray/configs/05_inbounds_new.json.j2 with
/// common/streams/xhttp.pj2, and the `special_reality_xhttp` mode of
/// 05_inbounds_02_reality_main.json.j2, as its renderer writes them): VLESS (flow "", the
/// fallback to `@@http_in_h2`), VMess (`alterId` 0) and Trojan (the user's UUID as password) on
/// the padded abstract sockets `@@v10-PROTOCOL-xhttp` with `security` "none", and VLESS +
/// REALITY on `@@realityin_PORT`; `xhttpSettings` `{"mode": "auto", "path": "/PATHS"}`;
/// `sockopt.acceptProxyProtocol` (HAProxy sends PROXY v2) and `tcpFastOpen`. HAProxy's TCP
/// mode (HTTP/1.1 once it has taken TLS off) is `haproxy()`: clients in `auto` (packet-up).
/// Its HTTP mode (h2 to the core) is nginx with `grpc_pass` before `haproxy()`: a client in
/// stream-up over TLS. REALITY, relayed as bytes: a client in `auto` (stream-one).
#[test]
fn hiddify_xhttp() {
    const PRIVATE: &str = "CBqBTeOicfU7GGmthFbIL8J2m6R7t8aTBpAjc6T-rlA";
    let pbk = public_key(PRIVATE);
    let site = site();
    let cert = cert();
    let echo = echo_server();
    let (api, rport) = (free_port(), free_port());
    let sid = "9d04e7a1c3b2f856";
    // The v10 sockets' names, made this run's own.
    let v10 = |protocol: &str| format!("v10-{protocol}-xhttp-{}-{rport}", std::process::id());
    let path = |protocol: &str| format!("/Rq4{protocol}Zx8xhttp");
    let tail = r#""sockopt": {"acceptProxyProtocol": true, "tcpFastOpen": true}},
      "sniffing": {"enabled": true, "destOverride": ["http", "tls", "quic"]}"#;
    let vless_settings = format!(
        r#""settings": {{
        "clients": [{{"id": "{ID}", "email": "{ID}@hiddify.com", "flow": ""}}],
        "decryption": "none",
        "fallbacks": [{{"dest": "@@http_in_h2", "xver": 2}}]}}"#
    );
    let settings = |protocol: &str| match protocol {
        "vmess" => format!(
            r#""settings": {{"clients": [{{"id": "{ID}", "email": "{ID}@hiddify.com", "alterId": 0}}]}}"#
        ),
        "trojan" => format!(
            r#""settings": {{"clients": [{{"password": "{ID}", "email": "{ID}@hiddify.com"}}]}}"#
        ),
        _ => vless_settings.clone(),
    };
    let new_inbound = |protocol: &str| {
        format!(
            r#"{{"tag": "v10-{protocol}-xhttp", "listen": "@@{}", "protocol": "{protocol}", {},
      "streamSettings": {{"network": "xhttp", "xhttpSettings": {{"mode": "auto", "path": "{}"}},
        "security": "none", {tail}}}"#,
            v10(protocol),
            settings(protocol),
            path(protocol)
        )
    };
    let cfg = format!(
        r#"{{
  "log": {{"loglevel": "warning", "logid": true, "header": true}},
  "api": {{"tag": "api", "listen": "127.0.0.1:{api}", "services": ["HandlerService", "LoggerService", "StatsService"]}},
  "policy": {{
    "levels": {{"0": {{"statsUserUplink": true, "statsUserDownlink": true, "statsUserOnline": true}}}},
    "system": {{"statsInboundUplink": true, "statsInboundDownlink": true,
                "statsOutboundUplink": true, "statsOutboundDownlink": true}}
  }},
  "stats": {{}},
  "inbounds": [
    {{"tag": "realityin_xhttp_{rport}", "listen": "@@realityin_{rport}", "protocol": "vless", {vless_settings},
      "streamSettings": {{"network": "xhttp", "xhttpSettings": {{"mode": "auto", "path": "{}"}},
        "security": "reality",
        "realitySettings": {{"show": false, "dest": "127.0.0.1:{}", "xver": 0,
          "serverNames": ["{SNI}"], "privateKey": "{PRIVATE}", "shortIds": ["", "{sid}"]}},
        {tail}}},
    {}, {}, {}
  ],
  "outbounds": [{{"tag": "freedom", "protocol": "freedom", "settings": {{"finalRules": [{{"action": "allow", "ip": ["127.0.0.0/8", "::1"]}}]}}}},
                {{"protocol": "blackhole", "tag": "blackhole"}}]
}}"#,
        path("vless"),
        site.port,
        new_inbound("vless"),
        new_inbound("vmess"),
        new_inbound("trojan"),
    );
    reality_fields_known(&both_accept("hiddify-xhttp", &cfg));
    let f = ferry(&cfg, &[api]);
    let plain = |protocol: &str| {
        let stream = format!(
            r#""network": "xhttp", "xhttpSettings": {{"mode": "auto", "path": "{}"}}"#,
            path(protocol)
        );
        xray_client(
            echo.port(),
            &client_outbound(protocol, haproxy(&v10(protocol)), &stream),
        )
    };
    let (c1, c2, c3) = (plain("vless"), plain("vmess"), plain("trojan"));
    let (nginx, front, _nginx_dir) = h2_front(&cert, &path("vless"), haproxy(&v10("vless")));
    let c4 = xray_client(
        echo.port(),
        &client_outbound(
            "vless",
            front,
            &format!(
                r#""network": "xhttp", "xhttpSettings": {{"mode": "stream-up", "path": "{}"}}, {}"#,
                path("vless"),
                client_tls(&cert)
            ),
        ),
    );
    let reality_front = haproxy(&format!("realityin_{rport}"));
    let c5 = xray_client(
        echo.port(),
        &client_outbound(
            "vless",
            reality_front,
            &format!(
                r#""network": "xhttp", "xhttpSettings": {{"mode": "auto", "path": "{}"}}, {}"#,
                path("vless"),
                client_reality_security(&pbk, sid)
            ),
        ),
    );
    let logs = || all_logs(&[&f, &c1.0, &c2.0, &c3.0, &c4.0, &c5.0, &nginx, &site.proc]);
    carry_xhttp(
        "Hiddify VLESS XHTTP, TCP mode",
        &c1,
        "packet-up",
        "1.1",
        &logs,
    );
    carry_xhttp(
        "Hiddify VMess XHTTP, TCP mode",
        &c2,
        "packet-up",
        "1.1",
        &logs,
    );
    carry_xhttp(
        "Hiddify Trojan XHTTP, TCP mode",
        &c3,
        "packet-up",
        "1.1",
        &logs,
    );
    carry_xhttp("Hiddify VLESS XHTTP, h2 mode", &c4, "stream-up", "2", &logs);
    carry_xhttp("Hiddify VLESS XHTTP REALITY", &c5, "stream-one", "2", &logs);
    probe_meets_the_site("Hiddify VLESS XHTTP REALITY", reality_front, &logs);
}

/// A Remnawave config profile's XHTTP REALITY inbound as the node starts the core with it.
/// Remnawave ships no XHTTP template (remnawave/templates has none): the admin writes the
/// inbound; the panel then does what its code does to any (`XRayConfig.cleanInboundClients`,
/// `includeUserBatch`): users as `{id, email}`, `settings.flow` put in by `getVlessFlow`, ""
/// off raw/TCP. `xhttpSettings` with `path`, `host`, `mode` and `extra`, the members
/// Remnawave reads for its share links (`resolveXhttp`), `extra` holding the rest as Xray
/// reads it on both sides (padding, the packet-up knobs, `xmux`). The node's API on a
/// `tunnel` inbound on an abstract socket, `api`, `stats`, `policy`. Clients with the same
/// `extra`, as the subscription gives it: `auto` (stream-one) and `packet-up`.
#[test]
fn remnawave_vless_xhttp_reality() {
    const PRIVATE: &str = "mIvJtiWQgTwxT5VdgboK7WES1sI3zZ-SapXyWdko23c";
    let pbk = public_key(PRIVATE);
    let site = site();
    let echo = echo_server();
    let port = free_port();
    let sock = format!("@ferry-test-remnawave-api-{}-{port}", std::process::id());
    let extra = r#"{"xPaddingBytes": "100-1000", "noSSEHeader": false, "scMaxEachPostBytes": 1000000,
                    "scMaxBufferedPosts": 30, "scStreamUpServerSecs": "20-80",
                    "xmux": {"maxConcurrency": "16-32", "cMaxReuseTimes": 0, "hMaxRequestTimes": "600-900",
                             "hMaxReusableSecs": "1800-3000", "hKeepAlivePeriod": 0}}"#;
    let cfg = format!(
        r#"{{
  "log": {{"loglevel": "info"}},
  "inbounds": [
    {{"tag": "REMNAWAVE_API_INBOUND", "listen": "{sock}", "protocol": "tunnel"}},
    {{"tag": "VLESS_XHTTP_REALITY", "port": {port}, "listen": "127.0.0.1", "protocol": "vless",
      "settings": {{"clients": [{{"id": "{ID}", "email": "1"}}], "decryption": "none", "flow": ""}},
      "sniffing": {{"enabled": true, "destOverride": ["http", "tls", "quic"]}},
      "streamSettings": {{"network": "xhttp", "security": "reality",
        "xhttpSettings": {{"path": "/rw-xh", "host": "", "mode": "auto", "extra": {extra}}},
        "realitySettings": {{"target": "127.0.0.1:{site}", "show": false, "xver": 0,
          "shortIds": [""], "privateKey": "{PRIVATE}", "serverNames": ["{SNI}"]}}}}}}
  ],
  "outbounds": [{{"protocol": "freedom", "tag": "DIRECT","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}, {{"protocol": "blackhole", "tag": "BLOCK"}}],
  "routing": {{"rules": [{{"inboundTag": ["REMNAWAVE_API_INBOUND"], "outboundTag": "REMNAWAVE_API"}}]}},
  "stats": {{}},
  "api": {{"services": ["HandlerService", "StatsService", "RoutingService"], "tag": "REMNAWAVE_API"}},
  "policy": {{
    "levels": {{"0": {{"statsUserUplink": true, "statsUserDownlink": true, "statsUserOnline": false}}}},
    "system": {{"statsInboundDownlink": true, "statsInboundUplink": true,
                "statsOutboundDownlink": true, "statsOutboundUplink": true}}
  }}
}}"#,
        site = site.port
    );
    let warnings = both_accept("remnawave-xhttp", &cfg);
    reality_fields_known(&warnings);
    let odd: Vec<&str> = warnings
        .lines()
        .filter(|l| l.contains("xhttpSettings"))
        .collect();
    assert!(odd.is_empty(), "ferry test warned: {odd:#?}");
    let f = ferry(&cfg, &[port]);
    let client = |mode: &str| {
        let out = client_outbound(
            "vless",
            port,
            &format!(
                r#""network": "xhttp", "xhttpSettings": {{"path": "/rw-xh", "mode": "{mode}", "extra": {extra}}}, {}"#,
                client_reality_security(&pbk, "")
            ),
        );
        xray_client(echo.port(), &out)
    };
    let (auto, packet) = (client("auto"), client("packet-up"));
    let logs = || all_logs(&[&f, &auto.0, &packet.0, &site.proc]);
    carry_xhttp(
        "Remnawave VLESS XHTTP REALITY, auto",
        &auto,
        "stream-one",
        "2",
        &logs,
    );
    carry_xhttp(
        "Remnawave VLESS XHTTP REALITY, packet-up",
        &packet,
        "packet-up",
        "2",
        &logs,
    );
    probe_meets_the_site("Remnawave VLESS XHTTP REALITY", port, &logs);
}
