//! The runner against the real peers on loopback, with small amounts (no performance assertions).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use ferry_lab::report::Status;
use ferry_lab::runner::{self, RunOpts, Test};

fn tmp(tag: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("ferry-lab-test-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    p
}

fn lab(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ferry-lab"))
        .args(args)
        .output()
        .expect("running ferry-lab")
}

fn rows(out: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(out.join("results.json")).expect("results.json");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["rows"].as_array().unwrap().clone()
}

fn find<'a>(rows: &'a [serde_json::Value], scn: &str, imp: &str) -> Vec<&'a serde_json::Value> {
    rows.iter()
        .filter(|r| r["scenario"] == scn && r["implementation"] == imp)
        .collect()
}

fn peer(name: &str) {
    let p = runner::peers_dir().join(name);
    assert!(
        p.exists(),
        "peer {name} missing at {}: run scripts/peers.sh",
        p.display()
    );
}

/// The issue's acceptance command, with small amounts.
#[test]
fn relay_vmess_ss_with_xray_singbox_ssrust() {
    for p in ["xray", "sing-box", "sslocal", "ssserver"] {
        peer(p);
    }
    let out = tmp("accept");
    let o = lab(&[
        "run",
        "relay",
        "vmess-aes-128-gcm",
        "ss-aes-128-gcm",
        "--impl",
        "xray,sing-box,ss-rust",
        "--streams",
        "1,2",
        "--amount",
        "20M",
        "--out",
        out.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "ferry-lab failed:\n{stderr}");
    assert!(stderr.contains("[1/"), "no progress lines:\n{stderr}");
    let rows = rows(&out);
    for (scn, imp) in [
        ("relay", "xray"),
        ("relay", "sing-box"),
        ("vmess-aes-128-gcm", "xray"),
        ("vmess-aes-128-gcm", "sing-box"),
        ("ss-aes-128-gcm", "xray"),
        ("ss-aes-128-gcm", "sing-box"),
        ("ss-aes-128-gcm", "ss-rust"),
    ] {
        let rs = find(&rows, scn, imp);
        assert_eq!(rs.len(), 2, "{scn}/{imp}: one row per stream count");
        for r in rs {
            assert_eq!(r["status"], "ok", "{scn}/{imp}: {r}");
            assert_eq!(r["bytes"], 20 << 20, "{scn}/{imp}");
            assert!(r["mb_per_s"].as_f64().unwrap() > 0.0);
            assert!(
                r["peak_rss_kb"].as_u64().unwrap() > 0,
                "{scn}/{imp}: no RSS sampled"
            );
        }
    }
    for scn in ["relay", "vmess-aes-128-gcm"] {
        assert_eq!(find(&rows, scn, "ss-rust")[0]["status"], "skipped");
    }
    let md = std::fs::read_to_string(out.join("results.md")).unwrap();
    assert!(md.contains("| ss-aes-128-gcm | ss-rust | 2 |"), "{md}");
    assert!(md.contains("speed vs xray"), "{md}");
    for c in [
        "chart-relay.png",
        "chart-vmess-aes-128-gcm.png",
        "chart-ss-aes-128-gcm.png",
    ] {
        let png = std::fs::read(out.join(c)).unwrap_or_else(|_| panic!("{c} missing"));
        assert_eq!(&png[..4], b"\x89PNG", "{c}");
        assert!(md.contains(c), "{c} not referenced");
    }
    let _ = std::fs::remove_dir_all(&out);
}

fn ferry_debug_bin() -> PathBuf {
    let root = runner::workspace_root();
    let st = Command::new(env!("CARGO"))
        .args(["build", "-p", "ferry"])
        .current_dir(&root)
        .status()
        .unwrap();
    assert!(st.success(), "cargo build -p ferry");
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root.join("target"));
    target.join("debug/ferry")
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::create_dir_all(dir.join(name).parent().unwrap()).unwrap();
    std::fs::write(dir.join(name), text).unwrap();
}

