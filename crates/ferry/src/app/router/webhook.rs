//! A routing rule's `webhook`: when the rule picks the outbound of a connection, an HTTP POST
//! with a JSON event goes to a URL, as Xray's `app/router/webhook.go` sends it (Remnawave's
//! torrent blocker listens for these on a unix socket).
//!
//! `url` is `http://host[:port]/path`, or a unix socket as Xray writes it: `/path/x.sock`,
//! `@abstract`, `@@padded`, each optionally followed by `:/http/path` (`/` without). Identical
//! events of one user within `deduplication` seconds are sent once. The POST runs in its own
//! task with a 5 s limit; failures are logged, never felt by the connection.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::common::{Address, Destination};
use crate::config::reader::{ConfigError, Obj, Result};
use crate::session::{Endpoint, Session};
use crate::transport::listener::UnixPath;

/// How long one POST may take, connect to response (Xray's client timeout).
const TIMEOUT: Duration = Duration::from_secs(5);
/// POSTs in flight per webhook at most: a flood of matching connections must not turn into a
/// flood of sockets (events beyond it are dropped and counted in the next warning).
const MAX_IN_FLIGHT: usize = 256;

/// Where the POST goes.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    Tcp { host: String, port: u16 },
    Unix(UnixPath),
}

/// One rule's webhook.
#[derive(Debug)]
pub struct Webhook {
    target: Target,
    /// The request target (path and query).
    path: String,
    /// The Host header.
    host: String,
    headers: Vec<(String, String)>,
    deduplication: Duration,
    /// When each user's last event was sent (with deduplication on).
    seen: Mutex<HashMap<String, Instant>>,
    /// POSTs in flight.
    in_flight: std::sync::atomic::AtomicUsize,
    /// Events dropped because [`MAX_IN_FLIGHT`] were in flight, since the last warning.
    dropped: std::sync::atomic::AtomicUsize,
}

impl Webhook {
    /// Reads a rule's `webhook` object; `None` for an empty `url` (Xray then has none).
    pub fn parse(o: &Obj<'_>) -> Result<Option<Webhook>> {
        let url = o.str("url")?.unwrap_or_default();
        let deduplication = Duration::from_secs(o.u64("deduplication")?.unwrap_or(0));
        let headers = crate::config::headers::headers(o)?;
        if url.is_empty() {
            return Ok(None);
        }
        let bad = |why: &str| ConfigError::new(o.key_path("url"), why.to_string());
        let (target, host, path) = if url.starts_with('/') || url.starts_with('@') {
            let (sock, path) = match url.find(":/") {
                Some(i) => (&url[..i], &url[i + 1..]),
                None => (url.as_str(), "/"),
            };
            let sock = UnixPath::parse(sock).ok_or_else(|| bad("not a unix socket path"))?;
            (
                Target::Unix(sock),
                "localhost".to_string(),
                path.to_string(),
            )
        } else {
            let uri: http::Uri = url.parse().map_err(|e| bad(&format!("not a URL: {e}")))?;
            match uri.scheme_str() {
                Some("http") => {}
                Some("https") => return Err(bad("https webhooks are not supported yet")),
                _ => return Err(bad("an http:// URL or a unix socket path")),
            }
            let h = uri.host().ok_or_else(|| bad("no host"))?;
            let port = uri.port_u16().unwrap_or(80);
            let host = match uri.port_u16() {
                Some(p) => format!("{h}:{p}"),
                None => h.to_string(),
            };
            let path = uri
                .path_and_query()
                .map(|p| p.as_str().to_string())
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| "/".into());
            let h = h.trim_start_matches('[').trim_end_matches(']').to_string();
            (Target::Tcp { host: h, port }, host, path)
        };
        Ok(Some(Webhook {
            target,
            path,
            host,
            headers,
            deduplication,
            seen: Mutex::new(HashMap::new()),
            in_flight: Default::default(),
            dropped: Default::default(),
        }))
    }

    /// The rule picked `outbound` for `s`: sends the event (unless it is a repeat within the
    /// deduplication window).
    pub fn fire(self: &std::sync::Arc<Self>, s: &Session, outbound: &str) {
        let email = s.user.as_ref().map(|u| u.email.to_string());
        if self.is_duplicate(email.as_deref().unwrap_or("")) {
            return;
        }
        use std::sync::atomic::Ordering::Relaxed;
        if self.in_flight.fetch_add(1, Relaxed) >= MAX_IN_FLIGHT {
            self.in_flight.fetch_sub(1, Relaxed);
            if self.dropped.fetch_add(1, Relaxed) == 0 {
                tracing::warn!(
                    "webhook: {MAX_IN_FLIGHT} POSTs in flight; dropping events until one ends"
                );
            }
            return;
        }
        let body = event(s, outbound, email).to_string();
        let me = self.clone();
        tokio::spawn(async move {
            let result = tokio::time::timeout(TIMEOUT, me.post(&body)).await;
            me.in_flight.fetch_sub(1, Relaxed);
            let dropped = me.dropped.swap(0, Relaxed);
            if dropped > 0 {
                tracing::warn!("webhook: {dropped} event(s) dropped while {MAX_IN_FLIGHT} POSTs were in flight");
            }
            match result {
                Ok(Ok(status)) if status >= 400 => {
                    tracing::warn!("webhook: POST returned status {status}")
                }
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::info!("webhook: POST failed: {e}"),
                Err(_) => tracing::info!("webhook: POST failed: no answer in 5 s"),
            }
        });
    }

    /// Whether an event of `email` was sent within the window (and if not, records this one).
    fn is_duplicate(&self, email: &str) -> bool {
        if self.deduplication.is_zero() || email.is_empty() {
            return false;
        }
        let now = Instant::now();
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen
            .get(email)
            .is_some_and(|t| now.duration_since(*t) < self.deduplication)
        {
            return true;
        }
        if seen.len() >= 4096 {
            let window = self.deduplication;
            seen.retain(|_, t| now.duration_since(*t) < window);
        }
        seen.insert(email.to_string(), now);
        false
    }

    /// One POST; the response's status code.
    async fn post(&self, body: &str) -> std::io::Result<u16> {
        let mut req = format!(
            "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
            self.path,
            self.host,
            body.len()
        );
        for (k, v) in &self.headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        req.push_str(body);
        match &self.target {
            Target::Tcp { host, port } => {
                let s = tokio::net::TcpStream::connect((host.as_str(), *port)).await?;
                exchange(s, req.as_bytes()).await
            }
            Target::Unix(p) => exchange(p.connect().await?, req.as_bytes()).await,
        }
    }
}

