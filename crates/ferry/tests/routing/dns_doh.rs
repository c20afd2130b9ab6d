//! DNS over HTTPS and over h2c through the real binary: `IPIfNonMatch` routing resolves the
//! destination's name through a DoH server this test runs (TLS with a self-signed certificate
//! that `SSL_CERT_FILE` makes Ferry trust, and h2c), and the answer decides between a freedom
//! outbound (the bytes come back from an echo server) and the default blackhole (nothing does).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use crate::common;
use common::*;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, TcpStream};
use std::pin::Pin;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use ferry::app::dns::message::{answer, question};
use ferry::transport::tls::{CertSource, CertificateEntry, TlsLayer, TlsSettings, Usage};
use hyper::body::{Body, Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};

/// A response body of one piece.
struct Full(Option<Bytes>);

impl Body for Full {
    type Data = Bytes;
    type Error = std::io::Error;
    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        Poll::Ready(self.get_mut().0.take().map(|b| Ok(Frame::data(b))))
    }
}

/// One request a test DoH server got.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    content_type: String,
    accept: String,
    x_padding: usize,
    name: String,
}

/// SNI and ALPN of a TLS connection.
type TlsInfo = (Option<String>, Option<String>);

/// A DoH server on 127.0.0.1 answering A/AAAA from a table (unknown names: NXDOMAIN).
struct DohServer {
    port: u16,
    /// Connections accepted (TLS handshakes done, for the TLS one).
    conns: Arc<AtomicUsize>,
    seen: Arc<Mutex<Vec<Seen>>>,
    /// SNI and ALPN of each TLS connection.
    tls_info: Arc<Mutex<Vec<TlsInfo>>>,
}

async fn doh_server(tls: Option<Arc<TlsLayer>>, table: &[(&str, &[&str])]) -> DohServer {
    let table: Arc<HashMap<String, Vec<IpAddr>>> = Arc::new(
        table
            .iter()
            .map(|(n, ips)| {
                (
                    n.to_string(),
                    ips.iter().map(|i| i.parse().unwrap()).collect(),
                )
            })
            .collect(),
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let s = DohServer {
        port: l.local_addr().unwrap().port(),
        conns: Arc::default(),
        seen: Arc::default(),
        tls_info: Arc::default(),
    };
    let (conns, seen, tls_info) = (s.conns.clone(), s.seen.clone(), s.tls_info.clone());
    tokio::spawn(async move {
        while let Ok((c, _)) = l.accept().await {
            let (conns, seen, tls_info, table, tls) = (
                conns.clone(),
                seen.clone(),
                tls_info.clone(),
                table.clone(),
                tls.clone(),
            );
            tokio::spawn(async move {
                let io: ferry::transport::BoxStream = match tls {
                    Some(layer) => {
                        let Ok(t) = layer.accept_tls(Box::new(c)).await else {
                            return;
                        };
                        let conn = t.connection();
                        tls_info.lock().unwrap().push((
                            conn.server_name().map(str::to_string),
                            conn.alpn_protocol()
                                .map(|a| String::from_utf8_lossy(a).into_owned()),
                        ));
                        Box::new(t)
                    }
                    None => Box::new(c),
                };
                conns.fetch_add(1, Ordering::Relaxed);
                let svc = hyper::service::service_fn(move |req: http::Request<Incoming>| {
                    let (seen, table) = (seen.clone(), table.clone());
                    async move { Ok::<_, std::io::Error>(serve(req, &table, &seen).await) }
                });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(io), svc)
                    .await;
            });
        }
    });
    s
}

async fn serve(
    req: http::Request<Incoming>,
    table: &HashMap<String, Vec<IpAddr>>,
    seen: &Mutex<Vec<Seen>>,
) -> http::Response<Full> {
    let (head, mut body) = req.into_parts();
    let mut q = Vec::new();
    while let Some(f) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
        if let Ok(d) = f.map(|f| f.into_data()) {
            q.extend_from_slice(&d.unwrap_or_default());
        }
    }
    let h = |k: &str| {
        head.headers
            .get(k)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let name = question(&q).map(|(n, _)| n).unwrap_or_default();
    seen.lock().unwrap().push(Seen {
        method: head.method.to_string(),
        path: head.uri.path().to_string(),
        content_type: h("content-type"),
        accept: h("accept"),
        x_padding: h("x-padding").len(),
        name: name.clone(),
    });
    let reply = match table.get(&name) {
        Some(ips) => answer(&q, 0, ips, 60),
        None => answer(&q, 3, &[], 0),
    };
    http::Response::builder()
        .header("content-type", "application/dns-message")
        .body(Full(reply.map(Bytes::from)))
        .unwrap()
}

