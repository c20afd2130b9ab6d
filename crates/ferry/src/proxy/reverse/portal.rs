//! The portal: an outbound whose connections go back through the bridges' tunnels. Each
//! tunnel connection is a *worker* (a Mux.Cool client link); a new session goes to the
//! non-draining worker with the fewest open sessions (any worker when all drain), as Xray's
//! `StaticMuxPicker`. Every worker carries a control session to `reverse:0`: a [`Control`]
//! every 10 s (the first at once), and `DRAIN` when the worker has opened more than
//! [`DRAIN_AFTER`] sessions, after which it takes no new session and closes once its last one
//! ends.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use super::{Control, DRAIN_AFTER, INTERNAL};
use crate::common::{Address, Destination};
use crate::proxy::mux::client;
use crate::proxy::mux::frame::Origin;
use crate::proxy::mux::link::Link;
use crate::proxy::mux::packets::CLIENT_MAX_DATAGRAM;
use crate::session::{Endpoint, Session};
use crate::transport::{BoxStream, Dialer, PacketConn};

/// The control session's heartbeat tick (a message every fifth tick).
const TICK: Duration = Duration::from_secs(2);
/// Capacity of the in-process pipe a legacy worker runs over.
const PIPE: usize = 64 * 1024;

struct Worker {
    link: Arc<Link>,
    draining: AtomicBool,
}

/// One reverse outbound (VLESS Reverse: a portal user's `reverse.tag`; legacy: a portal of the
/// `reverse` object).
pub struct Portal {
    tag: Arc<str>,
    /// Legacy: connections routed here to this domain become workers.
    domain: Option<String>,
    /// VLESS Reverse: New frames carry the session's origin.
    origin: bool,
    workers: Mutex<Vec<Arc<Worker>>>,
}

impl Portal {
    /// A VLESS Reverse portal (its workers are the user's command 4 connections).
    pub fn vless(tag: &str) -> Arc<Portal> {
        Arc::new(Portal {
            tag: tag.into(),
            domain: None,
            origin: true,
            workers: Mutex::new(Vec::new()),
        })
    }

    /// A legacy portal: connections routed to it for `domain` are its workers.
    pub fn legacy(tag: &str, domain: &str) -> Arc<Portal> {
        Arc::new(Portal {
            tag: tag.into(),
            domain: Some(domain.to_string()),
            origin: false,
            workers: Mutex::new(Vec::new()),
        })
    }

    pub fn tag(&self) -> &str {
        &self.tag
    }

