//! `tcpSettings.header` `type: "http"`: raw TCP dressed as one HTTP exchange, as Xray's
//! `transport/internet/headers/http` does it. The client's first write goes out behind a
//! request head (method, one of the paths, each header with one of its values), its first
//! read skips the response head; the server reads the request head first (its path must be
//! one of the configured ones: otherwise 404, a head over 8 KiB or not HTTP: 400) and puts the
//! response head (with a Date unless configured) in front of its first write.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use async_trait::async_trait;
use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::{poll_write_all, BoxStream, Layer, Stream};
use crate::common::Destination;
use crate::proxy::http::codec;
use crate::session::ConnInfo;

/// Xray's limit on the head.
const MAX_HEAD: usize = 8192;

/// One header with the values a connection picks from.
pub type HeaderValues = (String, Vec<String>);

/// `header.request`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestTemplate {
    pub version: String,
    pub method: String,
    pub paths: Vec<String>,
    pub headers: Vec<HeaderValues>,
}

/// `header.response`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResponseTemplate {
    pub version: String,
    pub status: String,
    pub reason: String,
    pub headers: Vec<HeaderValues>,
}

/// Xray's defaults for a request without `headers`.
pub fn default_request_headers() -> Vec<HeaderValues> {
    let h = |n: &str, v: &[&str]| (n.to_string(), v.iter().map(|s| s.to_string()).collect());
    vec![
        h("Host", &["www.baidu.com", "www.bing.com"]),
        h("User-Agent", &[super::upgrade::DEFAULT_USER_AGENT]),
        h(
            "Sec-CH-UA",
            &["\"Chromium\";v=\"138\", \"Google Chrome\";v=\"138\", \"Not?A_Brand\";v=\"99\""],
        ),
        h("Sec-CH-UA-Mobile", &["?0"]),
        h("Sec-CH-UA-Platform", &["Windows"]),
        h("Sec-Fetch-Mode", &["no-cors", "cors", "same-origin"]),
        h("Sec-Fetch-Dest", &["empty"]),
        h("Sec-Fetch-Site", &["none"]),
        h("Sec-Fetch-User", &["?1"]),
        h("Accept-Encoding", &["gzip, deflate"]),
        h("Connection", &["keep-alive"]),
        h("Pragma", &["no-cache"]),
    ]
}

/// Xray's defaults for a response without `headers`.
pub fn default_response_headers() -> Vec<HeaderValues> {
    let h = |n: &str, v: &[&str]| (n.to_string(), v.iter().map(|s| s.to_string()).collect());
    vec![
        h("Content-Type", &["application/octet-stream", "video/mpeg"]),
        h("Transfer-Encoding", &["chunked"]),
        h("Connection", &["keep-alive"]),
        h("Pragma", &["no-cache"]),
        h("Cache-Control", &["private", "no-cache"]),
    ]
}

impl Default for RequestTemplate {
    fn default() -> Self {
        RequestTemplate {
            version: "1.1".into(),
            method: "GET".into(),
            paths: vec!["/".into()],
            headers: default_request_headers(),
        }
    }
}

impl Default for ResponseTemplate {
    fn default() -> Self {
        ResponseTemplate {
            version: "1.1".into(),
            status: "200".into(),
            reason: "OK".into(),
            headers: default_response_headers(),
        }
    }
}

fn pick(v: &[String]) -> &str {
    match v.len() {
        0 => "",
        1 => &v[0],
        n => {
            let mut b = [0u8; 4];
            crate::common::rand::fill(&mut b);
            &v[u32::from_le_bytes(b) as usize % n]
        }
    }
}

fn push_headers(out: &mut String, headers: &[HeaderValues]) {
    for (k, v) in headers {
        out.push_str(k);
        out.push_str(": ");
        out.push_str(pick(v));
        out.push_str("\r\n");
    }
}

impl RequestTemplate {
    pub fn render(&self) -> Vec<u8> {
        let mut s = format!(
            "{} {} HTTP/{}\r\n",
            self.method,
            pick(&self.paths),
            self.version
        );
        push_headers(&mut s, &self.headers);
        s.push_str("\r\n");
        s.into_bytes()
    }
}

impl ResponseTemplate {
    pub fn render(&self) -> Vec<u8> {
        let mut s = format!("HTTP/{} {} {}\r\n", self.version, self.status, self.reason);
        push_headers(&mut s, &self.headers);
        if !self
            .headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("date"))
        {
            s.push_str(&format!(
                "Date: {}\r\n",
                http_date(std::time::SystemTime::now())
            ));
        }
        s.push_str("\r\n");
        s.into_bytes()
    }
}

