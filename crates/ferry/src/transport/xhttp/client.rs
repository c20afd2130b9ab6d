//! The XHTTP client: each tunnel is a GET (downlink) plus POSTs or one streaming POST
//! (uplink), or one stream-one POST, sent over HTTP/2 connections shared under XMUX's
//! limits, or over HTTP/1.1 connections of their own (Xray's `dialer.go`).

use std::future::{poll_fn, Future};
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::obfs::{self, DataPlacement};
use super::pipe::{pipe, BodyReader, PipeBody, PipeWriter};
use super::{Mode, Placement, XhttpSettings};
use crate::common::Destination;
use crate::transport::grpc::{CONN_WINDOW, STREAM_WINDOW};
use crate::transport::upgrade::DEFAULT_USER_AGENT;
use crate::transport::{BoxStream, Dialer, PacketConn, Stream};

/// Bytes of uplink a stream-up/stream-one tunnel buffers before its writes wait.
const UP_BUFFER: usize = 256 * 1024;
/// Chrome's HTTP/2 PING period, Xray's default `hKeepAlivePeriod`.
const CHROME_KEEPALIVE: Duration = Duration::from_secs(45);
/// Tunnels one HTTP/2 connection carries at most, whatever XMUX allows.
const TUNNELS_PER_CONN: usize = 40;
/// Packet-up POSTs in flight per tunnel at most (each `scMaxEachPostBytes` at most).
const POSTS_IN_FLIGHT: usize = 4;

/// The HTTP version of a leg, as Xray decides it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    H1,
    H2,
}

/// A request body.
pub enum ClientBody {
    Empty,
    Full(Option<Bytes>),
    Pipe(PipeBody),
}

impl Body for ClientBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        match self.get_mut() {
            ClientBody::Empty => Poll::Ready(None),
            ClientBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            ClientBody::Pipe(p) => Pin::new(p).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ClientBody::Empty => true,
            ClientBody::Full(b) => b.is_none(),
            ClientBody::Pipe(p) => p.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ClientBody::Empty => SizeHint::with_exact(0),
            ClientBody::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            ClientBody::Pipe(_) => SizeHint::default(),
        }
    }
}

type H2Send = hyper::client::conn::http2::SendRequest<ClientBody>;
type ResponseFuture = Pin<Box<dyn Future<Output = io::Result<Response<Incoming>>> + Send>>;

/// An HTTP/1.1 connection of one request, closed when its tunnel is dropped (an idle
/// connection whose response body nobody reads would otherwise stay open, and so would the
/// server's session).
pub struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn hyper_err(e: hyper::Error) -> io::Error {
    io::Error::other(format!("XHTTP: {e}"))
}

/// One HTTP/2 connection of an XMUX pool, dialed on first use.
struct Entry {
    conn: tokio::sync::OnceCell<H2Send>,
    /// Tunnels open on it.
    open: AtomicUsize,
    /// Requests it may still carry.
    left_requests: AtomicI64,
    /// Tunnels it may still be picked for (-1: no limit); changed under the pool's lock.
    left_usage: AtomicI64,
    unreusable_at: Option<Instant>,
    failed: std::sync::atomic::AtomicBool,
}

impl Entry {
    fn closed(&self) -> bool {
        self.failed.load(Ordering::Relaxed) || self.conn.get().is_some_and(|c| c.is_closed())
    }

    fn usable(&self) -> bool {
        !self.closed()
            && self.left_usage.load(Ordering::Relaxed) != 0
            && self.left_requests.load(Ordering::Relaxed) > 0
            && self.unreusable_at.is_none_or(|t| Instant::now() < t)
    }
}

/// XMUX: the HTTP/2 connections of one leg to one server.
struct Pool {
    entries: Mutex<Vec<Arc<Entry>>>,
    concurrency: usize,
    connections: usize,
}

/// A tunnel's hold on an entry: counted open until dropped.
struct Usage(Arc<Entry>);

