//! ShadowsocksR server on bad input, as a prober sees it (shadowsocksr.md §10): random first
//! packets of many lengths, a replayed first packet (of every auth_* protocol, after the
//! original connection closed, and a replayed TLS hello), a wrong password, a wrong obfs,
//! truncated and corrupted frames, a tls1.2_ticket_auth hello with a bad HMAC.
//!
//! The Python server closes at once past a length threshold and holds shorter inputs until its
//! idle timeout, so its close time tells where the threshold is. Ferry answers none of them and
//! closes none of them: every probe is read and discarded until the prober leaves (or the
//! level's connIdle), whatever its length, so the close time carries nothing. Each is logged
//! with its reason. The valid first packets come from the real Python client through a
//! recording relay.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::common;
use common::*;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a probe watches its connection: past the 1 s handshake timeout, with margin.
const WATCH: Duration = Duration::from_millis(2500);
const PW: &str = "probe-pass-1234";

/// What a prober sees: bytes that came back, and when the server closed (None: held open).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Seen {
    bytes: usize,
    closed: Option<f64>,
}

fn probe(port: u16, data: &[u8]) -> Seen {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let t0 = Instant::now();
    let _ = s.write_all(data);
    let mut bytes = 0;
    let mut buf = vec![0u8; 65536];
    loop {
        let left = WATCH.saturating_sub(t0.elapsed());
        if left.is_zero() {
            return Seen {
                bytes,
                closed: None,
            };
        }
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => bytes += n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    Seen {
        bytes,
        closed: Some(t0.elapsed().as_secs_f64()),
    }
}

/// Every probe: nothing back, held open for the whole watch (drained).
fn expect_drained(port: u16, probes: &[(String, Vec<u8>)], server: &Proc) {
    let seen: Vec<(String, Seen)> = std::thread::scope(|sc| {
        let hs: Vec<_> = probes
            .iter()
            .map(|(n, d)| sc.spawn(move || (n.clone(), probe(port, d))))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (name, s) in &seen {
        println!("{name:40} {s:?}");
    }
    for (name, s) in &seen {
        assert_eq!(
            *s,
            Seen {
                bytes: 0,
                closed: None
            },
            "{name}\n{}",
            server.output()
        );
    }
}

fn ferry_server(port: u16, settings: &str) -> Proc {
    let cfg = format!(
        r#"{{"log":{{"loglevel":"info"}},"policy":{{"levels":{{"0":{{"handshake":1}}}}}},
        "inbounds":[{{"tag":"probed","listen":"127.0.0.1","port":{port},"protocol":"shadowsocksr","settings":{settings}}}],
        "outbounds":[{{"protocol":"freedom","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}]}}"#
    );
    ferry(&cfg, &[port])
}

fn settings(proto: &str, obfs: &str, method: &str, pw: &str) -> String {
    format!(r#"{{"method":"{method}","password":"{pw}","protocol":"{proto}","obfs":"{obfs}"}}"#)
}

fn py_local(local: u16, server: u16, proto: &str, obfs: &str, method: &str, pw: &str) -> Proc {
    let cfg = format!(
        r#"{{"server":"127.0.0.1","server_port":{server},"password":"{pw}","method":"{method}",
        "protocol":"{proto}","protocol_param":"","obfs":"{obfs}","obfs_param":"","timeout":60,
        "udp_timeout":60,"fast_open":false,"local_address":"127.0.0.1","local_port":{local}}}"#
    );
    let p = spawn_with_config(
        &peer("ssr-python"),
        "ssr-local",
        &cfg,
        &["local", "-c", "{config}"],
    );
    wait_listening(local, &p);
    p
}

/// A relay the client dials instead of the server: it keeps what the client sends first (up
/// to a 300 ms pause) and, with `forward`, passes the connection on to the server.
fn recorder(forward: Option<u16>) -> (u16, mpsc::Receiver<Vec<u8>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            let tx = tx.clone();
            std::thread::spawn(move || {
                let up = forward.map(|p| TcpStream::connect(("127.0.0.1", p)).unwrap());
                if let Some(up) = &up {
                    let (mut from, mut back) = (up.try_clone().unwrap(), c.try_clone().unwrap());
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut back);
                        let _ = back.shutdown(Shutdown::Write);
                    });
                }
                let mut rec = Vec::new();
                let mut sent = false;
                let mut buf = vec![0u8; 65536];
                c.set_read_timeout(Some(Duration::from_millis(300)))
                    .unwrap();
                loop {
                    match c.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => {
                            if !sent {
                                rec.extend_from_slice(&buf[..n]);
                            }
                            if let Some(mut u) = up.as_ref() {
                                let _ = u.write_all(&buf[..n]);
                            }
                        }
                        Err(e)
                            if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) =>
                        {
                            if !sent && !rec.is_empty() {
                                let _ = tx.send(std::mem::take(&mut rec));
                                sent = true;
                                c.set_read_timeout(None).unwrap();
                            }
                        }
                        Err(_) => break,
                    }
                }
                if !sent && !rec.is_empty() {
                    let _ = tx.send(rec);
                }
                if let Some(u) = up {
                    let _ = u.shutdown(Shutdown::Write);
                }
            });
        }
    });
    (port, rx)
}

