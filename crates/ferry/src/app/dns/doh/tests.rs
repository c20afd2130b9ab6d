//! The DoH client against HTTP/2 servers started by the tests, and its sans-IO parts.

use super::*;
use crate::app::dns::message::{A, AAAA};
use crate::app::dns::{parse_address, Transport};
use std::collections::VecDeque;
use std::net::SocketAddr;

fn doh(addr: &str) -> std::result::Result<Arc<Doh>, ConfigError> {
    match parse_address(addr, None, "dns.servers[0]")? {
        Transport::Doh(d) => Ok(d),
        t => panic!("{addr}: {t:?}"),
    }
}

#[test]
fn urls_as_xray_reads_them() {
    for (addr, url, tls, host, port) in [
        (
            "https://1.1.1.1/dns-query",
            "https://1.1.1.1/dns-query",
            true,
            "1.1.1.1",
            443,
        ),
        (
            "HTTPS+local://dns.google:8443/q?x=1",
            "https://dns.google:8443/q?x=1",
            true,
            "dns.google",
            8443,
        ),
        (
            "h2c://[::1]:8053",
            "https://[::1]:8053/",
            false,
            "::1",
            8053,
        ),
        (
            "h2c+local://127.0.0.1?dns=1",
            "https://127.0.0.1/?dns=1",
            false,
            "127.0.0.1",
            443,
        ),
    ] {
        let d = doh(addr).unwrap();
        assert_eq!((d.url().as_str(), d.is_tls()), (url, tls), "{addr}");
        assert_eq!((d.host.as_str(), d.port), (host, port), "{addr}");
    }
    assert_eq!(
        *doh("https://a.example/x").unwrap(),
        *doh("https+local://a.example/x").unwrap()
    );
    for bad in [
        "https://",
        "https:///dns-query",
        "https://a b/",
        "https://u@h/",
        "h2c://h:99999/",
    ] {
        let e = doh(bad).unwrap_err();
        assert_eq!(e.path, "dns.servers[0]", "{bad}");
    }
}

fn opt_options(q: &[u8]) -> Vec<(u16, Vec<u8>)> {
    let mut i = 12;
    while q[i] != 0 {
        i += 1 + usize::from(q[i]);
    }
    let opt = i + 5;
    assert_eq!(
        &q[opt..opt + 5],
        &[0, 0, 41, 0x05, 0x46],
        "OPT, UDP size 1350"
    );
    let rdlen = usize::from(u16::from_be_bytes([q[opt + 9], q[opt + 10]]));
    let mut at = opt + 11;
    assert_eq!(q.len(), at + rdlen);
    let mut out = Vec::new();
    while at < q.len() {
        let code = u16::from_be_bytes([q[at], q[at + 1]]);
        let len = usize::from(u16::from_be_bytes([q[at + 2], q[at + 3]]));
        out.push((code, q[at + 4..at + 4 + len].to_vec()));
        at += 4 + len;
    }
    out
}

#[test]
fn queries_carry_edns_padding_after_client_subnet() {
    let q = pad_query(message::query(0, "a.example", A, None).unwrap(), 123).unwrap();
    assert_eq!(&q[..2], &[0, 0], "id 0 (RFC 8484)");
    assert_eq!(q[11], 1, "one additional record");
    assert_eq!(opt_options(&q), vec![(12, vec![0; 123])]);
    assert_eq!(message::question(&q).unwrap(), ("a.example".into(), A));
    let ecs = message::query(0, "a.example", AAAA, Some("203.0.113.9".parse().unwrap()));
    let q = pad_query(ecs.unwrap(), 200).unwrap();
    assert_eq!(q[11], 1);
    let opts = opt_options(&q);
    assert_eq!(opts[0], (8, vec![0, 1, 24, 0, 203, 0, 113]));
    assert_eq!(opts[1], (12, vec![0; 200]));
    // An answer to it still reads.
    let r = message::answer(&q, 0, &["::9".parse().unwrap()], 30).unwrap();
    assert_eq!(message::parse_reply(&r, 0).unwrap().ips.len(), 1);
    assert!(pad_query(vec![0; 5], 100).is_none());
    for _ in 0..50 {
        let n = rand_between(100, 300);
        assert!((100..300).contains(&n));
    }
}

