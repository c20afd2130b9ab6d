//! Network namespaces a test makes (its own loopback, veth pairs between two of them; nothing
//! of the host's is touched), and waiting for a process inside one to bind its ports.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::*;

/// A network namespace with loopback up, deleted on drop.
pub(crate) struct Ns(pub String);

impl Ns {
    pub fn new() -> Ns {
        Ns::named("ferryhop")
    }

    /// A namespace whose name starts with `tag`.
    pub fn named(tag: &str) -> Ns {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let ns = Ns(format!("{tag}{}x{n}", std::process::id()));
        ns.run("ip", &["netns", "add", &ns.0], false);
        ns.run("ip", &["link", "set", "lo", "up"], true);
        ns
    }

    /// Runs a command (inside the namespace with `inside`); its stdout, failing the test on
    /// a non-zero exit.
    pub fn run(&self, bin: &str, args: &[&str], inside: bool) -> String {
        let mut c = match inside {
            true => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", &self.0, bin]);
                c
            }
            false => Command::new(bin),
        };
        let out = c
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("{bin}: {e}"));
        assert!(
            out.status.success(),
            "{bin} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Starts `bin run -c CONFIG` inside the namespace.
    pub fn spawn(&self, bin: &Path, name: &str, cfg: &str) -> Proc {
        spawn_with_config(
            Path::new("ip"),
            name,
            cfg,
            &[
                "netns",
                "exec",
                &self.0,
                bin.to_str().unwrap(),
                "run",
                "-c",
                "{config}",
            ],
        )
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// Ports `pid`'s namespace has bound (`net` is "tcp" for listening TCP, "udp" for bound UDP).
pub(crate) fn bound(pid: u32, net: &str, port: u16) -> bool {
    [net.to_string(), format!("{net}6")].iter().any(|f| {
        std::fs::read_to_string(format!("/proc/{pid}/net/{f}"))
            .unwrap_or_default()
            .lines()
            .skip(1)
            .any(|l| {
                let c: Vec<&str> = l.split_whitespace().collect();
                let p = c
                    .get(1)
                    .and_then(|a| a.rsplit_once(':'))
                    .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
                p == Some(port) && (net == "udp" || c.get(3) == Some(&"0A"))
            })
    })
}

pub(crate) fn wait_bound(p: &mut Proc, net: &str, port: u16) {
    let t0 = Instant::now();
    while !bound(p.child.id(), net, port) {
        assert!(
            p.child.try_wait().unwrap().is_none(),
            "{} exited:\n{}",
            p.name,
            p.output()
        );
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "{} never bound {net} {port}",
            p.name
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Where the echo servers of [`Lan::echo`] listen on the server (TCP, and UDP; UDP's full-cone
/// replies come from the next port).
pub(crate) const ECHO_TCP: u16 = 7001;
pub(crate) const ECHO_UDP: u16 = 7002;
const TOOLS: &str = include_str!("scripts/netns_tools.py");

/// The server's IPv6 address in a [`Lan`] (the echo servers listen on it too).
pub(crate) const SERVER6: &str = "fd31:2::2";

/// A home network as a router serves it, in three namespaces joined by two veth pairs: a LAN
/// client (10.231.1.2 and fd31:1::2, device tc0) whose default routes are the router
/// (10.231.1.1 and fd31:1::1 on tr0, 10.231.2.1 and fd31:2::1 on tr1), which forwards, and a
/// server (10.231.2.2 and fd31:2::2 on ts0); and the tools script. The IPv6 addresses are
/// unique local ones (nothing outside the namespaces has them), added without duplicate
/// address detection so they are usable at once.
pub(crate) struct Lan {
    pub client: Ns,
    pub router: Ns,
    pub server: Ns,
    tools: tempdir::Dir,
}

pub(crate) fn sysctl(ns: &Ns, key: &str, value: &str) {
    let path = format!("/proc/sys/{}", key.replace('.', "/"));
    ns.run("sh", &["-c", &format!("echo {value} > {path}")], true);
}

impl Lan {
    /// Its namespaces are named from `tag` (`{tag}c`, `{tag}r`, `{tag}s`).
    pub fn new(tag: &str) -> Lan {
        let client = Ns::named(&format!("{tag}c"));
        let router = Ns::named(&format!("{tag}r"));
        let server = Ns::named(&format!("{tag}s"));
        for (a, an, b, bn) in [
            (&client, "tc0", &router, "tr0"),
            (&router, "tr1", &server, "ts0"),
        ] {
            a.run(
                "ip",
                &[
                    "link", "add", "name", an, "netns", &a.0, "type", "veth", "peer", "name", bn,
                    "netns", &b.0,
                ],
                false,
            );
        }
        for (ns, dev, addr) in [
            (&client, "tc0", "10.231.1.2/24"),
            (&router, "tr0", "10.231.1.1/24"),
            (&router, "tr1", "10.231.2.1/24"),
            (&server, "ts0", "10.231.2.2/24"),
        ] {
            ns.run("ip", &["addr", "add", addr, "dev", dev], true);
            ns.run("ip", &["link", "set", dev, "up"], true);
        }
        for (ns, dev, addr) in [
            (&client, "tc0", "fd31:1::2/64"),
            (&router, "tr0", "fd31:1::1/64"),
            (&router, "tr1", "fd31:2::1/64"),
            (&server, "ts0", "fd31:2::2/64"),
        ] {
            ns.run(
                "ip",
                &["-6", "addr", "add", addr, "dev", dev, "nodad"],
                true,
            );
        }
        client.run(
            "ip",
            &["route", "add", "default", "via", "10.231.1.1"],
            true,
        );
        client.run(
            "ip",
            &["-6", "route", "add", "default", "via", "fd31:1::1"],
            true,
        );
        server.run(
            "ip",
            &["-6", "route", "add", "fd31:1::/64", "via", "fd31:2::1"],
            true,
        );
        sysctl(&router, "net.ipv4.ip_forward", "1");
        sysctl(&router, "net.ipv6.conf.all.forwarding", "1");
        // Replies come back out of the TUN from addresses the main table routes elsewhere.
        for k in ["all", "default"] {
            sysctl(&router, &format!("net.ipv4.conf.{k}.rp_filter"), "0");
        }
        let tools = tempdir::Dir::new("lan-tools");
        std::fs::write(tools.path().join("t.py"), TOOLS).unwrap();
        Lan {
            client,
            router,
            server,
            tools,
        }
    }

    pub fn script(&self) -> String {
        self.tools.path().join("t.py").to_str().unwrap().to_string()
    }

    /// TCP and UDP echo servers on the server's two addresses, at [`ECHO_TCP`] and [`ECHO_UDP`].
    pub fn echo(&self) -> Proc {
        self.echo_on(&format!("10.231.2.2,{SERVER6}"))
    }

    /// The echo servers on the server's addresses `hosts` (comma-separated).
    pub fn echo_on(&self, hosts: &str) -> Proc {
        let mut p = Proc {
            child: Command::new("ip")
                .args(["netns", "exec", &self.server.0, "python3", &self.script()])
                .args(["echo", hosts, &ECHO_TCP.to_string()])
                .arg(ECHO_UDP.to_string())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap(),
            name: "echo".into(),
            dir: tempdir::Dir::new("lan-echo"),
        };
        wait_bound(&mut p, "tcp", ECHO_TCP);
        p
    }

    /// Runs the tools script on the LAN client: (succeeded, its output).
    pub fn client_tool(&self, args: &[&str]) -> (bool, String) {
        self.tool_in(&self.client, args)
    }

    /// Runs the tools script in namespace `ns`: (succeeded, its output).
    pub fn tool_in(&self, ns: &Ns, args: &[&str]) -> (bool, String) {
        let out = Command::new("ip")
            .args(["netns", "exec", &ns.0, "timeout", "60", "python3"])
            .arg(self.script())
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
}
