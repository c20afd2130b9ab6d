//! UDP sessions keyed by client source (or, for Shadowsocks 2022, by client session): each gets
//! one outbound packet channel (routed by its first destination), packets are counted as they
//! pass, and idle sessions expire.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::mpsc;

use super::Dispatcher;
use crate::common::Destination;
pub use crate::proxy::udp::{NatKey, UdpReply, UdpSessions, MAX_DATAGRAM};
use crate::proxy::{PacketConn, Session};
use crate::session::Traffic;

/// Sessions one inbound holds at most. Each holds a socket (or a proxied channel) and, once
/// replies come, a 64 KiB receive buffer: 4,096 of them is room for a busy server's real
/// clients, while a flood of new sources costs at most this many descriptors.
pub const MAX_SESSIONS: usize = 4096;
/// Sessions one source IP holds at most: a household or office behind one NAT address runs a
/// few dozen UDP flows; a few hundred leaves room, while one host cannot take the whole table.
pub const MAX_SESSIONS_PER_SOURCE: usize = 256;
/// How long a session that never got a reply lives after its last datagram, instead of the
/// idle time (minutes): a live flow retries within it (a resolver after 1-5 s, QUIC's first
/// probe timeout), while sources that send once and go away (a flood, a scan) are dropped.
pub const NO_REPLY_TIMEOUT: Duration = Duration::from_secs(5);

struct Entry {
    id: u64,
    tx: mpsc::Sender<(Bytes, Destination)>,
    /// Where replies go: the address the session last sent from.
    to: Arc<Mutex<SocketAddr>>,
    /// The source IP the session counts against.
    ip: IpAddr,
}

/// The sessions, with how many each source IP holds.
#[derive(Default)]
struct Table {
    map: HashMap<NatKey, Entry>,
    per_ip: HashMap<IpAddr, usize>,
    /// Datagrams refused since the last log line about it, and when that was.
    refused: u64,
    logged: Option<Instant>,
}

/// Why a new session was refused.
#[derive(Debug, PartialEq, Eq)]
enum Full {
    Inbound,
    Source,
}

impl Table {
    /// Whether a new session from `ip` fits under the caps.
    fn admit(&self, ip: IpAddr, max: usize, per_source: usize) -> Result<(), Full> {
        if self.map.len() >= max {
            return Err(Full::Inbound);
        }
        if self.per_ip.get(&ip).is_some_and(|n| *n >= per_source) {
            return Err(Full::Source);
        }
        Ok(())
    }

    fn insert(&mut self, key: NatKey, e: Entry) {
        *self.per_ip.entry(e.ip).or_default() += 1;
        if let Some(old) = self.map.insert(key, e) {
            self.uncount(old.ip);
        }
    }

    fn remove(&mut self, key: &NatKey) {
        if let Some(e) = self.map.remove(key) {
            self.uncount(e.ip);
        }
    }

    fn uncount(&mut self, ip: IpAddr) {
        if let Some(n) = self.per_ip.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                self.per_ip.remove(&ip);
            }
        }
    }

    /// Counts a refused datagram; says whether to log (at most every 10 s, with the count).
    fn refuse(&mut self, now: Instant) -> Option<u64> {
        self.refused += 1;
        if self
            .logged
            .is_some_and(|t| now.saturating_duration_since(t) < Duration::from_secs(10))
        {
            return None;
        }
        self.logged = Some(now);
        Some(std::mem::take(&mut self.refused))
    }
}

/// The table of live UDP sessions of one inbound.
pub struct UdpNat {
    sessions: Mutex<Table>,
    next_id: AtomicU64,
    dispatcher: Arc<Dispatcher>,
    reply: Arc<dyn UdpReply>,
    idle: Duration,
    inbound: Arc<Traffic>,
    /// The inbound's `sniffing`: each session's first datagrams are sniffed (QUIC, FakeDNS)
    /// before it is routed.
    sniffing: Option<Arc<crate::app::sniff::Sniffing>>,
}

impl UdpNat {
    pub fn new(
        dispatcher: Arc<Dispatcher>,
        reply: Arc<dyn UdpReply>,
        idle: Duration,
        inbound: Arc<Traffic>,
        sniffing: Option<Arc<crate::app::sniff::Sniffing>>,
    ) -> Arc<UdpNat> {
        Arc::new(UdpNat {
            sessions: Mutex::new(Table::default()),
            next_id: AtomicU64::new(0),
            dispatcher,
            reply,
            idle,
            inbound,
            sniffing,
        })
    }