fn opts(scenarios: &[&str], impls: &[&str], out: &Path, dir: &Path) -> RunOpts {
    RunOpts {
        scenarios: scenarios.iter().map(|s| s.to_string()).collect(),
        impls: impls.iter().map(|s| s.to_string()).collect(),
        streams: vec![1],
        amount: 4 << 20,
        runs: 1,
        out: out.to_path_buf(),
        tests: vec![Test::Throughput],
        idle: vec![],
        baseline: Some("xray".into()),
        ferry_bin: None,
        scenario_dir: dir.to_path_buf(),
        peers_dir: runner::peers_dir(),
        stall: Duration::from_secs(5),
        ttfb_count: 10,
        rr_count: 50,
        rr_size: 64,
        handshakes: 20,
        handshake_concurrency: 4,
        churn: 2000,
        soak: Duration::from_secs(1),
        soak_idle: 20,
        soak_hostile: 5,
        soak_churn: 500,
        soak_cycles: 0,
        inner_tls: None,
        charts: false,
        testbed: None,
    }
}

const XRAY_SERVER: &str = r#"{"inbounds": [{"listen": "127.0.0.1", "port": {{server_port}}, "protocol": "dokodemo-door",
  "settings": {"address": "127.0.0.1", "port": {{target_port}}, "network": "tcp"}}],
  "outbounds": [{"protocol": "freedom"}]}"#;

