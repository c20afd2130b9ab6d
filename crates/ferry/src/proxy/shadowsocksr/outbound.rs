//! SSR client: dials the server and wraps the stream in the codecs; the request address leaves
//! with the first payload (or alone after a short wait, as the Shadowsocks client).

use std::io;
use std::sync::Arc;

use async_trait::async_trait;

use super::obfs::{self, Obfs, TlsClientShared};
use super::protocol::{self, ClientShared, Protocol};
use super::stream::{Parts, SsrStream};
use super::util::{head_size, random_bytes};
use super::{parse_client, udp, ClientConfig};
use crate::common::addr::socks;
use crate::common::Destination;
use crate::config::reader::{Obj, Result};
use crate::proxy::{OutboundBuild, OutboundHandler, PacketConn};
use crate::transport::{BoxStream, Dialer};

pub struct Outbound {
    pub cfg: Arc<ClientConfig>,
    key: Arc<[u8]>,
    shared: Arc<ClientShared>,
    tls: Arc<TlsClientShared>,
    dialer: Arc<dyn Dialer>,
}

pub fn build(o: &Obj<'_>, b: &OutboundBuild<'_>) -> Result<Arc<dyn OutboundHandler>> {
    let cfg = parse_client(o)?;
    Ok(Arc::new(Outbound::new(cfg, b.dialer.clone())))
}

impl Outbound {
    pub fn new(cfg: ClientConfig, dialer: Arc<dyn Dialer>) -> Outbound {
        Outbound {
            key: cfg.common.key().into(),
            shared: Arc::new(ClientShared::new(&cfg.common.protocol_param)),
            tls: Arc::default(),
            cfg: Arc::new(cfg),
            dialer,
        }
    }

    /// Wraps a connected stream as a client asking for `dest`.
    pub fn connect(&self, inner: BoxStream, dest: &Destination) -> io::Result<SsrStream> {
        let c = &self.cfg.common;
        let req = socks::to_bytes(dest).to_vec();
        let iv = random_bytes(c.method.iv_len());
        let pinfo = protocol::Info {
            key: self.key.clone(),
            iv: iv.clone(),
            overhead: c.overhead(),
            tcp_mss: protocol::TCP_MSS,
        };
        let oinfo = obfs::Info {
            host: self.cfg.server.addr.to_string(),
            port: self.cfg.server.port,
            param: c.obfs_param.clone(),
            key: self.key.clone(),
            head_size: iv.len() + head_size(&req, 30),
        };
        let parts = Parts {
            obfs: Obfs::new(c.obfs, oinfo, obfs::Side::Client(self.tls.clone())),
            proto: Protocol::new(
                c.protocol,
                pinfo,
                protocol::Side::Client(self.shared.clone()),
            ),
            method: c.method,
            key: self.key.clone(),
            iv,
        };
        SsrStream::client(inner, parts, req)
    }
}

#[async_trait]
impl OutboundHandler for Outbound {
    async fn dial_tcp(&self, dest: &Destination) -> io::Result<BoxStream> {
        let inner = self.dialer.dial_tcp(&self.cfg.server).await?;
        Ok(Box::new(self.connect(inner, dest)?))
    }

    async fn dial_udp(&self, _dest: &Destination) -> io::Result<Box<dyn PacketConn>> {
        if self.cfg.common.protocol == protocol::Kind::VerifyDeflate {
            return Err(io::Error::other("verify_deflate has no UDP form"));
        }
        let sock = self.dialer.dial_udp(&self.cfg.server).await?;
        Ok(Box::new(UdpClient {
            sock,
            cfg: self.cfg.clone(),
            key: self.key.clone(),
            shared: self.shared.clone(),
        }))
    }
}

/// A client UDP association with the server.
pub struct UdpClient {
    sock: Box<dyn PacketConn>,
    cfg: Arc<ClientConfig>,
    key: Arc<[u8]>,
    shared: Arc<ClientShared>,
}

impl UdpClient {
    fn keys(&self) -> udp::Keys<'_> {
        udp::Keys {
            kind: self.cfg.common.protocol,
            method: self.cfg.common.method,
            key: &self.key,
        }
    }
}

#[async_trait]
impl PacketConn for UdpClient {
    async fn send_to(&self, data: &[u8], dest: &Destination) -> io::Result<()> {
        let mut plain = socks::to_bytes(dest).to_vec();
        plain.extend_from_slice(data);
        let mut out = Vec::with_capacity(plain.len() + 160);
        udp::client_seal(&self.keys(), self.shared.login.as_ref(), &plain, &mut out);
        self.sock.send_to(&out, &self.cfg.server).await
    }

    async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, Destination)> {
        loop {
            let (n, _) = self.sock.recv_from(buf).await?;
            let res = udp::client_open(&self.keys(), self.shared.login.as_ref(), &buf[..n])
                .and_then(|p| match socks::decode(&p) {
                    Ok(Some((from, at))) => Ok((from, p[at..].to_vec())),
                    _ => Err(super::util::Error::Address),
                });
            match res {
                Ok((from, payload)) => {
                    let k = payload.len().min(buf.len());
                    buf[..k].copy_from_slice(&payload[..k]);
                    return Ok((k, from));
                }
                Err(e) => tracing::info!(
                    "shadowsocksr udp: dropped reply from {}: {e}",
                    self.cfg.server
                ),
            }
        }
    }
}
