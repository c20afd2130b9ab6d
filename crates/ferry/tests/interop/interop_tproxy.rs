//! Transparent proxying as the OpenWrt front-ends set it up (passwall, ShadowsocksR Plus+), in
//! the three namespaces of [`Lan`] (nothing of the host's is touched): the router's firewall
//! sends the LAN client's forwarded TCP and UDP to dokodemo-door inbounds with
//! `followRedirect`, which carry them over VLESS (outbound sockets marked 255, as the
//! front-ends mark them) to a server running Ferry or Xray v26.3.27 beside echo servers. The
//! client's own sockets, with no proxy settings, reach the echo servers byte-exact; UDP echoes
//! come from the address the client sent to (forged by the router) and full-cone replies from
//! the other port; sniffing's domain rule cuts a blocked Host; a client that aims at the
//! router's proxy port itself is refused as a loop. Two firewalls: nftables with `tproxy` for
//! TCP and UDP, and iptables-legacy with TCP `REDIRECT` (the inbound left without `sockopt`,
//! which makes it redirect mode) and UDP `TPROXY`.

use crate::common::*;
use crate::interop_tun::server_config;
use crate::interop_wireguard::{bin, Imp};
use crate::netns::{sysctl, wait_bound, Lan, ECHO_TCP, ECHO_UDP};

const VLESS: u16 = 8443;
const TPROXY_PORT: u16 = 12345;
const REDIR_PORT: u16 = 12346;
const ID: &str = "5783a3e7-e373-51cd-8642-c83782b807c5";
const MB: usize = 1 << 20;

/// The firewall the router runs.
#[derive(Clone, Copy, PartialEq)]
enum Rules {
    /// nftables: TCP and UDP from the LAN to the tproxy inbound.
    Nft,
    /// iptables-legacy: TCP redirected to the redirect inbound, UDP to the tproxy inbound.
    Iptables,
}

fn router_config() -> String {
    let sniff = r#""sniffing":{"enabled":true,"destOverride":["http","tls"],"routeOnly":true}"#;
    format!(
        r#"{{"log":{{"loglevel":"debug"}},
  "inbounds":[
    {{"tag":"tproxy-in","port":{TPROXY_PORT},"protocol":"dokodemo-door",
      "settings":{{"network":"tcp,udp","followRedirect":true}},
      "streamSettings":{{"sockopt":{{"tproxy":"tproxy"}}}},{sniff}}},
    {{"tag":"redir-in","port":{REDIR_PORT},"protocol":"dokodemo-door",
      "settings":{{"network":"tcp","followRedirect":true}},{sniff}}}],
  "outbounds":[
    {{"tag":"proxy","protocol":"vless","settings":{{"vnext":[{{"address":"10.231.2.2","port":{VLESS},
      "users":[{{"id":"{ID}","encryption":"none"}}]}}]}},
      "streamSettings":{{"sockopt":{{"mark":255}}}}}},
    {{"tag":"block","protocol":"blackhole"}}],
  "routing":{{"rules":[{{"domain":["full:blocked.test"],"outboundTag":"block"}}]}}}}"#
    )
}

/// Installs `rules` on the router, with the policy route TPROXY needs (marked packets are
/// delivered locally), and a counter of the router's own packets marked 255.
fn install(net: &Lan, rules: Rules) {
    let r = &net.router;
    r.run("ip", &["rule", "add", "fwmark", "1", "lookup", "100"], true);
    r.run(
        "ip",
        &[
            "route",
            "add",
            "local",
            "0.0.0.0/0",
            "dev",
            "lo",
            "table",
            "100",
        ],
        true,
    );
    match rules {
        Rules::Nft => {
            let ruleset = format!(
                "table inet fttp {{
  chain pre {{
    type filter hook prerouting priority mangle; policy accept;
    iifname \"tr0\" meta l4proto {{ tcp, udp }} meta mark set 1 tproxy ip to :{TPROXY_PORT} accept
  }}
  chain out {{
    type route hook output priority mangle; policy accept;
    meta mark 0xff counter accept
  }}
}}
"
            );
            let f = net.script().replace("t.py", "rules.nft");
            std::fs::write(&f, ruleset).unwrap();
            r.run(peer("nft").to_str().unwrap(), &["-f", &f], true);
        }
        Rules::Iptables => {
            let ipt = peer("iptables-legacy");
            let ipt = ipt.to_str().unwrap();
            let redir = REDIR_PORT.to_string();
            let tp = TPROXY_PORT.to_string();
            for rule in [
                vec!["-t", "nat", "-A", "PREROUTING", "-i", "tr0", "-p", "tcp"]
                    .into_iter()
                    .chain(["-j", "REDIRECT", "--to-ports", &redir])
                    .collect::<Vec<_>>(),
                vec!["-t", "mangle", "-A", "PREROUTING", "-i", "tr0", "-p", "udp"]
                    .into_iter()
                    .chain(["-j", "TPROXY", "--on-port", &tp, "--tproxy-mark", "1/1"])
                    .collect(),
                vec![
                    "-t", "mangle", "-A", "OUTPUT", "-m", "mark", "--mark", "0xff", "-j", "ACCEPT",
                ],
            ] {
                r.run(ipt, &rule, true);
            }
        }
    }
}

