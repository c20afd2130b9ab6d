//! The server side of Mux.Cool (VLESS and VMess command 3, as Xray's `common/mux`): every
//! session a client opens on the connection is routed, dialed and counted like a connection of
//! its own, as the connection's user. TCP sessions are relayed as streams; UDP sessions are
//! full-cone (one outbound packet channel, many destinations, replies carrying their source),
//! which is XUDP when the session id is 0. A malformed frame ends the whole connection.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::Dispatcher;
use crate::common::Network;
use crate::proxy::mux::frame::Meta;
use crate::proxy::mux::link::{write_frames, FrameReader, Link};
use crate::proxy::mux::packets::SERVER_MAX_DATAGRAM;
use crate::proxy::reverse::{is_internal, Control};
use crate::session::{Endpoint, Session, Traffic};
use crate::transport::BoxStream;

/// A connection without sessions for this long closes (Xray checks every 60 s).
pub const IDLE_CLOSE: Duration = Duration::from_secs(60);

/// Serves the Mux.Cool connection `stream` (positioned after the protocol header) to its end.
/// `conn` is the connection's session: its inbound, source and user go to every sub-session;
/// its network UDP says the connection may open UDP sessions only (Vision users, as Xray).
/// `sniffing` (the inbound's) is applied to each sub-session as to a connection of its own.
pub async fn serve(
    d: Arc<Dispatcher>,
    conn: Session,
    stream: BoxStream,
    inbound: Arc<Traffic>,
    sniffing: Option<Arc<crate::app::sniff::Sniffing>>,
) -> io::Result<()> {
    let (link, rx) = Link::new(None);
    serve_on(d, conn, stream, inbound, sniffing, (link, rx), None).await
}

/// A bridge's side of one reverse tunnel (VLESS Reverse or legacy `reverse`): what its portal
/// says in the control session, and how frames are read.
#[derive(Default)]
pub struct Tunnel {
    /// New frames carry their origin (VLESS Reverse).
    pub origin: bool,
    /// Legacy: the tunnel closes after [`CONTROL_IDLE`] without a control message.
    pub legacy: bool,
    /// The portal's last control state (0: active).
    pub state: AtomicU64,
    last: std::sync::Mutex<Option<Instant>>,
    /// The control session ended (a legacy tunnel no longer times out).
    control_ended: AtomicBool,
}

/// A legacy bridge's tunnel without a control message for this long closes (as Xray's).
pub const CONTROL_IDLE: Duration = Duration::from_secs(60);

impl Tunnel {
    pub fn new(origin: bool, legacy: bool) -> Tunnel {
        Tunnel {
            origin,
            legacy,
            last: std::sync::Mutex::new(Some(Instant::now())),
            ..Tunnel::default()
        }
    }

    fn touch(&self) {
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
    }

    fn timed_out(&self) -> bool {
        self.legacy
            && !self.control_ended.load(Ordering::Relaxed)
            && self
                .last
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_some_and(|t| t.elapsed() > CONTROL_IDLE)
    }

    /// Whether the portal still sends new sessions here.
    pub fn active(&self) -> bool {
        self.state.load(Ordering::Relaxed) == 0
    }
}

/// [`serve`] on a link made by the caller (a bridge counts its sessions); `tunnel`: the stream
/// is a reverse tunnel, this side the bridge.
pub async fn serve_on(
    d: Arc<Dispatcher>,
    conn: Session,
    stream: BoxStream,
    inbound: Arc<Traffic>,
    sniffing: Option<Arc<crate::app::sniff::Sniffing>>,
    (link, rx): (Arc<Link>, tokio::sync::mpsc::Receiver<Bytes>),
    tunnel: Option<Arc<Tunnel>>,
) -> io::Result<()> {
    let (r, w) = tokio::io::split(stream);
    let who = match &conn.user {
        Some(u) => format!(
            "[{}] mux from {} ({})",
            conn.inbound_tag, conn.source, u.email
        ),
        None => format!("[{}] mux from {}", conn.inbound_tag, conn.source),
    };
    tracing::debug!("{who}: Mux.Cool connection");
    let server = Server {
        d,
        conn,
        link: link.clone(),
        inbound,
        sniffing,
        tunnel,
    };
    // Reader and writer run in this one task: a stream's halves may share one waker slot per
    // direction (VMess drains its writes from reads), which two tasks would fight over.
    let write = async {
        let r = write_frames(w, rx, link.stopped()).await;
        link.shutdown();
        r
    };
    let read = async {
        let r = server.read(r).await;
        link.shutdown();
        r
    };
    let (_, r) = tokio::join!(write, read);
    match &r {
        Ok(n) => tracing::debug!("{who}: done after {n} sessions"),
        Err(e) if e.kind() == io::ErrorKind::InvalidData => {
            tracing::warn!("{who}: bad frame: {e}; closing the connection")
        }
        Err(e) => tracing::info!("{who}: {e}"),
    }
    r.map(|_| ())
}

struct Server {
    d: Arc<Dispatcher>,
    conn: Session,
    link: Arc<Link>,
    sniffing: Option<Arc<crate::app::sniff::Sniffing>>,
    inbound: Arc<Traffic>,
    tunnel: Option<Arc<Tunnel>>,
}

