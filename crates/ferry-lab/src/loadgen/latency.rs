//! Latency: time to first byte over fresh connections and round trips on one connection.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::wire::{random_bytes, Header, Mode};

use super::target::Target;

/// Latency figures in milliseconds.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Percentiles {
    pub samples: usize,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
}

/// Nearest-rank percentiles of durations.
pub fn percentiles(mut v: Vec<Duration>) -> Percentiles {
    v.sort();
    let at = |p: f64| -> f64 {
        if v.is_empty() {
            return 0.0;
        }
        let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
        let i = rank.clamp(1, v.len()) - 1;
        v.get(i).map(|d| d.as_secs_f64() * 1e3).unwrap_or(0.0)
    };
    Percentiles {
        samples: v.len(),
        p50_ms: at(50.0),
        p90_ms: at(90.0),
        p99_ms: at(99.0),
    }
}

/// Time to first byte: connect (and SOCKS handshake), send a hello, wait for the receiver's
/// first byte. Covers the whole chain's connection set-up.
pub async fn ttfb(target: &Target, count: usize, timeout: Duration) -> Result<Percentiles> {
    let mut v = Vec::with_capacity(count);
    for i in 0..count {
        let t0 = Instant::now();
        match tokio::time::timeout(timeout, target.hello()).await {
            Ok(Ok(_)) => v.push(t0.elapsed()),
            Ok(Err(e)) => return Err(e.context(format!("first-byte probe {}", i + 1))),
            Err(_) => bail!("first-byte probe {} timed out", i + 1),
        }
    }
    Ok(percentiles(v))
}

/// Request/response round trips of `size`-byte messages on one connection.
pub async fn round_trips(
    target: &Target,
    size: usize,
    count: usize,
    timeout: Duration,
) -> Result<Percentiles> {
    let mut s = target.open().await?;
    s.write_all(
        &Header {
            mode: Mode::Echo,
            arg: size as u64,
        }
        .encode(),
    )
    .await?;
    s.flush().await?;
    let msg = random_bytes(size, 7);
    let mut back = vec![0u8; size];
    let mut v = Vec::with_capacity(count);
    for i in 0..count {
        let t0 = Instant::now();
        let once = async {
            s.write_all(&msg).await?;
            s.flush().await?;
            s.read_exact(&mut back).await?;
            Ok::<_, std::io::Error>(())
        };
        match tokio::time::timeout(timeout, once).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => bail!("round trip {}: {e}", i + 1),
            Err(_) => bail!("round trip {} timed out", i + 1),
        }
        v.push(t0.elapsed());
        if back != msg {
            bail!("round trip {}: the echo differs from the request", i + 1);
        }
    }
    Ok(percentiles(v))
}