impl Drop for Usage {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One leg's client: how to reach the server and what to send.
pub struct LegClient {
    /// The socket and the layers under HTTP (TLS or REALITY).
    pub below: Arc<dyn Dialer>,
    pub settings: Arc<XhttpSettings>,
    pub version: Version,
    pub https: bool,
    /// The Host / :authority (empty: the server's address).
    pub host: String,
    pool: Pool,
}

impl LegClient {
    pub fn new(
        below: Arc<dyn Dialer>,
        settings: Arc<XhttpSettings>,
        version: Version,
        https: bool,
        host: String,
    ) -> Self {
        LegClient {
            below,
            pool: Pool {
                entries: Mutex::default(),
                concurrency: settings.xmux.max_concurrency.rand() as usize,
                connections: settings.xmux.max_connections.rand() as usize,
            },
            settings,
            version,
            https,
            host,
        }
    }

    fn authority(&self, server: &Destination) -> String {
        if self.host.is_empty() {
            match &server.addr {
                crate::common::Address::Ip(std::net::IpAddr::V6(ip)) => {
                    format!("[{ip}]:{}", server.port)
                }
                a => a.to_string(),
            }
        } else {
            self.host.clone()
        }
    }

    /// An XMUX entry for a new tunnel (Xray's `GetXmuxClient`).
    fn entry(&self) -> Arc<Entry> {
        let pool = &self.pool;
        let mut entries = pool.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.retain(|e| e.usable());
        let x = &self.settings.xmux;
        let new = || {
            let reuse = x.c_max_reuse_times.rand() as i64;
            let requests = x.h_max_request_times.rand() as i64;
            let secs = x.h_max_reusable_secs.rand() as u64;
            Arc::new(Entry {
                conn: tokio::sync::OnceCell::new(),
                open: AtomicUsize::new(0),
                left_requests: AtomicI64::new(if requests > 0 { requests } else { i64::MAX }),
                left_usage: AtomicI64::new(if reuse > 0 { reuse - 1 } else { -1 }),
                unreusable_at: (secs > 0).then(|| Instant::now() + Duration::from_secs(secs)),
                failed: Default::default(),
            })
        };
        if entries.is_empty() || (pool.connections > 0 && entries.len() < pool.connections) {
            let e = new();
            entries.push(e.clone());
            return e;
        }
        // Past `maxConcurrency`, or near the streams an HTTP/2 server allows at once (Go's
        // 250, hyper's 200; a tunnel holds a GET and up to four POSTs), a connection
        // takes no more tunnels: Go's client opens another connection there too, where
        // waiting for a free stream would stall the tunnel.
        let free: Vec<&Arc<Entry>> = entries
            .iter()
            .filter(|e| {
                let open = e.open.load(Ordering::Relaxed);
                (pool.concurrency == 0 || open < pool.concurrency) && open < TUNNELS_PER_CONN
            })
            .collect();
        if free.is_empty() {
            let e = new();
            entries.push(e.clone());
            return e;
        }
        let e = free[super::Range::new(0, free.len() as u32 - 1).rand() as usize].clone();
        if e.left_usage.load(Ordering::Relaxed) > 0 {
            e.left_usage.fetch_sub(1, Ordering::Relaxed);
        }
        e
    }

