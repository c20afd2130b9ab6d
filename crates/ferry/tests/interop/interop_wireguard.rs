//! WireGuard against Xray v26.3.27, in two network namespaces the test makes and joins with a
//! veth pair (10.231.2.1 client side, 10.231.2.2 server side; nothing outside them): the
//! client's SOCKS port carries TCP (several MB, echoed byte-exact) and UDP (echoed, and a
//! reply from another port of the server: full cone) through the tunnel to echo servers in the
//! server's namespace. Keys are the test-only pair of the spec (`xray wg`).

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::*;
use crate::netns::{wait_bound, Ns};

const SERVER_KEY: &str = "UG+dU5EFwwVt6jsZ3f4AT06YDBWDqfBYqTjfk/jn+WE=";
const SERVER_PUB: &str = "BJt3KwVhEYtny744+YrOJxSTalYjmcSDjXPD0zul/Cg=";
const CLIENT_KEY: &str = "cITpcmD49xrzKowCX7a984l4DsWXLz6n1jN7EhkYekk=";
const CLIENT_PUB: &str = "F5W7kWjx06QvHqNDmu8M+NZP0LDG6lcOcOOcG8x3Yww=";
const PSK: &str = "NVBcwx/beInrcrUQSG1WF8dCrieFGKjSflkiorPbKMQ=";
const TOOLS: &str = include_str!("scripts/netns_tools.py");
const SOCKS: u16 = 1080;
const WG: u16 = 51820;
const ECHO_TCP: u16 = 7001;
const ECHO_UDP: u16 = 7002;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Imp {
    Ferry,
    Xray,
}

fn bin(imp: Imp) -> PathBuf {
    match imp {
        Imp::Ferry => env!("CARGO_BIN_EXE_ferry").into(),
        Imp::Xray => peer("xray"),
    }
}

/// Two namespaces joined by a veth pair, and the tools script.
struct Net {
    client: Ns,
    server: Ns,
    tools: tempdir::Dir,
}

impl Net {
    fn new() -> Net {
        let client = Ns::named("fwgc");
        let server = Ns::named("fwgs");
        client.run(
            "ip",
            &[
                "link", "add", "name", "wgc0", "netns", &client.0, "type", "veth", "peer", "name",
                "wgs0", "netns", &server.0,
            ],
            false,
        );
        for (ns, dev, addr) in [
            (&client, "wgc0", "10.231.2.1/24"),
            (&server, "wgs0", "10.231.2.2/24"),
        ] {
            ns.run("ip", &["addr", "add", addr, "dev", dev], true);
            ns.run("ip", &["link", "set", dev, "up"], true);
        }
        let tools = tempdir::Dir::new("wg-tools");
        std::fs::write(tools.path().join("t.py"), TOOLS).unwrap();
        Net {
            client,
            server,
            tools,
        }
    }

    fn script(&self) -> String {
        self.tools.path().join("t.py").to_str().unwrap().to_string()
    }

    fn echo(&self) -> Proc {
        let mut p = Proc {
            child: Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    &self.server.0,
                    "python3",
                    &self.script(),
                    "echo",
                ])
                .args(["10.231.2.2", &ECHO_TCP.to_string(), &ECHO_UDP.to_string()])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap(),
            name: "echo".into(),
            dir: tempdir::Dir::new("wg-echo"),
        };
        wait_bound(&mut p, "tcp", ECHO_TCP);
        p
    }

    /// Runs the tools script in the client's namespace: (succeeded, its output).
    fn client_tool(&self, args: &[&str]) -> (bool, String) {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.client.0,
                "timeout",
                "60",
                "python3",
                &self.script(),
            ])
            .args(args)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    }

    fn tcp(&self, bytes: usize) -> (bool, String) {
        self.client_tool(&[
            "tcp",
            &SOCKS.to_string(),
            "10.231.2.2",
            &ECHO_TCP.to_string(),
            &bytes.to_string(),
        ])
    }

    fn udp(&self, count: usize) -> (bool, String) {
        self.client_tool(&[
            "udp",
            &SOCKS.to_string(),
            "10.231.2.2",
            &ECHO_UDP.to_string(),
            &count.to_string(),
        ])
    }
}

fn freedom() -> &'static str {
    // The echo servers are on a private address: allowed here, as an Xray config would.
    r#"{"tag":"direct","protocol":"freedom","settings":{"finalRules":[{"action":"allow","ip":["10.231.0.0/16"]}]}}"#
}