    /// Live sessions (for tests and stats).
    pub fn len(&self) -> usize {
        self.sessions.lock().map(|m| m.map.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Ends every session: their packet channels close as their tasks see the queue end.
    pub fn close(&self) {
        let mut t = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        t.map.clear();
        t.per_ip.clear();
    }

    /// Forwards one datagram from `client` (as `session`) to `session.dest`, opening a
    /// session for that client if needed.
    pub fn send(self: &Arc<Self>, client: SocketAddr, session: Session, data: Bytes) {
        self.send_keyed(NatKey::Addr(client), client, session, data)
    }

    /// [`send`](Self::send) for the session `key`, whose datagram came from `client` (where its
    /// replies go from now on).
    pub fn send_keyed(
        self: &Arc<Self>,
        key: NatKey,
        client: SocketAddr,
        session: Session,
        data: Bytes,
    ) {
        let dest = session.dest.clone();
        let mut map = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = map.map.get(&key) {
            *e.to.lock().unwrap_or_else(|e| e.into_inner()) = client;
            match e.tx.try_send((data, dest)) {
                Ok(()) => return,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    tracing::debug!("udp session {client}: queue full, datagram dropped");
                    return;
                }
                Err(mpsc::error::TrySendError::Closed((d, dst))) => {
                    map.remove(&key);
                    return self.open(map, key, client, session, d, dst);
                }
            }
        }
        self.open(map, key, client, session, data, dest)
    }

    fn open(
        self: &Arc<Self>,
        mut map: std::sync::MutexGuard<'_, Table>,
        key: NatKey,
        client: SocketAddr,
        session: Session,
        data: Bytes,
        dest: Destination,
    ) {
        let ip = client.ip().to_canonical();
        if let Err(full) = map.admit(ip, MAX_SESSIONS, MAX_SESSIONS_PER_SOURCE) {
            if let Some(n) = map.refuse(Instant::now()) {
                let why = match full {
                    Full::Inbound => format!("{MAX_SESSIONS} sessions"),
                    Full::Source => format!("{MAX_SESSIONS_PER_SOURCE} sessions from {ip}"),
                };
                tracing::warn!(
                    "[{}] udp: {why} already, new session from {client} refused ({n} datagrams \
                     refused since the last such line)",
                    session.inbound_tag
                );
            }
            return;
        }
        let (tx, rx) = mpsc::channel(512);
        let _ = tx.try_send((data, dest));
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let to = Arc::new(Mutex::new(client));
        map.insert(
            key,
            Entry {
                id,
                tx,
                to: to.clone(),
                ip,
            },
        );
        drop(map);
        let me = self.clone();
        tokio::spawn(async move {
            if let Err(e) = me.run(&to, session, rx).await {
                tracing::debug!("udp session {client} ended: {e}");
            }
            let mut map = me.sessions.lock().unwrap_or_else(|e| e.into_inner());
            if map.map.get(&key).is_some_and(|e| e.id == id) {
                map.remove(&key);
            }
        });
    }

    async fn run(
        &self,
        to: &Mutex<SocketAddr>,
        mut session: Session,
        mut rx: mpsc::Receiver<(Bytes, Destination)>,
    ) -> io::Result<()> {
        // Sniffed datagrams wait here until the session is routed; then they go out in order,
        // those to the first destination where sniffing pointed it.
        let mut early: Vec<(Bytes, Destination)> = Vec::new();
        if let Some(cfg) = &self.sniffing {
            let Some(first) = rx.recv().await else {
                return Ok(());
            };
            let dest = first.1.clone();
            session.dest = dest.clone();
            let router = self.dispatcher.router.load();
            let fake = router.dns.as_deref().and_then(|x| x.fake());
            let queue = tokio::sync::Mutex::new(rx);
            let q = &queue;
            early = crate::app::sniff::io::datagrams(
                cfg,
                fake,
                &mut session,
                first,
                |d: &(Bytes, Destination)| &d.0[..],
                |left| async move {
                    let mut rx = q.lock().await;
                    tokio::time::timeout(left, rx.recv()).await.ok().flatten()
                },
            )
            .await;
            rx = queue.into_inner();
            for f in early.iter_mut().filter(|f| f.1 == dest) {
                f.1 = session.dest.clone();
            }
        }
        let (pc, counters, _tag) = self.dispatcher.open_udp(&session, &self.inbound).await?;
        for (data, dest) in early {
            match pc.send_to(&data, &dest).await {
                Ok(()) => {
                    for c in &counters.up {
                        c.fetch_add(data.len() as u64, Ordering::Relaxed);
                    }
                }
                Err(e) => tracing::debug!("udp {} -> {dest}: {e}", session.source),
            }
        }
        // The receive buffer comes with the first reply; until then the session lives
        // NO_REPLY_TIMEOUT past its last datagram.
        let mut buf = Vec::new();
        let mut wait = self.idle.min(NO_REPLY_TIMEOUT);
        let idle = tokio::time::sleep(wait);
        tokio::pin!(idle);
        loop {
            tokio::select! {
                m = rx.recv() => {
                    let Some((data, dest)) = m else { return Ok(()) };
                    if let Err(e) = pc.send_to(&data, &dest).await {
                        tracing::debug!("udp {} -> {dest}: {e}", session.source);
                        continue;
                    }
                    for c in &counters.up { c.fetch_add(data.len() as u64, Ordering::Relaxed); }
                    idle.as_mut().reset(tokio::time::Instant::now() + wait);
                }
                r = recv_lazy(&*pc, &mut buf) => {
                    let (n, from) = r?;
                    let client = *to.lock().unwrap_or_else(|e| e.into_inner());
                    self.reply.reply(client, &buf[..n], &from).await?;
                    for c in &counters.down { c.fetch_add(n as u64, Ordering::Relaxed); }
                    wait = self.idle;
                    idle.as_mut().reset(tokio::time::Instant::now() + wait);
                }
                _ = &mut idle => return Ok(()),
            }
        }
    }
}

/// Receives one datagram into `buf`, which is allocated once one is ready.
async fn recv_lazy(pc: &dyn PacketConn, buf: &mut Vec<u8>) -> io::Result<(usize, Destination)> {
    if buf.is_empty() {
        pc.ready().await?;
        buf.resize(MAX_DATAGRAM, 0);
    }
    pc.recv_from(buf).await
}

/// An inbound's handle on its session table (what [`UdpSessions`] asks of it).
pub struct NatHandle(pub Arc<UdpNat>);

impl UdpSessions for NatHandle {
    fn send(&self, client: SocketAddr, session: Session, data: Bytes) {
        self.0.send(client, session, data)
    }

