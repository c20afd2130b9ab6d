//! Many connections: idle ones held open, hostile clients, and bursts of fresh connections.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::wire::{random_bytes, Header, Mode};

use super::latency::{percentiles, Percentiles};
use super::target::{Conn, Target};

/// Opens `n` connections through the chain, each confirmed end to end by the receiver's hello
/// byte, and returns them open.
pub async fn hold_idle(target: &Target, n: usize, timeout: Duration) -> Result<Vec<Conn>> {
    let mut held = Vec::with_capacity(n);
    let mut done = 0;
    while done < n {
        let batch = (n - done).min(64);
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..batch {
            let t = target.clone();
            set.spawn(async move {
                match tokio::time::timeout(timeout, t.hello()).await {
                    Ok(r) => r,
                    Err(_) => Err(anyhow!("timed out")),
                }
            });
        }
        while let Some(r) = set.join_next().await {
            let s = r
                .map_err(|e| anyhow!("{e}"))?
                .with_context(|| format!("idle connection {} of {n}", held.len() + 1))?;
            held.push(s);
        }
        done += batch;
    }
    Ok(held)
}

/// Connections a hostile or broken client holds (the soak test): `n` that connect to the
/// entry and never send a byte, and `n` that ask the receiver for a large download through the
/// chain and never read it (the proxies must not buffer it without bound).
pub struct Hostile {
    pub silent: Vec<TcpStream>,
    pub never_reading: Vec<Conn>,
}

/// Opens [`Hostile`] connections: `n` of each kind.
pub async fn hold_hostile(target: &Target, n: usize, timeout: Duration) -> Result<Hostile> {
    let mut silent = Vec::with_capacity(n);
    for _ in 0..n {
        silent.push(
            TcpStream::connect(target.connect)
                .await
                .with_context(|| format!("connecting to {}", target.connect))?,
        );
    }
    let mut never_reading = Vec::with_capacity(n);
    for i in 0..n {
        let open = async {
            let mut s = target.open().await?;
            let h = Header {
                mode: Mode::Download,
                arg: 1 << 40,
            };
            s.write_all(&h.encode()).await?;
            s.flush().await?;
            Ok::<_, anyhow::Error>(s)
        };
        let s = tokio::time::timeout(timeout, open)
            .await
            .map_err(|_| anyhow!("never-reading connection {}: timed out", i + 1))??;
        never_reading.push(s);
    }
    Ok(Hostile {
        silent,
        never_reading,
    })
}

/// A burst of fresh connections (the handshake test).
#[derive(Clone, Debug, serde::Serialize)]
pub struct ConnBurst {
    /// Connections made, each confirmed by its echo.
    pub conns: usize,
    /// How many were in flight at once.
    pub concurrency: usize,
    /// Wall time of the whole burst.
    pub secs: f64,
    pub conns_per_s: f64,
    /// Per connection: connect, chain set-up, `size` bytes to the receiver and all of them
    /// back (the echo is the first byte back: a few bytes arrive in one segment).
    pub ttfb: Percentiles,
}

/// One fresh connection: connect (SOCKS5 and inner TLS if the target has them), send an echo
/// request of `size` bytes in the same write as the header, read the echo, close. Returns the
/// time from connect to the echo.
pub async fn one_echo(target: &Target, msg: &[u8]) -> Result<Duration> {
    let t0 = Instant::now();
    let mut s = target.open().await?;
    let mut req = Header {
        mode: Mode::Echo,
        arg: msg.len() as u64,
    }
    .encode()
    .to_vec();
    req.extend_from_slice(msg);
    s.write_all(&req).await?;
    s.flush().await?;
    let mut back = vec![0u8; msg.len()];
    s.read_exact(&mut back).await.context("reading the echo")?;
    let d = t0.elapsed();
    if back != msg {
        bail!("the echo differs from the request");
    }
    let _ = s.shutdown().await;
    Ok(d)
}

/// `count` fresh connections through the chain, `concurrency` in flight at a time (each worker
/// opens the next as soon as its last one was echoed), each as [`one_echo`].
pub async fn fresh_conns(
    target: &Target,
    count: usize,
    concurrency: usize,
    size: usize,
    timeout: Duration,
) -> Result<ConnBurst> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    if count == 0 || concurrency == 0 {
        bail!("count and concurrency must be at least 1");
    }
    let msg = Arc::new(random_bytes(size.max(1), 0x4a5));
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..concurrency.min(count) {
        let (t, msg, next) = (target.clone(), msg.clone(), next.clone());
        set.spawn(async move {
            let mut v = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    return Ok::<_, anyhow::Error>(v);
                }
                match tokio::time::timeout(timeout, one_echo(&t, &msg)).await {
                    Ok(Ok(d)) => v.push(d),
                    Ok(Err(e)) => return Err(e.context(format!("fresh connection {}", i + 1))),
                    Err(_) => bail!("fresh connection {} timed out", i + 1),
                }
            }
        });
    }
    let mut all = Vec::with_capacity(count);
    while let Some(r) = set.join_next().await {
        all.extend(r.map_err(|e| anyhow!("task failed: {e}"))??);
    }
    let secs = start.elapsed().as_secs_f64();
    Ok(ConnBurst {
        conns: all.len(),
        concurrency: concurrency.min(count),
        secs,
        conns_per_s: all.len() as f64 / secs,
        ttfb: percentiles(all),
    })
}
