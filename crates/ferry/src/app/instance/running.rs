//! The running inbounds of an instance: binding one (its listeners and their tasks), finding
//! one, and stopping them.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::task::JoinHandle;

use super::serve::Serve;
use super::Core;
use crate::common::Network;
use crate::config::{Inbound, Listen};
use crate::proxy::InboundHandler;
use crate::registry::Swap;
use crate::session::{ConnInfo, Endpoint};
use crate::transport::tcp::TProxy;
use crate::transport::Listener;

/// A running inbound: its handler (and user manager), and the tasks serving its listeners.
pub struct RunningInbound {
    pub tag: String,
    pub protocol: String,
    pub handler: Arc<dyn InboundHandler>,
    /// Where it listens (as configured).
    pub listen: Listen,
    /// Its JSON object as configured (the API reads its users' accounts from it; a reload
    /// keeps the inbound when the new config has the same object).
    pub json: serde_json::Value,
    /// The addresses it is bound to (TCP, UDP and unix).
    pub bound: Vec<(Network, Endpoint)>,
    /// What serves its connections (a fallback of another inbound hands it some directly).
    pub(crate) serve: Arc<Serve>,
    tasks: std::sync::Mutex<Vec<JoinHandle<()>>>,
}

impl RunningInbound {
    /// Stops its listeners and waits until their sockets are closed.
    async fn close(&self) {
        let tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|e| e.into_inner()));
        for t in &tasks {
            t.abort();
        }
        for t in tasks {
            let _ = t.await;
        }
    }
}

impl Drop for RunningInbound {
    fn drop(&mut self) {
        for t in self
            .tasks
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            t.abort();
        }
    }
}

/// Aborts the tasks of an inbound that failed to start.
struct Tasks(Vec<JoinHandle<()>>);
impl Drop for Tasks {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

/// The running inbounds of an instance.
pub type RunningInbounds = Swap<Vec<Arc<RunningInbound>>>;

impl Core {
    /// Binds one inbound's listeners and starts serving it. Its tag must be new; when a
    /// listener cannot be bound, nothing of it stays running.
    pub async fn add_inbound(&self, ib: Inbound) -> io::Result<()> {
        if !ib.tag.is_empty() && self.inbound(&ib.tag).is_some() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("inbound {:?} exists", ib.tag),
            ));
        }
        let tag: Arc<str> = ib.tag.as_str().into();
        let serve = Arc::new(Serve {
            handler: ib.handler.clone(),
            tag: tag.clone(),
            dispatcher: self.dispatcher.clone(),
            acceptor: ib.stream.acceptor(),
            traffic: Arc::new(self.counters.load().inbound(&ib.tag)),
            live: self.live.clone(),
            sniffing: ib.sniffing.clone(),
        });
        let (bound, mut tasks) = bind(&ib, &serve).await?;
        for (net, local) in &bound {
            tracing::info!(
                "inbound {:?} ({}) listening on {net} {local}",
                ib.tag,
                ib.protocol
            );
        }
        let running = Arc::new(RunningInbound {
            tag: ib.tag,
            protocol: ib.protocol,
            handler: ib.handler,
            listen: ib.listen,
            json: ib.json,
            bound,
            serve,
            tasks: std::sync::Mutex::new(std::mem::take(&mut tasks.0)),
        });
        self.inbounds.update(|v| {
            let mut n = v.clone();
            n.push(running);
            (n, ())
        });
        Ok(())
    }

    /// Every address bound now, by inbound tag (TCP, UDP and unix).
    pub fn bound(&self) -> Vec<(String, Network, Endpoint)> {
        self.inbounds
            .load()
            .iter()
            .flat_map(|i| i.bound.iter().map(|(n, e)| (i.tag.clone(), *n, e.clone())))
            .collect()
    }

    /// Stops one inbound's listeners (its live connections go on) and returns once its ports
    /// are free; false when no inbound has this tag.
    pub async fn remove_inbound(&self, tag: &str) -> bool {
        self.remove_inbounds(|i| i.tag == tag).await > 0
    }

    /// Stops the listeners of every inbound `which` picks (their live connections go on) and
    /// returns how many once their ports are free.
    pub(super) async fn remove_inbounds(
        &self,
        which: impl Fn(&Arc<RunningInbound>) -> bool,
    ) -> usize {
        let gone = self.inbounds.update(|v| {
            let (out, keep): (Vec<_>, Vec<_>) = v.iter().cloned().partition(|i| which(i));
            (keep, out)
        });
        let n = gone.len();
        for i in gone {
            i.close().await;
        }
        n
    }

    /// The running inbound with this tag.
    pub fn inbound(&self, tag: &str) -> Option<Arc<RunningInbound>> {
        self.inbounds.load().iter().find(|i| i.tag == tag).cloned()
    }
}

