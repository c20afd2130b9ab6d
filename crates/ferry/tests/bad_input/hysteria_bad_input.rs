//! What a stranger sees of a Hysteria inbound, and what hostile input does to it, driven with a
//! third-party HTTP/3 client (the `h3` crate over quinn): requests that are not an
//! authentication get the masquerade site (here a fixed answer) on a connection that stays
//! open; TCP request streams before authentication are not proxied; after it they are; a
//! removed user's connection is cut; garbage datagrams (what a wrong Salamander password
//! looks like) get no more than QUIC's own answers and harm no one else.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::{free_port, start_instance};

/// A verifier that takes any certificate: the probe looks at what the server answers.
#[derive(Debug)]
struct AnyCert;

impl rustls::client::danger::ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }
    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        rustls::crypto::aws_lc_rs::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// A Hysteria server with one user, masquerading as a fixed page.
async fn server(dir: &std::path::Path) -> (ferry::app::instance::Instance, u16) {
    let fixed = json!({"type": "string", "content": "hello", "headers": {"server": "nginx"}, "statusCode": 200});
    server_with(dir, fixed).await
}

/// A Hysteria server with one user and this masquerade.
async fn server_with(
    dir: &std::path::Path,
    masquerade: serde_json::Value,
) -> (ferry::app::instance::Instance, u16) {
    let cert = ferry::transport::tls::generate_self_signed(&["hy.test".into()], 30).unwrap();
    std::fs::write(dir.join("cert.pem"), &cert.cert_pem).unwrap();
    std::fs::write(dir.join("key.pem"), &cert.key_pem).unwrap();
    let port = free_port();
    let inst = start_instance(json!({
        "inbounds": [{"tag": "hy-in", "listen": "127.0.0.1", "port": port, "protocol": "hysteria",
            "settings": {"version": 2, "clients": [{"auth": "right-pass", "email": "u1@ferry.test"}]},
            "streamSettings": {"network": "hysteria", "security": "tls",
                "tlsSettings": {"alpn": ["h3"], "certificates": [{
                    "certificateFile": dir.join("cert.pem"), "keyFile": dir.join("key.pem")}]},
                "hysteriaSettings": {"version": 2, "masquerade": masquerade}}}],
        "outbounds": [{"protocol": "freedom", "settings": {"finalRules": [
            {"action": "allow", "ip": ["127.0.0.0/8"]}]}}]
    }))
    .await;
    (inst, port)
}

