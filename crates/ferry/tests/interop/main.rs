//! Interop against the real peers, one module per protocol or transport: Ferry and Xray,
//! sing-box, v2ray, shadowsocks-rust/-libev, trojan-gfw/-go, the Python SSR server, mihomo,
//! nginx, curl, each side of each pair.
//!
//! One test binary for the area (`cargo test --release --test interop`), a module per
//! former test file; each module's tests are named `{module}::{test}`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

#[path = "../common/mod.rs"]
mod common;
#[path = "../proxy_clients/mod.rs"]
mod proxy_clients;
#[path = "../route_helpers/mod.rs"]
mod route_helpers;

mod interop_hysteria;
mod interop_hysteria_hop;
mod interop_kcp;
mod interop_mux;
mod interop_reality;
mod interop_reverse;
mod interop_shadowsocks;
mod interop_ssr;
mod interop_tls;
mod interop_tproxy;
mod interop_transports;
mod interop_trojan;
mod interop_tun;
mod interop_tun_route;
mod interop_vision;
mod interop_vless;
mod interop_vlessenc;
mod interop_vmess;
mod interop_wireguard;
mod interop_xhttp;
mod netns;
mod nginx_transports;
mod proxy_front;
mod socks_http_interop;
