//! A userspace TCP/IP stack: IP packets in and out on one side, TCP streams and UDP datagrams
//! on the other. WireGuard runs its tunnel through one (and the TUN inbound will).
//!
//! TCP is smoltcp's engine (window scaling, cubic, retransmission, MSS from the MTU), driven by
//! one task per stack; each flow is a [`TcpFlow`], a [`Stream`](crate::transport::Stream) the
//! relay copies through. UDP never enters the engine: [`packet`] reads and writes those packets
//! itself, so replies may come from any address (full cone). ICMP echo to the stack's addresses
//! (every address, when promiscuous) is answered.
//!
//! A *promiscuous* stack (a server: WireGuard's inbound) takes a TCP connection or a UDP flow
//! to any destination, as Xray's gVisor stack does; a plain one (a client: WireGuard's
//! outbound) only what is addressed to its own addresses, for the connections it opened.
//!
//! Bounds: at most [`MAX_FLOWS`] TCP connections, [`RX_QUEUE`] packets waiting for the engine
//! and [`UDP_QUEUE`] datagrams per UDP socket; what comes beyond is dropped (TCP retransmits).

pub mod device;
pub mod packet;
mod tcp;
mod udp;

#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use smoltcp::iface::{Config as IfaceConfig, Interface, SocketHandle, SocketSet};
use smoltcp::socket::tcp as stcp;
use smoltcp::wire::{HardwareAddress, IpAddress, IpCidr, IpListenEndpoint};
use tokio::sync::{mpsc, Notify};

pub use tcp::TcpFlow;
pub use udp::UdpFlow;

/// TCP connections one stack holds at once.
pub const MAX_FLOWS: usize = 16384;
/// Packets from the tunnel waiting for the TCP engine.
pub const RX_QUEUE: usize = 4096;
/// Datagrams waiting in one UDP socket.
pub const UDP_QUEUE: usize = 256;
/// Each TCP connection's receive and send buffers (zeroed on allocation, so the pages a
/// connection never fills are never resident).
pub const TCP_BUFFER: usize = 512 * 1024;
/// A connection the stack opens gives up after this long without an answer.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// A closed flow whose peer never finishes the close is reset after this long.
const LINGER: Duration = Duration::from_secs(30);
/// A listener made for a SYN that no SYN reached.
const PENDING: Duration = Duration::from_secs(5);

/// What a stack is.
#[derive(Clone, Debug)]
pub struct Config {
    /// Its own addresses (one of each family at most is used as a source).
    pub addrs: Vec<IpAddr>,
    pub mtu: usize,
    pub promiscuous: bool,
}

/// Where a promiscuous stack's UDP datagrams go (`src`: the client inside the tunnel).
pub trait UdpIn: Send + Sync + 'static {
    fn datagram(&self, src: SocketAddr, dst: SocketAddr, data: &[u8]);
}

/// What a promiscuous stack accepted.
pub struct Accept {
    pub tcp: mpsc::Receiver<TcpFlow>,
}

struct Inner {
    state: Mutex<State>,
    wake: Arc<Notify>,
    /// Packets for the tunnel.
    out: mpsc::Sender<Vec<u8>>,
    udp_in: Option<Arc<dyn UdpIn>>,
    accept: Option<mpsc::Sender<TcpFlow>>,
}

struct State {
    iface: Interface,
    sockets: SocketSet<'static>,
    dev: device::Queues,
    epoch: std::time::Instant,
    promiscuous: bool,
    v4: Option<Ipv4Addr>,
    v6: Option<Ipv6Addr>,
    /// Listeners made for a SYN (keyed by it), until a SYN reaches one.
    pending: HashMap<(SocketAddr, SocketAddr), (SocketHandle, std::time::Instant)>,
    /// Every live TCP connection by (remote, local).
    conns: HashMap<(SocketAddr, SocketAddr), SocketHandle>,
    /// Flows dropped by their owner, closing.
    dropped: Vec<(SocketHandle, std::time::Instant)>,
    tcp_ports: HashSet<u16>,
    udp_ports: HashMap<u16, mpsc::Sender<(SocketAddr, Vec<u8>)>>,
    next_port: u16,
}

/// A running stack; clones share it. It stops when the last clone and the last flow are gone.
#[derive(Clone)]
pub struct Stack {
    inner: Arc<Inner>,
}

