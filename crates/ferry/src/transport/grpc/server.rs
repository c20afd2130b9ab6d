//! The server side: serves the calls of one HTTP/2 connection, within limits a client cannot
//! push past (concurrent calls, header list size, a connection left without calls).

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Response, StatusCode};

use super::{h2_err, GrpcSettings, GrpcStream, RecvState, CONN_WINDOW, MAX_FRAME, STREAM_WINDOW};
use crate::session::{ConnInfo, Endpoint};
use crate::transport::BoxStream;

/// What one connection may hold.
#[derive(Clone, Copy, Debug)]
pub(super) struct Limits {
    /// SETTINGS_MAX_CONCURRENT_STREAMS: calls open at once. Go's gRPC client (Xray's) puts
    /// every proxied connection to one server on one HTTP/2 connection and waits for room past
    /// this, so it is set well above what a client's connections in flight need, while a
    /// stranger cannot open streams without end (h2 refuses the ones past it).
    pub calls: u32,
    /// SETTINGS_MAX_HEADER_LIST_SIZE: a call's headers are a path, a content type, a user
    /// agent and a few more; h2's default would let one request hold 16 MiB of them.
    pub header_list: u32,
    /// A connection with no call open for this long is closed (as is one whose client never
    /// finishes the HTTP/2 handshake). A client's gRPC stack dials again when it needs to.
    pub idle: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            calls: 1024,
            header_list: 64 * 1024,
            idle: Duration::from_secs(300),
        }
    }
}

/// Calls open on a connection, and when the last one ended.
struct Activity {
    open: AtomicUsize,
    since: Mutex<Instant>,
}

impl Activity {
    /// How long the connection has had no call (zero while one is open).
    fn idle_for(&self) -> Duration {
        if self.open.load(Ordering::Acquire) > 0 {
            return Duration::ZERO;
        }
        self.since
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .elapsed()
    }
}

/// Counts one open call until dropped (with the call's stream).
pub(super) struct Call(Arc<Activity>);

impl Call {
    fn new(a: &Arc<Activity>) -> Call {
        a.open.fetch_add(1, Ordering::AcqRel);
        Call(a.clone())
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        *self.0.since.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response without a body (its parts are all valid; a bare 200 were they not).
fn response(b: http::response::Builder) -> Response<()> {
    b.body(()).unwrap_or_default()
}

/// The server side: serves the calls of one HTTP/2 connection.
pub struct GrpcServer {
    pub settings: Arc<GrpcSettings>,
    pub trusted_xff: Arc<[String]>,
}

impl GrpcServer {
    /// Serves `stream` (HTTP/2 after TLS, or h2c with prior knowledge) until it ends; each
    /// call on the Tun or TunMulti path goes to `each` with its connection info.
    pub async fn serve(
        &self,
        stream: BoxStream,
        info: &ConnInfo,
        each: &(dyn Fn(BoxStream, ConnInfo) + Send + Sync),
    ) -> io::Result<()> {
        self.serve_within(Limits::default(), stream, info, each)
            .await
    }

    pub(super) async fn serve_within(
        &self,
        limits: Limits,
        stream: BoxStream,
        info: &ConnInfo,
        each: &(dyn Fn(BoxStream, ConnInfo) + Send + Sync),
    ) -> io::Result<()> {
        let handshake = h2::server::Builder::new()
            .max_frame_size(MAX_FRAME)
            .initial_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONN_WINDOW)
            .max_concurrent_streams(limits.calls)
            .max_header_list_size(limits.header_list)
            .handshake::<_, Bytes>(stream);
        let mut conn = tokio::time::timeout(limits.idle, handshake)
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "gRPC: no HTTP/2 handshake"))?
            .map_err(h2_err)?;
        let activity = Arc::new(Activity {
            open: AtomicUsize::new(0),
            since: Mutex::new(Instant::now()),
        });
        loop {
            let left = limits.idle.saturating_sub(activity.idle_for());
            let r = match tokio::time::timeout(left, conn.accept()).await {
                Ok(Some(r)) => r,
                Ok(None) => break,
                Err(_) if activity.idle_for() >= limits.idle => {
                    tracing::debug!("gRPC: connection from {} idle, closed", info.source);
                    conn.graceful_shutdown();
                    let drain = async { while conn.accept().await.is_some() {} };
                    let _ = tokio::time::timeout(Duration::from_secs(5), drain).await;
                    break;
                }
                Err(_) => continue,
            };
            let (req, mut respond) = r.map_err(h2_err)?;
            let path = req.uri().path();
            let grpc = req
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("application/grpc"));
            if req.method() != http::Method::POST || !grpc {
                tracing::info!(
                    "gRPC: {} {path} from {} refused (not a gRPC call)",
                    req.method(),
                    info.source
                );
                let r = response(Response::builder().status(StatusCode::UNSUPPORTED_MEDIA_TYPE));
                let _ = respond.send_response(r, true);
                continue;
            }
            if path != self.settings.tun && path != self.settings.tun_multi {
                tracing::info!("gRPC: call to unknown {path} from {}", info.source);
                // What grpc-go answers: trailers only, UNIMPLEMENTED.
                let r = response(
                    Response::builder()
                        .status(StatusCode::OK)
                        .header("content-type", "application/grpc")
                        .header("grpc-status", "12")
                        .header("grpc-message", format!("unknown service {path}")),
                );
                let _ = respond.send_response(r, true);
                continue;
            }
            let mut call_info = info.clone();
            if let Some(ip) =
                crate::transport::upgrade::forwarded_for_map(req.headers(), &self.trusted_xff)
            {
                call_info.source = Endpoint::Ip(std::net::SocketAddr::new(ip, 0));
            }
            call_info.path = Some(path.into());
            let body = req.into_body();
            let r = response(
                Response::builder()
                    .status(StatusCode::OK)
                    .header("content-type", "application/grpc"),
            );
            let send = match respond.send_response(r, false) {
                Ok(s) => s,
                Err(e) => {
                    tracing::debug!("gRPC: {e}");
                    continue;
                }
            };
            let mut s = GrpcStream::new(RecvState::Body(body), send, true);
            s._call = Some(Call::new(&activity));
            each(Box::new(s), call_info);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