#[test]
fn requests_are_posts_with_xray_headers() {
    let d = doh("https://dns.example:8443/dns-query").unwrap();
    let r = d.request(Bytes::from_static(b"\0\0abc"), &x_padding());
    assert_eq!(r.method(), Method::POST);
    assert_eq!(r.uri().to_string(), "https://dns.example:8443/dns-query");
    let h = |k: &str| r.headers().get(k).unwrap().to_str().unwrap().to_string();
    assert_eq!(h("accept"), DNS_MESSAGE);
    assert_eq!(h("content-type"), DNS_MESSAGE);
    assert_eq!(h("content-length"), "5");
    assert_eq!(h("user-agent"), DEFAULT_USER_AGENT);
    assert_eq!(h("sec-fetch-mode"), "cors");
    assert_eq!(r.body().size_hint().exact(), Some(5));
    let h2c = doh("h2c://127.0.0.1:5353/q").unwrap();
    assert_eq!(
        h2c.request(Bytes::new(), "x").uri().scheme_str(),
        Some("https"),
        "h2c names https, as Xray"
    );
    for _ in 0..50 {
        let p = x_padding();
        assert!((124..=1248).contains(&p.len()), "{}", p.len());
        assert!(p.bytes().all(|c| c.is_ascii_alphanumeric()));
    }
}

/// A body of chunks and errors.
struct Chunks(VecDeque<std::result::Result<Bytes, String>>);

impl Body for Chunks {
    type Data = Bytes;
    type Error = String;
    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<std::result::Result<Frame<Bytes>, String>>> {
        Poll::Ready(self.get_mut().0.pop_front().map(|r| r.map(Frame::data)))
    }
}

fn resp(
    status: u16,
    headers: &[(&str, &str)],
    chunks: Vec<std::result::Result<Vec<u8>, String>>,
) -> Response<Chunks> {
    let mut b = Response::builder().status(status);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(Chunks(
        chunks.into_iter().map(|c| c.map(Bytes::from)).collect(),
    ))
    .unwrap()
}

#[tokio::test]
async fn answers_are_checked() {
    let q = message::query(0, "a.example", A, None).unwrap();
    let a = message::answer(&q, 0, &["10.0.0.1".parse().unwrap()], 60).unwrap();
    let ct = ("content-type", DNS_MESSAGE);
    // Good, in two chunks; with parameters in the type; without a type (as Xray).
    let (x, y) = a.split_at(7);
    let got = read_answer(resp(200, &[ct], vec![Ok(x.to_vec()), Ok(y.to_vec())])).await;
    assert_eq!(got.unwrap(), a);
    let ok = read_answer(resp(
        200,
        &[("content-type", "Application/DNS-Message; q=1")],
        vec![Ok(a.clone())],
    ));
    assert_eq!(ok.await.unwrap(), a);
    assert_eq!(
        read_answer(resp(200, &[], vec![Ok(a.clone())]))
            .await
            .unwrap(),
        a
    );
    let err = |r: Response<Chunks>| async move { read_answer(r).await.unwrap_err().to_string() };
    // Not 200.
    assert!(err(resp(500, &[ct], vec![Ok(a.clone())]))
        .await
        .contains("code 500"));
    assert!(err(resp(204, &[ct], vec![])).await.contains("code 204"));
    // Not a DNS message.
    assert!(err(resp(
        200,
        &[("content-type", "text/html")],
        vec![Ok(b"<html>".to_vec())]
    ))
    .await
    .contains("text/html"));
    // Cut short: a stream error, or fewer bytes than announced.
    let cut = resp(200, &[ct], vec![Ok(x.to_vec()), Err("stream reset".into())]);
    assert!(err(cut).await.contains("stream reset"));
    let len = a.len().to_string();
    let short = resp(200, &[ct, ("content-length", &len)], vec![Ok(x.to_vec())]);
    assert!(err(short).await.contains("shorter"));
    // Too long: announced, or sent.
    let big = resp(200, &[ct, ("content-length", "70000")], vec![]);
    assert!(err(big).await.contains("longer"));
    let many = (0..20).map(|_| Ok(vec![0u8; 4000])).collect();
    assert!(err(resp(200, &[ct], many)).await.contains("longer"));
    // gzip is undone (Go asks for it); other encodings and bad gzip are errors.
    let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut z, &a).unwrap();
    let z = z.finish().unwrap();
    let gz = resp(200, &[ct, ("content-encoding", "gzip")], vec![Ok(z)]);
    assert_eq!(read_answer(gz).await.unwrap(), a);
    let bad = resp(
        200,
        &[ct, ("content-encoding", "gzip")],
        vec![Ok(a.clone())],
    );
    assert!(err(bad).await.contains("gzip"));
    let br = resp(200, &[ct, ("content-encoding", "br")], vec![Ok(a.clone())]);
    assert!(err(br).await.contains("encoding"));
    let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    std::io::Write::write_all(&mut z, &vec![0u8; 100_000]).unwrap();
    let bomb = resp(
        200,
        &[ct, ("content-encoding", "gzip")],
        vec![Ok(z.finish().unwrap())],
    );
    assert!(err(bomb).await.contains("longer"));
    // A truncated DNS message in a good answer: an error of the query, not a panic.
    for cut in 0..a.len() {
        assert!(message::parse_reply(&a[..cut], 0).is_err());
    }
}

