//! The TUN device's two pumps: packets the system routes into the device enter the stack,
//! packets the stack writes go out of the device.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;

use super::Settings;
use crate::common::Network;
use crate::proxy::stack_in::{self, Abort, Owner};
use crate::proxy::{Accepted, DeviceTask, InboundCtx, InboundHandler, User};
use crate::transport::BoxStream;

/// The stack's own addresses: never routed anywhere (RFC 7600's IPv4 dummy address and the
/// IPv6 discard prefix); the stack is promiscuous, so every other destination is a flow.
const STACK_ADDRS: [IpAddr; 2] = [
    IpAddr::V4(Ipv4Addr::new(192, 0, 0, 8)),
    IpAddr::V6(Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 1)),
];

pub struct Tun {
    settings: Settings,
}

impl Tun {
    pub fn new(settings: Settings) -> Tun {
        Tun { settings }
    }
}

#[async_trait]
impl InboundHandler for Tun {
    async fn accept(&self, _stream: BoxStream, _ctx: &InboundCtx) -> io::Result<Accepted> {
        Err(io::Error::other(
            "a TUN inbound reads its device, not connections",
        ))
    }

    fn networks(&self) -> &[Network] {
        &[]
    }

    fn open_device(&self, ctx: InboundCtx) -> io::Result<DeviceTask> {
        let s = &self.settings;
        let fd = Arc::new(crate::common::sys::open_tun(&s.name, s.mtu)?);
        for &(ip, prefix) in &s.address {
            crate::common::sys::add_address(&s.name, ip, prefix)?;
        }
        let routes = match s.route.enabled {
            false => None,
            true => {
                let index = crate::common::sys::if_index(&s.name)?;
                let (routes, rules) = super::route::plan(&s.route, &s.name, index, &s.address);
                let n = (routes.len(), rules.len());
                let done = super::route::Installed::install(routes, rules)?;
                tracing::info!(
                    "[{}] tun: auto_route: {} routes in table {}, {} rules from priority {}",
                    ctx.tag,
                    n.0,
                    s.route.table,
                    n.1,
                    s.route.rule_index
                );
                Some(done)
            }
        };
        let owner = Arc::new(OnceLock::<Owner>::new());
        if s.level != 0 {
            let level = s.level;
            let _ = owner.set(Arc::new(move |_| Some(User::new("", level))));
        }
        let (si, packets) = stack_in::start(
            STACK_ADDRS.to_vec(),
            s.mtu as usize,
            &ctx,
            super::PROTOCOL.name(),
            s.level,
            owner,
        )?;
        tracing::info!("[{}] tun: {} up, MTU {}", ctx.tag, s.name, s.mtu);
        let name = s.name.clone();
        let mtu = s.mtu as usize;
        Ok(Box::pin(async move {
            // The whole inbound moves in (its accept task lives as long as this serves).
            let si = si;
            // Routes and rules go when this stops serving.
            let _routes = routes;
            let writer = tokio::spawn(write_loop(fd.clone(), packets));
            let _abort = Abort(vec![writer.abort_handle()]);
            let mut buf = vec![0u8; mtu.max(1500) + 64];
            loop {
                let mut g = fd.readable().await?;
                match g.try_io(|f| {
                    let mut r = f.get_ref();
                    r.read(&mut buf)
                }) {
                    Ok(Ok(0)) => {
                        return Err(io::Error::other(format!("{name}: the device closed")));
                    }
                    Ok(Ok(n)) => si.stack.input(&buf[..n]),
                    Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                    Ok(Err(e)) => return Err(io::Error::new(e.kind(), format!("{name}: {e}"))),
                    Err(_would_block) => {}
                }
            }
        }))
    }
}

/// Writes the stack's packets to the device. A packet the device refuses (a route the kernel
/// lost, a full queue) is dropped, as a link would drop it; TCP resends.
async fn write_loop(fd: Arc<AsyncFd<std::fs::File>>, mut packets: mpsc::Receiver<Vec<u8>>) {
    while let Some(p) = packets.recv().await {
        loop {
            let Ok(mut g) = fd.writable().await else {
                return;
            };
            match g.try_io(|f| {
                let mut w = f.get_ref();
                w.write(&p)
            }) {
                Ok(Ok(_)) => break,
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                Ok(Err(e)) => {
                    tracing::debug!("tun: a packet of {} bytes dropped: {e}", p.len());
                    break;
                }
                Err(_would_block) => {}
            }
        }
    }
}
