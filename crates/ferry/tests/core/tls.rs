//! The TLS layer's behaviour, checked from outside: certificates chosen by SNI, ALPN, versions,
//! renewed certificate files, pins, rejectUnknownSni, bad input and config errors. The TLS peer
//! is `openssl s_client` (it prints exactly what was negotiated) or Ferry's own client.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::common;
mod tls_verify;
use common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const ID: &str = "27848739-7e62-4138-9fd3-098a63964b6b";

fn ferry_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ferry"))
}

/// `ferry tls cert --domain NAME --file DIR/FILE`: returns (cert, key, pin).
fn cert(dir: &Path, file: &str, name: &str) -> (String, String, String) {
    let prefix = dir.join(file);
    let out = Command::new(ferry_bin())
        .args(["tls", "cert", "--domain", name, "--file"])
        .arg(&prefix)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let pin = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert_eq!(pin.len(), 64, "pin {pin:?}");
    let p = prefix.to_str().unwrap();
    (format!("{p}.crt"), format!("{p}.key"), pin)
}

fn cert_json(c: &(String, String, String)) -> String {
    format!(r#"{{"certificateFile":"{}","keyFile":"{}"}}"#, c.0, c.1)
}

/// A VLESS+TLS server inbound to freedom with these tlsSettings fields.
fn server_config(port: u16, tls: &str, handshake_secs: u32) -> String {
    format!(
        r#"{{"log":{{"loglevel":"debug"}},
            "policy":{{"levels":{{"0":{{"handshake":{handshake_secs}}}}}}},
            "inbounds":[{{"listen":"127.0.0.1","port":{port},"protocol":"vless",
              "settings":{{"clients":[{{"id":"{ID}"}}],"decryption":"none"}},
              "streamSettings":{{"security":"tls","tlsSettings":{{{tls}}}}}}}],
            "outbounds":[{{"protocol":"freedom","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}]}}"#
    )
}

/// What `openssl s_client` negotiated: protocol, ALPN, the served certificate's subject.
#[derive(Debug, Default)]
struct Hello {
    ok: bool,
    protocol: String,
    alpn: String,
    subject: String,
}

fn s_client(port: u16, args: &[&str]) -> Hello {
    let out = Command::new("openssl")
        .args(["s_client", "-connect", &format!("127.0.0.1:{port}")])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("openssl (scripts/peers.sh installs it)");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let field = |key: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(key).map(|v| v.trim().to_string()))
            .unwrap_or_default()
    };
    // "New, TLSv1.3, Cipher is TLS_AES_128_GCM_SHA256" (or "Cipher is (NONE)" on failure).
    let protocol = field("New, ")
        .split(',')
        .next()
        .unwrap_or_default()
        .to_string();
    Hello {
        ok: !protocol.is_empty() && !text.contains("Cipher is (NONE)"),
        protocol,
        alpn: field("ALPN protocol:"),
        subject: field("subject="),
    }
}

#[test]
fn sni_chooses_the_certificate_and_alpn_is_negotiated() {
    let d = tempdir::Dir::new("tls-sni");
    let a = cert(d.path(), "a", "a.test");
    let b = cert(d.path(), "b", "*.b.test");
    let port = free_port();
    let cfg = server_config(
        port,
        &format!(
            r#""certificates":[{},{}],"alpn":["h2","http/1.1"]"#,
            cert_json(&a),
            cert_json(&b)
        ),
        60,
    );
    let _f = ferry(&cfg, &[port]);
    let h = s_client(port, &["-servername", "a.test"]);
    assert!(h.ok, "{h:?}");
    assert_eq!(h.subject, "CN = a.test");
    assert_eq!(
        s_client(port, &["-servername", "x.b.test"]).subject,
        "CN = *.b.test"
    );
    // No certificate covers the name: the first one is served.
    assert_eq!(
        s_client(port, &["-servername", "other.test"]).subject,
        "CN = a.test"
    );
    // ALPN: the client's offer meets the server's list.
    assert_eq!(s_client(port, &["-alpn", "http/1.1"]).alpn, "http/1.1");
    assert_eq!(s_client(port, &["-alpn", "h2,http/1.1"]).alpn, "h2");
    assert_eq!(s_client(port, &["-alpn", "h2"]).alpn, "h2");
}

#[test]
fn reject_unknown_sni_refuses_names_no_certificate_covers() {
    let d = tempdir::Dir::new("tls-reject");
    let a = cert(d.path(), "a", "a.test");
    let port = free_port();
    let cfg = server_config(
        port,
        &format!(
            r#""certificates":[{}],"rejectUnknownSni":true"#,
            cert_json(&a)
        ),
        60,
    );
    let f = ferry(&cfg, &[port]);
    assert!(!s_client(port, &["-servername", "other.test"]).ok);
    assert!(!s_client(port, &["-noservername"]).ok);
    // A known name still works on the same server.
    let h = s_client(port, &["-servername", "a.test"]);
    assert!(h.ok && h.subject == "CN = a.test", "{h:?}\n{}", f.output());
    assert!(f.output().contains("rejectUnknownSni"), "{}", f.output());
}

#[test]
fn tls_versions_follow_min_and_max() {
    let d = tempdir::Dir::new("tls-ver");
    let a = cert(d.path(), "a", "a.test");
    let (p12, p13) = (free_port(), free_port());
    let cfg12 = server_config(
        p12,
        &format!(r#""certificates":[{}],"maxVersion":"1.2""#, cert_json(&a)),
        60,
    );
    let cfg13 = server_config(
        p13,
        &format!(r#""certificates":[{}],"minVersion":"1.3""#, cert_json(&a)),
        60,
    );
    let _f12 = ferry(&cfg12, &[p12]);
    let _f13 = ferry(&cfg13, &[p13]);
    assert_eq!(s_client(p12, &[]).protocol, "TLSv1.2");
    assert!(!s_client(p12, &["-tls1_3"]).ok);
    assert_eq!(s_client(p13, &[]).protocol, "TLSv1.3");
    assert!(!s_client(p13, &["-tls1_2"]).ok);
    assert_eq!(s_client(p13, &["-tls1_3"]).protocol, "TLSv1.3");
}

#[test]
fn a_renewed_certificate_file_is_served_to_the_next_connection() {
    let d = tempdir::Dir::new("tls-renew");
    let old = cert(d.path(), "site", "old.test");
    let port = free_port();
    let cfg = server_config(
        port,
        &format!(r#""certificates":[{}]"#, cert_json(&old)),
        60,
    );
    let f = ferry(&cfg, &[port]);
    assert_eq!(s_client(port, &[]).subject, "CN = old.test");
    // certbot renews: the same paths now hold another pair.
    let new = cert(d.path(), "site", "new.test");
    assert_eq!((&new.0, &new.1), (&old.0, &old.1));
    assert_eq!(
        s_client(port, &[]).subject,
        "CN = new.test",
        "{}",
        f.output()
    );
    // A renewal that cannot be used (a key of another pair) keeps the previous certificate.
    let other = cert(d.path(), "other", "other.test");
    std::fs::copy(&other.1, &old.1).unwrap();
    assert_eq!(s_client(port, &[]).subject, "CN = new.test");
    assert!(
        f.output().contains("keeping the previous one"),
        "{}",
        f.output()
    );
}

/// Entry (dokodemo) -> Ferry VLESS client over TLS with `tls` -> Ferry VLESS+TLS server -> echo.
fn client_chain(d: &Path, client_tls: &str) -> (u16, Vec<Proc>, (String, String, String)) {
    let c = cert(d, "srv", "ferry.test");
    let (entry, server) = (free_port(), free_port());
    let echo = echo_server();
    let srv = ferry(
        &server_config(
            server,
            &format!(r#""certificates":[{}]"#, cert_json(&c)),
            60,
        ),
        &[server],
    );
    let tls = client_tls.replace("{pin}", &c.2);
    let cli = ferry(
        &format!(
            r#"{{"log":{{"loglevel":"debug"}},
                "inbounds":[{{"listen":"127.0.0.1","port":{entry},"protocol":"dokodemo-door",
                  "settings":{{"address":"127.0.0.1","port":{},"network":"tcp"}}}}],
                "outbounds":[{{"protocol":"vless","settings":{{"vnext":[{{"address":"127.0.0.1",
                  "port":{server},"users":[{{"id":"{ID}","encryption":"none"}}]}}]}},
                  "streamSettings":{{"security":"tls","tlsSettings":{{{tls}}}}}}}]}}"#,
            echo.port()
        ),
        &[entry],
    );
    (entry, vec![srv, cli], c)
}

fn echo_ok(entry: u16, len: usize) -> bool {
    let Ok(s) = TcpStream::connect(("127.0.0.1", entry)) else {
        return false;
    };
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let data = pattern(len, 7);
    let mut w = s.try_clone().unwrap();
    let _ = w.write_all(&data);
    let mut got = vec![0u8; len];
    let mut r = s;
    r.read_exact(&mut got).is_ok() && got == data
}

#[test]
fn a_pinned_certificate_is_accepted_and_a_wrong_pin_refused() {
    let d = tempdir::Dir::new("tls-pin");
    let (entry, procs, _) = client_chain(
        d.path(),
        r#""serverName":"ferry.test","pinnedPeerCertSha256":"{pin}""#,
    );
    assert!(
        echo_ok(entry, 4 << 20),
        "{}{}",
        procs[0].output(),
        procs[1].output()
    );
    drop(procs);

    let wrong = "00".repeat(32);
    let (entry, procs, _) = client_chain(
        d.path(),
        &format!(r#""serverName":"ferry.test","pinnedPeerCertSha256":"{wrong}""#),
    );
    assert!(!echo_ok(entry, 1024));
    assert!(
        procs[1].output().contains("pinnedPeerCertSha256"),
        "{}",
        procs[1].output()
    );
    drop(procs);

    // Pins written with colons, in upper case, as `openssl x509 -fingerprint` prints them.
    let d2 = tempdir::Dir::new("tls-pin2");
    let c = cert(d2.path(), "x", "ferry.test");
    let colons: Vec<String> = (0..32)
        .map(|i| c.2[2 * i..2 * i + 2].to_uppercase())
        .collect();
    let cfg = format!(
        r#"{{"outbounds":[{{"protocol":"vless","settings":{{"vnext":[{{"address":"127.0.0.1",
            "port":1,"users":[{{"id":"{ID}"}}]}}]}},"streamSettings":{{"security":"tls",
            "tlsSettings":{{"pinnedPeerCertSha256":"{}"}}}}}}]}}"#,
        colons.join(":")
    );
    let out = ferry_test(&cfg);
    assert!(out.0, "{}", out.1);
}