/// What an h2c test server saw: method, path, content type, accept, the query.
type Seen = Arc<Mutex<Vec<(Method, String, String, String, Vec<u8>)>>>;

struct H2cServer {
    addr: SocketAddr,
    conns: Arc<AtomicUsize>,
    tasks: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
    seen: Seen,
}

impl H2cServer {
    fn close_all(&self) {
        for t in self.tasks.lock().unwrap().drain(..) {
            t.abort();
        }
    }
}

/// An HTTP/2 (prior knowledge) DoH server answering every A query with 10.0.0.1.
async fn h2c_server() -> H2cServer {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let s = H2cServer {
        addr: l.local_addr().unwrap(),
        conns: Arc::default(),
        tasks: Arc::default(),
        seen: Arc::default(),
    };
    let (conns, tasks, seen) = (s.conns.clone(), s.tasks.clone(), s.seen.clone());
    tokio::spawn(async move {
        while let Ok((c, _)) = l.accept().await {
            conns.fetch_add(1, Ordering::Relaxed);
            let seen = seen.clone();
            let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let seen = seen.clone();
                async move {
                    let (head, body) = req.into_parts();
                    let q = read_body(body, MAX_MESSAGE).await?;
                    let h = |k| {
                        head.headers
                            .get(k)
                            .map_or("", |v: &HeaderValue| v.to_str().unwrap_or(""))
                            .to_string()
                    };
                    seen.lock().unwrap().push((
                        head.method.clone(),
                        head.uri.path().to_string(),
                        h(header::CONTENT_TYPE),
                        h(header::ACCEPT),
                        q.clone(),
                    ));
                    let a = message::answer(&q, 0, &["10.0.0.1".parse().unwrap()], 60);
                    Ok::<_, io::Error>(
                        Response::builder()
                            .header(header::CONTENT_TYPE, DNS_MESSAGE)
                            .body(OneShot(a.map(Bytes::from)))
                            .unwrap(),
                    )
                }
            });
            let t = tokio::spawn(async move {
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(c), svc)
                    .await;
            });
            tasks.lock().unwrap().push(t);
        }
    });
    s
}

