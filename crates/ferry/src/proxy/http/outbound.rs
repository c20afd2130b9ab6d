//! The `http` outbound: a tunnel through an HTTP proxy with CONNECT.

use std::io;
use std::sync::Arc;

use async_trait::async_trait;

use super::codec;
use crate::common::Destination;
use crate::proxy::head::HeadReader;
use crate::proxy::socks::Server;
use crate::proxy::{OutboundHandler, PacketConn};
use crate::transport::{BoxStream, Dialer};

/// Tunnels each TCP session through an HTTP proxy.
pub struct HttpOutbound {
    server: Server,
    /// `base64(user:pass)` when the server needs credentials.
    token: Option<String>,
    headers: Vec<(String, String)>,
    dialer: Arc<dyn Dialer>,
}

impl HttpOutbound {
    pub fn new(server: Server, headers: Vec<(String, String)>, dialer: Arc<dyn Dialer>) -> Self {
        let token = server.user.as_ref().map(|(u, p)| codec::basic_token(u, p));
        HttpOutbound {
            server,
            token,
            headers,
            dialer,
        }
    }
}

#[async_trait]
impl OutboundHandler for HttpOutbound {
    async fn dial_tcp(&self, dest: &Destination) -> io::Result<BoxStream> {
        let stream = self.dialer.dial_tcp(&self.server.dest).await?;
        let mut r = HeadReader::new(stream, codec::MAX_HEAD + 1);
        let req = codec::encode_connect(dest, self.token.as_deref(), &self.headers);
        r.write_all(&req).await?;
        let len = r
            .read_until(codec::head_scanner())
            .await?
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
        let status = codec::parse_status(&r.buf[..len])
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("http proxy: {e}")))?;
        if !(200..300).contains(&status) {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionRefused,
                format!(
                    "http proxy {} answered {status} to CONNECT {}",
                    self.server.dest, dest
                ),
            ));
        }
        r.consume(len);
        Ok(r.into_stream())
    }

    async fn dial_udp(&self, _dest: &Destination) -> io::Result<Box<dyn PacketConn>> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "the http outbound carries no UDP",
        ))
    }
}
