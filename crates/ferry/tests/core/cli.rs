//! The `ferry` command line and config behaviour: subcommands, Xray spellings, config errors
//! with JSON paths, merging, stdin, graceful stop, port ranges, and the access log.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::common;
use common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_ferry")
}

fn ferry_cmd(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Writes `content` to `name` in `dir` and returns the path.
fn write(dir: &tempdir::Dir, name: &str, content: &str) -> PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, content).unwrap();
    p
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn dokodemo(tag: &str, port: u16, to: u16) -> String {
    format!(
        r#"{{"tag":"{tag}","listen":"127.0.0.1","port":{port},"protocol":"dokodemo-door",
            "settings":{{"address":"127.0.0.1","port":{to}}}}}"#
    )
}

/// Runs `ferry test -c FILE` on a config; returns (exit ok, stdout, stderr).
fn check(cfg: &str) -> (bool, String, String) {
    let dir = tempdir::Dir::new("cli");
    let p = write(&dir, "config.json", cfg);
    let o = ferry_cmd(&["test", "-c", s(&p)]);
    (o.status.success(), text(&o.stdout), text(&o.stderr))
}

fn assert_rejected(cfg: &str, want: &str) {
    let (ok, out, err) = check(cfg);
    assert!(!ok, "config was accepted:\n{cfg}\n{out}{err}");
    assert!(err.contains(want), "stderr lacks {want:?}:\n{err}");
}

#[test]
fn version_and_uuid() {
    let o = ferry_cmd(&["version"]);
    assert!(o.status.success());
    assert!(text(&o.stdout).starts_with("Ferry "), "{}", text(&o.stdout));
    let o = ferry_cmd(&["-version"]);
    assert!(o.status.success() && text(&o.stdout).starts_with("Ferry "));

    let a = text(&ferry_cmd(&["uuid"]).stdout).trim().to_string();
    let b = text(&ferry_cmd(&["uuid"]).stdout).trim().to_string();
    assert_ne!(a, b, "uuid must be random");
    let parsed = uuid::Uuid::parse_str(&a).unwrap();
    assert_eq!(
        parsed.hyphenated().to_string(),
        a,
        "canonical lower-case form"
    );
    assert_eq!(parsed.get_version_num(), 4);

    let o = ferry_cmd(&["uuid", "-i", "example"]);
    assert!(o.status.success());
    assert_eq!(
        text(&o.stdout).trim(),
        "feb54431-301b-52bb-a6dd-e1e93e81bb9e"
    );
}

const GOOD: &str = r#"{
  // line comment
  "log": {"loglevel": "warning"}, # hash comment
  /* block
     comment */
  "inbounds": [{"tag": "in-a", "listen": "127.0.0.1", "port": 10801, "protocol": "dokodemo-door",
                "settings": {"address": "127.0.0.1", "port": 80, "network": "tcp"}}],
  "outbounds": [{"tag": "direct", "protocol": "freedom"}, {"tag": "block", "protocol": "blackhole"}],
  "routing": {"rules": [{"type": "field", "inboundTag": ["in-a"], "outboundTag": "block"}]}
}"#;

#[test]
fn test_command_lists_a_good_config() {
    let (ok, out, err) = check(GOOD);
    assert!(ok, "{out}{err}");
    assert!(
        out.contains("inbound  in-a") && out.contains("dokodemo-door"),
        "{out}"
    );
    assert!(out.contains("127.0.0.1:10801"), "{out}");
    assert!(
        out.contains("outbound direct") && out.contains("(default)"),
        "{out}"
    );
    assert!(out.contains("outbound block"), "{out}");
    assert!(out.contains("Configuration OK."), "{out}");
    assert!(!err.contains("warning"), "comments must not warn: {err}");
}