#[test]
fn allow_insecure_connects_to_an_unverifiable_server_with_a_warning() {
    let d = tempdir::Dir::new("tls-insecure");
    let (entry, procs, _) = client_chain(d.path(), r#""allowInsecure":true"#);
    assert!(echo_ok(entry, 1 << 20));
    assert!(
        procs[1].output().contains("allowInsecure"),
        "{}",
        procs[1].output()
    );
    drop(procs);
    // Without pin or allowInsecure a self-signed server fails verification.
    let (entry, procs, _) = client_chain(d.path(), r#""serverName":"ferry.test""#);
    assert!(!echo_ok(entry, 1024), "{}", procs[1].output());
}

#[test]
fn bad_input_is_closed_and_other_connections_go_on() {
    let d = tempdir::Dir::new("tls-bad");
    let c = cert(d.path(), "srv", "ferry.test");
    let server = free_port();
    let srv = ferry(
        &server_config(server, &format!(r#""certificates":[{}]"#, cert_json(&c)), 2),
        &[server],
    );

    // A good connection, open across everything below.
    let mut good = TcpStream::connect(("127.0.0.1", server)).unwrap();
    good.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();

    // Plain HTTP to the TLS port: closed without one byte of answer.
    let mut http = TcpStream::connect(("127.0.0.1", server)).unwrap();
    http.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    http.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut got = Vec::new();
    let _ = http.read_to_end(&mut got);
    assert!(got.is_empty(), "answered {got:?}");

    // A client that stops in the middle of its ClientHello: closed after the handshake timeout.
    let mut stall = TcpStream::connect(("127.0.0.1", server)).unwrap();
    stall
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    stall.write_all(&[22, 3, 1, 0x02, 0x00, 1, 0, 1]).unwrap();
    let t = Instant::now();
    let mut b = [0u8; 64];
    let n = stall.read(&mut b).unwrap_or(0);
    assert_eq!(n, 0);
    let waited = t.elapsed();
    assert!(
        waited >= Duration::from_millis(1500) && waited < Duration::from_secs(10),
        "closed after {waited:?}"
    );
    // The socket closes as the timed-out handshake is dropped, the log line comes just after.
    let t = Instant::now();
    while !srv.output().contains("handshake not done within")
        && t.elapsed() < Duration::from_secs(5)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        srv.output().contains("handshake not done within"),
        "{}",
        srv.output()
    );

    // Garbage that looks like a TLS record header but is not a ClientHello: closed.
    let mut junk = TcpStream::connect(("127.0.0.1", server)).unwrap();
    junk.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut rec = vec![22u8, 3, 1, 0, 64];
    rec.extend_from_slice(&[0xee; 64]);
    junk.write_all(&rec).unwrap();
    let mut got = Vec::new();
    let _ = junk.read_to_end(&mut got);
    // rustls answers with a fatal alert (record type 21) at most.
    assert!(got.is_empty() || got[0] == 21, "answered {got:?}");

    // The good connection is still usable: a real TLS handshake on it completes.
    let h = s_client(server, &["-servername", "ferry.test"]);
    assert!(h.ok, "{h:?}\n{}", srv.output());
    good.write_all(&[22]).unwrap();
    drop(good);
}

/// `ferry test -c` on a config: (valid, stderr+stdout).
fn ferry_test(cfg: &str) -> (bool, String) {
    let d = tempdir::Dir::new("tls-cfg");
    let p = d.path().join("c.json");
    std::fs::write(&p, cfg).unwrap();
    let out = Command::new(ferry_bin())
        .args(["test", "-c"])
        .arg(&p)
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        ),
    )
}

#[test]
fn certificate_problems_are_config_errors_naming_the_field() {
    let d = tempdir::Dir::new("tls-errs");
    let a = cert(d.path(), "a", "a.test");
    let b = cert(d.path(), "b", "b.test");
    let base = |tls: &str| server_config(1, tls, 60);
    let missing = base(
        r#""certificates":[{"certificateFile":"/nonexistent/x.crt","keyFile":"/nonexistent/x.key"}]"#,
    );
    let (ok, out) = ferry_test(&missing);
    assert!(!ok);
    assert!(
        out.contains("inbounds[0].streamSettings.tlsSettings.certificates[0].certificateFile"),
        "{out}"
    );
    let mismatched = base(&format!(
        r#""certificates":[{{"certificateFile":"{}","keyFile":"{}"}}]"#,
        a.0, b.1
    ));
    let (ok, out) = ferry_test(&mismatched);
    assert!(!ok);
    assert!(out.contains("certificates[0].keyFile"), "{out}");
    assert!(out.contains("does not match"), "{out}");
    let none = base(r#""alpn":["h2"]"#);
    let (ok, out) = ferry_test(&none);
    assert!(!ok);
    assert!(out.contains("tlsSettings.certificates"), "{out}");
    let (ok, out) = ferry_test(&base(&format!(
        r#""certificates":[{}],"maxVersion":"1.1""#,
        cert_json(&a)
    )));
    assert!(!ok && out.contains("tlsSettings.maxVersion"), "{out}");
    let bad_pin = r#"{"outbounds":[{"protocol":"vless","settings":{"vnext":[{"address":"127.0.0.1",
        "port":1,"users":[{"id":"27848739-7e62-4138-9fd3-098a63964b6b"}]}]},
        "streamSettings":{"security":"tls","tlsSettings":{"pinnedPeerCertSha256":"abc"}}}]}"#;
    let (ok, out) = ferry_test(bad_pin);
    assert!(
        !ok && out.contains("tlsSettings.pinnedPeerCertSha256"),
        "{out}"
    );
    // Inline PEM lines work as Xray writes them.
    let pem = std::fs::read_to_string(&a.0).unwrap();
    let key = std::fs::read_to_string(&a.1).unwrap();
    let lines = |t: &str| {
        t.lines()
            .map(|l| format!("\"{l}\""))
            .collect::<Vec<_>>()
            .join(",")
    };
    let inline = base(&format!(
        r#""certificates":[{{"certificate":[{}],"key":[{}]}}]"#,
        lines(&pem),
        lines(&key)
    ));
    let (ok, out) = ferry_test(&inline);
    assert!(ok, "{out}");
}

