//! The XHTTP server: one hyper connection per accepted stream (HTTP/1.1, or HTTP/2 by TLS
//! ALPN or h2c prior knowledge), one session table per inbound joining the requests of a
//! session whatever connection each comes on (Xray's `hub.go`).
//!
//! A session is made by its first request (a packet, the stream-up POST or the GET) and
//! reaped 30 s later unless its GET came. The GET (or a stream-one POST) becomes the proxied
//! connection: it reads the session's uplink (the reordered packets, or the stream-up body,
//! or its own body) and writes the response body. The session ends with it.
//!
//! - `session`: the session table and a session's uplink,
//! - `conn`: the proxied connection and the response bodies,
//! - `handler`: the requests of one HTTP connection.

use std::convert::Infallible;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};

use super::XhttpSettings;
use crate::session::ConnInfo;
use crate::transport::grpc::{CONN_WINDOW, STREAM_WINDOW};
use crate::transport::BoxStream;

mod conn;
mod handler;
mod session;

pub use conn::ServerConn;
use handler::Handler;
use session::Sessions;

/// A session whose GET has not come within this long is dropped (Xray's fixed 30 s).
pub const REAP_AFTER: Duration = Duration::from_secs(30);
/// Bytes of downlink a connection buffers before its writes wait for HTTP.
const DOWN_BUFFER: usize = 256 * 1024;

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
