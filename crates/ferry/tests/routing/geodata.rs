//! geoip/geosite routing and sniffing through the real binary: generated .dat files, tagged
//! sinks reached through freedom redirects, a SOCKS5 client choosing its source address.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::common;
use crate::route_helpers;

use common::*;
use route_helpers::*;
use std::path::Path;
use std::time::Duration;

fn socks_in(port: u16, sniffing: &str) -> String {
    format!(
        r#"{{"tag":"in","listen":"127.0.0.1","port":{port},"protocol":"socks",
            "settings":{{"auth":"noauth","udp":true,"ip":"127.0.0.1"}}{sniffing}}}"#
    )
}

/// 24 bytes no sniffer recognises (so sniffing ends at once).
const PLAIN: &[u8] = b"hello, no protocol here\n";

#[test]
fn geo_rules_route_to_tagged_sinks() {
    let dir = tempdir::Dir::new("geo");
    write_geodata(dir.path());
    let names = [
        "private", "ads", "google", "notcn", "office", "work", "cn", "default",
    ];
    let sinks: Vec<Sink> = names.iter().map(|n| sink(n)).collect();
    let port = free_port();
    let outs: Vec<String> = std::iter::once(to_sink("default", sinks[7].port))
        .chain(sinks[..7].iter().map(|s| to_sink(&s.name, s.port)))
        .collect();
    let cfg = format!(
        r#"{{"inbounds":[{}],"outbounds":[{}],
            "routing":{{"rules":[
              {{"source":["ext:custom.dat:office"],"outboundTag":"office"}},
              {{"ip":["geoip:private"],"outboundTag":"private"}},
              {{"domain":["geosite:category-ads-all","geosite:google@ads"],"outboundTag":"ads"}},
              {{"domain":["geosite:GOOGLE"],"outboundTag":"google"}},
              {{"domain":["ext:custom.dat:work"],"outboundTag":"work"}},
              {{"domain":["geosite:cn"],"ip":["geoip:cn"],"outboundTag":"cn"}},
              {{"ip":["geoip:!cn","!geoip:us"],"outboundTag":"notcn"}}
            ]}}}}"#,
        socks_in(port, ""),
        outs.join(",")
    );
    let f = ferry_with_assets(&cfg, dir.path(), &[port]);
    let cases = [
        ("127.0.0.1", "10.1.2.3", "private"),
        ("127.0.0.1", "::1", "private"),
        ("127.0.0.1", "ads.google.com", "ads"),
        ("127.0.0.1", "x.doubleclick.net", "ads"),
        ("127.0.0.1", "tracker.foo.org", "ads"),
        ("127.0.0.1", "www.google.com", "google"),
        ("127.0.0.1", "x.ads.google.com", "google"),
        ("127.0.0.1", "a.corp.example", "work"),
        ("127.0.0.1", "9.9.9.9", "notcn"),
        ("127.0.0.1", "2001:db8::1", "notcn"),
        ("127.0.0.1", "1.0.1.1", "default"),
        ("127.0.0.1", "www.baidu.com", "default"),
        ("127.0.0.1", "8.8.8.8", "default"),
        ("127.0.0.70", "www.google.com", "office"),
    ];
    for (src, host, want) in cases {
        let got = socks_line(port, src, host, 80, PLAIN)
            .unwrap_or_else(|e| panic!("{src} -> {host}: {e}\n{}", f.output()));
        assert_eq!(got, want, "{src} -> {host}\n{}", f.output());
    }
}

