//! mKCP (`network: "kcp"`, xray2026.md §4) against Xray v26.3.27, each side of the pair, with
//! the UDP masks of `streamSettings.finalmask.udp` (§3.3) that its deployments stack on it:
//! none (segments in clear, v26.3.27's default), the legacy migrations `[header-srtp,
//! mkcp-aes128gcm]` (example `4a`) and `[header-dns, mkcp-original]` (`4b`), and the others.
//! Each chain is entry (dokodemo-door) -> client -> VLESS / VMess / Trojan / Shadowsocks over
//! mKCP -> server -> freedom -> an echo in this test; [`LEN`] bytes go through byte-exact
//! both ways at once, on two connections in a row.
//!
//! The `ref_*` tests run the same configs Xray to Xray: when a Ferry case fails and its `ref_`
//! case passes, Ferry is at fault.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::common;
use crate::interop_hysteria::udp_up;
use common::*;

use std::net::{SocketAddr, TcpStream};

const ID: &str = "94864c32-f48b-47a9-9823-887b54413317";
const PW: &str = "kcp password";
const LEN: usize = 2 << 20;
const FREEDOM: &str =
    r#"{"protocol":"freedom","settings":{"finalRules":[{"action":"allow","ip":["127.0.0.0/8"]}]}}"#;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Imp {
    Ferry,
    Xray,
}
use Imp::*;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Proto {
    Vless,
    Vmess,
    Trojan,
    Shadowsocks,
}
use Proto::*;

/// `finalmask.udp` lists (JSON arrays), by name.
pub(crate) fn masks(name: &str) -> &'static str {
    match name {
        "none" => "[]",
        "4a" => {
            r#"[{"type":"header-srtp"},{"type":"mkcp-aes128gcm","settings":{"password":"old-kcp-seed"}}]"#
        }
        "4b" => {
            r#"[{"type":"header-dns","settings":{"domain":"www.example.com"}},{"type":"mkcp-original"}]"#
        }
        "original" => r#"[{"type":"mkcp-original"}]"#,
        "utp" => r#"[{"type":"header-utp"},{"type":"mkcp-original"}]"#,
        "wechat" => r#"[{"type":"header-wechat"},{"type":"mkcp-original"}]"#,
        "dtls" => r#"[{"type":"header-dtls"},{"type":"mkcp-original"}]"#,
        "wireguard" => r#"[{"type":"header-wireguard"},{"type":"mkcp-original"}]"#,
        "custom" => {
            r#"[{"type":"header-custom","settings":{
                "client":[{"type":"str","packet":"FERRY"},{"rand":3}],
                "server":[{"type":"hex","packet":"f0e1d2"},{"rand":5}]}},
                {"type":"mkcp-aes128gcm","settings":{"password":"custom-seed"}}]"#
        }
        n => panic!("no mask list {n}"),
    }
}

fn stream(mask: &str) -> String {
    format!(
        r#"{{"network":"kcp","kcpSettings":{{"mtu":1350,"tti":20,"uplinkCapacity":20,"downlinkCapacity":100}},
            "finalmask":{{"udp":{}}}}}"#,
        masks(mask)
    )
}

