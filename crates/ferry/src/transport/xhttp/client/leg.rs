//! One leg's client ([`LegClient`]): XMUX, its pool of HTTP/2 connections shared by tunnels
//! under limits, or an HTTP/1.1 connection per request.

use std::future::poll_fn;
use std::io;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::{HeaderValue, Request};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};

use super::super::XhttpSettings;
use super::{
    hyper_err, AbortOnDrop, ClientBody, H2Send, ResponseFuture, Version, CHROME_KEEPALIVE,
    TUNNELS_PER_CONN,
};
use crate::common::Destination;
use crate::transport::grpc::{CONN_WINDOW, STREAM_WINDOW};
use crate::transport::Dialer;

/// One HTTP/2 connection of an XMUX pool, dialed on first use.
pub(super) struct Entry {
    pub(super) conn: tokio::sync::OnceCell<H2Send>,
    /// Tunnels open on it.
    pub(super) open: AtomicUsize,
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

    pub(super) fn usable(&self) -> bool {
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
pub(super) struct Usage(pub(super) Arc<Entry>);

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

    pub(super) fn authority(&self, server: &Destination) -> String {
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
    pub(super) fn entry(&self) -> Arc<Entry> {
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
        let e = free[super::super::Range::new(0, free.len() as u32 - 1).rand() as usize].clone();
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

    /// Sends `req` on `entry` (HTTP/2) or on a connection of its own (HTTP/1.1); the
    /// response comes through the returned future.
    pub(super) async fn send(
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
