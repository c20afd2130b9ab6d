//! VMess against real Xray and v2ray 4.34: Ferry client -> peer server and peer client -> Ferry
//! server, TCP (byte-exact 50 MB through an echo server) and UDP, per security type and option.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::common;
use common::*;
use std::io::{Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::time::Duration;

const ID: &str = "b831381d-6324-4d53-ad4f-8cda48b30811";
const BIG: usize = 50 << 20;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Peer {
    Xray,
    V2ray,
}

impl Peer {
    fn start(self, cfg: &str, wait: &[u16]) -> Proc {
        // Default settings: Xray's client sends UDP as XUDP (Mux.Cool, full-cone).
        let p = match self {
            Peer::Xray => spawn_with_config(&peer("xray"), "xray", cfg, &["run", "-c", "{config}"]),
            Peer::V2ray => {
                spawn_with_config(&peer("v2ray"), "v2ray", cfg, &["-config", "{config}"])
            }
        };
        for port in wait {
            wait_listening(*port, &p);
        }
        p
    }
}

/// A VMess test case: who plays which side, the user's security, experiments, alterId.
#[derive(Clone, Copy)]
struct Case {
    peer: Peer,
    security: &'static str,
    experiments: &'static str,
    alter_id: u16,
}

impl Case {
    fn user(&self) -> String {
        format!(
            r#"{{"id":"{ID}","alterId":{},"security":"{}","experiments":"{}","email":"u@t"}}"#,
            self.alter_id, self.security, self.experiments
        )
    }

    fn client(&self) -> String {
        format!(
            r#"{{"id":"{ID}","alterId":{},"email":"u@t","level":0}}"#,
            self.alter_id
        )
    }
}

fn dokodemo(port: u16, target: u16, net: &str) -> String {
    format!(
        r#"{{"tag":"in{port}","listen":"127.0.0.1","port":{port},"protocol":"dokodemo-door",
            "settings":{{"address":"127.0.0.1","port":{target},"network":"{net}"}}}}"#
    )
}

fn vmess_out(c: &Case, server: u16) -> String {
    format!(
        r#"{{"tag":"proxy","protocol":"vmess","settings":{{"vnext":[{{"address":"127.0.0.1","port":{server},
            "users":[{}]}}]}}}}"#,
        c.user()
    )
}

fn vmess_in(c: &Case, port: u16) -> String {
    format!(
        r#"{{"tag":"vin","listen":"127.0.0.1","port":{port},"protocol":"vmess",
            "settings":{{"clients":[{}]}}}}"#,
        c.client()
    )
}

fn freedom(peer: Option<Peer>) -> &'static str {
    match peer {
        Some(Peer::Xray) => {
            r#"{"tag":"direct","protocol":"freedom","settings":{"finalRules":[{"action":"allow","ip":["127.0.0.0/8"]}]}}"#
        }
        _ => {
            r#"{"tag":"direct","protocol":"freedom","settings":{"finalRules":[{"action":"allow","ip":["127.0.0.0/8","::1"]}]}}"#
        }
    }
}

fn config(inbounds: &[String], outbound: &str) -> String {
    format!(
        r#"{{"log":{{"loglevel":"debug"}},"inbounds":[{}],"outbounds":[{outbound}]}}"#,
        inbounds.join(",")
    )
}

/// Starts a chain for `case`: returns the entry port (dokodemo) and the processes.
/// `ferry_client`: Ferry is the VMess client and the peer the server; else the other way.
fn chain(case: &Case, ferry_client: bool, target: u16, net: &str) -> (u16, Vec<Proc>) {
    let entry = free_port();
    let server = free_port();
    // A TCP dokodemo on the entry side so there is a TCP port to wait for with UDP tests.
    let probe = free_port();
    let entry_cfg = config(
        &[dokodemo(entry, target, net), dokodemo(probe, target, "tcp")],
        &vmess_out(case, server),
    );
    if ferry_client {
        let srv = case.peer.start(
            &config(&[vmess_in(case, server)], freedom(Some(case.peer))),
            &[server],
        );
        let cli = ferry(&entry_cfg, &[probe]);
        (entry, vec![srv, cli])
    } else {
        let srv = ferry(&config(&[vmess_in(case, server)], freedom(None)), &[server]);
        let cli = case.peer.start(&entry_cfg, &[probe]);
        (entry, vec![srv, cli])
    }
}