#[test]
fn xray_spellings_run_test_and_config() {
    let dir = tempdir::Dir::new("cli");
    let p = write(&dir, "c.json", GOOD);
    for args in [
        vec!["run", "-test", "-config", s(&p)],
        vec!["-test", "-config", s(&p)],
        vec!["run", "--test", "-c", s(&p)],
        vec!["-test", "-c", s(&p)],
    ] {
        let o = ferry_cmd(&args);
        assert!(o.status.success(), "{args:?}: {}", text(&o.stderr));
        assert!(text(&o.stdout).contains("Configuration OK."), "{args:?}");
    }
    let bad = write(&dir, "bad.json", r#"{"outbounds":[{"protocol":"wat"}]}"#);
    let o = ferry_cmd(&["-test", "-config", s(&bad)]);
    assert!(!o.status.success());
}

#[test]
fn bad_configs_exit_nonzero_naming_the_path() {
    let doko = r#""protocol":"dokodemo-door","settings":{"address":"1.1.1.1","port":53}"#;
    assert_rejected(
        &format!(
            r#"{{"inbounds":[{{"port":1080,{doko},"streamSettings":{{"network":"quic"}}}}]}}"#
        ),
        r#"inbounds[0].streamSettings.network: "quic" is not supported"#,
    );
    assert_rejected(
        r#"{"outbounds":[{"protocol":"freedom"},{"protocol":"wat"}]}"#,
        r#"outbounds[1].protocol: unknown protocol "wat""#,
    );
    assert_rejected(
        &format!(r#"{{"inbounds":[{{"port":70000,{doko}}}]}}"#),
        "inbounds[0].port: port must be 1-65535",
    );
    assert_rejected(
        &format!(r#"{{"inbounds":[{{"port":"1000-x",{doko}}}]}}"#),
        "inbounds[0].port: invalid port or range",
    );
    assert_rejected(
        r#"{"outbounds":[{"tag":"a","protocol":"freedom"},{"tag":"a","protocol":"blackhole"}]}"#,
        r#"outbounds[1].tag: duplicate outbound tag "a""#,
    );
    assert_rejected(
        &format!(r#"{{"inbounds":[{{"tag":"i","port":1,{doko}}},{{"tag":"i","port":2,{doko}}}]}}"#),
        r#"inbounds[1].tag: duplicate inbound tag "i""#,
    );
    assert_rejected(
        r#"{"routing":{"rules":[{"domain":["geosite:cn"],"outboundTag":"d"}]}}"#,
        "routing.rules[0].domain[0]",
    );
    // Malformed JSON: line and column of the fault.
    assert_rejected("{\n  \"inbounds\": [\n    }\n}", "line 3 column 5");
}

#[test]
fn bad_xhttp_settings_name_their_path() {
    let outbound = |xs: &str, extra: &str| {
        format!(
            r#"{{"outbounds":[{{"protocol":"vless","settings":{{"vnext":[{{"address":"a.test","port":443,"users":[{{"id":"5c6f2a1e-9b0d-4e3f-8a7c-2d1b0e9f8a7c","encryption":"none"}}]}}]}},
                "streamSettings":{{"network":"xhttp","xhttpSettings":{xs}{extra}}}}}]}}"#
        )
    };
    let p = "outbounds[0].streamSettings.xhttpSettings";
    for (xs, want) in [
        (r#"{"mode":"stream-down"}"#, format!("{p}.mode: unsupported mode")),
        (r#"{"headers":{"Host":"x"}}"#, format!("{p}.headers: \"headers\" can't contain \"host\"")),
        (r#"{"xPaddingBytes":"0-100"}"#, format!("{p}.xPaddingBytes: xPaddingBytes cannot be disabled")),
        (r#"{"xPaddingBytes":"a-b"}"#, format!("{p}.xPaddingBytes: expected an integer or a range")),
        (r#"{"xPaddingObfsMode":true,"xPaddingPlacement":"body"}"#, format!("{p}.xPaddingPlacement: unsupported padding placement: body")),
        (r#"{"xPaddingMethod":"zeros"}"#, format!("{p}.xPaddingMethod: unsupported padding method: zeros")),
        (r#"{"uplinkDataPlacement":"header","mode":"stream-up"}"#, format!("{p}.uplinkDataPlacement: UplinkDataPlacement can be header only in packet-up mode")),
        (r#"{"uplinkDataPlacement":"query","mode":"packet-up"}"#, format!("{p}.uplinkDataPlacement: unsupported uplink data placement: query")),
        (r#"{"uplinkHTTPMethod":"GET"}"#, format!("{p}.uplinkHTTPMethod: uplinkHTTPMethod can be GET only in packet-up mode")),
        (r#"{"sessionPlacement":"body"}"#, format!("{p}.sessionPlacement: unsupported placement")),
        (r#"{"xmux":{"maxConnections":2,"maxConcurrency":3}}"#, format!("{p}.xmux.maxConnections: maxConnections cannot be specified together with maxConcurrency")),
        (r#"{"mode":"stream-one","downloadSettings":{"address":"b.test","port":443,"network":"xhttp"}}"#, format!("{p}.downloadSettings: can not be used in stream-one mode")),
        (r#"{"downloadSettings":{"port":443,"network":"xhttp"}}"#, format!("{p}.downloadSettings.address: is required")),
        (r#"{"downloadSettings":{"address":"b.test","port":443,"network":"ws"}}"#, format!("{p}.downloadSettings.network: the download leg's network must be xhttp")),
        (r#"{"extra":"{not json"}"#, format!("{p}.extra: not a JSON object")),
        (r#"{"extra":{"xPaddingBytes":"0-9"}}"#, format!("{p}.extra.xPaddingBytes: xPaddingBytes cannot be disabled")),
    ] {
        assert_rejected(&outbound(xs, ""), &want);
    }
    assert_rejected(
        &outbound("{}", r#","security":"tls","tlsSettings":{"alpn":["h3"]}"#),
        "outbounds[0].streamSettings.tlsSettings.alpn: XHTTP over HTTP/3",
    );
}

#[test]
fn bad_reality_settings_name_their_path() {
    let inbound = |rs: &str, network: &str| {
        format!(
            r#"{{"inbounds":[{{"port":4443,"protocol":"vless","settings":{{"clients":[{{"id":"5c6f2a1e-9b0d-4e3f-8a7c-2d1b0e9f8a7c"}}],"decryption":"none"}},
                "streamSettings":{{"network":"{network}","security":"reality","realitySettings":{rs}}}}}]}}"#
        )
    };
    let key = "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA";
    let good = |extra: &str| {
        format!(
            r#"{{"target":"127.0.0.1:443","serverNames":["a.test"],"privateKey":"{key}","shortIds":[""]{extra}}}"#
        )
    };
    assert_rejected(
        &inbound(
            r#"{"serverNames":["a.test"],"privateKey":"x","shortIds":[""]}"#,
            "raw",
        ),
        "inbounds[0].streamSettings.realitySettings.target: is required",
    );
    assert_rejected(
        &inbound(&good("").replace(key, "short"), "raw"),
        "inbounds[0].streamSettings.realitySettings.privateKey: is not a base64url X25519 key",
    );
    assert_rejected(
        &inbound(&good("").replace(r#"[""]"#, r#"["abc"]"#), "raw"),
        "inbounds[0].streamSettings.realitySettings.shortIds:",
    );
    assert_rejected(
        &inbound(&good("").replace(r#"["a.test"]"#, "[]"), "raw"),
        "inbounds[0].streamSettings.realitySettings.serverNames: needs at least one name",
    );
    assert_rejected(
        &inbound(&good(r#","minClientVer":"26.x""#), "raw"),
        "inbounds[0].streamSettings.realitySettings.minClientVer:",
    );
    assert_rejected(
        &inbound(&good(r#","mldsa65Seed":"AQID""#), "raw"),
        "inbounds[0].streamSettings.realitySettings.mldsa65Seed:",
    );
    assert_rejected(
        &inbound(&good(""), "ws"),
        "inbounds[0].streamSettings.security: REALITY only supports the raw (tcp), grpc and xhttp networks",
    );
    // A client: the public key and the fingerprint.
    let outbound = |rs: &str| {
        format!(
            r#"{{"outbounds":[{{"protocol":"vless","settings":{{"vnext":[{{"address":"a.test","port":443,"users":[{{"id":"5c6f2a1e-9b0d-4e3f-8a7c-2d1b0e9f8a7c","encryption":"none"}}]}}]}},
                "streamSettings":{{"security":"reality","realitySettings":{rs}}}}}]}}"#
        )
    };
    assert_rejected(
        &outbound(r#"{"serverName":"a.test","fingerprint":"chrome"}"#),
        "outbounds[0].streamSettings.realitySettings.password: is required",
    );
    assert_rejected(
        &outbound(&format!(
            r#"{{"serverName":"a.test","fingerprint":"hellogolang","password":"{key}"}}"#
        )),
        "outbounds[0].streamSettings.realitySettings.fingerprint:",
    );
}

#[test]
fn unknown_field_is_only_a_warning() {
    let (ok, out, err) = check(
        r#"{"inbounds":[{"tag":"a","port":1080,"protocol":"dokodemo-door","bogus":true,
             "settings":{"address":"1.1.1.1","port":53,"alsoBogus":1}}],
            "outbounds":[{"protocol":"freedom"}], "weird": {}}"#,
    );
    assert!(ok, "{out}{err}");
    for w in [
        "warning: inbounds[0].bogus: unknown field",
        "warning: inbounds[0].settings.alsoBogus: unknown field",
        "warning: weird: unknown field",
    ] {
        assert!(err.contains(w), "missing {w:?} in\n{err}");
    }
}

/// Shapes Xray v26.3.27 starts with, from the public example configs: a rule for every port
/// (`"0-65535"`), and a rule naming an outbound no outbound has (Xray closes what it matches
/// at run time, so a warning says so).
#[test]
fn shapes_xray_starts_with_are_accepted() {
    let (ok, out, err) = check(
        r#"{"outbounds":[{"tag":"d","protocol":"freedom"}],
            "routing":{"rules":[{"port":"0-65535","network":"udp","outboundTag":"d"},
              {"inboundTag":["x"],"outboundTag":"nope"}]}}"#,
    );
    assert!(ok, "{out}{err}");
    let w = r#"warning: routing.rules[1].outboundTag: no outbound is tagged "nope""#;
    assert!(err.contains(w), "missing {w:?} in\n{err}");
    assert!(!err.contains("rules[0]"), "{err}");
    // Port 0 is still no port to listen on.
    assert_rejected(
        r#"{"inbounds":[{"port":"0-10","protocol":"socks"}]}"#,
        "inbounds[0].port",
    );
}

/// The API and metrics have no authentication: `ferry test` warns when either listens beyond
/// loopback (and says nothing when they stay on it).
#[test]
fn api_and_metrics_off_loopback_are_warned_about() {
    let open = r#"{"stats":{},"api":{"tag":"api","listen":"0.0.0.0:10085","services":["StatsService"]},
            "metrics":{"listen":"[::]:11111"},"outbounds":[{"protocol":"freedom"}]}"#;
    let (ok, out, err) = check(open);
    assert!(ok, "{out}{err}");
    assert!(
        err.contains("warning: api.listen: 0.0.0.0:10085 is reachable from other machines"),
        "{err}"
    );
    assert!(
        err.contains("warning: metrics.listen: [::]:11111 is reachable from other machines"),
        "{err}"
    );
    let shut = r#"{"stats":{},"api":{"tag":"api","listen":"127.0.0.1:10085","services":["StatsService"]},
            "metrics":{"listen":"[::1]:11111"},"outbounds":[{"protocol":"freedom"}]}"#;
    let (ok, out, err) = check(shut);
    assert!(ok, "{out}{err}");
    assert!(!err.contains("reachable from other machines"), "{err}");
}

#[test]
fn repeated_config_files_merge() {
    let dir = tempdir::Dir::new("cli");
    let a = write(
        &dir,
        "a.json",
        r#"{"inbounds":[{"tag":"a","listen":"127.0.0.1","port":10001,"protocol":"dokodemo-door","settings":{"address":"1.1.1.1","port":1}}],
            "outbounds":[{"tag":"direct","protocol":"freedom"}]}"#,
    );
    let b = write(
        &dir,
        "b.json",
        r#"{"inbounds":[{"tag":"b","listen":"127.0.0.1","port":10002,"protocol":"dokodemo-door","settings":{"address":"1.1.1.1","port":2}}],
            "outbounds":[{"tag":"block","protocol":"blackhole"}]}"#,
    );
    let tail = write(
        &dir,
        "c_tail.json",
        r#"{"outbounds":[{"tag":"last","protocol":"blackhole"}]}"#,
    );
    let o = ferry_cmd(&["test", "-c", s(&a), "-c", s(&b), "-c", s(&tail)]);
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}{}", text(&o.stderr));
    assert!(
        out.contains("inbound  a") && out.contains("inbound  b"),
        "{out}"
    );
    // As in Xray: a later file's outbounds go first (so "block" is the default) unless its
    // name contains "tail".
    let order: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("outbound"))
        .map(|l| l.split_whitespace().nth(1).unwrap())
        .collect();
    assert_eq!(order, ["block", "direct", "last"], "{out}");
    assert!(
        out.contains("outbound block")
            && out
                .lines()
                .any(|l| l.starts_with("outbound block") && l.contains("(default)"))
    );
}

#[test]
fn config_from_stdin() {
    let echo = echo_server();
    let port = free_port();
    let cfg = format!(
        r#"{{"inbounds":[{}],"outbounds":[{{"protocol":"freedom"}}]}}"#,
        dokodemo("in", port, echo.port())
    );
    let dir = tempdir::Dir::new("stdin");
    let mut child = Command::new(bin())
        .args(["run", "-c", "stdin:"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("err.log")).unwrap())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(cfg.as_bytes())
        .unwrap();
    let p = Proc {
        child,
        name: "ferry".into(),
        dir,
    };
    wait_listening(port, &p);
    let data = pattern(10_000, 9);
    assert!(echo_through(TcpStream::connect(("127.0.0.1", port)).unwrap(), &data) == data);
    // `ferry test -c stdin:` too.
    let mut c = Command::new(bin())
        .args(["test", "-c", "stdin:"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(GOOD.as_bytes()).unwrap();
    let o = c.wait_with_output().unwrap();
    assert!(o.status.success() && text(&o.stdout).contains("inbound  in-a"));
}

/// Four consecutive free ports.
/// A run of `n` free ports, taken below the range `free_port` hands out (10000-11999), so a
/// port of the run cannot become another test's `free_port` while this one is being set up.
fn free_range(n: u16) -> u16 {
    let start = 10000 + (std::process::id() % 200) as u16 * 10;
    'outer: for i in 0..200u16 {
        let base = 10000 + (start - 10000 + i * 10) % 2000;
        for p in base..base + n {
            if std::net::TcpListener::bind(("127.0.0.1", p)).is_err() {
                continue 'outer;
            }
        }
        return base;
    }
    panic!("no run of {n} free ports");
}

#[test]
fn port_range_binds_every_port() {
    let echo = echo_server();
    let base = free_range(4);
    let cfg = format!(
        r#"{{"inbounds":[{{"tag":"r","listen":"127.0.0.1","port":"{base}-{}","protocol":"dokodemo-door",
              "settings":{{"address":"127.0.0.1","port":{}}}}}],"outbounds":[{{"protocol":"freedom"}}]}}"#,
        base + 3,
        echo.port()
    );
    let f = ferry(&cfg, &[base]);
    for p in base..=base + 3 {
        wait_listening(p, &f);
        let data = pattern(1000, p as u64);
        let got = echo_through(TcpStream::connect(("127.0.0.1", p)).unwrap(), &data);
        assert!(got == data, "port {p}");
    }
}

#[test]
fn sigterm_stops_accepting_keeps_live_connections_for_the_grace_period() {
    let echo = echo_server();
    let port = free_port();
    let cfg = format!(
        r#"{{"inbounds":[{}],"outbounds":[{{"protocol":"freedom"}}]}}"#,
        dokodemo("in", port, echo.port())
    );
    let mut f = spawn_with_config(
        Path::new(bin()),
        "ferry",
        &cfg,
        &["run", "-c", "{config}", "--grace", "2"],
    );
    wait_listening(port, &f);
    let mut live = TcpStream::connect(("127.0.0.1", port)).unwrap();
    live.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut buf = [0u8; 5];
    live.write_all(b"hello").unwrap();
    live.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"hello");

    let t0 = Instant::now();
    f.signal(libc::SIGTERM);
    // New connections are refused at once...
    wait_refused(port, t0, Duration::from_secs(1), &f);
    // ...while the live one keeps working during the grace period.
    for i in 0..3u8 {
        std::thread::sleep(Duration::from_millis(200));
        let msg = [i; 5];
        live.write_all(&msg).unwrap();
        live.read_exact(&mut buf).unwrap();
        assert_eq!(buf, msg);
    }
    assert!(
        f.child.try_wait().unwrap().is_none(),
        "exited before the grace period ended"
    );
    // After the grace period the process exits 0 and the connection is closed.
    let status = f.wait_exit(t0, Duration::from_secs(10));
    assert!(status.success(), "exit {status:?}\n{}", f.output());
    assert!(
        t0.elapsed() >= Duration::from_millis(1500),
        "grace period not honoured"
    );
    let n = live.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "connection still open after exit");
}