#[test]
fn tls_cert_prints_an_inline_pair_and_its_pin() {
    let out = Command::new(ferry_bin())
        .args(["tls", "cert", "--domain", "q.test", "--domain", "127.0.0.1"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cert = v["certificate"].as_array().unwrap();
    assert_eq!(cert[0], "-----BEGIN CERTIFICATE-----");
    assert!(v["key"][0].as_str().unwrap().contains("PRIVATE KEY"));
    let err = String::from_utf8_lossy(&out.stderr);
    let pin = err.trim().strip_prefix("pinnedPeerCertSha256: ").unwrap();
    assert_eq!(pin.len(), 64);
}

#[test]
fn session_resumption_only_when_enabled() {
    let d = tempdir::Dir::new("tls-resume");
    let a = cert(d.path(), "a", "a.test");
    let (on, off) = (free_port(), free_port());
    let _f1 = ferry(
        &server_config(
            on,
            &format!(
                r#""certificates":[{}],"enableSessionResumption":true"#,
                cert_json(&a)
            ),
            60,
        ),
        &[on],
    );
    let _f2 = ferry(
        &server_config(off, &format!(r#""certificates":[{}]"#, cert_json(&a)), 60),
        &[off],
    );
    // `-reconnect`: five more connections offering the first one's session.
    let reused = |port: u16| {
        let out = Command::new("openssl")
            .args(["s_client", "-connect", &format!("127.0.0.1:{port}")])
            .args(["-tls1_2", "-reconnect"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            text.contains("Cipher is"),
            "{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text.contains("Reused, TLSv1.2")
    };
    assert!(
        reused(on),
        "enableSessionResumption: the session is resumed"
    );
    assert!(!reused(off), "by default (as Xray) no session is resumed");
}
