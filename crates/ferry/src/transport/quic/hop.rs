//! Port hopping on the client (`finalmask.quicParams.udpHop`): the socket under QUIC sends to
//! the server's address on one port of a range and moves to a fresh local socket and another
//! random port every interval; the socket it left keeps receiving stragglers until the next
//! move. QUIC sees one fixed server address all along (replies from any port are reported as
//! coming from it), so the connection never notices. The server side is a port range
//! forwarded to one port (nftables/iptables REDIRECT); its QUIC sees the client move.

use std::fmt;
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use quinn::udp::{RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, Runtime, TokioRuntime, UdpPoller};

/// `udpHop`: the server's ports and how long to stay on one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UdpHop {
    /// Inclusive port ranges.
    pub ports: Vec<(u16, u16)>,
    /// Seconds on one port: a random time in `[min, max]`.
    pub interval: (Duration, Duration),
}

impl UdpHop {
    /// A random port of the ranges.
    pub fn pick(&self) -> u16 {
        let total: u64 = self
            .ports
            .iter()
            .map(|(a, b)| u64::from(b.saturating_sub(*a)) + 1)
            .sum();
        let mut n = random_u64() % total.max(1);
        for (a, b) in &self.ports {
            let len = u64::from(b.saturating_sub(*a)) + 1;
            if n < len {
                return a + n as u16;
            }
            n -= len;
        }
        self.ports.first().map(|p| p.0).unwrap_or(443)
    }

    /// How long to stay on the next port.
    pub fn next_interval(&self) -> Duration {
        let (lo, hi) = self.interval;
        let span = hi.saturating_sub(lo).as_millis() as u64;
        lo + Duration::from_millis(random_u64() % (span + 1))
    }
}

fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    crate::common::rand::fill(&mut b);
    u64::from_le_bytes(b)
}

struct State {
    current: Arc<dyn AsyncUdpSocket>,
    previous: Option<Arc<dyn AsyncUdpSocket>>,
    port: u16,
    generation: u64,
    /// The endpoint's receive waker: a hop wakes it, so that the new socket gets polled
    /// (it had no waker of its own registered yet).
    reader: Option<std::task::Waker>,
}

/// The hopping socket: `server` is the address QUIC dials and sees.
pub struct Hopping {
    server: SocketAddr,
    state: Mutex<State>,
}

impl fmt::Debug for Hopping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hopping")
            .field("server", &self.server)
            .finish()
    }
}

fn fresh(server: SocketAddr) -> io::Result<Arc<dyn AsyncUdpSocket>> {
    let s = super::socket::bind_for(server)?;
    s.set_nonblocking(true)?;
    TokioRuntime.wrap_udp_socket(s)
}

impl Hopping {
    /// A hopping socket to `server`'s host, starting on `port`.
    pub fn new(server: SocketAddr, port: u16) -> io::Result<Arc<Hopping>> {
        Ok(Arc::new(Hopping {
            server,
            state: Mutex::new(State {
                current: fresh(server)?,
                previous: None,
                port,
                generation: 0,
                reader: None,
            }),
        }))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Moves to a fresh socket and `port`.
    pub fn hop(&self, port: u16) -> io::Result<()> {
        let next = fresh(self.server)?;
        let mut st = self.state();
        st.previous = Some(std::mem::replace(&mut st.current, next));
        st.port = port;
        st.generation += 1;
        if let Some(w) = st.reader.take() {
            w.wake();
        }
        Ok(())
    }

    /// Hops every interval of `hop` while the socket is in use.
    pub fn run(me: Weak<Hopping>, hop: UdpHop) {
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(hop.next_interval()).await;
                let Some(h) = me.upgrade() else {
                    return;
                };
                let port = hop.pick();
                match h.hop(port) {
                    Ok(()) => tracing::debug!("hysteria: hopped to {}:{port}", h.server.ip()),
                    Err(e) => tracing::warn!("hysteria: port hop failed: {e}"),
                }
            }
        });
    }
}

/// Waits for the current socket to be writable, following hops.
struct HopPoller {
    hop: Arc<Hopping>,
    generation: u64,
    inner: Pin<Box<dyn UdpPoller>>,
}

impl fmt::Debug for HopPoller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("HopPoller")
    }
}

impl UdpPoller for HopPoller {
    fn poll_writable(mut self: Pin<&mut Self>, cx: &mut Context) -> Poll<io::Result<()>> {
        let (generation, current) = {
            let st = self.hop.state();
            (st.generation, st.current.clone())
        };
        if generation != self.generation {
            self.generation = generation;
            self.inner = current.create_io_poller();
        }
        self.inner.as_mut().poll_writable(cx)
    }
}

impl AsyncUdpSocket for Hopping {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        let (generation, current) = {
            let st = self.state();
            (st.generation, st.current.clone())
        };
        Box::pin(HopPoller {
            hop: self,
            generation,
            inner: current.create_io_poller(),
        })
    }

    fn try_send(&self, t: &Transmit) -> io::Result<()> {
        let (current, port) = {
            let st = self.state();
            (st.current.clone(), st.port)
        };
        let destination = match t.destination == self.server {
            true => SocketAddr::new(self.server.ip(), port),
            false => t.destination,
        };
        current.try_send(&Transmit {
            destination,
            ecn: t.ecn,
            contents: t.contents,
            segment_size: t.segment_size,
            src_ip: t.src_ip,
        })
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        let (current, previous) = {
            let mut st = self.state();
            if !st.reader.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                st.reader = Some(cx.waker().clone());
            }
            (st.current.clone(), st.previous.clone())
        };
        let mut got = current.poll_recv(cx, bufs, meta);
        if got.is_pending() {
            if let Some(p) = previous {
                got = p.poll_recv(cx, bufs, meta);
            }
        }
        if let Poll::Ready(Ok(n)) = &got {
            for m in &mut meta[..*n] {
                // Replies from any port of the server are the server's.
                if m.addr.ip() == self.server.ip() {
                    m.addr = self.server;
                }
            }
        }
        got
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.state().current.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        self.state().current.max_transmit_segments()
    }

    fn max_receive_segments(&self) -> usize {
        self.state().current.max_receive_segments()
    }

    fn may_fragment(&self) -> bool {
        self.state().current.may_fragment()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_picked_from_every_range_and_intervals_within_bounds() {
        let h = UdpHop {
            ports: vec![(20000, 20002), (443, 443)],
            interval: (Duration::from_secs(5), Duration::from_secs(10)),
        };
        let mut seen = std::collections::HashSet::new();
        for _ in 0..400 {
            let p = h.pick();
            assert!((20000..=20002).contains(&p) || p == 443, "{p}");
            seen.insert(p);
            let i = h.next_interval();
            assert!(i >= Duration::from_secs(5) && i <= Duration::from_secs(10));
        }
        assert_eq!(seen.len(), 4);
    }
}
