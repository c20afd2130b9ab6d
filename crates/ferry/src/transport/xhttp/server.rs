//! The XHTTP server: one hyper connection per accepted stream (HTTP/1.1, or HTTP/2 by TLS
//! ALPN or h2c prior knowledge), one session table per inbound joining the requests of a
//! session whatever connection each comes on (Xray's `hub.go`).
//!
//! A session is made by its first request (a packet, the stream-up POST or the GET) and
//! reaped 30 s later unless its GET came. The GET (or a stream-one POST) becomes the proxied
//! connection: it reads the session's uplink (the reordered packets, or the stream-up body,
//! or its own body) and writes the response body. The session ends with it.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::future::{poll_fn, Future};
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::{Buf, Bytes};
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::budget::Budget;
use super::meta::{self, Leg};
use super::obfs::{self, DataPlacement};
use super::pipe::{pipe, BodyReader, PipeBody, PipeWriter};
use super::{padding, XhttpSettings};
use crate::session::{ConnInfo, Endpoint};
use crate::transport::grpc::{CONN_WINDOW, STREAM_WINDOW};
use crate::transport::{upgrade, BoxStream, Stream};

/// A session whose GET has not come within this long is dropped (Xray's fixed 30 s).
pub const REAP_AFTER: Duration = Duration::from_secs(30);
/// Bytes of downlink a connection buffers before its writes wait for HTTP.
const DOWN_BUFFER: usize = 256 * 1024;

/// The sessions of one inbound.
#[derive(Default)]
struct Sessions {
    map: Mutex<HashMap<String, Arc<Session>>>,
    /// Bytes queued in sessions whose proxied connection has not answered yet: a session
    /// counts until then, GET or not (a stranger can GET too, and send every packet but the
    /// first), by the address that made it. Past the budget, a packet ends its session (500).
    unanswered: Arc<Budget>,
}

impl Sessions {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<Session>>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The session `id`, made if new (then reaped after [`REAP_AFTER`] unless connected).
    fn upsert(self: &Arc<Self>, id: &str, max_buffered: usize, source: &Endpoint) -> Arc<Session> {
        let mut map = self.lock();
        if let Some(s) = map.get(id) {
            return s.clone();
        }
        let s = Arc::new(Session {
            up: Mutex::new(Upload::default()),
            connected: AtomicBool::new(false),
            max_buffered,
            source: match source {
                Endpoint::Ip(a) => Some(a.ip().to_canonical()),
                Endpoint::Unix(_) => None,
            },
            unanswered: self.unanswered.clone(),
        });
        map.insert(id.to_string(), s.clone());
        let open = map.len();
        drop(map);
        tracing::debug!("XHTTP: session {id} opened ({open} open)");
        let (me, id, weak) = (Arc::downgrade(self), id.to_string(), Arc::downgrade(&s));
        tokio::spawn(async move {
            tokio::time::sleep(REAP_AFTER).await;
            let (Some(me), Some(s)) = (me.upgrade(), weak.upgrade()) else {
                return;
            };
            if !s.connected.load(Ordering::Acquire) {
                tracing::info!("XHTTP: session {id} reaped (no GET within {REAP_AFTER:?})");
                me.remove(&id, &s);
            }
        });
        s
    }

    /// Drops `s` from the table (if it is still the session of `id`) and closes it.
    fn remove(&self, id: &str, s: &Arc<Session>) {
        let mut map = self.lock();
        if map.get(id).is_some_and(|cur| Arc::ptr_eq(cur, s)) {
            map.remove(id);
        }
        let open = map.len();
        drop(map);
        s.close();
        tracing::debug!("XHTTP: session {id} closed ({open} open)");
    }

    fn len(&self) -> usize {
        self.lock().len()
    }
}

