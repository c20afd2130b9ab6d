//! Ferry's gRPC API driven by the panels' own client libraries from the registries
//! (the panels' own API clients): Hiddify's `xtlsapi` (Python, grpcio) and Remnawave's
//! `@remnawave/xtls-sdk` (Node, nice-grpc), installed by `scripts/peers.sh api-clients`. Each
//! script adds users of VMess, VLESS, Trojan and Shadowsocks (and 2022) inbounds, pushes traffic as them
//! through a Ferry client, reads the counters as the panel does, and removes them; the xtlsapi
//! one then adds and removes 1,000 users while another user's transfer runs.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::common;
use common::*;

use std::process::{Command, Stdio};

use serde_json::json;

const VM: &str = "6fd4b5a2-0c3e-4a8e-9d6c-1b2a3c4d5e6f";
const VL: &str = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";
/// Shadowsocks 2022 keys (16 bytes, base64): the server's identity PSK and a user's.
const SS22_SERVER: &str = "MTIzNDU2Nzg5MDEyMzQ1Ng==";
const SS22_USER: &str = "YWJjZGVmZ2hpamtsbW5vcA==";

/// A server with empty VMess, VLESS, Trojan and Shadowsocks inbounds and the API (through the
/// older form: a tunnel inbound routed to `api.tag`, as Remnawave and 3x-ui configure it), and
/// a Ferry client with one entry port per server inbound. Returns (API port, entry ports).
fn setup() -> (u16, serde_json::Value, Proc, Proc) {
    let echo = echo_server();
    let api = free_port();
    let ports: Vec<u16> = (0..10).map(|_| free_port()).collect();
    let (svm, svl, str_, sss) = (ports[0], ports[1], ports[2], ports[3]);
    let inbound = |tag: &str, port: u16, protocol: &str, settings: serde_json::Value| json!({"tag": tag, "listen": "127.0.0.1", "port": port, "protocol": protocol, "settings": settings});
    let server = ferry(
        &json!({
            "api": {"tag": "api", "services": ["HandlerService", "StatsService", "RoutingService"]},
            "stats": {},
            "policy": {"levels": {"0": {"statsUserUplink": true, "statsUserDownlink": true, "statsUserOnline": true}},
                       "system": {"statsInboundUplink": true, "statsInboundDownlink": true}},
            "inbounds": [
                {"tag": "api-in", "listen": "127.0.0.1", "port": api, "protocol": "dokodemo-door",
                 "settings": {"address": "127.0.0.1"}},
                inbound("vm", svm, "vmess", json!({"clients": []})),
                inbound("vl", svl, "vless", json!({"clients": [], "decryption": "none"})),
                inbound("tr", str_, "trojan", json!({"clients": []})),
                inbound("ss", sss, "shadowsocks", json!({"clients": []})),
                // A 2022 inbound takes users only when configured with some (in Xray too: with no
                // clients it is a single-key server, no user manager).
                inbound("s22", ports[8], "shadowsocks", json!({"method": "2022-blake3-aes-128-gcm", "password": SS22_SERVER,
                    "clients": [{"password": "cXFxcXFxcXFxcXFxcXFxcQ==", "email": "first@x"}]})),
            ],
            "outbounds": [{"tag": "direct", "protocol": "freedom","settings":{"finalRules":[{"action":"allow","ip":["127.0.0.0/8","::1"]}]}}],
            "routing": {"rules": [{"inboundTag": ["api-in"], "outboundTag": "api"}]}
        })
        .to_string(),
        &[api, svm, svl, str_, sss, ports[8]],
    );
    let (cvm, cvl, ctr, css) = (ports[4], ports[5], ports[6], ports[7]);
    let entry = |tag: &str, port: u16| {
        json!({"tag": tag, "listen": "127.0.0.1", "port": port, "protocol": "dokodemo-door",
               "settings": {"address": "127.0.0.1", "port": echo.port()}})
    };
    let out = |tag: &str, protocol: &str, settings: serde_json::Value| json!({"tag": tag, "protocol": protocol, "sendThrough": "127.0.0.2", "settings": settings});
    let rule = |t: &str| json!({"inboundTag": [t], "outboundTag": t});
    let client = ferry(
        &json!({
            "inbounds": [entry("vm", cvm), entry("vl", cvl), entry("tr", ctr), entry("ss", css), entry("s22", ports[9])],
            "outbounds": [
                out("vm", "vmess", json!({"address": "127.0.0.1", "port": svm, "id": VM, "security": "aes-128-gcm"})),
                out("vl", "vless", json!({"address": "127.0.0.1", "port": svl, "id": VL, "encryption": "none"})),
                out("tr", "trojan", json!({"address": "127.0.0.1", "port": str_, "password": "trojan-pw"})),
                out("ss", "shadowsocks", json!({"address": "127.0.0.1", "port": sss, "method": "aes-128-gcm", "password": "ss-pw"})),
                out("s22", "shadowsocks", json!({"address": "127.0.0.1", "port": ports[8], "method": "2022-blake3-aes-128-gcm",
                                                  "password": format!("{SS22_SERVER}:{SS22_USER}")})),
            ],
            "routing": {"rules": [rule("vm"), rule("vl"), rule("tr"), rule("ss"), rule("s22")]}
        })
        .to_string(),
        &[cvm, cvl, ctr, css, ports[9]],
    );
    (
        api,
        json!({"vm": cvm, "vl": cvl, "tr": ctr, "ss": css, "s22": ports[9]}),
        server,
        client,
    )
}

