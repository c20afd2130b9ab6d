//! The example configs in `examples/` do what the README says: every one passes `ferry test`,
//! and each server/client pair carries bytes end to end (those with a fallback also show a
//! browser the web server behind it). The copies run on free loopback
//! ports; the REALITY target is a local nginx TLS site for the example's server name, the
//! Trojan certificate one `ferry tls cert` writes (its pin printed for the client), and the
//! servers may reach the test's loopback echo server through a `finalRules` allow, as Xray
//! configs say so.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

use crate::common::{self, *};
use crate::proxy_clients::{socks5_connect, Target};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// An example's JSON, its `//` comment lines left out.
pub(crate) fn example(name: &str) -> Value {
    let text = std::fs::read_to_string(examples().join(name)).unwrap();
    let json: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    serde_json::from_str(&json).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn ferry_test(path: &Path) -> (bool, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(["test", "-c", path.to_str().unwrap()])
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (
        o.status.success() && text.contains("Configuration OK"),
        text,
    )
}

/// A certificate for `name` written by `ferry tls cert`, and the pin it printed.
pub(crate) fn ferry_cert(dir: &Path, name: &str) -> (PathBuf, PathBuf, String) {
    let prefix = dir.join("cert");
    let o = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(["tls", "cert", "--domain", name, "--file"])
        .arg(&prefix)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8(o.stdout).unwrap();
    let pin = out
        .lines()
        .map(str::trim)
        .find(|l| l.len() == 64 && l.bytes().all(|b| b.is_ascii_hexdigit()))
        .unwrap_or_else(|| panic!("no pin in {out}"))
        .to_string();
    (
        prefix.with_extension("crt"),
        prefix.with_extension("key"),
        pin,
    )
}

/// A TLS server's example with its certificate at `cert`/`key`.
pub(crate) fn with_cert(name: &str, cert: &Path, key: &Path) -> Value {
    let mut s = example(name);
    s["inbounds"][0]["streamSettings"]["tlsSettings"]["certificates"] =
        json!([{"certificateFile": cert, "keyFile": key}]);
    s
}

#[test]
fn every_example_passes_ferry_test() {
    let dir = tempdir::Dir::new("examples-test");
    let (cert, key, _) = ferry_cert(dir.path(), "trojan.example.com");
    let mut names: Vec<String> = std::fs::read_dir(examples())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".json"))
        .collect();
    names.sort();
    assert!(names.len() >= 12, "{names:?}");
    for name in names {
        let has_cert = example(&name)
            .pointer("/inbounds/0/streamSettings/tlsSettings/certificates")
            .is_some();
        let path = if has_cert {
            // Its certificate files are the deployer's: a fresh pair stands in.
            let p = dir.path().join(&name);
            std::fs::write(&p, with_cert(&name, &cert, &key).to_string()).unwrap();
            p
        } else {
            examples().join(&name)
        };
        let (ok, text) = ferry_test(&path);
        assert!(ok, "{name}: {text}");
    }
}

/// The server's inbound on a free loopback port, and its freedom outbound allowed to reach
/// loopback (the test's echo server); returns the port.
pub(crate) fn local_server(s: &mut Value) -> u16 {
    let port = free_port();
    s["inbounds"][0]["listen"] = json!("127.0.0.1");
    s["inbounds"][0]["port"] = json!(port);
    for o in s["outbounds"].as_array_mut().unwrap() {
        if o["protocol"] == "freedom" {
            o["settings"] = json!({"finalRules": [{"action": "allow", "ip": ["127.0.0.0/8"]}]});
        }
    }
    port
}

/// The client's SOCKS inbound on a free port and its outbound aimed at `server`; returns the
/// SOCKS port.
pub(crate) fn local_client(c: &mut Value, server: u16) -> u16 {
    let port = free_port();
    c["inbounds"][0]["port"] = json!(port);
    let settings = &mut c["outbounds"][0]["settings"];
    let entry = if settings.get("vnext").is_some() {
        &mut settings["vnext"][0]
    } else {
        &mut settings["servers"][0]
    };
    entry["address"] = json!("127.0.0.1");
    entry["port"] = json!(server);
    port
}