#[test]
fn sigterm_with_no_connections_exits_at_once() {
    let port = free_port();
    let cfg = format!(
        r#"{{"inbounds":[{}],"outbounds":[{{"protocol":"freedom"}}]}}"#,
        dokodemo("in", port, 9)
    );
    let mut f = spawn_with_config(
        Path::new(bin()),
        "ferry",
        &cfg,
        &["run", "-c", "{config}", "--grace", "30"],
    );
    wait_listening(port, &f);
    let t0 = Instant::now();
    f.signal(libc::SIGTERM);
    let status = f.wait_exit(t0, Duration::from_secs(10));
    assert!(status.success(), "{status:?}");
}

#[test]
fn access_log_lines_in_xray_format() {
    let echo = echo_server();
    let (p1, p2) = (free_port(), free_port());
    let dir = tempdir::Dir::new("access");
    let log = dir.path().join("access.log");
    let cfg = format!(
        r#"{{"log":{{"access":"{}","loglevel":"warning"}},
            "inbounds":[{},{}],
            "outbounds":[{{"tag":"direct","protocol":"freedom"}},{{"tag":"block","protocol":"blackhole"}}],
            "routing":{{"rules":[{{"inboundTag":["in"],"outboundTag":"direct"}}]}}}}"#,
        log.display(),
        dokodemo("in", p1, echo.port()),
        dokodemo("other", p2, echo.port()),
    );
    let f = ferry(&cfg, &[p1, p2]);
    let c1 = TcpStream::connect(("127.0.0.1", p1)).unwrap();
    let src1 = c1.local_addr().unwrap();
    assert!(echo_through(c1, b"ping") == b"ping");
    let c2 = TcpStream::connect(("127.0.0.1", p2)).unwrap();
    let src2 = c2.local_addr().unwrap();
    assert!(echo_through(c2, b"pong") == b"pong");
    let want1 = format!(
        "from {src1} accepted tcp:127.0.0.1:{} [in -> direct]",
        echo.port()
    );
    let want2 = format!(
        "from {src2} accepted tcp:127.0.0.1:{} [other >> direct]",
        echo.port()
    );
    // (The readiness probes of `ferry()` are logged too; find our two connections.)
    let t = Instant::now();
    let ts = regex::Regex::new(r"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{6} (.*)$").unwrap();
    loop {
        let content = std::fs::read_to_string(&log).unwrap_or_default();
        let bodies: Vec<String> = content
            .lines()
            .map(|l| match ts.captures(l) {
                Some(c) => c[1].to_string(),
                None => panic!("line without a timestamp: {l:?}"),
            })
            .collect();
        if bodies.contains(&want1) && bodies.contains(&want2) {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "want\n{want1}\n{want2}\nin\n{content}\n{}",
            f.output()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `log.maskAddress` (3x-ui writes it): access-log addresses keep only the bits it says.
#[test]
fn access_log_masks_addresses() {
    let echo = echo_server();
    let p = free_port();
    let dir = tempdir::Dir::new("mask");
    let log = dir.path().join("access.log");
    let cfg = format!(
        r#"{{"log":{{"access":"{}","maskAddress":"half"}},
            "inbounds":[{}],"outbounds":[{{"tag":"direct","protocol":"freedom"}}]}}"#,
        log.display(),
        dokodemo("in", p, echo.port()),
    );
    let f = ferry(&cfg, &[p]);
    let c = TcpStream::connect(("127.0.0.1", p)).unwrap();
    let src = c.local_addr().unwrap().port();
    assert!(echo_through(c, b"ping") == b"ping");
    let want = format!(
        "from 127.0.*.*:{src} accepted tcp:127.0.*.*:{} [in >> direct]",
        echo.port()
    );
    let t = Instant::now();
    loop {
        let content = std::fs::read_to_string(&log).unwrap_or_default();
        if content.lines().any(|l| l.ends_with(&want)) {
            assert!(!content.contains("127.0.0.1"), "unmasked:\n{content}");
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "want {want} in\n{content}\n{}",
            f.output()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What a panel that launches the core sees when Ferry stands in Xray's place (installed as
/// its `xray` binary): `xray version` as Xray's shape (Marzban-node reads `^Xray (\d+\.\d+\.\d+)`,
/// 3x-ui the second word), and after `xray run -config stdin:` a stdout line that contains
/// "core" and ends in "started" (what Marzban-node waits for).
#[test]
fn launched_as_xray_by_a_panel() {
    use std::io::BufRead;
    use std::os::unix::process::CommandExt;
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_ferry"))
        .arg0("xray")
        .arg("version")
        .output()
        .unwrap();
    let out = text(&o.stdout);
    let re = regex::Regex::new(r"^Xray (\d+\.\d+\.\d+)").unwrap();
    let v = re
        .captures(&out)
        .unwrap_or_else(|| panic!("not Xray's version shape: {out}"));
    assert_eq!(&v[1], ferry::XRAY_COMPAT);

    let port = common::free_port();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ferry"))
        .arg0("xray")
        .args(["run", "-config", "stdin:"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let cfg = format!(
        r#"{{"inbounds": [{{"listen": "127.0.0.1", "port": {port}, "protocol": "socks"}}],
            "outbounds": [{{"protocol": "freedom"}}]}}"#
    );
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(cfg.as_bytes()).unwrap();
    drop(stdin);
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if line.contains("core") && line.trim_end().ends_with("started") {
                let _ = tx.send(line);
                return;
            }
        }
    });
    let got = rx.recv_timeout(std::time::Duration::from_secs(20));
    let _ = child.kill();
    let _ = child.wait();
    assert!(got.is_ok(), "no 'core ... started' line on stdout");
}

