//! The Hysteria 2 client: one QUIC connection per outbound, dialed when first needed and again
//! when it has died, authenticated with the HTTP/3 POST to `/auth`; TCP connections as
//! streams on it, UDP sessions as datagrams.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use bytes::{Buf, Bytes};
use tokio::sync::Mutex;

use super::codec;
use super::udp::{self, Packets, Sessions};
use crate::common::{Address, Destination};
use crate::transport::quic::{self, Congestion, Defaults, QuicParams, Rate};
use crate::transport::udpmask::UdpMasks;

/// What the client needs to reach its server.
pub struct ClientSide {
    pub server: Destination,
    /// The TLS server name (`serverName`, or the server's address).
    pub sni: String,
    pub tls: Arc<quinn::crypto::rustls::QuicClientConfig>,
    pub params: QuicParams,
    pub masks: UdpMasks,
    pub auth: String,
}

/// One authenticated connection.
pub struct Conn {
    pub quic: quinn::Connection,
    /// The server takes UDP (`hysteria-udp: true`).
    pub udp: bool,
    sessions: Arc<Sessions>,
    next_session: AtomicU32,
    _endpoint: quinn::Endpoint,
    // Kept so that HTTP/3 stays open (dropping the last sender ends it).
    _h3: h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>,
}

impl Conn {
    /// A new UDP session (IDs count up from 1, as Xray's and the official client's do).
    pub fn udp_session(&self) -> io::Result<Packets> {
        if !self.udp {
            return Err(io::Error::other("server does not support udp"));
        }
        loop {
            let id = self.next_session.fetch_add(1, Ordering::Relaxed);
            if let Some(p) = self.sessions.open(id, None) {
                return Ok(p);
            }
            if self.sessions_full() {
                return Err(io::Error::other("too many UDP sessions on this connection"));
            }
        }
    }

    fn sessions_full(&self) -> bool {
        self.sessions.open(0, None).is_none()
    }
}

pub struct Client {
    side: ClientSide,
    /// Live connections, the first used for UDP; more are dialed when every one has as many
    /// streams open as its server allows (Xray's and the official server's 1024).
    conns: Mutex<Vec<Arc<Conn>>>,
}

/// QUIC connections one outbound keeps at most.
const MAX_CONNS: usize = 16;
/// A QUIC handshake and the authentication, at most.
const DIAL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

impl Client {
    pub fn new(side: ClientSide) -> Client {
        Client {
            side,
            conns: Mutex::new(Vec::new()),
        }
    }

    /// The live connection (the first), dialed (and authenticated) when there is none.
    pub async fn conn(&self) -> io::Result<Arc<Conn>> {
        let mut g = self.conns.lock().await;
        g.retain(|c| c.quic.close_reason().is_none());
        if let Some(c) = g.first() {
            return Ok(c.clone());
        }
        let c = Arc::new(self.dial_within().await?);
        g.push(c.clone());
        Ok(c)
    }

    /// [`Client::dial`] within [`DIAL_TIMEOUT`] (a server that never answers the
    /// authentication must not hold every dial behind it).
    async fn dial_within(&self) -> io::Result<Conn> {
        tokio::time::timeout(DIAL_TIMEOUT, self.dial())
            .await
            .map_err(|_| {
                io::Error::new(
                    io::ErrorKind::TimedOut,
                    "hysteria: the server did not answer in time",
                )
            })?
    }

    /// A new stream on a live connection with room for one, dialing another connection when
    /// none has (up to [`MAX_CONNS`]; then it waits on the first).
    pub async fn open_stream(&self) -> io::Result<(quinn::SendStream, quinn::RecvStream)> {
        let first = {
            let mut g = self.conns.lock().await;
            g.retain(|c| c.quic.close_reason().is_none());
            for c in g.iter() {
                // Polled once: ready at once when the server allows another stream.
                if let Ok(r) =
                    tokio::time::timeout(std::time::Duration::ZERO, c.quic.open_bi()).await
                {
                    return r.map_err(io::Error::other);
                }
            }
            if g.len() < MAX_CONNS {
                let c = Arc::new(self.dial_within().await?);
                g.push(c.clone());
                c
            } else {
                g[0].clone()
            }
        };
        first.quic.open_bi().await.map_err(io::Error::other)
    }

    async fn server_addr(&self) -> io::Result<SocketAddr> {
        let d = &self.side.server;
        match &d.addr {
            Address::Ip(ip) => Ok(SocketAddr::new(*ip, d.port)),
            Address::Domain(h) => tokio::net::lookup_host((h.as_str(), d.port))
                .await?
                .next()
                .ok_or_else(|| io::Error::other(format!("{h}: no address"))),
        }
    }

