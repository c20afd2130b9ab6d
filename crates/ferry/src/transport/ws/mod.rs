//! The WebSocket transport (`network: "ws"`, `wsSettings`) as Xray and v2ray speak it: an
//! HTTP/1.1 upgrade on the configured path, then one binary message per write. Early data
//! rides in the upgrade request's `Sec-WebSocket-Protocol` (base64url), Xray's `?ed=N` and
//! v2ray's `maxEarlyData` alike. The server answers requests for other paths or hosts 404,
//! takes the client address from `X-Forwarded-For` behind a proxy, and hands the connection
//! on with the early data first.

pub mod frame;
mod stream;

use std::io;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use bytes::Bytes;
use sha1::{Digest, Sha1};
use tokio::io::AsyncWriteExt;

pub use stream::WsStream;

use super::upgrade::{self, has_token, header_str, UpgradeSettings};
use super::{BoxStream, Layer};
use crate::common::Destination;
use crate::proxy::http::codec;
use crate::session::{ConnInfo, Endpoint};

const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
pub const EARLY_DATA_HEADER: &str = "Sec-WebSocket-Protocol";

/// `wsSettings`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WsSettings {
    pub upgrade: UpgradeSettings,
    /// The header early data travels in (v2ray's `earlyDataHeaderName`).
    pub early_header: String,
    /// Xray's `heartbeatPeriod`.
    pub heartbeat: Option<Duration>,
}

impl Default for WsSettings {
    fn default() -> Self {
        WsSettings {
            upgrade: UpgradeSettings::with_path("/"),
            early_header: EARLY_DATA_HEADER.into(),
            heartbeat: None,
        }
    }
}

/// The WebSocket layer of one inbound or outbound.
pub struct WsLayer {
    pub settings: Arc<WsSettings>,
    /// The TLS server name below (a client's Host when `host` is empty).
    pub tls_name: Option<String>,
    /// `sockopt.trustedXForwardedFor`.
    pub trusted_xff: Arc<[String]>,
}

/// `Sec-WebSocket-Accept` for a key.
pub fn accept_key(key: &str) -> String {
    let mut h = Sha1::new();
    h.update(key.as_bytes());
    h.update(GUID.as_bytes());
    STANDARD.encode(h.finalize())
}

/// Early data from a header value: base64url, standard base64 accepted too (Xray's
/// normalisation), padding optional. `None` when it is not base64 or decodes to nothing.
pub fn decode_early(v: &str) -> Option<Vec<u8>> {
    let norm: String = v
        .chars()
        .filter(|&c| c != '=')
        .map(|c| match c {
            '+' => '-',
            '/' => '_',
            c => c,
        })
        .collect();
    URL_SAFE_NO_PAD.decode(norm).ok().filter(|d| !d.is_empty())
}

/// Checks a server's answer to an upgrade request with key `accept`'s origin.
pub(crate) fn check_response(head: &[u8], accept: &str) -> io::Result<()> {
    let bad = |why: String| io::Error::new(io::ErrorKind::InvalidData, why);
    let r = codec::parse_response(head).map_err(|e| bad(format!("WebSocket handshake: {e}")))?;
    if r.status != 101 {
        return Err(bad(format!(
            "WebSocket handshake refused: status {}",
            r.status
        )));
    }
    if !has_token(r.header("Upgrade"), "websocket") || !has_token(r.header("Connection"), "upgrade")
    {
        return Err(bad("WebSocket handshake: no Upgrade in the response".into()));
    }
    if header_str(r.header("Sec-WebSocket-Accept")) != accept {
        return Err(bad("WebSocket handshake: wrong Sec-WebSocket-Accept".into()));
    }
    Ok(())
}

impl WsLayer {
    async fn refuse(mut r: crate::proxy::head::HeadReader, status: u16, why: String) -> io::Error {
        let _ = r.write_all(&upgrade::http_error(status)).await;
        let _ = r.stream.flush().await;
        io::Error::new(io::ErrorKind::InvalidData, format!("WebSocket: {why}"))
    }
}

