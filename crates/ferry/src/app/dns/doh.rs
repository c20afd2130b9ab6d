//! DNS over HTTPS (RFC 8484) servers, as Xray v26 sends their queries (`app/dns/nameserver_doh.go`,
//! `dnscommon.go`): each query is an HTTP/2 POST of the wire-format message (id 0) with
//! `Accept` and `Content-Type` `application/dns-message`, Chrome's `fetch` headers and an
//! `X-Padding` header of random base62 text; the message carries an EDNS0 Padding option of
//! 100–299 zero bytes (after the Client Subnet option when there is one). An answer other than
//! 200 is an error; so is one whose `Content-Type` is not a DNS message, or one longer than a
//! DNS message can be (Xray reads any body).
//!
//! One HTTP/2 connection per server, dialed on the first query, shared by the queries that
//! follow, pinged after 45 s without a frame, closed after 300 s without a query (Xray's Go
//! transport: `ReadIdleTimeout`, `IdleConnTimeout`) and dialed again once it is gone. A query
//! that fails on a reused connection before its answer starts is sent once more on a new one.
//!
//! TLS is Ferry's TLS client (rustls): the system roots (`SSL_CERT_FILE` / `SSL_CERT_DIR` replace
//! them), the URL's host as SNI and name verified, ALPN `h2` and `http/1.1` as Chrome offers them.
//! Xray sends uTLS's Chrome ClientHello; Ferry sends rustls's own. `h2c://` speaks HTTP/2 in
//! clear with prior knowledge and, as Xray, names the scheme `https` in its requests. Both
//! default to port 443 and take the path as written (`/` when none).

use std::fmt;
use std::future::poll_fn;
use std::io::{self, Read};
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::{Body, Frame, SizeHint};
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::time::Instant;

use super::message::{self, Reply};
use crate::common::{Address, Destination};
use crate::config::reader::{ConfigError, Result};
use crate::transport::tls::{TlsLayer, TlsSettings};
use crate::transport::upgrade::DEFAULT_USER_AGENT;
use crate::transport::BoxStream;

/// The media type of RFC 8484.
const DNS_MESSAGE: &str = "application/dns-message";
/// The largest DNS message.
const MAX_MESSAGE: usize = 65535;
/// A connection without queries for this long is closed (Go's `IdleConnTimeout` in Xray).
const IDLE: Duration = Duration::from_secs(300);
/// PING after this long without a frame (Xray's `ChromeH2KeepAlivePeriod`).
const KEEPALIVE: Duration = Duration::from_secs(45);
/// Go's HTTP/2 transport windows and header list limit (what Xray's client announces).
const STREAM_WINDOW: u32 = 4 << 20;
const CONN_WINDOW: u32 = 1 << 30;
const MAX_HEADER_LIST: u32 = 10 << 20;
/// Xray's `H2Base62Pad` scales the wanted length so that it is about right after HPACK.
const BASE62_FACTOR: f64 = 1.249_370_277_078_085_7;
const BASE62: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// A request or response body of one piece.
pub struct OneShot(Option<Bytes>);

impl Body for OneShot {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<std::result::Result<Frame<Bytes>, io::Error>>> {
        Poll::Ready(self.get_mut().0.take().map(|b| Ok(Frame::data(b))))
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.0.as_ref().map_or(0, |b| b.len() as u64))
    }
}

type Sender = http2::SendRequest<OneShot>;

/// When the connection was last used, and by how many queries now.
struct Use {
    in_flight: AtomicUsize,
    last: Mutex<Instant>,
}

impl Use {
    fn idle_until(&self) -> Instant {
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) + IDLE
    }

    /// When to look again whether the connection is idle.
    fn wake_at(&self) -> Instant {
        if self.in_flight.load(Ordering::Relaxed) > 0 {
            Instant::now() + IDLE
        } else {
            self.idle_until()
        }
    }

    fn touch(&self) {
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }
}

