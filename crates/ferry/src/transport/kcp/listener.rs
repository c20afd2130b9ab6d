//! The mKCP server: one UDP socket, sessions keyed by (source address, conversation) as Xray
//! keys them; the first valid segment of an unknown key that is not a Terminate makes a
//! session, which the accept loop takes as a connection. Xray sets no limit; Ferry caps the
//! sessions per source IP and per listener, and the bytes their receive windows hold, so a
//! flood of made-up conversations costs a bounded amount (the segments past a cap are
//! dropped, as a lossy link drops them).

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, Weak};

use tokio::net::UdpSocket;
use tokio::sync::mpsc;

use super::conn::Kcp;
use super::recv::Budget;
use super::segment::{Segment, CMD_TERMINATE};
use super::stream::{drive, Link, Shared};
use super::{KcpSettings, KcpStream};
use crate::session::{ConnInfo, Endpoint};
use crate::transport::udpmask::UdpMasks;
use crate::transport::BoxStream;

/// Sessions one listener keeps at most.
pub const MAX_SESSIONS: usize = 8192;
/// Sessions one source IP may hold at most.
pub const MAX_PER_SOURCE: usize = 1024;
/// Bytes all sessions' receive windows may hold together.
pub const RECEIVE_BUDGET: usize = 64 << 20;
/// New sessions waiting for the accept loop.
const BACKLOG: usize = 1024;

type Key = (SocketAddr, u16);

#[derive(Default)]
struct Table {
    sessions: HashMap<Key, Arc<Shared>>,
    per_source: HashMap<IpAddr, usize>,
}

struct Sessions {
    table: Mutex<Table>,
}

impl Sessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn remove(&self, key: &Key) {
        let mut t = self.lock();
        if t.sessions.remove(key).is_some() {
            let ip = key.0.ip();
            if let Some(n) = t.per_source.get_mut(&ip) {
                *n -= 1;
                if *n == 0 {
                    t.per_source.remove(&ip);
                }
            }
        }
    }
}

/// A bound mKCP listener.
pub struct KcpListener {
    local: SocketAddr,
    rx: tokio::sync::Mutex<mpsc::Receiver<(KcpStream, ConnInfo)>>,
    sessions: Arc<Sessions>,
    task: tokio::task::JoinHandle<()>,
}

impl KcpListener {
    /// Serves mKCP on `socket` (already bound), under `masks`.
    pub fn new(
        socket: UdpSocket,
        settings: Arc<KcpSettings>,
        masks: UdpMasks,
    ) -> io::Result<KcpListener> {
        KcpListener::with_limits(socket, settings, masks, MAX_SESSIONS, MAX_PER_SOURCE)
    }

    /// [`KcpListener::new`] with other session caps.
    pub fn with_limits(
        socket: UdpSocket,
        settings: Arc<KcpSettings>,
        masks: UdpMasks,
        max: usize,
        per_source: usize,
    ) -> io::Result<KcpListener> {
        let local = socket.local_addr()?;
        let (tx, rx) = mpsc::channel(BACKLOG);
        let sessions = Arc::new(Sessions {
            table: Mutex::new(Table::default()),
        });
        let serve = Serving {
            socket: Arc::new(socket),
            settings,
            masks,
            sessions: Arc::downgrade(&sessions),
            tx,
            budget: Budget::new(RECEIVE_BUDGET),
            max,
            per_source,
            local,
        };
        let task = tokio::spawn(serve.run());
        Ok(KcpListener {
            local,
            rx: tokio::sync::Mutex::new(rx),
            sessions,
            task,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Sessions open now.
    pub fn sessions(&self) -> usize {
        self.sessions.lock().sessions.len()
    }

    /// The next new session.
    pub async fn accept(&self) -> io::Result<(BoxStream, ConnInfo)> {
        match self.rx.lock().await.recv().await {
            Some((s, info)) => Ok((Box::new(s), info)),
            None => Err(io::Error::other("mKCP listener stopped")),
        }
    }
}

impl Drop for KcpListener {
    /// As Xray's `Close`: the socket stops and every session is terminated.
    fn drop(&mut self) {
        self.task.abort();
        let all: Vec<_> = self.sessions.lock().sessions.values().cloned().collect();
        for s in all {
            s.terminate();
        }
    }
}

struct Serving {
    socket: Arc<UdpSocket>,
    settings: Arc<KcpSettings>,
    masks: UdpMasks,
    sessions: Weak<Sessions>,
    tx: mpsc::Sender<(KcpStream, ConnInfo)>,
    budget: Arc<Budget>,
    max: usize,
    per_source: usize,
    local: SocketAddr,
}

impl Serving {
    async fn run(self) {
        let mut buf = vec![0u8; 65536];
        loop {
            let (n, src) = match self.socket.recv_from(&mut buf).await {
                Ok(x) => x,
                Err(e) => {
                    tracing::debug!("mKCP listener on {}: {e}", self.local);
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                }
            };
            let Some(r) = self.masks.decode(&mut buf[..n]) else {
                tracing::debug!("mKCP: a datagram from {src} fails the masks");
                continue;
            };
            let datagram = &buf[r];
            let Some((first, _)) = Segment::read(datagram) else {
                tracing::debug!("mKCP: discarding an invalid payload from {src}");
                continue;
            };
            let Some(sessions) = self.sessions.upgrade() else {
                return;
            };
            let key = (src, first.conv());
            let found = sessions.lock().sessions.get(&key).cloned();
            let shared = match found {
                Some(s) => s,
                None if first.cmd() == CMD_TERMINATE => continue,
                None => match self.open(&sessions, key) {
                    Some(s) => s,
                    None => continue,
                },
            };
            shared.input(datagram);
        }
    }

    /// A new session for `key`, handed to the accept loop; `None` past a cap.
    fn open(&self, sessions: &Arc<Sessions>, key: Key) -> Option<Arc<Shared>> {
        let mut t = sessions.lock();
        let from_source = t.per_source.get(&key.0.ip()).copied().unwrap_or(0);
        if t.sessions.len() >= self.max || from_source >= self.per_source {
            tracing::debug!(
                "mKCP: no new session for {} (conversation {}): {} open, {from_source} from this source",
                key.0,
                key.1,
                t.sessions.len()
            );
            return None;
        }
        let shared = Shared::new(Kcp::new(key.1, &self.settings, self.budget.clone()));
        let info = ConnInfo::new(Endpoint::Ip(key.0), Endpoint::Ip(self.local));
        if self
            .tx
            .try_send((KcpStream::new(shared.clone()), info))
            .is_err()
        {
            tracing::debug!("mKCP: accept backlog full; {} dropped", key.0);
            return None;
        }
        t.sessions.insert(key, shared.clone());
        *t.per_source.entry(key.0.ip()).or_insert(0) += 1;
        drop(t);
        let weak = Arc::downgrade(sessions);
        let link = Link::Server(self.socket.clone(), key.0);
        tokio::spawn(drive(shared.clone(), link, self.masks.clone(), move || {
            if let Some(s) = weak.upgrade() {
                s.remove(&key);
            }
        }));
        Some(shared)
    }
}