    /// The HTTP/2 connection of `entry`, dialed if it is not yet.
    async fn h2(&self, entry: &Entry, server: &Destination) -> io::Result<H2Send> {
        let r = entry
            .conn
            .get_or_try_init(|| async {
                let s = self.below.dial_tcp(server).await?;
                let keepalive = match self.settings.xmux.h_keep_alive_period {
                    0 => Some(CHROME_KEEPALIVE),
                    p if p < 0 => None,
                    p => Some(Duration::from_secs(p as u64)),
                };
                let (send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
                    .timer(TokioTimer::new())
                    .initial_stream_window_size(STREAM_WINDOW)
                    .initial_connection_window_size(CONN_WINDOW)
                    .keep_alive_interval(keepalive)
                    .keep_alive_while_idle(true)
                    .handshake(TokioIo::new(s))
                    .await
                    .map_err(hyper_err)?;
                tokio::spawn(async move {
                    if let Err(e) = conn.await {
                        tracing::debug!("XHTTP: HTTP/2 connection ended: {e}");
                    }
                });
                Ok::<_, io::Error>(send)
            })
            .await;
        match r {
            Ok(s) => Ok(s.clone()),
            Err(e) => {
                entry.failed.store(true, Ordering::Relaxed);
                Err(e)
            }
        }
    }

    /// The request head of a leg: URL with the session (and seq) placed, padding, headers, and
    /// for packet-up with `uplinkDataPlacement` header or cookie the packet's `data` (Xray's
    /// order: data, padding, session, seq).
    fn request(
        &self,
        server: &Destination,
        method: Method,
        session: &str,
        seq: Option<u64>,
        streaming_up: bool,
        data: Option<&[u8]>,
    ) -> io::Result<http::request::Builder> {
        let s = &self.settings;
        let authority = self.authority(server);
        let scheme = if self.https { "https" } else { "http" };
        let mut path = s.path.clone();
        let mut query: Vec<(String, String)> = Vec::new();
        let mut sort_query = false;
        let mut extra: Vec<(String, String)> = Vec::new();
        let mut cookies: Vec<String> = Vec::new();
        if let Some(data) = data {
            let chunks = obfs::data_chunks(data, s.chunk_size);
            for (i, c) in chunks.into_iter().enumerate() {
                match s.data_placement {
                    DataPlacement::Cookie => cookies.push(format!("{}_{i}={c}", s.data_key)),
                    _ => extra.push((format!("{}-{i}", s.data_key), c)),
                }
            }
        }
        // The padding's URL is the request's before the session and seq are placed.
        match obfs::for_request(s, &format!("{scheme}://{authority}{path}")) {
            obfs::RequestPadding::Header(k, v) => extra.push((k, v)),
            obfs::RequestPadding::Cookie(c) => cookies.push(c),
            obfs::RequestPadding::Query(k, v) => {
                query.push((k, v));
                sort_query = true;
            }
        }
        let mut place = |p: Placement, key: &str, v: &str| match p {
            Placement::Path => {
                if !path.ends_with('/') {
                    path.push('/');
                }
                path.push_str(v);
            }
            Placement::Query => {
                query.push((key.to_string(), v.to_string()));
                sort_query = true;
            }
            Placement::Header => extra.push((key.to_string(), v.to_string())),
            Placement::Cookie => cookies.push(format!("{key}={v}")),
        };
        if !session.is_empty() {
            place(s.session_placement, s.session_key(), session);
        }
        if let Some(seq) = seq {
            place(s.seq_placement, s.seq_key(), &seq.to_string());
        }
        // Go sets query pairs with `url.Values`, whose encoding sorts them by key.
        let mut pairs: Vec<(String, String)> = s
            .query
            .split('&')
            .filter(|kv| !kv.is_empty())
            .map(|kv| {
                let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                (k.to_string(), v.to_string())
            })
            .filter(|(k, _)| !query.iter().any(|(q, _)| q == k))
            .collect();
        pairs.extend(query);
        if sort_query {
            pairs.sort_by(|a, b| a.0.cmp(&b.0));
        }
        let q = if pairs.is_empty() {
            String::new()
        } else if !sort_query {
            format!("?{}", s.query)
        } else {
            let joined: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
            format!("?{}", joined.join("&"))
        };
        let url = format!("{scheme}://{authority}{path}{q}");
        let mut b = Request::builder().method(method);
        b = match self.version {
            Version::H2 => b.uri(url),
            Version::H1 => b
                .uri(format!("{path}{q}"))
                .header(http::header::HOST, authority),
        };
        let has = |name: &str| s.headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(name));
        for (k, v) in &s.headers {
            b = b.header(k.as_str(), v.as_str());
        }
        if !has("user-agent") {
            b = b
                .header("user-agent", DEFAULT_USER_AGENT)
                .header("sec-ch-ua-mobile", "?0")
                .header("sec-ch-ua-platform", "\"Windows\"");
            if !has("priority") {
                b = b.header("priority", "u=1, i");
            }
        }
        b = b
            .header("sec-fetch-mode", "cors")
            .header("sec-fetch-dest", "empty")
            .header("sec-fetch-site", "same-origin");
        for (k, v) in [
            ("cache-control", "no-cache"),
            ("pragma", "no-cache"),
            ("accept", "*/*"),
        ] {
            if !has(k) {
                b = b.header(k, v);
            }
        }
        for (k, v) in extra {
            b = b.header(k, v);
        }
        if !cookies.is_empty() {
            b = b.header(http::header::COOKIE, cookies.join("; "));
        }
        if streaming_up && !s.no_grpc_header {
            b = b.header(http::header::CONTENT_TYPE, "application/grpc");
        }
        Ok(b)
    }

