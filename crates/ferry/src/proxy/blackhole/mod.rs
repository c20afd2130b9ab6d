//! `blackhole` (alias `block`): swallows what the client sends; optionally answers HTTP 403 first.

pub mod api;

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use async_trait::async_trait;
use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::{OutboundBuild, OutboundHandler, PacketConn};
use crate::common::Destination;
use crate::config::reader::{ConfigError, Obj, Result};
use crate::transport::{BoxStream, Stream};

/// blackhole's entry in the protocol table.
pub const PROTOCOL: crate::proxy::protocol::Protocol = crate::proxy::protocol::Protocol {
    outbound: Some(build),
    api: api::API,
    ..crate::proxy::protocol::Protocol::named(module_path!(), &["blackhole", "block"])
};

/// Xray's blackhole HTTP response.
pub const HTTP_403: &[u8] = b"HTTP/1.1 403 Forbidden\r\nConnection: close\r\nCache-Control: max-age=3600, public\r\nContent-Length: 0\r\n\r\n";

pub struct Blackhole {
    response: Bytes,
}

pub fn build(o: &Obj<'_>, _b: &OutboundBuild<'_>) -> Result<Arc<dyn OutboundHandler>> {
    let mut response = Bytes::new();
    if let Some(r) = o.obj("response")? {
        match r
            .str("type")?
            .unwrap_or_else(|| "none".into())
            .to_ascii_lowercase()
            .as_str()
        {
            "none" => {}
            "http" => response = Bytes::from_static(HTTP_403),
            other => {
                return Err(ConfigError::new(
                    r.key_path("type"),
                    format!("unknown response type {other:?}"),
                ))
            }
        }
        r.finish();
    }
    Ok(Arc::new(Blackhole { response }))
}

/// A stream that yields the response, then EOF, and discards everything written to it.
struct Sink(Bytes);

impl AsyncRead for Sink {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let n = self.0.len().min(buf.remaining());
        buf.put_slice(&self.0[..n]);
        self.0.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Sink {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl Stream for Sink {}

struct NoPackets;

#[async_trait]
impl PacketConn for NoPackets {
    async fn send_to(&self, _data: &[u8], _dest: &Destination) -> io::Result<()> {
        Ok(())
    }
    async fn recv_from(&self, _buf: &mut [u8]) -> io::Result<(usize, Destination)> {
        std::future::pending().await
    }
}

#[async_trait]
impl OutboundHandler for Blackhole {
    async fn dial_tcp(&self, _dest: &Destination) -> io::Result<BoxStream> {
        Ok(Box::new(Sink(self.response.clone())))
    }
    async fn dial_udp(&self, _dest: &Destination) -> io::Result<Box<dyn PacketConn>> {
        Ok(Box::new(NoPackets))
    }
}
