//! The XHTTP client: each tunnel is a GET (downlink) plus POSTs or one streaming POST
//! (uplink), or one stream-one POST, sent over HTTP/2 connections shared under XMUX's
//! limits, or over HTTP/1.1 connections of their own (Xray's `dialer.go`).

//!
//! - `leg`: one leg's client and its XMUX pool, `request`: a leg's request head,
//! - `upload`: the packet-up uplink, `conn`: a tunnel as a stream.

use std::future::{poll_fn, Future};
use std::io;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use hyper::body::{Body, Frame, Incoming, SizeHint};

use super::pipe::{pipe, PipeBody};
use super::{Mode, XhttpSettings};
use crate::common::Destination;
use crate::transport::{BoxStream, Dialer, PacketConn};

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

mod conn;
mod leg;
mod request;
mod upload;

pub use conn::ClientConn;
pub use leg::LegClient;
use leg::Usage;
use upload::upload_packets;

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