    /// Sends `req` on `entry` (HTTP/2) or on a connection of its own (HTTP/1.1); the
    /// response comes through the returned future.
    async fn send(
        &self,
        entry: Option<&Entry>,
        server: &Destination,
        req: Request<ClientBody>,
    ) -> io::Result<(ResponseFuture, Option<AbortOnDrop>)> {
        match (self.version, entry) {
            (Version::H2, Some(e)) => {
                e.left_requests.fetch_sub(1, Ordering::Relaxed);
                let mut send = self.h2(e, server).await?;
                poll_fn(|cx| send.poll_ready(cx)).await.map_err(|err| {
                    e.failed.store(true, Ordering::Relaxed);
                    hyper_err(err)
                })?;
                let f = send.send_request(req);
                Ok((Box::pin(async move { f.await.map_err(hyper_err) }), None))
            }
            _ => {
                // One connection per request, as Xray's HTTP/1.1 client (keep-alive off). Go's
                // HTTP/1.1 server needs the `Connection: close` too: without it, a handler that
                // answers before reading the whole body (stream-up/one) has the server
                // discard up to 256 KiB of the body first.
                let mut req = req;
                req.headers_mut()
                    .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
                let s = self.below.dial_tcp(server).await?;
                let (mut send, conn) = hyper::client::conn::http1::Builder::new()
                    .handshake::<_, ClientBody>(TokioIo::new(s))
                    .await
                    .map_err(hyper_err)?;
                let task = tokio::spawn(async move {
                    if let Err(e) = conn.await {
                        tracing::debug!("XHTTP: HTTP/1.1 connection ended: {e}");
                    }
                });
                let f = send.send_request(req);
                Ok((
                    Box::pin(async move {
                        let r = f.await.map_err(hyper_err);
                        drop(send);
                        r
                    }),
                    Some(AbortOnDrop(task)),
                ))
            }
        }
    }
}

/// The outbound side: dials tunnels.
pub struct XhttpDialer {
    pub up: Arc<LegClient>,
    /// `downloadSettings`: the GET goes here instead.
    pub down: Option<(Arc<LegClient>, Destination)>,
    /// The mode `auto` resolved.
    pub mode: Mode,
}

impl XhttpDialer {
    /// `mode` as the client resolves `auto`: REALITY stream-one (stream-up with a download
    /// leg), otherwise packet-up.
    pub fn resolve(mode: Mode, reality: bool, download: bool) -> Mode {
        match mode {
            Mode::Auto if reality && download => Mode::StreamUp,
            Mode::Auto if reality => Mode::StreamOne,
            Mode::Auto => Mode::PacketUp,
            m => m,
        }
    }
}

fn build(b: http::request::Builder, body: ClientBody) -> io::Result<Request<ClientBody>> {
    b.body(body)
        .map_err(|e| io::Error::other(format!("XHTTP request: {e}")))
}

fn uplink_method(s: &XhttpSettings) -> Method {
    Method::from_bytes(s.uplink_method.as_bytes()).unwrap_or(Method::POST)
}

#[async_trait]
impl Dialer for XhttpDialer {
    async fn dial_tcp(&self, server: &Destination) -> io::Result<BoxStream> {
        let up = &self.up;
        let up_entry = (up.version == Version::H2).then(|| up.entry());
        let mut usage = Vec::new();
        if let Some(e) = &up_entry {
            e.open.fetch_add(1, Ordering::Relaxed);
            usage.push(Usage(e.clone()));
        }
        if self.mode == Mode::StreamOne {
            let (writer, body) = pipe(UP_BUFFER);
            let head = up.request(server, uplink_method(&up.settings), "", None, true, None)?;
            let req = build(head, ClientBody::Pipe(body))?;
            let (resp, guard) = up.send(up_entry.as_deref(), server, req).await?;
            tracing::debug!("XHTTP: stream-one to {server}");
            return Ok(Box::new(ClientConn::new(resp, writer, usage, guard)));
        }
        let session = uuid::Uuid::new_v4().to_string();
        // The downlink: a GET on the download leg (or this one).
        let (down, down_server) = match &self.down {
            Some((c, d)) => (c, d),
            None => (up, server),
        };
        let down_entry = match &self.down {
            Some((c, _)) if c.version == Version::H2 => {
                let e = c.entry();
                e.open.fetch_add(1, Ordering::Relaxed);
                usage.push(Usage(e.clone()));
                Some(e)
            }
            Some(_) => None,
            None => up_entry.clone(),
        };
        let head = down.request(down_server, Method::GET, &session, None, false, None)?;
        let (resp, guard) = down
            .send(
                down_entry.as_deref(),
                down_server,
                build(head, ClientBody::Empty)?,
            )
            .await?;
        tracing::debug!("XHTTP: {} session {session} to {server}", self.mode.name());
        let writer = if self.mode == Mode::StreamUp {
            let (writer, body) = pipe(UP_BUFFER);
            let head = up.request(
                server,
                uplink_method(&up.settings),
                &session,
                None,
                true,
                None,
            )?;
            let (post, post_guard) = up
                .send(
                    up_entry.as_deref(),
                    server,
                    build(head, ClientBody::Pipe(body))?,
                )
                .await?;
            tokio::spawn(async move {
                let _guard = post_guard;
                // The response only carries keep-alive padding: read and drop it.
                match post.await {
                    Ok(r) => {
                        if r.status() != StatusCode::OK {
                            tracing::info!("XHTTP: the stream-up POST was answered {}", r.status());
                        }
                        let mut b = r.into_body();
                        while let Some(Ok(_)) = poll_fn(|cx| Pin::new(&mut b).poll_frame(cx)).await
                        {
                        }
                    }
                    Err(e) => tracing::debug!("XHTTP: stream-up POST: {e}"),
                }
            });
            writer
        } else {
            let max = up.settings.max_each_post.rand().max(1) as usize;
            let (writer, body) = pipe(max);
            tokio::spawn(upload_packets(
                up.clone(),
                server.clone(),
                session,
                up_entry,
                max,
                body,
            ));
            writer
        };
        Ok(Box::new(ClientConn::new(resp, writer, usage, guard)))
    }