/// Connects to `port` and echoes `data`; `None` when the connection closes with nothing back.
fn try_echo(port: u16, data: &[u8]) -> Option<Vec<u8>> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(data).unwrap();
    let mut got = vec![0u8; data.len()];
    match s.read_exact(&mut got) {
        Ok(()) => Some(got),
        Err(_) => None,
    }
}

fn dokodemo(tag: &str, port: u16, addr: &str, to: u16) -> String {
    format!(
        r#"{{"tag":"{tag}","listen":"127.0.0.1","port":{port},"protocol":"dokodemo-door",
            "settings":{{"address":"{addr}","port":{to}}}}}"#
    )
}

#[test]
fn ip_if_non_match_resolves_through_doh_and_h2c() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let g = ferry::transport::tls::generate_self_signed(
        &["localhost".to_string(), "127.0.0.1".to_string()],
        2,
    )
    .unwrap();
    let entry = CertificateEntry::load(
        CertSource::Inline {
            cert: g.cert_pem.clone(),
            key: Some(g.key_pem.clone()),
        },
        Usage::Encipherment,
        true,
    )
    .unwrap();
    let layer = TlsLayer::server(&TlsSettings {
        certificates: vec![Arc::new(entry)],
        alpn: vec!["h2".into()],
        ..TlsSettings::default()
    })
    .unwrap();
    let (tls_srv, h2c_srv) = rt.block_on(async {
        (
            doh_server(
                Some(Arc::new(layer)),
                &[
                    ("in.example", &["10.77.0.1"]),
                    ("out.example", &["10.88.0.1"]),
                ],
            )
            .await,
            doh_server(None, &[("h2c.example", &["10.77.0.2", "fd77::2"])]).await,
        )
    });
    let echo = echo_server();
    let (p_in, p_out, p_h2c) = (free_port(), free_port(), free_port());
    let cfg = format!(
        r#"{{"inbounds":[{},{},{}],
            "outbounds":[{{"protocol":"blackhole","tag":"block"}},
                         {{"protocol":"freedom","tag":"direct","settings":{{"redirect":"127.0.0.1:{}"}}}}],
            "dns":{{"servers":[
                {{"address":"https+local://localhost:{}/dns-query","domains":["full:in.example","full:out.example"],"skipFallback":true}},
                {{"address":"h2c+local://127.0.0.1:{}/h2c-query","domains":["full:h2c.example"],"skipFallback":true}}]}},
            "routing":{{"domainStrategy":"IPIfNonMatch","rules":[
                {{"ip":["10.77.0.0/16"],"outboundTag":"direct"}}]}}}}"#,
        dokodemo("in", p_in, "in.example", 9),
        dokodemo("out", p_out, "out.example", 9),
        dokodemo("h2c", p_h2c, "h2c.example", 9),
        echo.port(),
        tls_srv.port,
        h2c_srv.port,
    );
    // `ferry run` with the test's certificate as the only root (rustls-native-certs reads
    // SSL_CERT_FILE instead of the system store).
    let dir = tempdir::Dir::new("ferry-doh");
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &g.cert_pem).unwrap();
    let cfg_path = dir.path().join("config.json");
    std::fs::write(&cfg_path, &cfg).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(["run", "-c", cfg_path.to_str().unwrap()])
        .env("SSL_CERT_FILE", &ca)
        .env_remove("SSL_CERT_DIR")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.path().join("out.log")).unwrap())
        .stderr(std::fs::File::create(dir.path().join("err.log")).unwrap())
        .spawn()
        .unwrap();
    let f = Proc {
        child,
        name: "ferry".into(),
        dir,
    };
    for p in [p_in, p_out, p_h2c] {
        wait_listening(p, &f);
    }

    // in.example is 10.77.0.1 by the DoH server: the ip rule sends it to freedom.
    let data = pattern(8192, 1);
    let got = try_echo(p_in, &data);
    assert!(
        got.as_deref() == Some(&data[..]),
        "in.example not routed direct\n{}",
        f.output()
    );
    // out.example is 10.88.0.1: no rule, the default blackhole.
    assert_eq!(try_echo(p_out, b"anyone?"), None, "{}", f.output());
    // h2c.example is only known to the h2c server.
    let got = try_echo(p_h2c, &data);
    assert!(
        got.as_deref() == Some(&data[..]),
        "h2c.example not routed direct\n{}",
        f.output()
    );

    // What the servers saw: POSTs of DNS messages, as Xray sends them.
    let seen = tls_srv.seen.lock().unwrap().clone();
    let names: Vec<&str> = seen.iter().map(|s| s.name.as_str()).collect();
    assert!(
        names.contains(&"in.example") && names.contains(&"out.example"),
        "{seen:?}"
    );
    let h2c_seen = h2c_srv.seen.lock().unwrap().clone();
    assert!(
        h2c_seen.iter().any(|s| s.name == "h2c.example"),
        "{h2c_seen:?}"
    );
    for (s, path) in seen
        .iter()
        .map(|s| (s, "/dns-query"))
        .chain(h2c_seen.iter().map(|s| (s, "/h2c-query")))
    {
        assert_eq!(
            (s.method.as_str(), s.path.as_str()),
            ("POST", path),
            "{s:?}"
        );
        assert_eq!(s.content_type, "application/dns-message", "{s:?}");
        assert_eq!(s.accept, "application/dns-message", "{s:?}");
        assert!((124..=1248).contains(&s.x_padding), "{s:?}");
    }
    // One connection per server, reused by every query; SNI is the URL's host, ALPN h2.
    assert_eq!(tls_srv.conns.load(Ordering::Relaxed), 1, "{seen:?}");
    assert_eq!(h2c_srv.conns.load(Ordering::Relaxed), 1);
    assert!(seen.len() >= 4, "A and AAAA of two names: {seen:?}");
    assert_eq!(
        tls_srv.tls_info.lock().unwrap().clone(),
        vec![(Some("localhost".to_string()), Some("h2".to_string()))]
    );
    drop(f);
}

