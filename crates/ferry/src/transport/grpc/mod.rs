//! Xray's gRPC transport (`network: "grpc"`, "gun"): one bidirectional-streaming call per
//! proxied connection over HTTP/2, `POST /<service>/Tun` (or `TunMulti`), each write one
//! gRPC message holding a Hunk. HTTP/2 is the `h2` crate's; the gRPC framing is ours
//! ([`gun`]), as no gRPC stack is needed for a byte pipe.
//!
//! A server connection carries many calls, so the inbound serves it with [`GrpcServer`]
//! (each call goes to the dispatcher as a connection of its own); an outbound's calls share
//! one HTTP/2 connection per server ([`GrpcDialer`]).

pub mod gun;
mod server;

pub use server::GrpcServer;

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use bytes::{Buf, Bytes, BytesMut};
use h2::{RecvStream, SendStream};
use http::{HeaderMap, HeaderValue, Request, StatusCode};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::upgrade::DEFAULT_USER_AGENT;
use super::{BoxStream, Layer, Stream};
use crate::common::Destination;
use crate::session::ConnInfo;

/// The most payload one written message carries: with its 9 bytes of gun header (5 of gRPC,
/// the field tag, a 3-byte length) a full message is one [`SEND_CHUNK`].
const MAX_WRITE: usize = SEND_CHUNK - 9;
/// Bytes moved at a time from a DATA frame to the header parser: a gun message header (5), the
/// field tag and its length varint (up to 11) fit.
const HEADER_PEEK: usize = 16;
/// HTTP/2 windows: large, as Go's transport and clash-rs set them, so one call is not held
/// back by flow control on a fast link.
pub(crate) const STREAM_WINDOW: u32 = 4 << 20;
pub(crate) const CONN_WINDOW: u32 = 16 << 20;
/// The largest DATA frame this end takes (SETTINGS_MAX_FRAME_SIZE). A peer that honours it, as
/// Ferry does, sends 64 KiB frames: a quarter of the frames, wake-ups and writes of 16 KiB ones.
/// Go's gRPC (Xray, v2ray) sends 16 KiB frames whatever it is allowed.
const MAX_FRAME: u32 = 64 * 1024;
/// DATA payload handed to HTTP/2 at a time. With its 9-byte frame header a 64 KiB frame is four
/// whole TLS records (16 KiB of plaintext each); a full 64 KiB payload would be those four and a
/// fifth of 9 bytes, as every 16 KiB frame would be a whole record and a 9-byte one.
const SEND_CHUNK: usize = MAX_FRAME as usize - 9;

/// `grpcSettings`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrpcSettings {
    /// The paths a server serves (Tun, then TunMulti) and a client calls.
    pub tun: String,
    pub tun_multi: String,
    /// `multiMode` (client): call TunMulti.
    pub multi: bool,
    /// `authority` (client).
    pub authority: String,
    /// `user_agent` (client).
    pub user_agent: String,
    /// `idle_timeout` (client): ping the server after this long without a frame.
    pub idle_timeout: Option<Duration>,
    /// `health_check_timeout`: how long a ping may go unanswered.
    pub health_check_timeout: Duration,
    /// `initial_windows_size` (client; 0 = Ferry's default).
    pub initial_window: u32,
}

impl GrpcSettings {
    /// The paths for a `serviceName` as Xray derives them: a plain name becomes
    /// `/<escaped name>/Tun` and `/…/TunMulti`; a name starting with `/` is a custom path
    /// whose last segment holds the stream names (`tun|multi`).
    pub fn paths(service: &str) -> Result<(String, String), String> {
        if let Some(custom) = service.strip_prefix('/') {
            let Some((svc, names)) = custom.rsplit_once('/') else {
                return Err(format!(
                    "custom path {service:?} needs at least two slashes (\"/service/name\")"
                ));
            };
            let svc: Vec<String> = svc.split('/').map(path_escape).collect();
            let svc = svc.join("/");
            let (tun, multi) = names.split_once('|').unwrap_or((names, names));
            return Ok((
                format!("/{svc}/{}", path_escape(tun)),
                format!("/{svc}/{}", path_escape(multi)),
            ));
        }
        let svc = path_escape(service);
        Ok((format!("/{svc}/Tun"), format!("/{svc}/TunMulti")))
    }

