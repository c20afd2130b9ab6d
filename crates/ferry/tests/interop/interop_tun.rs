//! The TUN inbound as a router runs it, in three namespaces the test makes (nothing of the
//! host's is touched): a LAN client (10.231.1.2, fd31:1::2) whose default routes are the
//! router, the router running Ferry with a `tun` inbound and a VLESS outbound, and a
//! server (10.231.2.2, fd31:2::2) running a VLESS server (Ferry's or Xray v26.3.27) beside TCP and UDP
//! echo servers. The router sends what arrives from the LAN into the TUN (a policy rule, as an
//! operator sets it up), so the client's own sockets, with no proxy settings, reach the echo
//! servers through the proxy: TCP byte-exact, UDP echoed with a full-cone reply, and an HTTP
//! request for a domain a routing rule blocks is cut (sniffing reads its Host).

use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::*;
use crate::interop_wireguard::{bin, Imp};
use crate::netns::{wait_bound, Lan, ECHO_TCP, ECHO_UDP, SERVER6};

const VLESS: u16 = 8443;
const ID: &str = "5783a3e7-e373-51cd-8642-c83782b807c5";
pub(crate) const TUN: &str = "ftun0";
const MB: usize = 1 << 20;

/// Whether the router has the TUN device, and it is up.
pub(crate) fn tun_up(net: &Lan) -> Option<bool> {
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            &net.router.0,
            "ip",
            "-o",
            "link",
            "show",
            TUN,
        ])
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).contains(",UP"))
}

/// The operator's part: what arrives from the LAN, IPv4 and IPv6, is routed into the TUN.
fn route_lan_into_tun(net: &Lan) {
    let r = &net.router;
    for family in ["-4", "-6"] {
        r.run(
            "ip",
            &[
                family, "route", "add", "default", "dev", TUN, "table", "100",
            ],
            true,
        );
        r.run(
            "ip",
            &[family, "rule", "add", "iif", "tr0", "lookup", "100"],
            true,
        );
    }
}

/// The VLESS server's config (Ferry and Xray read it alike), at 10.231.2.2.
pub(crate) fn server_config() -> String {
    // The echo servers are on a private address: allowed here, as an Xray config would. A
    // name the client only knows as a fake address comes here as a name: `echo.test`.
    let freedom = r#"{"protocol":"freedom","settings":{"domainStrategy":"UseIPv4",
      "finalRules":[{"action":"allow","ip":["10.231.0.0/16","fd31::/16"]}]}}"#;
    format!(
        r#"{{"log":{{"loglevel":"debug"}},
  "dns":{{"hosts":{{"echo.test":"10.231.2.2"}},"servers":["localhost"]}},
  "inbounds":[{{"listen":"10.231.2.2","port":{VLESS},"protocol":"vless",
    "settings":{{"clients":[{{"id":"{ID}","email":"lan@router"}}],"decryption":"none"}}}}],
  "outbounds":[{freedom}]}}"#
    )
}

/// Where the LAN client sends DNS queries with `fakedns`: an address nothing has, routed into
/// the TUN like every other.
const RESOLVER: &str = "10.231.9.53";

/// The router's config; with `fakedns`, DNS to port 53 goes to the dns outbound, which
/// answers from the fake pool, and sniffing gives the connections to pool addresses their
/// names back.
fn router_config(fakedns: bool) -> String {
    let (dns, sniff, rule, out) = if fakedns {
        (
            r#""dns":{"servers":["fakedns"]},"fakedns":{"ipPool":"198.18.0.0/16","poolSize":1000},"#,
            r#","fakedns""#,
            r#"{"network":"udp","port":"53","outboundTag":"dns-out"},"#,
            r#",{"tag":"dns-out","protocol":"dns"}"#,
        )
    } else {
        ("", "", "", "")
    };
    format!(
        r#"{{"log":{{"loglevel":"debug"}},{dns}
  "inbounds":[{{"tag":"tun-in","protocol":"tun","settings":{{"name":"{TUN}","MTU":1500,
      "address":["172.19.0.1/30","fd31:9::1/126"]}},
    "sniffing":{{"enabled":true,"destOverride":["http","tls"{sniff}],"routeOnly":true}}}}],
  "outbounds":[
    {{"tag":"proxy","protocol":"vless","settings":{{"vnext":[{{"address":"10.231.2.2","port":{VLESS},
      "users":[{{"id":"{ID}","encryption":"none"}}]}}]}}}},
    {{"tag":"block","protocol":"blackhole"}}{out}],
  "routing":{{"rules":[{rule}{{"domain":["full:blocked.test"],"outboundTag":"block"}}]}}}}"#
    )
}

struct Run {
    net: Lan,
    server: Proc,
    router: Proc,
    _echo: Proc,
}

impl Run {
    fn start(server: Imp) -> Run {
        Run::start_with(server, false)
    }

