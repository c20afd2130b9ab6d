//! The WireGuard outbound: a [`Dialer`] whose connections are TCP connections and UDP sockets
//! of its own stack, inside the tunnel. The device starts on first use (as Xray's): each
//! peer's endpoint is resolved through the `dns` object and reached over a UDP channel of the
//! outbound's own dialer (so `sockopt` applies); domain targets resolve the same way, to the
//! families the tunnel has an address of, in `domainStrategy`'s order.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::{mpsc, Mutex};

use super::config::Settings;
use super::device::{self, Device, Link};
use crate::common::{Address, Destination};
use crate::netstack::{self, Stack, UdpFlow};
use crate::proxy::dns::Resolve;
use crate::transport::{BoxStream, Dialer, PacketConn};

pub struct Outbound {
    settings: Settings,
    dialer: Arc<dyn Dialer>,
    names: Arc<Resolver>,
    running: Mutex<Option<Running>>,
}

/// A started device and the tasks that serve it (stopped with it).
struct Running {
    dev: Arc<Device>,
    tasks: Vec<tokio::task::AbortHandle>,
}

impl Drop for Running {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Names to addresses, in `domainStrategy`'s order.
struct Resolver {
    dns: Arc<dyn Resolve>,
    strategy: super::config::Strategy,
    has4: bool,
    has6: bool,
}

impl Resolver {
    /// One address of `name`; `inside`: a target in the tunnel (only the families it has).
    async fn ip(&self, name: &str, inside: bool) -> io::Result<IpAddr> {
        let (mut a, mut aaaa, prefer6) = self.strategy.families();
        if inside {
            a &= self.has4;
            aaaa &= self.has6;
        }
        let answer = self
            .dns
            .lookup(name, a, aaaa)
            .await
            .ok_or_else(|| io::Error::other(format!("{name}: no answer")))?;
        let pick = |want6: bool| answer.ips.iter().copied().find(|ip| ip.is_ipv6() == want6);
        pick(prefer6)
            .or_else(|| pick(!prefer6))
            .ok_or_else(|| io::Error::other(format!("{name}: no address")))
    }

    async fn target(&self, dest: &Destination) -> io::Result<SocketAddr> {
        let ip = match &dest.addr {
            Address::Ip(ip) => *ip,
            Address::Domain(d) => self.ip(d, true).await?,
        };
        Ok(SocketAddr::new(ip, dest.port))
    }
}

impl Outbound {
    pub fn new(settings: Settings, dialer: Arc<dyn Dialer>, dns: Arc<dyn Resolve>) -> Outbound {
        Outbound {
            names: Arc::new(Resolver {
                dns,
                strategy: settings.strategy,
                has4: settings.address.iter().any(IpAddr::is_ipv4),
                has6: settings.address.iter().any(IpAddr::is_ipv6),
            }),
            settings,
            dialer,
            running: Mutex::new(None),
        }
    }

    async fn device(&self) -> io::Result<Arc<Device>> {
        let mut running = self.running.lock().await;
        if let Some(r) = running.as_ref() {
            return Ok(r.dev.clone());
        }
        let (out, packets) = mpsc::channel(1024);
        let (stack, _) = Stack::new(
            &netstack::Config {
                addrs: self.settings.address.clone(),
                mtu: self.settings.mtu,
                promiscuous: false,
            },
            out,
            None,
        );
        let dev = Device::new(self.settings.secret_key, stack, self.settings.reserved);
        let mut tasks = vec![
            tokio::spawn(Device::send_loop(Arc::downgrade(&dev), packets)).abort_handle(),
            tokio::spawn(Device::timers(Arc::downgrade(&dev))).abort_handle(),
        ];
        for p in &self.settings.peers {
            let Some(ep) = &p.endpoint else {
                continue;
            };
            let to = Destination::parse(ep).ok_or_else(|| {
                io::Error::other(format!("wireguard: endpoint {ep:?} is not host:port"))
            })?;
            let to = match &to.addr {
                Address::Domain(d) => {
                    Destination::new(Address::Ip(self.names.ip(d, false).await?), to.port)
                }
                Address::Ip(_) => to,
            };
            let conn = self.dialer.dial_udp(&to).await?;
            if let Some(s) = conn.udp_socket() {
                device::size_buffers(s);
            }
            let peer = dev.add_peer(p, Link::Conn(conn, to), None);
            tasks.push(
                tokio::spawn(device::receive_loop(Arc::downgrade(&dev), peer.clone()))
                    .abort_handle(),
            );
            dev.initiate(&peer).await;
        }
        *running = Some(Running {
            dev: dev.clone(),
            tasks,
        });
        Ok(dev)
    }
}

#[async_trait]
impl Dialer for Outbound {
    async fn dial_tcp(&self, dest: &Destination) -> io::Result<BoxStream> {
        let to = self.names.target(dest).await?;
        let dev = self.device().await?;
        Ok(Box::new(dev.stack.connect(to).await?))
    }

    async fn dial_udp(&self, _dest: &Destination) -> io::Result<Box<dyn PacketConn>> {
        let dev = self.device().await?;
        Ok(Box::new(TunnelUdp {
            flow: dev.stack.udp()?,
            names: self.names.clone(),
        }))
    }
}

/// A UDP socket in the tunnel, resolving names it sends to.
struct TunnelUdp {
    flow: UdpFlow,
    names: Arc<Resolver>,
}

#[async_trait]
impl PacketConn for TunnelUdp {
    async fn send_to(&self, data: &[u8], dest: &Destination) -> io::Result<()> {
        let to = self.names.target(dest).await?;
        self.flow.send(data, to).await
    }

    async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, Destination)> {
        self.flow.recv_from(buf).await
    }
}