    /// Settings for `serviceName` with everything else at its default.
    pub fn new(service: &str) -> Result<GrpcSettings, String> {
        let (tun, tun_multi) = Self::paths(service)?;
        Ok(GrpcSettings {
            tun,
            tun_multi,
            multi: false,
            authority: String::new(),
            user_agent: String::new(),
            idle_timeout: None,
            health_check_timeout: Duration::from_secs(20),
            initial_window: 0,
        })
    }
}

/// Go's `url.PathEscape`.
fn path_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'_' | b'.' | b'~' | b'$' | b'&' | b'+' | b',' | b';' | b'=' | b':' | b'@'
            )
        {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn h2_err(e: h2::Error) -> io::Error {
    if e.is_io() {
        return e.into_io().unwrap_or_else(|| io::ErrorKind::Other.into());
    }
    io::Error::other(format!("gRPC: {e}"))
}

enum RecvState {
    /// Client: the response headers are not here yet.
    Response(h2::client::ResponseFuture),
    Body(RecvStream),
    Done,
}

/// One gRPC call as a byte stream.
pub struct GrpcStream {
    recv: RecvState,
    /// Message and field headers being parsed (a few bytes at a time from `cur`).
    rbuf: BytesMut,
    /// The DATA frame being read: payload is copied from here straight to the reader.
    cur: Bytes,
    dec: gun::Decoder,
    send: SendStream<Bytes>,
    /// A framed message not yet (all) handed to HTTP/2.
    wbuf: Bytes,
    server: bool,
    shut: bool,
    /// Server: holds the connection open while the call lasts.
    _call: Option<server::Call>,
}

impl GrpcStream {
    fn new(recv: RecvState, send: SendStream<Bytes>, server: bool) -> Self {
        GrpcStream {
            recv,
            rbuf: BytesMut::new(),
            cur: Bytes::new(),
            dec: gun::Decoder::default(),
            send,
            wbuf: Bytes::new(),
            server,
            shut: false,
            _call: None,
        }
    }

    /// Inside a data field: copies what the current frame holds of it straight to the reader.
    fn payload_from_frame(&mut self, out: &mut ReadBuf<'_>) {
        let take = self
            .dec
            .payload_left()
            .min(self.cur.len())
            .min(out.remaining());
        out.put_slice(&self.cur[..take]);
        self.cur.advance(take);
        if self.cur.is_empty() {
            // An empty slice of h2's read buffer still pins all of it while the stream idles.
            self.cur = Bytes::new();
        }
        self.dec.consume(take);
    }

    /// Hands the pending message to HTTP/2 as its flow control allows.
    fn poll_send_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.wbuf.is_empty() {
            let cap = self.send.capacity();
            if cap == 0 {
                self.send.reserve_capacity(self.wbuf.len());
                match ready!(self.send.poll_capacity(cx)) {
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => return Poll::Ready(Err(h2_err(e))),
                    None => return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
                }
            }
            let n = cap.min(self.wbuf.len()).min(SEND_CHUNK);
            let chunk = self.wbuf.split_to(n);
            self.send.send_data(chunk, false).map_err(h2_err)?;
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncRead for GrpcStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        loop {
            let body = match &mut me.recv {
                RecvState::Done => return Poll::Ready(Ok(())),
                RecvState::Response(f) => {
                    let resp =
                        ready!(std::future::Future::poll(Pin::new(f), cx)).map_err(h2_err)?;
                    if resp.status() != StatusCode::OK {
                        me.recv = RecvState::Done;
                        return Poll::Ready(Err(io::Error::other(format!(
                            "gRPC: the server answered {}",
                            resp.status()
                        ))));
                    }
                    me.recv = RecvState::Body(resp.into_body());
                    continue;
                }
                RecvState::Body(b) => b,
            };
            match me.dec.step(&mut me.rbuf) {
                Err(e) => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("gRPC: {e}"),
                    )))
                }
                Ok(gun::Step::Data(n)) => {
                    let take = n.min(out.remaining());
                    out.put_slice(&me.rbuf[..take]);
                    me.rbuf.advance(take);
                    me.dec.consume(take);
                    // The rest of the field that is already here comes in the same read.
                    if me.rbuf.is_empty() {
                        me.payload_from_frame(out);
                    }
                    return Poll::Ready(Ok(()));
                }
                Ok(gun::Step::More) => {}
            }
            if !me.cur.is_empty() {
                if me.rbuf.is_empty() && me.dec.payload_left() > 0 {
                    me.payload_from_frame(out);
                    return Poll::Ready(Ok(()));
                }
                // Headers: a few bytes at a time into `rbuf` for the decoder.
                let k = me.cur.len().min(HEADER_PEEK);
                me.rbuf.extend_from_slice(&me.cur[..k]);
                me.cur.advance(k);
                if me.cur.is_empty() {
                    me.cur = Bytes::new();
                }
                continue;
            }
            match ready!(body.poll_data(cx)) {
                Some(Ok(chunk)) => {
                    let _ = body.flow_control().release_capacity(chunk.len());
                    me.cur = chunk;
                }
                Some(Err(e)) => {
                    // The peer cancelling after it is done is its way to close.
                    if e.reason() == Some(h2::Reason::CANCEL) && me.dec.at_boundary() {
                        me.recv = RecvState::Done;
                        continue;
                    }
                    return Poll::Ready(Err(h2_err(e)));
                }
                None => {
                    me.recv = RecvState::Done;
                    if !me.dec.at_boundary() || !me.rbuf.is_empty() || !me.cur.is_empty() {
                        return Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "gRPC: the call ended inside a message",
                        )));
                    }
                }
            }
        }
    }
}

