//! One WireGuard interface: its peers (boringtun's Noise state machine each), the UDP link to
//! them, and the userspace stack its IP packets go through. Both ends use it: the outbound
//! reaches each peer through its own UDP channel (the outbound's dialer), the inbound answers
//! every peer on its one listening socket, at the address the peer last wrote from.
//!
//! What comes in: bytes 1..3 of every datagram are zeroed first (Cloudflare WARP and Xray's
//! `reserved`); a handshake initiation passes mac1 (and mac2 under load: a cookie reply instead)
//! before its sender's static key is decrypted and looked up; any other message goes to the peer
//! its receiver index names. Nothing of a stranger's datagram is allocated for.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use boringtun::noise::errors::WireGuardError;
use boringtun::noise::handshake::parse_handshake_anon;
use boringtun::noise::rate_limiter::RateLimiter;
use boringtun::noise::{Packet, Tunn, TunnResult};
use boringtun::x25519::{PublicKey, StaticSecret};
use tokio::net::UdpSocket;
use tokio::sync::mpsc;

use super::config::{PeerSettings, Prefix};
use crate::common::Destination;
use crate::netstack::Stack;
use crate::session::User;
use crate::transport::PacketConn;

/// Handshake initiations per second before mac2 (a cookie) is required.
const HANDSHAKES_PER_SECOND: u64 = 100;
/// How often the peers' timers run (wireguard-go and boringtun: 250 ms or less).
const TICK: Duration = Duration::from_millis(250);
/// Kernel buffers of a WireGuard UDP socket: a TCP window's burst of datagrams must fit, or
/// the stack inside sees loss where there is none.
pub const SOCKET_BUFFER: usize = 4 << 20;

/// Asks for [`SOCKET_BUFFER`] on a UDP socket (the kernel caps it at `net.core.[rw]mem_max`).
pub fn size_buffers(s: &UdpSocket) {
    let r = socket2::SockRef::from(s);
    let _ = r.set_recv_buffer_size(SOCKET_BUFFER);
    let _ = r.set_send_buffer_size(SOCKET_BUFFER);
}

/// Room for one datagram or one IP packet and WireGuard's overhead.
pub const BUF: usize = 65536 + 64;

/// How a peer is reached.
pub enum Link {
    /// Its own channel (the outbound's dialer).
    Conn(Box<dyn PacketConn>, Destination),
    /// The inbound's socket, at the address it last wrote from.
    Socket(Arc<UdpSocket>),
}

pub struct Peer {
    pub public: [u8; 32],
    tunn: Mutex<Tunn>,
    allowed: Vec<Prefix>,
    endpoint: Mutex<Option<SocketAddr>>,
    link: Link,
    pub user: Option<User>,
}

impl Peer {
    fn tunn(&self) -> std::sync::MutexGuard<'_, Tunn> {
        self.tunn.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn allows(&self, ip: IpAddr) -> bool {
        self.allowed.iter().any(|p| p.contains(ip))
    }

    pub fn endpoint(&self) -> Option<SocketAddr> {
        *self.endpoint.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn send(&self, data: &[u8]) {
        let r = match &self.link {
            Link::Conn(c, d) => c.send_to(data, d).await,
            Link::Socket(s) => match self.endpoint() {
                Some(ep) => s.send_to(data, ep).await.map(|_| ()),
                None => Ok(()),
            },
        };
        if let Err(e) = r {
            tracing::debug!("wireguard: send: {e}");
        }
    }
}

/// Datagrams to send once the peer's lock is released, in one reused buffer.
#[derive(Default)]
pub struct Outgoing {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Outgoing {
    fn push(&mut self, d: &[u8]) {
        self.bytes.extend_from_slice(d);
        self.ends.push(self.bytes.len());
    }