/// How much faster than real time the TCP engine's clock runs. smoltcp holds its minimum
/// retransmission timeout at a constant 1 s (RFC 6298's floor), five times the 200 ms that
/// Linux and gVisor use, and it has no SACK: a burst lost to a peer's full socket buffer (Xray
/// reads its WireGuard socket with the kernel's default 208 KiB) stalled a download for a
/// whole second, and Xray's `downlinkOnly` (1 s once the client's upload ended) then closed it
/// mid-transfer. On the engine's clock every timer counts five times faster, so its floor is
/// Linux's 200 ms and TIME-WAIT 2 s (the delayed ACK and the idle timeout are set in real time
/// through [`engine_duration`]); RTT samples are measured on the same
/// clock, so its estimates and cubic's curve stay consistent (cubic reaches its last window
/// in a fifth of the time, as on a path with five times the round trip).
const ENGINE_CLOCK: u32 = 5;

fn smol_now(epoch: std::time::Instant) -> smoltcp::time::Instant {
    smoltcp::time::Instant::from_micros(engine_duration(epoch.elapsed()).total_micros() as i64)
}

/// A real duration on the engine's clock.
fn engine_duration(d: Duration) -> smoltcp::time::Duration {
    smoltcp::time::Duration::from_micros((d * ENGINE_CLOCK).as_micros() as u64)
}

/// An engine-clock duration in real time.
fn real_duration(d: smoltcp::time::Duration) -> Duration {
    Duration::from_micros(d.total_micros()) / ENGINE_CLOCK
}

fn to_socket(e: smoltcp::wire::IpEndpoint) -> SocketAddr {
    SocketAddr::new(e.addr.into(), e.port)
}

