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