#[test]
fn missing_tag_and_file_are_config_errors() {
    let dir = tempdir::Dir::new("geo-err");
    write_geodata(dir.path());
    let bin = Path::new(env!("CARGO_BIN_EXE_ferry"));
    let run = |rules: &str| {
        let cfg = format!(
            r#"{{"outbounds":[{{"protocol":"freedom","tag":"d","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}],"routing":{{"rules":[{rules}]}}}}"#
        );
        let mut p = spawn_env(
            bin,
            "ferry-test",
            &cfg,
            &["test", "-c", "{config}"],
            &[("XRAY_LOCATION_ASSET", dir.path())],
        );
        let st = p.wait_exit(std::time::Instant::now(), Duration::from_secs(20));
        (st.success(), p.output())
    };
    let (ok, out) = run(r#"{"domain":["geosite:google","geosite:nope"],"outboundTag":"d"}"#);
    assert!(!ok, "{out}");
    assert!(
        out.contains("routing.rules[0].domain[1]") && out.contains("\"NOPE\""),
        "{out}"
    );
    let (ok, out) = run(r#"{"ip":["ext:other.dat:cn"],"outboundTag":"d"}"#);
    assert!(
        !ok && out.contains("routing.rules[0].ip[0]") && out.contains("other.dat"),
        "{out}"
    );
    let (ok, out) = run(r#"{"ip":["geoip:cn","geoip:private"],"outboundTag":"d"}"#);
    assert!(ok, "{out}");
}

#[test]
fn geodata_command_lists_and_looks_up() {
    let dir = tempdir::Dir::new("geo-cli");
    write_geodata(dir.path());
    let bin = env!("CARGO_BIN_EXE_ferry");
    let out = std::process::Command::new(bin)
        .args(["geodata", "geosite.dat"])
        .env("XRAY_LOCATION_ASSET", dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("GOOGLE\t4\t@ads @cn"), "{text}");
    assert!(text.contains("CN\t6\t@!cn @ads"), "{text}");
    let out = std::process::Command::new(bin)
        .args([
            "geodata",
            dir.path().join("geoip.dat").to_str().unwrap(),
            "240e::1",
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "CN\n");
    let out = std::process::Command::new(bin)
        .args([
            "geodata",
            dir.path().join("geoip.dat").to_str().unwrap(),
            "4.4.4.4",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
}

#[test]
fn sniffed_tls_and_http_route_and_reach_the_server_byte_exact() {
    let dir = tempdir::Dir::new("sniff");
    write_geodata(dir.path());
    let (tls_sink, http_sink, other) = (sink("tls"), sink("http"), sink("other"));
    let (p1, p2) = (free_port(), free_port());
    let sniff = r#","sniffing":{"enabled":true,"destOverride":["http","tls"]}"#;
    let route_only = r#","sniffing":{"enabled":true,"destOverride":["tls"],"routeOnly":true}"#;
    let cfg = format!(
        r#"{{"inbounds":[{},{}],
            "outbounds":[{},{},{},{{"tag":"direct","protocol":"freedom","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}],
            "routing":{{"rules":[
              {{"inboundTag":["ro"],"domain":["geosite:google"],"outboundTag":"direct"}},
              {{"domain":["geosite:google"],"protocol":["tls"],"outboundTag":"tls"}},
              {{"protocol":["http"],"attrs":{{":method":"GET","host":"^cdn[0-9]+\\."}},"outboundTag":"http"}}
            ]}}}}"#,
        socks_in(p1, sniff),
        socks_in(p2, route_only).replace(r#""tag":"in""#, r#""tag":"ro""#),
        to_sink("other", other.port),
        to_sink("tls", tls_sink.port),
        to_sink("http", http_sink.port),
    );
    let f = ferry_with_assets(&cfg, dir.path(), &[p1, p2]);
    // The client asks for an IP; the SNI routes it.
    let ch = client_hello("www.Google.com");
    let got = socks_line(p1, "127.0.0.1", "192.0.2.1", 443, &ch).unwrap();
    assert_eq!(got, "tls", "{}", f.output());
    let req = b"GET /x HTTP/1.1\r\nHost: cdn7.example.net\r\nAccept: */*\r\n\r\n";
    assert_eq!(
        socks_line(p1, "127.0.0.1", "192.0.2.1", 80, req).unwrap(),
        "http"
    );
    // Without a recognisable payload: the default.
    assert_eq!(
        socks_line(p1, "127.0.0.1", "192.0.2.1", 80, PLAIN).unwrap(),
        "other"
    );
    // routeOnly: routed by the SNI to plain freedom, which still dials the IP asked for (the
    // sink's own address), so the sink sees the bytes.
    let got = socks_line(p2, "127.0.0.1", "127.0.0.1", tls_sink.port, &ch).unwrap();
    assert_eq!(got, "tls", "{}", f.output());
    // Every sink received exactly what the client sent.
    std::thread::sleep(Duration::from_millis(300));
    let t = tls_sink.got.lock().unwrap();
    assert_eq!(t.len(), 2);
    assert!(t.iter().all(|g| *g == ch), "sniffed bytes altered");
    assert_eq!(http_sink.got.lock().unwrap()[0], req.to_vec());
    assert_eq!(other.got.lock().unwrap()[0], PLAIN.to_vec());
}

/// `domainsExcluded` (routing.md §3.1, a domain-rule list as Xray reads it since v26.4.13:
/// `full:`, `regexp:`, `geosite:`, a plain string as a substring): a sniffed domain on the list
/// does not replace the destination, so the connection is routed by, and goes on to, the
/// address the client asked for; a domain not on it does replace it. The sniffed protocol
/// still routes an excluded connection (§3.2 step 4), and the sniffed bytes reach the sink
/// untouched.
#[test]
fn sniffing_domains_excluded_keeps_the_asked_destination() {
    let dir = tempdir::Dir::new("sniff-excluded");
    write_geodata(dir.path());
    let (named, asked, proto) = (sink("named"), sink("asked"), sink("proto"));
    let (p1, p2) = (free_port(), free_port());
    let sniff = r#","sniffing":{"enabled":true,"destOverride":["http","tls"],
        "domainsExcluded":["full:skip.example.com","nosniff","regexp:^re[0-9]\\.example\\.com$",
                           "geosite:google"]}"#;
    let cfg = format!(
        r#"{{"inbounds":[{},{}],
            "outbounds":[{{"tag":"direct","protocol":"freedom","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}},{},{}],
            "routing":{{"rules":[
              {{"inboundTag":["proto-in"],"protocol":["tls"],"outboundTag":"proto"}},
              {{"domain":["domain:example.com","domain:google.com"],"outboundTag":"named"}}
            ]}}}}"#,
        socks_in(p1, sniff),
        socks_in(p2, sniff).replace(r#""tag":"in""#, r#""tag":"proto-in""#),
        to_sink("named", named.port),
        to_sink("proto", proto.port),
    );
    let f = ferry_with_assets(&cfg, dir.path(), &[p1, p2]);
    // The client asks for the "asked" sink's own address: plain freedom dials it unless a
    // sniffed domain replaced it (then the domain rule sends it to "named").
    let tls = |sni: &str| {
        socks_line(p1, "127.0.0.1", "127.0.0.1", asked.port, &client_hello(sni))
            .unwrap_or_else(|e| panic!("{sni}: {e}\n{}", f.output()))
    };
    for (sni, want) in [
        ("www.example.com", "named"),
        ("skip.example.com", "asked"),
        // full: is exact.
        ("a.skip.example.com", "named"),
        // A plain string is a substring.
        ("x.nosniff.example.com", "asked"),
        ("re7.example.com", "asked"),
        ("rex.example.com", "named"),
        // geosite:google lists domain:google.com.
        ("www.google.com", "asked"),
        ("google.com.example.com", "named"),
    ] {
        assert_eq!(tls(sni), want, "TLS SNI {sni}\n{}", f.output());
    }
    let http = |host: &str| {
        let req = format!("GET / HTTP/1.1\r\nHost: {host}\r\nAccept: */*\r\n\r\n");
        socks_line(p1, "127.0.0.1", "127.0.0.1", asked.port, req.as_bytes()).unwrap()
    };
    assert_eq!(http("skip.example.com"), "asked", "{}", f.output());
    assert_eq!(http("www.example.com"), "named", "{}", f.output());
    // Excluded from the override, the sniffed protocol still matches a `protocol` rule.
    let ch = client_hello("skip.example.com");
    let got = socks_line(p2, "127.0.0.1", "127.0.0.1", asked.port, &ch).unwrap();
    assert_eq!(got, "proto", "{}", f.output());
    // Every excluded ClientHello reached the asked sink byte for byte.
    std::thread::sleep(Duration::from_millis(300));
    let got = asked.got.lock().unwrap();
    for sni in [
        "skip.example.com",
        "x.nosniff.example.com",
        "re7.example.com",
        "www.google.com",
    ] {
        assert!(
            got.contains(&client_hello(sni)),
            "{sni}: the asked sink did not get the ClientHello untouched"
        );
    }
    assert_eq!(got.len(), 5, "TLS x4 and HTTP x1 went to the asked address");
}

#[test]
fn sniffed_quic_routes_a_socks_udp_session() {
    let (a, b) = (udp_sink("a"), udp_sink("b"));
    let port = free_port();
    let cfg = format!(
        r#"{{"inbounds":[{}],
            "outbounds":[{{"tag":"a","protocol":"freedom","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}},
                         {{"tag":"b","protocol":"freedom","settings":{{"redirect":"{}"}}}}],
            "routing":{{"rules":[{{"domain":["full:quic.example"],"protocol":["quic"],"outboundTag":"b"}}]}}}}"#,
        socks_in(
            port,
            r#","sniffing":{"enabled":true,"destOverride":["quic"]}"#
        ),
        b.addr
    );
    let f = ferry(&cfg, &[port]);
    let hello = client_hello("quic.example")[5..].to_vec();
    let initial =
        ferry::app::sniff::quic::build_initial(1, &[1, 2, 3, 4, 5, 6, 7, 8], 0, &hello, 1200)
            .unwrap();
    // A QUIC Initial to a's address goes to b.
    let (_ctrl, relay, u) = proxy_udp(port);
    u.send_to(&udp_packet(a.addr, &initial), relay).unwrap();
    let mut buf = vec![0u8; 2048];
    let (n, _) = u
        .recv_from(&mut buf)
        .unwrap_or_else(|e| panic!("{e}\n{}", f.output()));
    assert_eq!(&buf[10..n], b"b", "{}", f.output());
    assert_eq!(
        b.got.lock().unwrap()[0],
        initial,
        "the Initial reached the server untouched"
    );
    // Anything else stays on a.
    let (_ctrl2, relay2, u2) = proxy_udp(port);
    u2.send_to(&udp_packet(a.addr, b"not quic at all"), relay2)
        .unwrap();
    let (n, _) = u2.recv_from(&mut buf).unwrap();
    assert!(buf[..n].ends_with(b"a"), "{}", f.output());
}

/// The same on a dokodemo-door's UDP: each client's first datagrams are sniffed before its
/// session is routed.
#[test]
fn sniffed_quic_routes_a_dokodemo_udp_session() {
    let (a, b) = (udp_sink("a"), udp_sink("b"));
    let port = free_port();
    let cfg = format!(
        r#"{{"inbounds":[{{"listen":"127.0.0.1","port":{port},"protocol":"dokodemo-door",
              "settings":{{"address":"{}","port":{},"network":"udp"}},
              "sniffing":{{"enabled":true,"destOverride":["quic"]}}}}],
            "outbounds":[{{"tag":"a","protocol":"freedom","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}},
                         {{"tag":"b","protocol":"freedom","settings":{{"redirect":"{}"}}}}],
            "routing":{{"rules":[{{"domain":["full:quic.example"],"protocol":["quic"],"outboundTag":"b"}}]}}}}"#,
        a.addr.ip(),
        a.addr.port(),
        b.addr
    );
    let f = ferry(&cfg, &[]);
    let hello = client_hello("quic.example")[5..].to_vec();
    let initial =
        ferry::app::sniff::quic::build_initial(1, &[1, 2, 3, 4, 5, 6, 7, 8], 0, &hello, 1200)
            .unwrap();
    let ask = |payload: &[u8]| {
        let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        u.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let mut buf = vec![0u8; 2048];
        // The inbound may not be bound yet: send again until an answer comes.
        for _ in 0..20 {
            u.send_to(payload, ("127.0.0.1", port)).unwrap();
            if let Ok((n, _)) = u.recv_from(&mut buf) {
                return String::from_utf8_lossy(&buf[..n]).into_owned();
            }
        }
        panic!("no answer through the dokodemo\n{}", f.output());
    };
    assert_eq!(ask(&initial), "b", "{}", f.output());
    assert_eq!(
        b.got.lock().unwrap()[0],
        initial,
        "the Initial reached the server untouched"
    );
    assert_eq!(ask(b"not quic at all"), "a", "{}", f.output());
}

fn proxy_udp(
    port: u16,
) -> (
    std::net::TcpStream,
    std::net::SocketAddr,
    std::net::UdpSocket,
) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&[5, 1, 0]).unwrap();
    let mut r = [0u8; 2];
    s.read_exact(&mut r).unwrap();
    let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    u.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let std::net::SocketAddr::V4(me) = u.local_addr().unwrap() else {
        unreachable!()
    };
    let mut req = vec![5, 3, 0, 1];
    req.extend_from_slice(&me.ip().octets());
    req.extend_from_slice(&me.port().to_be_bytes());
    s.write_all(&req).unwrap();
    let mut h = [0u8; 10];
    s.read_exact(&mut h).unwrap();
    assert_eq!(h[1], 0);
    let relay =
        std::net::SocketAddr::from(([h[4], h[5], h[6], h[7]], u16::from_be_bytes([h[8], h[9]])));
    (s, relay, u)
}

fn udp_packet(dest: std::net::SocketAddr, data: &[u8]) -> Vec<u8> {
    let std::net::SocketAddr::V4(d) = dest else {
        unreachable!()
    };
    let mut p = vec![0, 0, 0, 1];
    p.extend_from_slice(&d.ip().octets());
    p.extend_from_slice(&d.port().to_be_bytes());
    p.extend_from_slice(data);
    p
}