impl AsyncWrite for GrpcStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        ready!(me.poll_send_pending(cx))?;
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        if me.shut {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        let n = buf.len().min(MAX_WRITE);
        let mut m = BytesMut::new();
        gun::encode(&buf[..n], &mut m);
        me.wbuf = m.freeze();
        if let Poll::Ready(Err(e)) = me.poll_send_pending(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_send_pending(cx)
    }

    /// A client ends its half of the call (END_STREAM); a server ends the call with the
    /// trailers `grpc-status: 0`.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        ready!(me.poll_send_pending(cx))?;
        if !me.shut {
            me.shut = true;
            if me.server {
                let mut t = HeaderMap::new();
                t.insert("grpc-status", HeaderValue::from_static("0"));
                me.send.send_trailers(t).map_err(h2_err)?;
            } else {
                me.send.send_data(Bytes::new(), true).map_err(h2_err)?;
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl Stream for GrpcStream {}

/// The client side as a layer: one HTTP/2 connection for this call (what a dialer chain
/// that cannot share connections gets; outbounds use [`GrpcDialer`]).
pub struct GrpcLayer {
    pub settings: Arc<GrpcSettings>,
    pub tls_name: Option<String>,
    pub tls: bool,
}

#[async_trait]
impl Layer for GrpcLayer {
    async fn accept(&self, _stream: BoxStream, _info: &mut ConnInfo) -> io::Result<BoxStream> {
        Err(io::Error::other("gRPC is served by the inbound's server"))
    }

    async fn connect(&self, stream: BoxStream, server: &Destination) -> io::Result<BoxStream> {
        let client = self.handshake(stream).await?;
        self.call(client, server).await
    }
}

impl GrpcLayer {
    /// HTTP/2 over `stream`, its connection driven (and pinged) by a task of its own.
    async fn handshake(&self, stream: BoxStream) -> io::Result<h2::client::SendRequest<Bytes>> {
        let s = &self.settings;
        let window = if s.initial_window > 0 {
            s.initial_window
        } else {
            STREAM_WINDOW
        };
        let (client, conn) = h2::client::Builder::new()
            .enable_push(false)
            .max_frame_size(MAX_FRAME)
            .initial_window_size(window)
            .initial_connection_window_size(CONN_WINDOW.max(window))
            .handshake::<_, Bytes>(stream)
            .await
            .map_err(h2_err)?;
        let mut conn = conn;
        let keepalive = s.idle_timeout.map(|i| (i, s.health_check_timeout));
        let pinger = keepalive.and_then(|_| conn.ping_pong());
        tokio::spawn(async move {
            let driven = async {
                if let Err(e) = conn.await {
                    tracing::debug!("gRPC connection ended: {e}");
                }
            };
            match (keepalive, pinger) {
                (Some((idle, timeout)), Some(p)) => {
                    tokio::select! {
                        _ = driven => {}
                        _ = keep_alive(p, idle, timeout) => {
                            tracing::info!("gRPC: the server did not answer a ping within {timeout:?}");
                        }
                    }
                }
                _ => driven.await,
            }
        });
        Ok(client)
    }

    /// Opens a call on `client`.
    async fn call(
        &self,
        client: h2::client::SendRequest<Bytes>,
        server: &Destination,
    ) -> io::Result<BoxStream> {
        let s = &self.settings;
        let authority = if !s.authority.is_empty() {
            s.authority.clone()
        } else {
            match self.tls_name.as_deref() {
                Some(n) if !n.is_empty() => n.to_string(),
                _ => server.addr.to_string(),
            }
        };
        let path = if s.multi { &s.tun_multi } else { &s.tun };
        let scheme = if self.tls { "https" } else { "http" };
        let ua = if s.user_agent.is_empty() {
            DEFAULT_USER_AGENT
        } else {
            &s.user_agent
        };
        let req = Request::post(format!("{scheme}://{authority}{path}"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .header("user-agent", ua)
            .body(())
            .map_err(|e| io::Error::other(format!("gRPC request: {e}")))?;
        let mut client = client.ready().await.map_err(h2_err)?;
        let (resp, send) = client.send_request(req, false).map_err(h2_err)?;
        Ok(Box::new(GrpcStream::new(
            RecvState::Response(resp),
            send,
            false,
        )))
    }
}

/// An outbound's gRPC client: as grpc-go in Xray, every call to a server goes as a stream of
/// one shared HTTP/2 connection (dialed through the layers below gRPC), redialed when it ends.
pub struct GrpcDialer {
    /// The socket and the layers under gRPC (TLS).
    pub below: Arc<dyn super::Dialer>,
    pub layer: GrpcLayer,
    /// The shared connection per server. Held while one is dialed, so calls that start
    /// together wait for it instead of dialing their own.
    conns:
        tokio::sync::Mutex<std::collections::HashMap<Destination, h2::client::SendRequest<Bytes>>>,
}

impl GrpcDialer {
    pub fn new(below: Arc<dyn super::Dialer>, layer: GrpcLayer) -> Self {
        GrpcDialer {
            below,
            layer,
            conns: Default::default(),
        }
    }
}

#[async_trait]
impl super::Dialer for GrpcDialer {
    async fn dial_tcp(&self, dest: &Destination) -> io::Result<BoxStream> {
        let client = {
            let mut conns = self.conns.lock().await;
            let live = match conns.get(dest).cloned() {
                Some(c) => match c.ready().await {
                    Ok(c) => Some(c),
                    Err(e) => {
                        tracing::debug!("gRPC: the shared connection to {dest} ended: {e}");
                        conns.remove(dest);
                        None
                    }
                },
                None => None,
            };
            match live {
                Some(c) => c,
                None => {
                    let stream = self.below.dial_tcp(dest).await?;
                    let c = self.layer.handshake(stream).await?;
                    conns.insert(dest.clone(), c.clone());
                    c
                }
            }
        };
        self.layer.call(client, dest).await
    }

    async fn dial_udp(&self, dest: &Destination) -> io::Result<Box<dyn super::PacketConn>> {
        self.below.dial_udp(dest).await
    }
}

/// Pings after `idle` and gives up when a pong takes longer than `timeout`.
async fn keep_alive(mut p: h2::PingPong, idle: Duration, timeout: Duration) {
    loop {
        tokio::time::sleep(idle).await;
        match tokio::time::timeout(timeout, p.ping(h2::Ping::opaque())).await {
            Ok(Ok(_)) => {}
            Ok(Err(_)) => std::future::pending::<()>().await,
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::Endpoint;

    #[test]
    fn service_paths_as_xray() {
        assert_eq!(
            GrpcSettings::paths("name").unwrap(),
            ("/name/Tun".to_string(), "/name/TunMulti".to_string())
        );
        assert_eq!(
            GrpcSettings::paths("a b/c").unwrap(),
            (
                "/a%20b%2Fc/Tun".to_string(),
                "/a%20b%2Fc/TunMulti".to_string()
            )
        );
        assert_eq!(
            GrpcSettings::paths("/my/sample/path1|path2").unwrap(),
            (
                "/my/sample/path1".to_string(),
                "/my/sample/path2".to_string()
            )
        );
        assert_eq!(
            GrpcSettings::paths("/my/one").unwrap(),
            ("/my/one".to_string(), "/my/one".to_string())
        );
        assert!(GrpcSettings::paths("/nope").is_err());
    }

    #[test]
    fn a_full_message_is_one_frame_of_whole_tls_records() {
        let mut m = BytesMut::new();
        gun::encode(&vec![7u8; MAX_WRITE], &mut m);
        assert_eq!(m.len(), SEND_CHUNK);
        // With the 9-byte HTTP/2 frame header: exactly MAX_FRAME, four 16 KiB records.
        assert_eq!(m.len() + 9, MAX_FRAME as usize);
        assert_eq!((m.len() + 9) % (16 * 1024), 0);
    }

    #[tokio::test]
    async fn a_call_carries_bytes_both_ways_and_ends_cleanly() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (a, b) = tokio::io::duplex(1 << 20);
        let settings = Arc::new(GrpcSettings::new("svc").unwrap());
        let server = GrpcServer {
            settings: settings.clone(),
            trusted_xff: Arc::from(Vec::new()),
        };
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            let info = ConnInfo::new(
                Endpoint::Ip("127.0.0.1:1".parse().unwrap()),
                Endpoint::Ip("127.0.0.1:2".parse().unwrap()),
            );
            let each = move |s: BoxStream, i: ConnInfo| {
                let _ = tx.send((s, i));
            };
            server.serve(Box::new(b), &info, &each).await.unwrap();
        });
        let layer = GrpcLayer {
            settings,
            tls_name: None,
            tls: false,
        };
        let dest = Destination::new(crate::common::Address::parse("h.test"), 80);
        let mut c = layer.connect(Box::new(a), &dest).await.unwrap();
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
        let d2 = data.clone();
        let w = tokio::spawn(async move {
            c.write_all(&d2).await.unwrap();
            c.shutdown().await.unwrap();
            let mut back = Vec::new();
            c.read_to_end(&mut back).await.unwrap();
            back
        });
        let (mut s, info) = rx.recv().await.unwrap();
        assert_eq!(info.path.as_deref(), Some("/svc/Tun"));
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.unwrap();
        assert!(got == data);
        s.write_all(b"bye").await.unwrap();
        s.shutdown().await.unwrap();
        assert_eq!(w.await.unwrap(), b"bye");
    }
}