/// `ferry link -c` prints a link for every user of the config's VMess and VLESS inbounds, and
/// `--subscription` the same links as one base64 subscription (one per line inside).
#[test]
fn links_for_vmess_and_vless_users_and_a_subscription() {
    let dir = tempdir::Dir::new("links");
    let cfg = write(
        &dir,
        "c.json",
        r#"{"inbounds": [
            {"protocol": "vmess", "port": 443, "settings": {"clients": [
                {"id": "b831381d-6324-4d53-ad4f-8cda48b30811", "email": "a@x"}]},
             "streamSettings": {"network": "ws", "security": "tls",
                "wsSettings": {"path": "/ray"}}},
            {"protocol": "vless", "port": 8443, "settings": {"decryption": "none", "clients": [
                {"id": "27848739-7e62-4138-9fd3-098a63964b6b", "email": "b@x"}]}}]}"#,
    );
    let o = ferry_cmd(&["link", "-c", s(&cfg), "--host", "example.com"]);
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}{}", text(&o.stderr));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    let vmess = lines[0]
        .strip_prefix("a@x\t")
        .expect("the VMess user's line");
    assert!(vmess.starts_with("vmess://"), "{vmess}");
    let back = ferry_cmd(&["link", vmess]);
    let outbound = text(&back.stdout);
    for want in [
        "\"example.com\"",
        "\"/ray\"",
        "b831381d-6324-4d53-ad4f-8cda48b30811",
        "\"tls\"",
    ] {
        assert!(outbound.contains(want), "{want} in {outbound}");
    }
    let vless = lines[1]
        .strip_prefix("b@x\t")
        .expect("the VLESS user's line");
    assert!(vless.starts_with("vless://27848739-7e62-4138-9fd3-098a63964b6b@example.com:8443"));
    let o = ferry_cmd(&[
        "link",
        "-c",
        s(&cfg),
        "--host",
        "example.com",
        "--subscription",
    ]);
    let sub = text(&o.stdout);
    assert!(o.status.success(), "{sub}");
    let decoded = ferry::common::text::base64_decode(sub.trim()).unwrap();
    assert_eq!(
        String::from_utf8(decoded).unwrap(),
        format!("{vmess}\n{vless}")
    );
}