    async fn dial_udp(&self, dest: &Destination) -> io::Result<Box<dyn PacketConn>> {
        self.up.below.dial_udp(dest).await
    }
}

/// The packet-up uplink: what the tunnel wrote, in POSTs of `max` bytes at most, spaced by
/// `scMinPostsIntervalMs`, a few in flight at once (HTTP/2) or one after the other on an
/// upload connection of the tunnel's own (HTTP/1.1).
async fn upload_packets(
    client: Arc<LegClient>,
    server: Destination,
    session: String,
    mut entry: Option<Arc<Entry>>,
    max: usize,
    mut body: PipeBody,
) {
    let interval = client.settings.min_posts_interval_ms;
    let flights = Arc::new(tokio::sync::Semaphore::new(POSTS_IN_FLIGHT));
    let mut carry = BytesMut::new();
    let mut seq = 0u64;
    let mut last: Option<Instant> = None;
    let mut ended = false;
    let mut h1: Option<hyper::client::conn::http1::SendRequest<ClientBody>> = None;
    loop {
        if carry.is_empty() {
            if ended {
                return;
            }
            match poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
                Some(Ok(f)) => {
                    if let Ok(d) = f.into_data() {
                        carry = BytesMut::from(&d[..]);
                    }
                }
                _ => return,
            }
        }
        if let Some(t) = last {
            let wait = Duration::from_millis(interval.rand().into());
            tokio::time::sleep_until((t + wait).into()).await;
        }
        // What came while waiting goes in the same POST.
        while carry.len() < max && !ended {
            match poll_fn(|cx| Poll::Ready(Pin::new(&mut body).poll_frame(cx))).await {
                Poll::Ready(Some(Ok(f))) => {
                    if let Ok(d) = f.into_data() {
                        carry.extend_from_slice(&d);
                    }
                }
                Poll::Ready(_) => ended = true,
                Poll::Pending => break,
            }
        }
        let chunk = carry.split_to(carry.len().min(max)).freeze();
        last = Some(Instant::now());
        let this_seq = seq;
        seq += 1;
        let in_head = matches!(
            client.settings.data_placement,
            DataPlacement::Header | DataPlacement::Cookie
        );
        let make = || {
            let head = client.request(
                &server,
                uplink_method(&client.settings),
                &session,
                Some(this_seq),
                false,
                in_head.then_some(&chunk[..]),
            )?;
            if in_head {
                // The data went into the head: an empty body.
                let head = head.header(http::header::CONTENT_LENGTH, HeaderValue::from(0));
                return build(head, ClientBody::Full(None));
            }
            let head = head.header(http::header::CONTENT_LENGTH, HeaderValue::from(chunk.len()));
            build(head, ClientBody::Full(Some(chunk.clone())))
        };
        let result = match client.version {
            Version::H2 => {
                if entry.as_ref().is_none_or(|e| !e.usable()) {
                    entry = Some(client.entry());
                }
                let Ok(permit) = flights.clone().acquire_owned().await else {
                    return;
                };
                let req = match make() {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::info!("{e}");
                        return;
                    }
                };
                client
                    .send(entry.as_deref(), &server, req)
                    .await
                    .map(|(f, _)| {
                        tokio::spawn(async move {
                            let _permit = permit;
                            match f.await {
                                Ok(r) if r.status() == StatusCode::OK => {}
                                Ok(r) => {
                                    tracing::info!(
                                        "XHTTP: a packet POST was answered {}",
                                        r.status()
                                    )
                                }
                                Err(e) => tracing::info!("XHTTP: packet POST: {e}"),
                            }
                        });
                    })
            }
            Version::H1 => post_h1(&client, &mut h1, &server, &make).await,
        };
        if let Err(e) = result {
            tracing::info!("XHTTP: failed to send an upload packet: {e}");
            return;
        }
    }
}

