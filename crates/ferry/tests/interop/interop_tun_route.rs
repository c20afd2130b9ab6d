//! The TUN inbound's `auto_route` (sing-box's), in the three namespaces of [`Lan`]: the router
//! runs Ferry with a `tun` inbound that installs its own routes and rules, and its default
//! routes point at the server, as a home router's point at the internet. The VLESS server
//! and the echo servers are on addresses of the server's that only that default route
//! reaches, so nothing gets there except through the main table's default route, which the
//! rules hand to the TUN for everyone but Ferry's own (marked) sockets. What the LAN client
//! sends (forwarded) and what the router's own sockets send both arrive through the proxy;
//! on SIGTERM every rule and route is gone.

use std::time::{Duration, Instant};

use crate::common::*;
use crate::interop_tun::{tun_up, TUN};
use crate::interop_wireguard::{bin, Imp};
use crate::netns::{wait_bound, Lan, ECHO_TCP, ECHO_UDP};

const VLESS: u16 = 8443;
const ID: &str = "5783a3e7-e373-51cd-8642-c83782b807c5";
/// The server's addresses beyond its default route (on its loopback).
const PROXY_AT: &str = "10.231.60.1";
const ECHO4: &str = "10.231.50.1";
const ECHO6: &str = "fd31:50::1";

fn server_config() -> String {
    // The echo servers are on a private address: allowed, as an Xray config would.
    format!(
        r#"{{"log":{{"loglevel":"debug"}},
  "inbounds":[{{"listen":"{PROXY_AT}","port":{VLESS},"protocol":"vless",
    "settings":{{"clients":[{{"id":"{ID}"}}],"decryption":"none"}}}}],
  "outbounds":[{{"protocol":"freedom","settings":{{
    "finalRules":[{{"action":"allow","ip":["10.231.0.0/16","fd31::/16"]}}]}}}}]}}"#
    )
}

fn router_config() -> String {
    format!(
        r#"{{"log":{{"loglevel":"debug"}},
  "inbounds":[{{"tag":"tun-in","protocol":"tun","settings":{{"name":"{TUN}","MTU":1500,
      "address":["172.19.0.1/30","fd31:9::1/126"],"auto_route":true,"strict_route":true}}}}],
  "outbounds":[{{"protocol":"vless","settings":{{"vnext":[{{"address":"{PROXY_AT}","port":{VLESS},
      "users":[{{"id":"{ID}","encryption":"none"}}]}}]}}}}]}}"#
    )
}

/// The router's rules and routes; the link-local ones, which the kernel adds on its own time
/// after the links come up, are left out.
fn rules(net: &Lan) -> String {
    let r = &net.router;
    let all = format!(
        "{}{}{}{}",
        r.run("ip", &["-4", "rule"], true),
        r.run("ip", &["-6", "rule"], true),
        r.run("ip", &["-4", "route", "show", "table", "all"], true),
        r.run("ip", &["-6", "route", "show", "table", "all"], true),
    );
    all.lines()
        .filter(|l| !l.contains("fe80:"))
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn ferry_tun_auto_route_carries_the_lan_and_the_router_itself() {
    let net = Lan::new("ftar");
    for (fam, addr) in [("-4", PROXY_AT), ("-4", ECHO4), ("-6", ECHO6)] {
        net.server
            .run("ip", &[fam, "addr", "add", addr, "dev", "lo"], true);
    }
    let r = &net.router;
    r.run(
        "ip",
        &["route", "add", "default", "via", "10.231.2.2"],
        true,
    );
    r.run(
        "ip",
        &["-6", "route", "add", "default", "via", "fd31:2::2"],
        true,
    );
    let _echo = net.echo_on(&format!("{ECHO4},{ECHO6}"));
    let mut server = net
        .server
        .spawn(&bin(Imp::Ferry), "server", &server_config());
    wait_bound(&mut server, "tcp", VLESS);
    let before = rules(&net);
    let mut router = net
        .router
        .spawn(&bin(Imp::Ferry), "router", &router_config());
    let t0 = Instant::now();
    while !(tun_up(&net) == Some(true) && rules(&net).contains("9010:")) {
        assert!(
            router.child.try_wait().unwrap().is_none(),
            "router exited:\n{}",
            router.output()
        );
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "no auto_route rules:\n{}\n{}",
            rules(&net),
            router.output()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let installed = rules(&net);
    for want in [
        "9000:\tfrom all fwmark 0x2024 goto 9010",
        "9001:\tfrom all to 172.19.0.0/30 lookup 2022",
        "9003:\tnot from all dport 53 lookup main suppress_prefixlength 0",
        "9004:\tnot from all iif lo lookup 2022",
        "9004:\tfrom fd31:9::/126 iif lo lookup 2022",
        "9004:\tfrom 8000::/1 iif lo goto 9010",
        "default dev ftun0 table 2022",
    ] {
        assert!(installed.contains(want), "no {want:?} in:\n{installed}");
    }
    let logs = |server: &Proc, router: &Proc| {
        format!(
            "--- rules\n{}\n--- server\n{}\n--- router\n{}",
            rules(&net),
            server.output(),
            router.output()
        )
    };
    let tool = |ns, args: &[&str]| {
        let (ok, out) = net.tool_in(ns, args);
        assert!(ok, "{args:?}: {out}\n{}", logs(&server, &router));
        out
    };
    let (tcp, udp) = (ECHO_TCP.to_string(), ECHO_UDP.to_string());
    // The LAN (forwarded), both families, TCP byte-exact and UDP.
    for host in [ECHO4, ECHO6] {
        tool(
            &net.client,
            &["tcp", "0", host, &tcp, &(2 << 20).to_string()],
        );
        let out = tool(&net.client, &["udp", "0", host, &udp, "5"]);
        assert!(out.contains("cone=True"), "{host}: {out}");
    }
    // The router's own sockets: through the device too (their source is its address).
    tool(
        &net.router,
        &["tcp", "0", ECHO4, &tcp, &(1 << 20).to_string()],
    );
    tool(&net.router, &["tcp", "0", ECHO6, &tcp, "1000"]);
    let log = router.output();
    for src in ["10.231.1.2", "fd31:1::2", "172.19.0.1", "fd31:9::1"] {
        assert!(
            log.contains(src),
            "no session from {src}:\n{}",
            logs(&server, &router)
        );
    }
    // Everything went over the proxy: the server dialled each echo address.
    let slog = server.output();
    for dst in [ECHO4, ECHO6] {
        assert!(
            slog.contains(dst),
            "the server never dialled {dst}:\n{slog}"
        );
    }
    // SIGTERM: what auto_route added is gone, and only that.
    term(&router);
    let t0 = Instant::now();
    while router.child.try_wait().unwrap().is_none() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "router did not stop"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let after = rules(&net);
    let left: Vec<&str> = after
        .lines()
        .filter(|l| l.contains("2022") || l.starts_with("90") || l.contains(TUN))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}\n{after}");
    assert_eq!(after, before, "the rules and routes are not as they were");
}

/// SIGTERM to a process, through kill(1).
fn term(p: &Proc) {
    let ok = std::process::Command::new("kill")
        .args(["-TERM", &p.child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -TERM failed");
}