/// `ferry link -c CONFIG --sub` prints a subscription, and `ferry link --sub FILE` turns it
/// back into outbounds (tags from the links' names, with `--balancer` one balancer over them)
/// that `ferry test` accepts as a client config.
#[test]
fn a_subscription_round_trips_into_outbounds() {
    let dir = tempdir::Dir::new("sub");
    let cfg = write(
        &dir,
        "c.json",
        r#"{"inbounds": [
            {"protocol": "trojan", "port": 443, "settings": {"clients": [
                {"password": "p1", "email": "a@x"}, {"password": "p2", "email": "b@x"}]},
             "streamSettings": {"security": "tls", "tlsSettings": {"serverName": "example.com"}}}]}"#,
    );
    let o = ferry_cmd(&["link", "-c", s(&cfg), "--host", "example.com", "--sub"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let sub = write(&dir, "sub.txt", &text(&o.stdout));
    let o = ferry_cmd(&["link", "--sub", s(&sub), "--balancer"]);
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let obs = v["outbounds"].as_array().unwrap();
    assert_eq!(obs.len(), 2, "{out}");
    for (o, pass) in obs.iter().zip(["p1", "p2"]) {
        assert_eq!(o["protocol"], "trojan", "{out}");
        assert_eq!(o["settings"]["servers"][0]["password"], pass, "{out}");
    }
    let tags = [obs[0]["tag"].clone(), obs[1]["tag"].clone()];
    assert_ne!(tags[0], tags[1], "{out}");
    assert_eq!(
        v["routing"]["balancers"][0]["selector"],
        serde_json::json!(tags)
    );
    let (ok, _, err) = check(&out);
    assert!(
        ok,
        "ferry test refuses the imported outbounds: {err}\n{out}"
    );
    // A file with -c is ambiguous: refused.
    let o = ferry_cmd(&["link", "-c", s(&cfg), "--sub", s(&sub)]);
    assert!(!o.status.success());
}

/// A WireGuard outbound (WARP's shape) becomes a `wireguard://` link, and the link an outbound
/// that `ferry test` runs.
#[test]
fn a_wireguard_outbound_round_trips_through_its_link() {
    let dir = tempdir::Dir::new("wglink");
    let cfg = write(
        &dir,
        "c.json",
        r#"{"outbounds": [{"tag": "warp", "protocol": "wireguard", "settings": {
            "secretKey": "yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=",
            "address": ["172.16.0.2/32"], "reserved": [1, 2, 3], "mtu": 1280,
            "peers": [{"publicKey": "bmXOC+F1FxEMF9dyiK2H5/1SUtzH0JuVo51h2wPfgyo=",
                       "endpoint": "162.159.192.1:2408"}]}}]}"#,
    );
    let o = ferry_cmd(&["link", "-c", s(&cfg)]);
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}{}", text(&o.stderr));
    let link = out.trim();
    assert!(
        link.starts_with("wireguard://") && link.ends_with("#warp"),
        "{out}"
    );
    let o = ferry_cmd(&["link", link]);
    let outbound = text(&o.stdout);
    assert!(o.status.success(), "{outbound}{}", text(&o.stderr));
    let (ok, _, err) = check(&format!(r#"{{"outbounds": [{outbound}]}}"#));
    assert!(ok, "{err}\n{outbound}");
    assert!(outbound.contains("162.159.192.1:2408"), "{outbound}");
}

/// `ferry mlkem768 -i SEED` prints what `xray mlkem768 -i SEED` printed (v26.3.27, seed bytes
/// 0..64); `ferry vlessenc` prints Xray's layout with strings that a server and a client read.
#[test]
fn mlkem768_and_vlessenc_print_what_xray_prints() {
    let seed =
        "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vMDEyMzQ1Njc4OTo7PD0-Pw";
    let o = ferry_cmd(&["mlkem768", "-i", seed]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert_eq!(lines[0], format!("Seed: {seed}"));
    assert!(lines[1].starts_with("Client: KYqhDUI8jdoGnQK8WebN8DoJa4s9pMq5uAykoUkHZyzO8exPryNK"));
    assert_eq!(lines[1].len() - "Client: ".len(), 1579);
    assert_eq!(
        lines[2],
        "Hash32: zEsgfXtp_IkVT8_G8LlvmJk5hzORlpvB_i7qA-bziao"
    );
    assert!(!ferry_cmd(&["mlkem768", "-i", "short"]).status.success());

    let o = ferry_cmd(&["vlessenc"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    let quoted = |key: &str| -> Vec<String> {
        out.lines()
            .filter_map(|l| l.strip_prefix(&format!("\"{key}\": \"")))
            .map(|v| v.trim_end_matches('"').to_string())
            .collect()
    };
    let (dec, enc) = (quoted("decryption"), quoted("encryption"));
    assert_eq!((dec.len(), enc.len()), (2, 2), "{out}");
    assert!(out.contains("Authentication: X25519, not Post-Quantum"));
    assert!(out.contains("Authentication: ML-KEM-768, Post-Quantum"));
    use ferry::transport::vlessenc::{ClientConfig, ServerConfig};
    for (d, e) in dec.iter().zip(&enc) {
        assert!(d.starts_with("mlkem768x25519plus.native.600s."), "{d}");
        assert!(e.starts_with("mlkem768x25519plus.native.0rtt."), "{e}");
        let s = ServerConfig::parse(d).unwrap().unwrap();
        let c = ClientConfig::parse(e).unwrap().unwrap();
        // The client holds the server key's public half.
        assert_eq!(s.keys[0].public(), c.keys[0].bytes());
    }
}

/// VLESS Encryption's strings are read as Xray reads them; what Xray refuses is a config error
/// with its path and Xray's words.
#[test]
fn bad_vless_encryption_settings_name_their_path() {
    let id = "5c6f2a1e-9b0d-4e3f-8a7c-2d1b0e9f8a7c";
    let key = "YOW2u7Bl7WorXlTb-ybhAawEFebabyK1Malu_spRd2U";
    let inbound = |settings: &str| {
        format!(
            r#"{{"inbounds":[{{"port":4443,"protocol":"vless","settings":{{"clients":[{{"id":"{id}"}}],{settings}}}}}]}}"#
        )
    };
    let outbound = |enc: &str, flow: &str| {
        format!(
            r#"{{"outbounds":[{{"protocol":"vless","settings":{{"address":"a.test","port":443,"id":"{id}","encryption":"{enc}","flow":"{flow}"}}}}]}}"#
        )
    };
    let sp = "inbounds[0].settings";
    for (settings, want) in [
        (
            r#""decryption":"mlkem768""#.to_string(),
            format!("{sp}.decryption: unsupported \"decryption\": mlkem768"),
        ),
        (
            r#""decryption":"""#.to_string(),
            format!("{sp}.decryption: please add/set \"decryption\":\"none\""),
        ),
        (
            format!(r#""decryption":"mlkem768x25519plus.native.600s.100-20-40.{key}""#),
            format!("{sp}.decryption: first padding length must not be smaller than 35"),
        ),
        (
            format!(
                r#""decryption":"mlkem768x25519plus.native.600s.{key}","fallbacks":[{{"dest":80}}]"#
            ),
            format!("{sp}.fallbacks: \"fallbacks\" can not be used together with \"decryption\""),
        ),
    ] {
        assert_rejected(&inbound(&settings), &want);
    }
    let o = "outbounds[0].settings";
    assert_rejected(
        &outbound(&format!("mlkem768x25519plus.native.600s.{key}"), ""),
        &format!("{o}.encryption: unsupported \"encryption\""),
    );
    // Vision needs TLS or VLESS Encryption under it.
    assert_rejected(
        &outbound("none", "xtls-rprx-vision"),
        &format!("{o}.flow: XTLS Vision needs"),
    );
    let dir = tempdir::Dir::new("venc");
    let ok = write(
        &dir,
        "c.json",
        &outbound(
            &format!("mlkem768x25519plus.random.1rtt.100-40-50.{key}"),
            "xtls-rprx-vision",
        ),
    );
    let r = ferry_cmd(&["test", "-c", s(&ok)]);
    assert!(r.status.success(), "{}", text(&r.stderr));
    let ok = write(
        &dir,
        "s.json",
        &inbound(&format!(
            r#""decryption":"mlkem768x25519plus.xorpub.300-600s.{key}""#
        )),
    );
    let r = ferry_cmd(&["test", "-c", s(&ok)]);
    assert!(r.status.success(), "{}", text(&r.stderr));
}
