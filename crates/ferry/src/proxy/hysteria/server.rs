//! The Hysteria 2 server over one QUIC endpoint: each connection authenticates with an
//! HTTP/3 POST to `/auth` (status 233 on success, the masquerade site otherwise, the
//! connection kept open either way); then every TCP request stream is routed as a TCP
//! session of the user, and its UDP datagrams as UDP sessions.

use std::io;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::sync::mpsc;

use super::codec;
use super::h3conn::{H3Conn, Handed};
use super::udp::{self, Sessions};
use super::Account;
use crate::common::{ct, Network};
use crate::proxy::{Accepted, InboundCtx};
use crate::session::ConnInfo;
use crate::transport::quic::{self, Congestion, Defaults, Masquerade, QuicStream, Rate};

/// What the server of one inbound works from: its users and its settings.
pub struct Shared {
    pub users: crate::registry::Users<Account>,
    pub side: ServerSide,
}

/// What the server needs besides its users.
pub struct ServerSide {
    pub tls: Arc<quinn::crypto::rustls::QuicServerConfig>,
    pub params: quic::QuicParams,
    pub masks: crate::transport::udpmask::UdpMasks,
    pub udp_idle: Duration,
    pub masquerade: Masquerade,
    /// TLS for an `https://` masquerade proxy URL.
    pub masq_tls: Option<Arc<crate::transport::tls::TlsLayer>>,
}

/// Streams an unauthenticated connection may have open at once.
const STRANGER_STREAMS: u32 = 32;

/// Closes the endpoint (and with it every connection) when the inbound stops.
struct CloseOnDrop(quinn::Endpoint);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.close(0x100u32.into(), b"");
    }
}

/// Serves `socket` until the inbound stops.
pub async fn serve(
    inbound: Arc<Shared>,
    socket: std::net::UdpSocket,
    ctx: InboundCtx,
) -> io::Result<()> {
    let side = &inbound.side;
    let endpoint = quic::server(socket, &side.masks, side.tls.clone())?;
    let _close = CloseOnDrop(endpoint.clone());
    while let Some(incoming) = endpoint.accept().await {
        let rate = Rate::new(0);
        let mut sc = quinn::ServerConfig::with_crypto(side.tls.clone());
        let mut t = side.params.transport(&Defaults::HYSTERIA, rate.clone());
        // A stranger gets a few streams (the masquerade site); a user gets the rest once
        // authenticated.
        t.max_concurrent_bidi_streams(quinn::VarInt::from_u32(STRANGER_STREAMS));
        sc.transport_config(Arc::new(t));
        let mut ctx = ctx.clone();
        ctx.info = ConnInfo::new(incoming.remote_address().into(), ctx.info.local.clone());
        let inbound = inbound.clone();
        tokio::spawn(async move {
            let connecting = match incoming.accept_with(Arc::new(sc)) {
                Ok(c) => c,
                Err(e) => return tracing::debug!("[{}] hysteria: {e}", ctx.tag),
            };
            let limit = ctx.services.handshake_timeout();
            let conn = match tokio::time::timeout(limit, connecting).await {
                Ok(Ok(c)) => c,
                Ok(Err(e)) => {
                    return ctx.reject("hysteria", "quic-handshake", &e);
                }
                Err(_) => return ctx.reject("hysteria", "quic-handshake", &"timed out"),
            };
            serve_conn(inbound, conn, rate, ctx).await;
        });
    }
    Ok(())
}

/// What one connection's tasks share.
struct Conn {
    inbound: Arc<Shared>,
    quic: quinn::Connection,
    rate: Arc<Rate>,
    ctx: InboundCtx,
    user: OnceLock<Account>,
}