impl Stack {
    /// A stack whose packets for the tunnel go to `out`. A promiscuous one hands what it
    /// accepts to the returned [`Accept`] (TCP) and to `udp_in` (UDP).
    pub fn new(
        config: &Config,
        out: mpsc::Sender<Vec<u8>>,
        udp_in: Option<Arc<dyn UdpIn>>,
    ) -> (Stack, Option<Accept>) {
        let mut dev = device::Queues::new(config.mtu);
        let mut ic = IfaceConfig::new(HardwareAddress::Ip);
        ic.random_seed = crate::common::rand::u64();
        let epoch = std::time::Instant::now();
        let mut iface = Interface::new(ic, &mut dev, smol_now(epoch));
        let v4 = config.addrs.iter().find_map(|a| match a {
            IpAddr::V4(a) => Some(*a),
            _ => None,
        });
        let v6 = config.addrs.iter().find_map(|a| match a {
            IpAddr::V6(a) => Some(*a),
            _ => None,
        });
        iface.update_ip_addrs(|addrs| {
            if let Some(a) = v4 {
                let _ = addrs.push(IpCidr::new(IpAddress::Ipv4(a), 32));
            }
            if let Some(a) = v6 {
                let _ = addrs.push(IpCidr::new(IpAddress::Ipv6(a), 128));
            }
        });
        // Everything is reached through the tunnel: default routes via our own addresses.
        let gw4 = v4.unwrap_or(Ipv4Addr::new(10, 255, 255, 254));
        let gw6 = v6.unwrap_or(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1));
        let _ = iface.routes_mut().add_default_ipv4_route(gw4);
        let _ = iface.routes_mut().add_default_ipv6_route(gw6);
        iface.set_any_ip(config.promiscuous);
        let (accept_tx, accept) = if config.promiscuous {
            let (tx, rx) = mpsc::channel(1024);
            (Some(tx), Some(Accept { tcp: rx }))
        } else {
            (None, None)
        };
        let inner = Arc::new(Inner {
            state: Mutex::new(State {
                iface,
                sockets: SocketSet::new(Vec::new()),
                dev,
                epoch,
                promiscuous: config.promiscuous,
                v4,
                v6,
                pending: HashMap::new(),
                conns: HashMap::new(),
                dropped: Vec::new(),
                tcp_ports: HashSet::new(),
                udp_ports: HashMap::new(),
                next_port: 32768 + (crate::common::rand::u64() % 16384) as u16,
            }),
            wake: Arc::new(Notify::new()),
            out,
            udp_in: if config.promiscuous { udp_in } else { None },
            accept: accept_tx,
        });
        tokio::spawn(run(Arc::downgrade(&inner)));
        (Stack { inner }, accept)
    }

    /// One IP packet from the tunnel.
    pub fn input(&self, p: &[u8]) {
        let Some(pkt) = packet::parse(p) else {
            return;
        };
        if pkt.proto == packet::PROTO_UDP && !pkt.fragment {
            if !packet::udp_checksum_ok(p, &pkt) {
                return;
            }
            self.udp_input(&pkt, &p[pkt.payload.clone()]);
            return;
        }
        {
            let mut st = self.inner.lock();
            if pkt.is_tcp_syn() && st.promiscuous && !st.listen_for(pkt.src, pkt.dst) {
                return;
            }
            if st.dev.rx.len() >= RX_QUEUE {
                return;
            }
            st.dev.rx.push_back(p.to_vec());
        }
        self.inner.wake.notify_one();
    }

    fn udp_input(&self, pkt: &packet::Packet, data: &[u8]) {
        if let Some(h) = &self.inner.udp_in {
            h.datagram(pkt.src, pkt.dst, data);
            return;
        }
        let st = self.inner.lock();
        let ours = match pkt.dst.ip() {
            IpAddr::V4(a) => st.v4 == Some(a),
            IpAddr::V6(a) => st.v6 == Some(a),
        };
        if let (true, Some(tx)) = (ours, st.udp_ports.get(&pkt.dst.port())) {
            let _ = tx.try_send((pkt.src, data.to_vec()));
        }
    }

    /// Opens a TCP connection to `dst` from the stack's address of its family.
    pub async fn connect(&self, dst: SocketAddr) -> std::io::Result<TcpFlow> {
        let handle = {
            let mut st = self.inner.lock();
            let src: IpAddr = match dst.ip() {
                IpAddr::V4(_) => st.v4.map(IpAddr::V4),
                IpAddr::V6(_) => st.v6.map(IpAddr::V6),
            }
            .ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::AddrNotAvailable,
                    format!("the tunnel has no address of {dst}'s family"),
                )
            })?;
            if st.conns.len() >= MAX_FLOWS {
                return Err(std::io::Error::other("too many connections in the tunnel"));
            }
            let port = st.free_port()?;
            let mut s = new_socket();
            let st = &mut *st;
            s.connect(
                st.iface.context(),
                (IpAddress::from(dst.ip()), dst.port()),
                (IpAddress::from(src), port),
            )
            .map_err(|e| std::io::Error::other(format!("connect {dst}: {e}")))?;
            let h = st.sockets.add(s);
            st.tcp_ports.insert(port);
            st.conns.insert((dst, SocketAddr::new(src, port)), h);
            h
        };
        self.inner.wake.notify_one();
        let flow = TcpFlow::new(self.inner.clone(), handle);
        match tokio::time::timeout(CONNECT_TIMEOUT, flow.established()).await {
            Ok(r) => r.map(|_| flow),
            Err(_) => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer from {dst} through the tunnel"),
            )),
        }
    }

    /// A UDP socket on a free port of the stack's addresses.
    pub fn udp(&self) -> std::io::Result<UdpFlow> {
        let (tx, rx) = mpsc::channel(UDP_QUEUE);
        let mut st = self.inner.lock();
        let port = st.free_port()?;
        st.udp_ports.insert(port, tx);
        let (v4, v6) = (st.v4, st.v6);
        drop(st);
        Ok(UdpFlow::new(self.inner.clone(), port, v4, v6, rx))
    }

    /// Writes a UDP datagram into the tunnel (a promiscuous stack's reply: from any address).
    pub async fn send_udp(&self, src: SocketAddr, dst: SocketAddr, data: &[u8]) {
        self.inner.send_udp(src, dst, data).await
    }

    /// TCP connections open now.
    pub fn connections(&self) -> usize {
        self.inner.lock().conns.len()
    }

    /// A handle that does not keep the stack running (for what the stack itself holds).
    pub fn downgrade(&self) -> WeakStack {
        WeakStack(Arc::downgrade(&self.inner))
    }
}

/// A [`Stack`] that may have stopped.
#[derive(Clone)]
pub struct WeakStack(Weak<Inner>);

impl WeakStack {
    pub fn upgrade(&self) -> Option<Stack> {
        self.0.upgrade().map(|inner| Stack { inner })
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn send_udp(&self, src: SocketAddr, dst: SocketAddr, data: &[u8]) {
        if let Some(p) = packet::udp_packet(src, dst, data) {
            let _ = self.out.send(p).await;
        }
    }
}

fn new_socket() -> stcp::Socket<'static> {
    let mut s = stcp::Socket::new(
        stcp::SocketBuffer::new(vec![0; TCP_BUFFER]),
        stcp::SocketBuffer::new(vec![0; TCP_BUFFER]),
    );
    s.set_nagle_enabled(false);
    s.set_congestion_control(stcp::CongestionControl::Cubic);
    s.set_timeout(Some(engine_duration(Duration::from_secs(120))));
    // smoltcp's 10 ms delayed ACK, in real time.
    s.set_ack_delay(Some(engine_duration(Duration::from_millis(10))));
    s
}