/// An IMF-fixdate (`Mon, 02 Jan 2006 15:04:05 GMT`).
pub fn http_date(t: std::time::SystemTime) -> String {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = (secs / 86400) as i64;
    let (h, m, s) = (secs % 86400 / 3600, secs % 3600 / 60, secs % 60);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(mo <= 2);
    const WD: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MON: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{}, {d:02} {} {y} {h:02}:{m:02}:{s:02} GMT",
        WD[days.rem_euclid(7) as usize],
        MON[(mo - 1) as usize]
    )
}

const RESP_400: &[u8] = b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\nCache-Control: private\r\nContent-Length: 0\r\n\r\n";
const RESP_404: &[u8] = b"HTTP/1.1 404 Not Found\r\nConnection: close\r\nCache-Control: private\r\nContent-Length: 0\r\n\r\n";

/// The HTTP disguise of one inbound or outbound.
#[derive(Debug)]
pub struct HttpHeaderLayer {
    pub request: RequestTemplate,
    pub response: ResponseTemplate,
}

#[async_trait]
impl Layer for HttpHeaderLayer {
    async fn accept(&self, stream: BoxStream, info: &mut ConnInfo) -> io::Result<BoxStream> {
        let mut r = crate::proxy::head::HeadReader::new(stream, MAX_HEAD + 1);
        let mut scan = codec::head_scanner();
        let found = r
            .read_until(|b| match scan(b) {
                Ok(None) if b.len() > MAX_HEAD => Err(codec::Error::TooLarge),
                other => other,
            })
            .await;
        let bad =
            |why: String| io::Error::new(io::ErrorKind::InvalidData, format!("HTTP header: {why}"));
        let n = match found {
            Ok(Ok(n)) => n,
            Ok(Err(e)) => {
                let _ = r.write_all(RESP_400).await;
                return Err(bad(e.to_string()));
            }
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                let _ = r.write_all(RESP_400).await;
                return Err(bad(e.to_string()));
            }
            Err(e) => return Err(e),
        };
        let head = r.buf.split_to(n);
        let req = match codec::parse_request(&head) {
            Ok(req) => req,
            Err(e) => {
                let _ = r.write_all(RESP_400).await;
                return Err(bad(e.to_string()));
            }
        };
        let path = req.target.split('?').next().unwrap_or("");
        let path = match path.split_once("://") {
            Some((_, rest)) => rest.find('/').map_or("/", |i| &rest[i..]),
            None => path,
        };
        if !self.request.paths.iter().any(|p| p == path) {
            let why = format!("path {:?} is not one of the configured", path);
            let _ = r.write_all(RESP_404).await;
            return Err(bad(why));
        }
        info.path = Some(path.into());
        drop(req);
        Ok(Box::new(Dressed::new(
            r.into_stream(),
            Some(self.response.render()),
            None,
        )))
    }

    async fn connect(&self, stream: BoxStream, _server: &Destination) -> io::Result<BoxStream> {
        // Xray's client reads past the response head without looking at it.
        Ok(Box::new(Dressed::new(
            stream,
            Some(self.request.render()),
            Some(|_| Ok(())),
        )))
    }
}

/// Checks a head read off the wire.
pub(crate) type CheckHead = fn(&[u8]) -> io::Result<()>;

/// A stream with a head to send before its first write and (a client) one to read and check
/// before its first read: the HTTP header disguise, and HTTPUpgrade's late 101 answer.
pub(crate) struct Dressed {
    inner: BoxStream,
    out_head: Option<Vec<u8>>,
    out_pos: usize,
    /// The head read so far; `None` once read and checked.
    in_head: Option<Vec<u8>>,
    check: CheckHead,
    rest: Bytes,
}

impl Dressed {
    /// `out_head` goes before the first write; `check`, when given, takes the head read
    /// before the first read.
    pub(crate) fn new(
        inner: BoxStream,
        out_head: Option<Vec<u8>>,
        check: Option<CheckHead>,
    ) -> Self {
        Dressed {
            inner,
            out_head,
            out_pos: 0,
            in_head: check.map(|_| Vec::new()),
            check: check.unwrap_or(|_| Ok(())),
            rest: Bytes::new(),
        }
    }
}