fn server_config(p: Proto, port: u16, mask: &str) -> String {
    let (proto, settings) = match p {
        Vless => (
            "vless",
            format!(r#"{{"clients":[{{"id":"{ID}"}}],"decryption":"none"}}"#),
        ),
        Vmess => ("vmess", format!(r#"{{"clients":[{{"id":"{ID}"}}]}}"#)),
        Trojan => (
            "trojan",
            format!(r#"{{"clients":[{{"password":"{PW}"}}]}}"#),
        ),
        Shadowsocks => (
            "shadowsocks",
            format!(r#"{{"method":"aes-128-gcm","password":"{PW}","network":"tcp"}}"#),
        ),
    };
    format!(
        r#"{{"log":{{"loglevel":"debug"}},
            "inbounds":[{{"listen":"127.0.0.1","port":{port},"protocol":"{proto}",
              "settings":{settings},"streamSettings":{}}}],
            "outbounds":[{FREEDOM}]}}"#,
        stream(mask)
    )
}

fn client_config(p: Proto, entry: u16, server: u16, mask: &str, target: SocketAddr) -> String {
    let (proto, settings) = match p {
        Vless => (
            "vless",
            format!(
                r#"{{"vnext":[{{"address":"127.0.0.1","port":{server},"users":[{{"id":"{ID}","encryption":"none"}}]}}]}}"#
            ),
        ),
        Vmess => (
            "vmess",
            format!(
                r#"{{"vnext":[{{"address":"127.0.0.1","port":{server},"users":[{{"id":"{ID}","security":"aes-128-gcm"}}]}}]}}"#
            ),
        ),
        Trojan => (
            "trojan",
            format!(
                r#"{{"servers":[{{"address":"127.0.0.1","port":{server},"password":"{PW}"}}]}}"#
            ),
        ),
        Shadowsocks => (
            "shadowsocks",
            format!(
                r#"{{"servers":[{{"address":"127.0.0.1","port":{server},"method":"aes-128-gcm","password":"{PW}"}}]}}"#
            ),
        ),
    };
    format!(
        r#"{{"log":{{"loglevel":"debug"}},
            "inbounds":[{{"listen":"127.0.0.1","port":{entry},"protocol":"dokodemo-door",
                "settings":{{"address":"127.0.0.1","port":{},"network":"tcp"}}}}],
            "outbounds":[{{"protocol":"{proto}","settings":{settings},"streamSettings":{}}}]}}"#,
        target.port(),
        stream(mask)
    )
}

fn spawn(imp: Imp, cfg: &str) -> Proc {
    match imp {
        Ferry => ferry(cfg, &[]),
        Xray => spawn_with_config(&peer("xray"), "xray", cfg, &["run", "-c", "{config}"]),
    }
}

pub(crate) struct Chain {
    pub entry: u16,
    pub server: Proc,
    pub client: Proc,
}

impl Chain {
    pub fn logs(&self) -> String {
        format!(
            "--- server\n{}\n--- client\n{}",
            self.server.output(),
            self.client.output()
        )
    }
}

pub(crate) fn chain(client: Imp, server: Imp, p: Proto, mask: &str, target: SocketAddr) -> Chain {
    let sport = free_port();
    let server = udp_up(spawn(server, &server_config(p, sport, mask)), sport);
    let entry = free_port();
    let client = up(
        spawn(client, &client_config(p, entry, sport, mask, target)),
        &[entry],
    );
    Chain {
        entry,
        server,
        client,
    }
}

fn case(client: Imp, server: Imp, p: Proto, mask: &str) {
    let target = echo_server();
    let ch = chain(client, server, p, mask, target);
    let what = format!("{client:?} -> {server:?} ({p:?}, masks {mask})");
    for i in 0..2 {
        let data = pattern(LEN, 0x6b63 + i);
        let sock = TcpStream::connect(("127.0.0.1", ch.entry)).unwrap();
        let got = try_echo_through(sock, &data)
            .unwrap_or_else(|e| panic!("{what}: connection {i}: {e}\n{}", ch.logs()));
        assert!(
            got == data,
            "{what}: connection {i}: bytes differ\n{}",
            ch.logs()
        );
    }
}

macro_rules! cases {
    ($($name:ident: $c:expr, $s:expr, $p:expr, $m:expr;)*) => {$(
        #[test]
        fn $name() {
            case($c, $s, $p, $m);
        }
    )*};
}

cases! {
    ref_xray_to_xray_vless_clear: Xray, Xray, Vless, "none";
    ferry_to_xray_vless_clear: Ferry, Xray, Vless, "none";
    xray_to_ferry_vless_clear: Xray, Ferry, Vless, "none";
    ferry_to_ferry_vless_clear: Ferry, Ferry, Vless, "none";
    ferry_to_xray_vmess_clear: Ferry, Xray, Vmess, "none";
    xray_to_ferry_vmess_clear: Xray, Ferry, Vmess, "none";
    ferry_to_xray_trojan_clear: Ferry, Xray, Trojan, "none";
    xray_to_ferry_shadowsocks_clear: Xray, Ferry, Shadowsocks, "none";
}
