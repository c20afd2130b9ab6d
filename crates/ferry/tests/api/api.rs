//! Xray's gRPC API driven by Xray's own client, `xray api` (from the peers' Xray): inbounds
//! and users added and removed, traffic pushed as a user through a Ferry client, its counters
//! read exactly and reset, online users and IPs, system stats, and Xray's error texts for bad
//! requests. Both ways in: `api.listen`, and the older form (a tunnel inbound routed to the
//! API's tag).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::common;
use common::*;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// Runs `xray api ARGS...` against `server`; returns (success, stdout, stderr).
fn xapi(server: u16, args: &[&str]) -> (bool, String, String) {
    let mut cmd = Command::new(peer("xray"));
    cmd.arg("api").arg(args[0]);
    cmd.arg(format!("--server=127.0.0.1:{server}"));
    cmd.args(&args[1..]);
    let o = cmd.stdin(Stdio::null()).output().unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Runs `xray api ...`, asserts it succeeded, and parses its JSON output.
fn xjson(server: u16, args: &[&str]) -> Value {
    let (ok, out, err) = xapi(server, args);
    assert!(ok, "xray api {args:?} failed:\n{out}\n{err}");
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// The value of each stat in a QueryStats/GetStats answer (proto3 leaves zeros out).
fn stats_of(v: &Value) -> Vec<(String, u64)> {
    let list = match (v.get("stat"), v.get("stat").and_then(Value::as_array)) {
        (_, Some(a)) => a.clone(),
        (Some(one), None) => vec![one.clone()],
        _ => Vec::new(),
    };
    let mut out: Vec<(String, u64)> = list
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap_or("").to_string(),
                s.get("value")
                    .and_then(|v| v.as_u64().or_else(|| v.as_str()?.parse().ok()))
                    .unwrap_or(0),
            )
        })
        .collect();
    out.sort();
    out
}

fn write_json(dir: &std::path::Path, name: &str, v: &Value) -> String {
    let p = dir.join(name);
    std::fs::write(&p, v.to_string()).unwrap();
    p.to_str().unwrap().to_string()
}

/// Whether a connection to `port` echoes `n` bytes within two seconds.
fn echoes(port: u16, n: usize) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let data = pattern(n, 9);
    if s.write_all(&data).is_err() {
        return false;
    }
    let mut got = vec![0u8; n];
    s.read_exact(&mut got).is_ok() && got == data
}

fn api_config(api: u16, legacy: u16, extra_inbounds: Vec<Value>) -> String {
    let mut inbounds = vec![
        json!({"tag": "api-in", "listen": "127.0.0.1", "port": legacy,
        "protocol": "tunnel", "settings": {"rewriteAddress": "127.0.0.1"}}),
    ];
    inbounds.extend(extra_inbounds);
    json!({
        "log": {"loglevel": "info"},
        "api": {"tag": "api", "listen": format!("127.0.0.1:{api}"),
                "services": ["HandlerService", "StatsService", "LoggerService", "RoutingService"]},
        "stats": {},
        "policy": {"levels": {"0": {"statsUserUplink": true, "statsUserDownlink": true, "statsUserOnline": true}},
                   "system": {"statsInboundUplink": true, "statsInboundDownlink": true,
                              "statsOutboundUplink": true, "statsOutboundDownlink": true}},
        "inbounds": inbounds,
        "outbounds": [{"tag": "direct", "protocol": "freedom","settings":{"finalRules":[{"action":"allow","ip":["127.0.0.0/8","::1"]}]}}],
        "routing": {"rules": [{"inboundTag": ["api-in"], "outboundTag": "api"}]}
    })
    .to_string()
}

