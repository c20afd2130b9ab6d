//! Secure by default: a VLESS, a Trojan and a Shadowsocks user asking the server for its own
//! API port or another loopback address (by IP, by `localhost`, over IPv6) are refused by
//! freedom's default rule (not dialed; held, then closed), and reach them again once the server's
//! `finalRules` allow it. Only loopback addresses are ever dialed here: the other private ranges
//! are the unit tests' (`proxy/freedom/rules.rs`), which need no traffic.

use super::common::*;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::time::Duration;

const ID: &str = "7a8b1f3e-52d1-4c4e-9e7c-55b3c0f1a001";
const PW: &str = "secure-default-pw";
const PROTOCOLS: [&str; 3] = ["vless", "trojan", "shadowsocks"];

/// The server: VLESS, Trojan and Shadowsocks inbounds, the API on 127.0.0.1, freedom with
/// `final_rules` (a JSON list, or empty for none).
fn server(ports: [u16; 3], api: u16, final_rules: &str) -> Proc {
    let rules = if final_rules.is_empty() {
        String::new()
    } else {
        format!(r#","settings":{{"finalRules":{final_rules}}}"#)
    };
    let cfg = format!(
        r#"{{"log":{{"loglevel":"info"}},
  "api":{{"tag":"api","listen":"127.0.0.1:{api}","services":["HandlerService","StatsService"]}},
  "inbounds":[
    {{"listen":"127.0.0.1","port":{},"protocol":"vless",
      "settings":{{"clients":[{{"id":"{ID}","email":"v@ferry"}}],"decryption":"none"}}}},
    {{"listen":"127.0.0.1","port":{},"protocol":"trojan",
      "settings":{{"clients":[{{"password":"{PW}","email":"t@ferry"}}]}}}},
    {{"listen":"127.0.0.1","port":{},"protocol":"shadowsocks",
      "settings":{{"method":"aes-128-gcm","password":"{PW}","email":"s@ferry","network":"tcp"}}}}],
  "outbounds":[{{"protocol":"freedom"{rules}}}]}}"#,
        ports[0], ports[1], ports[2]
    );
    ferry(&cfg, &[ports[0], ports[1], ports[2], api])
}

/// The client: one SOCKS5 inbound per protocol, each routed to that protocol's outbound.
fn client(socks: [u16; 3], server: [u16; 3]) -> Proc {
    let cfg = format!(
        r#"{{"log":{{"loglevel":"warning"}},
  "inbounds":[
    {{"tag":"vless","listen":"127.0.0.1","port":{},"protocol":"socks","settings":{{"auth":"noauth"}}}},
    {{"tag":"trojan","listen":"127.0.0.1","port":{},"protocol":"socks","settings":{{"auth":"noauth"}}}},
    {{"tag":"shadowsocks","listen":"127.0.0.1","port":{},"protocol":"socks","settings":{{"auth":"noauth"}}}}],
  "outbounds":[
    {{"tag":"vless","protocol":"vless","settings":{{"vnext":[{{"address":"127.0.0.1","port":{},
      "users":[{{"id":"{ID}","encryption":"none"}}]}}]}}}},
    {{"tag":"trojan","protocol":"trojan","settings":{{"servers":[{{"address":"127.0.0.1","port":{},
      "password":"{PW}"}}]}}}},
    {{"tag":"shadowsocks","protocol":"shadowsocks","settings":{{"servers":[{{"address":"127.0.0.1",
      "port":{},"method":"aes-128-gcm","password":"{PW}"}}]}}}}],
  "routing":{{"rules":[
    {{"inboundTag":["vless"],"outboundTag":"vless"}},
    {{"inboundTag":["trojan"],"outboundTag":"trojan"}},
    {{"inboundTag":["shadowsocks"],"outboundTag":"shadowsocks"}}]}}}}"#,
        socks[0], socks[1], socks[2], server[0], server[1], server[2]
    );
    ferry(&cfg, &socks)
}

/// SOCKS5 CONNECT to `host:port` (an IP literal goes as an address, anything else as a name);
/// sends `first`, then returns what comes back within `wait` (empty when nothing does).
fn ask(socks: u16, host: &str, port: u16, first: &[u8], wait: Duration) -> Vec<u8> {
    let mut s = TcpStream::connect(("127.0.0.1", socks)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(&[5, 1, 0]).unwrap();
    let mut b = [0u8; 2];
    s.read_exact(&mut b).unwrap();
    let mut req = vec![5, 1, 0];
    match host.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(a)) => {
            req.push(1);
            req.extend(a.octets());
        }
        Ok(std::net::IpAddr::V6(a)) => {
            req.push(4);
            req.extend(a.octets());
        }
        Err(_) => {
            req.extend([3, host.len() as u8]);
            req.extend(host.as_bytes());
        }
    }
    req.extend(port.to_be_bytes());
    s.write_all(&req).unwrap();
    let mut reply = [0u8; 10];
    s.read_exact(&mut reply[..4]).unwrap();
    assert_eq!(reply[1], 0, "socks reply");
    let rest = if reply[3] == 4 { 18 } else { 6 };
    let mut tail = vec![0u8; rest];
    s.read_exact(&mut tail).unwrap();
    s.write_all(first).unwrap();
    s.set_read_timeout(Some(wait)).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
        got.extend(&buf[..n]);
        if got.len() >= 9 {
            break;
        }
    }
    let _ = s.shutdown(Shutdown::Both);
    got
}

/// HTTP/2's client preface and an empty SETTINGS frame: the API answers with its SETTINGS.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

/// A greeting server on `ip` (port chosen by the kernel).
fn greeter(ip: &str) -> u16 {
    let l = TcpListener::bind((ip, 0)).unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let _ = s.write_all(b"hello from a private address\n");
        }
    });
    port
}