fn tcp_case(case: Case, ferry_client: bool, len: usize) {
    let echo = echo_server();
    let (entry, procs) = chain(&case, ferry_client, echo.port(), "tcp");
    let data = pattern(len, 0x5eed ^ len as u64);
    let s = TcpStream::connect(("127.0.0.1", entry)).unwrap();
    let got = match echo_checked(s, &data) {
        Ok(g) => g,
        Err(e) => panic!(
            "{:?} {} {} ferry_client={ferry_client}: {e}\n{}\n{}",
            case.peer,
            case.security,
            case.experiments,
            procs[0].output(),
            procs[1].output()
        ),
    };
    if got != data {
        let at = got.iter().zip(&data).position(|(a, b)| a != b);
        panic!(
            "{:?} {} {} ferry_client={ferry_client}: echoed bytes differ at {at:?}\n{}\n{}",
            case.peer,
            case.security,
            case.experiments,
            procs[0].output(),
            procs[1].output()
        );
    }
}

/// Like `echo_through`, but returns errors so the test can show the processes' logs.
fn echo_checked(mut s: TcpStream, data: &[u8]) -> std::io::Result<Vec<u8>> {
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut w = s.try_clone()?;
    let out = data.to_vec();
    let writer = std::thread::spawn(move || w.write_all(&out));
    let mut got = vec![0u8; data.len()];
    let r = s.read_exact(&mut got);
    let _ = s.shutdown(std::net::Shutdown::Both);
    let wr = writer.join().unwrap_or(Ok(()));
    r?;
    wr?;
    Ok(got)
}

fn udp_case(case: Case, ferry_client: bool) {
    let echo = udp_echo_server();
    let (entry, procs) = chain(&case, ferry_client, echo.port(), "udp");
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut buf = [0u8; 65536];
    let mut ok = 0;
    // v2ray 4.34 reads UDP into 2048-byte buffers: larger datagrams do not survive it.
    // Xray's XUDP writer drops datagrams with len + 666 > 8192.
    let max = if case.peer == Peer::V2ray { 2000 } else { 7500 };
    for i in 0..30u16 {
        let msg = pattern(1 + (i as usize * 271) % max, i as u64);
        s.send_to(&msg, ("127.0.0.1", entry)).unwrap();
        if let Ok((n, _)) = s.recv_from(&mut buf) {
            assert_eq!(&buf[..n], &msg[..], "datagram {i}");
            ok += 1;
        }
    }
    // UDP may lose the first datagrams while the chain connects; most must arrive intact.
    assert!(
        ok >= 25,
        "{:?} {} udp ferry_client={ferry_client}: only {ok}/30 echoed\n{}\n{}",
        case.peer,
        case.security,
        procs[0].output(),
        procs[1].output()
    );
}

fn both_ways(case: Case) {
    tcp_case(case, true, BIG);
    tcp_case(case, false, BIG);
}

const fn xray(security: &'static str, experiments: &'static str) -> Case {
    Case {
        peer: Peer::Xray,
        security,
        experiments,
        alter_id: 0,
    }
}

const fn v2ray(security: &'static str, alter_id: u16) -> Case {
    Case {
        peer: Peer::V2ray,
        security,
        experiments: "",
        alter_id,
    }
}

#[test]
fn xray_aes_128_gcm() {
    both_ways(xray("aes-128-gcm", ""));
}

#[test]
fn xray_aes_128_gcm_authenticated_length() {
    both_ways(xray("aes-128-gcm", "AuthenticatedLength"));
}

#[test]
fn xray_chacha20_poly1305() {
    both_ways(xray("chacha20-poly1305", ""));
}

#[test]
fn xray_chacha20_poly1305_authenticated_length() {
    both_ways(xray("chacha20-poly1305", "AuthenticatedLength"));
}