    fn send_keyed(&self, key: NatKey, client: SocketAddr, session: Session, data: Bytes) {
        self.0.send_keyed(key, client, session, data)
    }
}

/// Serves the datagrams one inbound connection carries (VMess UDP, SOCKS UDP ASSOCIATE):
/// the first datagram's destination routes the session, then datagrams flow both ways
/// through one outbound packet channel until the client is done or the level's idle time
/// passes without traffic. With `sniffing`, the first datagrams are sniffed (QUIC, FakeDNS)
/// before the session is routed.
pub async fn serve_packets_sniffed(
    d: &Dispatcher,
    mut session: Session,
    client: Box<dyn PacketConn>,
    inbound: &Traffic,
    sniffing: Option<&crate::app::sniff::Sniffing>,
) -> io::Result<()> {
    let idle = d.level(session.level()).conn_idle;
    let idle = if idle.is_zero() {
        Duration::from_secs(300)
    } else {
        idle
    };
    let ended = |e: io::Error| match e.kind() {
        io::ErrorKind::UnexpectedEof => Ok(()),
        _ => Err(e),
    };
    let mut up = vec![0u8; MAX_DATAGRAM];
    let (n, dest) = match tokio::time::timeout(idle, client.recv_from(&mut up)).await {
        Ok(Ok(x)) => x,
        Ok(Err(e)) => return ended(e),
        Err(_) => return Ok(()),
    };
    session.dest = dest.clone();
    // Sniffed datagrams wait here until the session is routed; then they go out in order.
    let mut early: Vec<(Vec<u8>, Destination)> = Vec::new();
    if let Some(cfg) = sniffing {
        let first = (up[..n].to_vec(), dest.clone());
        let c = &client;
        let router = d.router.load();
        let fake = router.dns.as_deref().and_then(|x| x.fake());
        early = crate::app::sniff::io::datagrams(
            cfg,
            fake,
            &mut session,
            first,
            |d: &(Vec<u8>, Destination)| &d.0[..],
            |left| async move {
                let mut b = vec![0u8; MAX_DATAGRAM];
                match tokio::time::timeout(left, c.recv_from(&mut b)).await {
                    Ok(Ok((n, to))) => {
                        b.truncate(n);
                        Some((b, to))
                    }
                    _ => None,
                }
            },
        )
        .await;
        // Datagrams to the first destination go where sniffing pointed it.
        for f in early.iter_mut().filter(|f| f.1 == dest) {
            f.1 = session.dest.clone();
        }
    }
    let (pc, counters, _tag) = d.open_udp(&session, inbound).await?;
    let add = |v: &[Arc<AtomicU64>], n: usize| {
        for c in v {
            c.fetch_add(n as u64, Ordering::Relaxed);
        }
    };
    let mut first = if early.is_empty() {
        Some((n, dest))
    } else {
        for (data, to) in early.drain(..) {
            match pc.send_to(&data, &to).await {
                Ok(()) => add(&counters.up, data.len()),
                Err(e) => tracing::debug!("[{}] udp -> {to}: {e}", session.inbound_tag),
            }
        }
        None
    };
    let mut down = vec![0u8; MAX_DATAGRAM];
    loop {
        if let Some((n, dest)) = first.take() {
            match pc.send_to(&up[..n], &dest).await {
                Ok(()) => add(&counters.up, n),
                Err(e) => tracing::debug!("[{}] udp -> {dest}: {e}", session.inbound_tag),
            }
        }
        tokio::select! {
            r = client.recv_from(&mut up) => match r {
                Ok(x) => first = Some(x),
                Err(e) => return ended(e),
            },
            r = pc.recv_from(&mut down) => {
                let (n, from) = r?;
                client.send_to(&down[..n], &from).await?;
                add(&counters.down, n);
            }
            _ = tokio::time::sleep(idle) => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(ip: &str) -> Entry {
        let (tx, _rx) = mpsc::channel(1);
        Entry {
            id: 0,
            tx,
            to: Arc::new(Mutex::new(SocketAddr::new(ip.parse().unwrap(), 1))),
            ip: ip.parse().unwrap(),
        }
    }

    fn key(ip: &str, port: u16) -> NatKey {
        NatKey::Addr(SocketAddr::new(ip.parse().unwrap(), port))
    }

    #[test]
    fn caps_per_source_and_per_inbound() {
        let mut t = Table::default();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        for p in 0..3 {
            assert_eq!(t.admit(a, 5, 3), Ok(()));
            t.insert(key("10.0.0.1", p), entry("10.0.0.1"));
        }
        assert_eq!(t.admit(a, 5, 3), Err(Full::Source));
        // Another source still fits, up to the inbound's cap.
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        for p in 0..2 {
            assert_eq!(t.admit(b, 5, 3), Ok(()));
            t.insert(key("10.0.0.2", p), entry("10.0.0.2"));
        }
        assert_eq!(
            t.admit("10.0.0.3".parse().unwrap(), 5, 3),
            Err(Full::Inbound)
        );
        // A session that ends frees its places; replacing one keeps the count right.
        t.remove(&key("10.0.0.1", 0));
        t.insert(key("10.0.0.2", 1), entry("10.0.0.2"));
        assert_eq!(t.per_ip.get(&a), Some(&2));
        assert_eq!(t.per_ip.get(&b), Some(&2));
        assert_eq!(t.admit(a, 5, 3), Ok(()));
        t.remove(&key("10.0.0.2", 0));
        t.remove(&key("10.0.0.2", 1));
        t.remove(&key("10.0.0.2", 1));
        assert_eq!(t.per_ip.get(&b), None);
    }

    #[test]
    fn refusals_are_logged_at_most_every_ten_seconds() {
        let mut t = Table::default();
        let t0 = Instant::now();
        assert_eq!(t.refuse(t0), Some(1));
        assert_eq!(t.refuse(t0 + Duration::from_secs(1)), None);
        assert_eq!(t.refuse(t0 + Duration::from_secs(2)), None);
        assert_eq!(t.refuse(t0 + Duration::from_secs(11)), Some(3));
    }
}