struct Targets {
    api: u16,
    v4: u16,
    v6: u16,
}

/// Every (protocol, destination) pair: whether something answered.
fn sweep(socks: [u16; 3], t: &Targets, wait: Duration) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    for (i, proto) in PROTOCOLS.iter().enumerate() {
        for (host, port, first) in [
            ("127.0.0.1", t.api, H2_PREFACE),
            ("localhost", t.api, H2_PREFACE),
            ("127.0.0.2", t.v4, &b"hi\n"[..]),
            ("::1", t.v6, &b"hi\n"[..]),
        ] {
            let got = ask(socks[i], host, port, first, wait);
            out.push((format!("{proto} -> {host}:{port}"), !got.is_empty()));
        }
    }
    out
}

fn targets(api: u16) -> Targets {
    Targets {
        api,
        v4: greeter("127.0.0.2"),
        v6: greeter("::1"),
    }
}

#[test]
fn proxy_users_reach_no_loopback_address_by_default() {
    let (sp, cp, api) = (
        [free_port(), free_port(), free_port()],
        [free_port(), free_port(), free_port()],
        free_port(),
    );
    let t = targets(api);
    let s = server(sp, api, "");
    let _c = client(cp, sp);
    let answered: Vec<_> = sweep(cp, &t, Duration::from_millis(1500))
        .into_iter()
        .filter(|(_, a)| *a)
        .collect();
    assert!(answered.is_empty(), "reached: {answered:?}\n{}", s.output());
    // Logged at info with the user and the destination.
    let log = s.output();
    for user in ["v@ferry", "t@ferry", "s@ferry"] {
        assert!(
            log.contains(&format!("user \"{user}\": blocked target"))
                || log.contains(&format!("user \"{user}\": localhost")),
            "no refusal logged for {user}\n{log}"
        );
    }
    assert!(log.contains("blackholing connection for"), "{log}");
}

#[test]
fn a_final_rules_allow_opens_loopback_again() {
    let (sp, cp, api) = (
        [free_port(), free_port(), free_port()],
        [free_port(), free_port(), free_port()],
        free_port(),
    );
    let t = targets(api);
    let s = server(
        sp,
        api,
        r#"[{"action":"allow","ip":["127.0.0.0/8","::1"]}]"#,
    );
    let _c = client(cp, sp);
    let missed: Vec<_> = sweep(cp, &t, Duration::from_secs(5))
        .into_iter()
        .filter(|(_, a)| !*a)
        .collect();
    assert!(missed.is_empty(), "refused: {missed:?}\n{}", s.output());
}

/// An allow for everything (as panels end their lists) opens private addresses, but not the
/// server's own listeners: only an allow that names them does.
#[test]
fn an_unconditional_allow_leaves_the_servers_own_listeners_shut() {
    let (sp, cp, api) = (
        [free_port(), free_port(), free_port()],
        [free_port(), free_port(), free_port()],
        free_port(),
    );
    let t = targets(api);
    let s = server(sp, api, r#"[{"action":"allow"}]"#);
    let _c = client(cp, sp);
    for (i, proto) in PROTOCOLS.iter().enumerate() {
        let api_answer = ask(
            cp[i],
            "127.0.0.1",
            t.api,
            H2_PREFACE,
            Duration::from_millis(1500),
        );
        assert!(
            api_answer.is_empty(),
            "{proto} reached the API\n{}",
            s.output()
        );
        // Another inbound of the server is one of its own listeners too.
        let other = sp[(i + 1) % 3];
        let inbound = ask(cp[i], "127.0.0.1", other, b"x", Duration::from_millis(800));
        assert!(inbound.is_empty(), "{proto} reached an inbound");
        let private = ask(cp[i], "127.0.0.2", t.v4, b"hi\n", Duration::from_secs(5));
        assert!(
            !private.is_empty(),
            "{proto}: 127.0.0.2 refused\n{}",
            s.output()
        );
    }
    assert!(s.output().contains("own listeners"), "{}", s.output());
}

/// A destination name longer than 255 bytes (here a dokodemo address; a sniffed SNI or Host can
/// be as long) is refused before any outbound runs: the VLESS outbound's server never sees a
/// connection (its one length byte used to carry the name cut short, to a host nobody asked
/// for), and the refusal is logged.
#[test]
fn a_destination_name_over_255_bytes_is_refused_not_cut() {
    let server = TcpListener::bind("127.0.0.1:0").unwrap();
    server.set_nonblocking(true).unwrap();
    let entry = free_port();
    let long = format!("{}.example", "a".repeat(300));
    let cfg = format!(
        r#"{{"log":{{"loglevel":"info"}},
  "inbounds":[{{"listen":"127.0.0.1","port":{entry},"protocol":"dokodemo-door",
    "settings":{{"address":"{long}","port":443,"network":"tcp"}}}}],
  "outbounds":[{{"protocol":"vless","settings":{{"vnext":[{{"address":"127.0.0.1","port":{},
    "users":[{{"id":"{ID}","encryption":"none"}}]}}]}}}}]}}"#,
        server.local_addr().unwrap().port()
    );
    let p = ferry(&cfg, &[entry]);
    let mut c = TcpStream::connect(("127.0.0.1", entry)).unwrap();
    c.write_all(b"hello").unwrap();
    c.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut b = [0u8; 16];
    let closed = matches!(c.read(&mut b), Ok(0) | Err(_));
    std::thread::sleep(Duration::from_millis(300));
    let dialed = server.accept().is_ok();
    assert!(
        closed && !dialed,
        "closed {closed}, dialed {dialed}\n{}",
        p.output()
    );
    assert!(
        p.output()
            .contains("destination name of 308 bytes is too long"),
        "{}",
        p.output()
    );
}
