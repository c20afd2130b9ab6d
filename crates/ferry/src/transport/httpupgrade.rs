//! Xray's HTTPUpgrade transport (`network: "httpupgrade"`): the WebSocket upgrade request and
//! its 101 answer, then raw bytes both ways (no frames, so a connection without TLS below can
//! still be spliced). With `?ed=` in the path the client writes before the answer comes and
//! reads it in front of the first bytes.

use std::io;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::io::AsyncWriteExt;

use super::upgrade::{self, header_str, UpgradeSettings};
use super::{BoxStream, Layer};
use crate::common::Destination;
use crate::proxy::http::codec;
use crate::session::{ConnInfo, Endpoint};

const RESPONSE: &[u8] =
    b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n";

/// The HTTPUpgrade layer of one inbound or outbound.
pub struct HttpUpgradeLayer {
    pub settings: Arc<UpgradeSettings>,
    pub tls_name: Option<String>,
    pub trusted_xff: Arc<[String]>,
}

fn check_response(head: &[u8]) -> io::Result<()> {
    let bad = |why: String| io::Error::new(io::ErrorKind::InvalidData, why);
    let r = codec::parse_response(head).map_err(|e| bad(format!("HTTPUpgrade: {e}")))?;
    // Xray's client wants exactly this status and these two values.
    if r.status != 101
        || !header_str(r.header("Upgrade")).eq_ignore_ascii_case("websocket")
        || !header_str(r.header("Connection")).eq_ignore_ascii_case("upgrade")
    {
        return Err(bad(format!(
            "HTTPUpgrade: unrecognized reply (status {})",
            r.status
        )));
    }
    Ok(())
}

#[async_trait]
impl Layer for HttpUpgradeLayer {
    async fn accept(&self, stream: BoxStream, info: &mut ConnInfo) -> io::Result<BoxStream> {
        let (mut r, n) = upgrade::read_request(stream).await?;
        let head = r.buf.split_to(n);
        let bad =
            |why: String| io::Error::new(io::ErrorKind::InvalidData, format!("HTTPUpgrade: {why}"));
        // As Xray: anything but our upgrade is closed without an answer.
        let req = codec::parse_request(&head).map_err(|e| bad(e.to_string()))?;
        self.settings.matches(&req).map_err(bad)?;
        if !header_str(req.header("Connection")).eq_ignore_ascii_case("upgrade")
            || !header_str(req.header("Upgrade")).eq_ignore_ascii_case("websocket")
        {
            return Err(bad("unrecognized request".into()));
        }
        if let Some(ip) = upgrade::forwarded_for(&req, &self.trusted_xff) {
            info.source = Endpoint::Ip(std::net::SocketAddr::new(ip, 0));
        }
        info.path = Some(req.target.into());
        drop(req);
        r.write_all(RESPONSE).await?;
        Ok(r.into_stream())
    }

    async fn connect(&self, mut stream: BoxStream, server: &Destination) -> io::Result<BoxStream> {
        let s = &self.settings;
        let host = s.client_host(self.tls_name.as_deref(), server);
        let req = s.request(
            &host,
            &[("Connection", "Upgrade"), ("Upgrade", "websocket")],
        );
        stream.write_all(&req).await?;
        stream.flush().await?;
        if s.max_early > 0 {
            // Early data: write on at once, read the answer in front of the first bytes.
            return Ok(Box::new(super::http_header::Dressed::new(
                stream,
                None,
                Some(check_response),
            )));
        }
        let mut r = crate::proxy::head::HeadReader::new(stream, 8192);
        let n = r
            .read_until(codec::head_scanner())
            .await?
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("HTTPUpgrade: {e}")))?;
        check_response(&r.buf[..n])?;
        r.consume(n);
        Ok(r.into_stream())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::upgrade::UpgradeSettings;
    use tokio::io::AsyncReadExt;

    fn layer(path: &str) -> HttpUpgradeLayer {
        HttpUpgradeLayer {
            settings: Arc::new(UpgradeSettings::with_path(path)),
            tls_name: None,
            trusted_xff: Arc::from(Vec::new()),
        }
    }

    async fn through(path: &str) {
        let (a, b) = tokio::io::duplex(64 * 1024);
        let server = tokio::spawn(async move {
            let mut info = ConnInfo::new(
                Endpoint::Ip("127.0.0.1:1".parse().unwrap()),
                Endpoint::Ip("127.0.0.1:2".parse().unwrap()),
            );
            let mut s = layer("/hu").accept(Box::new(b), &mut info).await.unwrap();
            let mut got = [0u8; 5];
            s.read_exact(&mut got).await.unwrap();
            s.write_all(b"world").await.unwrap();
            (got, info.path)
        });
        let dest = Destination::new(crate::common::Address::parse("h.test"), 80);
        let mut c = layer(path).connect(Box::new(a), &dest).await.unwrap();
        c.write_all(b"hello").await.unwrap();
        let mut back = [0u8; 5];
        c.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"world");
        let (got, p) = server.await.unwrap();
        assert_eq!(&got, b"hello");
        assert_eq!(p.as_deref(), Some("/hu"));
    }

    #[tokio::test]
    async fn upgrade_then_raw_bytes_with_and_without_early_data() {
        through("/hu").await;
        through("/hu?ed=2048").await;
    }
}