/// A session's uplink as it arrives.
#[derive(Default)]
struct Upload {
    /// Packets by sequence number, waiting for their turn.
    heap: BTreeMap<u64, Bytes>,
    next: u64,
    /// The stream-up body, once its POST came.
    stream: Option<BodyReader>,
    /// A stream-up POST came (a second is refused).
    streamed: bool,
    closed: bool,
    /// The proxied connection's read, waiting for bytes.
    reader: Option<Waker>,
    /// Packet POSTs waiting for room.
    others: Vec<Waker>,
    /// The stream-up response, waiting for the end.
    end: Option<Waker>,
    /// Bytes of `heap` counted in the inbound's budget (queued before the answer).
    counted: usize,
    /// The proxied connection wrote: bytes queued from now on are not counted.
    answered: bool,
}

struct Session {
    up: Mutex<Upload>,
    /// The GET came: no reaping.
    connected: AtomicBool,
    max_buffered: usize,
    /// The address that made the session, whose budget its packets count against.
    source: Option<IpAddr>,
    /// The inbound's budget ([`Sessions::unanswered`]).
    unanswered: Arc<Budget>,
}

impl Session {
    fn lock(&self) -> MutexGuard<'_, Upload> {
        self.up.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn close(&self) {
        let mut u = self.lock();
        self.release(&mut u);
        u.closed = true;
        u.heap.clear();
        u.stream = None;
        wake(&mut u);
    }

    /// Takes this session's queued bytes out of the inbound's budget.
    fn release(&self, u: &mut Upload) {
        self.unanswered.give(self.source, u.counted);
        u.counted = 0;
    }

    /// The GET came: marks the session connected (false if it was already).
    fn claim(&self) -> bool {
        !self.connected.swap(true, Ordering::AcqRel)
    }

    /// The proxied connection answered (the client authenticated): its packets count no more.
    fn answered(&self) {
        let mut u = self.lock();
        u.answered = true;
        self.release(&mut u);
    }

    /// Queues packet `seq`, waiting while the reader is behind. An error ends the session.
    async fn push(&self, seq: u64, data: Bytes) -> Result<(), &'static str> {
        let mut data = Some(data);
        poll_fn(|cx| {
            let mut u = self.lock();
            if u.closed {
                return Poll::Ready(Err("the session is closed"));
            }
            if seq < u.next || u.heap.contains_key(&seq) {
                // A duplicate: Xray drops it.
                return Poll::Ready(Ok(()));
            }
            if u.heap.len() >= self.max_buffered {
                if !u.heap.contains_key(&u.next) {
                    // Packets wait for one that does not come: the reorder buffer is full.
                    return Poll::Ready(Err("too many packets out of order"));
                }
                u.others.push(cx.waker().clone());
                return Poll::Pending;
            }
            let d = data.take().unwrap_or_default();
            if !u.answered {
                if let Err(e) = self.unanswered.take(self.source, d.len()) {
                    return Poll::Ready(Err(e));
                }
                u.counted += d.len();
            }
            u.heap.insert(seq, d);
            if let Some(w) = u.reader.take() {
                w.wake();
            }
            Poll::Ready(Ok(()))
        })
        .await
    }

    /// Hands the stream-up body to the reader; `false` if one came already.
    fn set_stream(&self, body: Incoming) -> bool {
        let mut u = self.lock();
        if u.streamed || u.closed {
            return false;
        }
        u.streamed = true;
        u.stream = Some(BodyReader::new(body));
        if let Some(w) = u.reader.take() {
            w.wake();
        }
        true
    }

    /// The uplink as the proxied connection reads it.
    fn poll_read(&self, cx: &mut Context<'_>, out: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let mut u = self.lock();
        if let Some(body) = u.stream.as_mut() {
            return match std::task::ready!(body.poll_read(cx, out)) {
                Ok(true) => Poll::Ready(Ok(())),
                Ok(false) => {
                    u.stream = None;
                    u.closed = true;
                    Poll::Ready(Ok(()))
                }
                Err(e) => {
                    u.stream = None;
                    Poll::Ready(Err(io::Error::other(format!("XHTTP stream-up: {e}"))))
                }
            };
        }
        let next = u.next;
        let u = &mut *u;
        if let Some(mut entry) = u.heap.first_entry() {
            if *entry.key() == next {
                let d = entry.get_mut();
                let n = d.len().min(out.remaining());
                out.put_slice(&d[..n]);
                d.advance(n);
                // Bytes read are no longer held.
                let freed = n.min(u.counted);
                u.counted -= freed;
                self.unanswered.give(self.source, freed);
                if d.is_empty() {
                    entry.remove();
                    u.next += 1;
                    wake_others(u);
                }
                return Poll::Ready(Ok(()));
            }
        }
        if u.closed {
            return Poll::Ready(Ok(()));
        }
        u.reader = Some(cx.waker().clone());
        Poll::Pending
    }
}