async fn connect(port: u16) -> quinn::Connection {
    let mut tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13])
    .unwrap()
    .dangerous()
    .with_custom_certificate_verifier(Arc::new(AnyCert))
    .with_no_client_auth();
    tls.alpn_protocols = vec![b"h3".to_vec()];
    let cfg = quinn::ClientConfig::new(Arc::new(
        quinn::crypto::rustls::QuicClientConfig::try_from(tls).unwrap(),
    ));
    let mut ep = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    ep.set_default_client_config(cfg);
    let to: SocketAddr = ([127, 0, 0, 1], port).into();
    for _ in 0..50 {
        if let Ok(Ok(c)) =
            tokio::time::timeout(Duration::from_secs(2), ep.connect(to, "hy.test").unwrap()).await
        {
            return c;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the Hysteria server never answered");
}

type Sender = h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>;

async fn h3(conn: &quinn::Connection) -> Sender {
    let (mut driver, send) = h3::client::new(h3_quinn::Connection::new(conn.clone()))
        .await
        .unwrap();
    tokio::spawn(async move {
        let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
    });
    send
}

/// Sends one request: its status, headers and body.
async fn ask(send: &mut Sender, req: http::Request<()>) -> (u16, http::HeaderMap, Vec<u8>) {
    let mut s = send.send_request(req).await.unwrap();
    s.finish().await.unwrap();
    let resp = s.recv_response().await.unwrap();
    let mut body = Vec::new();
    while let Some(mut chunk) = s.recv_data().await.unwrap() {
        while chunk.has_remaining() {
            let c = chunk.chunk().to_vec();
            chunk.advance(c.len());
            body.extend_from_slice(&c);
        }
    }
    (resp.status().as_u16(), resp.headers().clone(), body)
}

fn auth(pass: &str) -> http::Request<()> {
    http::Request::post("https://hysteria/auth")
        .header("hysteria-auth", pass)
        .header("hysteria-cc-rx", "0")
        .header("hysteria-padding", "xyz")
        .body(())
        .unwrap()
}

/// Opens a TCP request stream for `to` and sends `payload` behind it: what the server
/// answers within a second (empty when nothing).
async fn tcp_request(conn: &quinn::Connection, to: SocketAddr, payload: &[u8]) -> Vec<u8> {
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    let addr = to.to_string();
    let mut req = vec![0x44, 0x01, addr.len() as u8];
    req.extend_from_slice(addr.as_bytes());
    req.push(0);
    req.extend_from_slice(payload);
    send.write_all(&req).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
    while let Ok(Ok(Some(n))) = tokio::time::timeout_at(deadline, recv.read(&mut buf)).await {
        got.extend_from_slice(&buf[..n]);
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strangers_get_the_masquerade_and_users_get_through() {
    let dir = tempdir();
    let (inst, port) = server(&dir).await;
    let target = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let to = target.local_addr().unwrap();
    let conn = connect(port).await;
    let mut send = h3(&conn).await;

    // A browser's GET and a wrong password both get the fixed page.
    let get = http::Request::get("https://hy.test/").body(()).unwrap();
    let (status, headers, body) = ask(&mut send, get).await;
    assert_eq!((status, &body[..]), (200, &b"hello"[..]));
    assert_eq!(headers.get("server").unwrap(), "nginx");
    let (status, _, body) = ask(&mut send, auth("wrong-pass")).await;
    assert_eq!(
        (status, &body[..]),
        (200, &b"hello"[..]),
        "a wrong password is a web page"
    );
    // The right password with another host is not an authentication either.
    let other = http::Request::post("https://hy.test/auth")
        .header("hysteria-auth", "right-pass")
        .body(())
        .unwrap();
    assert_eq!(ask(&mut send, other).await.0, 200);

    // Before authentication a TCP request stream is no proxy: nothing reaches the target.
    let answer = tcp_request(&conn, to, b"ping").await;
    assert!(!answer.starts_with(&[0]), "answered as a proxy: {answer:?}");
    assert!(
        tokio::time::timeout(Duration::from_millis(300), target.accept())
            .await
            .is_err(),
        "the target was reached before authentication"
    );
    // (HTTP/3 reads the request as frames it does not know and may close the connection for
    // the bytes behind them, as quic-go's server does for a malformed request.)

    // Authenticated: 233 and UDP on; TCP requests are proxied.
    let conn = connect(port).await;
    let mut send = h3(&conn).await;
    let (status, headers, _) = ask(&mut send, auth("right-pass")).await;
    assert_eq!(status, 233);
    assert_eq!(headers.get("hysteria-udp").unwrap(), "true");
    let pad = headers.get("hysteria-padding").unwrap().len();
    assert!((256..2048).contains(&pad), "{pad}");
    let relay = tokio::spawn(async move {
        let (mut s, _) = target.accept().await.unwrap();
        let mut b = [0u8; 4];
        s.read_exact(&mut b).await.unwrap();
        s.write_all(b"pong").await.unwrap();
        b
    });
    let answer = tcp_request(&conn, to, b"ping").await;
    assert_eq!(answer.first(), Some(&0), "the OK status first: {answer:?}");
    assert!(answer.ends_with(b"pong"), "{answer:?}");
    assert_eq!(&relay.await.unwrap(), b"ping");

    // The user removed (as the API's RemoveUser does it): the connection is cut.
    let ib = inst.inbound("hy-in").unwrap();
    let users = ib.handler.users().unwrap();
    let user = users.find_user("U1@ferry.test").unwrap();
    assert!(users.remove_user("u1@ferry.test"));
    user.traffic.revoked.fire();
    tokio::time::timeout(Duration::from_secs(3), conn.closed())
        .await
        .expect("a removed user's connection is closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_datagrams_get_quic_answers_only_and_hurt_no_one() {
    let dir = tempdir();
    let (_inst, port) = server(&dir).await;
    let good = connect(port).await;
    let u = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut seed = 0x9e37_79b9u32;
    for i in 0..300u32 {
        let len = 1 + (i as usize * 37) % 1400;
        let d: Vec<u8> = (0..len)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 17;
                seed ^= seed << 5;
                seed as u8
            })
            .collect();
        u.send_to(&d, ("127.0.0.1", port)).await.unwrap();
    }
    // What QUIC itself answers, as quic-go does: a version negotiation for a long header of an
    // unknown version; beyond that, at most one stateless reset (quic-go, without a reset key
    // as Xray runs it, sends none).
    let mut buf = [0u8; 2048];
    let mut resets = 0;
    while let Ok(Ok((n, _))) =
        tokio::time::timeout(Duration::from_millis(500), u.recv_from(&mut buf)).await
    {
        let vn = n >= 5 && buf[0] & 0x80 != 0 && buf[1..5] == [0, 0, 0, 0];
        if !vn {
            resets += 1;
        }
    }
    assert!(
        resets <= 1,
        "{resets} answers that are not version negotiation"
    );
    // The connection that was there and a new one both still work.
    let mut send = h3(&good).await;
    assert_eq!(ask(&mut send, auth("right-pass")).await.0, 233);
    let fresh = connect(port).await;
    let mut send = h3(&fresh).await;
    assert_eq!(ask(&mut send, auth("right-pass")).await.0, 233);
}

fn tempdir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!(
        "ferry-hy-probe-{}-{}",
        std::process::id(),
        free_port()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_masquerade_is_a_web_site() {
    let dir = tempdir();
    let site = dir.join("site");
    std::fs::create_dir_all(site.join("sub")).unwrap();
    std::fs::write(site.join("index.html"), "<h1>home</h1>").unwrap();
    std::fs::write(site.join("sub/a.txt"), "file a").unwrap();
    std::fs::write(dir.join("secret"), "outside").unwrap();
    let (_inst, port) = server_with(&dir, json!({"type": "file", "dir": site})).await;
    let conn = connect(port).await;
    let mut send = h3(&conn).await;
    let get = |p: &str| {
        http::Request::get(format!("https://hy.test{p}"))
            .body(())
            .unwrap()
    };
    let (s, h, b) = ask(&mut send, get("/")).await;
    assert_eq!((s, &b[..]), (200, &b"<h1>home</h1>"[..]));
    assert_eq!(h.get("content-type").unwrap(), "text/html; charset=utf-8");
    let (s, h, _) = ask(&mut send, get("/sub")).await;
    assert_eq!(
        (s, h.get("location").unwrap().to_str().unwrap()),
        (301, "/sub/")
    );
    let (s, _, b) = ask(&mut send, get("/sub/")).await;
    assert_eq!(s, 200);
    assert!(String::from_utf8_lossy(&b).contains("<a href=\"a.txt\">a.txt</a>"));
    let (s, _, b) = ask(&mut send, get("/sub/a.txt")).await;
    assert_eq!((s, &b[..]), (200, &b"file a"[..]));
    let (s, _, b) = ask(&mut send, get("/%2e%2e/secret")).await;
    assert_eq!((s, &b[..]), (404, &b"404 page not found\n"[..]));
    // A wrong password is one more request for the site.
    assert_eq!(ask(&mut send, auth("wrong")).await.0, 404);
}

/// A one-request-at-a-time HTTP/1.1 origin: answers 203 with the request head it got.
fn origin() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            let mut c = c;
            let head = crate::proxy_clients::read_head(&mut c).unwrap_or_default();
            let body = head.replace("\r\n", "\n");
            let resp = format!(
                "HTTP/1.1 203 Non-Authoritative Information\r\nContent-Length: {}\r\nX-Origin: yes\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = std::io::Write::write_all(&mut c, resp.as_bytes());
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_masquerade_forwards_to_its_site() {
    let dir = tempdir();
    let o = origin();
    for rewrite in [false, true] {
        let m = json!({"type": "proxy", "url": format!("http://127.0.0.1:{o}/base/?k=1"), "rewriteHost": rewrite});
        let (_inst, port) = server_with(&dir, m).await;
        let conn = connect(port).await;
        let mut send = h3(&conn).await;
        let req = http::Request::get("https://hy.test/x?z=2")
            .header("user-agent", "probe/1")
            .body(())
            .unwrap();
        let (s, h, b) = ask(&mut send, req).await;
        let seen = String::from_utf8_lossy(&b).to_lowercase();
        assert_eq!(s, 203, "{seen}");
        assert_eq!(h.get("x-origin").unwrap(), "yes");
        assert!(seen.starts_with("get /base/x?k=1&z=2 http/1.1"), "{seen}");
        assert!(seen.contains("user-agent: probe/1"), "{seen}");
        let host = if rewrite {
            format!("host: 127.0.0.1:{o}")
        } else {
            "host: hy.test".into()
        };
        assert!(seen.contains(&host), "{seen}");
    }
    // An origin that is not there: 502.
    let m = json!({"type": "proxy", "url": format!("http://127.0.0.1:{}/", free_port())});
    let (_inst, port) = server_with(&dir, m).await;
    let conn = connect(port).await;
    let mut send = h3(&conn).await;
    let get = http::Request::get("https://hy.test/").body(()).unwrap();
    assert_eq!(ask(&mut send, get).await.0, 502);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_http3_frame_is_cut_and_strangers_get_few_streams() {
    let dir = tempdir();
    let (_inst, port) = server(&dir).await;
    let conn = connect(port).await;
    // A HEADERS frame claiming 2^30 bytes, then junk for as long as the server reads it.
    let (mut send, _recv) = conn.open_bi().await.unwrap();
    send.write_all(&[0x01, 0xc0, 0, 0, 0, 0x40, 0, 0, 0])
        .await
        .unwrap();
    let junk = vec![0x55u8; 64 << 10];
    let mut sent = 0usize;
    let cut = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if send.write_all(&junk).await.is_err() {
                return true;
            }
            sent += junk.len();
            if sent > 64 << 20 {
                return false;
            }
        }
    })
    .await
    .unwrap_or(false);
    assert!(
        cut,
        "the server read {sent} bytes of one frame without stopping it"
    );
    // What the client had sent before it heard: the stream's flow-control window (8 MiB).
    assert!(sent < 16 << 20, "stopped only after {sent} bytes");
    // The connection and the site still work.
    let mut h = h3(&conn).await;
    let get = http::Request::get("https://hy.test/").body(()).unwrap();
    assert_eq!(ask(&mut h, get).await.0, 200);
    // Before authentication at most 32 streams are open at once.
    let mut held = Vec::new();
    let mut opened = 0;
    for _ in 0..40 {
        match tokio::time::timeout(Duration::from_millis(300), conn.open_bi()).await {
            Ok(Ok(s)) => {
                held.push(s);
                opened += 1;
            }
            _ => break,
        }
    }
    assert!(opened <= 32, "a stranger opened {opened} streams");
}
