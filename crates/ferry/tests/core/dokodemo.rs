//! dokodemo-door -> freedom: bytes through, byte-exact, TCP and UDP.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::common;
use common::*;
use std::net::{TcpStream, UdpSocket};
use std::time::Duration;

#[test]
fn tcp_one_megabyte_byte_exact() {
    let echo = echo_server();
    let port = free_port();
    let cfg = format!(
        r#"{{"inbounds":[{{"tag":"in","listen":"127.0.0.1","port":{port},"protocol":"dokodemo-door",
            "settings":{{"address":"127.0.0.1","port":{},"network":"tcp"}}}}],
            "outbounds":[{{"protocol":"freedom","tag":"direct","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}]}}"#,
        echo.port()
    );
    let _f = ferry(&cfg, &[port]);
    let data = pattern(1 << 20, 7);
    let got = echo_through(TcpStream::connect(("127.0.0.1", port)).unwrap(), &data);
    assert!(got == data, "echoed bytes differ");
}

#[test]
fn udp_round_trip() {
    let echo = udp_echo_server();
    let port = free_port();
    let tcp_port = free_port();
    let cfg = format!(
        r#"{{"inbounds":[{{"listen":"127.0.0.1","port":{port},"protocol":"dokodemo-door",
              "settings":{{"address":"127.0.0.1","port":{},"network":"udp"}}}},
            {{"listen":"127.0.0.1","port":{tcp_port},"protocol":"tunnel","settings":{{"address":"127.0.0.1","port":9}}}}],
            "outbounds":[{{"protocol":"freedom","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}]}}"#,
        echo.port()
    );
    let _f = ferry(&cfg, &[tcp_port]);
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 2048];
    for i in 0..20u8 {
        let msg = vec![i; 100 + i as usize * 50];
        s.send_to(&msg, ("127.0.0.1", port)).unwrap();
        let (n, _) = s.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], &msg[..]);
    }
}
