//! The UDP socket under a QUIC endpoint, with finalmask's UDP masks applied to every datagram
//! (Salamander, ...). Without masks the endpoint gets quinn's own socket (GSO/GRO kept).

use std::fmt;
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use quinn::udp::{RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, Runtime, TokioRuntime, UdpPoller};

use crate::transport::udpmask::UdpMasks;

/// A fresh UDP socket on any local address of `server`'s family.
pub fn bind_for(server: SocketAddr) -> io::Result<std::net::UdpSocket> {
    let any: SocketAddr = match server {
        SocketAddr::V4(_) => (std::net::Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let s = std::net::UdpSocket::bind(any)?;
    crate::transport::sockopt::mark_own(&socket2::SockRef::from(&s))?;
    Ok(s)
}

/// `socket` as a QUIC endpoint's socket, masked by `masks`.
pub fn wrap(socket: std::net::UdpSocket, masks: &UdpMasks) -> io::Result<Arc<dyn AsyncUdpSocket>> {
    socket.set_nonblocking(true)?;
    let inner = TokioRuntime.wrap_udp_socket(socket)?;
    Ok(wrap_socket(inner, masks))
}

/// A QUIC socket (quinn's, or a hopping one) under `masks`.
pub fn wrap_socket(inner: Arc<dyn AsyncUdpSocket>, masks: &UdpMasks) -> Arc<dyn AsyncUdpSocket> {
    if masks.is_empty() {
        return inner;
    }
    Arc::new(Masked {
        inner,
        masks: masks.clone(),
        scratch: Mutex::new(Vec::with_capacity(2048)),
    })
}

/// A socket whose datagrams go through masks, each masked on its own (a GSO batch stays one
/// send), segments of a coalesced receive opened one by one.
struct Masked {
    inner: Arc<dyn AsyncUdpSocket>,
    masks: UdpMasks,
    scratch: Mutex<Vec<u8>>,
}

impl fmt::Debug for Masked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Masked")
            .field("masks", &self.masks)
            .finish()
    }
}

impl AsyncUdpSocket for Masked {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        self.inner.clone().create_io_poller()
    }

    fn try_send(&self, t: &Transmit) -> io::Result<()> {
        let mut out = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        let seg = t.segment_size.unwrap_or(t.contents.len()).max(1);
        if !self.masks.fixed_overhead() {
            for datagram in t.contents.chunks(seg) {
                self.masks.encode(datagram, &mut out);
                self.inner.try_send(&Transmit {
                    destination: t.destination,
                    ecn: t.ecn,
                    contents: &out,
                    segment_size: None,
                    src_ip: t.src_ip,
                })?;
            }
            return Ok(());
        }
        // Each datagram masked on its own; a batch stays one GSO send, every datagram but the
        // last growing by the same overhead.
        out.clear();
        for datagram in t.contents.chunks(seg) {
            self.masks.append(datagram, &mut out);
        }
        let segment_size = t
            .segment_size
            .filter(|_| t.contents.len() > seg)
            .map(|s| s + self.masks.overhead());
        self.inner.try_send(&Transmit {
            destination: t.destination,
            ecn: t.ecn,
            contents: &out,
            segment_size,
            src_ip: t.src_ip,
        })
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        loop {
            let n = std::task::ready!(self.inner.poll_recv(cx, bufs, meta))?;
            let mut kept = 0;
            for i in 0..n {
                if let Some(m) = open(&self.masks, &mut bufs[i], meta[i]) {
                    if kept != i {
                        let (a, b) = bufs.split_at_mut(i);
                        a[kept][..m.len].copy_from_slice(&b[0][..m.len]);
                    }
                    meta[kept] = m;
                    kept += 1;
                }
            }
            if kept > 0 {
                return Poll::Ready(Ok(kept));
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        match self.masks.fixed_overhead() {
            true => self.inner.max_transmit_segments(),
            false => 1,
        }
    }

    fn max_receive_segments(&self) -> usize {
        self.inner.max_receive_segments()
    }

    fn may_fragment(&self) -> bool {
        self.inner.may_fragment()
    }
}

/// Opens each datagram of one receive (`stride` apart) in place, packing the opened ones
/// `stride - overhead` apart; datagrams a mask refuses are dropped (a refused one before the
/// last ends the batch there, so the stride holds). `None` when nothing is left.
fn open(masks: &UdpMasks, buf: &mut [u8], mut m: RecvMeta) -> Option<RecvMeta> {
    let stride = m.stride.max(1);
    let overhead = masks.overhead();
    let new_stride = stride.checked_sub(overhead).filter(|s| *s > 0);
    let mut out = 0;
    let mut at = 0;
    let mut first = true;
    while at < m.len {
        let end = (at + stride).min(m.len);
        let Some(r) = masks.decode(&mut buf[at..end]) else {
            break;
        };
        let len = r.len();
        // Only the last datagram of a batch may be shorter than the stride.
        if !first && Some(len) != new_stride && end != m.len {
            break;
        }
        buf.copy_within(at + r.start..at + r.end, out);
        out += len;
        at = end;
        if first {
            m.stride = len;
            first = false;
        }
        if Some(len) != new_stride {
            break;
        }
    }
    if out == 0 {
        return None;
    }
    if let Some(s) = new_stride {
        if out > s {
            m.stride = s;
        }
    }
    m.len = out;
    Some(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::udpmask::Salamander;

    fn meta(len: usize, stride: usize) -> RecvMeta {
        RecvMeta {
            addr: "127.0.0.1:1".parse().unwrap(),
            len,
            stride,
            ecn: None,
            dst_ip: None,
        }
    }

    #[test]
    fn opens_each_segment_of_a_coalesced_receive() {
        let masks = UdpMasks(vec![Arc::new(Salamander::new(b"pass"))]);
        let mut wire = Vec::new();
        let mut buf = Vec::new();
        for (i, len) in [100usize, 100, 37].iter().enumerate() {
            masks.encode(&vec![i as u8 + 1; *len], &mut wire);
            buf.extend_from_slice(&wire);
        }
        let m = open(&masks, &mut buf, meta(108 * 2 + 45, 108)).unwrap();
        assert_eq!((m.len, m.stride), (237, 100));
        assert!(buf[..100].iter().all(|b| *b == 1));
        assert!(buf[100..200].iter().all(|b| *b == 2));
        assert!(buf[200..237].iter().all(|b| *b == 3));
        // A single datagram, and one too short to be masked.
        masks.encode(b"one", &mut wire);
        let mut b = wire.clone();
        let n = b.len();
        let m = open(&masks, &mut b, meta(n, n)).unwrap();
        assert_eq!(&b[..m.len], b"one");
        assert!(open(&masks, &mut [0u8; 8], meta(8, 8)).is_none());
    }
}
