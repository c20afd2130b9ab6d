//! Fallbacks with a real web server behind them: nginx (Debian's nginx-light, started here on
//! loopback with its own prefix) serves pages behind a Ferry Trojan+TLS and VLESS+TLS inbound;
//! curl gets them over HTTPS by SNI, by ALPN (h2 vs http/1.1) and by path, over a TCP port, a
//! unix socket and an abstract socket, with PROXY v1/v2 headers nginx reads as the client's
//! address; and the proxy path still works on the same port.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::common;
use common::*;
use std::path::Path;
use std::process::Command;

const ID: &str = "27848739-7e62-4138-9fd3-098a63964b6b";
const PW: &str = "fallback test password";

fn ferry_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ferry"))
}

/// nginx: `site-tcp` on `tcp`, `site-unix` on a unix socket, `site-h2` (h2c) on `h2`, and on
/// `pp1`/`pp2` a server that expects a PROXY header and answers with the address it carried.
fn nginx(d: &Path, tcp: u16, h2: u16, pp: u16) -> Proc {
    let sock = d.join("nginx.sock");
    let servers = format!(
        r#"    server {{ listen 127.0.0.1:{tcp}; location / {{ return 200 "site-tcp $request_uri\n"; }} }}
    server {{ listen unix:{sock}; location / {{ return 200 "site-unix $request_uri\n"; }} }}
    server {{ listen 127.0.0.1:{h2} http2; location / {{ return 200 "site-h2 $server_protocol\n"; }} }}
    server {{
        listen 127.0.0.1:{pp} proxy_protocol;
        set_real_ip_from 127.0.0.0/8;
        real_ip_header proxy_protocol;
        location / {{ return 200 "client $remote_addr\n"; }}
    }}"#,
        sock = sock.display()
    );
    common::nginx(d, common::Nginx::Http(&servers), &[tcp, h2, pp])
}

fn cert(dir: &Path) -> (String, String, String) {
    let prefix = dir.join("srv");
    let out = Command::new(ferry_bin())
        .args([
            "tls",
            "cert",
            "--domain",
            "ferry.test",
            "--domain",
            "b.test",
            "--file",
        ])
        .arg(&prefix)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let p = prefix.to_str().unwrap();
    (
        format!("{p}.crt"),
        format!("{p}.key"),
        String::from_utf8(out.stdout).unwrap().trim().to_string(),
    )
}

