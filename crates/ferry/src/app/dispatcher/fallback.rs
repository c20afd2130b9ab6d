//! Fallbacks: a connection that is not its inbound's protocol goes to the fallback the inbound
//! chose, dialed as Xray dials it, or handed in-process to an inbound of this instance.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use super::Dispatcher;
use crate::common::Destination;
use crate::proxy::InboundCtx;
use crate::relay;
use crate::session::Endpoint;
use crate::transport::BoxStream;

/// How many fallbacks one connection may take in-process (one inbound of this instance handing
/// it to another) before the next goes through a socket, as every fallback does in Xray: a
/// config whose fallbacks loop then loops through sockets as it would in Xray, not in one task.
const LOCAL_HOPS: u8 = 4;

tokio::task_local! {
    /// In-process fallback hops of the connection this task serves.
    static HOPS: u8;
}

/// The instance's running inbounds, as a fallback looks for one of them (the instance provides
/// them; the dispatcher holds them weakly: the inbounds hold the dispatcher).
pub trait LocalInbounds: Send + Sync {
    /// The inbound that a connection dialed to `dest` would reach, and the local endpoint it
    /// would arrive on.
    fn find(&self, dest: &Destination) -> Option<(Arc<dyn LocalInbound>, Endpoint)>;
}

/// One running inbound, handed connections in-process.
pub trait LocalInbound: Send + Sync {
    /// Serves `stream` as a connection accepted with `info` (its transport layers, PROXY
    /// parsing and protocol run as for any), counted live while it lasts.
    fn serve_local(
        self: Arc<Self>,
        stream: BoxStream,
        info: crate::session::ConnInfo,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;
}

impl Dispatcher {
    /// Relays a connection that is not the inbound's protocol to its fallback: dialed as Xray
    /// does (up to five retries, backing off from 100 ms), a PROXY header first when `xver`
    /// asks, then every byte the client sent. `closes`: the client is closed when the fallback
    /// ends (else held `uplinkOnly`, without a FIN, as Xray holds a raw or REALITY client).
    pub(super) async fn fall_back(
        &self,
        client: BoxStream,
        fb: &crate::proxy::fallback::Fallback,
        closes: bool,
        ctx: &InboundCtx,
    ) -> io::Result<()> {
        use crate::transport::Dialer;
        use tokio::io::AsyncWriteExt;
        // The PROXY header `xver` asks for, with the client's own addresses.
        let header = (fb.xver > 0).then(|| {
            crate::transport::proxy_protocol::encode(fb.xver, &ctx.info.source, &ctx.info.local)
        });
        let hops = HOPS.try_with(|h| *h).unwrap_or(0);
        if hops < LOCAL_HOPS {
            if let Some((serve, local)) = self.local.upgrade().and_then(|l| l.find(&fb.dest)) {
                // The header goes first, as it would on a dialed socket.
                let stream: BoxStream = match header {
                    Some(h) => {
                        Box::new(crate::transport::prefixed::Prefixed::new(h.into(), client))
                    }
                    None => client,
                };
                // Boxed: every connection's future would otherwise carry this path's state.
                let local = self.fall_back_locally(stream, fb, ctx, serve, local, hops);
                return Box::pin(local).await;
            }
        }
        let dialer = crate::transport::SocketDialer {
            opts: Default::default(),
        };
        let mut delay = Duration::from_millis(100);
        let mut attempt = 0;
        let mut server = loop {
            match dialer.dial_tcp(&fb.dest).await {
                Ok(s) => break s,
                Err(e) if attempt < 5 => {
                    tracing::debug!("[{}] fallback {}: {e}; retrying", ctx.tag, fb.dest);
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                    attempt += 1;
                }
                Err(e) => {
                    tracing::warn!(
                        "[{}] connection from {}: fallback {} unreachable: {e}",
                        ctx.tag,
                        ctx.info.source,
                        fb.dest
                    );
                    return Ok(());
                }
            }
        };
        if let Some(h) = header {
            server.write_all(&h).await?;
        }
        tracing::info!(
            "[{}] connection from {} to fallback {}",
            ctx.tag,
            ctx.info.source,
            fb.dest
        );
        let level = self.level(0);
        let opts = crate::relay::RelayOpts {
            fin_to_client: closes,
            ..relay::RelayOpts::for_level(&level)
        };
        let counters = crate::relay::Counters::default();
        crate::relay::run(client, server, &opts, &counters).await.1
    }

    /// A fallback to an inbound of this instance: the connection (`stream`: the PROXY header
    /// first when `xver` asks, then the client's bytes) goes to it in-process, as if it had been
    /// dialed and accepted (the inbound's transport layers, PROXY parsing and protocol run as for
    /// any connection), without the loopback socket, its two copies and a second relay.
    async fn fall_back_locally(
        &self,
        stream: BoxStream,
        fb: &crate::proxy::fallback::Fallback,
        ctx: &InboundCtx,
        serve: Arc<dyn LocalInbound>,
        local: Endpoint,
        hops: u8,
    ) -> io::Result<()> {
        // Who the inbound sees: a dialed connection's source is the loopback address it went
        // to (unix: the socket's own name, as an accepted unix connection shows).
        let source = match &local {
            Endpoint::Ip(a) => Endpoint::Ip(std::net::SocketAddr::new(a.ip(), 0)),
            unix => unix.clone(),
        };
        tracing::info!(
            "[{}] connection from {} to fallback {} (in-process)",
            ctx.tag,
            ctx.info.source,
            fb.dest
        );
        let info = crate::session::ConnInfo::new(source, local);
        HOPS.scope(hops + 1, serve.serve_local(stream, info)).await;
        Ok(())
    }
}
