//! The Hysteria outbound: a [`Dialer`] whose TCP connections are streams of the client's QUIC
//! connection and whose UDP sessions are its datagrams.

use std::io;

use async_trait::async_trait;

use super::client::{Client, ClientStream};
use super::codec;
use crate::common::Destination;
use crate::transport::quic::QuicStream;
use crate::transport::{BoxStream, Dialer, PacketConn};

pub struct Outbound {
    client: Client,
}

impl Outbound {
    pub fn new(client: Client) -> Outbound {
        Outbound { client }
    }
}

#[async_trait]
impl Dialer for Outbound {
    async fn dial_tcp(&self, dest: &Destination) -> io::Result<BoxStream> {
        let (mut send, recv) = self.client.open_stream().await?;
        // As Xray's client: the request goes at once, the payload right after it.
        send.write_all(&codec::tcp_request(dest))
            .await
            .map_err(io::Error::other)?;
        let s = QuicStream::new(send, recv, bytes::Bytes::new());
        Ok(Box::new(ClientStream::new(s)))
    }

    async fn dial_udp(&self, _dest: &Destination) -> io::Result<Box<dyn PacketConn>> {
        let conn = self.client.conn().await?;
        Ok(Box::new(conn.udp_session()?))
    }
}
