//! The running inbounds as fallbacks find them: a fallback to a listener of this instance is
//! handed to its inbound in-process.

use std::sync::Arc;

use super::{RunningInbounds, Serve};
use crate::app::dispatcher::fallback::{LocalInbound, LocalInbounds};
use crate::common::{Destination, Network};
use crate::session::{ConnInfo, Endpoint};
use crate::transport::BoxStream;

impl LocalInbounds for RunningInbounds {
    /// The inbound of this instance that a connection dialed to `dest` would reach, and the
    /// local endpoint it would arrive on: a TCP listener on that port and address (or on the
    /// unspecified address, for a loopback `dest`), or the same unix path or abstract name.
    fn find(&self, dest: &Destination) -> Option<(Arc<dyn LocalInbound>, Endpoint)> {
        use crate::common::Address;
        let running = self.load();
        for ib in running.iter() {
            for (net, bound) in &ib.bound {
                if *net != Network::Tcp {
                    continue;
                }
                let hit = match (bound, &dest.addr) {
                    (Endpoint::Ip(a), Address::Ip(ip)) if a.port() == dest.port => {
                        let same_family = a.is_ipv4() == ip.is_ipv4() || a.is_ipv6();
                        (a.ip() == *ip || (a.ip().is_unspecified() && ip.is_loopback()))
                            && same_family
                    }
                    (Endpoint::Unix(path), Address::Domain(d)) if dest.port == 0 => {
                        crate::transport::listener::unix_text_without_mode(path) == &**d
                    }
                    _ => false,
                };
                if hit {
                    let local = match (bound, &dest.addr) {
                        (Endpoint::Ip(a), Address::Ip(ip)) => {
                            Endpoint::Ip(std::net::SocketAddr::new(*ip, a.port()))
                        }
                        _ => bound.clone(),
                    };
                    let serve: Arc<dyn LocalInbound> = ib.serve.clone();
                    return Some((serve, local));
                }
            }
        }
        None
    }
}

impl LocalInbound for Serve {
    fn serve_local(
        self: Arc<Self>,
        stream: BoxStream,
        info: ConnInfo,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        let ctx = self.ctx(info);
        let live = self.live_guard();
        Box::pin(self.serve_conn(stream, ctx, live))
    }
}
