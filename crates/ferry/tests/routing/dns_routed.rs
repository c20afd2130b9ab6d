//! DNS queries routed like any traffic (routing.md §4.7), side by side with Xray v26.3.27 on
//! the same configs. Two DNS servers started by the test answer `a.test` differently: "home"
//! with 1.1.1.1, "far" with 2.2.2.2. The `dns` object names home; a `detour` freedom outbound
//! redirects whatever it carries to far. A query for `a.test` comes in through a dokodemo-door
//! to the `dns` outbound, which hijacks it and answers from the `dns` object: the address in
//! the answer tells which way the module's own query went. Queries to servers without `+local`
//! are routed (by the `tag` as inbound tag, or by their address and port), `+local` ones are
//! not, and a module query routed to the `dns` outbound is forwarded, not hijacked again.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::common;

use std::net::{IpAddr, TcpListener, UdpSocket};
use std::time::Duration;

use common::*;
use ferry::app::dns::message;

const HOME: &str = "1.1.1.1";
const FAR: &str = "2.2.2.2";

/// A DNS server on UDP and TCP answering every A query with `ip` (TTL 60); returns its port.
fn dns_server(ip: &'static str) -> u16 {
    let (udp, tcp, port) = loop {
        let port = free_port();
        if let (Ok(u), Ok(t)) = (
            UdpSocket::bind(("127.0.0.1", port)),
            TcpListener::bind(("127.0.0.1", port)),
        ) {
            break (u, t, port);
        }
    };
    let ips: Vec<IpAddr> = vec![ip.parse().unwrap()];
    let answer = move |q: &[u8]| match message::question(q) {
        Some((_, 1)) => message::answer(q, 0, &ips, 60),
        Some(_) => message::answer(q, 0, &[], 0),
        None => None,
    };
    let a = answer.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while let Ok((len, from)) = udp.recv_from(&mut buf) {
            if let Some(r) = a(&buf[..len]) {
                let _ = udp.send_to(&r, from);
            }
        }
    });
    std::thread::spawn(move || {
        for s in tcp.incoming() {
            let Ok(mut s) = s else { return };
            let a = answer.clone();
            std::thread::spawn(move || {
                use std::io::{Read, Write};
                loop {
                    let mut l = [0u8; 2];
                    if s.read_exact(&mut l).is_err() {
                        return;
                    }
                    let mut q = vec![0u8; usize::from(u16::from_be_bytes(l))];
                    if s.read_exact(&mut q).is_err() {
                        return;
                    }
                    if let Some(r) = a(&q) {
                        let mut m = (r.len() as u16).to_be_bytes().to_vec();
                        m.extend(r);
                        if s.write_all(&m).is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    port
}

/// The config: `dns` (with `{home}` and `{far}` replaced by the servers' ports), extra rules
/// placed after the dokodemo's own rule.
fn config(port: u16, home: u16, far: u16, dns: &str, rules: &str) -> String {
    let dns = dns
        .replace("{home}", &home.to_string())
        .replace("{far}", &far.to_string());
    let rules = rules
        .replace("{home}", &home.to_string())
        .replace("{far}", &far.to_string());
    format!(
        r##"{{
  "log": {{"loglevel": "debug"}},
  "dns": {dns},
  "inbounds": [{{"tag": "dns-in", "listen": "127.0.0.1", "port": {port}, "protocol": "dokodemo-door",
                 "settings": {{"address": "127.0.0.1", "port": {home}, "network": "tcp,udp"}}}}],
  "outbounds": [{{"protocol": "freedom", "tag": "direct","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}},
                {{"protocol": "dns", "tag": "dns-out"}},
                {{"protocol": "freedom", "tag": "detour", "settings": {{"redirect": "127.0.0.1:{far}"}}}},
                {{"protocol": "blackhole", "tag": "block"}}],
  "routing": {{"rules": [{{"type": "field", "inboundTag": ["dns-in"], "outboundTag": "dns-out"}}{rules}]}}
}}"##
    )
}

/// Asks `port` (UDP) for `a.test` A until an answer comes (up to 8 s); its addresses.
fn ask(port: u16) -> Option<Vec<IpAddr>> {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(1500)))
        .unwrap();
    for id in 0x100..0x105u16 {
        let q = message::query(id, "a.test", 1, None).unwrap();
        s.send(&q).unwrap();
        let mut b = [0u8; 2048];
        if let Ok(n) = s.recv(&mut b) {
            return message::parse_reply(&b[..n], id).ok().map(|r| r.ips);
        }
    }
    None
}

/// Runs one config on Ferry and on Xray and checks both answer with `want`.
fn case(what: &str, dns: &str, rules: &str, want: &str) {
    let (home, far) = (dns_server(HOME), dns_server(FAR));
    let (fp, xp) = (free_port(), free_port());
    let f = ferry(&config(fp, home, far, dns, rules), &[fp]);
    let x = spawn_with_config(
        &peer("xray"),
        "xray",
        &config(xp, home, far, dns, rules),
        &["run", "-c", "{config}"],
    );
    wait_listening(xp, &x);
    let want: Vec<IpAddr> = vec![want.parse().unwrap()];
    let xr = ask(xp);
    assert_eq!(xr.as_ref(), Some(&want), "xray, {what}\n{}", x.output());
    let fr = ask(fp);
    assert_eq!(fr.as_ref(), Some(&want), "ferry, {what}\n{}", f.output());
}

#[test]
fn the_dns_tag_routes_the_module_queries() {
    case(
        "udp server, tag rule to the detour",
        r#"{"servers": [{"address": "127.0.0.1", "port": {home}}], "tag": "dns-q"}"#,
        r#", {"type": "field", "inboundTag": ["dns-q"], "outboundTag": "detour"}"#,
        FAR,
    );
    case(
        "tcp:// server, tag rule to the detour",
        r#"{"servers": ["tcp://127.0.0.1:{home}"], "tag": "dns-q"}"#,
        r#", {"type": "field", "inboundTag": ["dns-q"], "outboundTag": "detour"}"#,
        FAR,
    );
    case(
        "a server's own tag wins over the object's",
        r#"{"servers": [{"address": "127.0.0.1", "port": {home}, "tag": "mine"}], "tag": "dns-q"}"#,
        r#", {"type": "field", "inboundTag": ["dns-q"], "outboundTag": "block"},
            {"type": "field", "inboundTag": ["mine"], "outboundTag": "detour"}"#,
        FAR,
    );
}

#[test]
fn routed_without_a_tag_by_address_and_port() {
    case(
        "no tag, a rule on the server's address and port",
        r#"{"servers": [{"address": "127.0.0.1", "port": {home}}]}"#,
        r#", {"type": "field", "ip": ["127.0.0.1/32"], "port": "{home}", "outboundTag": "detour"}"#,
        FAR,
    );
    case(
        "the tag of no rule: the default outbound",
        r#"{"servers": [{"address": "127.0.0.1", "port": {home}}], "tag": "dns-q"}"#,
        "",
        HOME,
    );
}

#[test]
fn local_servers_are_not_routed() {
    case(
        "tcp+local:// ignores a tag rule",
        r#"{"servers": ["tcp+local://127.0.0.1:{home}"], "tag": "dns-q"}"#,
        r#", {"type": "field", "inboundTag": ["dns-q"], "outboundTag": "detour"},
            {"type": "field", "ip": ["127.0.0.1/32"], "outboundTag": "detour"}"#,
        HOME,
    );
}

#[test]
fn a_module_query_routed_to_the_dns_outbound_is_forwarded() {
    case(
        "tag rule to the dns outbound",
        r#"{"servers": [{"address": "127.0.0.1", "port": {home}}], "tag": "dns-q"}"#,
        r#", {"type": "field", "inboundTag": ["dns-q"], "outboundTag": "dns-out"}"#,
        HOME,
    );
}

#[test]
fn a_blocked_server_falls_back_to_the_next() {
    case(
        "first server routed to blackhole, second local",
        r#"{"servers": [{"address": "127.0.0.1", "port": {far}, "timeoutMs": 1000},
                        {"address": "tcp+local://127.0.0.1:{home}"}], "tag": "dns-q"}"#,
        r#", {"type": "field", "inboundTag": ["dns-q"], "outboundTag": "block"}"#,
        HOME,
    );
}