/// Binds every listener of `ib` (a unix path, or TCP and UDP on each port of its ranges, as
/// its protocol serves them) and spawns the tasks serving them: the addresses bound, and the
/// tasks (aborted when dropped, so a failed bind leaves nothing running).
async fn bind(ib: &Inbound, serve: &Arc<Serve>) -> io::Result<(Vec<(Network, Endpoint)>, Tasks)> {
    let mut tasks = Tasks(Vec::new());
    let mut bound = Vec::new();
    let named = |e: io::Error, what: String| {
        io::Error::new(
            e.kind(),
            format!("inbound {:?}: listen {what}: {e}", ib.tag),
        )
    };
    let mut addrs = Vec::new();
    match &ib.listen {
        Listen::Ip(ip, ranges) => {
            for (a, b) in ranges {
                for port in *a..=*b {
                    addrs.push(SocketAddr::new(*ip, port));
                }
            }
        }
        Listen::Unix(path) => {
            let l = Listener::unix(path).map_err(|e| named(e, path.text()))?;
            let local = l.local()?;
            bound.push((Network::Tcp, local));
            tasks.0.push(tokio::spawn(serve.clone().accept_loop(l)));
        }
        Listen::Device => {
            let any: SocketAddr = ([0, 0, 0, 0], 0).into();
            let ctx = serve.ctx(ConnInfo::new(any.into(), any.into()));
            let task = ib
                .handler
                .open_device(ctx)
                .map_err(|e| io::Error::new(e.kind(), format!("inbound {:?}: {e}", ib.tag)))?;
            let tag = ib.tag.clone();
            tasks.0.push(tokio::spawn(async move {
                if let Err(e) = task.await {
                    tracing::error!("inbound {tag:?} stopped: {e}");
                }
            }));
        }
    }
    let mut sockopt = ib.stream.sockopt.clone();
    if ib.handler.follows_redirect() && sockopt.tproxy == TProxy::Off {
        sockopt.tproxy = TProxy::Redirect;
    }
    for addr in addrs {
        if let (crate::transport::chain::Network::Kcp(k), true) = (
            &ib.stream.network,
            ib.handler.networks().contains(&Network::Tcp),
        ) {
            // mKCP: the stream protocol's connections arrive as sessions on a UDP socket.
            let u = crate::transport::udp::bind(addr, &sockopt)
                .map_err(|e| named(e, format!("udp {addr} (mKCP)")))?;
            let l = Listener::kcp(u, k.clone(), ib.stream.finalmask.udp.clone())?;
            bound.push((Network::Udp, l.local()?));
            tasks.0.push(tokio::spawn(serve.clone().accept_loop(l)));
            continue;
        }
        if ib.handler.networks().contains(&Network::Tcp) {
            let l = Listener::tcp(addr, sockopt.clone())
                .map_err(|e| named(e, format!("tcp {addr}")))?;
            let local = l.local()?;
            bound.push((Network::Tcp, local));
            tasks.0.push(tokio::spawn(serve.clone().accept_loop(l)));
        }
        if ib.handler.networks().contains(&Network::Udp) {
            let u = crate::transport::udp::bind(addr, &sockopt)
                .map_err(|e| named(e, format!("udp {addr}")))?;
            let local = u.local_addr()?;
            bound.push((Network::Udp, local.into()));
            let ctx = serve.ctx(ConnInfo::new(local.into(), local.into()));
            let h = ib.handler.clone();
            let own = crate::common::own::register(Network::Udp, local);
            tasks.0.push(tokio::spawn(async move {
                let _own = own;
                if let Err(e) = h.serve_udp(Arc::new(u), ctx).await {
                    tracing::error!("udp inbound on {local} stopped: {e}");
                }
            }));
        }
    }
    Ok((bound, tasks))
}
