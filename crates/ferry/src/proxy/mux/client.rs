//! The client side of Mux.Cool: connections to the server that carry many sessions (the
//! outbound `mux` object), and XUDP (one UDP session per connection, full-cone), as Xray's
//! `common/mux/client.go`, `app/proxyman/outbound/handler.go` and `common/xudp/xudp.go`.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::link::{write_frames, FrameReader, Link};
use super::packets::CLIENT_MAX_DATAGRAM;
use super::{mux_cool, MuxSettings, Udp443};
use crate::common::Destination;
use crate::transport::{BoxStream, Dialer, PacketConn};

/// Sessions one connection opens in its life before the pool starts another (Xray's
/// `MaxConnection`).
pub const MAX_SESSIONS_PER_CONN: u32 = 128;
/// A connection with no session for this long closes (Xray checks every 16 s).
pub const IDLE_CLOSE: Duration = Duration::from_secs(16);

/// Starts the reader and writer of a client connection; it closes once `limit` sessions
/// were opened and ended, or after [`IDLE_CLOSE`] without sessions.
pub fn start(stream: BoxStream, limit: Option<u32>) -> Arc<Link> {
    let (link, rx) = Link::new(limit);
    let (r, w) = tokio::io::split(stream);
    let l = link.clone();
    // Reader and writer run in one task: a stream's halves may share one waker slot per
    // direction (VMess drains its writes from reads), which two tasks would fight over.
    tokio::spawn(async move {
        let write = async {
            if let Err(e) = write_frames(w, rx, l.stopped()).await {
                tracing::debug!("mux client: writing: {e}");
            }
            l.shutdown();
        };
        let read = async {
            if let Err(e) = read_frames(&l, r).await {
                tracing::info!("mux client: {e}");
            }
            l.shutdown();
        };
        tokio::join!(write, read);
    });
    link
}

async fn read_frames(link: &Link, r: tokio::io::ReadHalf<BoxStream>) -> io::Result<()> {
    let mut reader = FrameReader::new(r, &[]);
    let mut stop = link.stopped();
    let mut tick = tokio::time::interval(IDLE_CLOSE);
    tick.tick().await;
    let mut seen = link.opened();
    loop {
        tokio::select! {
            f = reader.next() => {
                let Some((meta, data)) = f? else { return Ok(()) };
                // A server never opens sessions: a New frame's data is discarded (as Xray).
                let _ = link.handle(meta, data).await;
            }
            _ = stop.changed() => return Ok(()),
            _ = tick.tick() => {
                let opened = link.opened();
                if link.active() == 0 && opened == seen {
                    return Ok(());
                }
                seen = opened;
            }
        }
    }
}

/// UDP to `dest` as XUDP over a Mux connection `stream` (VLESS/VMess command 3): session 0,
/// each datagram with its address, replies with theirs.
pub fn xudp(stream: BoxStream, dest: &Destination) -> io::Result<Box<dyn PacketConn>> {
    let link = start(stream, Some(1));
    let p = link
        .open_xudp(dest, CLIENT_MAX_DATAGRAM)
        .ok_or_else(|| io::Error::other("mux connection closed"))?;
    Ok(Box::new(p))
}

/// Connections of one outbound that share their sessions out, up to `max_active` open
/// sessions each.
pub struct Pool {
    dialer: Arc<dyn Dialer>,
    max_active: usize,
    conns: tokio::sync::Mutex<Vec<Arc<Link>>>,
}

impl Pool {
    pub fn new(dialer: Arc<dyn Dialer>, max_active: usize) -> Self {
        Pool {
            dialer,
            max_active,
            conns: tokio::sync::Mutex::new(Vec::new()),
        }
    }

    /// A connection with room for one more session (dialing one when none has).
    async fn conn(&self) -> io::Result<Arc<Link>> {
        let mut conns = self.conns.lock().await;
        conns.retain(|c| !c.is_closed());
        if let Some(c) = conns.iter().find(|c| c.has_room(self.max_active)) {
            return Ok(c.clone());
        }
        let s = self.dialer.dial_tcp(&mux_cool()).await?;
        let c = start(s, Some(MAX_SESSIONS_PER_CONN));
        conns.push(c.clone());
        tracing::debug!("new Mux.Cool connection ({} open)", conns.len());
        Ok(c)
    }

    pub async fn dial_tcp(&self, dest: &Destination) -> io::Result<BoxStream> {
        for _ in 0..16 {
            if let Some(s) = self.conn().await?.open_stream(dest, self.max_active) {
                return Ok(Box::new(s));
            }
        }
        Err(io::Error::other(
            "unable to find an available mux connection",
        ))
    }

