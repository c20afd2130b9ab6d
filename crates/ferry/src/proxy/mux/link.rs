//! One Mux.Cool connection as both sides see it: the table of its open sessions, the queue of
//! frames to its single writer, and the frame reader. The server (`app/mux.rs`) and the
//! client ([`super::client`]) differ only in what a New frame does.

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, watch};

use super::frame::{self, Meta, Status};
use crate::common::Destination;

/// Frames queued for the writer (shared by every session: senders wait their turn).
const OUT_FRAMES: usize = 64;
/// Frames of one stream session waiting for it to read them. When full the reader waits, as
/// Xray's (512 KiB per session with its 8 KiB frames; here 32 frames of at most 8 KiB from
/// Xray, 64 KiB from anyone).
pub(super) const STREAM_INBOX: usize = 32;
/// Datagrams of one packet session waiting; more are dropped (UDP).
pub(super) const PACKET_INBOX: usize = 64;
/// The writer sends up to this much per write.
const WRITE_BATCH: usize = 64 * 1024;

/// A datagram received for a packet session, with its own address when the frame had one.
pub type Datagram = (Bytes, Option<Destination>);

/// Where the data of a session's frames goes.
pub(super) enum Inbox {
    Stream(mpsc::Sender<Bytes>),
    Packets(mpsc::Sender<Datagram>),
}

struct Entry {
    gen: u64,
    inbox: Inbox,
}

#[derive(Default)]
struct Table {
    map: HashMap<u16, Entry>,
    /// Distinguishes a session from a later one with the same id.
    gen: u64,
    /// Sessions opened so far (the client's ids are 1, 2, ...).
    opened: u32,
    closed: bool,
}

/// The shared state of one mux connection.
pub struct Link {
    table: Mutex<Table>,
    out: mpsc::Sender<Bytes>,
    stop: watch::Sender<bool>,
    /// Client: the connection closes once this many sessions were opened and all ended.
    limit: Option<u32>,
}