#[async_trait]
impl Layer for WsLayer {
    async fn accept(&self, stream: BoxStream, info: &mut ConnInfo) -> io::Result<BoxStream> {
        let (mut r, n) = upgrade::read_request(stream).await?;
        let head = r.buf.split_to(n);
        let req = match codec::parse_request(&head) {
            Ok(req) => req,
            Err(e) => return Err(Self::refuse(r, 400, e.to_string()).await),
        };
        let s = &self.settings;
        if let Err(why) = s.upgrade.matches(&req) {
            return Err(Self::refuse(r, 404, why).await);
        }
        // gorilla/websocket's checks, in its order.
        if !has_token(req.header("Connection"), "upgrade") {
            return Err(Self::refuse(r, 400, "no Connection: upgrade".into()).await);
        }
        if !has_token(req.header("Upgrade"), "websocket") {
            return Err(Self::refuse(r, 400, "no Upgrade: websocket".into()).await);
        }
        if req.method != "GET" {
            return Err(Self::refuse(r, 405, format!("method {}", req.method)).await);
        }
        if header_str(req.header("Sec-WebSocket-Version")) != "13" {
            return Err(Self::refuse(r, 400, "not version 13".into()).await);
        }
        let key = header_str(req.header("Sec-WebSocket-Key")).to_string();
        if STANDARD.decode(&key).map(|k| k.len()) != Ok(16) {
            return Err(Self::refuse(r, 400, "bad Sec-WebSocket-Key".into()).await);
        }
        let mut resp = format!(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {}\r\n",
            accept_key(&key)
        );
        let mut early = Bytes::new();
        let offered = header_str(req.header(&s.early_header));
        if let Some(ed) = (!offered.is_empty())
            .then(|| decode_early(offered))
            .flatten()
        {
            early = ed.into();
            if s.early_header.eq_ignore_ascii_case(EARLY_DATA_HEADER) {
                resp.push_str(&format!("{EARLY_DATA_HEADER}: {offered}\r\n"));
            }
        }
        resp.push_str("\r\n");
        if let Some(ip) = upgrade::forwarded_for(&req, &self.trusted_xff) {
            info.source = Endpoint::Ip(std::net::SocketAddr::new(ip, 0));
        }
        info.path = Some(req.target.into());
        drop(req);
        r.write_all(resp.as_bytes()).await?;
        let rest = r.buf.to_vec();
        let ws = WsStream::new(r.stream, false, rest, early).with_heartbeat(s.heartbeat);
        Ok(Box::new(ws))
    }

    async fn connect(&self, mut stream: BoxStream, server: &Destination) -> io::Result<BoxStream> {
        let s = &self.settings;
        let mut k = [0u8; 16];
        crate::common::rand::fill(&mut k);
        let key = STANDARD.encode(k);
        let accept = accept_key(&key);
        let host = s.upgrade.client_host(self.tls_name.as_deref(), server);
        let base = [
            ("Connection", "Upgrade"),
            ("Upgrade", "websocket"),
            ("Sec-WebSocket-Version", "13"),
        ];
        if s.upgrade.max_early > 0 {
            let (up, header) = (s.upgrade.clone(), s.early_header.clone());
            let request = Box::new(move |early: Option<&[u8]>| {
                let mut extra: Vec<(&str, &str)> = base.to_vec();
                extra.push(("Sec-WebSocket-Key", &key));
                let ed = early.map(|e| URL_SAFE_NO_PAD.encode(e));
                if let Some(ed) = &ed {
                    extra.push((&header, ed));
                }
                up.request(&host, &extra)
            });
            let pending = stream::Pending {
                request,
                max_early: s.upgrade.max_early,
                accept,
            };
            let ws = WsStream::waiting(stream, pending).with_heartbeat(s.heartbeat);
            return Ok(Box::new(ws));
        }
        let mut extra = base.to_vec();
        extra.push(("Sec-WebSocket-Key", &key));
        stream.write_all(&s.upgrade.request(&host, &extra)).await?;
        stream.flush().await?;
        let mut r = crate::proxy::head::HeadReader::new(stream, 8192);
        let n = match r.read_until(codec::head_scanner()).await? {
            Ok(n) => n,
            Err(e) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("WebSocket handshake: {e}"),
                ))
            }
        };
        check_response(&r.buf[..n], &accept)?;
        let rest = r.buf[n..].to_vec();
        let ws = WsStream::new(r.stream, true, rest, Bytes::new()).with_heartbeat(s.heartbeat);
        Ok(Box::new(ws))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc6455_accept_key() {
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[test]
    fn early_data_in_either_base64() {
        let data = [0xfbu8, 0xff, 0x01, 0x02, 0x03];
        let url = URL_SAFE_NO_PAD.encode(data);
        let std = STANDARD.encode(data);
        assert_ne!(url, std);
        assert_eq!(decode_early(&url).unwrap(), data);
        assert_eq!(decode_early(&std).unwrap(), data);
        assert_eq!(decode_early("chat, superchat"), None);
        assert_eq!(decode_early(""), None);
    }
}
