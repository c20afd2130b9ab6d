//! Port hopping (`finalmask.quicParams.udpHop`) against the real peers, in a network namespace
//! the test makes (its own loopback; nothing of the host's is touched): the server listens on
//! one port, an iptables REDIRECT sends the hop range to it (what a deployment does, see
//! examples/hysteria2-server.json), and the client moves to a new local socket and another port
//! of the range every 5 s. Plain HTTP through the client's SOCKS port keeps working across the
//! hops (every request of 16 s answered byte-exact), and the REDIRECT rule counts a new flow
//! per hop.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::*;
use crate::interop_hysteria::{
    certs, config, hy_in, hy_out, socks_in, Imp, FREEDOM, SALAMANDER_BRUTAL, XRAY_FREEDOM,
};
use crate::netns::{wait_bound, Ns};

fn bin(imp: Imp) -> std::path::PathBuf {
    match imp {
        Imp::Ferry => env!("CARGO_BIN_EXE_ferry").into(),
        _ => peer("xray"),
    }
}

fn hop_run(client: Imp, server: Imp) {
    let ns = Ns::new();
    let c = certs();
    let (sport, entry, web) = (free_port(), free_port(), free_port());
    ns.run(
        "iptables",
        &[
            "-t",
            "nat",
            "-A",
            "OUTPUT",
            "-p",
            "udp",
            "-d",
            "127.0.0.1",
            "--dport",
            "29000:29003",
            "-j",
            "REDIRECT",
            "--to-ports",
            &sport.to_string(),
        ],
        true,
    );
    let freedom = if server == Imp::Ferry {
        FREEDOM
    } else {
        XRAY_FREEDOM
    };
    let mut s = ns.spawn(
        &bin(server),
        "server",
        &config(&[hy_in(sport, &c, SALAMANDER_BRUTAL)], freedom),
    );
    wait_bound(&mut s, "udp", sport);
    let mut out: serde_json::Value =
        serde_json::from_str(&hy_out(29000, &c.pin, SALAMANDER_BRUTAL)).unwrap();
    out["streamSettings"]["finalmask"]["quicParams"]["udpHop"] =
        serde_json::json!({"ports": "29000-29003", "interval": 5});
    let mut cl = ns.spawn(
        &bin(client),
        "client",
        &config(&[socks_in(entry)], &out.to_string()),
    );
    wait_bound(&mut cl, "tcp", entry);
    // A web origin inside the namespace.
    let dir = tempdir::Dir::new("hop-web");
    let blob = pattern(64 << 10, 29);
    std::fs::write(dir.path().join("blob"), &blob).unwrap();
    let mut origin = Proc {
        child: Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns.0,
                "python3",
                "-m",
                "http.server",
                &web.to_string(),
                "--bind",
                "127.0.0.1",
                "--directory",
                dir.path().to_str().unwrap(),
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
        name: "origin".into(),
        dir: tempdir::Dir::new("hop-origin"),
    };
    wait_bound(&mut origin, "tcp", web);
    let curl = peer("curl");
    let (t0, mut ok, mut all) = (Instant::now(), 0, 0);
    while t0.elapsed() < Duration::from_secs(16) {
        all += 1;
        let got = Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns.0,
                curl.to_str().unwrap(),
                "-s",
                "--max-time",
                "5",
                "--socks5-hostname",
                &format!("127.0.0.1:{entry}"),
                &format!("http://127.0.0.1:{web}/blob"),
            ])
            .output()
            .unwrap();
        if got.stdout == blob {
            ok += 1;
        }
        std::thread::sleep(Duration::from_millis(700));
    }
    let logs = format!("{}\n{}", s.output(), cl.output());
    assert_eq!(ok, all, "requests failed across hops:\n{logs}");
    // Each hop is a new flow through the REDIRECT rule: at least 3 flows in 16 s.
    let rules = ns.run(
        "iptables",
        &["-t", "nat", "-L", "OUTPUT", "-v", "-n", "-x"],
        true,
    );
    let flows: u64 = rules
        .lines()
        .find(|l| l.contains("REDIRECT"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(
        flows >= 3,
        "only {flows} flows through the hop range:\n{rules}\n{logs}"
    );
    if client == Imp::Ferry {
        assert!(logs.matches("hopped to").count() >= 2, "{logs}");
    }
}

#[test]
fn ferry_client_hops_ports_to_xray_server() {
    hop_run(Imp::Ferry, Imp::Xray);
}

#[test]
fn xray_client_hops_ports_to_ferry_server() {
    hop_run(Imp::Xray, Imp::Ferry);
}

#[test]
fn ref_xray_hops_ports_to_xray() {
    hop_run(Imp::Xray, Imp::Xray);
}