fn wake_others(u: &mut Upload) {
    for w in u.others.drain(..) {
        w.wake();
    }
}

fn wake(u: &mut Upload) {
    if let Some(w) = u.reader.take() {
        w.wake();
    }
    if let Some(w) = u.end.take() {
        w.wake();
    }
    wake_others(u);
}

/// The uplink of a proxied connection.
enum Uplink {
    Session {
        id: String,
        session: Arc<Session>,
        sessions: Arc<Sessions>,
    },
    /// stream-one: the POST's own body.
    Body(BodyReader),
}

/// One proxied connection: uplink from the session (or the request body), downlink into the
/// response body.
pub struct ServerConn {
    up: Uplink,
    down: PipeWriter,
    /// It wrote: its session was told.
    answered: bool,
}

impl Drop for ServerConn {
    fn drop(&mut self) {
        if let Uplink::Session {
            id,
            session,
            sessions,
        } = &self.up
        {
            sessions.remove(id, session);
        }
    }
}

impl AsyncRead for ServerConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        // The client went away (its GET, or the stream-one POST, was dropped): the uplink
        // ends with it, as Xray closes the connection when the request context ends.
        if me.down.poll_closed(cx).is_ready() {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "XHTTP: the client closed the download",
            )));
        }
        match &mut me.up {
            Uplink::Session { session, .. } => session.poll_read(cx, out),
            Uplink::Body(body) => body.poll_read(cx, out).map(|r| {
                r.map(|_| ())
                    .map_err(|e| io::Error::other(format!("XHTTP stream-one: {e}")))
            }),
        }
    }
}

impl AsyncWrite for ServerConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        if !me.answered && !buf.is_empty() {
            // Every inbound answers only a client that authenticated.
            me.answered = true;
            if let Uplink::Session { session, .. } = &me.up {
                session.answered();
            }
        }
        Pin::new(&mut me.down).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().down).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().down).poll_shutdown(cx)
    }
}

impl Stream for ServerConn {}

/// The body of a stream-up POST's response: padding now and then (so middleboxes see the
/// request alive), until the session ends.
struct KeepAlive {
    session: Arc<Session>,
    settings: Arc<XhttpSettings>,
    /// `None`: no padding (no Referer, or `scStreamUpServerSecs` off).
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

/// A response body.
enum ServerBody {
    Empty,
    Down(PipeBody),
    KeepAlive(KeepAlive),
}

impl Body for ServerBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        match self.get_mut() {
            ServerBody::Empty => Poll::Ready(None),
            ServerBody::Down(p) => Pin::new(p).poll_frame(cx),
            ServerBody::KeepAlive(k) => {
                {
                    let mut u = k.session.lock();
                    if u.closed {
                        return Poll::Ready(None);
                    }
                    u.end = Some(cx.waker().clone());
                }
                let Some(t) = k.timer.as_mut() else {
                    return Poll::Pending;
                };
                std::task::ready!(t.as_mut().poll(cx));
                let secs = k
                    .settings
                    .stream_up_server_secs
                    .map(|r| r.rand())
                    .unwrap_or(0);
                t.as_mut()
                    .reset(tokio::time::Instant::now() + Duration::from_secs(secs.into()));
                let pad = padding(k.settings.padding.rand());
                Poll::Ready(Some(Ok(Frame::data(Bytes::from(pad)))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ServerBody::Empty => true,
            ServerBody::Down(p) => p.is_end_stream(),
            ServerBody::KeepAlive(_) => false,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ServerBody::Empty => SizeHint::with_exact(0),
            _ => SizeHint::default(),
        }
    }
}

/// The server of one inbound.
pub struct XhttpServer {
    settings: Arc<XhttpSettings>,
    trusted_xff: Arc<[String]>,
    sessions: Arc<Sessions>,
}

impl XhttpServer {
    pub fn new(settings: Arc<XhttpSettings>, trusted_xff: Arc<[String]>) -> Self {
        XhttpServer {
            settings,
            trusted_xff,
            sessions: Arc::default(),
        }
    }