impl AsyncRead for Dressed {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        while let Some(head) = &mut me.in_head {
            let start = head.len();
            if start >= MAX_HEAD {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "HTTP header: response head too long",
                )));
            }
            head.resize(MAX_HEAD, 0);
            let mut rb = ReadBuf::new(&mut head[start..]);
            let r = Pin::new(&mut *me.inner).poll_read(cx, &mut rb);
            let n = rb.filled().len();
            head.truncate(start + n);
            ready!(r)?;
            if n == 0 {
                // The end before the head: clean unless a head was required.
                if (me.check)(&[]).is_err() {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "closed before the answer's head",
                    )));
                }
                return Poll::Ready(Ok(()));
            }
            if let Some(end) = codec::head_len(head, start)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?
            {
                (me.check)(&head[..end])?;
                me.rest = Bytes::copy_from_slice(&head[end..]);
                me.in_head = None;
            }
        }
        if !me.rest.is_empty() {
            let n = me.rest.len().min(out.remaining());
            out.put_slice(&me.rest[..n]);
            me.rest.advance(n);
            if me.rest.is_empty() {
                me.rest = Bytes::new();
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut *me.inner).poll_read(cx, out)
    }
}

impl Dressed {
    fn poll_head(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(h) = &self.out_head {
            ready!(poll_write_all(&mut *self.inner, cx, h, &mut self.out_pos))?;
            self.out_head = None;
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Dressed {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        ready!(me.poll_head(cx))?;
        Pin::new(&mut *me.inner).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if me.out_pos > 0 {
            ready!(me.poll_head(cx))?;
        }
        Pin::new(&mut *me.inner).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        ready!(me.poll_head(cx))?;
        Pin::new(&mut *me.inner).poll_shutdown(cx)
    }
}

impl Stream for Dressed {
    fn socket(&self) -> Option<super::RawSocket<'_>> {
        self.inner.socket()
    }
    /// Direct once both heads are done with.
    fn take_read_direct(&mut self) -> Option<Bytes> {
        if self.in_head.is_some() {
            return None;
        }
        let under = self.inner.take_read_direct()?;
        let mut joined = std::mem::take(&mut self.rest).to_vec();
        joined.extend_from_slice(&under);
        Some(joined.into())
    }
    fn write_direct(&self) -> bool {
        self.out_head.is_none() && self.inner.write_direct()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::Endpoint;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn dates_as_go_formats_them() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_136_214_245);
        assert_eq!(http_date(t), "Mon, 02 Jan 2006 15:04:05 GMT");
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_709_251_199);
        assert_eq!(http_date(t), "Thu, 29 Feb 2024 23:59:59 GMT");
    }

    #[tokio::test]
    async fn heads_both_ways_and_a_wrong_path_gets_404() {
        let layer = std::sync::Arc::new(HttpHeaderLayer {
            request: RequestTemplate {
                paths: vec!["/a".into(), "/b".into()],
                ..Default::default()
            },
            response: ResponseTemplate::default(),
        });
        let (a, b) = tokio::io::duplex(64 * 1024);
        let l2 = layer.clone();
        let server = tokio::spawn(async move {
            let mut info = ConnInfo::new(
                Endpoint::Ip("127.0.0.1:1".parse().unwrap()),
                Endpoint::Ip("127.0.0.1:2".parse().unwrap()),
            );
            let mut s = l2.accept(Box::new(b), &mut info).await.unwrap();
            let mut got = [0u8; 5];
            s.read_exact(&mut got).await.unwrap();
            s.write_all(b"world").await.unwrap();
            got
        });
        let dest = Destination::new(crate::common::Address::parse("x"), 80);
        let mut c = layer.connect(Box::new(a), &dest).await.unwrap();
        c.write_all(b"hello").await.unwrap();
        let mut back = [0u8; 5];
        c.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"world");
        assert_eq!(&server.await.unwrap(), b"hello");

        let (mut a, b) = tokio::io::duplex(64 * 1024);
        let mut info = ConnInfo::new(
            Endpoint::Ip("127.0.0.1:1".parse().unwrap()),
            Endpoint::Ip("127.0.0.1:2".parse().unwrap()),
        );
        a.write_all(b"GET /c HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        assert!(layer.accept(Box::new(b), &mut info).await.is_err());
        let mut resp = vec![0u8; RESP_404.len()];
        a.read_exact(&mut resp).await.unwrap();
        assert_eq!(resp, RESP_404);
    }
}
