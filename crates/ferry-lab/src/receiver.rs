//! The receiving end: accepts lab connections and serves each by its header's mode. Upload
//! connections get the running byte total back after every read; on EOF the total is recorded.
//! A connection that opens with a TLS handshake is served inside TLS (loadgen's inner TLS).

use std::sync::{Arc, Mutex};

use std::task::Poll;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

use crate::inner_tls;
use crate::wire::{random_bytes, Header, Mode, CHUNK, HEADER_LEN};

/// What the receiver saw on one connection.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ConnReport {
    pub mode: Option<Mode>,
    /// Payload bytes received (upload) or sent (download).
    pub bytes: u64,
    /// Set when the connection did not complete as its mode requires.
    pub error: Option<String>,
    /// The inner TLS session the lab protocol ran in, if any.
    pub tls: Option<inner_tls::Accepted>,
}

/// Per-connection reports, shared with whoever started the receiver.
#[derive(Clone, Default)]
pub struct Reports(Arc<Mutex<Vec<ConnReport>>>);

impl Reports {
    fn push(&self, r: ConnReport) {
        if let Ok(mut v) = self.0.lock() {
            v.push(r);
        }
    }
    /// Takes every report collected so far.
    pub fn take(&self) -> Vec<ConnReport> {
        self.0
            .lock()
            .map(|mut v| std::mem::take(&mut *v))
            .unwrap_or_default()
    }
}

/// How long a connection may stay silent before the receiver gives up on it.
const IDLE: Duration = Duration::from_secs(600);

/// Accepts connections forever; `verbose` prints a line per finished connection.
pub async fn serve(listener: TcpListener, reports: Reports, verbose: bool) {
    loop {
        let Ok((s, peer)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let reports = reports.clone();
        tokio::spawn(async move {
            let _ = s.set_nodelay(true);
            let r = handle(s).await;
            if verbose {
                let tls = r
                    .tls
                    .as_ref()
                    .map(|t| {
                        format!(
                            " in TLS {} ({}, {}-byte records)",
                            t.version, t.cipher, t.record
                        )
                    })
                    .unwrap_or_default();
                match &r.error {
                    None => println!("{peer}: {:?} {} bytes{tls}", r.mode, r.bytes),
                    Some(e) => println!("{peer}: {:?} {} bytes{tls}, error: {e}", r.mode, r.bytes),
                }
            }
            // Probe connections (a port check that sent nothing) are not worth a report.
            if r.mode.is_some() {
                reports.push(r);
            }
        });
    }
}

/// Starts a receiver on 127.0.0.1:`port` (0 picks one) in the current runtime.
pub async fn start(port: u16) -> Result<(u16, Reports, tokio::task::JoinHandle<()>)> {
    start_on(std::net::SocketAddr::from(([127, 0, 0, 1], port))).await
}

/// Starts a receiver on `addr` (port 0 picks one) in the current runtime.
pub async fn start_on(
    addr: std::net::SocketAddr,
) -> Result<(u16, Reports, tokio::task::JoinHandle<()>)> {
    let l = TcpListener::bind(addr)
        .await
        .with_context(|| format!("receiver: binding {addr}"))?;
    let port = l.local_addr()?.port();
    let reports = Reports::default();
    let h = tokio::spawn(serve(l, reports.clone(), false));
    Ok((port, reports, h))
}

async fn handle(s: TcpStream) -> ConnReport {
    let mut first = [0u8; 1];
    let tls = matches!(s.peek(&mut first).await, Ok(1)) && inner_tls::looks_like_tls(first[0]);
    if !tls {
        return serve_conn(s, false).await;
    }
    match tokio::time::timeout(IDLE, inner_tls::accept(s)).await {
        Ok(Ok((t, accepted))) => {
            let mut r = serve_conn(t, true).await;
            r.tls = Some(accepted);
            r
        }
        Ok(Err(e)) => ConnReport {
            mode: None,
            bytes: 0,
            error: Some(format!("{e:#}")),
            tls: None,
        },
        Err(_) => ConnReport {
            mode: None,
            bytes: 0,
            error: Some(format!("inner TLS handshake idle for {}s", IDLE.as_secs())),
            tls: None,
        },
    }
}

/// Serves the lab protocol on `s` (a TCP socket or a TLS session).
/// `tls`: the stream is an inner TLS session (reads return one record at a time).
async fn serve_conn<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, tls: bool) -> ConnReport {
    let mut hdr = [0u8; HEADER_LEN];
    let mut got = 0;
    while got < HEADER_LEN {
        match s.read(&mut hdr[got..]).await {
            Ok(0) | Err(_) => {
                return ConnReport {
                    mode: None,
                    bytes: 0,
                    error: Some("closed before the header".into()),
                    tls: None,
                }
            }
            Ok(n) => got += n,
        }
    }
    let h = match Header::decode(&hdr) {
        Ok(h) => h,
        Err(e) => {
            return ConnReport {
                mode: None,
                bytes: 0,
                error: Some(e.to_string()),
                tls: None,
            }
        }
    };
    let mut bytes = 0u64;
    let res = match h.mode {
        Mode::Upload => upload(&mut s, &mut bytes, tls).await,
        Mode::Download => download(&mut s, h.arg, &mut bytes).await,
        Mode::Hello => hello(&mut s).await,
        Mode::Echo => echo(&mut s, h.arg, &mut bytes).await,
    };
    ConnReport {
        mode: Some(h.mode),
        bytes,
        error: res.err().map(|e| format!("{e:#}")),
        tls: None,
    }
}

