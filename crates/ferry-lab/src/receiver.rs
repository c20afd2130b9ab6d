//! The receiving end: accepts lab connections and serves each by its header's mode. Upload
//! connections get the running byte total back after every read; on EOF the total is recorded.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::wire::{random_bytes, Header, Mode, CHUNK, HEADER_LEN};

/// What the receiver saw on one connection.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ConnReport {
    pub mode: Option<Mode>,
    /// Payload bytes received (upload) or sent (download).
    pub bytes: u64,
    /// Set when the connection did not complete as its mode requires.
    pub error: Option<String>,
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
                match &r.error {
                    None => println!("{peer}: {:?} {} bytes", r.mode, r.bytes),
                    Some(e) => println!("{peer}: {:?} {} bytes, error: {e}", r.mode, r.bytes),
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
    let l = TcpListener::bind(("127.0.0.1", port))
        .await
        .with_context(|| format!("receiver: binding 127.0.0.1:{port}"))?;
    let port = l.local_addr()?.port();
    let reports = Reports::default();
    let h = tokio::spawn(serve(l, reports.clone(), false));
    Ok((port, reports, h))
}

async fn handle(mut s: TcpStream) -> ConnReport {
    let mut hdr = [0u8; HEADER_LEN];
    let mut got = 0;
    while got < HEADER_LEN {
        match s.read(&mut hdr[got..]).await {
            Ok(0) | Err(_) => {
                return ConnReport {
                    mode: None,
                    bytes: 0,
                    error: Some("closed before the header".into()),
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
            }
        }
    };
    let mut bytes = 0u64;
    let res = match h.mode {
        Mode::Upload => upload(&mut s, &mut bytes).await,
        Mode::Download => download(&mut s, h.arg, &mut bytes).await,
        Mode::Hello => hello(&mut s).await,
        Mode::Echo => echo(&mut s, h.arg, &mut bytes).await,
    };
    ConnReport {
        mode: Some(h.mode),
        bytes,
        error: res.err().map(|e| format!("{e:#}")),
    }
}

async fn read_t(s: &mut TcpStream, buf: &mut [u8]) -> Result<usize> {
    match tokio::time::timeout(IDLE, s.read(buf)).await {
        Ok(r) => Ok(r?),
        Err(_) => bail!("idle for {}s", IDLE.as_secs()),
    }
}

async fn upload(s: &mut TcpStream, total: &mut u64) -> Result<()> {
    // "Nothing yet": tells the loadgen the chain is up before it starts the clock.
    s.write_all(&0u64.to_be_bytes()).await?;
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = read_t(s, &mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        *total += n as u64;
        s.write_all(&total.to_be_bytes()).await?;
    }
}

async fn download(s: &mut TcpStream, amount: u64, sent: &mut u64) -> Result<()> {
    let data = random_bytes(CHUNK * 2, amount ^ 0x5eed);
    // Ready; then wait for the loadgen's one-byte go, so chain set-up stays out of its timing.
    s.write_all(&0u64.to_be_bytes()).await?;
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

async fn hello(s: &mut TcpStream) -> Result<()> {
    s.write_all(b"A").await?;
    let mut buf = [0u8; 512];
    // Hold the connection until the other side closes it.
    loop {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return Ok(()),
            Ok(_) => {}
        }
    }
}

async fn echo(s: &mut TcpStream, size: u64, total: &mut u64) -> Result<()> {
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
                bail!("closed in the middle of a message");
            }
            got += n;
        }
        *total += size;
        s.write_all(&msg).await?;
    }
}
