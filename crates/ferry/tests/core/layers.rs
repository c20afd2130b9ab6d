//! The connection house: unix listeners (path, abstract, padded abstract), outbounds dialing
//! through other outbounds (`proxySettings`, `sockopt.dialerProxy`), the default outbound,
//! and freedom's dialer (`sendThrough`) and `finalRules`, with its default rule for proxy users
//! (`secure`). Real binary, real sockets.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::common;
mod secure;
use common::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr as UnixAddr, UnixStream};
use std::time::{Duration, Instant};

/// A unix socket address as Ferry's config spells it.
fn unix_addr(spelling: &str) -> UnixAddr {
    if let Some(n) = spelling.strip_prefix("@@") {
        let mut name = n.as_bytes().to_vec();
        name.resize(107, 0);
        UnixAddr::from_abstract_name(name).unwrap()
    } else if let Some(n) = spelling.strip_prefix('@') {
        UnixAddr::from_abstract_name(n).unwrap()
    } else {
        UnixAddr::from_pathname(spelling).unwrap()
    }
}

fn unix_connect(spelling: &str, p: &Proc) -> UnixStream {
    let t = Instant::now();
    loop {
        match UnixStream::connect_addr(&unix_addr(spelling)) {
            Ok(s) => {
                s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                return s;
            }
            Err(e) => assert!(
                t.elapsed() < Duration::from_secs(20),
                "{spelling}: {e}\n{}",
                p.output()
            ),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Writes `data` while reading as much back; returns what came back.
fn echo_unix(s: UnixStream, data: &[u8]) -> Vec<u8> {
    let mut w = s.try_clone().unwrap();
    let out = data.to_vec();
    let writer = std::thread::spawn(move || w.write_all(&out).unwrap());
    let mut got = vec![0u8; data.len()];
    let mut r = s;
    r.read_exact(&mut got).unwrap();
    writer.join().unwrap();
    got
}

/// A SOCKS5 CONNECT (no auth) to `dest` over any stream.
fn socks5_over<S: Read + Write>(s: &mut S, dest: SocketAddr) {
    s.write_all(&[5, 1, 0]).unwrap();
    let mut b = [0u8; 2];
    s.read_exact(&mut b).unwrap();
    assert_eq!(b, [5, 0]);
    let SocketAddr::V4(v4) = dest else {
        panic!("ipv4 only")
    };
    let mut req = vec![5, 1, 0, 1];
    req.extend_from_slice(&v4.ip().octets());
    req.extend_from_slice(&v4.port().to_be_bytes());
    s.write_all(&req).unwrap();
    let mut rep = [0u8; 10];
    s.read_exact(&mut rep).unwrap();
    assert_eq!(rep[1], 0, "socks reply {rep:?}");
}

#[test]
fn socks_and_dokodemo_on_path_abstract_and_padded_unix_sockets() {
    let echo = echo_server();
    let dir = tempdir::Dir::new("unix");
    let path = dir.path().join("in.sock").display().to_string();
    let id = std::process::id();
    let spellings = [path, format!("@ferry-{id}-a"), format!("@@ferry-{id}-p")];
    let mut inbounds = Vec::new();
    for (i, sp) in spellings.iter().enumerate() {
        inbounds.push(format!(
            r#"{{"tag":"socks{i}","listen":"{sp}","protocol":"socks","settings":{{"udp":false}}}}"#
        ));
        inbounds.push(format!(
            r#"{{"tag":"doko{i}","listen":"{sp}x","protocol":"dokodemo-door",
                "settings":{{"address":"127.0.0.1","port":{}}}}}"#,
            echo.port()
        ));
    }
    let tcp = free_port();
    inbounds.push(format!(
        r#"{{"tag":"tcp","listen":"127.0.0.1","port":{tcp},"protocol":"socks"}}"#
    ));
    let cfg = format!(
        r#"{{"inbounds":[{}],"outbounds":[{{"protocol":"freedom","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}]}}"#,
        inbounds.join(",")
    );
    let f = ferry(&cfg, &[tcp]);
    for (i, sp) in spellings.iter().enumerate() {
        let data = pattern(1 << 20, 11 + i as u64);
        let mut s = unix_connect(sp, &f);
        socks5_over(&mut s, echo);
        assert!(echo_unix(s, &data) == data, "socks over {sp}: bytes differ");
        let data = pattern(1 << 20, 21 + i as u64);
        let s = unix_connect(&format!("{sp}x"), &f);
        assert!(
            echo_unix(s, &data) == data,
            "dokodemo over {sp}x: bytes differ"
        );
    }
    // The padded name is not the plain one: nothing listens on "@ferry-ID-p".
    assert!(UnixStream::connect_addr(&unix_addr(&format!("@ferry-{id}-p"))).is_err());
}

/// Server: VMess in, SOCKS in (the SOCKS server the chained outbound reaches), freedom out,
/// with an access log. Client: dokodemo in -> socks outbound that dials through a VMess
/// outbound, once by `proxySettings.tag`, once by `sockopt.dialerProxy`.
#[test]
fn socks_outbound_dials_through_vmess_outbound() {
    let echo = echo_server();
    let (vport, sport) = (free_port(), free_port());
    let dir = tempdir::Dir::new("chain");
    let access = dir.path().join("access.log");
    let id = "b831381d-6324-4d53-ad4f-8cda48b30811";
    let server = format!(
        r#"{{"log":{{"access":"{}","loglevel":"warning"}},
            "inbounds":[{{"tag":"vin","listen":"127.0.0.1","port":{vport},"protocol":"vmess",
                "settings":{{"clients":[{{"id":"{id}"}}]}}}},
              {{"tag":"sin","listen":"127.0.0.1","port":{sport},"protocol":"socks"}}],
            "outbounds":[{{"protocol":"freedom","tag":"direct","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}]}}"#,
        access.display()
    );
    let _s = ferry(&server, &[vport, sport]);
    let (d1, d2) = (free_port(), free_port());
    let client = format!(
        r#"{{"inbounds":[
              {{"tag":"d1","listen":"127.0.0.1","port":{d1},"protocol":"dokodemo-door",
                "settings":{{"address":"127.0.0.1","port":{ep}}}}},
              {{"tag":"d2","listen":"127.0.0.1","port":{d2},"protocol":"dokodemo-door",
                "settings":{{"address":"127.0.0.1","port":{ep}}}}}],
            "outbounds":[
              {{"tag":"socks-a","protocol":"socks","settings":{{"address":"127.0.0.1","port":{sport}}},
                "proxySettings":{{"tag":"vm"}}}},
              {{"tag":"socks-b","protocol":"socks","settings":{{"address":"127.0.0.1","port":{sport}}},
                "streamSettings":{{"sockopt":{{"dialerProxy":"vm"}}}}}},
              {{"tag":"vm","protocol":"vmess","settings":{{"address":"127.0.0.1","port":{vport},
                "id":"{id}","security":"aes-128-gcm"}}}}],
            "routing":{{"rules":[{{"inboundTag":["d2"],"outboundTag":"socks-b"}}]}}}}"#,
        ep = echo.port()
    );
    let _c = ferry(&client, &[d1, d2]);
    for (i, port) in [d1, d2].into_iter().enumerate() {
        let data = pattern(4 << 20, 5 + i as u64);
        let got = echo_through(TcpStream::connect(("127.0.0.1", port)).unwrap(), &data);
        assert!(got == data, "through inbound {port}: bytes differ");
    }
    // The server saw both SOCKS connections arrive through VMess (to its SOCKS port) and the
    // SOCKS server's connections to the echo server.
    let t = Instant::now();
    let log = loop {
        let log = std::fs::read_to_string(&access).unwrap_or_default();
        let via_vmess = log
            .lines()
            .filter(|l| l.contains(&format!("accepted tcp:127.0.0.1:{sport} [vin")))
            .count();
        if via_vmess >= 2 || t.elapsed() > Duration::from_secs(5) {
            break log;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let via_vmess = log
        .lines()
        .filter(|l| l.contains(&format!("accepted tcp:127.0.0.1:{sport} [vin")))
        .count();
    let to_echo = log
        .lines()
        .filter(|l| l.contains(&format!("accepted tcp:127.0.0.1:{} [sin", echo.port())))
        .count();
    assert_eq!((via_vmess, to_echo), (2, 2), "access log:\n{log}");
}

#[test]
fn dialer_chains_that_loop_or_name_nothing_are_config_errors() {
    let run = |outbounds: &str| {
        let cfg = format!(r#"{{"outbounds":[{outbounds}]}}"#);
        let dir = tempdir::Dir::new("chaincfg");
        let p = dir.path().join("c.json");
        std::fs::write(&p, cfg).unwrap();
        std::process::Command::new(env!("CARGO_BIN_EXE_ferry"))
            .args(["test", "-c"])
            .arg(&p)
            .output()
            .unwrap()
    };
    let out = run(
        r#"{"tag":"a","protocol":"freedom","proxySettings":{"tag":"b"}},
           {"tag":"b","protocol":"freedom","streamSettings":{"sockopt":{"dialerProxy":"a"}}}"#,
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("outbounds[0]") && err.contains("loops"),
        "{err}"
    );
    let out = run(r#"{"tag":"a","protocol":"freedom","proxySettings":{"tag":"nope"}}"#);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("outbounds[0]") && err.contains("\"nope\""),
        "{err}"
    );
}

#[test]
fn the_first_of_several_untagged_outbounds_is_the_default() {
    let echo = echo_server();
    let port = free_port();
    // Xray takes the first outbound; a map keyed by tag would end up with the last.
    let cfg = format!(
        r#"{{"inbounds":[{{"listen":"127.0.0.1","port":{port},"protocol":"dokodemo-door",
              "settings":{{"address":"127.0.0.1","port":{}}}}}],
            "outbounds":[{{"protocol":"freedom","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}},{{"protocol":"blackhole"}}]}}"#,
        echo.port()
    );
    let _f = ferry(&cfg, &[port]);
    let data = pattern(64 << 10, 3);
    let got = echo_through(TcpStream::connect(("127.0.0.1", port)).unwrap(), &data);
    assert!(got == data);
}

/// A server that answers each connection with the peer's IP address as text.
fn peer_ip_server() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let ip = s
                .peer_addr()
                .map(|a| a.ip().to_string())
                .unwrap_or_default();
            let _ = s.write_all(ip.as_bytes());
        }
    });
    addr
}