/// One packet POST over HTTP/1.1, on the tunnel's upload connection (kept alive, redialed
/// when it closed), its response awaited before the next. A kept connection the server
/// closed as the POST went out (an idle keep-alive ends after a few seconds) gets the POST
/// again on a fresh one: the server drops a sequence number it already has, so sending
/// twice is safe, and losing it would lose the tunnel.
async fn post_h1(
    client: &LegClient,
    conn: &mut Option<hyper::client::conn::http1::SendRequest<ClientBody>>,
    server: &Destination,
    make: &(dyn Fn() -> io::Result<Request<ClientBody>> + Sync),
) -> io::Result<()> {
    let mut fresh = false;
    loop {
        if conn.as_ref().is_none_or(|c| c.is_closed()) {
            let s = client.below.dial_tcp(server).await?;
            let (send, c) = hyper::client::conn::http1::Builder::new()
                .handshake::<_, ClientBody>(TokioIo::new(s))
                .await
                .map_err(hyper_err)?;
            tokio::spawn(async move {
                if let Err(e) = c.await {
                    tracing::debug!("XHTTP: HTTP/1.1 upload connection ended: {e}");
                }
            });
            *conn = Some(send);
            fresh = true;
        }
        let Some(send) = conn.as_mut() else {
            return Err(io::ErrorKind::NotConnected.into());
        };
        let req = make()?;
        let sent = async {
            poll_fn(|cx| send.poll_ready(cx)).await?;
            send.send_request(req).await
        };
        let r = match sent.await {
            Ok(r) => r,
            Err(e) if !fresh => {
                tracing::debug!(
                    "XHTTP: the kept upload connection failed ({e}); again on a new one"
                );
                *conn = None;
                continue;
            }
            Err(e) => return Err(hyper_err(e)),
        };
        let status = r.status();
        let mut b = r.into_body();
        while let Some(f) = poll_fn(|cx| Pin::new(&mut b).poll_frame(cx)).await {
            f.map_err(hyper_err)?;
        }
        if status != StatusCode::OK {
            return Err(io::Error::other(format!("the server answered {status}")));
        }
        return Ok(());
    }
}

