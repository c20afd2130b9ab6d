//! The sending end: connects directly or through a SOCKS5 proxy, moves a verified number of
//! bytes, and measures throughput, time to first byte and round-trip latency. With inner TLS
//! (`Target::inner_tls`) every connection is a TLS session with the receiver, and the lab
//! protocol runs inside it.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

use crate::inner_tls::InnerTls;
use crate::wire::{random_bytes, AckReader, Header, Mode, CHUNK};

/// Where loadgen connects.
#[derive(Clone, Debug)]
pub struct Target {
    /// The address to connect to: the receiver, a dokodemo-style entry, or a SOCKS5 proxy.
    pub connect: SocketAddr,
    /// With a SOCKS5 proxy at `connect`: the receiver address to CONNECT to.
    pub socks_dest: Option<SocketAddr>,
    /// Speak TLS to the receiver through the chain (None: the lab protocol in the clear).
    pub inner_tls: Option<InnerTls>,
}

impl Target {
    /// The receiver (or a dokodemo-style entry) at `connect`, no SOCKS5, no inner TLS.
    pub fn plain(connect: SocketAddr) -> Target {
        Target {
            connect,
            socks_dest: None,
            inner_tls: None,
        }
    }

    /// A connection through the chain, confirmed end to end by the receiver's hello byte.
    pub async fn hello(&self) -> Result<Conn> {
        let mut s = self.open().await?;
        s.write_all(
            &Header {
                mode: Mode::Hello,
                arg: 0,
            }
            .encode(),
        )
        .await?;
        s.flush().await?;
        let mut b = [0u8; 1];
        s.read_exact(&mut b).await?;
        Ok(s)
    }

    /// Opens a connection that reaches the receiver (after the SOCKS5 handshake, if any, and
    /// the inner TLS handshake, if any).
    pub async fn open(&self) -> Result<Conn> {
        let mut s = TcpStream::connect(self.connect)
            .await
            .with_context(|| format!("connecting to {}", self.connect))?;
        let _ = s.set_nodelay(true);
        if let Some(dest) = self.socks_dest {
            socks5_connect(&mut s, dest)
                .await
                .with_context(|| format!("SOCKS5 CONNECT {dest} via {}", self.connect))?;
        }
        match &self.inner_tls {
            None => Ok(Conn::Plain(s)),
            Some(t) => Ok(Conn::Tls(Box::new(t.connect(s).await?))),
        }
    }
}

/// One loadgen connection: bare TCP, or a TLS session with the receiver over it.
pub enum Conn {
    Plain(TcpStream),
    Tls(Box<crate::inner_tls::ClientStream>),
}

/// The halves of a split [`Conn`].
type ReadHalf = Box<dyn AsyncRead + Unpin + Send>;
type WriteHalf = Box<dyn AsyncWrite + Unpin + Send>;

impl Conn {
    /// Read and write halves usable from two tasks (TCP: the socket's own halves; TLS: a
    /// shared session).
    fn split(self) -> (ReadHalf, WriteHalf) {
        match self {
            Conn::Plain(s) => {
                let (r, w) = s.into_split();
                (Box::new(r), Box::new(w))
            }
            Conn::Tls(t) => {
                let (r, w) = tokio::io::split(*t);
                (Box::new(r), Box::new(w))
            }
        }
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tls(t) => Pin::new(t.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Tls(t) => Pin::new(t.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_flush(cx),
            Conn::Tls(t) => Pin::new(t.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Tls(t) => Pin::new(t.as_mut()).poll_shutdown(cx),
        }
    }
}

/// SOCKS5 no-auth CONNECT handshake (RFC 1928).
pub async fn socks5_connect(s: &mut TcpStream, dest: SocketAddr) -> Result<()> {
    s.write_all(&[5, 1, 0]).await?;
    let mut m = [0u8; 2];
    s.read_exact(&mut m).await?;
    if m != [5, 0] {
        bail!("proxy refused no-auth method: {m:02x?}");
    }
    let mut req = vec![5, 1, 0];
    match dest {
        SocketAddr::V4(a) => {
            req.push(1);
            req.extend_from_slice(&a.ip().octets());
        }
        SocketAddr::V6(a) => {
            req.push(4);
            req.extend_from_slice(&a.ip().octets());
        }
    }
    req.extend_from_slice(&dest.port().to_be_bytes());
    s.write_all(&req).await?;
    let mut head = [0u8; 4];
    s.read_exact(&mut head).await?;
    if head[1] != 0 {
        bail!("proxy answered CONNECT with code {}", head[1]);
    }
    let skip = match head[3] {
        1 => 4 + 2,
        4 => 16 + 2,
        3 => {
            let mut l = [0u8; 1];
            s.read_exact(&mut l).await?;
            l[0] as usize + 2
        }
        t => bail!("bad address type {t} in SOCKS5 reply"),
    };
    let mut rest = vec![0u8; skip];
    s.read_exact(&mut rest).await?;
    Ok(())
}

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
        match acks.feed(&buf[..n]) {
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
