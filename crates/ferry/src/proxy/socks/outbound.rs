//! The `socks` outbound: SOCKS5 CONNECT, and UDP ASSOCIATE for datagrams.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::BytesMut;

use super::codec;
use super::read_msg;
use super::Server;
use crate::common::{Address, Destination};
use crate::proxy::head::HeadReader;
use crate::proxy::{OutboundHandler, PacketConn};
use crate::transport::{tcp, BoxStream, Dialer};

/// How long a UDP ASSOCIATE handshake may take (TCP dials are timed by the dispatcher).
const UDP_HANDSHAKE: Duration = Duration::from_secs(10);

/// Reaches destinations through a SOCKS5 server.
pub struct SocksOutbound {
    pub server: Server,
    pub dialer: Arc<dyn Dialer>,
}

fn proto(msg: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("socks server: {msg}"))
}

impl SocksOutbound {
    /// Greets, authenticates and sends `cmd`; returns the stream and the server's bound address.
    async fn handshake(
        &self,
        cmd: u8,
        dest: &Destination,
    ) -> io::Result<(HeadReader, Destination)> {
        let stream = self.dialer.dial_tcp(&self.server.dest).await?;
        let mut r = HeadReader::new(stream, 1024);
        let user = self.server.user.as_ref();
        r.write_all(&codec::client_greeting(user.is_some())).await?;
        let method = read_msg(&mut r, |b| codec::parse_two(b, codec::VER5), proto).await?;
        match (method, user) {
            (codec::METHOD_NONE, _) => {}
            (codec::METHOD_PASSWORD, Some((u, p))) => {
                let mut b = BytesMut::with_capacity(3 + u.len() + p.len());
                codec::encode_userpass(u.as_bytes(), p.as_bytes(), &mut b);
                r.write_all(&b).await?;
                // The status's version byte varies between servers (01 per RFC, 05 seen too).
                let status = read_msg(
                    &mut r,
                    |b| match b {
                        [_, s, ..] => Ok(Some((*s, 2))),
                        _ => Ok(None),
                    },
                    proto,
                )
                .await?;
                if status != 0 {
                    return Err(io::Error::new(
                        io::ErrorKind::PermissionDenied,
                        format!("socks server {} refused the credentials", self.server.dest),
                    ));
                }
            }
            (m, _) => return Err(proto(codec::Error::Method(m))),
        }
        let mut b = BytesMut::with_capacity(6 + 256);
        codec::encode_request(cmd, dest, &mut b).map_err(proto)?;
        r.write_all(&b).await?;
        let bound = read_msg(&mut r, codec::parse_reply, proto).await?;
        Ok((r, bound))
    }
}

#[async_trait]
impl OutboundHandler for SocksOutbound {
    async fn dial_tcp(&self, dest: &Destination) -> io::Result<BoxStream> {
        let (r, _) = self.handshake(codec::CMD_CONNECT, dest).await?;
        Ok(r.into_stream())
    }

    async fn dial_udp(&self, _dest: &Destination) -> io::Result<Box<dyn PacketConn>> {
        let any = Destination::new(Address::Ip(IpAddr::from([0u8, 0, 0, 0])), 0);
        let (r, bound) = tokio::time::timeout(UDP_HANDSHAKE, self.handshake(codec::CMD_UDP, &any))
            .await
            .map_err(|_| {
                io::Error::new(io::ErrorKind::TimedOut, "socks UDP ASSOCIATE timed out")
            })??;
        // A relay bound to an unspecified address is on the server's host.
        let relay = match bound.addr {
            Address::Ip(ip) if ip.is_unspecified() => {
                let server = tcp::resolve(&self.server.dest)
                    .await?
                    .into_iter()
                    .next()
                    .ok_or_else(|| proto("server address does not resolve"))?;
                Destination::from(SocketAddr::new(server.ip(), bound.port))
            }
            _ => bound,
        };
        let sock = self.dialer.dial_udp(&relay).await?;
        Ok(Box::new(SocksPacketConn {
            sock,
            relay,
            _control: Mutex::new(r.into_stream()),
        }))
    }
}

/// Datagrams through a SOCKS5 UDP relay. The association lives while `_control` is open.
struct SocksPacketConn {
    sock: Box<dyn PacketConn>,
    relay: Destination,
    _control: Mutex<BoxStream>,
}

#[async_trait]
impl PacketConn for SocksPacketConn {
    async fn send_to(&self, data: &[u8], dest: &Destination) -> io::Result<()> {
        let mut pkt = Vec::with_capacity(codec::udp_header_len(dest) + data.len());
        codec::encode_udp_header(dest, &mut pkt).map_err(proto)?;
        pkt.extend_from_slice(data);
        self.sock.send_to(&pkt, &self.relay).await
    }

    async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, Destination)> {
        loop {
            let (n, _) = self.sock.recv_from(buf).await?;
            let Some(pkt) = buf.get(..n) else { continue };
            match codec::parse_udp(pkt) {
                Ok((from, hl)) => {
                    buf.copy_within(hl..n, 0);
                    return Ok((n - hl, from));
                }
                Err(e) => tracing::debug!("socks udp relay sent a bad datagram: {e}"),
            }
        }
    }
}