async fn serve_conn(
    inbound: Arc<Shared>,
    quic: quinn::Connection,
    rate: Arc<Rate>,
    ctx: InboundCtx,
) {
    let c = Arc::new(Conn {
        inbound,
        quic: quic.clone(),
        rate,
        ctx,
        user: OnceLock::new(),
    });
    let (tx, rx) = mpsc::channel(16);
    let streams = tokio::spawn(accept_streams(c.clone(), tx));
    let h3 = h3::server::builder()
        .build::<_, Bytes>(H3Conn::new(quic.clone(), rx))
        .await;
    let mut h3 = match h3 {
        Ok(h) => h,
        Err(e) => {
            streams.abort();
            return tracing::debug!(
                "[{}] hysteria: HTTP/3 from {}: {e}",
                c.ctx.tag,
                c.ctx.info.source
            );
        }
    };
    loop {
        match h3.accept().await {
            Ok(Some(resolver)) => {
                let c = c.clone();
                tokio::spawn(async move {
                    let limit = c.ctx.services.handshake_timeout();
                    let Ok(resolved) =
                        tokio::time::timeout(limit, resolver.resolve_request()).await
                    else {
                        return tracing::debug!(
                            "[{}] hysteria: no request head in time",
                            c.ctx.tag
                        );
                    };
                    match resolved {
                        Ok((req, stream)) => {
                            if let Err(e) = answer(&c, req, stream).await {
                                tracing::debug!("[{}] hysteria: request: {e}", c.ctx.tag);
                            }
                        }
                        Err(e) => tracing::debug!("[{}] hysteria: request: {e}", c.ctx.tag),
                    }
                });
            }
            Ok(None) => break,
            Err(e) => {
                tracing::debug!(
                    "[{}] hysteria: connection from {} ended: {e}",
                    c.ctx.tag,
                    c.ctx.info.source
                );
                break;
            }
        }
    }
    streams.abort();
    quic.close(0x100u32.into(), b"");
}

use super::masq::Stream;

/// Answers one HTTP/3 request: an authentication, or the masquerade site.
async fn answer(c: &Arc<Conn>, req: http::Request<()>, mut stream: Stream) -> io::Result<()> {
    let h3e = |e: h3::error::StreamError| io::Error::other(e.to_string());
    let is_auth = req.method() == http::Method::POST
        && req
            .uri()
            .authority()
            .is_some_and(|a| a.as_str() == "hysteria")
        && req.uri().path() == "/auth";
    if is_auth {
        let header = |n: &str| {
            req.headers()
                .get(n)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
        };
        let known = c.user.get().cloned().or_else(|| {
            let given = header("hysteria-auth").as_bytes();
            let users = c.inbound.users.load();
            users
                .iter()
                .rev()
                .find(|a| ct::eq(a.auth.as_bytes(), given))
                .cloned()
        });
        if let Some(account) = known {
            let client_rx: u64 = header("hysteria-cc-rx").parse().unwrap_or(0);
            // A client that announced no datagram size (hysteria 2.8.2 onward, Xray 26.5.3
            // onward after 2026-09-01) cannot be sent datagrams by quinn: it is told there is
            // no UDP rather than losing every reply, and what it sends is dropped.
            let udp = c.quic.max_datagram_size().is_some();
            // Set once, by whichever of two concurrent authentications comes first.
            let first = c.user.set(account.clone()).is_ok();
            if first {
                let rate = send_rate(&c.inbound.side.params, client_rx);
                c.rate.set(rate);
                log_congestion(&c.ctx.tag, &c.ctx.info.source, &c.inbound.side.params, rate);
                // Now a user's: the streams it may open, up from a stranger's.
                let streams = c
                    .inbound
                    .side
                    .params
                    .max_incoming_streams
                    .unwrap_or(Defaults::HYSTERIA.max_incoming_streams);
                c.quic.set_max_concurrent_bi_streams(
                    quinn::VarInt::from_u64(streams).unwrap_or(quinn::VarInt::MAX),
                );
                start_user(c, &account, udp);
            }
            if !udp && first {
                tracing::info!(
                    "[{}] hysteria: {} announced no QUIC datagram size: UDP off for it",
                    c.ctx.tag,
                    c.ctx.info.source
                );
            }
            let resp = http::Response::builder()
                .status(233)
                .header("hysteria-udp", if udp { "true" } else { "false" })
                .header(
                    "hysteria-cc-rx",
                    c.inbound.side.params.brutal_down.to_string(),
                )
                .header("hysteria-padding", padding_header())
                .body(())
                .map_err(io::Error::other)?;
            stream.send_response(resp).await.map_err(h3e)?;
            stream.finish().await.map_err(h3e)?;
            drain(&mut stream).await;
            return Ok(());
        }
        c.ctx.reject("hysteria", "auth", &"unknown hysteria-auth");
    }
    let side = &c.inbound.side;
    let answered = super::masq::answer(
        &side.masquerade,
        side.masq_tls.as_deref(),
        &req,
        &mut stream,
    )
    .await;
    drain(&mut stream).await;
    answered
}