#[test]
fn xray_api_drives_inbounds_users_and_stats() {
    let echo = echo_server();
    let (api, legacy, tport, cport) = (free_port(), free_port(), free_port(), free_port());
    let server = ferry(&api_config(api, legacy, vec![]), &[api, legacy]);
    let dir = tempdir::Dir::new("api-files");

    // Add a Trojan inbound with no users, then a user.
    let inbound = |clients: Value| {
        json!({"inbounds": [{"tag": "tr", "listen": "127.0.0.1", "port": tport, "protocol": "trojan",
                             "settings": {"clients": clients}}]})
    };
    let adi = write_json(dir.path(), "in.json", &inbound(json!([])));
    let (ok, out, err) = xapi(api, &["adi", &adi]);
    assert!(ok, "adi: {out}{err}\n{}", server.output());
    wait_listening(tport, &server);
    let adu = write_json(
        dir.path(),
        "users.json",
        &inbound(json!([{"password": "pw-alice", "email": "Alice@x"}])),
    );
    let (_, out, err) = xapi(api, &["adu", &adu]);
    assert!(out.contains("result: ok"), "adu: {out}{err}");
    // Again: Xray's text for a user that exists (adu prints it and exits 0).
    let (_, out, err) = xapi(api, &["adu", &adu]);
    assert!(
        out.contains("proxy/trojan: User Alice@x already exists."),
        "{out}{err}"
    );

    // A Ferry client sends as alice from 127.0.0.2 (Xray never counts 127.0.0.1 as online).
    let client = ferry(
        &json!({
            "inbounds": [{"tag": "c", "listen": "127.0.0.1", "port": cport, "protocol": "dokodemo-door",
                          "settings": {"address": "127.0.0.1", "port": echo.port()}}],
            "outbounds": [{"protocol": "trojan", "sendThrough": "127.0.0.2",
                           "settings": {"servers": [{"address": "127.0.0.1", "port": tport, "password": "pw-alice"}]}}]
        })
        .to_string(),
        &[cport],
    );
    let data = pattern(100_000, 1);
    let s = TcpStream::connect(("127.0.0.1", cport)).unwrap();
    assert!(echo_through(s, &data) == data, "echo through the user");
    // One connection stays open for the online checks and the removal.
    let mut live = TcpStream::connect(("127.0.0.1", cport)).unwrap();
    live.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    live.write_all(b"hi").unwrap();
    let mut b2 = [0u8; 2];
    live.read_exact(&mut b2).unwrap();

    // Exact counters, by pattern and by name; reset returns the old value and zeroes it.
    let q = xjson(api, &["statsquery", "-pattern", "user>>>Alice@x>>>"]);
    assert_eq!(
        stats_of(&q),
        vec![
            ("user>>>Alice@x>>>traffic>>>downlink".to_string(), 100_002),
            ("user>>>Alice@x>>>traffic>>>uplink".to_string(), 100_002),
        ],
        "{q}"
    );
    let up = "user>>>Alice@x>>>traffic>>>uplink";
    let r = xjson(api, &["stats", "-name", up, "-reset"]);
    assert_eq!(stats_of(&r), vec![(up.to_string(), 100_002)]);
    let r = xjson(api, &["stats", "-name", up]);
    assert_eq!(stats_of(&r), vec![(up.to_string(), 0)]);
    // Inbound counters exist from creation; the legacy form answers the same API.
    let q = xjson(legacy, &["statsquery", "-pattern", "inbound>>>tr>>>"]);
    assert_eq!(stats_of(&q).len(), 2, "{q}");
    let (ok, _, err) = xapi(api, &["stats", "-name", "user>>>nobody>>>traffic>>>uplink"]);
    assert!(
        !ok && err.contains("NotFound")
            && err.contains("user>>>nobody>>>traffic>>>uplink not found."),
        "{err}"
    );

    // Online: one IP (127.0.0.2) with an open connection.
    let o = xjson(api, &["statsonline", "-email", "Alice@x"]);
    assert_eq!(
        stats_of(&o),
        vec![("user>>>Alice@x>>>online".into(), 1)],
        "{o}"
    );
    let ips = xjson(api, &["statsonlineiplist", "-email", "Alice@x"]);
    assert!(ips["ips"].get("127.0.0.2").is_some(), "{ips}");
    let all = xjson(api, &["statsgetallonlineusers"]);
    assert!(all.to_string().contains("user>>>Alice@x>>>online"), "{all}");

    // Users and inbounds listed.
    let u = xjson(api, &["inbounduser", "-tag", "tr"]);
    assert_eq!(u["users"][0]["email"], "Alice@x", "{u}");
    assert_eq!(u["users"][0]["account"]["password"], "pw-alice", "{u}");
    let c = xjson(api, &["inboundusercount", "-tag", "tr"]);
    assert_eq!(
        c["count"]
            .as_i64()
            .or_else(|| c["count"].as_str()?.parse().ok()),
        Some(1)
    );
    let l = xjson(api, &["lsi", "--isOnlyTags=true"]);
    let tags: Vec<&str> = l["inbounds"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["tag"].as_str())
        .collect();
    assert_eq!(tags, ["api-in", "tr"], "{l}");
    let s = xjson(api, &["statssys"]);
    assert!(s["NumGoroutine"].as_u64().unwrap_or(0) > 0, "{s}");

    // Remove the user (case-insensitively): its live connection closes, a new one is refused.
    let (_, out, err) = xapi(api, &["rmu", "-tag", "tr", "alice@x"]);
    assert!(out.contains("Removed 1 user(s)"), "{out}{err}");
    let t = Instant::now();
    let mut buf = [0u8; 16];
    let closed = matches!(live.read(&mut buf), Ok(0) | Err(_));
    assert!(
        closed && t.elapsed() < Duration::from_secs(4),
        "the removed user's live connection must close"
    );
    assert!(!echoes(cport, 1000), "a removed user must be refused");
    let (_, out, _) = xapi(api, &["rmu", "-tag", "tr", "alice@x"]);
    assert!(
        out.contains("proxy/trojan: User alice@x not found."),
        "{out}"
    );

    // Remove the inbound: its port is free when the call returns.
    let (ok, out, err) = xapi(api, &["rmi", "tr"]);
    assert!(ok, "{out}{err}");
    assert!(
        TcpStream::connect(("127.0.0.1", tport)).is_err(),
        "port closed after rmi"
    );
    let (ok, _, err) = xapi(api, &["rmi", "tr"]);
    assert!(
        !ok && err.contains("common: not enough information for making a decision"),
        "{err}"
    );
    // Counters stay after removal (as in Xray).
    let q = xjson(
        api,
        &["statsquery", "-pattern", "Alice@x>>>traffic>>>downlink"],
    );
    assert_eq!(stats_of(&q).len(), 1, "{q}");
    let (ok, out, err) = xapi(api, &["restartlogger"]);
    assert!(ok, "{out}{err}");
    drop(client);
}

