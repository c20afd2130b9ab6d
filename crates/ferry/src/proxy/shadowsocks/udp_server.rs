//! Shadowsocks UDP serving: authenticates and decodes each client packet (per-packet keys for
//! the stream/AEAD editions, per-session state for 2022), hands it to [`UdpNat`], and encrypts the
//! replies for the client they go back to.

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use tokio::net::UdpSocket;

use super::aead::Error;
use super::cipher::{Kind, Method};
use super::udp::{self, SessionTable};
use super::{Account, ServerConfig};
use crate::common::{Destination, Network};
use crate::proxy::udp::{NatKey, UdpReply, MAX_DATAGRAM};
use crate::proxy::InboundCtx;
use crate::registry::Users;

/// One Shadowsocks inbound's UDP side: its config and its 2022 sessions.
pub struct UdpServer<'a> {
    cfg: &'a ServerConfig,
    users: &'a Users<Account>,
    /// 2022 UDP: per client session, the server's side of it (idle ones expire).
    udp: &'a Mutex<Sessions2022>,
}

impl<'a> UdpServer<'a> {
    /// The UDP side of an inbound with config `cfg` and 2022 session table `udp`.
    pub fn new(
        cfg: &'a ServerConfig,
        users: &'a Users<Account>,
        udp: &'a Mutex<Sessions2022>,
    ) -> Self {
        UdpServer { cfg, users, udp }
    }

    /// Serves client packets from `socket` until it fails.
    pub async fn serve(&self, socket: Arc<UdpSocket>, ctx: InboundCtx) -> io::Result<()> {
        let idle = ctx.services.level(0).conn_idle;
        // Per-client state lives as long as the NAT keeps an idle session (zero: 5 minutes).
        let keep = if idle.is_zero() {
            Duration::from_secs(300)
        } else {
            idle
        };
        self.udp
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .set_idle(keep);
        let reply = Arc::new(Reply {
            socket: socket.clone(),
            method: self.cfg.method,
            peers: Mutex::new(SessionTable::new(keep)),
        });
        let nat = ctx.services.clone().udp_sessions(reply.clone(), idle, &ctx);
        let mut buf = vec![0u8; MAX_DATAGRAM];
        let mut scratch = Vec::new();
        loop {
            let (n, from) = socket.recv_from(&mut buf).await?;
            let pkt = &mut buf[..n];
            let users = self.users.load();
            match self.decode_udp(pkt, &mut scratch, &users) {
                Ok((dest, payload, acct, peer)) => {
                    let key = match &peer {
                        UdpPeer::S2022(p) => NatKey::Session(p.nat),
                        UdpPeer::Simple { .. } => NatKey::Addr(from),
                    };
                    reply.set(from, peer);
                    let mut s = ctx.session(dest, Network::Udp, "shadowsocks");
                    s.source = from.into();
                    s.user =
                        Some(acct.user.clone()).filter(|u| !u.email.is_empty() || u.level != 0);
                    nat.send_keyed(key, from, s, payload);
                }
                Err(e) => tracing::info!(
                    "[{}] shadowsocks udp: dropped packet from {from}: {e}",
                    ctx.tag
                ),
            }
        }
    }

