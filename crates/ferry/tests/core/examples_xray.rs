//! The example pairs against Xray v26.3.27, each way: Xray runs the example server with Ferry
//! running its client, and Ferry the server with Xray the client, from the same files (ports
//! rewritten, certificates and the REALITY target made by the test as in `examples.rs`), and
//! the three inbounds behind nginx the same way.
//! ShadowsocksR and Hysteria 2 are left out: Xray has no ShadowsocksR, and Hysteria 2 against
//! Xray is `tests/interop/interop_hysteria.rs`.

use serde_json::{json, Value};

use crate::common::{self, *};
use crate::examples::{browser_gets, example, ferry_cert, local_client, local_server};
use crate::examples::{try_carries, web_server, with_cert};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Imp {
    Ferry,
    Xray,
}

fn run(imp: Imp, cfg: &Value, ports: &[u16]) -> Proc {
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

/// Runs the pair `server`/`client` both ways; with `fallback`, a browser reaching the server
/// gets the web server behind it.
fn both_ways(server: &str, client: &str, fallback: bool) {
    for (si, ci) in [(Imp::Xray, Imp::Ferry), (Imp::Ferry, Imp::Xray)] {
        let dir = tempdir::Dir::new("examples-xray");
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
fn vless_reality_vision_example_with_xray() {
    both_ways(
        "vless-reality-vision-server.json",
        "vless-reality-vision-client.json",
        false,
    );
}

#[test]
fn vless_xhttp_reality_example_with_xray() {
    both_ways(
        "vless-xhttp-reality-server.json",
        "vless-xhttp-reality-client.json",
        false,
    );
}

#[test]
fn tls_examples_with_fallbacks_with_xray() {
    both_ways(
        "vless-tls-vision-server.json",
        "vless-tls-vision-client.json",
        true,
    );
    both_ways("trojan-tls-server.json", "trojan-tls-client.json", true);
}

#[test]
fn vmess_and_vless_over_ws_and_grpc_examples_with_xray() {
    both_ways(
        "vmess-ws-tls-server.json",
        "vmess-ws-tls-client.json",
        false,
    );
    both_ways(
        "vless-grpc-tls-server.json",
        "vless-grpc-tls-client.json",
        false,
    );
}

#[test]
fn vmess_tcp_and_shadowsocks_examples_with_xray() {
    both_ways("vmess-tcp-server.json", "vmess-tcp-client.json", false);
    both_ways("ss-aead-server.json", "ss-aead-client.json", false);
    both_ways("ss2022-server.json", "ss2022-client.json", false);
    both_ways(
        "ss2022-multiuser-server.json",
        "ss2022-multiuser-client.json",
        false,
    );
}

#[test]
fn behind_nginx_examples_with_xray() {
    for (si, ci) in [(Imp::Xray, Imp::Ferry), (Imp::Ferry, Imp::Xray)] {
        crate::examples::behind_nginx(&|server, cfg, ports| {
            run(if server { si } else { ci }, cfg, ports)
        });
    }
}