    async fn flush(&mut self, peer: &Peer) {
        let mut start = 0;
        for &end in &self.ends {
            peer.send(&self.bytes[start..end]).await;
            start = end;
        }
        self.bytes.clear();
        self.ends.clear();
    }
}

pub struct Device {
    secret: StaticSecret,
    public: PublicKey,
    limiter: Arc<RateLimiter>,
    /// Peers by their index (the receiver index's upper 24 bits).
    peers: RwLock<Vec<Option<Arc<Peer>>>>,
    pub stack: Stack,
    /// Written over bytes 1..3 of what this end sends (the outbound's `reserved`).
    reserved: Option<[u8; 3]>,
}

/// Zeroes a received datagram's reserved bytes (every implementation Xray meets does).
pub fn clear_reserved(d: &mut [u8]) {
    if d.len() > 3 {
        d[1..4].fill(0);
    }
}

impl Device {
    /// A device with no peers yet, whose stack is `stack`.
    pub fn new(secret: [u8; 32], stack: Stack, reserved: Option<[u8; 3]>) -> Arc<Device> {
        let secret = StaticSecret::from(secret);
        let public = PublicKey::from(&secret);
        Arc::new(Device {
            limiter: Arc::new(RateLimiter::new(&public, HANDSHAKES_PER_SECOND)),
            secret,
            public,
            peers: RwLock::new(Vec::new()),
            stack,
            reserved,
        })
    }

    /// Adds a peer reached through `link`.
    pub fn add_peer(&self, s: &PeerSettings, link: Link, user: Option<User>) -> Arc<Peer> {
        let mut peers = self.peers.write().unwrap_or_else(|e| e.into_inner());
        let idx = peers
            .iter()
            .position(Option::is_none)
            .unwrap_or(peers.len());
        let tunn = Tunn::new(
            self.secret.clone(),
            PublicKey::from(s.public_key),
            s.preshared_key,
            (s.keep_alive > 0).then_some(s.keep_alive),
            idx as u32,
            Some(self.limiter.clone()),
        );
        let peer = Arc::new(Peer {
            public: s.public_key,
            tunn: Mutex::new(tunn),
            allowed: s.allowed.clone(),
            endpoint: Mutex::new(None),
            link,
            user,
        });
        if idx == peers.len() {
            peers.push(Some(peer.clone()));
        } else {
            peers[idx] = Some(peer.clone());
        }
        peer
    }

    /// Removes the peer with this public key; false when there is none.
    pub fn remove_peer(&self, public: &[u8; 32]) -> bool {
        let mut peers = self.peers.write().unwrap_or_else(|e| e.into_inner());
        for p in peers.iter_mut() {
            if p.as_ref().is_some_and(|p| &p.public == public) {
                *p = None;
                return true;
            }
        }
        false
    }

    pub fn peers(&self) -> Vec<Arc<Peer>> {
        let peers = self.peers.read().unwrap_or_else(|e| e.into_inner());
        peers.iter().flatten().cloned().collect()
    }

    fn peer_by_index(&self, receiver: u32) -> Option<Arc<Peer>> {
        let peers = self.peers.read().unwrap_or_else(|e| e.into_inner());
        peers.get((receiver >> 8) as usize)?.clone()
    }

    fn peer_by_key(&self, key: &[u8; 32]) -> Option<Arc<Peer>> {
        let peers = self.peers.read().unwrap_or_else(|e| e.into_inner());
        peers.iter().flatten().find(|p| &p.public == key).cloned()
    }

    /// The peer whose allowed addresses hold `ip` (who a client inside the tunnel is).
    pub fn owner(&self, ip: IpAddr) -> Option<Arc<Peer>> {
        self.route(ip)
    }

    /// The peer an inner packet to `dst` goes to (the longest matching allowed prefix).
    fn route(&self, dst: IpAddr) -> Option<Arc<Peer>> {
        let peers = self.peers.read().unwrap_or_else(|e| e.into_inner());
        let mut best: Option<(&Arc<Peer>, u8)> = None;
        for p in peers.iter().flatten() {
            for a in &p.allowed {
                if a.contains(dst) && best.is_none_or(|(_, l)| a.len > l) {
                    best = Some((p, a.len));
                }
            }
        }
        best.map(|(p, _)| p.clone())
    }

    fn stamp(&self, d: &mut [u8]) {
        if let (Some(r), true) = (self.reserved, d.len() > 3) {
            d[1..4].copy_from_slice(&r);
        }
    }

