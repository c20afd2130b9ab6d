//! The masquerade as a reverse proxy (`masquerade.type: "proxy"`), as Xray's Go handler does
//! it: each HTTP/3 request goes to `url` over HTTP/1.1 (TLS for `https://`), its path joined
//! under the URL's, with the client's Host unless `rewriteHost`; hop-by-hop headers dropped
//! both ways; the answer streamed back.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use hyper::body::{Body, Frame};

use super::h3conn::Stream;
use crate::common::{Address, Destination};
use crate::transport::Layer;

/// A request body the client sent (read whole first, up to [`MAX_BODY`]).
struct Once(Option<Bytes>);

impl Body for Once {
    type Data = Bytes;
    type Error = std::convert::Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Poll::Ready(
            self.0
                .take()
                .filter(|b| !b.is_empty())
                .map(|b| Ok(Frame::data(b))),
        )
    }
}

/// The largest request body forwarded.
const MAX_BODY: usize = 128 << 10;

const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

fn h3e(e: h3::error::StreamError) -> io::Error {
    io::Error::other(e.to_string())
}

/// Go's `singleJoiningSlash` of the URL's path and the request's.
fn join(base: &str, path: &str) -> String {
    match (base.ends_with('/'), path.starts_with('/')) {
        (true, true) => format!("{base}{}", &path[1..]),
        (false, false) => format!("{base}/{path}"),
        _ => format!("{base}{path}"),
    }
}

/// The upstream request's path and query (the URL's query and the request's joined by `&`).
fn target(url: &http::Uri, req: &http::Uri) -> String {
    let mut p = join(url.path(), req.path());
    match (url.query(), req.query()) {
        (Some(a), Some(b)) => p = format!("{p}?{a}&{b}"),
        (Some(q), None) | (None, Some(q)) => p = format!("{p}?{q}"),
        (None, None) => {}
    }
    p
}

pub async fn forward(
    url: &str,
    rewrite_host: bool,
    tls: Option<&crate::transport::tls::TlsLayer>,
    req: &http::Request<()>,
    stream: &mut Stream,
) -> io::Result<()> {
    let u: http::Uri = url.parse().map_err(io::Error::other)?;
    let auth = u
        .authority()
        .ok_or_else(|| io::Error::other("no host in the URL"))?;
    let https = u.scheme_str() == Some("https");
    let port = auth.port_u16().unwrap_or(if https { 443 } else { 80 });
    let dest = Destination::new(Address::parse(auth.host().trim_matches(['[', ']'])), port);
    // The client's request body, whole.
    let mut body = Vec::new();
    while let Some(mut chunk) = stream.recv_data().await.map_err(h3e)? {
        while chunk.has_remaining() {
            let c = chunk.chunk();
            if body.len() + c.len() > MAX_BODY {
                return Err(io::Error::other("request body over 128 KiB"));
            }
            body.extend_from_slice(c);
            let n = c.len();
            chunk.advance(n);
        }
    }
    let tcp = crate::transport::tcp::dial(&dest, &Default::default()).await?;
    let io: crate::transport::BoxStream = match (https, tls) {
        (true, Some(t)) => t.connect(Box::new(tcp), &dest).await?,
        (true, None) => return Err(io::Error::other("no TLS client for an https URL")),
        (false, _) => Box::new(tcp),
    };
    let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io))
        .await
        .map_err(io::Error::other)?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let host = match rewrite_host {
        true => auth.as_str().to_string(),
        false => req
            .uri()
            .authority()
            .map(|a| a.as_str().to_string())
            .or_else(|| {
                req.headers()
                    .get(http::header::HOST)
                    .and_then(|h| h.to_str().ok())
                    .map(str::to_string)
            })
            .unwrap_or_else(|| auth.as_str().to_string()),
    };
    let mut out = http::Request::builder()
        .method(req.method())
        .uri(target(&u, req.uri()))
        .header(http::header::HOST, host);
    for (k, v) in req.headers() {
        if k != http::header::HOST && !HOP_BY_HOP.contains(&k.as_str()) {
            out = out.header(k, v);
        }
    }
    let out = out
        .body(Once(Some(Bytes::from(body))))
        .map_err(io::Error::other)?;
    let resp = send.send_request(out).await.map_err(io::Error::other)?;
    let (parts, mut incoming) = resp.into_parts();
    let mut back = http::Response::builder().status(parts.status);
    for (k, v) in &parts.headers {
        if !HOP_BY_HOP.contains(&k.as_str()) {
            back = back.header(k, v);
        }
    }
    stream
        .send_response(back.body(()).map_err(io::Error::other)?)
        .await
        .map_err(h3e)?;
    while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut incoming).poll_frame(cx)).await
    {
        let frame = frame.map_err(io::Error::other)?;
        if let Ok(data) = frame.into_data() {
            if !data.is_empty() {
                stream.send_data(data).await.map_err(h3e)?;
            }
        }
    }
    stream.finish().await.map_err(h3e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_queries_join_as_go_joins_them() {
        let u: http::Uri = "https://example.com/base/?k=1".parse().unwrap();
        let r: http::Uri = "/x/y?z=2".parse().unwrap();
        assert_eq!(target(&u, &r), "/base/x/y?k=1&z=2");
        let u: http::Uri = "http://example.com".parse().unwrap();
        assert_eq!(target(&u, &"/".parse().unwrap()), "/");
        assert_eq!(join("/a", "b"), "/a/b");
    }
}