#[tokio::test]
async fn one_connection_reused_and_dialed_again() {
    let srv = h2c_server().await;
    let d = doh(&format!("h2c://{}/dns-query", srv.addr)).unwrap();
    let t = Duration::from_secs(5);
    for _ in 0..3 {
        let r = d.query("a.example", A, None, t, None).await.unwrap();
        assert_eq!(r.ips, vec!["10.0.0.1".parse::<IpAddr>().unwrap()]);
    }
    // Concurrent queries share it too.
    let (x, y) = tokio::join!(
        d.query("b.example", A, None, t, None),
        d.query("c.example", A, None, t, None)
    );
    assert!(x.is_ok() && y.is_ok());
    assert_eq!((d.dials(), srv.conns.load(Ordering::Relaxed)), (1, 1));
    {
        let seen = srv.seen.lock().unwrap();
        assert_eq!(seen.len(), 5);
        for (m, path, ct, accept, q) in seen.iter() {
            assert_eq!((m, path.as_str()), (&Method::POST, "/dns-query"));
            assert_eq!((ct.as_str(), accept.as_str()), (DNS_MESSAGE, DNS_MESSAGE));
            let pad = &opt_options(q)[0];
            assert!(pad.0 == 12 && (100..300).contains(&pad.1.len()));
        }
    }
    // The server drops the connection: the next query dials again.
    srv.close_all();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let r = d.query("a.example", A, None, t, None).await.unwrap();
    assert_eq!(r.ips.len(), 1);
    assert_eq!((d.dials(), srv.conns.load(Ordering::Relaxed)), (2, 2));
}

#[tokio::test]
async fn through_the_dns_object() {
    let srv = h2c_server().await;
    let v = serde_json::json!({"servers": [format!("h2c+local://{}/q", srv.addr)],
                               "queryStrategy": "UseIPv4"});
    let diag = crate::config::Diagnostics::default();
    let o = crate::config::reader::Obj::new(&v, "dns", &diag).unwrap();
    let dns = super::super::parse(&o, &crate::app::router::Assets::only(".")).unwrap();
    assert_eq!(
        dns.lookup("x.example").await,
        vec!["10.0.0.1".parse::<IpAddr>().unwrap()]
    );
}

#[tokio::test]
async fn an_untrusted_certificate_is_refused() {
    use crate::transport::tls::{CertSource, CertificateEntry, Usage};
    let g = crate::transport::tls::generate_self_signed(&["127.0.0.1".into()], 1).unwrap();
    let cert = CertSource::Inline {
        cert: g.cert_pem,
        key: Some(g.key_pem),
    };
    let layer = TlsLayer::server(&TlsSettings {
        certificates: vec![Arc::new(
            CertificateEntry::load(cert, Usage::Encipherment, true).unwrap(),
        )],
        alpn: vec!["h2".into()],
        ..TlsSettings::default()
    })
    .unwrap();
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let handshakes = Arc::new(AtomicUsize::new(0));
    let h = handshakes.clone();
    tokio::spawn(async move {
        while let Ok((c, _)) = l.accept().await {
            if layer.accept_tls(Box::new(c)).await.is_ok() {
                h.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    let d = doh(&format!("https://{addr}/dns-query")).unwrap();
    let e = d
        .query("a.example", A, None, Duration::from_secs(5), None)
        .await;
    assert!(e.is_err());
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(handshakes.load(Ordering::Relaxed), 0, "{e:?}");
}

#[tokio::test]
async fn a_silent_server_is_bounded_by_the_timeout() {
    // Accepts and reads, never answers (not even the HTTP/2 preface).
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((c, _)) = l.accept().await {
            held.push(c);
        }
    });
    for url in [format!("h2c://{addr}/"), format!("https://{addr}/")] {
        let d = doh(&url).unwrap();
        let t0 = std::time::Instant::now();
        let e = d
            .query("a.example", A, None, Duration::from_millis(300), None)
            .await;
        assert!(e.is_err(), "{url}");
        assert!(
            t0.elapsed() < Duration::from_secs(2),
            "{url}: {:?}",
            t0.elapsed()
        );
    }
    // Nobody listening: an error, at once.
    let port = {
        let s = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        s.local_addr().unwrap().port()
    };
    let d = doh(&format!("h2c://127.0.0.1:{port}/")).unwrap();
    assert!(d
        .query("a.example", A, None, Duration::from_secs(5), None)
        .await
        .is_err());
}
