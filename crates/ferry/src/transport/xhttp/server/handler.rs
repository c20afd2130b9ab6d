//! The requests of one HTTP connection: each classified (packet, stream-up POST, GET,
//! stream-one POST) and answered; CORS.

use std::future::poll_fn;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::{Body, Incoming};

use super::super::meta::{self, Leg};
use super::super::obfs::{self, DataPlacement};
use super::super::pipe::{pipe, BodyReader};
use super::super::XhttpSettings;
use super::conn::{KeepAlive, ServerBody, Uplink};
use super::session::Sessions;
use super::{ServerConn, DOWN_BUFFER};
use crate::session::{ConnInfo, Endpoint};
use crate::transport::{upgrade, BoxStream};

/// What the requests of one HTTP connection share.
pub(super) struct Handler {
    pub(super) settings: Arc<XhttpSettings>,
    pub(super) trusted_xff: Arc<[String]>,
    pub(super) sessions: Arc<Sessions>,
    pub(super) info: ConnInfo,
    pub(super) tx: tokio::sync::mpsc::UnboundedSender<Box<(BoxStream, ConnInfo)>>,
}

pub(super) fn status(code: StatusCode, headers: HeaderMap) -> Response<ServerBody> {
    let mut r = Response::new(ServerBody::Empty);
    *r.status_mut() = code;
    *r.headers_mut() = headers;
    r
}

impl Handler {
    pub(super) async fn handle(&self, req: Request<Incoming>) -> Response<ServerBody> {
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
pub(super) fn cors(method: &Method, req: &HeaderMap) -> HeaderMap {
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