/// A read that is ready now; None when it would wait.
async fn read_ready<S: AsyncRead + Unpin>(
    s: &mut S,
    buf: &mut [u8],
) -> Option<std::io::Result<usize>> {
    std::future::poll_fn(|cx| {
        let mut rb = ReadBuf::new(buf);
        match std::pin::Pin::new(&mut *s).poll_read(cx, &mut rb) {
            Poll::Ready(Ok(())) => Poll::Ready(Some(Ok(rb.filled().len()))),
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(e))),
            Poll::Pending => Poll::Ready(None),
        }
    })
    .await
}

async fn read_t<S: AsyncRead + Unpin>(s: &mut S, buf: &mut [u8]) -> Result<usize> {
    match tokio::time::timeout(IDLE, s.read(buf)).await {
        Ok(r) => Ok(r?),
        Err(_) => bail!("idle for {}s", IDLE.as_secs()),
    }
}

/// `drain`: after each read, also take what is already readable (up to the buffer) before
/// acknowledging. A TLS session returns one record (16 KiB at most) per read; without this the
/// receiver would answer every record, where on bare TCP it answers every socket read.
async fn upload<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    total: &mut u64,
    drain: bool,
) -> Result<()> {
    // "Nothing yet": tells the loadgen the chain is up before it starts the clock.
    s.write_all(&0u64.to_be_bytes()).await?;
    s.flush().await?;
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let mut n = read_t(s, &mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        let mut eof = false;
        while drain && n < buf.len() {
            match read_ready(s, &mut buf[n..]).await {
                Some(Ok(0)) => {
                    eof = true;
                    break;
                }
                Some(Ok(m)) => n += m,
                Some(Err(e)) => return Err(e.into()),
                None => break,
            }
        }
        *total += n as u64;
        s.write_all(&total.to_be_bytes()).await?;
        s.flush().await?;
        if eof {
            return Ok(());
        }
    }
}

async fn download<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    amount: u64,
    sent: &mut u64,
) -> Result<()> {
    let data = random_bytes(CHUNK * 2, amount ^ 0x5eed);
    // Ready; then wait for the loadgen's one-byte go, so chain set-up stays out of its timing.
    s.write_all(&0u64.to_be_bytes()).await?;
    s.flush().await?;
    let mut go = [0u8; 1];
    match tokio::time::timeout(IDLE, s.read_exact(&mut go)).await {
        Ok(Ok(_)) => {}
        _ => bail!("no go byte from the loadgen"),
    }
    let mut off = 0usize;
    while *sent < amount {
        let n = ((amount - *sent) as usize).min(CHUNK);
        s.write_all(&data[off..off + n]).await?;
        off = (off + 4099) % CHUNK;
        *sent += n as u64;
    }
    s.flush().await?;
    // The loadgen acknowledges what it counted; it must be exactly what was sent.
    let mut ack = [0u8; 8];
    match tokio::time::timeout(IDLE, s.read_exact(&mut ack)).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => bail!("no final acknowledgement: {e}"),
        Err(_) => bail!("no final acknowledgement in {}s", IDLE.as_secs()),
    }
    let counted = u64::from_be_bytes(ack);
    if counted != amount {
        bail!("sent {amount} bytes but the loadgen counted {counted}");
    }
    Ok(())
}

async fn hello<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S) -> Result<()> {
    s.write_all(b"A").await?;
    s.flush().await?;
    let mut buf = [0u8; 512];
    // Hold the connection until the other side closes it.
    loop {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return Ok(()),
            Ok(_) => {}
        }
    }
}

async fn echo<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    size: u64,
    total: &mut u64,
) -> Result<()> {
    if size == 0 || size > 1 << 20 {
        bail!("echo message size {size} out of range");
    }
    let mut msg = vec![0u8; size as usize];
    loop {
        let mut got = 0;
        while got < msg.len() {
            let n = read_t(s, &mut msg[got..]).await?;
            if n == 0 {
                if got == 0 {
                    return Ok(());
                }
                // Say how far it got: more whole messages than the client sent means the
                // chain added bytes (Xray's XHTTP packet-up once appended another session's
                // upload), fewer bytes means it lost some.
                bail!(
                    "closed in the middle of a message: {got} of {size} bytes after {} whole messages",
                    *total / size
                );
            }
            got += n;
        }
        *total += size;
        s.write_all(&msg).await?;
        s.flush().await?;
    }
}
