//! The deployments the examples describe: real nginx (Debian) terminates TLS on one port and
//! hands `location /ray` to Ferry's WebSocket inbound over TCP, `location /rayunix` to one on a
//! unix socket, and the gRPC service's paths to Ferry's gRPC inbound with `grpc_pass` (h2c);
//! any other path gets nginx's own page. Ferry's clients dial nginx (VLESS over ws+TLS and
//! over gRPC+TLS) from 127.0.0.9; Ferry's server logs that address, which it only knows from
//! the `X-Forwarded-For` nginx adds.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::common;
use common::*;

use std::net::TcpStream;
use std::time::Duration;

const ID: &str = "9d3c6a0e-64c1-4e54-8d0b-1a3f7c2e5b44";
const SNI: &str = "ferry.test";

fn echo_ok(s: TcpStream, len: usize, seed: u64) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let data = pattern(len, seed);
    echo_through(s, &data) == data
}

#[test]
fn nginx_in_front_of_ws_over_tcp_and_unix_and_grpc() {
    let d = tempdir::Dir::new("nginx-transports");
    let g = ferry::transport::tls::generate_self_signed(&[SNI.to_string()], 2).unwrap();
    let cert = d.path().join("cert.pem");
    let key = d.path().join("key.pem");
    std::fs::write(&cert, &g.cert_pem).unwrap();
    std::fs::write(&key, &g.key_pem).unwrap();
    let pin: String = g.pin.iter().map(|b| format!("{b:02x}")).collect();
    let echo = echo_server();
    let (ws_port, grpc_port, front) = (free_port(), free_port(), free_port());
    let sock = d.path().join("ws.sock");

    // Ferry's server: three VLESS inbounds behind nginx, none with TLS.
    let vless = |listen: String, stream: &str| {
        format!(
            r#"{{{listen},"protocol":"vless","settings":{{"clients":[{{"id":"{ID}","email":"n@t"}}],
                "decryption":"none"}},"streamSettings":{stream}}}"#
        )
    };
    let server_cfg = format!(
        r#"{{"log":{{"loglevel":"debug"}},"inbounds":[{},{},{}],"outbounds":[{{"protocol":"freedom","settings":{{"finalRules":[{{"action":"allow","ip":["127.0.0.0/8","::1"]}}]}}}}]}}"#,
        vless(
            format!(r#""listen":"127.0.0.1","port":{ws_port}"#),
            r#"{"network":"ws","wsSettings":{"path":"/ray"}}"#
        ),
        vless(
            format!(r#""listen":"{}""#, sock.display()),
            r#"{"network":"ws","wsSettings":{"path":"/rayunix"}}"#
        ),
        vless(
            format!(r#""listen":"127.0.0.1","port":{grpc_port}"#),
            r#"{"network":"grpc","grpcSettings":{"serviceName":"gsvc"}}"#
        ),
    );
    let server = ferry(&server_cfg, &[ws_port, grpc_port]);

    let _nginx = nginx(
        d.path(),
        Nginx::Http(&format!(
            r#"  server {{
    listen 127.0.0.1:{front} ssl http2;
    server_name {SNI};
    ssl_certificate {cert};
    ssl_certificate_key {key};
    location /ray {{
      proxy_pass http://127.0.0.1:{ws_port};
      proxy_http_version 1.1;
      proxy_set_header Upgrade $http_upgrade;
      proxy_set_header Connection "upgrade";
      proxy_set_header Host $host;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
    }}
    location /rayunix {{
      proxy_pass http://unix:{sock};
      proxy_http_version 1.1;
      proxy_set_header Upgrade $http_upgrade;
      proxy_set_header Connection "upgrade";
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
    }}
    location /gsvc/ {{
      grpc_pass grpc://127.0.0.1:{grpc_port};
      grpc_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      grpc_read_timeout 1h;
      grpc_send_timeout 1h;
      client_max_body_size 0;
    }}
    location / {{
      return 200 "an ordinary website\n";
    }}
  }}"#,
            cert = cert.display(),
            key = key.display(),
            sock = sock.display()
        )),
        &[front],
    );

    // Ferry's client: one entry per transport, each routed to its outbound.
    let entries = [free_port(), free_port(), free_port()];
    let tls = format!(
        r#""security":"tls","tlsSettings":{{"serverName":"{SNI}","pinnedPeerCertSha256":"{pin}"}}"#
    );
    let out = |tag: &str, net: &str| {
        format!(
            r#"{{"tag":"{tag}","protocol":"vless","sendThrough":"127.0.0.9",
                "settings":{{"vnext":[{{"address":"127.0.0.1","port":{front},
                  "users":[{{"id":"{ID}","encryption":"none"}}]}}]}},
                "streamSettings":{{{net},{tls}}}}}"#
        )
    };
    let entry = |tag: &str, port: u16| {
        format!(
            r#"{{"tag":"{tag}","listen":"127.0.0.1","port":{port},"protocol":"dokodemo-door",
                "settings":{{"address":"127.0.0.1","port":{},"network":"tcp"}}}}"#,
            echo.port()
        )
    };
    let client_cfg = format!(
        r#"{{"log":{{"loglevel":"debug"}},
            "inbounds":[{},{},{}],
            "outbounds":[{},{},{}],
            "routing":{{"rules":[
              {{"inboundTag":["e-ws"],"outboundTag":"ws"}},
              {{"inboundTag":["e-unix"],"outboundTag":"unix"}},
              {{"inboundTag":["e-grpc"],"outboundTag":"grpc"}}]}}}}"#,
        entry("e-ws", entries[0]),
        entry("e-unix", entries[1]),
        entry("e-grpc", entries[2]),
        out(
            "ws",
            r#""network":"ws","wsSettings":{"path":"/ray?ed=2048"}"#
        ),
        out("unix", r#""network":"ws","wsSettings":{"path":"/rayunix"}"#),
        out(
            "grpc",
            r#""network":"grpc","grpcSettings":{"serviceName":"gsvc","multiMode":true}"#
        ),
    );
    let client = ferry(&client_cfg, &entries);

    for (i, port) in entries.into_iter().enumerate() {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        assert!(
            echo_ok(s, 20 << 20, i as u64),
            "through nginx, entry {i}\n--- server\n{}\n--- client\n{}",
            server.output(),
            client.output()
        );
    }
    // Three connections, each logged with the address nginx saw.
    let t = std::time::Instant::now();
    while server.output().matches("from 127.0.0.9:0 accepted").count() < 3 {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the real client address is not in Ferry's log\n{}",
            server.output()
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // Anyone else gets the website.
    let curl = std::process::Command::new(peer("curl"))
        .args([
            "-sk",
            "--resolve",
            &format!("{SNI}:{front}:127.0.0.1"),
            &format!("https://{SNI}:{front}/index.html"),
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&curl.stdout),
        "an ordinary website\n"
    );
    // A plain GET to the ws path reaches Ferry, which answers it as Xray does (400: not an
    // upgrade).
    let curl = std::process::Command::new(peer("curl"))
        .args([
            "-sk",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--resolve",
            &format!("{SNI}:{front}:127.0.0.1"),
            &format!("https://{SNI}:{front}/ray"),
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&curl.stdout), "400");
}
