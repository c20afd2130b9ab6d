//! A connection that is not REALITY's, handed to the target for good, with the
//! `limitFallback*` token buckets.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::Server;
use crate::transport::BoxStream;

/// Carries a stranger (the client) and the target to each other until either ends: the
/// relay's own loop (splice between sockets, its idle and half-close times), handed in by the
/// layer that owns it, since the transport layer sits below the relay. The `limitFallback*`
/// buckets, and a server given no relay (unit tests), copy with [`limited_copy`] instead.
pub type StrangerRelay = fn(BoxStream, BoxStream) -> Pin<Box<dyn Future<Output = ()> + Send>>;

impl Server {
    /// Hands the client to the target for good: what the target sent so far (`s2c`) first,
    /// then both ways until either side ends. Runs outside the handshake timeout.
    pub(super) fn splice_to_target(&self, client: BoxStream, target: BoxStream, s2c: Vec<u8>) {
        let up = self.settings.limit_upload;
        let down = self.settings.limit_download;
        let relay = self.strangers.get().copied();
        tokio::spawn(async move {
            let mut client = client;
            if !s2c.is_empty() && client.write_all(&s2c).await.is_err() {
                return;
            }
            let limited = up.bytes_per_sec > 0 || down.bytes_per_sec > 0;
            match relay {
                Some(relay) if !limited => relay(client, target).await,
                _ => {
                    let (cr, cw) = tokio::io::split(client);
                    let (tr, tw) = tokio::io::split(target);
                    let _ = tokio::join!(limited_copy(cr, tw, up), limited_copy(tr, cw, down));
                }
            }
        });
    }
}

/// Copies with a token bucket (`limitFallback*`): `after_bytes` free, then `bytes_per_sec` with
/// bursts of `burst_bytes_per_sec`.
async fn limited_copy<R, W>(mut r: R, mut w: W, l: super::super::RateLimit) -> io::Result<()>
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 16 * 1024];
    let mut total: u64 = 0;
    let burst = if l.burst_bytes_per_sec > 0 {
        l.burst_bytes_per_sec
    } else {
        l.bytes_per_sec
    } as f64;
    let mut tokens = burst;
    let mut last = tokio::time::Instant::now();
    loop {
        let n = r.read(&mut buf).await?;
        if n == 0 {
            let _ = w.shutdown().await;
            return Ok(());
        }
        total += n as u64;
        if l.bytes_per_sec > 0 && total > l.after_bytes {
            let now = tokio::time::Instant::now();
            tokens = (tokens + now.duration_since(last).as_secs_f64() * l.bytes_per_sec as f64)
                .min(burst);
            last = now;
            tokens -= n as f64;
            if tokens < 0.0 {
                tokio::time::sleep(Duration::from_secs_f64(-tokens / l.bytes_per_sec as f64)).await;
            }
        }
        w.write_all(&buf[..n]).await?;
    }
}