impl State {
    fn free_port(&mut self) -> std::io::Result<u16> {
        for _ in 0..28232 {
            let p = self.next_port;
            self.next_port = if p >= 60999 { 32768 } else { p + 1 };
            if !self.tcp_ports.contains(&p) && !self.udp_ports.contains_key(&p) {
                return Ok(p);
            }
        }
        Err(std::io::Error::new(
            std::io::ErrorKind::AddrInUse,
            "no free port in the tunnel",
        ))
    }

    /// A listener for a SYN from `src` to `dst`, unless one is there; false when the stack is
    /// full (the SYN is dropped).
    fn listen_for(&mut self, src: SocketAddr, dst: SocketAddr) -> bool {
        if self.conns.contains_key(&(src, dst)) || self.pending.contains_key(&(src, dst)) {
            return true;
        }
        if self.conns.len() + self.pending.len() >= MAX_FLOWS {
            tracing::debug!("netstack: full, SYN {src} -> {dst} dropped");
            return false;
        }
        let mut s = new_socket();
        let ep = IpListenEndpoint {
            addr: Some(IpAddress::from(dst.ip())),
            port: dst.port(),
        };
        if s.listen(ep).is_err() {
            return false;
        }
        let h = self.sockets.add(s);
        self.pending
            .insert((src, dst), (h, std::time::Instant::now()));
        true
    }

    /// After a poll: listeners a SYN reached become flows; closed flows go.
    fn after_poll(&mut self, inner: &Arc<Inner>, accepted: &mut Vec<TcpFlow>) {
        let now = std::time::Instant::now();
        let sockets = &mut self.sockets;
        let conns = &mut self.conns;
        self.pending.retain(|_, (h, since)| {
            let s = sockets.get_mut::<stcp::Socket>(*h);
            if s.state() == stcp::State::Listen {
                if now.duration_since(*since) > PENDING {
                    sockets.remove(*h);
                    return false;
                }
                return true;
            }
            match (s.remote_endpoint(), s.local_endpoint()) {
                (Some(r), Some(l)) if inner.accept.is_some() => {
                    let ends = (to_socket(r), to_socket(l));
                    conns.insert(ends, *h);
                    accepted.push(TcpFlow::with_ends(
                        inner.clone(),
                        *h,
                        (Some(ends.0), Some(ends.1)),
                    ));
                }
                _ => {
                    sockets.remove(*h);
                }
            }
            false
        });
        let mut i = 0;
        while i < self.dropped.len() {
            let (h, since) = self.dropped[i];
            let s = self.sockets.get_mut::<stcp::Socket>(h);
            let state = s.state();
            if matches!(state, stcp::State::Closed | stcp::State::TimeWait) {
                let key = (s.remote_endpoint(), s.local_endpoint());
                self.sockets.remove(h);
                self.dropped.swap_remove(i);
                self.conns.retain(|_, v| *v != h);
                if let (_, Some(l)) = key {
                    self.tcp_ports.remove(&l.port);
                }
                continue;
            }
            if now.duration_since(since) > LINGER {
                s.abort();
            }
            i += 1;
        }
    }
}

/// The stack's task: runs the TCP engine whenever a packet, a flow or a timer asks.
async fn run(inner: Weak<Inner>) {
    let Some(notify) = inner.upgrade().map(|i| i.wake.clone()) else {
        return;
    };
    let mut tx = Vec::new();
    let mut accepted = Vec::new();
    loop {
        let Some(i) = inner.upgrade() else { return };
        let delay = {
            let mut st = i.lock();
            let st = &mut *st;
            let now = smol_now(st.epoch);
            st.iface.poll(now, &mut st.dev, &mut st.sockets);
            std::mem::swap(&mut tx, &mut st.dev.tx);
            st.after_poll(&i, &mut accepted);
            st.iface
                .poll_delay(smol_now(st.epoch), &st.sockets)
                .map(real_duration)
        };
        for p in tx.drain(..) {
            if i.out.send(p).await.is_err() {
                return;
            }
        }
        if let Some(a) = &i.accept {
            for f in accepted.drain(..) {
                if a.try_send(f).is_err() {
                    tracing::debug!("netstack: accept queue full, connection reset");
                }
            }
        }
        // Stop once only this task holds the stack (no clone, no flow).
        if Arc::strong_count(&i) == 1 {
            return;
        }
        let wake = notify.notified();
        drop(i);
        match delay {
            Some(d) if d.is_zero() => tokio::task::yield_now().await,
            Some(d) => {
                let _ = tokio::time::timeout(d, wake).await;
            }
            None => {
                let _ = tokio::time::timeout(Duration::from_secs(1), wake).await;
            }
        }
    }
}