    /// Authenticates and decodes one client packet: target, payload, user, and how to reply.
    /// `scratch` is reused across packets (multi-user key trial decrypts into it).
    fn decode_udp<'u>(
        &'u self,
        pkt: &mut [u8],
        scratch: &mut Vec<u8>,
        all: &'u [Account],
    ) -> std::result::Result<(Destination, Bytes, &'u Account, UdpPeer), Error> {
        let peer = |u: &Account| UdpPeer::Simple {
            method: u.method,
            key: u.key.clone(),
        };
        if self.cfg.method.kind() != Kind::Aead2022 {
            if let [u] = all {
                let p = udp::decode_simple_ota(u.method, &u.key, pkt)?;
                match (p.ota, self.cfg.ota) {
                    (true, Some(false)) => return Err(Error::Header("one-time auth refused")),
                    (false, Some(true)) => return Err(Error::Header("one-time auth required")),
                    _ => {}
                }
                return Ok((p.dest, Bytes::copy_from_slice(&pkt[p.payload]), u, peer(u)));
            }
            // Multi-user AEAD: try each key, decrypting out of place so the packet stays
            // intact for the next key (no copy per user tried).
            if scratch.len() < pkt.len() {
                scratch.resize(pkt.len(), 0);
            }
            for u in all {
                if let Ok((d, r)) = udp::decode_aead_to(u.method, &u.key, pkt, scratch) {
                    return Ok((d, Bytes::copy_from_slice(&scratch[r]), u, peer(u)));
                }
            }
            return Err(Error::Auth);
        }
        // A 2022 inbound configured with `"clients": []` and no user yet takes the server key.
        let (all, ipsk) = match (&self.cfg.ipsk, &self.cfg.key_while_empty) {
            (Some(_), Some(k)) if all.is_empty() => (std::slice::from_ref(k), None),
            (k, _) => (all, k.as_deref()),
        };
        let users: Vec<(&[u8], [u8; 16])> = match ipsk {
            Some(_) => all.iter().map(|u| (u.key.as_slice(), u.hash)).collect(),
            None => Vec::new(),
        };
        let first = all.first().ok_or(Error::UnknownUser)?;
        let r = udp::Receiver2022 {
            method: self.cfg.method,
            header_key: ipsk.unwrap_or(&first.key),
            users: &users,
            key: &first.key,
            from_server: false,
        };
        let p = udp::decode_2022(&r, pkt)?;
        let acct = p.user.and_then(|i| all.get(i)).unwrap_or(first);
        // Keyed by the client's session (and user: another user could copy a session id it
        // sees on the wire), never by address: a packet replayed from another address meets the
        // same window, and a client that moves keeps its session.
        let mut map = self.udp.lock().unwrap_or_else(|e| e.into_inner());
        let st = map.entry((p.session_id, acct.hash), Instant::now(), || UdpPeer2022 {
            client_session: p.session_id,
            server_session: udp::new_session_id(),
            window: udp::Window::default(),
            next_id: Arc::new(std::sync::atomic::AtomicU64::new(0)),
            key: acct.key.clone(),
            nat: NEXT_NAT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        });
        if !st.window.check(p.packet_id) {
            return Err(Error::Replay);
        }
        st.window.record(p.packet_id);
        let peer = UdpPeer::S2022(st.clone());
        Ok((p.addr, Bytes::copy_from_slice(&pkt[p.payload]), acct, peer))
    }
}

/// Tells 2022 sessions apart in the NAT (unique in the process).
static NEXT_NAT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// 2022 UDP sessions: by client session id and the user's key hash.
pub type Sessions2022 = SessionTable<UdpPeer2022, (u64, [u8; 16])>;

/// The server's side of a 2022 UDP session with one client.
#[derive(Clone)]
pub struct UdpPeer2022 {
    client_session: u64,
    server_session: u64,
    window: udp::Window,
    next_id: Arc<std::sync::atomic::AtomicU64>,
    key: Vec<u8>,
    /// The session's key in the NAT.
    nat: u64,
}

/// How to encrypt replies to one client address.
#[derive(Clone)]
pub enum UdpPeer {
    Simple { method: Method, key: Vec<u8> },
    S2022(UdpPeer2022),
}

struct Reply {
    socket: Arc<UdpSocket>,
    method: Method,
    /// How to encrypt replies to each client; idle entries expire.
    peers: Mutex<SessionTable<UdpPeer>>,
}

impl Reply {
    fn set(&self, client: SocketAddr, p: UdpPeer) {
        let mut m = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        m.insert(client, p, Instant::now());
    }
}

#[async_trait]
impl UdpReply for Reply {
    async fn reply(&self, client: SocketAddr, data: &[u8], from: &Destination) -> io::Result<()> {
        let peer = {
            let mut m = self.peers.lock().unwrap_or_else(|e| e.into_inner());
            m.get(&client, Instant::now()).cloned()
        };
        let Some(peer) = peer else { return Ok(()) };
        let mut out = Vec::with_capacity(data.len() + 96);
        match &peer {
            UdpPeer::Simple { method, key } => {
                udp::encode_simple(*method, key, from, data, &mut out)
            }
            UdpPeer::S2022(p) => {
                let id = p.next_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let s = udp::Sender2022 {
                    method: self.method,
                    header_key: &p.key,
                    ipsks: &[],
                    user_key: &p.key,
                    session_id: p.server_session,
                    packet_id: id,
                    client_session_id: Some(p.client_session),
                };
                udp::encode_2022(&s, from, data, &mut out);
            }
        }
        self.socket.send_to(&out, client).await.map(|_| ())
    }
}
