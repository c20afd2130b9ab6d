//! `tcpSettings.header` `type: "http"` on hostile bytes: the server reads the request head
//! (8 KiB limit, request line, one of the configured paths) and the client reads past the
//! response head in front of its first bytes. Any bytes, in reads of any size, end in a
//! stream, an error or an answer: never a panic or a wait for more than there is. A refused
//! request is answered 400 or 404 (or not at all, when the client left); one taken gets the
//! configured response head before the first bytes written.
#![no_main]
mod feed;

use ferry::common::{Address, Destination};
use ferry::session::{ConnInfo, Endpoint};
use ferry::transport::http_header::{HttpHeaderLayer, RequestTemplate, ResponseTemplate};
use ferry::transport::{BoxStream, Layer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn drain(mut s: BoxStream, limit: usize) -> usize {
    let mut buf = [0u8; 4096];
    let mut total = 0;
    for _ in 0..limit {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return total,
            Ok(n) => total += n,
        }
    }
    panic!("no end after {limit} reads");
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let (ctl, step, rest) = feed::split(data);
    let limit = rest.len() + 4;
    let layer = HttpHeaderLayer {
        request: RequestTemplate {
            paths: if ctl & 1 != 0 { vec!["/".into(), "/a/b".into()] } else { vec!["/".into()] },
            ..Default::default()
        },
        response: ResponseTemplate::default(),
    };
    feed::runtime().block_on(async {
        let (stream, written) = feed::Feed::boxed(rest, step);
        let mut info = ConnInfo::new(Endpoint::Ip("127.0.0.1:1".parse().unwrap()), Endpoint::Ip("127.0.0.1:2".parse().unwrap()));
        match layer.accept(stream, &mut info).await {
            Ok(mut s) => {
                let p = info.path.clone().expect("a taken request has its path");
                assert!(layer.request.paths.iter().any(|c| **c == *p));
                let got = drain_then_write(&mut s, limit).await;
                assert!(got <= rest.len());
                let w = written.lock().unwrap();
                assert!(w.starts_with(b"HTTP/1.1 200 OK\r\n") && w.ends_with(b"\r\n\r\nx"), "{:?}", String::from_utf8_lossy(&w));
            }
            Err(_) => {
                let w = written.lock().unwrap();
                assert!(w.is_empty() || w.starts_with(b"HTTP/1.1 400 ") || w.starts_with(b"HTTP/1.1 404 "));
            }
        }
        // Client: the response head in front of the first bytes.
        let (stream, written) = feed::Feed::boxed(rest, step);
        let server = Destination::new(Address::Domain("example.com".into()), 80);
        let mut s = layer.connect(stream, &server).await.expect("the client side only wraps");
        s.write_all(b"hello").await.unwrap();
        assert!(written.lock().unwrap().ends_with(b"\r\n\r\nhello"));
        assert!(drain(s, limit).await <= rest.len());
    });
});

async fn drain_then_write(s: &mut BoxStream, limit: usize) -> usize {
    let mut buf = [0u8; 4096];
    let mut total = 0;
    for _ in 0..limit {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => {
                s.write_all(b"x").await.unwrap();
                return total;
            }
            Ok(n) => total += n,
        }
    }
    panic!("no end after {limit} reads");
}
