//! VLESS client: the request header leaves with the first payload; UDP datagrams are framed
//! with a two-byte length, or go as XUDP (full-cone, Xray's default) over a Mux connection;
//! `v1.mux.cool` opens a Mux connection (the `mux` object's pool dials it). With XTLS Vision
//! the connection is a [`VisionStream`] and UDP always goes as XUDP (UDP to port 443 only with
//! `xtls-rprx-vision-udp443`, as Xray).

use std::io;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::Mutex;

use super::codec;
use super::vision::{self, VisionStream};
use super::{Flow, Server};
use crate::common::Destination;
use crate::proxy::headed::ClientStream;
use crate::proxy::mux;
use crate::proxy::reverse;
use crate::proxy::{OutboundHandler, PacketConn};
use crate::transport::{BoxStream, Dialer};

fn check_response(b: &[u8]) -> Result<Option<usize>, String> {
    codec::decode_response(b).map_err(|e| format!("vless: {e}"))
}

/// How long a VLESS Encryption handshake may take (one round trip and the padding's gaps).
const ENCRYPTION_HANDSHAKE: std::time::Duration = std::time::Duration::from_secs(16);

pub struct Outbound {
    pub server: Server,
    pub dialer: Arc<dyn Dialer>,
    /// The stream under VLESS is a bare socket (Vision over VLESS Encryption may splice it).
    pub splice_ok: bool,
    /// UDP goes as XUDP (except to ports 53 and 443), as Xray's full-cone mode.
    pub cone: bool,
}

impl Outbound {
    /// A connection with the request header for `dest` (none for Mux).
    async fn open(&self, cmd: u8, dest: Option<&Destination>) -> io::Result<BoxStream> {
        let mut inner = self.dialer.dial_tcp(&self.server.dest).await?;
        if let Some(enc) = &self.server.encryption {
            let hs = enc.handshake(inner, self.splice_ok);
            inner = match tokio::time::timeout(ENCRYPTION_HANDSHAKE, hs).await {
                Ok(Ok(s)) => Box::new(s),
                Ok(Err(e)) => {
                    return Err(io::Error::other(format!(
                        "ML-KEM-768 handshake failed: {e}"
                    )))
                }
                Err(_) => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "ML-KEM-768 handshake timed out",
                    ))
                }
            };
        }
        let mut header = Vec::with_capacity(64);
        if self.server.flow.is_vision() {
            match inner.outer_tls() {
                Some(t) if t.is_tls13() => {}
                Some(_) => {
                    return Err(io::Error::other(format!(
                        "failed to use {}: the outer TLS is not TLS 1.3",
                        vision::FLOW
                    )))
                }
                None => {
                    return Err(io::Error::other(
                        "XTLS only supports TLS directly under VLESS",
                    ))
                }
            }
            codec::encode_request_flow(&self.server.uuid, vision::FLOW, cmd, dest, &mut header);
            let s = VisionStream::client(inner, header, self.server.uuid, self.server.seeds);
            return Ok(Box::new(s));
        }
        codec::encode_request(&self.server.uuid, cmd, dest, &mut header);
        Ok(Box::new(ClientStream::new(
            inner,
            header,
            Some(check_response),
        )))
    }
}

#[async_trait]
impl OutboundHandler for Outbound {
    async fn dial_tcp(&self, dest: &Destination) -> io::Result<BoxStream> {
        if mux::is_mux_cool(dest) {
            return self.open(codec::CMD_MUX, None).await;
        }
        if reverse::is_rvs_cool(dest) {
            // A VLESS Reverse bridge's tunnel (command 4, no address).
            return self.open(codec::CMD_RVS, None).await;
        }
        self.open(codec::CMD_TCP, Some(dest)).await
    }

    async fn dial_tcp_for(&self, session: &crate::session::Session) -> io::Result<BoxStream> {
        if reverse::is_rvs_cool(&session.dest) {
            // Only the bridge opens tunnels; a routed request for one is refused (as Xray).
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "nice try baby",
            ));
        }
        self.dial_tcp(&session.dest).await
    }

    async fn dial_udp(&self, dest: &Destination) -> io::Result<Box<dyn PacketConn>> {
        match self.server.flow {
            Flow::Vision if dest.port == 443 => {
                return Err(io::Error::other("XTLS rejected UDP/443 traffic"));
            }
            // Vision carries UDP as XUDP over Mux.Cool, whatever the port.
            Flow::Vision | Flow::VisionUdp443 => {
                let s = self.open(codec::CMD_MUX, None).await?;
                return mux::client::xudp(s, dest);
            }
            Flow::None => {}
        }
        if self.cone && mux::xudp_port(dest.port) {
            let s = self.open(codec::CMD_MUX, None).await?;
            return mux::client::xudp(s, dest);
        }
        let s = self.open(codec::CMD_UDP, Some(dest)).await?;
        Ok(Box::new(Datagrams::new(s, dest.clone())))
    }
}

/// UDP over one VLESS connection (both sides): each datagram is `BE16(len) || payload`, all
/// to and from the header's destination.
pub struct Datagrams {
    rd: Mutex<ReadHalf<BoxStream>>,
    wr: Mutex<WriteHalf<BoxStream>>,
    dest: Destination,
}

/// Xray's writers skip datagrams with `len + 2 > 8192`.
const MAX_WRITE: usize = 8192 - 2;

impl Datagrams {
    pub fn new(s: BoxStream, dest: Destination) -> Self {
        let (rd, wr) = tokio::io::split(s);
        Datagrams {
            rd: Mutex::new(rd),
            wr: Mutex::new(wr),
            dest,
        }
    }
}

#[async_trait]
impl PacketConn for Datagrams {
    async fn send_to(&self, data: &[u8], _dest: &Destination) -> io::Result<()> {
        if data.is_empty() || data.len() > MAX_WRITE {
            tracing::debug!("vless udp: {}-byte datagram not sent (as Xray)", data.len());
            return Ok(());
        }
        let mut frame = Vec::with_capacity(2 + data.len());
        frame.extend_from_slice(&(data.len() as u16).to_be_bytes());
        frame.extend_from_slice(data);
        let mut w = self.wr.lock().await;
        w.write_all(&frame).await?;
        w.flush().await
    }

    async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, Destination)> {
        let mut r = self.rd.lock().await;
        let mut len = [0u8; 2];
        match r.read_exact(&mut len).await {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Err(e),
            Err(e) => return Err(e),
        }
        let n = u16::from_be_bytes(len) as usize;
        if n > buf.len() {
            let mut skip = vec![0u8; n];
            r.read_exact(&mut skip).await?;
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "datagram too large",
            ));
        }
        r.read_exact(&mut buf[..n]).await?;
        Ok((n, self.dest.clone()))
    }
}