impl Link {
    /// A link and the receiving end of its frame queue (for [`write_frames`]).
    pub fn new(limit: Option<u32>) -> (Arc<Link>, mpsc::Receiver<Bytes>) {
        let (out, rx) = mpsc::channel(OUT_FRAMES);
        let (stop, _) = watch::channel(false);
        let link = Link {
            table: Mutex::new(Table::default()),
            out,
            stop,
            limit,
        };
        (Arc::new(link), rx)
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A sender of frames to the writer.
    pub fn sender(&self) -> mpsc::Sender<Bytes> {
        self.out.clone()
    }

    /// Resolves when the link is told to stop (either side's task ended, or the client closed
    /// it): for the tasks to select on.
    pub fn stopped(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    /// Stops both tasks and ends every session.
    pub fn shutdown(&self) {
        let sessions = {
            let mut t = self.table();
            t.closed = true;
            std::mem::take(&mut t.map)
        };
        drop(sessions);
        self.stop.send_replace(true);
    }

    pub fn is_closed(&self) -> bool {
        self.table().closed
    }

    /// Open sessions.
    pub fn active(&self) -> usize {
        self.table().map.len()
    }

    /// Sessions opened since the start.
    pub fn opened(&self) -> u32 {
        self.table().opened
    }

    pub(super) fn insert(&self, id: u16, inbox: Inbox) -> Option<u64> {
        let mut t = self.table();
        if t.closed {
            return None;
        }
        t.gen += 1;
        t.opened = t.opened.saturating_add(1);
        let gen = t.gen;
        // A New for an id in use replaces it (as Xray): the old session sees its end.
        t.map.insert(id, Entry { gen, inbox });
        Some(gen)
    }

    /// Client: whether one more session fits (`max_active` 0 = no bound).
    pub fn has_room(&self, max_active: usize) -> bool {
        Self::room(&self.table(), max_active, self.limit)
    }

    fn room(t: &Table, max_active: usize, limit: Option<u32>) -> bool {
        !t.closed
            && (max_active == 0 || t.map.len() < max_active)
            && limit.is_none_or(|l| t.opened < l)
            && t.opened < u16::MAX as u32
    }

    /// Client: registers the next session id, if one more session fits.
    pub(super) fn allocate(&self, max_active: usize, inbox: Inbox) -> Option<(u16, u64)> {
        let mut t = self.table();
        if !Self::room(&t, max_active, self.limit) {
            return None;
        }
        let id = t.opened as u16 + 1;
        t.gen += 1;
        t.opened += 1;
        let gen = t.gen;
        t.map.insert(id, Entry { gen, inbox });
        Some((id, gen))
    }

    /// Forgets session `id` if it is still the one of generation `gen`; a client link with
    /// nothing left to do closes.
    pub fn remove(&self, id: u16, gen: u64) {
        let close = {
            let mut t = self.table();
            if t.map.get(&id).is_some_and(|e| e.gen == gen) {
                t.map.remove(&id);
            }
            t.map.is_empty() && self.limit.is_some_and(|l| t.opened >= l)
        };
        if close {
            self.shutdown();
        }
    }

    /// Delivers the data of a Keep frame to its session. `false`: no such session (the caller
    /// answers with End, as Xray). Waits while a stream session's inbox is full.
    pub async fn deliver(&self, meta: &Meta, data: Bytes) -> bool {
        enum To {
            S(mpsc::Sender<Bytes>),
            P(mpsc::Sender<Datagram>),
        }
        let to = match self.table().map.get(&meta.id).map(|e| &e.inbox) {
            None => return false,
            Some(Inbox::Stream(tx)) => To::S(tx.clone()),
            Some(Inbox::Packets(tx)) => To::P(tx.clone()),
        };
        match to {
            // A session that stopped reading is gone; its data goes nowhere.
            To::S(tx) => {
                let _ = tx.send(data).await;
            }
            To::P(tx) => {
                if data.is_empty() {
                    return true;
                }
                let addr = meta.target.as_ref().map(|(_, d)| d.clone());
                if tx.try_send((data, addr)).is_err() {
                    tracing::debug!("mux session {}: inbox full, datagram dropped", meta.id);
                }
            }
        }
        true
    }

    /// The peer ended session `id`: its reader sees the end of its data, its writes fail.
    pub fn end(&self, id: u16) {
        let e = self.table().map.remove(&id);
        drop(e);
    }

    /// Queues a frame without waiting (End frames of dropped sessions); when the queue is full
    /// a task sends it.
    pub fn send_later(&self, frame: Bytes) {
        if let Err(mpsc::error::TrySendError::Full(f)) = self.out.try_send(frame) {
            let out = self.out.clone();
            if let Ok(h) = tokio::runtime::Handle::try_current() {
                h.spawn(async move {
                    let _ = out.send(f).await;
                });
            }
        }
    }

    /// Handles the frames every side treats alike: Keep, End, KeepAlive. Returns the New
    /// frames (and their data) for the caller.
    pub async fn handle(&self, meta: Meta, data: Bytes) -> Option<(Meta, Bytes)> {
        match meta.status {
            Status::New => return Some((meta, data)),
            Status::Keep if meta.has_data() => {
                if !self.deliver(&meta, data).await {
                    let mut b = BytesMut::new();
                    frame::encode(&Meta::end(meta.id, false), None, &mut b);
                    self.send_later(b.freeze());
                }
            }
            Status::Keep | Status::KeepAlive => {}
            Status::End => self.end(meta.id),
        }
        None
    }
}

/// Reads whole frames off a stream.
pub struct FrameReader<R> {
    r: R,
    buf: BytesMut,
    reverse: bool,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub fn new(r: R, first: &[u8]) -> Self {
        let mut buf = BytesMut::with_capacity(16 * 1024);
        buf.extend_from_slice(first);
        FrameReader {
            r,
            buf,
            reverse: false,
        }
    }

    /// Reads the frames of a reverse mux (a VLESS Reverse bridge reading its portal's New
    /// frames with their origin).
    pub fn reverse(mut self) -> Self {
        self.reverse = true;
        self
    }

    /// The next frame and its data; `None` at a clean end (between frames). A malformed frame
    /// is an `InvalidData` error. Cancel-safe.
    pub async fn next(&mut self) -> io::Result<Option<(Meta, Bytes)>> {
        loop {
            match frame::decode_in(&self.buf, self.reverse) {
                Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
                Ok(Some(f)) => {
                    let whole = self.buf.split_to(f.len).freeze();
                    return Ok(Some((f.meta, whole.slice(f.data))));
                }
                Ok(None) => {
                    self.buf.reserve(16 * 1024);
                    if self.r.read_buf(&mut self.buf).await? == 0 {
                        if self.buf.is_empty() {
                            return Ok(None);
                        }
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "connection closed inside a frame",
                        ));
                    }
                }
            }
        }
    }
}

/// Writes queued frames, several per write, until the queue ends or the link stops (then
/// what is queued at that moment goes out first) and shuts the stream down. A connection that
/// never carried a frame is closed without a byte (as Xray, whose response header leaves with
/// the first frame).
pub async fn write_frames<W: AsyncWrite + Unpin>(
    mut w: W,
    mut rx: mpsc::Receiver<Bytes>,
    mut stop: watch::Receiver<bool>,
) -> io::Result<()> {
    let mut batch = BytesMut::with_capacity(WRITE_BATCH);
    let mut wrote = false;
    while !*stop.borrow_and_update() {
        tokio::select! {
            f = rx.recv() => match f {
                Some(f) => batch.extend_from_slice(&f),
                None => break,
            },
            _ = stop.changed() => break,
        }
        while batch.len() < WRITE_BATCH {
            match rx.try_recv() {
                Ok(f) => batch.extend_from_slice(&f),
                Err(_) => break,
            }
        }
        w.write_all(&batch).await?;
        wrote = true;
        batch.clear();
        if rx.is_empty() {
            w.flush().await?;
        }
    }
    rx.close();
    while let Ok(f) = rx.try_recv() {
        batch.extend_from_slice(&f);
    }
    if batch.is_empty() && !wrote {
        return Ok(());
    }
    w.write_all(&batch).await?;
    w.shutdown().await
}