#[test]
fn xray_none() {
    both_ways(xray("none", ""));
}

#[test]
fn xray_zero() {
    both_ways(xray("zero", ""));
}

#[test]
fn xray_udp() {
    for sec in ["aes-128-gcm", "chacha20-poly1305", "none"] {
        udp_case(xray(sec, ""), true);
        udp_case(xray(sec, ""), false);
    }
    udp_case(xray("aes-128-gcm", "AuthenticatedLength"), true);
    udp_case(xray("aes-128-gcm", "AuthenticatedLength"), false);
}

#[test]
fn v2ray_aead_header() {
    for sec in ["aes-128-gcm", "chacha20-poly1305", "none", "zero"] {
        tcp_case(v2ray(sec, 0), true, BIG);
        tcp_case(v2ray(sec, 0), false, BIG);
    }
}

#[test]
fn v2ray_legacy_alter_id() {
    for sec in ["aes-128-gcm", "aes-128-cfb", "none"] {
        tcp_case(v2ray(sec, 4), true, BIG);
        tcp_case(v2ray(sec, 4), false, BIG);
    }
}

#[test]
fn v2ray_aead_header_aes_128_cfb() {
    tcp_case(v2ray("aes-128-cfb", 0), true, BIG);
    tcp_case(v2ray("aes-128-cfb", 0), false, BIG);
}

#[test]
fn v2ray_udp() {
    for (sec, alter) in [
        ("aes-128-gcm", 0),
        ("chacha20-poly1305", 0),
        ("aes-128-cfb", 4),
    ] {
        udp_case(v2ray(sec, alter), true);
        udp_case(v2ray(sec, alter), false);
    }
}

/// Sanity check for the helpers: a first small exchange works (keeps failures readable).
#[test]
fn xray_small_exchange() {
    let case = xray("aes-128-gcm", "");
    for ferry_client in [true, false] {
        let echo = echo_server();
        let (entry, _p) = chain(&case, ferry_client, echo.port(), "tcp");
        let mut s = TcpStream::connect(("127.0.0.1", entry)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"hello vmess").unwrap();
        let mut b = [0u8; 11];
        s.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"hello vmess");
    }
}

// ---------------------------------------------------------------- bad input against Ferry's server

mod bad_input {
    use super::*;
    use ferry::common::Destination;
    use ferry::proxy::vmess::body::Security;
    use ferry::proxy::vmess::header::{self, AuthIdCipher, Command, Request};
    use ferry::proxy::vmess::outbound::{client_handshake, ClientUser};
    use ferry::proxy::vmess::{Account, SecurityChoice};

    fn uuid() -> [u8; 16] {
        ferry::common::uuid::parse_id(ID).unwrap()
    }

    fn user(id: [u8; 16]) -> ClientUser {
        ClientUser {
            account: Account::new(id, 0, "", 0),
            security: SecurityChoice::Body(Security::Aes128Gcm),
            auth_length: false,
            alter_ids: vec![],
        }
    }