enum Down {
    Waiting(ResponseFuture),
    Body(BodyReader),
    Done,
}

/// One tunnel as a byte stream.
pub struct ClientConn {
    down: Down,
    /// The uplink: into the request body (stream-up/one) or the packet uploader.
    up: PipeWriter,
    _usage: Vec<Usage>,
    _conn: Option<AbortOnDrop>,
}

impl ClientConn {
    fn new(
        resp: ResponseFuture,
        up: PipeWriter,
        usage: Vec<Usage>,
        conn: Option<AbortOnDrop>,
    ) -> Self {
        ClientConn {
            down: Down::Waiting(resp),
            up,
            _usage: usage,
            _conn: conn,
        }
    }
}

impl AsyncRead for ClientConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        loop {
            match &mut me.down {
                Down::Done => return Poll::Ready(Ok(())),
                Down::Waiting(f) => {
                    let r = ready!(f.as_mut().poll(cx));
                    let r = match r {
                        Ok(r) => r,
                        Err(e) => {
                            me.down = Down::Done;
                            return Poll::Ready(Err(e));
                        }
                    };
                    if r.status() != StatusCode::OK {
                        me.down = Down::Done;
                        return Poll::Ready(Err(io::Error::other(format!(
                            "XHTTP: the server answered {}",
                            r.status()
                        ))));
                    }
                    me.down = Down::Body(BodyReader::new(r.into_body()));
                }
                Down::Body(b) => {
                    return match ready!(b.poll_read(cx, out)) {
                        Ok(true) => Poll::Ready(Ok(())),
                        Ok(false) => {
                            me.down = Down::Done;
                            Poll::Ready(Ok(()))
                        }
                        Err(e) => {
                            me.down = Down::Done;
                            Poll::Ready(Err(hyper_err(e)))
                        }
                    }
                }
            }
        }
    }
}

impl AsyncWrite for ClientConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().up).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    /// stream-up / stream-one: ends the request body. packet-up has no way to say so: what
    /// was written is still posted.
    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.up.close();
        Poll::Ready(Ok(()))
    }
}

impl Stream for ClientConn {}