    fn start_with(server: Imp, fakedns: bool) -> Run {
        let net = Lan::new("ftun");
        let echo = net.echo();
        let mut s = net.server.spawn(&bin(server), "server", &server_config());
        wait_bound(&mut s, "tcp", VLESS);
        let mut r = net
            .router
            .spawn(&bin(Imp::Ferry), "router", &router_config(fakedns));
        let t0 = Instant::now();
        while tun_up(&net) != Some(true) {
            assert!(
                r.child.try_wait().unwrap().is_none(),
                "router exited:\n{}",
                r.output()
            );
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "{TUN} never came up:\n{}",
                r.output()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        // sing-box's `address`: added to the device.
        let addrs = net
            .router
            .run("ip", &["-o", "addr", "show", "dev", TUN], true);
        for a in ["inet 172.19.0.1/30", "inet6 fd31:9::1/126"] {
            assert!(addrs.contains(a), "{TUN} lacks {a}:\n{addrs}");
        }
        route_lan_into_tun(&net);
        Run {
            net,
            server: s,
            router: r,
            _echo: echo,
        }
    }

    fn logs(&self) -> String {
        format!(
            "--- server\n{}\n--- router\n{}",
            self.server.output(),
            self.router.output()
        )
    }

    /// Runs the tools script on the LAN client, which must fail (a blocked request) after
    /// printing `sign`.
    fn refused(&self, args: &[&str], sign: &str) {
        let (ok, out) = self.net.client_tool(args);
        assert!(
            !ok && out.contains(sign),
            "{args:?} went through: {out}\n{}",
            self.logs()
        );
    }

    fn tool(&self, args: &[&str]) -> String {
        let (ok, out) = self.net.client_tool(args);
        assert!(ok, "{args:?}: {out}\n{}", self.logs());
        out
    }

    /// TCP and UDP from the LAN client to the server's IPv4 and IPv6 addresses, each byte
    /// back; sniffing's domain rule.
    fn check(&self) {
        let (tcp, udp) = (ECHO_TCP.to_string(), ECHO_UDP.to_string());
        for (host, client) in [("10.231.2.2", "10.231.1.2"), (SERVER6, "fd31:1::2")] {
            self.tool(&["tcp", "0", host, &tcp, &(4 * MB).to_string()]);
            let out = self.tool(&["udp", "0", host, &udp, "20"]);
            assert!(
                out.contains("cone=True"),
                "{host}: no full-cone reply: {out}"
            );
            self.tool(&["http", host, &tcp, "allowed.test"]);
            self.refused(&["http", host, &tcp, "blocked.test"], "not echoed");
            let log = self.router.output();
            assert!(
                log.contains(client),
                "the session's source is the LAN client {client}:\n{log}"
            );
        }
        // ICMP echo through the device is answered by the stack: to addresses nothing else
        // has (so no host behind the router could have answered).
        for host in ["10.231.9.9", "fd31:99::9"] {
            self.tool(&["ping", host]);
        }
    }
}

#[test]
fn ferry_tun_router_through_ferry_server() {
    let mut run = Run::start(Imp::Ferry);
    run.check();
    // The device goes with the process.
    let _ = run.router.child.kill();
    let _ = run.router.child.wait();
    let t0 = Instant::now();
    while tun_up(&run.net).is_some() {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "{TUN} outlived Ferry"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn ferry_tun_router_through_xray_server() {
    Run::start(Imp::Xray).check();
}

/// FakeDNS through the TUN: the client asks a resolver address routed into the device, the
/// router's dns outbound answers from the fake pool, and each connection to a fake address is
/// sniffed back to its name: routed by it (a blocked name is cut) and sent on as the name,
/// which the server resolves itself.
#[test]
fn ferry_tun_fakedns_through_xray_server() {
    fakedns_check(Imp::Xray);
}

/// The same to a Ferry server, whose freedom (`UseIPv4`) resolves the name through its `dns`
/// object's hosts, as Xray's does (the system resolver has never heard of `echo.test`).
#[test]
fn ferry_tun_fakedns_through_ferry_server() {
    fakedns_check(Imp::Ferry);
}

fn fakedns_check(server: Imp) {
    let run = Run::start_with(server, true);
    let port = ECHO_TCP.to_string();
    let out = run.tool(&["named", RESOLVER, "echo.test", &port, &MB.to_string()]);
    assert!(
        out.contains("resolved 198.18."),
        "not a fake address: {out}"
    );
    run.refused(
        &["named", RESOLVER, "blocked.test", &port, "1000"],
        "resolved 198.18.",
    );
    let server = run.server.output();
    assert!(
        server.contains("echo.test:7001"),
        "the server was not asked for the name:\n{}",
        run.logs()
    );
    assert!(
        !server.contains("blocked.test"),
        "the blocked name reached the server:\n{server}"
    );
}