fn read_all(port: u16) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

#[test]
fn freedom_send_through_binds_the_source_address() {
    let srv = peer_ip_server();
    let (p1, p2) = (free_port(), free_port());
    let cfg = format!(
        r#"{{"inbounds":[
              {{"tag":"a","listen":"127.0.0.1","port":{p1},"protocol":"dokodemo-door",
                "settings":{{"address":"127.0.0.1","port":{sp}}}}},
              {{"tag":"b","listen":"127.0.0.1","port":{p2},"protocol":"dokodemo-door",
                "settings":{{"address":"127.0.0.1","port":{sp}}}}}],
            "outbounds":[{{"protocol":"freedom","tag":"plain","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}},
              {{"protocol":"freedom","tag":"via2","sendThrough":"127.0.0.2"}}],
            "routing":{{"rules":[{{"inboundTag":["b"],"outboundTag":"via2"}}]}}}}"#,
        sp = srv.port()
    );
    let _f = ferry(&cfg, &[p1, p2]);
    assert_eq!(read_all(p1), "127.0.0.1");
    assert_eq!(read_all(p2), "127.0.0.2");
}

#[test]
fn freedom_final_rules_block_and_allow_in_order() {
    let srv = peer_ip_server();
    let (p1, p2) = (free_port(), free_port());
    let cfg = format!(
        r#"{{"inbounds":[
              {{"tag":"a","listen":"127.0.0.1","port":{p1},"protocol":"dokodemo-door",
                "settings":{{"address":"127.0.0.1","port":{sp}}}}},
              {{"tag":"b","listen":"127.0.0.1","port":{p2},"protocol":"dokodemo-door",
                "settings":{{"address":"127.0.0.1","port":{sp}}}}}],
            "outbounds":[
              {{"protocol":"freedom","tag":"open","settings":{{"finalRules":[
                  {{"action":"allow","network":"tcp","port":"{sp}","ip":["127.0.0.1/32"]}},
                  {{"action":"block","ip":["geoip:private"]}}]}}}},
              {{"protocol":"freedom","tag":"shut","settings":{{"finalRules":[
                  {{"action":"block","network":"tcp,udp","ip":["geoip:private"]}}]}}}}],
            "routing":{{"rules":[{{"inboundTag":["b"],"outboundTag":"shut"}}]}}}}"#,
        sp = srv.port()
    );
    let _f = ferry(&cfg, &[p1, p2]);
    assert_eq!(read_all(p1), "127.0.0.1");
    assert_eq!(
        read_all(p2),
        "",
        "a blocked destination must not be reached"
    );
}