/// SOCKS5 CONNECT through the client at `local` to `target`, then `payload`; with `echo`, reads
/// the echo back (the packet went through a server) and closes.
fn through_client(local: u16, target: SocketAddr, payload: &[u8], echo: bool) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", local)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&[5, 1, 0]).unwrap();
    let mut r = [0u8; 2];
    s.read_exact(&mut r).unwrap();
    let SocketAddr::V4(a) = target else { panic!() };
    let mut req = vec![5, 1, 0, 1];
    req.extend_from_slice(&a.ip().octets());
    req.extend_from_slice(&a.port().to_be_bytes());
    s.write_all(&req).unwrap();
    let mut rep = [0u8; 10];
    s.read_exact(&mut rep).unwrap();
    s.write_all(payload).unwrap();
    if echo {
        let mut back = vec![0u8; payload.len()];
        s.read_exact(&mut back).unwrap();
        assert_eq!(back, payload);
    }
    s
}

fn random(n: usize, seed: u64) -> Vec<u8> {
    pattern(n, seed)
}

/// Random first packets of lengths on both sides of every threshold the reference has (IV+1,
/// IV+7, IV+12, 31, 36, the TLS and HTTP heads) are all drained alike, on every obfs.
#[test]
fn random_probes_are_drained_whatever_their_length() {
    let lens = [
        1usize, 3, 7, 11, 16, 17, 23, 28, 31, 36, 43, 64, 100, 1000, 2049, 8193,
    ];
    for (proto, obfs, method) in [
        ("origin", "plain", "aes-256-cfb"),
        ("auth_aes128_md5", "plain", "aes-128-ctr"),
        ("auth_chain_a", "http_simple", "chacha20-ietf"),
        ("auth_sha1_v4", "random_head", "rc4-md5"),
        ("auth_aes128_sha1", "tls1.2_ticket_auth", "aes-256-cfb"),
    ] {
        let port = free_port();
        let f = ferry_server(port, &settings(proto, obfs, method, PW));
        let mut probes: Vec<(String, Vec<u8>)> = lens
            .iter()
            .map(|&n| (format!("{proto}/{obfs} random {n}"), random(n, n as u64)))
            .collect();
        probes.push((format!("{proto}/{obfs} empty"), Vec::new()));
        probes.push((
            format!("{proto}/{obfs} http GET"),
            b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n".to_vec(),
        ));
        probes.push((
            format!("{proto}/{obfs} tls record header"),
            vec![0x16, 3, 1, 2, 0],
        ));
        expect_drained(port, &probes, &f);
        assert!(f.output().contains("rejected"), "{}", f.output());
    }
}

/// Valid first packets from the real client, replayed after their connection closed, are
/// refused (the reference serves an auth_chain replay then); truncated and corrupted ones, a
/// wrong password and a wrong obfs are drained like garbage.
#[test]
fn replays_truncations_wrong_keys_are_drained() {
    let echo = echo_server();
    for (proto, obfs, method) in [
        ("auth_sha1_v4", "plain", "aes-256-cfb"),
        ("auth_aes128_md5", "plain", "aes-128-cfb"),
        ("auth_aes128_sha1", "http_simple", "chacha20-ietf"),
        ("auth_chain_a", "plain", "rc4-md5"),
        ("auth_chain_b", "plain", "aes-256-ctr"),
        ("auth_chain_e", "plain", "none"),
    ] {
        let port = free_port();
        let f = ferry_server(port, &settings(proto, obfs, method, PW));
        // A packet the server has seen (its connection echoed and closed), and an unseen one.
        let (rport, rx) = recorder(Some(port));
        let local = free_port();
        let c = py_local(local, rport, proto, obfs, method, PW);
        let payload = pattern(300, 7);
        drop(through_client(local, echo, &payload, true));
        let seen = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        let (uport, urx) = recorder(None);
        let local2 = free_port();
        let c2 = py_local(local2, uport, proto, obfs, method, PW);
        let _hold = through_client(local2, echo, &payload, false);
        let unseen = urx.recv_timeout(Duration::from_secs(10)).unwrap();
        let (wport, wrx) = recorder(None);
        let local3 = free_port();
        let c3 = py_local(local3, wport, proto, obfs, method, "wrong-password");
        let _hold3 = through_client(local3, echo, &payload, false);
        let wrong = wrx.recv_timeout(Duration::from_secs(10)).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        // Only probes that break the first packet: one that holds it whole would be its
        // first sight (served once, then a replay). The HTTP disguise is not authenticated
        // (the server skips what is not %XX, as the reference): its rows flip hex digits.
        let mut probes = vec![
            (format!("{proto} replayed after close"), seen.clone()),
            (format!("{proto} wrong password"), wrong),
        ];
        for cut in [1, 7, 12, 20, 30] {
            probes.push((
                format!("{proto} truncated at {cut}"),
                unseen[..cut].to_vec(),
            ));
        }
        // The head, its MACs, the length fields (an oversized frame) corrupted.
        for at in [0, 1, 5, 9, 14, 20, 30] {
            let mut p = unseen.clone();
            p[at] ^= 0x5a;
            probes.push((format!("{proto} byte {at} flipped"), p));
        }
        expect_drained(port, &probes, &f);
        let out = f.output();
        assert!(
            out.contains("(replay)"),
            "no replay rejection logged\n{out}"
        );
        assert!(
            out.contains("(auth)") || out.contains("(bad_obfs)"),
            "{out}"
        );
        drop((c, c2, c3));
    }
}