    fn workers(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Worker>>> {
        self.workers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Workers still open (for tests and logs).
    pub fn open_workers(&self) -> usize {
        let mut w = self.workers();
        w.retain(|w| !w.link.is_closed());
        w.len()
    }

    /// Serves a tunnel connection as a worker until it closes.
    pub async fn serve_worker(&self, stream: BoxStream) {
        let w = self.attach(stream);
        run_worker(&self.tag, &w).await;
    }

    fn attach(&self, stream: BoxStream) -> Arc<Worker> {
        let w = Arc::new(Worker {
            link: client::start(stream, None),
            draining: AtomicBool::new(false),
        });
        let n = {
            let mut ws = self.workers();
            ws.retain(|w| !w.link.is_closed());
            ws.push(w.clone());
            ws.len()
        };
        tracing::info!(
            "reverse portal {}: a bridge connected ({n} workers)",
            self.tag
        );
        w
    }

    /// A worker for a new session.
    fn pick(&self) -> io::Result<Arc<Link>> {
        let mut ws = self.workers();
        ws.retain(|w| !w.link.is_closed());
        if ws.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::NotConnected,
                format!(
                    "reverse {}: empty worker list (no bridge is connected)",
                    self.tag
                ),
            ));
        }
        let least = |draining_ok: bool| {
            ws.iter()
                .filter(|w| draining_ok || !w.draining.load(Ordering::Relaxed))
                .min_by_key(|w| w.link.active())
                .map(|w| w.link.clone())
        };
        least(false)
            .or_else(|| least(true))
            .ok_or_else(|| io::Error::other("no mux client worker available"))
    }

    fn origin(&self, s: &Session) -> Option<Box<Origin>> {
        if !self.origin {
            return None;
        }
        let ep = |e: &Endpoint| e.socket_addr().map(|a| (s.network, Destination::from(a)));
        let source = ep(&s.source)?;
        Some(Box::new(Origin {
            source,
            local: ep(&s.local),
        }))
    }

    fn is_worker(&self, dest: &Destination) -> bool {
        self.domain
            .as_deref()
            .is_some_and(|d| dest.addr.domain() == Some(d))
    }

    async fn open_tcp(
        &self,
        dest: &Destination,
        origin: Option<Box<Origin>>,
    ) -> io::Result<BoxStream> {
        if self.is_worker(dest) {
            // A bridge's tunnel (legacy): the routed connection is relayed into a pipe whose
            // other end is the worker.
            let (a, b) = tokio::io::duplex(PIPE);
            let w = self.attach(Box::new(b));
            let tag = self.tag.clone();
            tokio::spawn(async move { run_worker(&tag, &w).await });
            return Ok(Box::new(a));
        }
        for _ in 0..8 {
            if let Some(s) = self.pick()?.open_stream_from(dest, 0, origin.clone()) {
                return Ok(Box::new(s));
            }
        }
        Err(io::Error::other("no mux client worker available"))
    }

    async fn open_udp(
        &self,
        dest: &Destination,
        origin: Option<Box<Origin>>,
    ) -> io::Result<Box<dyn PacketConn>> {
        for _ in 0..8 {
            if let Some(p) =
                self.pick()?
                    .open_packets_from(dest, CLIENT_MAX_DATAGRAM, origin.clone())
            {
                return Ok(Box::new(p));
            }
        }
        Err(io::Error::other("no mux client worker available"))
    }
}

/// Runs a worker's control session until its link closes; dropped (the tunnel's user removed),
/// it closes the link.
async fn run_worker(tag: &str, w: &Worker) {
    struct Close<'a>(&'a Link);
    impl Drop for Close<'_> {
        fn drop(&mut self) {
            self.0.shutdown();
        }
    }
    let _close = Close(&w.link);
    let mut stopped = w.link.stopped();
    tokio::select! {
        _ = heartbeat(w) => {}
        _ = stopped.wait_for(|s| *s) => {}
    }
    let _ = stopped.wait_for(|s| *s).await;
    tracing::info!("reverse portal {tag}: a bridge's connection closed");
}

/// The control session of one worker: returns once it drained (or the link closed).
async fn heartbeat(w: &Worker) {
    let internal = Destination::new(Address::Domain(INTERNAL.into()), 0);
    let Some(ctl) = w.link.open_packets(&internal, 0, CLIENT_MAX_DATAGRAM) else {
        return;
    };
    let mut tick = tokio::time::interval(TICK);
    let mut counter = 0u32;
    loop {
        tick.tick().await;
        if w.link.is_closed() {
            return;
        }
        let drain = w.link.opened() > DRAIN_AFTER;
        counter = (counter + 1) % 5;
        if (drain || counter == 1)
            && ctl
                .send_to(&Control::encode(drain), &internal)
                .await
                .is_err()
        {
            return;
        }
        if drain {
            break;
        }
    }
    w.draining.store(true, Ordering::Relaxed);
    tracing::debug!(
        "reverse portal: a worker drains after {} sessions",
        w.link.opened()
    );
    // The control session ends; the link closes once its last session has.
    drop(ctl);
    std::future::pending::<()>().await;
}

#[async_trait]
impl Dialer for Portal {
    async fn dial_tcp(&self, dest: &Destination) -> io::Result<BoxStream> {
        self.open_tcp(dest, None).await
    }

    async fn dial_udp(&self, dest: &Destination) -> io::Result<Box<dyn PacketConn>> {
        self.open_udp(dest, None).await
    }

    async fn dial_tcp_for(&self, session: &Session) -> io::Result<BoxStream> {
        self.open_tcp(&session.dest, self.origin(session)).await
    }

    async fn dial_udp_for(&self, session: &Session) -> io::Result<Box<dyn PacketConn>> {
        self.open_udp(&session.dest, self.origin(session)).await
    }
}