fn server_config() -> String {
    format!(
        r#"{{"log":{{"loglevel":"debug"}},
  "inbounds":[{{"tag":"wg-in","listen":"10.231.2.2","port":{WG},"protocol":"wireguard",
    "settings":{{"secretKey":"{SERVER_KEY}","address":["10.66.0.1/32","fd66::1/128"],
      "peers":[{{"publicKey":"{CLIENT_PUB}","preSharedKey":"{PSK}",
                 "allowedIPs":["10.66.0.2/32","fd66::2/128"]}}],
      "mtu":1420,"workers":2}},
    "sniffing":{{"enabled":false}}}}],
  "outbounds":[{}]}}"#,
        freedom()
    )
}

fn client_config(extra: &str) -> String {
    format!(
        r#"{{"log":{{"loglevel":"debug"}},
  "inbounds":[{{"tag":"socks-in","listen":"127.0.0.1","port":{SOCKS},"protocol":"socks",
    "settings":{{"auth":"noauth","udp":true,"ip":"127.0.0.1"}}}}],
  "outbounds":[{{"tag":"wg-out","protocol":"wireguard",
    "settings":{{"secretKey":"{CLIENT_KEY}","address":["10.66.0.2/32","fd66::2/128"],
      "peers":[{{"publicKey":"{SERVER_PUB}","preSharedKey":"{PSK}",
                 "endpoint":"10.231.2.2:{WG}","keepAlive":25,
                 "allowedIPs":["0.0.0.0/0","::/0"]}}],
      "mtu":1420,"workers":2,"domainStrategy":"ForceIPv4"{extra}}}}}]}}"#
    )
}

struct Run {
    net: Net,
    server: Proc,
    client: Proc,
    _echo: Proc,
}

impl Run {
    fn start(client: Imp, server: Imp, extra: &str) -> Run {
        let net = Net::new();
        let echo = net.echo();
        let mut s = net.server.spawn(&bin(server), "server", &server_config());
        wait_bound(&mut s, "udp", WG);
        let mut c = net
            .client
            .spawn(&bin(client), "client", &client_config(extra));
        wait_bound(&mut c, "tcp", SOCKS);
        Run {
            net,
            server: s,
            client: c,
            _echo: echo,
        }
    }

    fn logs(&self) -> String {
        format!(
            "--- server\n{}\n--- client\n{}",
            self.server.output(),
            self.client.output()
        )
    }

    fn check_tcp(&self, bytes: usize) {
        let (ok, out) = self.net.tcp(bytes);
        assert!(ok, "TCP: {out}\n{}", self.logs());
    }

    /// TCP and UDP through the tunnel, each byte back.
    fn check(&self, bytes: usize) {
        self.check_tcp(bytes);
        let (ok, out) = self.net.udp(20);
        assert!(ok, "UDP: {out}\n{}", self.logs());
        assert!(
            out.contains("cone=True"),
            "no full-cone reply: {out}\n{}",
            self.logs()
        );
    }
}

const MB: usize = 1 << 20;

#[test]
fn ferry_client_to_xray_server() {
    Run::start(Imp::Ferry, Imp::Xray, r#","noKernelTun":true"#).check(8 * MB);
}

#[test]
fn ferry_client_with_reserved_bytes_to_xray_server() {
    Run::start(Imp::Ferry, Imp::Xray, r#","reserved":[1,2,3]"#).check(2 * MB);
}

#[test]
fn xray_client_to_ferry_server() {
    Run::start(Imp::Xray, Imp::Ferry, r#","noKernelTun":true"#).check(8 * MB);
}

#[test]
fn xray_kernel_tun_client_with_reserved_to_ferry_server() {
    // noKernelTun false: Xray makes a TUN device (inside the client's namespace only).
    Run::start(
        Imp::Xray,
        Imp::Ferry,
        r#","noKernelTun":false,"reserved":"AQID""#,
    )
    .check(2 * MB);
}

#[test]
fn ref_xray_client_to_xray_server() {
    Run::start(Imp::Xray, Imp::Xray, r#","noKernelTun":true"#).check(2 * MB);
}

/// The server restarts mid-run: the client's next traffic finds a fresh handshake.
fn restart(client: Imp, server: Imp) {
    let mut r = Run::start(client, server, r#","noKernelTun":true"#);
    r.check(MB);
    r.server.signal(15);
    let _ = r.server.wait_exit(Instant::now(), Duration::from_secs(10));
    let mut s = r
        .net
        .server
        .spawn(&bin(server), "server2", &server_config());
    wait_bound(&mut s, "udp", WG);
    r.server = s;
    let t0 = Instant::now();
    loop {
        let (ok, out) = r.net.tcp(256 << 10);
        if ok {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no traffic 60 s after the restart: {out}\n{}",
            r.logs()
        );
        std::thread::sleep(Duration::from_secs(2));
    }
}

#[test]
fn ferry_client_recovers_after_xray_server_restarts() {
    restart(Imp::Ferry, Imp::Xray);
}

#[test]
fn xray_client_recovers_after_ferry_server_restarts() {
    restart(Imp::Xray, Imp::Ferry);
}