/// A routed DoH server (`h2c://`, no `+local`) is dialed through the outbound routing picks
/// for the `dns` object's `tag`: its URL names a port nobody listens on, and a freedom
/// outbound chosen by the tag rule redirects the connection to the real server.
#[test]
fn a_routed_doh_server_is_dialed_through_routing() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let srv = rt.block_on(doh_server(None, &[("h2c.example", &["10.77.0.2"])]));
    let echo = echo_server();
    let (p, dead) = (free_port(), free_port());
    let cfg = format!(
        r#"{{"inbounds":[{}],
            "outbounds":[{{"protocol":"blackhole","tag":"block"}},
                         {{"protocol":"freedom","tag":"direct","settings":{{"redirect":"127.0.0.1:{}"}}}},
                         {{"protocol":"freedom","tag":"to-doh","settings":{{"redirect":"127.0.0.1:{}"}}}}],
            "dns":{{"tag":"dns-q","servers":[{{"address":"h2c://127.0.0.1:{dead}/q","domains":["full:h2c.example"]}}]}},
            "routing":{{"domainStrategy":"IPIfNonMatch","rules":[
                {{"inboundTag":["dns-q"],"outboundTag":"to-doh"}},
                {{"ip":["10.77.0.0/16"],"outboundTag":"direct"}}]}}}}"#,
        dokodemo("h2c", p, "h2c.example", 9),
        echo.port(),
        srv.port,
    );
    let f = ferry(&cfg, &[p]);
    let data = pattern(4096, 3);
    let got = try_echo(p, &data);
    assert!(
        got.as_deref() == Some(&data[..]),
        "h2c.example not resolved through the routed DoH server\n{}",
        f.output()
    );
    assert!(srv
        .seen
        .lock()
        .unwrap()
        .iter()
        .any(|s| s.name == "h2c.example"));
    drop(f);
}