    /// Sessions open (made and not yet ended or reaped).
    pub fn sessions(&self) -> usize {
        self.sessions.len()
    }

    /// Serves the HTTP connection `stream` until it ends; each proxied connection it carries
    /// goes to `each` with its connection info.
    pub async fn serve(
        &self,
        stream: BoxStream,
        info: &ConnInfo,
        each: &(dyn Fn(BoxStream, ConnInfo) + Send + Sync),
    ) -> io::Result<()> {
        // Boxed: the channel allocates its first block of 32 slots up front, for every HTTP
        // connection (32 pointers instead of 32 connection infos, ~4 KiB less).
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Box<(BoxStream, ConnInfo)>>();
        let handler = Arc::new(Handler {
            settings: self.settings.clone(),
            trusted_xff: self.trusted_xff.clone(),
            sessions: self.sessions.clone(),
            info: info.clone(),
            tx,
        });
        let service = hyper::service::service_fn(move |req| {
            let h = handler.clone();
            async move { Ok::<_, Infallible>(h.handle(req).await) }
        });
        let mut b = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
        b.http1()
            .timer(TokioTimer::new())
            .header_read_timeout(Duration::from_secs(4))
            .max_buf_size(self.settings.server_max_header_bytes.max(64 * 1024));
        b.http2()
            .timer(TokioTimer::new())
            .initial_stream_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONN_WINDOW)
            .max_header_list_size(self.settings.server_max_header_bytes.max(1024) as u32);
        let conn = b.serve_connection(TokioIo::new(stream), service);
        tokio::pin!(conn);
        let result = loop {
            tokio::select! {
                r = &mut conn => break r,
                Some(c) = rx.recv() => each(c.0, c.1),
            }
        };
        // Proxied connections made as the HTTP connection ended still go.
        while let Ok(c) = rx.try_recv() {
            each(c.0, c.1);
        }
        match result {
            // A client closing its connection in the middle of a download is how a tunnel
            // over HTTP/1.1 ends.
            Err(e)
                if e.downcast_ref::<hyper::Error>()
                    .is_some_and(|h| h.is_incomplete_message() || h.is_canceled()) =>
            {
                Ok(())
            }
            r => r.map_err(|e| io::Error::other(format!("XHTTP: {e}"))),
        }
    }
}

/// What the requests of one HTTP connection share.
struct Handler {
    settings: Arc<XhttpSettings>,
    trusted_xff: Arc<[String]>,
    sessions: Arc<Sessions>,
    info: ConnInfo,
    tx: tokio::sync::mpsc::UnboundedSender<Box<(BoxStream, ConnInfo)>>,
}

fn status(code: StatusCode, headers: HeaderMap) -> Response<ServerBody> {
    let mut r = Response::new(ServerBody::Empty);
    *r.status_mut() = code;
    *r.headers_mut() = headers;
    r
}

impl Handler {
    async fn handle(&self, req: Request<Incoming>) -> Response<ServerBody> {
        let s = &self.settings;
        let leg = meta::classify(s, req.method(), req.uri(), req.headers());
        if let Err(r) = &leg {
            if r.status == StatusCode::NOT_FOUND {
                tracing::info!(
                    "XHTTP: {} {} from {}: {}",
                    req.method(),
                    req.uri().path(),
                    self.info.source,
                    r.why
                );
                return status(StatusCode::NOT_FOUND, HeaderMap::new());
            }
        }
        let mut h = cors(req.method(), req.headers());
        if obfs::uses_cookies(s) {
            h.insert(
                "access-control-allow-credentials",
                HeaderValue::from_static("true"),
            );
        }
        obfs::add_response_padding(s, &mut h);
        let leg = match leg {
            Ok(l) => l,
            Err(r) => {
                tracing::info!(
                    "XHTTP: {} {} from {}: {}",
                    req.method(),
                    req.uri().path(),
                    self.info.source,
                    r.why
                );
                return status(r.status, h);
            }
        };
        match leg {
            Leg::Options => status(StatusCode::OK, h),
            Leg::PacketUp { session, seq } => self.packet(req, &session, seq, h).await,
            Leg::StreamUp { session } => {
                let has_referer = req.headers().contains_key(http::header::REFERER);
                let sess = self
                    .sessions
                    .upsert(&session, s.max_buffered_posts, &self.source(&req));
                if !sess.set_stream(req.into_body()) {
                    tracing::info!(
                        "XHTTP: a second stream-up POST for session {session} from {}",
                        self.info.source
                    );
                    return status(StatusCode::CONFLICT, h);
                }
                h.insert("x-accel-buffering", HeaderValue::from_static("no"));
                h.insert("cache-control", HeaderValue::from_static("no-store"));
                let timer = match s.stream_up_server_secs {
                    Some(_) if has_referer => {
                        // Go types the response by sniffing the padding it writes first.
                        h.insert(
                            "content-type",
                            HeaderValue::from_static("text/plain; charset=utf-8"),
                        );
                        Some(Box::pin(tokio::time::sleep(Duration::ZERO)))
                    }
                    _ => None,
                };
                let mut r = status(StatusCode::OK, h);
                *r.body_mut() = ServerBody::KeepAlive(KeepAlive {
                    session: sess,
                    settings: s.clone(),
                    timer,
                });
                r
            }
            Leg::StreamDown { session } => {
                let sess = self
                    .sessions
                    .upsert(&session, s.max_buffered_posts, &self.source(&req));
                if !sess.claim() {
                    tracing::info!(
                        "XHTTP: a second GET for session {session} from {}",
                        self.info.source
                    );
                    return status(StatusCode::CONFLICT, h);
                }
                let info = self.info_for(&req);
                let up = Uplink::Session {
                    id: session,
                    session: sess,
                    sessions: self.sessions.clone(),
                };
                self.down(up, info, h)
            }
            Leg::StreamOne => {
                let info = self.info_for(&req);
                let up = Uplink::Body(BodyReader::new(req.into_body()));
                self.down(up, info, h)
            }
        }
    }