    /// Which peer a datagram is from, without any work for a stranger beyond the MAC check
    /// (and, for an initiation that passes it, decrypting the sender's static key).
    fn peer_of(&self, from: SocketAddr, d: &[u8], out: &mut Outgoing) -> Option<Arc<Peer>> {
        if d.len() < 8 {
            return None;
        }
        if d[0] != 1 {
            return self.peer_by_index(u32::from_le_bytes([d[4], d[5], d[6], d[7]]));
        }
        let mut cookie = [0u8; 64];
        match self.limiter.verify_packet(Some(from.ip()), d, &mut cookie) {
            Ok(Packet::HandshakeInit(h)) => {
                let half = parse_handshake_anon(&self.secret, &self.public, &h).ok()?;
                self.peer_by_key(&half.peer_static_public)
            }
            Err(TunnResult::WriteToNetwork(c)) => {
                // Under load: the cookie goes back to whoever sent this, no peer is touched.
                out.push(c);
                None
            }
            _ => None,
        }
    }

    /// One datagram from `from` (its reserved bytes cleared here). What it asks to send is
    /// sent; the IP packets it carried enter the stack.
    pub async fn receive(
        &self,
        from: SocketAddr,
        d: &mut [u8],
        buf: &mut [u8],
        out: &mut Outgoing,
        reply: &UdpSocket,
    ) {
        clear_reserved(d);
        let Some(peer) = self.peer_of(from, d, out) else {
            if !out.ends.is_empty() {
                // A cookie reply to a stranger: straight back where it came from.
                let mut start = 0;
                for &end in &out.ends {
                    let _ = reply.send_to(&out.bytes[start..end], from).await;
                    start = end;
                }
                out.bytes.clear();
                out.ends.clear();
            }
            return;
        };
        self.receive_from(&peer, from, d, buf, out).await;
    }

    /// [`receive`](Self::receive) for a datagram known to come from `peer`'s channel.
    pub async fn receive_from(
        &self,
        peer: &Peer,
        from: SocketAddr,
        d: &mut [u8],
        buf: &mut [u8],
        out: &mut Outgoing,
    ) {
        self.open(peer, from, d, buf, out);
        out.flush(peer).await;
    }

    /// Runs one datagram through `peer`'s state machine: what it asks to send goes to `out`,
    /// the IP packets it carried (from addresses the peer owns) into the stack.
    pub fn open(
        &self,
        peer: &Peer,
        from: SocketAddr,
        d: &mut [u8],
        buf: &mut [u8],
        out: &mut Outgoing,
    ) {
        clear_reserved(d);
        let mut authentic = false;
        {
            let mut t = peer.tunn();
            let mut r = t.decapsulate(Some(from.ip()), d, buf);
            loop {
                match r {
                    TunnResult::WriteToNetwork(p) => {
                        authentic = true;
                        self.stamp(p);
                        out.push(p);
                        r = t.decapsulate(None, &[], buf);
                    }
                    TunnResult::WriteToTunnelV4(p, src) => {
                        authentic = true;
                        if peer.allows(IpAddr::V4(src)) {
                            self.stack.input(p);
                        }
                        break;
                    }
                    TunnResult::WriteToTunnelV6(p, src) => {
                        authentic = true;
                        if peer.allows(IpAddr::V6(src)) {
                            self.stack.input(p);
                        }
                        break;
                    }
                    TunnResult::Done => {
                        // A keepalive (or a cookie) authenticated.
                        authentic |= d.first() == Some(&4);
                        break;
                    }
                    TunnResult::Err(e) => {
                        if !matches!(e, WireGuardError::DuplicateCounter) {
                            tracing::debug!("wireguard: from {from}: {e:?}");
                        }
                        break;
                    }
                }
            }
        }
        if authentic && matches!(peer.link, Link::Socket(_)) {
            // Roaming: the peer is where its last authentic packet came from.
            *peer.endpoint.lock().unwrap_or_else(|e| e.into_inner()) = Some(from);
        }
    }