/// tls1.2_ticket_auth: a replayed hello, a hello with a bad HMAC, one with a far-off clock,
/// and a client with the wrong obfs are drained; the reference's own client is served.
#[test]
fn tls_ticket_auth_hellos() {
    let echo = echo_server();
    let port = free_port();
    let f = ferry_server(
        port,
        &settings("auth_aes128_md5", "tls1.2_ticket_auth", "aes-256-cfb", PW),
    );
    let (rport, rx) = recorder(Some(port));
    let local = free_port();
    let _c = py_local(
        local,
        rport,
        "auth_aes128_md5",
        "tls1.2_ticket_auth",
        "aes-256-cfb",
        PW,
    );
    let payload = pattern(200, 9);
    drop(through_client(local, echo, &payload, true));
    let hello = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(&hello[..3], &[0x16, 3, 1]);
    let mut bad_hmac = hello.clone();
    bad_hmac[11 + 30] ^= 1;
    // A hello whose HMAC is right but whose clock is three days off.
    let mut bad_time = hello.clone();
    let t = u32::from_be_bytes(hello[11..15].try_into().unwrap()) - 3 * 86400;
    bad_time[11..15].copy_from_slice(&t.to_be_bytes());
    bad_time[15..33].copy_from_slice(&pattern(18, 5));
    let key = ferry::proxy::shadowsocksr::cipher::Method::Aes256Cfb.key(PW);
    let k = [&key[..], &hello[44..76]].concat();
    let mac = ferry::proxy::shadowsocksr::util::hmac_sha1(&k, &[&bad_time[11..33]]);
    bad_time[33..43].copy_from_slice(&mac[..10]);
    // The wrong obfs: a client speaking plain to this server.
    let (wport, wrx) = recorder(None);
    let local2 = free_port();
    let _c2 = py_local(local2, wport, "auth_aes128_md5", "plain", "aes-256-cfb", PW);
    let _h = through_client(local2, echo, &payload, false);
    let plain = wrx.recv_timeout(Duration::from_secs(10)).unwrap();
    let probes = vec![
        ("tls hello replayed".to_string(), hello.clone()),
        ("tls hello bad hmac".to_string(), bad_hmac),
        ("tls hello bad time".to_string(), bad_time),
        (
            "tls hello truncated".to_string(),
            hello[..hello.len() - 1].to_vec(),
        ),
        ("wrong obfs (plain)".to_string(), plain),
    ];
    expect_drained(port, &probes, &f);
    let out = f.output();
    for r in ["(replay)", "(bad_obfs)", "(time)"] {
        assert!(out.contains(r), "no {r} rejection logged\n{out}");
    }
}

/// With `redirect`, a failed handshake goes to the decoy with every byte the client sent, and
/// the prober reads the decoy's own answer; the real client is still served.
#[test]
fn redirect_hands_failures_to_the_decoy() {
    let decoy = TcpListener::bind("127.0.0.1:0").unwrap();
    let dport = decoy.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for c in decoy.incoming() {
            let Ok(mut c) = c else { continue };
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                c.set_read_timeout(Some(Duration::from_millis(500)))
                    .unwrap();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match c.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let _ =
                    c.write_all(b"HTTP/1.0 200 OK\r\nServer: decoy\r\n\r\nhello from the decoy");
                let _ = tx.send(got);
            });
        }
    });
    let port = free_port();
    let extra = format!(r#","redirect":"127.0.0.1:{dport}"}}"#);
    let s = settings("auth_aes128_md5", "http_simple", "aes-256-cfb", PW);
    let f = ferry_server(port, &format!("{}{extra}", &s[..s.len() - 1]));
    // A browser's GET, in two pieces: the decoy gets both.
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(b"GET /index.html HTTP/1.1\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(100));
    c.write_all(b"Host: example.com\r\n\r\n").unwrap();
    let mut resp = Vec::new();
    let _ = c.read_to_end(&mut resp);
    assert!(
        resp.starts_with(b"HTTP/1.0 200 OK\r\nServer: decoy"),
        "{:?}\n{}",
        String::from_utf8_lossy(&resp),
        f.output()
    );
    let got = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(
        got,
        b"GET /index.html HTTP/1.1\r\nHost: example.com\r\n\r\n"
    );
    assert!(f.output().contains("redirect decoy"), "{}", f.output());
    // The real client is served as before.
    let echo = echo_server();
    let local = free_port();
    let _c = py_local(
        local,
        port,
        "auth_aes128_md5",
        "http_simple",
        "aes-256-cfb",
        PW,
    );
    drop(through_client(local, echo, &pattern(5000, 3), true));
}
