//! Bounds a stranger or a replaying observer cannot push past: Shadowsocks 2022 UDP replay
//! windows that follow the client session rather than its address, and the UDP NAT's caps.

use std::collections::HashMap;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::common::*;
use ferry::common::Destination;
use ferry::proxy::shadowsocks::cipher::Method;
use ferry::proxy::shadowsocks::udp::{decode_2022, encode_2022, Receiver2022, Sender2022};

/// A 16-byte 2022 PSK (bytes 0..16).
const PSK16: &str = "AAECAwQFBgcICQoLDA0ODw==";

/// What a UDP echo server saw: each payload with the addresses it came from.
type Seen = Arc<Mutex<HashMap<Vec<u8>, Vec<SocketAddr>>>>;

/// A UDP echo server that records what it received.
fn counting_echo() -> (SocketAddr, Seen) {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = s.local_addr().unwrap();
    let seen: Seen = Arc::default();
    let log = seen.clone();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 65536];
        while let Ok((n, from)) = s.recv_from(&mut buf) {
            log.lock()
                .unwrap()
                .entry(buf[..n].to_vec())
                .or_default()
                .push(from);
            let _ = s.send_to(&buf[..n], from);
        }
    });
    (addr, seen)
}

fn ss2022_server(port: u16) -> Proc {
    let cfg = format!(
        r#"{{"log":{{"loglevel":"info"}},
        "inbounds":[{{"tag":"ss","listen":"127.0.0.1","port":{port},"protocol":"shadowsocks",
          "settings":{{"method":"2022-blake3-aes-128-gcm","password":"{PSK16}","network":"tcp,udp"}}}}],
        "outbounds":[{{"protocol":"freedom","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}]}}"#
    );
    ferry(&cfg, &[port])
}

/// One client side of a 2022 UDP session.
struct Client2022 {
    key: Vec<u8>,
    session: u64,
    next: u64,
    target: Destination,
}

impl Client2022 {
    fn packet(&mut self, payload: &[u8]) -> Vec<u8> {
        let s = Sender2022 {
            method: Method::Blake3Aes128Gcm,
            header_key: &self.key,
            ipsks: &[],
            user_key: &self.key,
            session_id: self.session,
            packet_id: self.next,
            client_session_id: None,
        };
        self.next += 1;
        let mut out = Vec::new();
        encode_2022(&s, &self.target, payload, &mut out);
        out
    }

    /// Server session id and payload of a reply.
    fn open(&self, pkt: &mut [u8]) -> (u64, Vec<u8>) {
        let r = Receiver2022 {
            method: Method::Blake3Aes128Gcm,
            header_key: &self.key,
            users: &[],
            key: &self.key,
            from_server: true,
        };
        let p = decode_2022(&r, pkt).unwrap();
        assert_eq!(p.client_session_id, Some(self.session));
        (p.session_id, pkt[p.payload].to_vec())
    }

    /// Sends `payload` from `u` (a fresh packet id per try) until its echo comes back: the
    /// server session id and the packet that got through.
    fn ask(&mut self, u: &UdpSocket, server: SocketAddr, payload: &[u8]) -> (u64, Vec<u8>) {
        let mut buf = vec![0u8; 65536];
        for _ in 0..10 {
            let pkt = self.packet(payload);
            u.send_to(&pkt, server).unwrap();
            if let Ok((n, _)) = u.recv_from(&mut buf) {
                let (sid, got) = self.open(&mut buf[..n]);
                assert_eq!(got, payload);
                return (sid, pkt);
            }
        }
        panic!("no echo of {:?}", String::from_utf8_lossy(payload));
    }
}

fn client_socket() -> UdpSocket {
    let u = UdpSocket::bind("127.0.0.1:0").unwrap();
    u.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    u
}

/// A 2022 UDP packet replayed from a second address meets the window of its session and is
/// dropped; fresh packets from that address (the client moved) go on in the same session,
/// through the same outbound socket.
#[test]
fn ss2022_udp_replay_from_another_address_is_dropped() {
    let (echo, seen) = counting_echo();
    let port = free_port();
    let f = ss2022_server(port);
    let server: SocketAddr = ([127, 0, 0, 1], port).into();
    let mut c = Client2022 {
        key: ferry::proxy::shadowsocks::cipher::decode_psk(PSK16, 16).unwrap(),
        session: 0x1234_5678_9abc_def0,
        next: 0,
        target: echo.into(),
    };
    let (a, b) = (client_socket(), client_socket());
    let (sid, pkt) = c.ask(&a, server, b"first");
    // The replay, from another address.
    b.send_to(&pkt, server).unwrap();
    let mut buf = vec![0u8; 65536];
    assert!(
        b.recv_from(&mut buf).is_err(),
        "the replay was answered\n{}",
        f.output()
    );
    let first = seen.lock().unwrap().get(&b"first"[..]).cloned();
    assert_eq!(
        first.as_ref().map(|v| v.len()),
        Some(1),
        "the target got the first datagram other than once\n{}",
        f.output()
    );
    // The client roams to b: same session, same outbound socket.
    let (sid2, _) = c.ask(&b, server, b"roamed");
    assert_eq!(sid, sid2, "the roaming client got a new server session");
    let roamed = seen.lock().unwrap().get(&b"roamed"[..]).cloned();
    assert_eq!(roamed.as_ref().map(|v| v.len()), Some(1));
    assert_eq!(
        first.unwrap()[0],
        roamed.unwrap()[0],
        "the roaming client's datagrams left through another NAT session"
    );
    // And a replay back at the first address is dropped too.
    a.send_to(&pkt, server).unwrap();
    assert!(a.recv_from(&mut buf).is_err(), "the replay was answered");
}

/// Ferry with a dokodemo-door UDP inbound on `port` to `target` (and a TCP one to wait on).
fn udp_forwarder(port: u16, target: SocketAddr) -> Proc {
    let tcp_port = free_port();
    let cfg = format!(
        r#"{{"log":{{"loglevel":"warning"}},
        "inbounds":[{{"tag":"flood","listen":"127.0.0.1","port":{port},"protocol":"dokodemo-door",
              "settings":{{"address":"127.0.0.1","port":{},"network":"udp"}}}},
            {{"listen":"127.0.0.1","port":{tcp_port},"protocol":"tunnel","settings":{{"address":"127.0.0.1","port":9}}}}],
        "outbounds":[{{"protocol":"freedom","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}]}}"#,
        target.port()
    );
    ferry(&cfg, &[tcp_port])
}

/// Resident memory of a process, in KiB.
fn rss_kib(p: &Proc) -> u64 {
    let st = std::fs::read_to_string(format!("/proc/{}/status", p.child.id())).unwrap();
    st.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Sends `msg` from `u` through `port` until it comes back.
fn udp_round_trip(u: &UdpSocket, port: u16, msg: &[u8], f: &Proc) {
    let got = udp_ask(u, ([127, 0, 0, 1], port).into(), msg, 10, |d| d != msg);
    assert!(got.is_some(), "no echo of {msg:?}\n{}", f.output());
}

/// A flood of new sources from one address takes at most the per-source cap of sessions, the
/// server's memory stays bounded, and a session open before the flood keeps working.
#[test]
fn udp_nat_flood_from_one_address_is_capped() {
    let (echo, seen) = counting_echo();
    let port = free_port();
    let f = udp_forwarder(port, echo);
    let old = client_socket();
    udp_round_trip(&old, port, b"before", &f);
    let before = rss_kib(&f);
    let to: SocketAddr = ([127, 0, 0, 1], port).into();
    const SOURCES: usize = 2000;
    for i in 0..SOURCES {
        let u = UdpSocket::bind("127.0.0.1:0").unwrap();
        u.send_to(format!("flood {i}").as_bytes(), to).unwrap();
        if i % 250 == 0 {
            udp_round_trip(&old, port, format!("during {i}").as_bytes(), &f);
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    udp_round_trip(&old, port, b"after", &f);
    let after = rss_kib(&f);
    eprintln!("rss {before} -> {after} KiB");
    // Sessions, told apart by their outbound sockets (a flood socket's port may come back
    // for a later one and reach its earlier session).
    let through: std::collections::HashSet<SocketAddr> = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(k, _)| k.starts_with(b"flood "))
        .flat_map(|(_, v)| v.iter().copied())
        .collect();
    let through = through.len();
    // The session open before the flood holds one place of 127.0.0.1's.
    assert!(
        through < 256 && through > 100,
        "{through} flood sessions got through\n{}",
        f.output()
    );
    assert!(f.output().contains("refused"), "no refusal logged");
    // Each session holds a 64 KiB buffer once replies come: 2,000 of them would be 125 MiB.
    assert!(
        after.saturating_sub(before) < 48 * 1024,
        "RSS grew from {before} KiB to {after} KiB"
    );
}

/// A UDP sink: records the source address of each datagram, answers none.
fn sink() -> (SocketAddr, Seen) {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = s.local_addr().unwrap();
    let seen: Seen = Arc::default();
    let log = seen.clone();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 65536];
        while let Ok((n, from)) = s.recv_from(&mut buf) {
            log.lock()
                .unwrap()
                .entry(buf[..n].to_vec())
                .or_default()
                .push(from);
        }
    });
    (addr, seen)
}

/// Sessions that never get a reply end within seconds: their places under the cap free up,
/// and a source that comes back gets a new session (a new outbound socket).
#[test]
fn udp_nat_sessions_without_reply_end_soon() {
    let (target, seen) = sink();
    let port = free_port();
    let f = udp_forwarder(port, target);
    let to: SocketAddr = ([127, 0, 0, 1], port).into();
    let x = client_socket();
    x.send_to(b"x1", to).unwrap();
    let socks: Vec<UdpSocket> = (0..300)
        .map(|i| {
            let u = UdpSocket::bind("127.0.0.1:0").unwrap();
            u.send_to(format!("flood {i}").as_bytes(), to).unwrap();
            u
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let count = |prefix: &[u8]| {
        seen.lock()
            .unwrap()
            .keys()
            .filter(|k| k.starts_with(prefix))
            .count()
    };
    assert!(count(b"flood ") < 256, "the cap let the flood through");
    // Past the no-reply timeout, every session is gone: the refused sources get through now.
    std::thread::sleep(Duration::from_secs(6));
    for (i, u) in socks.iter().enumerate().skip(256) {
        u.send_to(format!("again {i}").as_bytes(), to).unwrap();
    }
    x.send_to(b"x2", to).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(count(b"again "), 300 - 256, "{}", f.output());
    let m = seen.lock().unwrap();
    let (a, b) = (m.get(&b"x1"[..]).unwrap(), m.get(&b"x2"[..]).unwrap());
    assert_ne!(a[0], b[0], "the session without replies was kept");
}

/// A TCP connection to `port` from `from` (an address of 127.0.0.0/8).
fn connect_from(from: [u8; 4], port: u16) -> std::net::TcpStream {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.bind(&SocketAddr::from((from, 0)).into()).unwrap();
    s.connect(&SocketAddr::from(([127, 0, 0, 1], port)).into())
        .unwrap();
    let s: std::net::TcpStream = s.into();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Sends an HTTP/1.1 request from `from`; the answer's status code and the connection.
fn http(from: [u8; 4], port: u16, method: &str, path: &str, body: &[u8]) -> (u16, TcpStream) {
    use std::io::{Read, Write};
    let mut s = connect_from(from, port);
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: h.test\r\nReferer: http://h.test{path}?x_padding={}\r\nContent-Length: {}\r\n\r\n",
        "X".repeat(300),
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !got.windows(2).any(|w| w == b"\r\n") {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    let code = String::from_utf8_lossy(&got)
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, s)
}

/// Sessions whose GET came but whose proxied connection never answered (the first packet
/// never comes, so the VLESS handshake waits) still count against their address's budget for
/// out-of-order packets; another address keeps its own.
#[test]
fn xhttp_unanswered_sessions_are_budgeted_per_address() {
    let port = free_port();
    let cfg = format!(
        r#"{{"log":{{"loglevel":"info"}},
        "policy":{{"levels":{{"0":{{"handshake":60}}}}}},
        "inbounds":[{{"listen":"127.0.0.1","port":{port},"protocol":"vless",
          "settings":{{"clients":[{{"id":"4c4f7e2a-7d7b-4b43-9d0f-6f1d8b3c2a10"}}],"decryption":"none"}},
          "streamSettings":{{"network":"xhttp","xhttpSettings":{{"path":"/xh"}}}}}}],
        "outbounds":[{{"protocol":"freedom","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}]}}"#
    );
    let f = ferry(&cfg, &[port]);
    let body = vec![7u8; 1_000_000];
    let mut gets = Vec::new();
    let mut refused = None;
    'sessions: for n in 0..2 {
        let sid = format!("0b1ad2f4-54b1-4a6e-8d0e-3f0e8c1f2a{n:02}");
        let (code, get) = http([127, 0, 0, 1], port, "GET", &format!("/xh/{sid}"), b"");
        assert_eq!(code, 200, "GET {n}\n{}", f.output());
        gets.push(get);
        for seq in 1..30 {
            let path = format!("/xh/{sid}/{seq}");
            let (code, _) = http([127, 0, 0, 1], port, "POST", &path, &body);
            if code != 200 {
                assert_eq!(code, 500, "session {n} packet {seq}");
                refused = Some(n * 29 + seq - 1);
                break 'sessions;
            }
        }
    }
    // 32 MiB of 1 MB packets: the 34th is refused.
    assert_eq!(refused, Some(33), "{}", f.output());
    assert!(f.output().contains("this address's buffer"));
    // Another address has room of its own.
    let sid = "0b1ad2f4-54b1-4a6e-8d0e-3f0e8c1f2b00";
    let (code, _get) = http([127, 0, 0, 2], port, "GET", &format!("/xh/{sid}"), b"");
    assert_eq!(code, 200);
    let (code, _) = http([127, 0, 0, 2], port, "POST", &format!("/xh/{sid}/1"), &body);
    assert_eq!(code, 200, "{}", f.output());
}

/// An HTTP CONNECT to a 256-byte name is answered 400, not tunnelled to a shortened name.
#[test]
fn http_connect_to_a_name_over_255_bytes_is_refused() {
    use std::io::{Read, Write};
    let port = free_port();
    let cfg = format!(
        r#"{{"inbounds":[{{"listen":"127.0.0.1","port":{port},"protocol":"http"}}],
        "outbounds":[{{"protocol":"freedom","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}]}}"#
    );
    let f = ferry(&cfg, &[port]);
    let name = "a".repeat(256);
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "CONNECT {name}:80 HTTP/1.1\r\nHost: {name}:80\r\n\r\n").unwrap();
    let mut got = String::new();
    let _ = s.read_to_string(&mut got);
    assert!(got.starts_with("HTTP/1.1 400"), "{got:?}\n{}", f.output());
}

/// A SOCKS outbound asked for a 256-byte name (a dokodemo-door's fixed address) sends no
/// request for a shortened one: the dispatcher refuses the name before any outbound runs (the
/// outbound refuses it too, for a caller that skips the dispatcher).
#[test]
fn socks_outbound_refuses_a_name_over_255_bytes() {
    use std::io::{Read, Write};
    // A SOCKS5 server that accepts no-auth and records what comes after the greeting.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let socks = l.local_addr().unwrap();
    let seen: Arc<Mutex<Vec<u8>>> = Arc::default();
    let log = seen.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut greet = [0u8; 3];
            if s.read_exact(&mut greet).is_err() || s.write_all(&[5, 0]).is_err() {
                continue;
            }
            let mut buf = [0u8; 1024];
            while let Ok(n) = s.read(&mut buf) {
                if n == 0 {
                    break;
                }
                log.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        }
    });
    let port = free_port();
    let name = "a".repeat(256);
    let cfg = format!(
        r#"{{"log":{{"loglevel":"debug"}},
        "inbounds":[{{"listen":"127.0.0.1","port":{port},"protocol":"dokodemo-door",
          "settings":{{"address":"{name}","port":80,"network":"tcp"}}}}],
        "outbounds":[{{"protocol":"socks","settings":{{"servers":[{{"address":"127.0.0.1","port":{}}}]}}}}]}}"#,
        socks.port()
    );
    let f = ferry(&cfg, &[port]);
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = c.write_all(b"hello");
    let mut buf = [0u8; 16];
    // The connection ends without an answer.
    assert!(matches!(c.read(&mut buf), Ok(0) | Err(_)));
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        seen.lock().unwrap().is_empty(),
        "the SOCKS server got a request\n{}",
        f.output()
    );
    assert!(
        f.output()
            .contains("destination name of 256 bytes is too long"),
        "{}",
        f.output()
    );
}