    fn now() -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64
    }

    /// A complete request (header + one "ping" chunk) as `client_handshake` makes it.
    fn valid_request(dest: &Destination) -> Vec<u8> {
        let mut h = client_handshake(&user(uuid()), Command::Tcp, dest).unwrap();
        let mut out = h.header.clone();
        h.sealer.seal(b"ping", &mut out);
        out
    }

    /// An AEAD header with a chosen timestamp and user id.
    fn header_at(id: [u8; 16], ts: i64, dest: &Destination) -> Vec<u8> {
        let ck = header::cmd_key(&id);
        let eauid = AuthIdCipher::new(&ck).seal(ts, [1, 2, 3, 4]);
        let req = Request {
            iv: [7; 16],
            key: [8; 16],
            v: 1,
            opt: 0x01,
            security: 3,
            cmd: Command::Tcp,
            dest: dest.clone(),
        };
        let mut ins = Vec::new();
        header::encode_instruction(&req, &[], &mut ins);
        let mut out = Vec::new();
        header::seal_aead_request(&ck, &eauid, &[9; 8], &ins, &mut out);
        out
    }

    fn connect(port: u16) -> TcpStream {
        TcpStream::connect(("127.0.0.1", port)).unwrap()
    }

    /// Xray's behaviour for a request it cannot authenticate: keep reading (no reply, no
    /// close) until some thousand bytes arrived, then close.
    fn assert_drained(mut s: TcpStream, what: &str) {
        s.set_read_timeout(Some(Duration::from_millis(400)))
            .unwrap();
        let mut b = [0u8; 64];
        match s.read(&mut b) {
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            other => panic!("{what}: expected the server to keep draining, got {other:?}"),
        }
        let _ = s.write_all(&[0x55; 4000]);
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        match s.read(&mut b) {
            Ok(0) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            other => panic!("{what}: expected a close after draining, got {other:?}"),
        }
    }

    /// The server answers nothing but its header and end marker, then closes.
    fn assert_closed_without_data(mut s: TcpStream, what: &str) {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut got = Vec::new();
        let mut b = [0u8; 4096];
        loop {
            match s.read(&mut b) {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&b[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
                Err(e) => panic!("{what}: connection not closed: {e}"),
            }
        }
        assert!(
            got.len() <= 38 + 18 + 64,
            "{what}: {} bytes came back",
            got.len()
        );
    }

    #[test]
    fn rejected_as_xray_does_and_server_survives() {
        let echo = echo_server();
        let port = free_port();
        let case = xray("aes-128-gcm", "");
        let f = ferry(&config(&[vmess_in(&case, port)], freedom(None)), &[port]);
        let dest = Destination::from(echo);

        // Random bytes.
        let mut s = connect(port);
        s.write_all(&pattern(100, 1)).unwrap();
        assert_drained(s, "random bytes");

        // Wrong user.
        let mut s = connect(port);
        s.write_all(&header_at([0xee; 16], now(), &dest)).unwrap();
        assert_drained(s, "wrong user");

        // Expired timestamp (and one from the future).
        for ts in [now() - 300, now() + 300] {
            let mut s = connect(port);
            s.write_all(&header_at(uuid(), ts, &dest)).unwrap();
            assert_drained(s, "timestamp out of window");
        }

        // A valid request is answered; the same bytes again are a replay.
        let req = valid_request(&dest);
        let mut s = connect(port);
        s.write_all(&req).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut b = [0u8; 64];
        assert!(s.read(&mut b).unwrap() > 0, "valid request got no answer");
        let mut s2 = connect(port);
        s2.write_all(&req).unwrap();
        assert_drained(s2, "replayed auth id");
        drop(s);

        // Corrupted chunk after a valid header: closed, nothing relayed.
        let mut h = client_handshake(&user(uuid()), Command::Tcp, &dest).unwrap();
        let mut out = h.header.clone();
        let at = out.len();
        h.sealer.seal(b"hello world", &mut out);
        out[at + 5] ^= 0x01;
        let mut s = connect(port);
        s.write_all(&out).unwrap();
        assert_closed_without_data(s, "corrupted chunk");

        // Huge length (65535, the most a size field says): the server waits for it, then the
        // client gives up; nothing breaks.
        let mut hdr = header_at(uuid(), now(), &dest);
        hdr.extend_from_slice(&[0xff, 0xff]);
        hdr.extend_from_slice(&[0u8; 30000]);
        let mut s = connect(port);
        s.write_all(&hdr).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        assert_closed_without_data(s, "huge length");

        // The server still serves valid clients.
        let chain_port = free_port();
        let cli = ferry(
            &config(
                &[dokodemo(chain_port, echo.port(), "tcp")],
                &vmess_out(&case, port),
            ),
            &[chain_port],
        );
        let got = echo_checked(connect(chain_port), b"still alive").unwrap();
        assert_eq!(got, b"still alive", "{}", cli.output());
        let log = f.output();
        assert!(!log.contains("panicked"), "{log}");
        assert!(
            log.matches("invalid request").count() >= 5,
            "rejections are logged:\n{log}"
        );
    }
}
