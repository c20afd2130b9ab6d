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
