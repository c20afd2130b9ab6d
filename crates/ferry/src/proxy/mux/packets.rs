//! One packet session of a mux connection as a [`PacketConn`]: each datagram is one frame
//! carrying its address (XUDP: the destination on the client's frames, the source on the
//! server's replies), so one session reaches many destinations (full-cone).

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::BytesMut;
use tokio::sync::mpsc;

use super::frame::{self, Meta};
use super::link::{Datagram, Inbox, Link, PACKET_INBOX};
use crate::common::{Destination, Network};
use crate::transport::PacketConn;

/// Xray's XUDP writer drops datagrams with `len + 666 > 8192`; a client sends no larger ones.
pub const CLIENT_MAX_DATAGRAM: usize = 8192 - 666;
/// Xray reads a packet frame into an 8 KiB buffer and drops the connection beyond that: a
/// server sends no larger replies.
pub const SERVER_MAX_DATAGRAM: usize = 8192;

/// A packet session.
pub struct MuxPackets {
    link: Arc<Link>,
    id: u16,
    gen: u64,
    rx: tokio::sync::Mutex<mpsc::Receiver<Datagram>>,
    /// The session's target: where datagrams without an address of their own go / come from.
    target: Destination,
    /// Client: the New frame is still to go (with the first datagram).
    opening: Mutex<bool>,
    client: bool,
    max_send: usize,
    ended: AtomicBool,
    /// Client, reverse mux: the origin its New frame carries.
    origin: Option<Box<super::frame::Origin>>,
}

impl MuxPackets {
    pub(super) fn new(
        link: Arc<Link>,
        id: u16,
        gen: u64,
        rx: mpsc::Receiver<Datagram>,
        target: Destination,
        client: bool,
        max_send: usize,
    ) -> Self {
        MuxPackets {
            link,
            id,
            gen,
            rx: tokio::sync::Mutex::new(rx),
            target,
            opening: Mutex::new(client),
            client,
            max_send,
            ended: AtomicBool::new(false),
            origin: None,
        }
    }
}

#[async_trait]
impl PacketConn for MuxPackets {
    async fn send_to(&self, data: &[u8], dest: &Destination) -> io::Result<()> {
        if self.ended.load(Ordering::Relaxed) {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        if data.is_empty() || data.len() > self.max_send {
            tracing::debug!(
                "mux session {}: {}-byte datagram not sent (as Xray)",
                self.id,
                data.len()
            );
            return Ok(());
        }
        let out = self.link.sender();
        let permit = out
            .reserve()
            .await
            .map_err(|_| io::Error::from(io::ErrorKind::BrokenPipe))?;
        let meta = {
            let mut opening = self.opening.lock().unwrap_or_else(|e| e.into_inner());
            if std::mem::take(&mut *opening) {
                let mut m = Meta::new_session(self.id, Network::Udp, dest.clone());
                m.origin = self.origin.clone();
                m
            } else {
                Meta::keep(self.id, Some(dest.clone()))
            }
        };
        let mut b = BytesMut::with_capacity(frame::encoded_len(&meta, Some(data.len())));
        frame::encode(&meta, Some(data), &mut b);
        permit.send(b.freeze());
        Ok(())
    }

    async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, Destination)> {
        let mut rx = self.rx.lock().await;
        loop {
            let Some((data, addr)) = rx.recv().await else {
                self.ended.store(true, Ordering::Relaxed);
                return Err(io::ErrorKind::UnexpectedEof.into());
            };
            if data.len() > buf.len() {
                tracing::debug!("mux session {}: datagram too large, dropped", self.id);
                continue;
            }
            buf[..data.len()].copy_from_slice(&data);
            return Ok((data.len(), addr.unwrap_or_else(|| self.target.clone())));
        }
    }
}

impl Drop for MuxPackets {
    fn drop(&mut self) {
        let opened = !*self.opening.get_mut().unwrap_or_else(|e| e.into_inner());
        if opened {
            let mut b = BytesMut::new();
            frame::encode(&Meta::end(self.id, false), None, &mut b);
            self.link.send_later(b.freeze());
        }
        self.link.remove(self.id, self.gen);
    }
}

impl std::fmt::Debug for MuxPackets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MuxPackets")
            .field("id", &self.id)
            .field("target", &self.target)
            .field("client", &self.client)
            .finish()
    }
}

/// The link's packet sessions (made here, beside the type; the link only keeps their inboxes).
impl Link {
    /// Registers a packet session `id` to `target` (server side). `max_send`: larger
    /// datagrams are not sent.
    pub fn add_packets(
        self: &Arc<Self>,
        id: u16,
        target: Destination,
        max_send: usize,
    ) -> Option<MuxPackets> {
        let (tx, rx) = mpsc::channel(PACKET_INBOX);
        let gen = self.insert(id, Inbox::Packets(tx))?;
        Some(MuxPackets::new(
            self.clone(),
            id,
            gen,
            rx,
            target,
            false,
            max_send,
        ))
    }

    /// Client: opens a packet session to `dest` if one more fits; its New frame leaves with
    /// the first datagram. `max_send`: larger datagrams are not sent.
    pub fn open_packets(
        self: &Arc<Self>,
        dest: &Destination,
        max_active: usize,
        max_send: usize,
    ) -> Option<MuxPackets> {
        let (tx, rx) = mpsc::channel(PACKET_INBOX);
        let (id, gen) = self.allocate(max_active, Inbox::Packets(tx))?;
        Some(MuxPackets::new(
            self.clone(),
            id,
            gen,
            rx,
            dest.clone(),
            true,
            max_send,
        ))
    }

    /// [`Link::open_packets`] with the session's origin in its New frame (a VLESS Reverse
    /// portal).
    pub fn open_packets_from(
        self: &Arc<Self>,
        dest: &Destination,
        max_send: usize,
        origin: Option<Box<super::frame::Origin>>,
    ) -> Option<MuxPackets> {
        let mut p = self.open_packets(dest, 0, max_send)?;
        p.origin = origin;
        Some(p)
    }

    /// Client (XUDP): registers packet session 0 to `dest`, the only one of its connection.
    pub fn open_xudp(self: &Arc<Self>, dest: &Destination, max_send: usize) -> Option<MuxPackets> {
        let (tx, rx) = mpsc::channel(PACKET_INBOX);
        let gen = self.insert(0, Inbox::Packets(tx))?;
        Some(MuxPackets::new(
            self.clone(),
            0,
            gen,
            rx,
            dest.clone(),
            true,
            max_send,
        ))
    }
}
