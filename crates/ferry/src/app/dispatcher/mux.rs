//! The server side of Mux.Cool (VLESS and VMess command 3, as Xray's `common/mux`): every
//! session a client opens on the connection is routed, dialed and counted like a connection of
//! its own, as the connection's user. TCP sessions are relayed as streams; UDP sessions are
//! full-cone (one outbound packet channel, many destinations, replies carrying their source),
//! which is XUDP when the session id is 0. A malformed frame ends the whole connection.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::Dispatcher;
use crate::common::Network;
use crate::proxy::mux::frame::Meta;
use crate::proxy::mux::link::{write_frames, FrameReader, Link};
use crate::proxy::mux::packets::SERVER_MAX_DATAGRAM;
use crate::session::{Session, Traffic};
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
}

impl Server {
    /// Reads frames until the client is done, a frame is malformed, the writer failed, or the
    /// connection stayed without sessions for [`IDLE_CLOSE`]. Returns the sessions opened.
    async fn read(&self, r: tokio::io::ReadHalf<BoxStream>) -> io::Result<u32> {
        let mut reader = FrameReader::new(r, &[]);
        let mut stop = self.link.stopped();
        let mut tick = tokio::time::interval(IDLE_CLOSE);
        tick.tick().await;
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
}
