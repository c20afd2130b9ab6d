//! The `metrics` endpoint: Xray's expvar-style `/debug/vars` JSON and Prometheus text on `/metrics`.

use std::net::SocketAddr;
use std::sync::Arc;

use serde_json::{json, Map, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::app::stats::Stats;

/// `{"stats": {"inbound": {"TAG": {"uplink": N, "downlink": N}}, "outbound": …, "user": …}}`
pub fn debug_vars(stats: &Stats) -> Value {
    let mut groups: Map<String, Value> = Map::new();
    for (name, v) in stats.snapshot(false) {
        let parts: Vec<&str> = name.split(">>>").collect();
        if let [kind, tag, "traffic", dir] = parts.as_slice() {
            let g = groups.entry(kind.to_string()).or_insert_with(|| json!({}));
            if let Some(t) = g
                .as_object_mut()
                .map(|g| g.entry(tag.to_string()).or_insert_with(|| json!({})))
                .and_then(Value::as_object_mut)
            {
                t.insert(dir.to_string(), json!(v));
            }
        }
    }
    let mut rejected: Map<String, Value> = Map::new();
    for (tag, reason, n) in stats.rejects.snapshot() {
        if let Some(t) = rejected
            .entry(tag)
            .or_insert_with(|| json!({}))
            .as_object_mut()
        {
            t.insert(reason.to_string(), json!(n));
        }
    }
    json!({
        "cmdline": std::env::args().collect::<Vec<_>>(),
        "stats": groups,
        "rejected": rejected,
        "ferry": process_gauges().iter().map(|(k, _, v)| (k.to_string(), json!(v))).collect::<Map<String, Value>>(),
    })
}

/// What the process holds now: (name, help, value). Leaks show here first: after a load
/// ends, connections, relays and pipes go back to zero or the pool size, and descriptors,
/// tasks and RSS to their idle level.
pub fn process_gauges() -> Vec<(&'static str, &'static str, u64)> {
    let fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64);
    let rss_kib = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0);
    let tasks =
        tokio::runtime::Handle::try_current().map_or(0, |h| h.metrics().num_alive_tasks() as u64);
    vec![
        (
            "connections",
            "Inbound connections being served.",
            crate::stats::live_connections() as u64,
        ),
        (
            "relays",
            "Relays moving bytes (one per TCP session).",
            crate::relay::live_relays() as u64,
        ),
        (
            "pipes",
            "Splice pipes open (in use or pooled).",
            crate::relay::pool::open_pipes() as u64,
        ),
        ("tasks", "Tokio tasks alive.", tasks),
        ("fds", "File descriptors open.", fds),
        ("rss_kib", "Resident set size, KiB.", rss_kib),
    ]
}

fn escape_label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Prometheus exposition text.
pub fn prometheus(stats: &Stats) -> String {
    let mut out = String::from(
        "# HELP ferry_traffic_bytes_total Bytes relayed, by inbound/outbound/user and direction.\n# TYPE ferry_traffic_bytes_total counter\n",
    );
    for (name, v) in stats.snapshot(false) {
        let parts: Vec<&str> = name.split(">>>").collect();
        if let [kind, tag, "traffic", dir] = parts.as_slice() {
            out.push_str(&format!(
                "ferry_traffic_bytes_total{{kind=\"{}\",tag=\"{}\",direction=\"{}\"}} {v}\n",
                escape_label(kind),
                escape_label(tag),
                escape_label(dir)
            ));
        }
    }
    out.push_str(
        "# HELP ferry_rejected_handshakes_total Handshakes an inbound refused, by reason.\n# TYPE ferry_rejected_handshakes_total counter\n",
    );
    for (tag, reason, n) in stats.rejects.snapshot() {
        out.push_str(&format!(
            "ferry_rejected_handshakes_total{{inbound=\"{}\",reason=\"{}\"}} {n}\n",
            escape_label(&tag),
            escape_label(reason)
        ));
    }
    for (name, help, v) in process_gauges() {
        out.push_str(&format!(
            "# HELP ferry_{name} {help}\n# TYPE ferry_{name} gauge\nferry_{name} {v}\n"
        ));
    }
    out
}

/// How long a failed accept (EMFILE, ENFILE, ENOBUFS) waits before the next, as the API
/// listener does: retrying at once would spin a core while the failure lasts.
const ACCEPT_BACKOFF: std::time::Duration = std::time::Duration::from_millis(50);

/// Serves the endpoint until the task is dropped.
pub async fn serve(listener: TcpListener, stats: Arc<Stats>) {
    accept_loop(
        || listener.accept(),
        |(sock, _)| {
            tokio::spawn(serve_conn(sock, stats.clone()));
        },
    )
    .await
}