/// Writes the request and reads the status code of the answer.
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, req: &[u8]) -> std::io::Result<u16> {
    s.write_all(req).await?;
    let mut head = Vec::new();
    let mut buf = [0u8; 512];
    while !head.windows(2).any(|w| w == b"\r\n") && head.len() < 4096 {
        let n = s.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&head);
    line.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, "no HTTP status line"))
}

/// `host:port` as Go's net.JoinHostPort writes it (IPv6 in brackets).
fn join(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

fn endpoint(e: &Endpoint) -> Option<String> {
    match e {
        Endpoint::Ip(a) => Some(join(&a.ip().to_string(), a.port())),
        Endpoint::Unix(_) => None,
    }
}

fn destination(d: &Destination) -> String {
    match &d.addr {
        Address::Ip(ip) => join(&ip.to_string(), d.port),
        Address::Domain(n) => join(n, d.port),
    }
}

/// The event, with Xray's keys (null where Xray has nothing).
fn event(s: &Session, outbound: &str, email: Option<String>) -> serde_json::Value {
    let sniffed = s.sniffed.as_deref();
    // Routing matched the sniffed name (routeOnly) while the destination stays as sent.
    // Xray writes the outbound's targets as its net.Destination: "tcp:host:port".
    let route_target = sniffed
        .filter(|x| x.route_target && !x.domain.is_empty())
        .map(|x| format!("{}:{}", s.network, join(&x.domain, s.dest.port)));
    let dest = match sniffed.filter(|x| x.route_target && !x.domain.is_empty()) {
        Some(x) => join(&x.domain, s.dest.port),
        None => destination(&s.dest),
    };
    let ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    serde_json::json!({
        "email": email,
        // Xray's inbounds carry a user (level 0) even without accounts.
        "level": s.user.as_ref().map(|u| u.level).unwrap_or(0),
        "protocol": sniffed.map(|x| x.protocol).unwrap_or(""),
        "network": s.network.to_string(),
        "source": endpoint(&s.source),
        "destination": dest,
        "originalTarget": format!("{}:{}", s.network, destination(&s.dest)),
        "routeTarget": route_target,
        "inboundTag": &*s.inbound_tag,
        "inboundName": s.protocol,
        "inboundLocal": endpoint(&s.local),
        "outboundTag": outbound,
        "ts": ts,
    })
}

/// For tests: the target of a parsed webhook.
#[cfg(test)]
fn target_of(w: &Webhook) -> (String, String) {
    let t = match &w.target {
        Target::Tcp { host, port } => join(host, *port),
        Target::Unix(p) => p.text(),
    };
    (t, w.path.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Diagnostics;
    use serde_json::json;

    fn parse(v: serde_json::Value) -> Result<Option<Webhook>> {
        let d = Diagnostics::default();
        let o = Obj::new(&v, "w", &d).unwrap();
        Webhook::parse(&o)
    }

    #[test]
    fn urls_as_xray_reads_them() {
        let t = |u: &str| target_of(&parse(json!({ "url": u })).unwrap().unwrap());
        assert_eq!(
            t("/run/rw.sock:/hook?token=x"),
            ("/run/rw.sock".into(), "/hook?token=x".into())
        );
        assert_eq!(t("@rw:/h"), ("@rw".into(), "/h".into()));
        assert_eq!(t("@@rw"), ("@@rw".into(), "/".into()));
        assert_eq!(
            t("http://127.0.0.1:8080/e"),
            ("127.0.0.1:8080".into(), "/e".into())
        );
        assert_eq!(t("http://[::1]/"), ("[::1]:80".into(), "/".into()));
        assert!(parse(json!({"url": ""})).unwrap().is_none());
        let e = parse(json!({"url": "https://h/x"})).unwrap_err();
        assert_eq!(e.path, "w.url");
        assert!(parse(json!({"url": "ftp://h/x"})).is_err());
        assert!(parse(json!({"url": "/s", "headers": {"a b": "c"}})).is_err());
        let h = parse(json!({"url": "/s", "headers": {"X-Token": "t"}}))
            .unwrap()
            .unwrap();
        assert_eq!(h.headers, vec![("X-Token".to_string(), "t".to_string())]);
    }

    /// A receiver that accepts and never answers: at most MAX_IN_FLIGHT POSTs are open at
    /// once, the rest of a burst is dropped, and the in-flight count comes back down.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_burst_is_capped_in_flight() {
        let dir = std::env::temp_dir().join(format!("ferry-webhook-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let l = tokio::net::UnixListener::bind(&dir).unwrap();
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let a = accepted.clone();
        let server = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((s, _)) = l.accept().await {
                a.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                held.push(s);
            }
        });
        let w = std::sync::Arc::new(
            parse(json!({ "url": dir.to_str().unwrap() }))
                .unwrap()
                .unwrap(),
        );
        let s = Session {
            inbound_tag: "in".into(),
            source: "10.1.2.3:4444".parse().unwrap(),
            local: "127.0.0.1:1080".parse().unwrap(),
            dest: Destination::parse("example.com:443").unwrap(),
            network: crate::common::Network::Tcp,
            user: None,
            protocol: "test",
            sniffed: None,
        };
        for _ in 0..MAX_IN_FLIGHT + 100 {
            w.fire(&s, "out");
        }
        use std::sync::atomic::Ordering::Relaxed;
        assert_eq!(w.in_flight.load(Relaxed), MAX_IN_FLIGHT);
        assert_eq!(w.dropped.load(Relaxed), 100);
        let t = Instant::now();
        while accepted.load(Relaxed) < MAX_IN_FLIGHT && t.elapsed() < Duration::from_secs(3) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(accepted.load(Relaxed), MAX_IN_FLIGHT);
        // Each POST ends at the 5 s limit.
        tokio::time::sleep(TIMEOUT + Duration::from_secs(1)).await;
        assert_eq!(w.in_flight.load(Relaxed), 0);
        server.abort();
        let _ = std::fs::remove_file(&dir);
    }

    #[test]
    fn one_event_per_user_within_the_window() {
        let w = parse(json!({"url": "/s", "deduplication": 60}))
            .unwrap()
            .unwrap();
        assert!(!w.is_duplicate("a"));
        assert!(w.is_duplicate("a"));
        assert!(!w.is_duplicate("b"));
        // No email: never deduplicated (Xray's rule).
        assert!(!w.is_duplicate(""));
        assert!(!w.is_duplicate(""));
        let off = parse(json!({"url": "/s"})).unwrap().unwrap();
        assert!(!off.is_duplicate("a") && !off.is_duplicate("a"));
    }
}