/// 1 MiB through the client's SOCKS port to the echo server and back, byte for byte.
pub(crate) fn carries(socks: u16, what: &str) {
    if let Err(e) = try_carries(socks) {
        panic!("{what}: {e}");
    }
}

/// [`carries`], the failure returned.
pub(crate) fn try_carries(socks: u16) -> Result<(), String> {
    use std::io::{Read, Write};
    let echo = echo_server();
    let data = pattern(1 << 20, 7);
    let mut s = socks5_connect(socks, None, Target::Addr(echo)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    // A few bytes first, then the bulk: Xray's Trojan client fails a connection whose first
    // read from its inbound does not fit its header buffer ("failed to write A request
    // payload > common/buf: buffer is full"), as a 1 MiB burst makes it.
    let mut hello = [0u8; 5];
    s.write_all(b"hello")
        .and_then(|_| s.read_exact(&mut hello))
        .map_err(|e| format!("no echo of the first bytes: {e}"))?;
    if &hello != b"hello" {
        return Err(format!("the first bytes came back as {hello:?}"));
    }
    match try_echo_through(s, &data) {
        Ok(got) if got == data => Ok(()),
        Ok(got) => Err(format!("the echo differs ({} bytes back)", got.len())),
        Err(e) => Err(e.to_string()),
    }
}

/// An example pair run Ferry to Ferry (see [`pair_with`]).
fn ferry_pair(server: &str, client: &str, fallback: bool) {
    pair_with(server, client, fallback, &[(Imp::Ferry, Imp::Ferry)]);
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Imp {
    Ferry,
    Xray,
}

pub(crate) fn run(imp: Imp, cfg: &Value, ports: &[u16]) -> Proc {
    match imp {
        Imp::Ferry => common::ferry(&cfg.to_string(), ports),
        Imp::Xray => up(
            spawn_with_config(
                &peer("xray"),
                "xray",
                &cfg.to_string(),
                &["run", "-c", "{config}"],
            ),
            ports,
        ),
    }
}

/// The TLS server name a client example sends.
fn client_sni(c: &Value) -> String {
    c["outbounds"][0]["streamSettings"]["tlsSettings"]["serverName"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Runs the pair `server`/`client` once for each (server, client) implementation in `ways`:
/// a TLS server gets a fresh certificate (pinned by the client), a REALITY server a local nginx
/// target for its name, and with `fallback` a web server behind its fallback, which a browser
/// reaching the server then gets.
pub(crate) fn pair_with(server: &str, client: &str, fallback: bool, ways: &[(Imp, Imp)]) {
    for &(si, ci) in ways {
        let dir = tempdir::Dir::new("examples-pair");
        let d = dir.path();
        let mut s = example(server);
        let mut c = example(client);
        let what = format!("{server} on {si:?}, {client} on {ci:?}");
        let tls = s
            .pointer("/inbounds/0/streamSettings/tlsSettings")
            .is_some();
        let reality = s
            .pointer("/inbounds/0/streamSettings/realitySettings")
            .is_some();
        let mut keep = Vec::new();
        if tls {
            let sni = client_sni(&c);
            let (cert, key, pin) = ferry_cert(d, &sni);
            s = with_cert(server, &cert, &key);
            c["outbounds"][0]["streamSettings"]["tlsSettings"]["pinnedPeerCertSha256"] = json!(pin);
        }
        let sport = local_server(&mut s);
        if reality {
            let sni = s["inbounds"][0]["streamSettings"]["realitySettings"]["serverNames"][0]
                .as_str()
                .unwrap()
                .to_string();
            let g =
                ferry::transport::tls::generate_self_signed(std::slice::from_ref(&sni), 2).unwrap();
            std::fs::write(d.join("site.pem"), &g.cert_pem).unwrap();
            std::fs::write(d.join("site.key"), &g.key_pem).unwrap();
            let site = free_port();
            let body = tls_site(site, &sni, &d.join("site.pem"), &d.join("site.key"), "site");
            keep.push(nginx(d, Nginx::Http(&body), &[site]));
            s["inbounds"][0]["streamSettings"]["realitySettings"]["target"] =
                json!(format!("127.0.0.1:{site}"));
        }
        if fallback {
            s["inbounds"][0]["settings"]["fallbacks"] = json!([{"dest": web_server("fallback")}]);
        }
        let cport = local_client(&mut c, sport);
        let sp = run(si, &s, &[sport]);
        let cp = run(ci, &c, &[cport]);
        if let Err(e) = try_carries(cport) {
            panic!(
                "{what}: {e}\n--- server\n{}\n--- client\n{}",
                sp.output(),
                cp.output()
            );
        }
        if fallback {
            assert_eq!(browser_gets(&client_sni(&c), sport), "fallback", "{what}");
        }
    }
}

#[test]
fn the_vless_reality_vision_example_pair_carries_traffic() {
    ferry_pair(
        "vless-reality-vision-server.json",
        "vless-reality-vision-client.json",
        false,
    );
}

#[test]
fn the_vless_xhttp_reality_example_pair_carries_traffic() {
    ferry_pair(
        "vless-xhttp-reality-server.json",
        "vless-xhttp-reality-client.json",
        false,
    );
}

/// A web server on a free loopback port answering every request with `page`.
pub(crate) fn web_server(page: &'static str) -> u16 {
    let web = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = web.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in web.incoming().flatten() {
            let mut c = c;
            let _ = crate::proxy_clients::read_head(&mut c);
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                page.len()
            );
            let _ = std::io::Write::write_all(&mut c, head.as_bytes());
        }
    });
    port
}

/// What a browser gets from `https://name:port/` (curl, certificate not checked).
pub(crate) fn browser_gets(name: &str, port: u16) -> String {
    let out = Command::new(peer("curl"))
        .args(["-s", "--http1.1", "--max-time", "10", "-k", "--resolve"])
        .arg(format!("{name}:{port}:127.0.0.1"))
        .arg(format!("https://{name}:{port}/"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_vless_tls_vision_example_pair_carries_traffic_and_falls_back() {
    ferry_pair(
        "vless-tls-vision-server.json",
        "vless-tls-vision-client.json",
        true,
    );
}

#[test]
fn the_vmess_tcp_shadowsocks_aead_and_ssr_example_pairs_carry_traffic() {
    for (server, client) in [
        ("vmess-tcp-server.json", "vmess-tcp-client.json"),
        ("ss-aead-server.json", "ss-aead-client.json"),
        (
            "ss2022-multiuser-server.json",
            "ss2022-multiuser-client.json",
        ),
        ("shadowsocksr-server.json", "shadowsocksr-client.json"),
    ] {
        ferry_pair(server, client, false);
    }
}

#[test]
fn the_trojan_tls_example_pair_carries_traffic_and_falls_back() {
    ferry_pair("trojan-tls-server.json", "trojan-tls-client.json", true);
}

#[test]
fn the_shadowsocks_2022_example_pair_carries_traffic() {
    ferry_pair("ss2022-server.json", "ss2022-client.json", false);
}

#[test]
fn the_hysteria2_example_pair_carries_traffic() {
    let dir = tempdir::Dir::new("examples-hysteria");
    let (cert, key, pin) = ferry_cert(dir.path(), "hy.example.com");
    let mut server = with_cert("hysteria2-server.json", &cert, &key);
    let sport = local_server(&mut server);
    let mut client = example("hysteria2-client.json");
    let cport = free_port();
    client["inbounds"][0]["port"] = json!(cport);
    client["outbounds"][0]["settings"]["address"] = json!("127.0.0.1");
    client["outbounds"][0]["settings"]["port"] = json!(sport);
    client["outbounds"][0]["streamSettings"]["tlsSettings"]["pinnedPeerCertSha256"] = json!(pin);
    // UDP only: the server is up once the client's first connection gets through.
    let _s = common::ferry(&server.to_string(), &[]);
    let _c = common::ferry(&client.to_string(), &[cport]);
    let echo = echo_server();
    let t0 = std::time::Instant::now();
    while socks5_connect(cport, None, Target::Addr(echo))
        .ok()
        .and_then(|s| try_echo_through(s, b"hello").ok())
        .filter(|v| v == b"hello")
        .is_none()
    {
        assert!(
            t0.elapsed().as_secs() < 10,
            "the Hysteria 2 pair never carried a byte"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    carries(cport, "Hysteria 2 + Salamander + Brutal");
}

#[test]
fn the_vmess_ws_tls_example_pair_carries_traffic() {
    ferry_pair(
        "vmess-ws-tls-server.json",
        "vmess-ws-tls-client.json",
        false,
    );
}

#[test]
fn the_vless_grpc_tls_example_pair_carries_traffic() {
    ferry_pair(
        "vless-grpc-tls-server.json",
        "vless-grpc-tls-client.json",
        false,
    );
}

/// The three inbounds behind nginx: nginx runs `examples/nginx-front.conf` (its port, the
/// certificate, the site's root and the upstream ports rewritten), Ferry the server's and the
/// client's examples; each of the client's SOCKS ports carries through its path, and a browser
/// gets the site.
#[test]
fn the_behind_nginx_examples_carry_each_path_and_serve_the_site() {
    behind_nginx(&|_, cfg, ports| common::ferry(&cfg.to_string(), ports));
}

/// [`the_behind_nginx_examples_carry_each_path_and_serve_the_site`] with `run(server?, config,
/// ports)` starting the server and the client.
pub(crate) fn behind_nginx(run: &dyn Fn(bool, &Value, &[u16]) -> Proc) {
    let dir = tempdir::Dir::new("examples-nginx");
    let d = dir.path();
    let (cert, key, pin) = ferry_cert(d, "proxy.example.com");
    std::fs::create_dir_all(d.join("www")).unwrap();
    std::fs::write(d.join("www/index.html"), "the site").unwrap();
    let front = free_port();
    let mut conf = std::fs::read_to_string(examples().join("nginx-front.conf"))
        .unwrap()
        .replace("listen 443 ssl", &format!("listen 127.0.0.1:{front} ssl"))
        .replace("/etc/ssl/ferry/cert.pem", cert.to_str().unwrap())
        .replace("/etc/ssl/ferry/key.pem", key.to_str().unwrap())
        .replace("/var/www/html", d.join("www").to_str().unwrap());
    let mut server = example("behind-nginx-server.json");
    for (i, old) in [10001, 10002, 10003].into_iter().enumerate() {
        let new = free_port();
        conf = conf.replace(&format!("127.0.0.1:{old}"), &format!("127.0.0.1:{new}"));
        server["inbounds"][i]["port"] = json!(new);
    }
    let ports: Vec<u16> = (0..3)
        .map(|i| server["inbounds"][i]["port"].as_u64().unwrap() as u16)
        .collect();
    for o in server["outbounds"].as_array_mut().unwrap() {
        if o["protocol"] == "freedom" {
            o["settings"] = json!({"finalRules": [{"action": "allow", "ip": ["127.0.0.0/8"]}]});
        }
    }
    let _nginx = nginx(d, Nginx::Http(&conf), &[front]);
    let _s = run(true, &server, &ports);
    let mut client = example("behind-nginx-client.json");
    let mut socks = Vec::new();
    for i in 0..3 {
        let p = free_port();
        client["inbounds"][i]["port"] = json!(p);
        socks.push(p);
        let o = &mut client["outbounds"][i];
        let entry = if o["settings"].get("vnext").is_some() {
            &mut o["settings"]["vnext"][0]
        } else {
            &mut o["settings"]["servers"][0]
        };
        entry["address"] = json!("127.0.0.1");
        entry["port"] = json!(front);
        o["streamSettings"]["tlsSettings"]["pinnedPeerCertSha256"] = json!(pin);
    }
    let _c = run(false, &client, &socks);
    for (p, what) in socks
        .iter()
        .zip(["VLESS ws", "VMess gRPC", "Trojan httpupgrade"])
    {
        carries(*p, &format!("{what} behind nginx"));
    }
    assert_eq!(browser_gets("proxy.example.com", front), "the site");
}