/// `curl -sk` to https://NAME:PORT/PATH, resolved to 127.0.0.1, from source `from`.
fn curl(name: &str, port: u16, path: &str, extra: &[&str]) -> String {
    let out = Command::new(peer("curl"))
        .args(["-sk", "--max-time", "10", "--resolve"])
        .arg(format!("{name}:{port}:127.0.0.1"))
        .args(extra)
        .arg(format!("https://{name}:{port}{path}"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn fallbacks_json(tcp: u16, h2: u16, pp: u16, sock: &Path) -> String {
    format!(
        r#"[{{"dest":{tcp}}},
            {{"path":"/unix","dest":"{sock}"}},
            {{"path":"/abstract","dest":"@ferry-fb-{tcp}"}},
            {{"path":"/pp1","dest":{pp},"xver":1}},
            {{"path":"/pp2","dest":"127.0.0.1:{pp}","xver":2}},
            {{"alpn":"h2","dest":{h2}}},
            {{"name":"b.test","dest":{pp},"xver":2}}]"#,
        sock = sock.display()
    )
}

/// nginx's sites (on `tcp`, `h2`, `pp` and a unix socket), a certificate for Ferry's inbounds,
/// and the fallback table pointing at those sites.
struct Sites {
    tcp: u16,
    cert: (String, String, String),
    fbs: String,
    _nginx: Proc,
}

fn sites(d: &Path) -> Sites {
    let (tcp, h2, pp) = (free_port(), free_port(), free_port());
    Sites {
        tcp,
        _nginx: nginx(d, tcp, h2, pp),
        cert: cert(d),
        fbs: fallbacks_json(tcp, h2, pp, &d.join("nginx.sock")),
    }
}

fn check_fallbacks(port: u16, f: &Proc) {
    let http1 = ["--http1.1"];
    assert_eq!(
        curl("ferry.test", port, "/", &http1),
        "site-tcp /",
        "{}",
        f.output()
    );
    assert_eq!(
        curl("ferry.test", port, "/x?y=1", &http1),
        "site-tcp /x?y=1"
    );
    // By path, to a unix socket and to an abstract socket (a dokodemo inbound listening on
    // it forwards to the TCP site).
    assert_eq!(curl("ferry.test", port, "/unix", &http1), "site-unix /unix");
    assert_eq!(
        curl("ferry.test", port, "/abstract", &http1),
        "site-tcp /abstract"
    );
    // PROXY v1 and v2: nginx sees the client's own address (curl binds 127.0.0.7).
    let from = ["--http1.1", "--interface", "127.0.0.7"];
    assert_eq!(curl("ferry.test", port, "/pp1", &from), "client 127.0.0.7");
    assert_eq!(curl("ferry.test", port, "/pp2", &from), "client 127.0.0.7");
    // By ALPN: h2 negotiated goes to the h2c server.
    assert_eq!(
        curl("ferry.test", port, "/", &["--http2"]),
        "site-h2 HTTP/2.0"
    );
    // By SNI.
    assert_eq!(curl("b.test", port, "/", &from), "client 127.0.0.7");
}

fn inbound(proto: &str, port: u16, c: &(String, String, String), fbs: &str) -> String {
    let clients = if proto == "trojan" {
        format!(r#"[{{"password":"{PW}"}}]"#)
    } else {
        format!(r#"[{{"id":"{ID}"}}],"decryption":"none""#)
    };
    format!(
        r#"{{"tag":"{proto}-in","listen":"127.0.0.1","port":{port},"protocol":"{proto}",
            "settings":{{"clients":{clients},"fallbacks":{fbs}}},
            "streamSettings":{{"security":"tls","tlsSettings":{{"alpn":["h2","http/1.1"],
              "certificates":[{{"certificateFile":"{}","keyFile":"{}"}}]}}}}}}"#,
        c.0, c.1
    )
}

#[test]
fn trojan_and_vless_fall_back_to_nginx_by_sni_alpn_and_path() {
    let d = tempdir::Dir::new("fallbacks");
    let s = sites(d.path());
    let (tcp, c, fbs) = (s.tcp, &s.cert, &s.fbs);
    let (tj, vl) = (free_port(), free_port());
    let abstract_fwd = format!(
        r#"{{"listen":"@ferry-fb-{tcp}","protocol":"dokodemo-door",
            "settings":{{"address":"127.0.0.1","port":{tcp},"network":"tcp"}}}}"#
    );
    let cfg = format!(
        r#"{{"log":{{"loglevel":"debug"}},"inbounds":[{},{},{abstract_fwd}],
            "outbounds":[{{"protocol":"freedom","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}]}}"#,
        inbound("trojan", tj, c, fbs),
        inbound("vless", vl, c, fbs)
    );
    let f = ferry(&cfg, &[tj, vl]);
    check_fallbacks(tj, &f);
    check_fallbacks(vl, &f);
    assert!(f.output().contains("to fallback"), "{}", f.output());
}

#[test]
fn the_proxy_path_works_beside_the_fallback_on_one_port() {
    // An Xray Trojan client and an Xray VLESS client through the same ports nginx is
    // reachable on.
    let d = tempdir::Dir::new("fallbacks-proxy");
    let s = sites(d.path());
    let (c, fbs) = (&s.cert, &s.fbs);
    let (tj, vl) = (free_port(), free_port());
    let server = format!(
        r#"{{"log":{{"loglevel":"debug"}},"inbounds":[{},{}],"outbounds":[{{"protocol":"freedom","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}]}}"#,
        inbound("trojan", tj, c, fbs),
        inbound("vless", vl, c, fbs)
    );
    let f = ferry(&server, &[tj, vl]);
    let echo = echo_server();
    let (e1, e2) = (free_port(), free_port());
    let tls = format!(
        r#""streamSettings":{{"security":"tls","tlsSettings":{{"serverName":"ferry.test","pinnedPeerCertSha256":"{}"}}}}"#,
        c.2
    );
    let client = format!(
        r#"{{"log":{{"loglevel":"warning"}},
            "inbounds":[{{"tag":"a","listen":"127.0.0.1","port":{e1},"protocol":"dokodemo-door",
                          "settings":{{"address":"127.0.0.1","port":{ep},"network":"tcp"}}}},
                        {{"tag":"b","listen":"127.0.0.1","port":{e2},"protocol":"dokodemo-door",
                          "settings":{{"address":"127.0.0.1","port":{ep},"network":"tcp"}}}}],
            "outbounds":[{{"tag":"tj","protocol":"trojan","settings":{{"servers":[{{"address":"127.0.0.1","port":{tj},"password":"{PW}"}}]}},{tls}}},
                         {{"tag":"vl","protocol":"vless","settings":{{"vnext":[{{"address":"127.0.0.1","port":{vl},"users":[{{"id":"{ID}","encryption":"none"}}]}}]}},{tls}}}],
            "routing":{{"rules":[{{"inboundTag":["b"],"outboundTag":"vl"}}]}}}}"#,
        ep = echo.port()
    );
    let x = spawn_with_config(&peer("xray"), "xray", &client, &["run", "-c", "{config}"]);
    wait_listening(e1, &x);
    wait_listening(e2, &x);
    for e in [e1, e2] {
        assert!(echo_ok(e, 8 << 20), "{}\n{}", f.output(), x.output());
    }
    assert_eq!(curl("ferry.test", tj, "/", &["--http1.1"]), "site-tcp /");
    assert_eq!(
        curl("ferry.test", vl, "/unix", &["--http1.1"]),
        "site-unix /unix"
    );
}

/// A fallback whose destination is an inbound of the same Ferry (a TCP port, or an abstract
/// socket) is handed to it in-process; with `xver` the inbound's acceptProxyProtocol reads the
/// header as from a socket, so it sees (and logs) the client's own address; without `xver` it
/// gets no header and refuses the connection, as it would refuse a dialed one.
#[test]
fn a_fallback_to_an_own_inbound_goes_in_process_with_its_proxy_header() {
    let d = tempdir::Dir::new("fallbacks-local");
    let s = sites(d.path());
    let (tcp, c) = (s.tcp, &s.cert);
    let (tj, fwd) = (free_port(), free_port());
    let n = std::process::id();
    let fbs = format!(
        r#"[{{"dest":{fwd},"xver":1}},
            {{"path":"/abs","dest":"@ferry-local-{n}","xver":2}},
            {{"path":"/plain","dest":"127.0.0.1:{fwd}"}}]"#
    );
    // Two dokodemo inbounds forwarding to nginx's plain site: one on a TCP port, one on an
    // abstract socket, both reading PROXY headers.
    let fwd_in = |listen: String, tag: &str| {
        format!(
            r#"{{"tag":"{tag}",{listen},"protocol":"dokodemo-door",
                "settings":{{"address":"127.0.0.1","port":{tcp},"network":"tcp"}},
                "streamSettings":{{"tcpSettings":{{"acceptProxyProtocol":true}}}}}}"#
        )
    };
    let cfg = format!(
        r#"{{"log":{{"loglevel":"debug"}},"inbounds":[{},{},{}],
            "outbounds":[{{"tag":"direct","protocol":"freedom","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}]}}"#,
        inbound("trojan", tj, c, &fbs),
        fwd_in(format!(r#""listen":"127.0.0.1","port":{fwd}"#), "fwd-tcp"),
        fwd_in(format!(r#""listen":"@ferry-local-{n}""#), "fwd-abs"),
    );
    let f = ferry(&cfg, &[tj, fwd]);
    let from = ["--http1.1", "--interface", "127.0.0.7"];
    assert_eq!(
        curl("ferry.test", tj, "/", &from),
        "site-tcp /",
        "{}",
        f.output()
    );
    assert_eq!(
        curl("ferry.test", tj, "/abs", &from),
        "site-tcp /abs",
        "{}",
        f.output()
    );
    let log = f.output();
    assert_eq!(log.matches("(in-process)").count(), 2, "{log}");
    // The inbounds behind saw the client's address from the PROXY headers, not loopback (their
    // access lines: `from 127.0.0.7:PORT accepted tcp:... [fwd-tcp >> direct]`).
    for tag in ["fwd-tcp", "fwd-abs"] {
        assert!(
            log.lines()
                .any(|l| l.contains(&format!("[{tag} >> direct]")) && l.contains("from 127.0.0.7:")),
            "{tag} did not see the client's address\n{log}"
        );
    }
    // Without xver the header is not there, and the inbound (still expecting one) refuses the
    // connection as it would refuse a dialed one: curl gets nothing.
    assert_eq!(
        curl("ferry.test", tj, "/plain", &from),
        "",
        "{}",
        f.output()
    );
}

#[test]
fn a_fallback_that_is_down_closes_the_client_and_logs() {
    let d = tempdir::Dir::new("fallbacks-down");
    let c = cert(d.path());
    let (tj, dead) = (free_port(), free_port());
    let cfg = format!(
        r#"{{"log":{{"loglevel":"debug"}},"inbounds":[{}],"outbounds":[{{"protocol":"freedom","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}]}}"#,
        inbound("trojan", tj, &c, &format!(r#"[{{"dest":{dead}}}]"#))
    );
    let f = ferry(&cfg, &[tj]);
    let t = std::time::Instant::now();
    assert_eq!(curl("ferry.test", tj, "/", &["--http1.1"]), "");
    assert!(t.elapsed() < std::time::Duration::from_secs(9));
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(f.output().contains("unreachable"), "{}", f.output());
}

/// Sends `len` bytes through an echo chain and checks they come back unchanged.
fn echo_ok(entry: u16, len: usize) -> bool {
    use std::io::{Read, Write};
    let Ok(s) = std::net::TcpStream::connect(("127.0.0.1", entry)) else {
        return false;
    };
    s.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    let data = pattern(len, entry as u64);
    let mut w = s.try_clone().unwrap();
    let out = data.clone();
    let t = std::thread::spawn(move || {
        // Xray's Trojan client fails ("buffer is full") when its first read of the payload
        // and the request do not fit one buffer: a small first write, as an application's.
        let _ = w.write_all(&out[..100]);
        std::thread::sleep(std::time::Duration::from_millis(200));
        let _ = w.write_all(&out[100..]);
    });
    let mut got = vec![0u8; len];
    let mut r = s;
    let ok = r.read_exact(&mut got).is_ok() && got == data;
    let _ = t.join();
    ok
}

#[test]
fn a_10kb_path_goes_to_the_fallback_untouched_and_a_silent_client_is_closed() {
    let d = tempdir::Dir::new("fallbacks-odd");
    let s = sites(d.path());
    let (c, fbs) = (&s.cert, &s.fbs);
    let tj = free_port();
    let cfg = format!(
        r#"{{"log":{{"loglevel":"debug"}},"policy":{{"levels":{{"0":{{"handshake":2}}}}}},
            "inbounds":[{}],"outbounds":[{{"protocol":"freedom","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}]}}"#,
        inbound("trojan", tj, c, fbs)
    );
    let f = ferry(&cfg, &[tj]);
    // A 10 KB path: no configured path matches, so the default fallback gets every byte and
    // answers as nginx does to such a request line (414: its header buffers are 8 KB).
    let long = format!("/{}", "a".repeat(10 * 1024));
    let out = Command::new(peer("curl"))
        .args([
            "-sk",
            "--http1.1",
            "--max-time",
            "10",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
        ])
        .arg("--resolve")
        .arg(format!("ferry.test:{tj}:127.0.0.1"))
        .arg(format!("https://ferry.test:{tj}{long}"))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "414",
        "{}",
        f.output()
    );
    // A client that completes TLS and then sends nothing: closed at the handshake timeout, and
    // the fallback gets nothing.
    let t = std::time::Instant::now();
    let mut s = Command::new("openssl")
        .args(["s_client", "-quiet", "-connect", &format!("127.0.0.1:{tj}")])
        .args(["-servername", "ferry.test"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let status = loop {
        if let Some(st) = s.try_wait().unwrap() {
            break st;
        }
        assert!(
            t.elapsed() < std::time::Duration::from_secs(10),
            "never closed"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let _ = status;
    let waited = t.elapsed();
    assert!(
        waited >= std::time::Duration::from_millis(1500),
        "closed after {waited:?}"
    );
    assert!(f.output().contains("handshake timed out"), "{}", f.output());
}