#[test]
fn xray_api_outbounds_and_bad_requests() {
    let (api, legacy, busy_port) = (free_port(), free_port(), free_port());
    let vport = free_port();
    let server = ferry(
        &api_config(
            api,
            legacy,
            vec![
                json!({"tag": "vl", "listen": "127.0.0.1", "port": vport, "protocol": "vless",
                        "settings": {"decryption": "none", "clients": [
                            {"id": "5f1c2a4e-0000-4000-8000-000000000001", "email": "u1@x"}]}}),
            ],
        ),
        &[api, vport],
    );
    let dir = tempdir::Dir::new("api-bad");

    // Outbounds: add, list (the API's own is hidden), refuse a duplicate, remove.
    let out = write_json(
        dir.path(),
        "out.json",
        &json!({"outbounds": [{"tag": "out-socks", "protocol": "socks",
                               "settings": {"servers": [{"address": "127.0.0.1", "port": 1080}]}}]}),
    );
    let (ok, o, e) = xapi(api, &["ado", &out]);
    assert!(ok, "{o}{e}");
    let l = xjson(api, &["lso"]);
    let tags: Vec<&str> = l["outbounds"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["tag"].as_str())
        .collect();
    assert_eq!(tags, ["direct", "out-socks"], "{l}");
    let (ok, _, e) = xapi(api, &["ado", &out]);
    assert!(!ok && e.contains("existing tag found: out-socks"), "{e}");
    let (ok, _, e) = xapi(api, &["rmo", "out-socks"]);
    assert!(ok, "{e}");
    let l = xjson(api, &["lso"]);
    assert!(!l.to_string().contains("out-socks"), "{l}");

    // Users: unknown inbound, bad id, duplicate (emails compare case-insensitively).
    let users = |tag: &str, id: &str, email: &str| {
        json!({"inbounds": [{"tag": tag, "port": vport, "protocol": "vless",
               "settings": {"decryption": "none", "clients": [{"id": id, "email": email}]}}]})
    };
    let f = write_json(
        dir.path(),
        "u1.json",
        &users("nope", "5f1c2a4e-0000-4000-8000-000000000002", "u2@x"),
    );
    let (_, o, _) = xapi(api, &["adu", &f]);
    assert!(
        o.contains("app/proxyman/command: failed to get handler: nope > app/proxyman/inbound: handler not found: nope"),
        "{o}"
    );
    let f = write_json(
        dir.path(),
        "u2.json",
        &users("vl", "5f1c2a4e-0000-4000-8000-000000000003", "U1@X"),
    );
    let (_, o, _) = xapi(api, &["adu", &f]);
    assert!(o.contains("proxy/vless: User U1@X already exists."), "{o}");
    let (_, o, _) = xapi(api, &["rmu", "-tag", "vl", "ghost@x"]);
    assert!(o.contains("proxy/vless: User ghost@x not found."), "{o}");
    let (_, o, _) = xapi(api, &["rmu", "-tag", "api-in", "u1@x"]);
    assert!(
        o.contains("app/proxyman/command: proxy is not a UserManager"),
        "{o}"
    );

    // An inbound on a busy port: an error, and nothing of it stays registered.
    let _hold = std::net::TcpListener::bind(("127.0.0.1", busy_port)).unwrap();
    let f = write_json(
        dir.path(),
        "busy.json",
        &json!({"inbounds": [{"tag": "busy", "listen": "127.0.0.1", "port": busy_port,
                              "protocol": "vless", "settings": {"decryption": "none", "clients": []}}]}),
    );
    let (ok, _, e) = xapi(api, &["adi", &f]);
    assert!(!ok && e.contains("address already in use"), "{e}");
    let l = xjson(api, &["lsi", "--isOnlyTags=true"]);
    assert!(!l.to_string().contains("busy"), "{l}");
    // An existing tag.
    let f = write_json(
        dir.path(),
        "dup.json",
        &json!({"inbounds": [{"tag": "vl", "listen": "127.0.0.1", "port": free_port(),
                              "protocol": "vless", "settings": {"decryption": "none", "clients": []}}]}),
    );
    let (ok, _, e) = xapi(api, &["adi", &f]);
    assert!(
        !ok && e.contains("app/proxyman/inbound: existing tag found: vl"),
        "{e}"
    );

    // The running config is unchanged by all of it: the first user still works as listed.
    let u = xjson(api, &["inbounduser", "-tag", "vl"]);
    assert_eq!(u["users"].as_array().map(Vec::len), Some(1), "{u}");
    assert_eq!(u["users"][0]["email"], "u1@x");
    drop(server);
}