    /// Where a request comes from: the client behind a trusted proxy, else the peer.
    fn source(&self, req: &Request<Incoming>) -> Endpoint {
        match upgrade::forwarded_for_map(req.headers(), &self.trusted_xff) {
            Some(ip) => Endpoint::Ip(std::net::SocketAddr::new(ip, 0)),
            None => self.info.source.clone(),
        }
    }

    /// The connection info of a proxied connection: the path, and the client behind a proxy
    /// from `X-Forwarded-For` (when trusted, as Xray).
    fn info_for(&self, req: &Request<Incoming>) -> ConnInfo {
        let mut info = self.info.clone();
        info.path = Some(req.uri().path().into());
        if let Some(ip) = upgrade::forwarded_for_map(req.headers(), &self.trusted_xff) {
            info.source = Endpoint::Ip(std::net::SocketAddr::new(ip, 0));
        }
        info
    }

    /// Answers a download leg: 200 now, the body from the proxied connection's writes.
    fn down(&self, up: Uplink, info: ConnInfo, mut h: HeaderMap) -> Response<ServerBody> {
        h.insert("x-accel-buffering", HeaderValue::from_static("no"));
        h.insert("cache-control", HeaderValue::from_static("no-store"));
        if !self.settings.no_sse_header {
            h.insert(
                "content-type",
                HeaderValue::from_static("text/event-stream"),
            );
        }
        let (down, body) = pipe(DOWN_BUFFER);
        let conn = ServerConn {
            up,
            down,
            answered: false,
        };
        if self.tx.send(Box::new((Box::new(conn), info))).is_err() {
            return status(StatusCode::SERVICE_UNAVAILABLE, HeaderMap::new());
        }
        let mut r = status(StatusCode::OK, h);
        *r.body_mut() = ServerBody::Down(body);
        r
    }