/// Reads what the client still sends of a request already answered (its FIN, mostly), for a
/// moment: dropping the stream unread would stop the client's sending, which HTTP/3 clients
/// take as an error of the request they just finished.
async fn drain(stream: &mut super::h3conn::Stream) {
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        while let Ok(Some(_)) = stream.recv_data().await {}
    })
    .await;
}

/// Logs the controller chosen for a connection (in Xray's words).
fn log_congestion(tag: &str, peer: &dyn std::fmt::Display, p: &quic::QuicParams, rate: u64) {
    match (rate, p.congestion) {
        (0, Congestion::Reno) => tracing::debug!("[{tag}] hysteria: {peer} congestion reno"),
        (0, _) => tracing::debug!("[{tag}] hysteria: {peer} congestion bbr"),
        (r, _) => {
            tracing::debug!("[{tag}] hysteria: {peer} congestion brutal bytes per second {r}")
        }
    }
}

fn padding_header() -> String {
    let p = codec::padding(codec::AUTH_PADDING.0, codec::AUTH_PADDING.1);
    String::from_utf8(p).unwrap_or_default()
}

/// The rate this server sends at (0 = its base controller), as Xray v26.3.27 decides it.
fn send_rate(p: &quic::QuicParams, client_rx: u64) -> u64 {
    match p.congestion {
        Congestion::Negotiated if p.brutal_up > 0 && client_rx > 0 => p.brutal_up.min(client_rx),
        Congestion::ForceBrutal => p.brutal_up,
        _ => 0,
    }
}

/// After the first authentication: UDP sessions start, and the connection is cut when the
/// user is removed.
fn start_user(c: &Arc<Conn>, account: &Account, udp: bool) {
    let revoked = account.user.traffic.revoked.clone();
    let quic = c.quic.clone();
    let tag = c.ctx.tag.clone();
    let email = account.user.email.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = revoked.wait() => {
                tracing::info!("[{tag}] hysteria: user {email} removed, connection closed");
                quic.close(0x100u32.into(), b"");
            }
            _ = quic.closed() => {}
        }
    });
    if !udp {
        return;
    }
    let sessions = Sessions::new(c.quic.clone());
    let c = c.clone();
    let idle = c.inbound.side.udp_idle;
    tokio::spawn(udp::read_loop(sessions.clone(), move |m| {
        let Some(packets) = sessions.open(m.session, Some(idle)) else {
            return;
        };
        let Some(dest) = crate::common::Destination::parse(&m.addr) else {
            return;
        };
        packets.push(m);
        let mut session = c.ctx.session(dest, Network::Udp, super::PROTOCOL.name());
        session.user = c.user.get().map(|a| a.user.clone());
        let ctx = c.ctx.clone();
        let services = ctx.services.clone();
        tokio::spawn(async move {
            let a = Accepted::Packets(session, Box::new(packets));
            if let Err(e) = services.serve_accepted(a, ctx.clone()).await {
                tracing::debug!("[{}] hysteria: UDP session ended: {e}", ctx.tag);
            }
        });
    }));
}

