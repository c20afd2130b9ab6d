//! Bounds a stranger or a replaying observer cannot push past: Shadowsocks 2022 UDP replay
//! windows that follow the client session rather than its address, and the UDP NAT's caps.

mod common;

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
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
        "outbounds":[{{"protocol":"freedom"}}]}}"#
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
