//! Bulk transfers: verified bytes up or down over one or more connections at once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::wire::{random_bytes, AckReader, Header, Mode, CHUNK};

use super::target::{Conn, Target};

/// Result of one bulk transfer over one or more connections.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Transfer {
    /// Total verified payload bytes.
    pub bytes: u64,
    /// Wall time from the first byte sent to the last byte confirmed, in seconds (µs resolution).
    pub secs: f64,
    /// Per-connection seconds.
    pub per_conn_secs: Vec<f64>,
}

impl Transfer {
    /// Throughput in MB/s (10^6 bytes per second).
    pub fn mb_per_s(&self) -> f64 {
        if self.secs > 0.0 {
            self.bytes as f64 / self.secs / 1e6
        } else {
            0.0
        }
    }
}

/// Options of a bulk transfer.
#[derive(Clone, Debug)]
pub struct BulkOpts {
    /// Bytes per connection.
    pub amount: u64,
    pub concurrency: usize,
    /// Receiver sends, loadgen counts.
    pub reverse: bool,
    /// Give up when nothing moves for this long (loss shows up as a stall).
    pub stall: Duration,
}

/// Runs `concurrency` transfers of `amount` bytes each at once.
pub async fn bulk(target: &Target, o: &BulkOpts) -> Result<Transfer> {
    if o.concurrency == 0 {
        bail!("concurrency must be at least 1");
    }
    let data = Arc::new(random_bytes(CHUNK * 8, 0x1ab));
    // Open every connection and wait for the receiver's "ready" first, so set-up cost stays
    // out of the timing (and no proxy sees a large first burst with its request header).
    let mode = if o.reverse {
        Mode::Download
    } else {
        Mode::Upload
    };
    let mut conns = Vec::with_capacity(o.concurrency);
    for i in 0..o.concurrency {
        let mut s = target.open().await?;
        ready(&mut s, mode, o.amount, o.stall)
            .await
            .with_context(|| format!("connection {}: waiting for the receiver", i + 1))?;
        conns.push(s);
    }
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (i, s) in conns.into_iter().enumerate() {
        let data = data.clone();
        let o = o.clone();
        tasks.push(tokio::spawn(async move {
            let r = if o.reverse {
                download_one(s, o.amount, o.stall).await
            } else {
                upload_one(s, &data, i, o.amount, o.stall).await
            };
            r.map(|done| done.duration_since(start).as_secs_f64())
                .with_context(|| format!("connection {}", i + 1))
        }));
    }
    let mut per: Vec<f64> = Vec::new();
    let mut first_err = None;
    for t in tasks {
        match t.await {
            Ok(Ok(secs)) => per.push(secs),
            Ok(Err(e)) => {
                first_err.get_or_insert(e);
            }
            Err(e) => {
                first_err.get_or_insert(anyhow!("task failed: {e}"));
            }
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    Ok(Transfer {
        bytes: o.amount * o.concurrency as u64,
        secs: per.iter().cloned().fold(0.0, f64::max),
        per_conn_secs: per,
    })
}

/// Sends the header and waits for the receiver's zero acknowledgement.
async fn ready(s: &mut Conn, mode: Mode, amount: u64, stall: Duration) -> Result<()> {
    s.write_all(&Header { mode, arg: amount }.encode()).await?;
    s.flush().await?;
    let mut ack = [0u8; 8];
    match tokio::time::timeout(stall, s.read_exact(&mut ack)).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => bail!("chain closed before the receiver answered: {e}"),
        Err(_) => bail!("no answer through the chain in {:.1}s", stall.as_secs_f64()),
    }
    let v = u64::from_be_bytes(ack);
    if v != 0 {
        bail!("byte-count mismatch: receiver's first acknowledgement is {v}, expected 0");
    }
    Ok(())
}

async fn upload_one(
    s: Conn,
    data: &[u8],
    idx: usize,
    amount: u64,
    stall: Duration,
) -> Result<Instant> {
    let (mut r, mut w) = s.split();
    let span = data.len() - CHUNK;
    let mut off = (idx * 7919) % span;
    let data = data.to_vec();
    let writer = tokio::spawn(async move {
        let mut sent = 0u64;
        while sent < amount {
            let n = ((amount - sent) as usize).min(CHUNK);
            w.write_all(&data[off..off + n]).await?;
            sent += n as u64;
            off = (off + 4097) % span;
        }
        // Inner TLS may keep the last records buffered when the socket was full.
        w.flush().await?;
        Ok::<_, std::io::Error>(w)
    });
    let mut acks = AckReader::default();
    let mut confirmed = 0u64;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match tokio::time::timeout(stall, r.read(&mut buf)).await {
            Ok(Ok(n)) => n,
            Ok(Err(e)) => {
                writer.abort();
                bail!(
                    "read error after {} of {amount} bytes acknowledged: {e}",
                    acks.last.unwrap_or(0)
                )
            }
            Err(_) => {
                writer.abort();
                bail!(
                    "byte-count mismatch: no progress for {:.1}s with {} of {amount} bytes acknowledged by the receiver",
                    stall.as_secs_f64(),
                    acks.last.unwrap_or(0)
                )
            }
        };
        if n == 0 {
            writer.abort();
            bail!(
                "byte-count mismatch: connection closed with {} of {amount} bytes acknowledged",
                acks.last.unwrap_or(0)
            );
        }
        let ack = acks.feed(&buf[..n]);
        if let Some(a) = ack.filter(|a| *a <= amount) {
            super::progress::add(a.saturating_sub(confirmed));
            confirmed = confirmed.max(a);
        }
        match ack {
            Some(a) if a > amount => {
                writer.abort();
                bail!("byte-count mismatch: receiver acknowledged {a} bytes but {amount} were sent")
            }
            Some(a) if a == amount => break,
            _ => {}
        }
    }
    let done = Instant::now();
    let mut w = match writer.await {
        Ok(Ok(w)) => w,
        Ok(Err(e)) => bail!("write error: {e}"),
        Err(e) => bail!("writer task: {e}"),
    };
    // Everything is written and acknowledged; an acknowledgement past it means added bytes.
    let _ = w.shutdown().await;
    let linger = Instant::now() + Duration::from_millis(200);
    while let Ok(Ok(n)) = tokio::time::timeout_at(linger.into(), r.read(&mut buf)).await {
        if n == 0 {
            break;
        }
        if let Some(a) = acks.feed(&buf[..n]).filter(|a| *a > amount) {
            bail!("byte-count mismatch: receiver acknowledged {a} bytes but {amount} were sent");
        }
    }
    Ok(done)
}