    const HEADERS: u8 = 1;
    const RST_STREAM: u8 = 3;
    const SETTINGS: u8 = 4;
    const GOAWAY: u8 = 7;
    const REFUSED_STREAM: u32 = 7;

    fn frame(ty: u8, flags: u8, id: u32, payload: &[u8]) -> Vec<u8> {
        let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        f.extend_from_slice(&[ty, flags]);
        f.extend_from_slice(&id.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    /// HPACK integer with a 7-bit prefix.
    fn int7(mut v: usize, out: &mut Vec<u8>) {
        if v < 127 {
            out.push(v as u8);
            return;
        }
        out.push(127);
        v -= 127;
        while v >= 128 {
            out.push((v % 128) as u8 | 0x80);
            v /= 128;
        }
        out.push(v as u8);
    }

    /// A header block of literal fields, not indexed.
    fn block(fields: &[(&str, &str)]) -> Vec<u8> {
        let mut b = Vec::new();
        for (n, v) in fields {
            b.push(0);
            int7(n.len(), &mut b);
            b.extend_from_slice(n.as_bytes());
            int7(v.len(), &mut b);
            b.extend_from_slice(v.as_bytes());
        }
        b
    }

    fn call(extra: &[(&str, &str)]) -> Vec<u8> {
        let mut f = vec![
            (":method", "POST"),
            (":scheme", "http"),
            (":path", "/svc/Tun"),
            (":authority", "h.test"),
            ("content-type", "application/grpc"),
        ];
        f.extend_from_slice(extra);
        block(&f)
    }

    async fn read_frame(c: &mut DuplexStream) -> Option<(u8, u8, u32, Vec<u8>)> {
        let mut h = [0u8; 9];
        c.read_exact(&mut h).await.ok()?;
        let len = u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize;
        let id = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
        let mut p = vec![0u8; len];
        c.read_exact(&mut p).await.ok()?;
        Some((h[3], h[4], id, p))
    }

    type Calls = Arc<Mutex<Vec<(BoxStream, ConnInfo)>>>;

    /// A server on one end of a pipe with `limits`; the client end, past the settings
    /// exchange; the calls it accepted; its task.
    async fn start(limits: Limits) -> (DuplexStream, Calls, tokio::task::JoinHandle<()>) {
        let (mut c, s) = tokio::io::duplex(1 << 20);
        let calls: Calls = Arc::default();
        let held = calls.clone();
        let task = tokio::spawn(async move {
            let server = GrpcServer {
                settings: Arc::new(GrpcSettings::new("svc").unwrap()),
                trusted_xff: Arc::from(Vec::new()),
            };
            let info = ConnInfo::new(
                Endpoint::Ip("127.0.0.1:1".parse().unwrap()),
                Endpoint::Ip("127.0.0.1:2".parse().unwrap()),
            );
            let each = move |s: BoxStream, i: ConnInfo| held.lock().unwrap().push((s, i));
            let _ = server.serve_within(limits, Box::new(s), &info, &each).await;
        });
        c.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            .await
            .unwrap();
        c.write_all(&frame(SETTINGS, 0, 0, &[])).await.unwrap();
        // The server's limits hold once its settings are acknowledged.
        let (ty, flags, _, _) = read_frame(&mut c).await.unwrap();
        assert_eq!((ty, flags), (SETTINGS, 0));
        c.write_all(&frame(SETTINGS, 1, 0, &[])).await.unwrap();
        (c, calls, task)
    }

    /// Reads frames until `want` matches one (or the connection ends, or 5 s pass).
    async fn wait_for(c: &mut DuplexStream, want: impl Fn(u8, u32, &[u8]) -> bool) -> bool {
        let look = async {
            while let Some((ty, _, id, p)) = read_frame(c).await {
                if want(ty, id, &p) {
                    return true;
                }
            }
            false
        };
        tokio::time::timeout(Duration::from_secs(5), look)
            .await
            .unwrap_or(false)
    }

    fn refused(id: u32) -> impl Fn(u8, u32, &[u8]) -> bool {
        move |ty, i, p| ty == RST_STREAM && i == id && p == REFUSED_STREAM.to_be_bytes()
    }

    #[tokio::test]
    async fn streams_past_the_limit_are_refused() {
        let limits = Limits {
            calls: 4,
            ..Limits::default()
        };
        let (mut c, calls, _task) = start(limits).await;
        for id in [1, 3, 5, 7, 9, 11] {
            c.write_all(&frame(HEADERS, 4, id, &call(&[])))
                .await
                .unwrap();
        }
        assert!(wait_for(&mut c, refused(9)).await, "stream 9 not refused");
        assert!(wait_for(&mut c, refused(11)).await, "stream 11 not refused");
        assert_eq!(calls.lock().unwrap().len(), 4);
    }

    #[tokio::test]
    async fn an_oversized_header_list_is_refused() {
        let limits = Limits {
            header_list: 4096,
            ..Limits::default()
        };
        let (mut c, calls, _task) = start(limits).await;
        let big = "x".repeat(8000);
        c.write_all(&frame(HEADERS, 4, 1, &call(&[("x-big", &big)])))
            .await
            .unwrap();
        c.write_all(&frame(HEADERS, 4, 3, &call(&[])))
            .await
            .unwrap();
        // h2 answers 431 and resets the stream.
        let reset = |ty, id, _: &[u8]| ty == RST_STREAM && id == 1;
        assert!(wait_for(&mut c, reset).await, "stream 1 not refused");
        // The connection goes on: the next call is taken.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let calls = calls.lock().unwrap();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].1.path.as_deref(), Some("/svc/Tun"));
    }

    #[tokio::test]
    async fn a_connection_without_calls_is_closed_after_the_idle_time() {
        let limits = Limits {
            idle: Duration::from_millis(300),
            ..Limits::default()
        };
        let (mut c, calls, task) = start(limits).await;
        c.write_all(&frame(HEADERS, 4, 1, &call(&[])))
            .await
            .unwrap();
        // While the call is open, the connection stays.
        tokio::time::sleep(Duration::from_millis(800)).await;
        assert_eq!(calls.lock().unwrap().len(), 1);
        assert!(!task.is_finished(), "closed with a call open");
        calls.lock().unwrap().clear();
        assert!(wait_for(&mut c, |ty, _, _| ty == GOAWAY).await, "no GOAWAY");
        drop(c);
        tokio::time::timeout(Duration::from_secs(6), task)
            .await
            .expect("the idle connection was not closed")
            .unwrap();
    }
}