/// Packets the router sent with mark 255 (its proxy's own sockets), by the counter rule.
fn marked_packets(net: &Lan, rules: Rules) -> u64 {
    let (bin, args): (_, &[&str]) = match rules {
        Rules::Nft => (peer("nft"), &["list", "chain", "inet", "fttp", "out"]),
        Rules::Iptables => (
            peer("iptables-legacy"),
            &["-t", "mangle", "-L", "OUTPUT", "-v", "-x", "-n"],
        ),
    };
    let out = net.router.run(bin.to_str().unwrap(), args, true);
    let n = match rules {
        Rules::Nft => out
            .split("packets ")
            .nth(1)
            .and_then(|s| s.split_whitespace().next()),
        Rules::Iptables => out
            .lines()
            .find(|l| l.contains("mark match 0xff"))
            .and_then(|l| l.split_whitespace().next()),
    };
    n.and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no counter in:\n{out}"))
}

struct Run {
    net: Lan,
    rules: Rules,
    server: Proc,
    router: Proc,
    _echo: Proc,
}

impl Run {
    fn start(router: Imp, server: Imp, rules: Rules) -> Run {
        let net = Lan::new("ftp");
        let echo = net.echo();
        let mut s = net.server.spawn(&bin(server), "server", &server_config());
        wait_bound(&mut s, "tcp", VLESS);
        let mut r = net.router.spawn(&bin(router), "router", &router_config());
        wait_bound(&mut r, "tcp", TPROXY_PORT);
        wait_bound(&mut r, "udp", TPROXY_PORT);
        wait_bound(&mut r, "tcp", REDIR_PORT);
        install(&net, rules);
        Run {
            net,
            rules,
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

    fn tool(&self, args: &[&str]) -> String {
        let (ok, out) = self.net.client_tool(args);
        assert!(ok, "{args:?}: {out}\n{}", self.logs());
        out
    }

    /// The traffic checks, for any router.
    fn check_traffic(&self) {
        let (tcp, udp) = (ECHO_TCP.to_string(), ECHO_UDP.to_string());
        self.tool(&["tcp", "0", "10.231.2.2", &tcp, &(4 * MB).to_string()]);
        // Each echo from 10.231.2.2:ECHO_UDP (the tool checks the source), then a full-cone
        // reply from the next port.
        let out = self.tool(&["udp", "0", "10.231.2.2", &udp, "20"]);
        assert!(out.contains("cone=True"), "no full-cone reply: {out}");
        self.tool(&["http", "10.231.2.2", &tcp, "allowed.test"]);
        let (ok, out) = self
            .net
            .client_tool(&["http", "10.231.2.2", &tcp, "blocked.test"]);
        assert!(
            !ok && out.contains("not echoed"),
            "blocked.test went through: {out}\n{}",
            self.logs()
        );
        assert!(
            marked_packets(&self.net, self.rules) > 0,
            "the outbound's sockets carried no mark 255:\n{}",
            self.logs()
        );
    }

    /// Ferry's own: the sessions went where the client sent them, from the inbound the rules
    /// chose, and a client aiming at the proxy port itself is refused as a loop.
    fn check_ferry(&self) {
        let (inbound, port) = match self.rules {
            Rules::Nft => ("tproxy-in", TPROXY_PORT),
            Rules::Iptables => ("redir-in", REDIR_PORT),
        };
        let log = self.router.output();
        let target = format!("10.231.2.2:{ECHO_TCP}");
        assert!(
            log.lines()
                .any(|l| l.contains(&format!("[{inbound}]")) && l.contains(&target)),
            "no session of {inbound} to {target}:\n{log}"
        );
        let (ok, out) =
            self.net
                .client_tool(&["tcp", "0", "10.231.1.1", &port.to_string(), "1000"]);
        assert!(
            !ok,
            "a connection to the proxy port itself was served: {out}"
        );
        let log = self.router.output();
        assert!(
            log.contains("loopback connection detected"),
            "no loop refusal in:\n{log}"
        );
    }
}

/// The router's forwarding is off: only the proxy can carry the LAN's traffic.
fn no_forwarding(net: &Lan) {
    sysctl(&net.router, "net.ipv4.ip_forward", "0");
    sysctl(&net.router, "net.ipv6.conf.all.forwarding", "0");
}

#[test]
fn ferry_tproxy_router_nft_through_ferry_server() {
    let run = Run::start(Imp::Ferry, Imp::Ferry, Rules::Nft);
    no_forwarding(&run.net);
    run.check_traffic();
    run.check_ferry();
}

#[test]
fn ferry_redirect_router_iptables_through_xray_server() {
    let run = Run::start(Imp::Ferry, Imp::Xray, Rules::Iptables);
    no_forwarding(&run.net);
    run.check_traffic();
    run.check_ferry();
}

/// Calibrates the harness: Xray as the router, with the same config and rules.
#[test]
fn ref_xray_tproxy_router_nft_through_xray_server() {
    let run = Run::start(Imp::Xray, Imp::Xray, Rules::Nft);
    no_forwarding(&run.net);
    run.check_traffic();
}