async fn download_one(mut s: Conn, amount: u64, stall: Duration) -> Result<Instant> {
    s.write_all(b"G").await?;
    s.flush().await?;
    let mut buf = vec![0u8; 256 * 1024];
    let mut got = 0u64;
    while got < amount {
        let n = match tokio::time::timeout(stall, s.read(&mut buf)).await {
            Ok(r) => r.with_context(|| format!("read error after {got} of {amount} bytes"))?,
            Err(_) => bail!(
                "byte-count mismatch: no progress for {:.1}s with {got} of {amount} bytes received",
                stall.as_secs_f64()
            ),
        };
        if n == 0 {
            bail!("byte-count mismatch: connection closed after {got} of {amount} bytes");
        }
        got += n as u64;
        super::progress::add(n as u64);
    }
    let done = Instant::now();
    if got > amount {
        bail!("byte-count mismatch: received {got} bytes but {amount} were sent");
    }
    s.write_all(&got.to_be_bytes()).await?;
    s.flush().await?;
    // A stray extra byte would arrive now; the receiver closes only after our acknowledgement.
    match tokio::time::timeout(Duration::from_millis(200), s.read(&mut buf)).await {
        Ok(Ok(n)) if n > 0 => bail!("byte-count mismatch: {n} bytes more than the {amount} sent"),
        _ => Ok(done),
    }
}