/// Ferry rows: a relay measures; a protocol Ferry lacks is "not yet", never an error.
#[test]
fn ferry_relay_runs_and_missing_protocol_is_not_yet() {
    let bin = ferry_debug_bin();
    let dir = tmp("ferry-scn");
    write(
        &dir,
        "wg.toml",
        r#"description = "a protocol Ferry lacks"
[[impl.xray.process]]
name = "client"
bin = "xray"
args = ["run", "-c", "{{config}}"]
config = '''{"inbounds": [{"listen": "127.0.0.1", "port": {{entry_port}}, "protocol": "dokodemo-door",
  "settings": {"address": "127.0.0.1", "port": {{target_port}}, "network": "tcp"}}],
  "outbounds": [{"protocol": "loopback", "settings": {"inboundTag": "nowhere"}}]}'''
listen = ["entry_port"]
[impl.ferry]
same_as = "xray"
"#,
    );
    std::fs::copy(
        ferry_lab::scenario::default_dir().join("relay.toml"),
        dir.join("relay.toml"),
    )
    .unwrap();
    std::fs::create_dir_all(dir.join("templates")).unwrap();
    let t = "xray/relay.json";
    write(
        &dir,
        &format!("templates/{t}"),
        &std::fs::read_to_string(ferry_lab::scenario::default_dir().join("templates").join(t))
            .unwrap(),
    );
    let out = tmp("ferry-out");
    let mut o = opts(&["relay", "wg"], &["ferry"], &out, &dir);
    o.ferry_bin = Some(bin);
    o.tests = vec![
        Test::Throughput,
        Test::Reverse,
        Test::Latency,
        Test::Handshake,
        Test::Churn,
        Test::BulkIdle,
        Test::Soak,
    ];
    o.churn = 1500;
    o.idle = vec![30];
    let rows = ferry_lab::report::run_and_report(&o).unwrap();
    let relay: Vec<_> = rows.iter().filter(|r| r.scenario == "relay").collect();
    assert_eq!(relay.len(), 7);
    for r in relay {
        assert_eq!(r.status, Status::Ok, "{r:?}");
    }
    let lat = rows.iter().find(|r| r.test == "latency").unwrap();
    assert_eq!(lat.ttfb.as_ref().unwrap().samples, 10);
    assert_eq!(lat.rtt.as_ref().unwrap().samples, 50);
    // Handshakes: 20 one at a time, 20 four at a time, every one echoed; the relay has one
    // process (named "relay"), which counts as "other": no server CPU.
    let hs = rows.iter().find(|r| r.test == "handshake").unwrap();
    let h = hs.handshake.as_ref().unwrap();
    assert_eq!(
        (h.sequential.burst.conns, h.sequential.burst.concurrency),
        (20, 1)
    );
    assert_eq!(
        (h.parallel.burst.conns, h.parallel.burst.concurrency),
        (20, 4)
    );
    assert_eq!(h.sequential.burst.ttfb.samples, 20);
    assert!(h.parallel.burst.conns_per_s > 0.0);
    assert_eq!(h.cpu_per_1000().0, 0.0);
    // Churn: the first sample after 1,500 (all of them: fewer than 10,000), RSS of the relay.
    let ch = rows.iter().find(|r| r.test == "churn").unwrap();
    let samples = ch.churn.as_ref().unwrap();
    assert_eq!(samples.last().unwrap().conns, 1500);
    assert!(
        samples[0]
            .rss_kb
            .iter()
            .any(|(n, kb)| n == "relay" && *kb > 1000),
        "{samples:?}"
    );
    // Bulk beside idle: both transfers measured, 30 connections held during the second.
    let bi = rows.iter().find(|r| r.test == "bulk-idle").unwrap();
    assert_eq!(bi.streams, 30);
    assert!(
        bi.alone_mb_per_s.unwrap() > 0.0 && bi.mb_per_s > 0.0,
        "{bi:?}"
    );
    // Soak: at least one cycle of 500 short connections beside 20 idle ones, hostile clients
    // held and let go, RSS sampled at every stage.
    let sk = rows.iter().find(|r| r.test == "soak").unwrap();
    let s = sk.soak.as_ref().unwrap();
    assert!(s.cycles >= 1 && s.churned == 500 * s.cycles, "{s:?}");
    assert_eq!(
        (s.idle, s.hostile, s.bulk_mb_per_s.len()),
        (20, 5, s.cycles)
    );
    for phase in [
        "start",
        "bulk alone",
        "idle held",
        "churn",
        "cycle end",
        "released",
    ] {
        assert!(s.samples.iter().any(|x| x.phase == phase), "{phase}: {s:?}");
    }
    assert!(s.samples.iter().all(|x| x.total_mib() > 1.0), "{s:?}");
    assert!(s.bulk_alone_mb_per_s > 0.0, "{s:?}");
    let wg: Vec<_> = rows.iter().filter(|r| r.scenario == "wg").collect();
    assert!(!wg.is_empty());
    for r in wg {
        assert_eq!(r.status, Status::NotYet, "{r:?}");
    }
    let md = std::fs::read_to_string(out.join("results.md")).unwrap();
    assert!(md.contains("| wg | ferry | 1 | not yet |"), "{md}");
    assert!(md.contains("## Handshakes (fresh connections)"), "{md}");
    assert!(md.contains("## Churn"), "{md}");
    assert!(md.contains("## Soak"), "{md}");
    assert!(
        md.contains("## Bulk transfer beside idle connections"),
        "{md}"
    );
    assert!(md.contains("| relay | ferry | "), "{md}");
    let _ = std::fs::remove_dir_all(&out);
    let _ = std::fs::remove_dir_all(&dir);
}

/// PIDs of live processes whose command line mentions `needle`.
fn processes_mentioning(needle: &str) -> Vec<u32> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmd).contains(needle) && ferry_lab::procs::alive(pid) {
            v.push(pid);
        }
    }
    v
}