    async fn dial(&self) -> io::Result<Conn> {
        let s = &self.side;
        let addr = self.server_addr().await?;
        let endpoint = quic::client(addr, &s.masks, s.params.udp_hop.as_ref())?;
        let rate = Rate::new(0);
        let mut cfg = quinn::ClientConfig::new(s.tls.clone());
        cfg.transport_config(Arc::new(
            s.params.transport(&Defaults::HYSTERIA, rate.clone()),
        ));
        let quic = endpoint
            .connect_with(cfg, addr, &s.sni)
            .map_err(io::Error::other)?
            .await
            .map_err(|e| io::Error::new(io::ErrorKind::ConnectionRefused, e))?;
        let (mut driver, mut send) = h3::client::new(h3_quinn::Connection::new(quic.clone()))
            .await
            .map_err(|e| io::Error::other(format!("HTTP/3: {e}")))?;
        tokio::spawn(async move {
            let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
        });
        let padding =
            String::from_utf8(codec::padding(codec::AUTH_PADDING.0, codec::AUTH_PADDING.1))
                .unwrap_or_default();
        let req = http::Request::post("https://hysteria/auth")
            .header("hysteria-auth", s.auth.as_str())
            .header("hysteria-cc-rx", s.params.brutal_down.to_string())
            .header("hysteria-padding", padding)
            .body(())
            .map_err(io::Error::other)?;
        let h3e = |e: h3::error::StreamError| io::Error::other(format!("HTTP/3: {e}"));
        let mut stream = send.send_request(req).await.map_err(h3e)?;
        stream.finish().await.map_err(h3e)?;
        let resp = stream.recv_response().await.map_err(h3e)?;
        if resp.status().as_u16() != 233 {
            quic.close(0x101u32.into(), b"");
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("hysteria: authentication failed (status {})", resp.status()),
            ));
        }
        let header = |n: &str| {
            resp.headers()
                .get(n)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string()
        };
        let udp = header("hysteria-udp").eq_ignore_ascii_case("true");
        let r = send_rate(&s.params, &header("hysteria-cc-rx"));
        rate.set(r);
        match (r, s.params.congestion) {
            (0, Congestion::Reno) => tracing::debug!("hysteria: {addr} congestion reno"),
            (0, _) => tracing::debug!("hysteria: {addr} congestion bbr"),
            (r, _) => tracing::debug!("hysteria: {addr} congestion brutal bytes per second {r}"),
        }
        let sessions = Sessions::new(quic.clone());
        tokio::spawn(udp::read_loop(sessions.clone(), |_| {}));
        Ok(Conn {
            quic,
            udp,
            sessions,
            next_session: AtomicU32::new(1),
            _endpoint: endpoint,
            _h3: send,
        })
    }
}

/// The rate this client sends at (0 = its base controller), as Xray v26.3.27 decides it from
/// the server's `hysteria-cc-rx`.
fn send_rate(p: &QuicParams, server_rx: &str) -> u64 {
    match p.congestion {
        Congestion::ForceBrutal => p.brutal_up,
        Congestion::Negotiated => match server_rx.parse::<u64>() {
            Ok(rx) if rx > 0 && p.brutal_up > 0 => p.brutal_up.min(rx),
            _ => 0,
        },
        _ => 0,
    }
}

/// A proxied TCP connection: the request went with the first write; the server's response is
/// read before the first bytes it sends back.
pub struct ClientStream {
    inner: quic::QuicStream,
    head: Vec<u8>,
    answered: bool,
    rest: Bytes,
}

impl ClientStream {
    pub fn new(inner: quic::QuicStream) -> ClientStream {
        ClientStream {
            inner,
            head: Vec::new(),
            answered: false,
            rest: Bytes::new(),
        }
    }
}

impl tokio::io::AsyncRead for ClientStream {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        use std::task::Poll;
        let me = &mut *self;
        while !me.answered {
            let mut chunk = [0u8; 1024];
            let mut rb = tokio::io::ReadBuf::new(&mut chunk);
            std::task::ready!(std::pin::Pin::new(&mut me.inner).poll_read(cx, &mut rb))?;
            if rb.filled().is_empty() {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "hysteria: the stream closed before the server answered",
                )));
            }
            me.head.extend_from_slice(rb.filled());
            match codec::read_tcp_response(&me.head) {
                Ok(None) => {}
                Ok(Some((ok, msg, used))) => {
                    if !ok {
                        return Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::ConnectionRefused,
                            format!("hysteria: the server could not connect: {msg}"),
                        )));
                    }
                    me.answered = true;
                    me.rest = Bytes::copy_from_slice(&me.head[used..]);
                    me.head = Vec::new();
                }
                Err(e) => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        e.to_string(),
                    )))
                }
            }
        }
        if !me.rest.is_empty() {
            let n = me.rest.len().min(buf.remaining());
            buf.put_slice(&me.rest[..n]);
            me.rest.advance(n);
            return Poll::Ready(Ok(()));
        }
        std::pin::Pin::new(&mut me.inner).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for ClientStream {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl crate::transport::Stream for ClientStream {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_send_rate_as_xray() {
        let mut p = QuicParams {
            brutal_up: 1000,
            ..Default::default()
        };
        assert_eq!(send_rate(&p, "500"), 500);
        assert_eq!(send_rate(&p, "auto"), 0);
        assert_eq!(send_rate(&p, "0"), 0);
        p.congestion = Congestion::ForceBrutal;
        assert_eq!(send_rate(&p, "auto"), 1000);
        p.brutal_up = 0;
        p.congestion = Congestion::Negotiated;
        assert_eq!(send_rate(&p, "500"), 0);
    }
}