/// A query in flight on a connection (the connection is not idle while it lives).
struct Busy(Arc<Use>);

impl Busy {
    fn new(u: &Arc<Use>) -> Busy {
        u.in_flight.fetch_add(1, Ordering::Relaxed);
        u.touch();
        Busy(u.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The live connection of a server.
struct Live {
    send: Sender,
    usage: Arc<Use>,
}

/// One DoH server (`https://`, `https+local://`, `h2c://`, `h2c+local://`).
pub struct Doh {
    /// TLS (`https`) or h2c.
    tls: bool,
    /// Host to resolve and, under TLS, the SNI (no brackets).
    host: String,
    port: u16,
    /// `host[:port]` as written in the URL (the request's authority).
    authority: String,
    /// Path and query, at least `/`.
    path: String,
    tls_layer: OnceLock<std::result::Result<TlsLayer, String>>,
    live: tokio::sync::Mutex<Option<Live>>,
    /// Connections dialed (tests).
    dials: AtomicUsize,
}

impl fmt::Debug for Doh {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Doh({})", self.url())
    }
}

impl PartialEq for Doh {
    fn eq(&self, o: &Doh) -> bool {
        (self.tls, &self.host, self.port, &self.authority, &self.path)
            == (o.tls, &o.host, o.port, &o.authority, &o.path)
    }
}

impl Eq for Doh {}

impl Doh {
    /// Reads what follows `scheme://` in a server address (`tls`: an `https` scheme).
    pub(super) fn parse(rest: &str, tls: bool, path: &str) -> Result<Doh> {
        let cut = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(cut);
        if authority.contains('@') {
            return Err(ConfigError::new(
                path,
                format!("{rest:?}: a DoH URL with user info is not supported"),
            ));
        }
        let (host, port) = super::parse_host_port(authority, 443, path)?;
        let tail = tail.split('#').next().unwrap_or("");
        let target = match tail {
            "" => "/".to_string(),
            t if t.starts_with('?') => format!("/{t}"),
            t => t.to_string(),
        };
        if http::uri::PathAndQuery::try_from(target.as_str()).is_err()
            || http::uri::Authority::try_from(authority).is_err()
        {
            return Err(ConfigError::new(
                path,
                format!("{rest:?} is not a DoH URL (host[:port]/path)"),
            ));
        }
        Ok(Doh {
            tls,
            host,
            port,
            authority: authority.to_string(),
            path: target,
            tls_layer: OnceLock::new(),
            live: tokio::sync::Mutex::new(None),
            dials: AtomicUsize::new(0),
        })
    }

    /// The URL the requests go to (`https` also for h2c, as Xray).
    pub fn url(&self) -> String {
        format!("https://{}{}", self.authority, self.path)
    }

    /// Whether the server speaks TLS (`https`) rather than h2c.
    pub fn is_tls(&self) -> bool {
        self.tls
    }

    /// How many connections this server has dialed so far.
    pub fn dials(&self) -> usize {
        self.dials.load(Ordering::Relaxed)
    }

    /// Asks for `name` / `qtype` (with Client Subnet `subnet`), within `timeout`.
    pub(super) async fn query(
        &self,
        name: &str,
        qtype: u16,
        subnet: Option<IpAddr>,
        timeout: Duration,
        via: Option<(Arc<dyn super::Route>, Arc<str>)>,
    ) -> io::Result<Reply> {
        let q = message::query(0, name, qtype, subnet)
            .and_then(|q| pad_query(q, rand_between(100, 300)))
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "bad name"))?;
        let reply = tokio::time::timeout(timeout, self.exchange_via(q, via.as_ref()))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "DoH query timed out"))??;
        message::parse_reply(&reply, 0).map_err(io::Error::other)
    }

    /// Sends one DNS message and returns the server's answer message.
    pub async fn exchange(&self, msg: Vec<u8>) -> io::Result<Vec<u8>> {
        self.exchange_via(msg, None).await
    }

    /// [`Doh::exchange`], a new connection dialed through `via` (a route and an inbound tag)
    /// when one is given.
    async fn exchange_via(
        &self,
        msg: Vec<u8>,
        via: Option<&(Arc<dyn super::Route>, Arc<str>)>,
    ) -> io::Result<Vec<u8>> {
        let msg = Bytes::from(msg);
        for attempt in 0..2 {
            let (mut send, usage, fresh) = self.connection(via).await?;
            let _busy = Busy::new(&usage);
            let sent = async {
                send.ready().await?;
                send.send_request(self.request(msg.clone(), &x_padding()))
                    .await
            }
            .await;
            match sent {
                Ok(resp) => return read_answer(resp).await,
                Err(e) => {
                    self.forget(&usage).await;
                    if fresh || attempt > 0 {
                        return Err(io::Error::other(format!("DoH {}: {e}", self.url())));
                    }
                    tracing::debug!("dns: DoH {}: {e}; again on a new connection", self.url());
                }
            }
        }
        Err(io::Error::other("DoH: no connection"))
    }

    /// The request carrying `msg`, with Xray's headers.
    fn request(&self, msg: Bytes, x_padding: &str) -> Request<OneShot> {
        let mut r = Request::new(OneShot(None));
        *r.method_mut() = Method::POST;
        *r.uri_mut() = self.url().parse().unwrap_or_default();
        let h = r.headers_mut();
        let mut set = |k: &'static str, v: &str| {
            if let Ok(v) = HeaderValue::from_str(v) {
                h.insert(k, v);
            }
        };
        set("accept", DNS_MESSAGE);
        set("content-type", DNS_MESSAGE);
        set("content-length", &msg.len().to_string());
        // Xray's `TryDefaultHeadersWith(…, "fetch")` for Chrome.
        set("user-agent", DEFAULT_USER_AGENT);
        set("sec-ch-ua-mobile", "?0");
        set("sec-ch-ua-platform", "\"Windows\"");
        set("dnt", "1");
        set("accept-language", "en-US,en;q=0.9");
        set("sec-fetch-mode", "cors");
        set("sec-fetch-dest", "empty");
        set("sec-fetch-site", "same-origin");
        set("priority", "u=1, i");
        set("cache-control", "no-cache");
        set("pragma", "no-cache");
        set("x-padding", x_padding);
        // Go's transport asks for gzip (and undoes it) by itself.
        set("accept-encoding", "gzip");
        *r.body_mut() = OneShot(Some(msg));
        r
    }

    /// The live connection, or a new one (`true` when new).
    async fn connection(
        &self,
        via: Option<&(Arc<dyn super::Route>, Arc<str>)>,
    ) -> io::Result<(Sender, Arc<Use>, bool)> {
        let mut live = self.live.lock().await;
        if let Some(l) = live.as_ref() {
            if !l.send.is_closed() {
                return Ok((l.send.clone(), l.usage.clone(), false));
            }
        }
        *live = None;
        let l = self.dial(via).await?;
        let out = (l.send.clone(), l.usage.clone(), true);
        *live = Some(l);
        Ok(out)
    }

    /// Drops the connection `usage` belongs to, if it is still the live one.
    async fn forget(&self, usage: &Arc<Use>) {
        let mut live = self.live.lock().await;
        if live.as_ref().is_some_and(|l| Arc::ptr_eq(&l.usage, usage)) {
            *live = None;
        }
    }

    async fn dial(&self, via: Option<&(Arc<dyn super::Route>, Arc<str>)>) -> io::Result<Live> {
        self.dials.fetch_add(1, Ordering::Relaxed);
        let dest = Destination::new(Address::parse(&self.host), self.port);
        let tcp: BoxStream = match via {
            Some((route, tag)) => route.dial_tcp(tag, &dest).await?,
            None => {
                let tcp = connect(&self.host, self.port).await?;
                let _ = tcp.set_nodelay(true);
                Box::new(tcp)
            }
        };
        let io: BoxStream = if self.tls {
            let layer = self
                .tls_layer
                .get_or_init(|| {
                    TlsLayer::client(&TlsSettings {
                        alpn: vec!["h2".into(), "http/1.1".into()],
                        ..TlsSettings::default()
                    })
                })
                .as_ref()
                .map_err(|e| io::Error::other(format!("DoH TLS: {e}")))?;
            let s = layer.connect_tls(tcp, &dest).await?;
            if let Some(p) = s.connection().alpn_protocol() {
                if p != b"h2" {
                    return Err(io::Error::other(format!(
                        "DoH {}: the server chose {} instead of h2",
                        self.url(),
                        String::from_utf8_lossy(p)
                    )));
                }
            }
            Box::new(s)
        } else {
            tcp
        };
        let (send, conn) = http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .initial_stream_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONN_WINDOW)
            .max_header_list_size(MAX_HEADER_LIST)
            .keep_alive_interval(KEEPALIVE)
            .keep_alive_while_idle(true)
            .handshake::<_, OneShot>(TokioIo::new(io))
            .await
            .map_err(|e| io::Error::other(format!("DoH {}: {e}", self.url())))?;
        let usage = Arc::new(Use {
            in_flight: AtomicUsize::new(0),
            last: Mutex::new(Instant::now()),
        });
        let u = usage.clone();
        let url = self.url();
        tokio::spawn(async move {
            let mut conn = std::pin::pin!(conn);
            loop {
                tokio::select! {
                    r = conn.as_mut() => {
                        if let Err(e) = r {
                            tracing::debug!("dns: DoH {url}: connection ended: {e}");
                        }
                        return;
                    }
                    _ = tokio::time::sleep_until(u.wake_at()) => {
                        if u.in_flight.load(Ordering::Relaxed) == 0
                            && u.idle_until() <= Instant::now()
                        {
                            tracing::debug!("dns: DoH {url}: idle connection closed");
                            return;
                        }
                    }
                }
            }
        });
        tracing::debug!("dns: DoH {}: connected", self.url());
        Ok(Live { send, usage })
    }
}

