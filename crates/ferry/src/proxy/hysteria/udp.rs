//! UDP over one Hysteria connection, both ends: the table of sessions a connection's
//! datagrams are sorted into (by session ID, fragments put back together per session), and
//! each session as a [`PacketConn`]. A server makes a session for every unknown ID; a client
//! drops datagrams of IDs it did not open.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::mpsc;

use super::codec::{self, Defrag, UdpMessage};
use crate::common::Destination;
use crate::transport::PacketConn;

/// Sessions one connection holds at most (a client opening more gets its new ones dropped).
pub const MAX_SESSIONS: usize = 1024;
/// Packets waiting for a session's reader (more are dropped, as a full socket buffer does):
/// with reassembled packets of 4096 bytes at most, 64 KiB a session, 64 MiB for a connection's
/// every session at worst.
const QUEUE: usize = 16;

struct Slot {
    tx: mpsc::Sender<(Bytes, String)>,
    defrag: Defrag,
}

/// A connection's UDP sessions.
pub struct Sessions {
    conn: quinn::Connection,
    map: Mutex<HashMap<u32, Slot>>,
    epoch: Instant,
}

impl Sessions {
    pub fn new(conn: quinn::Connection) -> Arc<Sessions> {
        Arc::new(Sessions {
            conn,
            map: Mutex::new(HashMap::new()),
            epoch: Instant::now(),
        })
    }

    /// Opens session `id`: `None` when the table is full or the ID is taken.
    pub fn open(self: &Arc<Self>, id: u32, idle: Option<Duration>) -> Option<Packets> {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= MAX_SESSIONS || map.contains_key(&id) {
            return None;
        }
        let (tx, rx) = mpsc::channel(QUEUE);
        map.insert(
            id,
            Slot {
                tx,
                defrag: Defrag::default(),
            },
        );
        Some(Packets {
            id,
            sessions: self.clone(),
            rx: tokio::sync::Mutex::new(rx),
            idle,
            last: AtomicU64::new(self.now()),
        })
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Sorts one datagram into its session: `Err(message)` when its session is unknown (the
    /// server opens one for it), `Ok` otherwise (delivered, a fragment kept, or dropped).
    pub fn deliver(&self, datagram: Bytes) -> Result<(), UdpMessage> {
        let Some(m) = UdpMessage::decode(&datagram) else {
            tracing::debug!("hysteria: a malformed UDP message dropped");
            return Ok(());
        };
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let Some(slot) = map.get_mut(&m.session) else {
            return Err(m);
        };
        if let Some(whole) = slot.defrag.feed(m) {
            // A full queue drops the packet, as a full socket buffer would.
            let _ = slot.tx.try_send((whole.1, whole.0));
        }
        Ok(())
    }

    /// Sends one packet of session `id`, fragmented to the peer's datagram size.
    fn send(&self, id: u32, addr: &str, data: &[u8]) -> io::Result<()> {
        let max = self
            .conn
            .max_datagram_size()
            .ok_or_else(|| io::Error::other("the peer takes no QUIC datagrams"))?;
        for d in codec::udp_datagrams(id, addr, data, max) {
            match self.conn.send_datagram(d) {
                Ok(()) => {}
                Err(quinn::SendDatagramError::ConnectionLost(e)) => {
                    return Err(io::Error::other(e))
                }
                Err(e) => {
                    tracing::debug!("hysteria: UDP packet dropped: {e}");
                    return Ok(());
                }
            }
        }
        Ok(())
    }
}

/// One UDP session: what comes for it from the peer, and the way back. Dropping it ends the
/// session (its ID may be opened again).
pub struct Packets {
    id: u32,
    sessions: Arc<Sessions>,
    rx: tokio::sync::Mutex<mpsc::Receiver<(Bytes, String)>>,
    /// Ends the session after this long with nothing either way (the server's
    /// `udpIdleTimeout`).
    idle: Option<Duration>,
    last: AtomicU64,
}

impl Packets {
    /// Queues a packet as if it had come from the peer (a server's first packet of a
    /// session).
    pub fn push(&self, m: UdpMessage) {
        let mut map = self.sessions.map.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = map.get_mut(&self.id) {
            if let Some((addr, data)) = slot.defrag.feed(m) {
                let _ = slot.tx.try_send((data, addr));
            }
        }
    }

    fn touch(&self) {
        self.last.store(self.sessions.now(), Ordering::Relaxed);
    }
}

impl Drop for Packets {
    fn drop(&mut self) {
        let mut map = self.sessions.map.lock().unwrap_or_else(|e| e.into_inner());
        map.remove(&self.id);
    }
}

#[async_trait]
impl PacketConn for Packets {
    async fn send_to(&self, data: &[u8], dest: &Destination) -> io::Result<()> {
        self.touch();
        self.sessions.send(self.id, &dest.to_string(), data)
    }

    async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, Destination)> {
        let mut rx = self.rx.lock().await;
        loop {
            let got = match self.idle {
                None => rx.recv().await,
                Some(idle) => {
                    let since = self
                        .sessions
                        .now()
                        .saturating_sub(self.last.load(Ordering::Relaxed));
                    let left = idle.saturating_sub(Duration::from_millis(since));
                    if left.is_zero() {
                        return Err(io::Error::new(io::ErrorKind::TimedOut, "UDP session idle"));
                    }
                    match tokio::time::timeout(left, rx.recv()).await {
                        Ok(x) => x,
                        Err(_) => continue,
                    }
                }
            };
            let Some((data, addr)) = got else {
                return Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "the Hysteria connection closed",
                ));
            };
            let Some(dest) = Destination::parse(&addr) else {
                tracing::debug!("hysteria: UDP packet for {addr:?} dropped (not host:port)");
                continue;
            };
            self.touch();
            let n = data.len().min(buf.len());
            buf[..n].copy_from_slice(&data[..n]);
            return Ok((n, dest));
        }
    }

    async fn ready(&self) -> io::Result<()> {
        Ok(())
    }
}

/// Reads a connection's datagrams into `sessions` until it closes; `unknown` gets each
/// message of a session not open yet.
pub async fn read_loop(sessions: Arc<Sessions>, mut unknown: impl FnMut(UdpMessage)) {
    let conn = sessions.conn.clone();
    while let Ok(d) = conn.read_datagram().await {
        if let Err(m) = sessions.deliver(d) {
            unknown(m);
        }
    }
    // The connection is gone: every session's reader ends (its channel closes).
    sessions
        .map
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clear();
}

/// Bytes of a UDP message, for tests.
#[cfg(test)]
pub fn message(session: u32, addr: &str, data: &[u8]) -> Bytes {
    let mut b = bytes::BytesMut::new();
    UdpMessage {
        session,
        packet: 0,
        frag: 0,
        frags: 1,
        addr: addr.into(),
        data: Bytes::copy_from_slice(data),
    }
    .encode(&mut b);
    b.freeze()
}
