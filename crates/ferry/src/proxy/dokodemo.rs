//! `dokodemo-door` (alias `tunnel`): forwards everything arriving on a port to one fixed address.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::net::UdpSocket;

use super::{Accepted, InboundBuild, InboundCtx, InboundHandler};
use crate::app::udp::{UdpNat, UdpReply, MAX_DATAGRAM};
use crate::common::{Address, Destination, Network};
use crate::config::reader::{ConfigError, Obj, Result};
use crate::transport::BoxStream;

pub struct Dokodemo {
    dest: Destination,
    networks: Vec<Network>,
}

pub fn build(o: &Obj<'_>, _b: &InboundBuild<'_>) -> Result<Arc<dyn InboundHandler>> {
    let addr = o
        .str("address")?
        .ok_or_else(|| ConfigError::new(o.key_path("address"), "is required"))?;
    let port = o
        .port("port")?
        .ok_or_else(|| ConfigError::new(o.key_path("port"), "is required"))?;
    let mut networks = Vec::new();
    for n in o.str_list("network")?.unwrap_or_else(|| vec!["tcp".into()]) {
        match n.to_ascii_lowercase().as_str() {
            "tcp" => networks.push(Network::Tcp),
            "udp" => networks.push(Network::Udp),
            other => {
                return Err(ConfigError::new(
                    o.key_path("network"),
                    format!("unknown network {other:?}"),
                ))
            }
        }
    }
    if o.bool("followRedirect")?.unwrap_or(false) {
        return Err(ConfigError::new(
            o.key_path("followRedirect"),
            "transparent proxying is not supported yet",
        ));
    }
    o.ignore(&["userLevel", "timeout", "portMap"]);
    Ok(Arc::new(Dokodemo {
        dest: Destination::new(Address::parse(&addr), port),
        networks,
    }))
}

struct Reply(Arc<UdpSocket>);

#[async_trait]
impl UdpReply for Reply {
    async fn reply(&self, client: SocketAddr, data: &[u8], _from: &Destination) -> io::Result<()> {
        self.0.send_to(data, client).await.map(|_| ())
    }
}

#[async_trait]
impl InboundHandler for Dokodemo {
    async fn accept(&self, stream: BoxStream, ctx: &InboundCtx) -> io::Result<Accepted> {
        if !self.networks.contains(&Network::Tcp) {
            return Ok(Accepted::Done);
        }
        let s = ctx.session(self.dest.clone(), Network::Tcp, "dokodemo-door");
        Ok(Accepted::Stream(s, stream))
    }

    fn networks(&self) -> &[Network] {
        &self.networks
    }

    async fn serve_udp(&self, socket: Arc<UdpSocket>, ctx: InboundCtx) -> io::Result<()> {
        let idle = ctx.dispatcher.policy.level(0).conn_idle;
        let nat = UdpNat::new(
            ctx.dispatcher.clone(),
            Arc::new(Reply(socket.clone())),
            idle,
            ctx.traffic.clone(),
        );
        let mut buf = vec![0u8; MAX_DATAGRAM];
        loop {
            let (n, from) = socket.recv_from(&mut buf).await?;
            let mut s = ctx.session(self.dest.clone(), Network::Udp, "dokodemo-door");
            s.source = from.into();
            nat.send(from, s, Bytes::copy_from_slice(&buf[..n]));
        }
    }
}