/// A chain whose second process cannot start: a clear error, and the first process is stopped.
#[test]
fn failures_are_errors_and_every_process_is_stopped() {
    peer("xray");
    let dir = tmp("fail-scn");
    write(
        &dir,
        "half.toml",
        &format!(
            r#"description = "second process exits at once"
[[impl.xray.process]]
name = "server"
bin = "xray"
args = ["run", "-c", "{{{{config}}}}"]
config = '''{XRAY_SERVER}'''
listen = ["server_port"]
[[impl.xray.process]]
name = "client"
bin = "xray"
args = ["run", "-c", "{{{{config}}}}"]
config = '''{{"inbounds": [{{"port": {{{{entry_port}}}}, "protocol": "no-such-protocol"}}]}}'''
listen = ["entry_port"]
[[impl.sing-box.process]]
name = "client"
bin = "no-such-peer-binary"
listen = ["entry_port"]
"#
        ),
    );
    let out = tmp("fail-out");
    let o = opts(
        &["half", "not-a-scenario"],
        &["xray", "sing-box"],
        &out,
        &dir,
    );
    let rows = ferry_lab::report::run_and_report(&o).unwrap();
    let bad = rows
        .iter()
        .find(|r| r.scenario == "not-a-scenario")
        .unwrap();
    assert_eq!(bad.status, Status::Error);
    assert!(
        bad.message.as_ref().unwrap().contains("unknown scenario"),
        "{bad:?}"
    );
    let x = rows
        .iter()
        .find(|r| r.scenario == "half" && r.implementation == "xray")
        .unwrap();
    assert_eq!(x.status, Status::Error);
    let msg = x.message.as_ref().unwrap();
    assert!(msg.contains("client exited"), "{msg}");
    // The server had started (its log exists) and is gone now.
    let work = out.join("work");
    let started = std::fs::read_dir(&work)
        .unwrap()
        .flatten()
        .any(|e| e.path().join("server.log").exists());
    assert!(started, "the server was never started");
    assert_eq!(
        processes_mentioning(out.to_str().unwrap()),
        Vec::<u32>::new()
    );
    let sb = rows
        .iter()
        .find(|r| r.scenario == "half" && r.implementation == "sing-box")
        .unwrap();
    assert_eq!(sb.status, Status::Error);
    assert!(
        sb.message.as_ref().unwrap().contains("not installed"),
        "{sb:?}"
    );
    let md = std::fs::read_to_string(out.join("results.md")).unwrap();
    assert!(md.contains("**error**"), "{md}");
    let _ = std::fs::remove_dir_all(&out);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The CLI exits non-zero when a measurement failed.
#[test]
fn cli_fails_on_a_bad_scenario_name() {
    peer("xray");
    // A relative --out, with the chain's processes running in their own folders.
    let cwd = tmp("cli-bad");
    let out = cwd.join("rel-out");
    let o = Command::new(env!("CARGO_BIN_EXE_ferry-lab"))
        .args(["run", "bare", "bogus-scenario", "relay", "--impl", "xray"])
        .args(["--amount", "2M", "--streams", "1", "--out", "rel-out"])
        .current_dir(&cwd)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let md = std::fs::read_to_string(out.join("results.md")).unwrap();
    assert!(md.contains("unknown scenario \"bogus-scenario\""), "{md}");
    let rows = rows(&out);
    for scn in ["bare", "relay"] {
        assert!(
            rows.iter()
                .any(|r| r["scenario"] == scn && r["status"] == "ok"),
            "{scn}: {rows:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&cwd);
}

/// `--inner-tls`: loadgen and receiver speak TLS through a chain; the rows are measured, the
/// receiver's view is checked, and the report names the inner TLS.
#[test]
fn inner_tls_through_a_chain() {
    peer("xray");
    let out = tmp("inner-tls");
    let o = lab(&[
        "run",
        "bare",
        "relay",
        "--impl",
        "xray",
        "--streams",
        "1,2",
        "--amount",
        "8M",
        "--reverse",
        "--tests",
        "throughput,latency",
        "--ttfb-count",
        "5",
        "--rr-count",
        "20",
        "--inner-tls",
        "1.3",
        "--record",
        "4K",
        "--no-charts",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(
        o.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let rs = rows(&out);
    assert_eq!(rs.len(), 2 * 2 + 2 * 2 + 2, "{rs:#?}");
    for r in &rs {
        assert_eq!(r["status"], "ok", "{r}");
    }
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(doc["inner_tls"]["version"], "1.3");
    assert_eq!(doc["inner_tls"]["record"], 4096);
    let md = std::fs::read_to_string(out.join("results.md")).unwrap();
    assert!(
        md.contains("inner TLS 1.3 (X25519, AES-128-GCM), 4096-byte records"),
        "{md}"
    );
    let _ = std::fs::remove_dir_all(&out);

    // --record alone is a usage error.
    let o = lab(&["run", "bare", "--record", "1K"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--record needs --inner-tls"));
}