/// QueryStats with reset, called again and again while a user's bytes are spliced through a
/// plain VLESS inbound: every byte is reported exactly once across the resets.
#[test]
fn resetting_queries_lose_and_double_no_byte() {
    let echo = echo_server();
    let (api, legacy, vport, cport) = (free_port(), free_port(), free_port(), free_port());
    let id = "5f1c2a4e-0000-4000-8000-000000000009";
    let _server = ferry(
        &api_config(
            api,
            legacy,
            vec![
                json!({"tag": "vl", "listen": "127.0.0.1", "port": vport, "protocol": "vless",
                        "settings": {"decryption": "none", "clients": [{"id": id, "email": "s@x"}]}}),
            ],
        ),
        &[api, vport],
    );
    let _client = ferry(
        &json!({
            "inbounds": [{"tag": "c", "listen": "127.0.0.1", "port": cport, "protocol": "dokodemo-door",
                          "settings": {"address": "127.0.0.1", "port": echo.port()}}],
            "outbounds": [{"protocol": "vless", "settings": {"address": "127.0.0.1", "port": vport, "id": id, "encryption": "none"}}]
        })
        .to_string(),
        &[cport],
    );
    let total: usize = 24 << 20;
    let want = total as u64;
    let data = pattern(total, 5);
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let poll = {
        let done = done.clone();
        std::thread::spawn(move || {
            let (mut up, mut down, mut calls, mut after) = (0u64, 0u64, 0, 0);
            loop {
                let last = done.load(std::sync::atomic::Ordering::Acquire);
                let q = xjson(api, &["statsquery", "-pattern", "user>>>s@x>>>", "-reset"]);
                for (n, v) in stats_of(&q) {
                    if n.ends_with("uplink") {
                        up += v;
                    } else {
                        down += v;
                    }
                }
                calls += 1;
                // The relay adds a chunk just after writing it: the client may have read the
                // last bytes a moment before they are counted.
                if last && ((up, down) == (want, want) || after == 50) {
                    return (up, down, calls);
                }
                if last {
                    after += 1;
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        })
    };
    let s = TcpStream::connect(("127.0.0.1", cport)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut w = s.try_clone().unwrap();
    let out = data.clone();
    let writer = std::thread::spawn(move || {
        for c in out.chunks(1 << 20) {
            w.write_all(c).unwrap();
            std::thread::sleep(Duration::from_millis(40));
        }
    });
    let mut got = vec![0u8; total];
    let mut r = s;
    r.read_exact(&mut got).unwrap();
    writer.join().unwrap();
    assert!(got == data, "echo intact");
    done.store(true, std::sync::atomic::Ordering::Release);
    let (up, down, calls) = poll.join().unwrap();
    assert!(
        calls > 5,
        "only {calls} resetting queries ran during the transfer"
    );
    assert_eq!((up, down), (want, want), "after {calls} resets");
}

/// A connection to 127.0.0.1:`port` from the local address `from`.
fn connect_from(from: [u8; 4], port: u16) -> TcpStream {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.bind(&std::net::SocketAddr::from((from, 0)).into())
        .unwrap();
    s.connect(&std::net::SocketAddr::from(([127, 0, 0, 1], port)).into())
        .unwrap();
    s.into()
}

/// Whether a connection from `from` through `port` echoes within two seconds.
fn echoes_from(from: [u8; 4], port: u16) -> bool {
    let mut s = connect_from(from, port);
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let data = pattern(500, 3);
    if s.write_all(&data).is_err() {
        return false;
    }
    let mut got = vec![0u8; data.len()];
    s.read_exact(&mut got).is_ok() && got == data
}

/// Routing rules through `xray api`: a source IP blocked (`sib`, as panels block abusers),
/// listed, removed; a rule naming an outbound that does not exist refused. The API's own
/// rule (the older form) keeps working throughout.
#[test]
fn xray_api_routing_rules() {
    let echo = echo_server();
    let (api, legacy, dport) = (free_port(), free_port(), free_port());
    let mut cfg: Value = serde_json::from_str(&api_config(
        api,
        legacy,
        vec![
            json!({"tag": "d", "listen": "127.0.0.1", "port": dport, "protocol": "dokodemo-door",
                    "settings": {"address": "127.0.0.1", "port": echo.port()}}),
        ],
    ))
    .unwrap();
    cfg["outbounds"]
        .as_array_mut()
        .unwrap()
        .push(json!({"tag": "blocked", "protocol": "blackhole"}));
    let _server = ferry(&cfg.to_string(), &[api, legacy, dport]);
    assert!(echoes_from([127, 0, 0, 2], dport));

    let (ok, out, err) = xapi(
        api,
        &["sib", "-outbound=blocked", "-inbound=d", "127.0.0.2"],
    );
    assert!(ok, "sib: {out}{err}");
    assert!(!echoes_from([127, 0, 0, 2], dport), "a blocked source");
    assert!(echoes_from([127, 0, 0, 3], dport), "another source");
    let l = xjson(api, &["lsrules"]);
    assert!(l.to_string().contains("sourceIpBlock"), "{l}");
    // The older form's API rule is still there.
    let q = xjson(legacy, &["statsquery", "-pattern", "inbound>>>d>>>"]);
    assert_eq!(stats_of(&q).len(), 2, "{q}");

    let (ok, out, err) = xapi(api, &["rmrules", "sourceIpBlock"]);
    assert!(ok, "rmrules: {out}{err}");
    assert!(echoes_from([127, 0, 0, 2], dport), "unblocked");

    let dir = tempdir::Dir::new("api-rules");
    let f = write_json(
        dir.path(),
        "r.json",
        &json!({"routing": {"rules": [{"inboundTag": ["d"], "outboundTag": "nowhere", "ruleTag": "x"}]}}),
    );
    let (ok, _, err) = xapi(api, &["adrules", "-append", &f]);
    assert!(!ok && err.contains("no outbound is tagged"), "{err}");
    let l = xjson(api, &["lsrules"]);
    assert!(
        !l.to_string().contains("\"x\""),
        "refused rules are not added: {l}"
    );
}

/// Which greeting server a connection through `port` reaches (its first byte), or "closed".
fn reached(port: u16) -> String {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return "refused".into();
    };
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.write_all(b"x");
    let mut b = [0u8; 1];
    match s.read(&mut b) {
        Ok(1) => String::from_utf8_lossy(&b).into_owned(),
        _ => "closed".into(),
    }
}

/// Balancers through `xray api bi` / `bo`, the same scenario against Xray and against Ferry
/// with the same config: the balancer's candidates and override as GetBalancerInfo reports
/// them, traffic following an override (inside the selector, outside it, to a tag no outbound
/// has: the connection closes), the override surviving RemoveRule, cleared with `-r`, and
/// Xray's "cannot find tag" for an unknown balancer; balancers added with rules through
/// `adrules` (appended, a duplicate and a missing one refused with Xray's texts, then all
/// replaced: the old balancers are gone). The `bi -json` answers of both must be the same.
#[test]
fn xray_api_balancer_info_and_override() {
    let (a, b, d) = (
        echo_server_greeting(b"A"),
        echo_server_greeting(b"B"),
        echo_server_greeting(b"D"),
    );
    let freedom = |tag: &str, to: std::net::SocketAddr| {
        json!({"tag": tag, "protocol": "freedom", "settings": {"redirect": to.to_string(),
               "finalRules": [{"action": "allow", "ip": ["127.0.0.0/8"]}]}})
    };
    let config = |api: u16, port: u16, port2: u16| {
        json!({
            "log": {"loglevel": "warning"},
            "api": {"tag": "api", "listen": format!("127.0.0.1:{api}"), "services": ["RoutingService"]},
            "inbounds": [{"tag": "in", "listen": "127.0.0.1", "port": port, "protocol": "dokodemo-door",
                          "settings": {"address": "127.0.0.1", "port": 9}},
                         {"tag": "in2", "listen": "127.0.0.1", "port": port2,
                          "protocol": "dokodemo-door", "settings": {"address": "127.0.0.1", "port": 9}}],
            "outbounds": [freedom("direct", d), freedom("proxy-b", b), freedom("proxy-a", a)],
            "routing": {
                "rules": [{"inboundTag": ["in"], "balancerTag": "rr"},
                          {"inboundTag": ["none"], "outboundTag": "direct", "ruleTag": "other"}],
                "balancers": [
                    {"tag": "rr", "selector": ["proxy-"], "strategy": {"type": "roundRobin"}},
                    {"tag": "lp", "selector": ["proxy-"], "strategy": {"type": "leastPing"}},
                    {"tag": "ll", "selector": ["proxy-"], "strategy": {"type": "leastLoad"}},
                    {"tag": "rd", "selector": ["proxy-", "dir"]}]},
            // Probes fail (the greeting servers speak no HTTP): nothing is alive.
            "observatory": {"subjectSelector": ["proxy-"], "probeUrl": "http://probe.test/",
                            "probeInterval": "1h"}
        })
        .to_string()
    };
    let scenario = |name: &str, api: u16, port: u16, in2: u16, p: &Proc| -> Vec<Value> {
        let ctx = |what: &str| format!("{name}: {what}\n{}", p.output());
        let bi = |tag: &str| xjson(api, &["bi", "-json", tag]);
        let bo = |args: &[&str]| {
            let mut v = vec!["bo"];
            v.extend_from_slice(args);
            let (ok, out, err) = xapi(api, &v);
            assert!(ok, "{}", ctx(&format!("bo {args:?}: {out}{err}")));
        };
        let through = |n: usize| (0..n).map(|_| reached(port)).collect::<Vec<_>>();
        let mut answers = Vec::new();

        let info = bi("rr");
        assert_eq!(
            info["balancer"]["principleTarget"]["tag"],
            json!(["proxy-a", "proxy-b"]),
            "{}",
            ctx(&info.to_string())
        );
        assert_eq!(info["balancer"]["override"], json!({}), "{info}");
        answers.push(info);
        assert_eq!(through(4), ["A", "B", "A", "B"], "{}", ctx("round robin"));

        bo(&["-b", "rr", "proxy-b"]);
        let info = bi("rr");
        assert_eq!(info["balancer"]["override"]["target"], "proxy-b", "{info}");
        answers.push(info);
        assert_eq!(
            through(3),
            ["B", "B", "B"],
            "{}",
            ctx("overridden to proxy-b")
        );

        // A target outside the selector is taken as well.
        bo(&["-b", "rr", "direct"]);
        assert_eq!(through(2), ["D", "D"], "{}", ctx("overridden to direct"));
        // RemoveRule keeps the balancers (and their overrides).
        let (ok, out, err) = xapi(api, &["rmrules", "other"]);
        assert!(ok, "{}", ctx(&format!("rmrules: {out}{err}")));
        assert_eq!(through(1), ["D"], "{}", ctx("after RemoveRule"));
        answers.push(bi("rr"));

        // A target no outbound has: the connection closes (no default outbound).
        bo(&["-b", "rr", "ghost"]);
        assert_eq!(through(1), ["closed"], "{}", ctx("overridden to ghost"));
        answers.push(bi("rr"));

        // Cleared: round robin again, where it left off.
        bo(&["-b", "rr", "-r"]);
        assert_eq!(through(2), ["A", "B"], "{}", ctx("override removed"));
        answers.push(bi("rr"));

        for args in [&["bi", "nope"][..], &["bo", "-b", "nope", "proxy-a"]] {
            let (ok, _, err) = xapi(api, args);
            assert!(
                !ok && err.contains("code = Unknown desc = app/router: cannot find tag"),
                "{}",
                ctx(&format!("{args:?}: {err}"))
            );
        }
        for tag in ["lp", "ll", "rd"] {
            answers.push(bi(tag));
        }

        // Balancers added with rules (AddRule): appended, then everything replaced.
        let dir = tempdir::Dir::new("api-balancer-rules");
        let adrules = |name: &str, append: bool, routing: Value| {
            let f = write_json(dir.path(), name, &json!({ "routing": routing }));
            let mut args = vec!["adrules"];
            if append {
                args.push("-append");
            }
            args.push(&f);
            let (ok, out, err) = xapi(api, &args);
            (ok, format!("{out}{err}"))
        };
        assert_eq!(reached(in2), "D", "{}", ctx("in2 before its rule"));
        let (ok, e) = adrules(
            "ghost.json",
            true,
            json!({"rules": [{"inboundTag": ["in2"], "balancerTag": "ghost-bal"}]}),
        );
        assert!(
            !ok && e.contains("app/router: balancer ghost-bal not found"),
            "{}",
            ctx(&e)
        );
        let to_b = json!({"rules": [{"inboundTag": ["in2"], "balancerTag": "only-b", "ruleTag": "to-b"}],
                          "balancers": [{"tag": "only-b", "selector": ["proxy-b"]}]});
        let (ok, e) = adrules("to-b.json", true, to_b.clone());
        assert!(ok, "{}", ctx(&e));
        assert_eq!(reached(in2), "B", "{}", ctx("in2 through only-b"));
        answers.push(bi("only-b"));
        let (ok, e) = adrules("to-b.json", true, to_b);
        assert!(
            !ok && e.contains("app/router: duplicate balancer tag"),
            "{}",
            ctx(&e)
        );
        let (ok, e) = adrules(
            "replace.json",
            false,
            json!({"rules": [{"inboundTag": ["in"], "balancerTag": "rr2"}],
                   "balancers": [{"tag": "rr2", "selector": ["proxy-a"], "strategy": {"type": "roundRobin"}}]}),
        );
        assert!(ok, "{}", ctx(&e));
        assert_eq!(through(2), ["A", "A"], "{}", ctx("in through rr2"));
        assert_eq!(
            reached(in2),
            "D",
            "{}",
            ctx("in2 after the rules were replaced")
        );
        let (ok, _, err) = xapi(api, &["bi", "rr"]);
        assert!(
            !ok && err.contains("cannot find tag"),
            "{}",
            ctx(&format!("rr replaced: {err}"))
        );
        answers.push(bi("rr2"));
        answers
    };

    let (xapi_port, xin, xin2) = (free_port(), free_port(), free_port());
    let x = spawn_with_config(
        &peer("xray"),
        "xray",
        &config(xapi_port, xin, xin2),
        &["run", "-c", "{config}"],
    );
    wait_listening(xapi_port, &x);
    wait_listening(xin, &x);
    wait_listening(xin2, &x);
    let want = scenario("xray", xapi_port, xin, xin2, &x);
    drop(x);

    let (fapi, fin, fin2) = (free_port(), free_port(), free_port());
    let f = ferry(&config(fapi, fin, fin2), &[fapi, fin, fin2]);
    let got = scenario("ferry", fapi, fin, fin2, &f);
    assert_eq!(
        got,
        want,
        "GetBalancerInfo answers (Ferry, then Xray)\n{}",
        f.output()
    );
    // The answers as Xray gave them: leastPing with nothing alive names "", leastLoad none,
    // random every candidate.
    assert_eq!(want[5]["balancer"]["principleTarget"]["tag"], json!([""]));
    assert_eq!(want[6]["balancer"]["principleTarget"], json!({}));
    assert_eq!(
        want[7]["balancer"]["principleTarget"]["tag"],
        json!(["direct", "proxy-a", "proxy-b"])
    );
}

const REALITY_PRIVATE: &str = "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA";
const REALITY_PUBLIC: &str = "B6N8vBQgk8i3VdwbEOhstCY3StFqqFPtC9_AsrhtHHw";

/// `realitySettings` of an inbound as 3x-ui writes them (with its `settings` half for share
/// links, which Xray ignores), the camouflage target on `target`.
fn reality_server_3xui(target: u16) -> Value {
    json!({"show": false, "xver": 0, "target": format!("127.0.0.1:{target}"),
           "serverNames": ["reality.test", "www.reality.test"], "privateKey": REALITY_PRIVATE,
           "minClientVer": "", "maxClientVer": "", "maxTimeDiff": 0,
           "shortIds": ["0123456789abcdef", "a1", ""], "mldsa65Seed": "",
           "settings": {"publicKey": REALITY_PUBLIC, "fingerprint": "chrome", "serverName": "",
                        "spiderX": "/", "mldsa65Verify": ""}})
}

/// A VLESS outbound of an Xray client over `stream`.
fn xray_vless_out(tag: &str, port: u16, id: &str, flow: &str, stream: Value) -> Value {
    json!({"tag": tag, "protocol": "vless",
           "settings": {"vnext": [{"address": "127.0.0.1", "port": port,
                                   "users": [{"id": id, "encryption": "none", "flow": flow}]}]},
           "streamSettings": stream})
}

/// Inbounds added through `xray api adi` as 3x-ui writes them: VLESS + Vision over RAW with
/// REALITY, VLESS over XHTTP with REALITY, VLESS over plain XHTTP (packet-up); an Xray client
/// carries 1 MB through each, byte-exact, and the added inbounds' counters saw the bytes.
/// The same settings as outbounds (`xray api ado`) take Ferry's own client through them.
/// A splithttp config with the 2026 padding obfuscation comes through the API too (its wire is
/// `interop_xhttp`'s).
#[test]
fn xray_api_adds_reality_and_xhttp_inbounds() {
    let echo = echo_server();
    let (api, legacy, target) = (free_port(), free_port(), free_port());
    let (rport, xport, pport) = (free_port(), free_port(), free_port());
    let dir = tempdir::Dir::new("api-reality");
    // The camouflage target: nginx with HTTPS for reality.test (TLS 1.2 and 1.3).
    let g = ferry::transport::tls::generate_self_signed(&["reality.test".to_string()], 2).unwrap();
    std::fs::write(dir.path().join("cert.pem"), &g.cert_pem).unwrap();
    std::fs::write(dir.path().join("key.pem"), &g.key_pem).unwrap();
    let site = tls_site(
        target,
        "reality.test",
        &dir.path().join("cert.pem"),
        &dir.path().join("key.pem"),
        "target",
    );
    let _nginx = nginx(dir.path(), Nginx::Http(&site), &[target]);
    // Two entries for the outbounds added below (Ferry as the REALITY client of itself).
    let loops = [free_port(), free_port()];
    let loop_in = |i: usize| {
        json!({"tag": format!("loop{i}"), "listen": "127.0.0.1", "port": loops[i],
               "protocol": "dokodemo-door", "settings": {"address": "127.0.0.1", "port": echo.port()}})
    };
    let server = ferry(
        &api_config(api, legacy, vec![loop_in(0), loop_in(1)]),
        &[api, loops[0], loops[1]],
    );

    let ids = [
        "7d3a4c1e-1111-4a2b-9c3d-000000000001",
        "7d3a4c1e-1111-4a2b-9c3d-000000000002",
        "7d3a4c1e-1111-4a2b-9c3d-000000000003",
    ];
    let sniffing = json!({"enabled": false, "destOverride": ["http", "tls", "quic", "fakedns"],
                          "metadataOnly": false, "routeOnly": false});
    let xhttp = |mode: &str| {
        json!({"path": "/xh", "host": "", "headers": {}, "scMaxBufferedPosts": 30,
               "scMaxEachPostBytes": "1000000", "scStreamUpServerSecs": "20-80",
               "noSSEHeader": false, "xPaddingBytes": "100-1000", "mode": mode})
    };
    let inbound = |tag: &str, port: u16, id: &str, flow: &str, stream: Value| {
        json!({"inbounds": [{"tag": tag, "listen": "127.0.0.1", "port": port, "protocol": "vless",
            "settings": {"clients": [{"id": id, "flow": flow, "email": format!("{tag}@x"),
                                      "limitIp": 0, "totalGB": 0, "expiryTime": 0, "enable": true}],
                         "decryption": "none", "fallbacks": []},
            "streamSettings": stream, "sniffing": sniffing}]})
    };
    let files = [
        inbound(
            "in-reality",
            rport,
            ids[0],
            "xtls-rprx-vision",
            json!({"network": "tcp", "security": "reality", "externalProxy": [],
                   "realitySettings": reality_server_3xui(target),
                   "tcpSettings": {"acceptProxyProtocol": false, "header": {"type": "none"}}}),
        ),
        inbound(
            "in-xhttp-reality",
            xport,
            ids[1],
            "",
            json!({"network": "xhttp", "security": "reality", "externalProxy": [],
                   "realitySettings": reality_server_3xui(target), "xhttpSettings": xhttp("auto")}),
        ),
        inbound(
            "in-xhttp",
            pport,
            ids[2],
            "",
            json!({"network": "xhttp", "security": "none", "externalProxy": [],
                   "xhttpSettings": xhttp("packet-up")}),
        ),
    ];
    for (i, f) in files.iter().enumerate() {
        let path = write_json(dir.path(), &format!("in{i}.json"), f);
        let (ok, out, err) = xapi(api, &["adi", &path]);
        assert!(ok, "adi {f}: {out}{err}\n{}", server.output());
    }
    for p in [rport, xport, pport] {
        wait_listening(p, &server);
    }
    let l = xjson(api, &["lsi", "--isOnlyTags=true"]);
    assert!(l.to_string().contains("in-xhttp-reality"), "{l}");

    // An Xray client: one entry port per outbound.
    let reality_client = json!({"serverName": "reality.test", "fingerprint": "chrome",
        "publicKey": REALITY_PUBLIC, "shortId": "a1", "spiderX": "/"});
    let entries = [free_port(), free_port(), free_port()];
    let outs = [
        xray_vless_out(
            "o0",
            rport,
            ids[0],
            "xtls-rprx-vision",
            json!({"network": "raw", "security": "reality", "realitySettings": reality_client}),
        ),
        xray_vless_out(
            "o1",
            xport,
            ids[1],
            "",
            json!({"network": "xhttp", "security": "reality", "realitySettings": reality_client,
                   "xhttpSettings": {"path": "/xh", "mode": "auto"}}),
        ),
        xray_vless_out(
            "o2",
            pport,
            ids[2],
            "",
            json!({"network": "xhttp", "xhttpSettings": {"path": "/xh", "mode": "packet-up"}}),
        ),
    ];
    let client_cfg = json!({
        "log": {"loglevel": "warning"},
        "inbounds": (0..3).map(|i| json!({"tag": format!("c{i}"), "listen": "127.0.0.1",
            "port": entries[i], "protocol": "dokodemo-door",
            "settings": {"address": "127.0.0.1", "port": echo.port()}})).collect::<Vec<_>>(),
        "outbounds": outs,
        "routing": {"rules": (0..3).map(|i| json!({"inboundTag": [format!("c{i}")],
            "outboundTag": format!("o{i}")})).collect::<Vec<_>>()}
    });
    let client = spawn_with_config(
        &peer("xray"),
        "xray",
        &client_cfg.to_string(),
        &["run", "-c", "{config}"],
    );
    for p in entries {
        wait_listening(p, &client);
    }
    let data = pattern(1 << 20, 7);
    for (i, tag) in ["in-reality", "in-xhttp-reality", "in-xhttp"]
        .iter()
        .enumerate()
    {
        let s = TcpStream::connect(("127.0.0.1", entries[i])).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let got = try_echo_through(s, &data).unwrap_or_default();
        assert!(
            got == data,
            "{tag}: {} of {} bytes echoed\n{}\n{}",
            got.len(),
            data.len(),
            server.output(),
            client.output()
        );
        let q = xjson(
            api,
            &["statsquery", "-pattern", &format!("inbound>>>{tag}>>>")],
        );
        for (name, v) in stats_of(&q) {
            assert!(v >= data.len() as u64, "{tag}: {name} = {v}: {q}");
        }
        assert_eq!(stats_of(&q).len(), 2, "{q}");
    }

    // The same REALITY and XHTTP settings as outbounds (xray api ado, as 3x-ui's AddOutbound
    // sends them), routed to with adrules: Ferry's client carries bytes to its own inbounds.
    let ado = json!({"outbounds": [
        xray_vless_out("via-reality", rport, ids[0], "xtls-rprx-vision",
            json!({"network": "raw", "security": "reality", "realitySettings": reality_client})),
        xray_vless_out("via-xhttp-reality", xport, ids[1], "",
            json!({"network": "xhttp", "security": "reality", "realitySettings": reality_client,
                   "xhttpSettings": {"path": "/xh", "mode": "stream-up"}})),
    ]});
    let path = write_json(dir.path(), "ado.json", &ado);
    let (ok, out, err) = xapi(api, &["ado", &path]);
    assert!(ok, "ado: {out}{err}\n{}", server.output());
    let path = write_json(
        dir.path(),
        "rules.json",
        &json!({"routing": {"rules": [
            {"inboundTag": ["loop0"], "outboundTag": "via-reality"},
            {"inboundTag": ["loop1"], "outboundTag": "via-xhttp-reality"}]}}),
    );
    let (ok, out, err) = xapi(api, &["adrules", "-append", &path]);
    assert!(ok, "adrules: {out}{err}");
    for (i, tag) in ["in-reality", "in-xhttp-reality"].iter().enumerate() {
        let s = TcpStream::connect(("127.0.0.1", loops[i])).unwrap();
        let got = try_echo_through(s, &data).unwrap_or_default();
        assert!(
            got == data,
            "through the added outbound to {tag}: {} of {} bytes\n{}",
            got.len(),
            data.len(),
            server.output()
        );
        let q = xjson(
            api,
            &["statsquery", "-pattern", &format!("inbound>>>{tag}>>>")],
        );
        for (name, v) in stats_of(&q) {
            assert!(v >= 2 * data.len() as u64, "{tag}: {name} = {v}: {q}");
        }
    }

    // The obfuscation options as `xray api adi` encodes them are taken.
    let mut obfs = files[2].clone();
    obfs["inbounds"][0]["tag"] = json!("in-obfs");
    obfs["inbounds"][0]["port"] = json!(free_port());
    let x = &mut obfs["inbounds"][0]["streamSettings"]["xhttpSettings"];
    x["xPaddingObfsMode"] = json!(true);
    x["xPaddingPlacement"] = json!("cookie");
    x["xPaddingMethod"] = json!("tokenish");
    let path = write_json(dir.path(), "obfs.json", &obfs);
    let (ok, _, err) = xapi(api, &["adi", &path]);
    assert!(ok, "{err}");
    let l = xjson(api, &["lsi", "--isOnlyTags=true"]);
    assert!(l.to_string().contains("in-obfs"), "{l}");
}

/// 3x-ui edits an inbound by removing it and adding it again, same tag and port, at once:
/// each time the port is bound again by the new inbound (the one user of the new config is
/// served, the old config's is refused), bytes are carried exactly, and the new inbound's
/// counters start from what it carries.
#[test]
fn removing_and_re_adding_an_inbound_on_the_same_port() {
    let echo = echo_server();
    let (api, legacy, port) = (free_port(), free_port(), free_port());
    let server = ferry(&api_config(api, legacy, vec![]), &[api]);
    let dir = tempdir::Dir::new("api-edit");
    let id = |n: usize| format!("3c0a9e2b-7777-4d1e-8f00-{n:012}");
    let inbound = |n: usize| {
        json!({"inbounds": [{"tag": "inbound-edit", "listen": "127.0.0.1", "port": port,
            "protocol": "vless",
            "settings": {"clients": [{"id": id(n), "flow": "", "email": format!("user{n}@x")}],
                         "decryption": "none", "fallbacks": []},
            "streamSettings": {"network": "tcp", "security": "none",
                               "tcpSettings": {"acceptProxyProtocol": false, "header": {"type": "none"}}},
            "sniffing": {"enabled": true, "destOverride": ["http", "tls"]}}]})
    };
    // One Ferry client per user (a dokodemo-door entry in front of a VLESS outbound).
    let clients: Vec<(u16, Proc)> = (0..4)
        .map(|n| {
            let entry = free_port();
            let c = ferry(
                &json!({
                    "inbounds": [{"listen": "127.0.0.1", "port": entry, "protocol": "dokodemo-door",
                                  "settings": {"address": "127.0.0.1", "port": echo.port()}}],
                    "outbounds": [{"protocol": "vless", "settings": {"address": "127.0.0.1",
                                   "port": port, "id": id(n), "encryption": "none"}}]
                })
                .to_string(),
                &[entry],
            );
            (entry, c)
        })
        .collect();
    let path = write_json(dir.path(), "in0.json", &inbound(0));
    let (ok, out, err) = xapi(api, &["adi", &path]);
    assert!(ok, "{out}{err}");
    wait_listening(port, &server);
    assert!(echoes(clients[0].0, 10_000), "{}", server.output());
    // A connection of the first config, open across the edits.
    let mut live = TcpStream::connect(("127.0.0.1", clients[0].0)).unwrap();
    live.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut b = [0u8; 4];
    live.write_all(b"ping").unwrap();
    live.read_exact(&mut b).unwrap();

    for n in 1..4 {
        let path = write_json(dir.path(), &format!("in{n}.json"), &inbound(n));
        let (ok, out, err) = xapi(api, &["rmi", "inbound-edit"]);
        assert!(ok, "rmi #{n}: {out}{err}");
        let (ok, out, err) = xapi(api, &["adi", &path]);
        assert!(
            ok,
            "adi #{n} on the same port: {out}{err}\n{}",
            server.output()
        );
        let data = pattern(300_000 + n, n as u64);
        let s = TcpStream::connect(("127.0.0.1", clients[n].0)).unwrap();
        let got = try_echo_through(s, &data).unwrap_or_default();
        assert!(
            got == data,
            "edit #{n}: {} of {} bytes through the new inbound\n{}",
            got.len(),
            data.len(),
            server.output()
        );
        assert!(
            !echoes(clients[n - 1].0, 1000),
            "edit #{n}: the old config's user is still served"
        );
        let u = xjson(api, &["inbounduser", "-tag", "inbound-edit"]);
        assert_eq!(u["users"].as_array().map(Vec::len), Some(1), "{u}");
        assert_eq!(u["users"][0]["email"], format!("user{n}@x"), "{u}");
        // The relay counts a chunk just after writing it: wait a moment for the last one.
        let want = vec![
            (
                format!("user>>>user{n}@x>>>traffic>>>downlink"),
                data.len() as u64,
            ),
            (
                format!("user>>>user{n}@x>>>traffic>>>uplink"),
                data.len() as u64,
            ),
        ];
        let t = Instant::now();
        loop {
            let q = xjson(
                api,
                &["statsquery", "-pattern", &format!("user>>>user{n}@x>>>")],
            );
            if stats_of(&q) == want {
                break;
            }
            assert!(t.elapsed() < Duration::from_secs(3), "{q}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let l = xjson(api, &["lsi", "--isOnlyTags=true"]);
    assert_eq!(l.to_string().matches("inbound-edit").count(), 1, "{l}");
    // As in Xray, removing an inbound stops its listener, not its connections.
    let data = pattern(100_000, 9);
    live.write_all(&data).unwrap();
    let mut got = vec![0u8; data.len()];
    live.read_exact(&mut got).unwrap();
    assert!(got == data, "the first config's live connection");
}