    pub async fn dial_udp(&self, dest: &Destination) -> io::Result<Box<dyn PacketConn>> {
        for _ in 0..16 {
            let c = self.conn().await?;
            if let Some(p) = c.open_packets(dest, self.max_active, CLIENT_MAX_DATAGRAM) {
                return Ok(Box::new(p));
            }
        }
        Err(io::Error::other(
            "unable to find an available mux connection",
        ))
    }

    /// Open connections (for tests).
    pub async fn conns(&self) -> usize {
        let mut conns = self.conns.lock().await;
        conns.retain(|c| !c.is_closed());
        conns.len()
    }
}

/// Where an outbound with `mux` sends UDP.
enum UdpVia {
    /// The outbound itself (VLESS/VMess: XUDP, one connection per session).
    Inner,
    /// The TCP pool's connections, as packet sessions.
    Tcp,
    /// Its own pool (`xudpConcurrency` > 0).
    Own(Pool),
}

/// An outbound with `mux.enabled`: TCP sessions (and UDP, as configured) share connections.
pub struct Muxed {
    inner: Arc<dyn Dialer>,
    tcp: Option<Pool>,
    udp: UdpVia,
    udp443: Udp443,
}

impl Muxed {
    /// Wraps `inner` (which dials `v1.mux.cool` as a Mux connection) with `settings`, read as
    /// Xray reads them: concurrency < 0 keeps TCP off the mux, 0 means 8; xudpConcurrency < 0
    /// sends UDP through the outbound itself, 0 through the TCP connections (when mux is on
    /// for TCP), > 0 through connections of its own.
    pub fn new(inner: Arc<dyn Dialer>, settings: &MuxSettings) -> Self {
        let tcp = match settings.concurrency {
            c if c < 0 => None,
            0 => Some(Pool::new(inner.clone(), 8)),
            c => Some(Pool::new(inner.clone(), c as usize)),
        };
        let udp = match settings.xudp_concurrency {
            c if c < 0 => UdpVia::Inner,
            0 if tcp.is_some() => UdpVia::Tcp,
            0 => UdpVia::Inner,
            c => UdpVia::Own(Pool::new(inner.clone(), c as usize)),
        };
        Muxed {
            inner,
            tcp,
            udp,
            udp443: settings.udp443,
        }
    }

    /// Open connections of the TCP pool (for tests).
    pub async fn tcp_conns(&self) -> usize {
        match &self.tcp {
            Some(p) => p.conns().await,
            None => 0,
        }
    }
}

#[async_trait]
impl Dialer for Muxed {
    async fn dial_tcp(&self, dest: &Destination) -> io::Result<BoxStream> {
        match &self.tcp {
            Some(p) => p.dial_tcp(dest).await,
            None => self.inner.dial_tcp(dest).await,
        }
    }

