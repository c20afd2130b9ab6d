//! The example pairs against Xray v26.3.27, each way: Xray runs the example server with Ferry
//! running its client, and Ferry the server with Xray the client, from the same files (ports
//! rewritten, certificates and the REALITY target made by the test as in `examples.rs`), and
//! the three inbounds behind nginx the same way.
//! ShadowsocksR and Hysteria 2 are left out: Xray has no ShadowsocksR, and Hysteria 2 against
//! Xray is `tests/interop/interop_hysteria.rs`.

use crate::examples::{pair_with, run, Imp};

/// Runs the pair `server`/`client` both ways.
fn both_ways(server: &str, client: &str, fallback: bool) {
    pair_with(
        server,
        client,
        fallback,
        &[(Imp::Xray, Imp::Ferry), (Imp::Ferry, Imp::Xray)],
    );
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

/// The VLESS Reverse example pair: a web server that only the bridge can reach (on loopback
/// here, its LAN address in the files) is served through the portal's public port, with each
/// side Ferry or Xray. The bridge's `finalRules` allow is rewritten to the loopback server.
#[test]
fn vless_reverse_example_with_ferry_and_xray() {
    use crate::common::{free_port, Proc};
    use crate::examples::{example, web_server};
    use std::io::{Read, Write};
    use std::time::{Duration, Instant};
    let web = web_server("the bridge's LAN page");
    for (portal_imp, bridge_imp) in [
        (Imp::Ferry, Imp::Ferry),
        (Imp::Xray, Imp::Ferry),
        (Imp::Ferry, Imp::Xray),
    ] {
        let (port, public) = (free_port(), free_port());
        let mut p = example("vless-reverse-portal.json");
        p["inbounds"][0]["port"] = port.into();
        p["inbounds"][0]["listen"] = "127.0.0.1".into();
        p["inbounds"][1]["port"] = public.into();
        p["inbounds"][1]["listen"] = "127.0.0.1".into();
        p["inbounds"][1]["settings"]["address"] = "127.0.0.1".into();
        p["inbounds"][1]["settings"]["port"] = web.into();
        p["log"]["loglevel"] = "debug".into();
        let mut b = example("vless-reverse-bridge.json");
        b["log"]["loglevel"] = "debug".into();
        b["outbounds"][1]["settings"]["finalRules"][0]["ip"] = serde_json::json!(["127.0.0.1"]);
        b["outbounds"][1]["settings"]["finalRules"][0]["port"] = web.to_string().into();
        b["outbounds"][2]["settings"]["address"] = "127.0.0.1".into();
        b["outbounds"][2]["settings"]["port"] = port.into();
        let portal: Proc = run(portal_imp, &p, &[port, public]);
        let bridge: Proc = run(bridge_imp, &b, &[]);
        let what = format!("portal {portal_imp:?}, bridge {bridge_imp:?}");
        let t = Instant::now();
        let page = loop {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", public)).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let _ = s.write_all(b"GET / HTTP/1.1\r\nHost: nas\r\n\r\n");
            let mut got = String::new();
            let _ = s.read_to_string(&mut got);
            if got.contains("the bridge's LAN page") || t.elapsed() > Duration::from_secs(15) {
                break got;
            }
            std::thread::sleep(Duration::from_millis(300));
        };
        assert!(
            page.contains("the bridge's LAN page"),
            "{what}: {page:?}\n{}\n{}",
            portal.output(),
            bridge.output()
        );
    }
}
