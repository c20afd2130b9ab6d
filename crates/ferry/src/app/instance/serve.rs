//! One inbound's serving state: its accept loop, and each connection through its transport
//! layers to its protocol.

use std::sync::Arc;

use super::accept_log::{AcceptLog, ACCEPT_BACKOFF, ACCEPT_LOG_EVERY};
use super::live::{Live, LiveGuard};
use crate::app::dispatcher::Dispatcher;
use crate::proxy::{InboundCtx, InboundHandler};
use crate::session::{ConnInfo, Traffic};
use crate::transport::chain::Acceptor;
use crate::transport::Listener;

/// What every connection of one inbound shares.
/// One inbound's serving state, shared by its accept loops (and by fallbacks of other inbounds
/// that hand it connections).
pub(crate) struct Serve {
    pub(super) handler: Arc<dyn InboundHandler>,
    pub(super) tag: Arc<str>,
    pub(super) dispatcher: Arc<Dispatcher>,
    pub(super) acceptor: Acceptor,
    pub(super) traffic: Arc<Traffic>,
    pub(super) live: Arc<Live>,
    pub(super) sniffing: Option<Arc<crate::app::sniff::Sniffing>>,
}

impl Serve {
    /// Counts a connection live while the guard lasts.
    pub(crate) fn live_guard(&self) -> LiveGuard {
        self.live.enter()
    }

    pub(crate) fn ctx(&self, info: ConnInfo) -> InboundCtx {
        InboundCtx {
            tag: self.tag.clone(),
            info,
            services: self.dispatcher.clone(),
            traffic: self.traffic.clone(),
            sniffing: self.sniffing.clone(),
        }
    }

    pub(super) async fn accept_loop(self: Arc<Self>, l: Listener) {
        let local = l
            .local()
            .map(|e| e.to_string())
            .unwrap_or_else(|_| "?".into());
        let mut log = AcceptLog::default();
        loop {
            let (stream, info) = match l.accept().await {
                Ok(x) => {
                    if let Some(all) = log.accepted() {
                        tracing::warn!(
                            "accept on {local}: accepting again after {all} failed accept(s)"
                        );
                    }
                    x
                }
                Err(e) => {
                    match log.failed(std::time::Instant::now()) {
                        Some(0) => tracing::warn!(
                            "accept on {local}: {e}; backing off, the listener stays (logged once per {}s)",
                            ACCEPT_LOG_EVERY.as_secs()
                        ),
                        Some(n) => tracing::warn!(
                            "accept on {local}: {e} ({n} more since the last line); backing off, the listener stays"
                        ),
                        None => {}
                    }
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            };
            let guard = self.live.enter();
            // What the task keeps for the connection's life: the guard, this inbound's shared
            // state, the context, and the serve future (set up here and spawned as it is: an
            // `async` block awaiting it would hold it twice).
            let ctx = self.ctx(info);
            tokio::spawn(self.clone().serve_conn(stream, ctx, guard));
        }
    }

    /// Serves one connection of this inbound: its transport layers, then its protocol (each
    /// call of a multiplexing transport as a connection of its own). A `fn` returning the future
    /// keeps each argument once, where an `async fn` would keep it twice.
    pub(crate) fn serve_conn(
        self: Arc<Self>,
        stream: crate::transport::BoxStream,
        mut ctx: InboundCtx,
        live: LiveGuard,
    ) -> impl std::future::Future<Output = ()> + Send {
        let me = self;
        async move {
            let _live = live;
            let stream = if me.acceptor.is_empty() {
                stream
            } else {
                let limit = me.dispatcher.handshake_timeout();
                let accepted = me
                    .acceptor
                    .accept_within(stream, &mut ctx.info, limit)
                    .await;
                match accepted {
                    Ok(s) => s,
                    Err(e) => {
                        let probe = e.get_ref().and_then(|e| {
                            e.downcast_ref::<crate::transport::reality::server::Probe>()
                        });
                        match probe {
                            // Not REALITY's: counted as a rejected handshake.
                            Some(p) => ctx.reject("reality", p.reason, &p.detail),
                            None => tracing::info!(
                                "[{}] connection from {}: {e}",
                                me.tag,
                                ctx.info.source
                            ),
                        }
                        return;
                    }
                }
            };
            if let Some(server) = me.acceptor.server().cloned() {
                // Each call of the connection is served as a connection of its own.
                let each = |s: crate::transport::BoxStream, info: ConnInfo| {
                    let me = me.clone();
                    let ctx = me.ctx(info);
                    let guard = me.live.enter();
                    tokio::spawn(async move {
                        let _guard = guard;
                        if let Err(e) = me.dispatcher.serve(&*me.handler, s, &ctx).await {
                            tracing::info!(
                                "[{}] connection from {} ended: {e}",
                                me.tag,
                                ctx.info.source
                            );
                        }
                    });
                };
                if let Err(e) = server.serve(stream, &ctx.info, &each).await {
                    tracing::info!(
                        "[{}] {} connection from {}: {e}",
                        me.tag,
                        server.name(),
                        ctx.info.source
                    );
                }
                return;
            }
            if let Err(e) = me.dispatcher.serve(&*me.handler, stream, &ctx).await {
                tracing::info!(
                    "[{}] connection from {} ended: {e}",
                    me.tag,
                    ctx.info.source
                );
            }
        }
    }
}