    /// The fuzz target's body: any datagram from a stranger or a peer is looked up and opened
    /// without a panic, and nothing but a cookie reply is owed to a stranger.
    #[cfg(any(test, feature = "fuzzing"))]
    pub fn fuzz_one(&self, data: &[u8]) {
        let from: SocketAddr = ([192, 0, 2, 1], 51820).into();
        let mut d = data.to_vec();
        let mut buf = vec![0u8; BUF];
        let mut out = Outgoing::default();
        clear_reserved(&mut d);
        match self.peer_of(from, &d, &mut out) {
            Some(p) => self.open(&p, from, &mut d, &mut buf, &mut out),
            None => assert!(out.ends.len() <= 1),
        }
        // Every peer sees it too, as if it came over the peer's own channel.
        for p in self.peers() {
            let mut d = data.to_vec();
            let mut o = Outgoing::default();
            self.open(&p, from, &mut d, &mut buf, &mut o);
        }
    }

    /// Sends the stack's packets into the tunnel until the stack stops.
    pub async fn send_loop(this: std::sync::Weak<Device>, mut packets: mpsc::Receiver<Vec<u8>>) {
        let mut buf = vec![0u8; BUF];
        while let Some(p) = packets.recv().await {
            let Some(dev) = this.upgrade() else { return };
            let Some(dst) = Tunn::dst_address(&p) else {
                continue;
            };
            let Some(peer) = dev.route(dst) else {
                continue;
            };
            let n = {
                let mut t = peer.tunn();
                match t.encapsulate(&p, &mut buf) {
                    TunnResult::WriteToNetwork(d) => {
                        dev.stamp(d);
                        d.len()
                    }
                    TunnResult::Err(e) => {
                        tracing::debug!("wireguard: encapsulate: {e:?}");
                        continue;
                    }
                    _ => continue,
                }
            };
            peer.send(&buf[..n]).await;
        }
    }

    /// Runs every peer's timers (handshake retries, rekeys, keepalives) until the device goes.
    pub async fn timers(this: std::sync::Weak<Device>) {
        let mut buf = vec![0u8; BUF];
        let mut out = Outgoing::default();
        let mut tick = tokio::time::interval(TICK);
        let mut n = 0u64;
        loop {
            tick.tick().await;
            let Some(dev) = this.upgrade() else { return };
            n += 1;
            if n.is_multiple_of(4) {
                dev.limiter.reset_count();
            }
            for peer in dev.peers() {
                {
                    let mut t = peer.tunn();
                    if let TunnResult::WriteToNetwork(p) = t.update_timers(&mut buf) {
                        dev.stamp(p);
                        out.push(p);
                    }
                }
                out.flush(&peer).await;
            }
        }
    }

    /// Starts a handshake with `peer` now (the outbound's first use).
    pub async fn initiate(&self, peer: &Peer) {
        let mut buf = [0u8; 256];
        let n = {
            let mut t = peer.tunn();
            match t.format_handshake_initiation(&mut buf, false) {
                TunnResult::WriteToNetwork(p) => {
                    self.stamp(p);
                    p.len()
                }
                _ => return,
            }
        };
        peer.send(&buf[..n]).await;
    }
}

/// Receives from one peer's own channel (the outbound) until it fails.
pub async fn receive_loop(dev: std::sync::Weak<Device>, peer: Arc<Peer>) -> io::Result<()> {
    let Link::Conn(conn, _) = &peer.link else {
        return Ok(());
    };
    let mut d = vec![0u8; BUF];
    let mut buf = vec![0u8; BUF];
    let mut out = Outgoing::default();
    loop {
        let (n, from) = conn.recv_from(&mut d).await?;
        let Some(dev) = dev.upgrade() else {
            return Ok(());
        };
        let from = match from.addr {
            crate::common::Address::Ip(ip) => SocketAddr::new(ip, from.port),
            _ => SocketAddr::from(([0, 0, 0, 0], 0)),
        };
        dev.receive_from(&peer, from, &mut d[..n], &mut buf, &mut out)
            .await;
    }
}