/// Hands what `accept` yields to `each`, backing off after a failure.
async fn accept_loop<T, F: std::future::Future<Output = std::io::Result<T>>>(
    mut accept: impl FnMut() -> F,
    mut each: impl FnMut(T),
) {
    loop {
        match accept().await {
            Ok(c) => each(c),
            Err(e) => {
                tracing::warn!("metrics accept: {e}");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
}

/// Answers one HTTP request on `sock` (a TCP connection, or the in-memory stream the
/// metrics outbound hands to a routed connection).
pub async fn serve_conn<S: AsyncRead + AsyncWrite + Unpin>(mut sock: S, stats: Arc<Stats>) {
    let mut buf = vec![0u8; 4096];
    let mut n = 0;
    let read = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        while n < buf.len() {
            let m = sock.read(&mut buf[n..]).await?;
            if m == 0 {
                break;
            }
            n += m;
            if buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                break;
            }
        }
        Ok::<_, std::io::Error>(())
    })
    .await;
    if !matches!(read, Ok(Ok(()))) {
        return;
    }
    let head = String::from_utf8_lossy(&buf[..n]);
    let path = head.split_whitespace().nth(1).unwrap_or("/");
    let (status, ctype, body) = match path.split('?').next().unwrap_or("/") {
        "/debug/vars" => ("200 OK", "application/json", debug_vars(&stats).to_string()),
        "/metrics" => ("200 OK", "text/plain; version=0.0.4", prometheus(&stats)),
        _ => ("404 Not Found", "text/plain", "not found\n".to_string()),
    };
    let resp = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = sock.write_all(resp.as_bytes()).await;
    let _ = sock.shutdown().await;
}

/// The outbound `metrics.tag` names (as in Xray): a connection routed to it is answered by the
/// metrics endpoint itself, so an inbound can serve metrics without `metrics.listen`.
pub struct MetricsOutbound {
    pub stats: Arc<Stats>,
}

#[async_trait::async_trait]
impl crate::transport::Dialer for MetricsOutbound {
    async fn dial_tcp(
        &self,
        _dest: &crate::common::Destination,
    ) -> std::io::Result<crate::transport::BoxStream> {
        let (ours, theirs) = tokio::io::duplex(16 * 1024);
        tokio::spawn(serve_conn(ours, self.stats.clone()));
        Ok(Box::new(theirs))
    }

    async fn dial_udp(
        &self,
        _dest: &crate::common::Destination,
    ) -> std::io::Result<Box<dyn crate::transport::PacketConn>> {
        Err(std::io::Error::other(
            "the metrics outbound serves TCP only",
        ))
    }
}

/// Binds the metrics listener.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn formats() {
        let s = Stats::default();
        s.counter("inbound>>>in>>>traffic>>>uplink")
            .fetch_add(3, Ordering::Relaxed);
        s.counter("user>>>a@b>>>traffic>>>downlink")
            .fetch_add(4, Ordering::Relaxed);
        s.rejects.count("in", "replay");
        let v = debug_vars(&s);
        assert_eq!(v["rejected"]["in"]["replay"], 1);
        assert_eq!(v["stats"]["inbound"]["in"]["uplink"], 3);
        assert_eq!(v["stats"]["user"]["a@b"]["downlink"], 4);
        let p = prometheus(&s);
        assert!(
            p.contains(
                "ferry_traffic_bytes_total{kind=\"inbound\",tag=\"in\",direction=\"uplink\"} 3\n"
            ),
            "{p}"
        );
        assert!(
            p.contains("ferry_rejected_handshakes_total{inbound=\"in\",reason=\"replay\"} 1\n"),
            "{p}"
        );
    }

    /// A listener whose accepts fail (out of descriptors) is retried after a pause, not in a
    /// loop that spins; accepts that work again are served.
    #[tokio::test]
    async fn failed_accepts_back_off() {
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let served = std::sync::atomic::AtomicUsize::new(0);
        let run = accept_loop(
            || {
                let n = calls.fetch_add(1, Ordering::Relaxed);
                async move {
                    if n % 4 == 3 {
                        Ok(n)
                    } else {
                        Err(std::io::Error::from_raw_os_error(libc::EMFILE))
                    }
                }
            },
            |_| {
                served.fetch_add(1, Ordering::Relaxed);
            },
        );
        let _ = tokio::time::timeout(std::time::Duration::from_millis(500), run).await;
        let n = calls.load(Ordering::Relaxed);
        // 500 ms of 50 ms pauses after each failure: about 13 calls; spinning would be millions.
        assert!((4..=20).contains(&n), "{n} accepts");
        assert_eq!(served.load(Ordering::Relaxed), n / 4);
    }
}