impl Server {
    /// Reads frames until the client is done, a frame is malformed, the writer failed, or the
    /// connection stayed without sessions for [`IDLE_CLOSE`]. Returns the sessions opened.
    async fn read(&self, r: tokio::io::ReadHalf<BoxStream>) -> io::Result<u32> {
        let mut reader = FrameReader::new(r, &[]);
        if self.tunnel.as_ref().is_some_and(|t| t.origin) {
            reader = reader.reverse();
        }
        let mut stop = self.link.stopped();
        let mut tick = tokio::time::interval(IDLE_CLOSE);
        tick.tick().await;
        let mut control = tokio::time::interval(Duration::from_secs(2));
        let mut seen = self.link.opened();
        loop {
            tokio::select! {
                f = reader.next() => {
                    let Some((meta, data)) = f? else { return Ok(self.link.opened()) };
                    if let Some((meta, data)) = self.link.handle(meta, data).await {
                        self.open(meta, data).await;
                    }
                }
                _ = stop.changed() => return Ok(self.link.opened()),
                _ = control.tick(), if self.tunnel.is_some() => {
                    if self.tunnel.as_ref().is_some_and(|t| t.timed_out()) {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            "no control message from the portal for 60 s",
                        ));
                    }
                }
                _ = tick.tick() => {
                    let opened = self.link.opened();
                    if self.link.active() == 0 && opened == seen {
                        return Ok(opened);
                    }
                    seen = opened;
                }
            }
        }
    }

    /// A New frame: starts the session (its first data, if any, goes with it).
    async fn open(&self, meta: Meta, data: Bytes) {
        let Some((network, dest)) = meta.target.clone() else {
            return;
        };
        let mut s = self.conn.clone();
        s.dest = dest.clone();
        s.network = network;
        if let Some(t) = &self.tunnel {
            if is_internal(&dest) {
                self.control(t, network, meta, data).await;
                return;
            }
            // The portal's source and local address, when it sent both (as Xray uses them).
            if let Some(o) = &meta.origin {
                let ep = |d: &crate::common::Destination| d.socket_addr().map(Endpoint::Ip);
                if let (Some(src), Some(local)) =
                    (ep(&o.source.1), o.local.as_ref().and_then(|l| ep(&l.1)))
                {
                    s.source = src;
                    s.local = local;
                }
            }
            tracing::debug!(
                "[{}] reverse session {} from {} via the portal's {} to {dest}",
                s.inbound_tag,
                meta.id,
                s.source,
                s.local
            );
        }
        let (d, inbound, sniffing) = (self.d.clone(), self.inbound.clone(), self.sniffing.clone());
        match network {
            Network::Tcp if self.conn.network == Network::Udp => {
                // A Vision user's Mux carries UDP only (as Xray: TCP goes through Vision).
                tracing::info!(
                    "[{}] mux from {}: TCP to {dest} refused: this Mux connection carries UDP only",
                    self.conn.inbound_tag,
                    self.conn.source
                );
                // Dropped at once: the session ends (with an error End frame).
                drop(self.link.add_stream(meta.id));
            }
            Network::Tcp => {
                let Some(stream) = self.link.add_stream(meta.id) else {
                    return;
                };
                if meta.has_data() && !data.is_empty() {
                    self.link.deliver(&Meta::keep(meta.id, None), data).await;
                }
                tokio::spawn(async move {
                    let mut stream: BoxStream = Box::new(stream);
                    if let Some(cfg) = &sniffing {
                        let router = d.router.load();
                        let fake = router.dns.as_deref().and_then(|x| x.fake());
                        stream = crate::app::sniff::io::stream(cfg, fake, &mut s, stream).await;
                    }
                    let _ = d.dispatch_tcp(s, stream, &inbound).await;
                });
            }
            Network::Udp => {
                let Some(p) = self
                    .link
                    .add_packets(meta.id, dest.clone(), SERVER_MAX_DATAGRAM)
                else {
                    return;
                };
                if meta.has_data() {
                    self.link
                        .deliver(&Meta::keep(meta.id, Some(dest)), data)
                        .await;
                }
                tokio::spawn(async move {
                    let tag = s.inbound_tag.clone();
                    let sniff = sniffing.as_deref();
                    if let Err(e) =
                        super::udp::serve_packets_sniffed(&d, s, Box::new(p), &inbound, sniff).await
                    {
                        tracing::debug!("[{tag}] mux udp session {} ended: {e}", meta.id);
                    }
                });
            }
        }
    }

    /// The portal's control session: each datagram is a `Control` message.
    async fn control(&self, t: &Arc<Tunnel>, network: Network, meta: Meta, data: Bytes) {
        if network != Network::Udp {
            drop(self.link.add_stream(meta.id));
            return;
        }
        let dest = match &meta.target {
            Some((_, d)) => d.clone(),
            None => return,
        };
        let Some(p) = self
            .link
            .add_packets(meta.id, dest.clone(), SERVER_MAX_DATAGRAM)
        else {
            return;
        };
        if meta.has_data() {
            self.link
                .deliver(&Meta::keep(meta.id, Some(dest)), data)
                .await;
        }
        let (t, link, tag) = (t.clone(), self.link.clone(), self.conn.inbound_tag.clone());
        tokio::spawn(async move {
            use crate::transport::PacketConn;
            let mut buf = [0u8; 512];
            while let Ok((n, _)) = p.recv_from(&mut buf).await {
                t.touch();
                match Control::decode(&buf[..n]) {
                    Ok(c) => {
                        if c.state != t.state.swap(c.state, Ordering::Relaxed) {
                            tracing::debug!(
                                "[{tag}] reverse tunnel: the portal says state {}",
                                c.state
                            );
                        }
                    }
                    Err(e) => {
                        tracing::info!("[{tag}] reverse tunnel: bad control message: {e}");
                        if t.legacy {
                            link.shutdown();
                        }
                        return;
                    }
                }
            }
            t.control_ended.store(true, Ordering::Relaxed);
        });
    }
}