/// A self-signed certificate pair written by `ferry tls cert` into `dir`: (cert, key) paths.
fn cert(dir: &tempdir::Dir) -> (String, String) {
    let prefix = dir.path().join("cert");
    let o = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(["tls", "cert", "--domain", "test.local", "--file"])
        .arg(&prefix)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    (
        format!("{}.crt", prefix.display()),
        format!("{}.key", prefix.display()),
    )
}

fn script(name: &str) -> String {
    format!("{}/tests/api_clients/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn run(mut cmd: Command, server: &Proc) {
    let o = cmd.stdin(Stdio::null()).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success() && out.contains("OK"),
        "{out}\n{err}\n{}",
        server.output()
    );
    eprintln!("{out}");
}

#[test]
fn hiddify_xtlsapi_manages_users_and_reads_traffic() {
    let (api, ports, server, _client) = setup();
    let mut cmd = Command::new(peer("xtlsapi-python"));
    cmd.arg(script("xtlsapi_check.py"))
        .arg(api.to_string())
        .arg(ports.to_string());
    run(cmd, &server);
}

#[test]
fn remnawave_xtls_sdk_manages_users_and_reads_traffic() {
    let (api, ports, server, _client) = setup();
    let modules = peers_dir().join("xtls-sdk/node_modules");
    assert!(
        modules.join("@remnawave/xtls-sdk").exists(),
        "@remnawave/xtls-sdk is not installed at {}: run scripts/peers.sh api-clients",
        modules.display()
    );
    let mut cmd = Command::new("node");
    cmd.env("NODE_PATH", &modules)
        .arg(script("remnawave_check.js"))
        .arg(api.to_string())
        .arg(ports.to_string());
    run(cmd, &server);
}

/// Malformed and old-style requests through grpcio with xtlsapi's generated messages (an old
/// `ReceiverConfig` layout among them): Xray's status codes and texts, no crash, and an
/// old-layout inbound that keeps its TLS settings.
#[test]
fn bad_and_old_requests_get_xray_answers() {
    let (api, _ports, server, _client) = setup();
    let dir = tempdir::Dir::new("api-raw");
    let (crt, key) = cert(&dir);
    let mut cmd = Command::new(peer("xtlsapi-python"));
    cmd.arg(script("raw_grpc_check.py"))
        .arg(api.to_string())
        .arg(free_port().to_string())
        .arg(crt)
        .arg(key);
    run(cmd, &server);
}

/// Ferry's own `proto/` files compile (grpcio-tools) and their messages, in the current
/// layouts, are what the server decodes: an inbound with TLS and a user added and read back,
/// GetUsersStats, TestRoute and ListRule answered.
#[test]
fn ferry_proto_files_match_the_server() {
    let (api, _ports, server, _client) = setup();
    let dir = tempdir::Dir::new("api-proto");
    let (crt, key) = cert(&dir);
    let out = dir.path().join("py");
    std::fs::create_dir_all(&out).unwrap();
    let mut cmd = Command::new(peer("xtlsapi-python"));
    cmd.arg(script("proto_check.py"))
        .arg(format!("{}/proto", env!("CARGO_MANIFEST_DIR")))
        .arg(&out)
        .arg(api.to_string())
        .arg(free_port().to_string())
        .arg(crt)
        .arg(key);
    run(cmd, &server);
}

/// The API behind a TLS dokodemo-door inbound (Marzban-node) and behind one on an abstract
/// unix socket (Remnawave's node), both routed to `api.tag`: grpcio reaches it through each.
#[test]
fn api_through_tls_and_abstract_socket_inbounds() {
    let dir = tempdir::Dir::new("api-legacy");
    let (crt, key) = cert(&dir);
    let port = free_port();
    let name = format!("ferry-api-test-{}", std::process::id());
    let server = ferry(
        &json!({
            "api": {"tag": "api", "services": ["StatsService"]},
            "stats": {},
            "policy": {"system": {"statsInboundUplink": true, "statsInboundDownlink": true}},
            "inbounds": [
                {"tag": "api-tls", "listen": "127.0.0.1", "port": port, "protocol": "dokodemo-door",
                 "settings": {"address": "127.0.0.1"},
                 "streamSettings": {"security": "tls", "tlsSettings": {
                     "certificates": [{"certificateFile": crt, "keyFile": key}]}}},
                {"tag": "api-unix", "listen": format!("@{name}"), "protocol": "dokodemo-door",
                 "settings": {"address": "127.0.0.1"}}
            ],
            "outbounds": [{"protocol": "freedom","settings":{"finalRules":[{"action":"allow","ip":["127.0.0.0/8","::1"]}]}}],
            "routing": {"rules": [{"inboundTag": ["api-tls", "api-unix"], "outboundTag": "api"}]}
        })
        .to_string(),
        &[port],
    );
    let mut cmd = Command::new(peer("xtlsapi-python"));
    cmd.arg(script("legacy_check.py"))
        .arg(port.to_string())
        .arg(&crt)
        .arg(&name);
    run(cmd, &server);
}