    async fn dial_udp(&self, dest: &Destination) -> io::Result<Box<dyn PacketConn>> {
        if dest.port == 443 {
            match self.udp443 {
                Udp443::Reject => {
                    return Err(io::Error::new(
                        io::ErrorKind::PermissionDenied,
                        "mux: UDP/443 rejected (xudpProxyUDP443)",
                    ))
                }
                Udp443::Skip => return self.inner.dial_udp(dest).await,
                Udp443::Allow => {}
            }
        }
        match (&self.udp, &self.tcp) {
            (UdpVia::Own(p), _) | (UdpVia::Tcp, Some(p)) => p.dial_udp(dest).await,
            _ => self.inner.dial_udp(dest).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::Network;
    use crate::proxy::mux::frame::{self, Meta, Status};
    use bytes::BytesMut;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

    fn d(s: &str) -> Destination {
        Destination::parse(s).unwrap()
    }

    /// Reads one frame off the peer's end.
    async fn next_frame(peer: &mut DuplexStream, buf: &mut BytesMut) -> (Meta, Vec<u8>) {
        loop {
            if let Some(f) = frame::decode(buf).unwrap() {
                let b = buf.split_to(f.len);
                return (f.meta, b[f.data].to_vec());
            }
            assert!(peer.read_buf(buf).await.unwrap() > 0, "closed");
        }
    }

    async fn send(peer: &mut DuplexStream, meta: Meta, data: Option<&[u8]>) {
        let mut b = Vec::new();
        frame::encode(&meta, data, &mut b);
        peer.write_all(&b).await.unwrap();
    }

    #[tokio::test]
    async fn stream_sessions_open_with_data_and_end_both_ways() {
        let (a, mut peer) = tokio::io::duplex(1 << 16);
        let link = start(Box::new(a), Some(MAX_SESSIONS_PER_CONN));
        let mut s1 = link.open_stream(&d("example.com:80"), 2).unwrap();
        let mut s2 = link.open_stream(&d("1.2.3.4:443"), 2).unwrap();
        assert!(
            link.open_stream(&d("1.2.3.4:1"), 2).is_none(),
            "concurrency 2"
        );
        s1.write_all(b"GET /").await.unwrap();
        let mut buf = BytesMut::new();
        let (m, data) = next_frame(&mut peer, &mut buf).await;
        assert_eq!(
            (m.id, m.status, data.as_slice()),
            (1, Status::New, &b"GET /"[..])
        );
        assert_eq!(m.target, Some((Network::Tcp, d("example.com:80"))));
        // Session 2 sent nothing: its New leaves alone after the wait, once it reads.
        let reader = tokio::spawn(async move {
            let mut got = [0u8; 2];
            s2.read_exact(&mut got).await.unwrap();
            (s2, got)
        });
        let (m, data) = next_frame(&mut peer, &mut buf).await;
        assert_eq!((m.id, m.status, m.has_data()), (2, Status::New, false));
        assert!(data.is_empty());
        send(&mut peer, Meta::keep(2, None), Some(b"ok")).await;
        let (mut s2, got) = reader.await.unwrap();
        assert_eq!(&got, b"ok");
        // Data for an unknown session is answered with End.
        send(&mut peer, Meta::keep(9, None), Some(b"?")).await;
        let (m, _) = next_frame(&mut peer, &mut buf).await;
        assert_eq!((m.id, m.status), (9, Status::End));
        // The peer ends session 1: it reads to its end and cannot write.
        send(&mut peer, Meta::keep(1, None), Some(b"bye")).await;
        send(&mut peer, Meta::end(1, false), None).await;
        let mut all = Vec::new();
        s1.read_to_end(&mut all).await.unwrap();
        assert_eq!(all, b"bye");
        assert!(s1.write_all(b"x").await.is_err());
        // Session 2 shuts down: End.
        s2.shutdown().await.unwrap();
        let (m, _) = next_frame(&mut peer, &mut buf).await;
        assert_eq!((m.id, m.status, m.opt), (2, Status::End, 0));
        assert!(link.has_room(2));
    }

    #[tokio::test]
    async fn xudp_carries_each_datagram_address_both_ways() {
        let (a, mut peer) = tokio::io::duplex(1 << 16);
        let p = xudp(Box::new(a), &d("8.8.8.8:53")).unwrap();
        p.send_to(b"one", &d("8.8.8.8:53")).await.unwrap();
        p.send_to(b"two", &d("[2001:db8::1]:5353")).await.unwrap();
        p.send_to(&[0u8; CLIENT_MAX_DATAGRAM + 1], &d("8.8.8.8:53"))
            .await
            .unwrap();
        p.send_to(b"", &d("8.8.8.8:53")).await.unwrap();
        let mut buf = BytesMut::new();
        let (m, data) = next_frame(&mut peer, &mut buf).await;
        assert_eq!(
            (m.id, m.status, data.as_slice()),
            (0, Status::New, &b"one"[..])
        );
        assert_eq!(m.target, Some((Network::Udp, d("8.8.8.8:53"))));
        let (m, data) = next_frame(&mut peer, &mut buf).await;
        assert_eq!(
            (m.id, m.status, data.as_slice()),
            (0, Status::Keep, &b"two"[..])
        );
        assert_eq!(m.target, Some((Network::Udp, d("[2001:db8::1]:5353"))));
        // Replies: with their source, without (the session's target), a KeepAlive between.
        send(&mut peer, Meta::keep(0, Some(d("9.9.9.9:53"))), Some(b"r1")).await;
        let mut ka = Meta::keep(0, None);
        ka.status = Status::KeepAlive;
        send(&mut peer, ka, Some(b"ignored")).await;
        send(&mut peer, Meta::keep(0, None), Some(b"r2")).await;
        let mut b = [0u8; 64];
        let (n, from) = p.recv_from(&mut b).await.unwrap();
        assert_eq!((&b[..n], from), (&b"r1"[..], d("9.9.9.9:53")));
        let (n, from) = p.recv_from(&mut b).await.unwrap();
        assert_eq!((&b[..n], from), (&b"r2"[..], d("8.8.8.8:53")));
        // The server ends the session: the channel ends; dropping it closes the connection.
        send(&mut peer, Meta::end(0, false), None).await;
        assert!(p.recv_from(&mut b).await.is_err());
        drop(p);
        let (m, _) = next_frame(&mut peer, &mut buf).await;
        assert_eq!((m.id, m.status), (0, Status::End));
        let mut rest = Vec::new();
        peer.read_to_end(&mut rest).await.unwrap();
        assert!(
            rest.is_empty(),
            "the connection closes after the only session"
        );
    }
}