    /// One packet-up POST: its body (the size checked first) queued in its session.
    async fn packet(
        &self,
        req: Request<Incoming>,
        session: &str,
        seq: u64,
        mut h: HeaderMap,
    ) -> Response<ServerBody> {
        let max = self.settings.max_each_post.to as usize;
        // Uplink data in headers or cookies (uplinkDataPlacement), before any body.
        let head_data = match obfs::request_data(&self.settings, req.headers()) {
            Ok(d) => d,
            Err((code, why)) => {
                tracing::info!(
                    "XHTTP: packet {seq} of session {session} from {}: {why}",
                    self.info.source
                );
                return status(code, h);
            }
        };
        let body_allowed = matches!(
            self.settings.data_placement,
            DataPlacement::Auto | DataPlacement::Body
        );
        let declared = req
            .headers()
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > max as u64) {
            tracing::info!(
                "XHTTP: a {}-byte POST from {} is over scMaxEachPostBytes {max}",
                declared.unwrap_or(0),
                self.info.source
            );
            return status(StatusCode::PAYLOAD_TOO_LARGE, h);
        }
        let sess = self.sessions.upsert(
            session,
            self.settings.max_buffered_posts,
            &self.source(&req),
        );
        let mut body = req.into_body();
        let mut data = bytes::BytesMut::new();
        loop {
            if !body_allowed {
                break;
            }
            match poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
                None => break,
                Some(Err(e)) => {
                    tracing::info!("XHTTP: reading a POST from {}: {e}", self.info.source);
                    return status(StatusCode::BAD_REQUEST, h);
                }
                Some(Ok(f)) => {
                    if let Ok(d) = f.into_data() {
                        if data.len() + d.len() > max {
                            tracing::info!(
                                "XHTTP: a POST from {} is over scMaxEachPostBytes {max}",
                                self.info.source
                            );
                            return status(StatusCode::PAYLOAD_TOO_LARGE, h);
                        }
                        data.extend_from_slice(&d);
                    }
                }
            }
        }
        if data.is_empty() {
            h.insert("cache-control", HeaderValue::from_static("no-store"));
        }
        let data = if head_data.is_empty() {
            data.freeze()
        } else {
            let mut all = head_data;
            all.extend_from_slice(&data);
            if all.len() > max {
                tracing::info!(
                    "XHTTP: packet {seq} from {} carries {} bytes, over scMaxEachPostBytes {max}",
                    self.info.source,
                    all.len()
                );
                return status(StatusCode::PAYLOAD_TOO_LARGE, h);
            }
            bytes::Bytes::from(all)
        };
        if let Err(why) = sess.push(seq, data).await {
            tracing::info!(
                "XHTTP: packet {seq} of session {session} from {}: {why}",
                self.info.source
            );
            self.sessions.remove(session, &sess);
            return status(StatusCode::INTERNAL_SERVER_ERROR, h);
        }
        status(StatusCode::OK, h)
    }
}

/// CORS headers for the browser dialer, as Xray writes them.
fn cors(method: &Method, req: &HeaderMap) -> HeaderMap {
    let mut h = HeaderMap::new();
    let origin = req
        .get(http::header::ORIGIN)
        .cloned()
        .unwrap_or(HeaderValue::from_static("*"));
    h.insert("access-control-allow-origin", origin);
    if method == Method::OPTIONS {
        let m = req
            .get("access-control-request-method")
            .cloned()
            .unwrap_or(HeaderValue::from_static("*"));
        h.insert("access-control-allow-methods", m);
        let hs = req
            .get("access-control-request-headers")
            .cloned()
            .unwrap_or(HeaderValue::from_static("*"));
        h.insert("access-control-allow-headers", hs);
    }
    h
}