/// A TCP connection to `host` (a name is resolved by the system), trying its addresses in turn.
async fn connect(host: &str, port: u16) -> io::Result<tokio::net::TcpStream> {
    let addrs: Vec<std::net::SocketAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![(ip, port).into()],
        Err(_) => tokio::net::lookup_host((host, port)).await?.collect(),
    };
    let mut last = io::Error::other(format!("{host}: no address"));
    for a in addrs {
        match tokio::net::TcpStream::connect(a).await {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// A random number in `lo..hi`.
fn rand_between(lo: usize, hi: usize) -> usize {
    let mut b = [0u8; 4];
    crate::common::rand::fill(&mut b);
    lo + (u32::from_ne_bytes(b) as usize) % (hi - lo)
}

/// Xray's `X-Padding` value: base62 text of 100–999 characters, scaled by `BASE62_FACTOR`.
fn x_padding() -> String {
    let len = (rand_between(100, 1000) as f64 * BASE62_FACTOR) as usize;
    let mut b = vec![0u8; len];
    crate::common::rand::fill(&mut b);
    b.iter()
        .map(|x| BASE62[usize::from(*x) % BASE62.len()] as char)
        .collect()
}

/// `q`, a query of [`message::query`], with an EDNS0 Padding option (RFC 7830) of `n` zero
/// bytes: in a new OPT record (UDP size 1350), or after the Client Subnet option of the OPT
/// record `q` ends with. `None` when `q` is not shaped so.
fn pad_query(mut q: Vec<u8>, n: usize) -> Option<Vec<u8>> {
    let n16 = u16::try_from(n).ok()?;
    let arcount = u16::from_be_bytes([*q.get(10)?, *q.get(11)?]);
    let mut option = Vec::with_capacity(4 + n);
    option.extend_from_slice(&12u16.to_be_bytes());
    option.extend_from_slice(&n16.to_be_bytes());
    option.resize(4 + n, 0);
    match arcount {
        0 => {
            q.push(0); // root
            q.extend_from_slice(&41u16.to_be_bytes()); // OPT
            q.extend_from_slice(&1350u16.to_be_bytes());
            q.extend_from_slice(&[0, 0, 0, 0]);
            q.extend_from_slice(&(4 + n16).to_be_bytes());
            q[11] = 1;
        }
        1 => {
            // Question name (uncompressed labels), type and class, then the OPT record.
            let mut i = 12;
            while *q.get(i)? != 0 {
                i += 1 + usize::from(q[i]);
            }
            let opt = i + 5;
            if q.get(opt..opt + 3)? != [0, 0, 41] {
                return None;
            }
            let rdlen = u16::from_be_bytes([*q.get(opt + 9)?, *q.get(opt + 10)?]);
            if q.len() != opt + 11 + usize::from(rdlen) {
                return None;
            }
            let rdlen = rdlen.checked_add(4 + n16)?;
            q[opt + 9..opt + 11].copy_from_slice(&rdlen.to_be_bytes());
        }
        _ => return None,
    }
    q.extend_from_slice(&option);
    Some(q)
}

/// The DNS message of an answer: status 200, a DNS message or no `Content-Type`, at most
/// [`MAX_MESSAGE`] bytes (after undoing gzip).
async fn read_answer<B>(resp: Response<B>) -> io::Result<Vec<u8>>
where
    B: Body<Data = Bytes>,
    B::Error: fmt::Display,
{
    let (head, body) = resp.into_parts();
    if head.status != StatusCode::OK {
        return Err(io::Error::other(format!(
            "DoH server returned code {}",
            head.status.as_u16()
        )));
    }
    if let Some(ct) = head.headers.get(header::CONTENT_TYPE) {
        let ct = ct.to_str().unwrap_or("");
        let media = ct.split(';').next().unwrap_or("").trim();
        if !media.eq_ignore_ascii_case(DNS_MESSAGE) {
            return Err(io::Error::other(format!(
                "DoH server answered {ct:?}, not {DNS_MESSAGE}"
            )));
        }
    }
    let gzip = match head.headers.get(header::CONTENT_ENCODING) {
        None => false,
        Some(e) if e.as_bytes().eq_ignore_ascii_case(b"identity") => false,
        Some(e) if e.as_bytes().eq_ignore_ascii_case(b"gzip") => true,
        Some(e) => {
            return Err(io::Error::other(format!(
                "DoH server answered in encoding {e:?}"
            )))
        }
    };
    let declared = head
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_MESSAGE as u64) {
        return Err(too_long());
    }
    let raw = read_body(body, MAX_MESSAGE).await?;
    if declared.is_some_and(|n| n != raw.len() as u64) {
        return Err(io::Error::other(
            "DoH answer is shorter than its Content-Length",
        ));
    }
    if !gzip {
        return Ok(raw);
    }
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(&raw[..])
        .take(MAX_MESSAGE as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| io::Error::other(format!("DoH answer: bad gzip: {e}")))?;
    if out.len() > MAX_MESSAGE {
        return Err(too_long());
    }
    Ok(out)
}

fn too_long() -> io::Error {
    io::Error::other("DoH answer is longer than a DNS message")
}

/// The body's bytes, at most `limit` of them (more is an error).
async fn read_body<B>(body: B, limit: usize) -> io::Result<Vec<u8>>
where
    B: Body<Data = Bytes>,
    B::Error: fmt::Display,
{
    let mut body = std::pin::pin!(body);
    let mut out = Vec::new();
    while let Some(f) = poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
        let f = f.map_err(|e| io::Error::other(format!("DoH answer: {e}")))?;
        if let Ok(d) = f.into_data() {
            if out.len() + d.len() > limit {
                return Err(too_long());
            }
            out.extend_from_slice(&d);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