/// Takes every bidirectional stream: TCP requests of an authenticated connection are proxy
/// streams; the rest goes to HTTP/3.
async fn accept_streams(c: Arc<Conn>, to_h3: mpsc::Sender<Handed>) {
    while let Ok((send, recv)) = c.quic.accept_bi().await {
        let c = c.clone();
        let to_h3 = to_h3.clone();
        tokio::spawn(async move {
            let limit = c.ctx.services.handshake_timeout();
            // Boxed: its buffers are gone once the request is read, where the task (which
            // lives as long as the stream) would keep room for them all along.
            let sorted = Box::pin(sort_stream(&c, send, recv, to_h3));
            match tokio::time::timeout(limit, sorted).await {
                Ok(Err(e)) => tracing::debug!("[{}] hysteria: stream: {e}", c.ctx.tag),
                Err(_) => {
                    tracing::debug!("[{}] hysteria: stream sent no request in time", c.ctx.tag)
                }
                Ok(Ok(None)) => {}
                Ok(Ok(Some(a))) => {
                    let services = c.ctx.services.clone();
                    if let Err(e) = services.serve_accepted(a, c.ctx.clone()).await {
                        tracing::debug!("[{}] hysteria: stream ended: {e}", c.ctx.tag);
                    }
                }
            }
        });
    }
}

/// Reads the first varint of a stream (and the request behind it when it is one).
async fn sort_stream(
    c: &Arc<Conn>,
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    to_h3: mpsc::Sender<Handed>,
) -> io::Result<Option<Accepted>> {
    let mut buf = BytesMut::with_capacity(64);
    let mut first = [0u8; 1];
    recv.read_exact(&mut first)
        .await
        .map_err(io::Error::other)?;
    buf.extend_from_slice(&first);
    let len = 1usize << (first[0] >> 6);
    let mut rest = [0u8; 7];
    recv.read_exact(&mut rest[..len - 1])
        .await
        .map_err(io::Error::other)?;
    buf.extend_from_slice(&rest[..len - 1]);
    let ty = codec::varint(&buf).map(|(v, _)| v);
    let Some(account) = c.user.get().filter(|_| ty == Some(codec::TCP_REQUEST)) else {
        let _ = to_h3
            .send(Handed {
                send,
                recv,
                read: buf.freeze(),
            })
            .await;
        return Ok(None);
    };
    // The request: its address and padding.
    let (dest, used) = loop {
        match codec::read_tcp_request(&buf) {
            Ok(Some(x)) => break x,
            Ok(None) => {}
            Err(e) => {
                c.ctx.reject("hysteria", "request", &e);
                let _ = send.reset(0u32.into());
                return Ok(None);
            }
        }
        let mut chunk = [0u8; 2048];
        match recv.read(&mut chunk).await.map_err(io::Error::other)? {
            Some(n) => buf.extend_from_slice(&chunk[..n]),
            None => return Ok(None),
        }
    };
    // Copied out: a slice would keep the whole read buffer for the stream's life.
    let ahead = Bytes::copy_from_slice(&buf[used..]);
    drop(buf);
    // As Xray: OK before dialing (a failed dial closes the stream).
    send.write_all(&codec::tcp_response(true, ""))
        .await
        .map_err(io::Error::other)?;
    let mut session = c.ctx.session(dest, Network::Tcp, super::PROTOCOL.name());
    session.user = Some(account.user.clone());
    Ok(Some(Accepted::Stream(
        session,
        Box::new(QuicStream::new(send, recv, ahead)),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_send_rate_as_xray() {
        let mut p = quic::QuicParams {
            brutal_up: 1000,
            ..Default::default()
        };
        assert_eq!(send_rate(&p, 500), 500);
        assert_eq!(send_rate(&p, 5000), 1000);
        assert_eq!(send_rate(&p, 0), 0, "BBR when the client names no rate");
        p.congestion = Congestion::ForceBrutal;
        assert_eq!(send_rate(&p, 0), 1000);
        p.congestion = Congestion::Bbr;
        assert_eq!(send_rate(&p, 500), 0);
    }
}
