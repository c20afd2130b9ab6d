//! One stream session of a mux connection as a [`Stream`]: reads give the data of the peer's
//! frames, writes leave as frames of at most 8 KiB (the client's first one a New frame). Mux.Cool
//! has no half-close: an End either way ends the session both ways, as in Xray.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use crate::proxy::first_payload::FirstPayloadWait;
use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc::{self, error::SendError, OwnedPermit};

use super::frame::{self, Meta, MAX_STREAM_DATA};
use super::link::{Inbox, Link, STREAM_INBOX};
use crate::common::{Destination, Network};
use crate::transport::Stream;

/// How long a client session waits for its first data before its New frame leaves alone (as
/// Xray's `writeFirstPayload`).
pub const FIRST_DATA_WAIT: Duration = Duration::from_millis(100);

type Reserve = Pin<Box<dyn Future<Output = Result<OwnedPermit<Bytes>, SendError<()>>> + Send>>;

/// A place in the link's frame queue, reserved from poll functions.
pub struct FrameTx {
    tx: mpsc::Sender<Bytes>,
    permit: Option<OwnedPermit<Bytes>>,
    reserving: Option<Reserve>,
}

impl FrameTx {
    pub fn new(tx: mpsc::Sender<Bytes>) -> Self {
        FrameTx {
            tx,
            permit: None,
            reserving: None,
        }
    }

    /// Ready when one frame may be sent; an error once the writer is gone.
    pub fn poll_reserve(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.permit.is_some() {
            return Poll::Ready(Ok(()));
        }
        let tx = &self.tx;
        let fut = self
            .reserving
            .get_or_insert_with(|| Box::pin(tx.clone().reserve_owned()));
        let r = ready!(fut.as_mut().poll(cx));
        self.reserving = None;
        match r {
            Ok(p) => {
                self.permit = Some(p);
                Poll::Ready(Ok(()))
            }
            Err(_) => Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
        }
    }

    /// Sends a frame into the place [`Self::poll_reserve`] got.
    pub fn send(&mut self, frame: Bytes) {
        if let Some(p) = self.permit.take() {
            p.send(frame);
        }
    }
}

/// A stream session.
pub struct MuxStream {
    link: Arc<Link>,
    id: u16,
    gen: u64,
    rx: mpsc::Receiver<Bytes>,
    pending: Bytes,
    out: FrameTx,
    /// Client: the New frame's metadata, until it has gone.
    opening: Option<Meta>,
    wait: FirstPayloadWait,
    /// Our End went out (or the session never opened): reads end, writes fail.
    ended: bool,
}

impl MuxStream {
    pub(super) fn new(
        link: Arc<Link>,
        id: u16,
        gen: u64,
        rx: mpsc::Receiver<Bytes>,
        opening: Option<Meta>,
    ) -> Self {
        let out = FrameTx::new(link.sender());
        MuxStream {
            link,
            id,
            gen,
            rx,
            pending: Bytes::new(),
            out,
            opening,
            wait: FirstPayloadWait::new(FIRST_DATA_WAIT),
            ended: false,
        }
    }

    pub fn id(&self) -> u16 {
        self.id
    }

    fn frame(meta: &Meta, data: Option<&[u8]>) -> Bytes {
        let mut b = BytesMut::with_capacity(frame::encoded_len(meta, data.map(<[u8]>::len)));
        frame::encode(meta, data, &mut b);
        b.freeze()
    }

    /// Client: sends the New frame alone once the first data took too long. Until then the
    /// reader waits on the wait and (by reading on) on the inbox, so a write that sends the
    /// New frame first and ends the wait cannot leave it without a wake-up.
    fn poll_open(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.opening.is_none() {
            return Poll::Ready(Ok(()));
        }
        if self.wait.poll_over(cx).is_pending() {
            return Poll::Ready(Ok(()));
        }
        ready!(self.out.poll_reserve(cx))?;
        if let Some(m) = self.opening.take() {
            self.out.send(Self::frame(&m, None));
        }
        Poll::Ready(Ok(()))
    }
}

/// The link's stream sessions (made here, beside the type; the link only keeps their inboxes).
impl Link {
    /// Registers a stream session `id` (server side: the peer opened it).
    pub fn add_stream(self: &Arc<Self>, id: u16) -> Option<MuxStream> {
        let (tx, rx) = mpsc::channel(STREAM_INBOX);
        let gen = self.insert(id, Inbox::Stream(tx))?;
        Some(MuxStream::new(self.clone(), id, gen, rx, None))
    }

    /// Client: opens a stream session to `dest` if one more fits; its New frame leaves with
    /// the first data.
    pub fn open_stream(
        self: &Arc<Self>,
        dest: &Destination,
        max_active: usize,
    ) -> Option<MuxStream> {
        self.open_stream_from(dest, max_active, None)
    }

    /// [`Link::open_stream`] with the session's origin in its New frame (a VLESS Reverse
    /// portal).
    pub fn open_stream_from(
        self: &Arc<Self>,
        dest: &Destination,
        max_active: usize,
        origin: Option<Box<super::frame::Origin>>,
    ) -> Option<MuxStream> {
        let (tx, rx) = mpsc::channel(STREAM_INBOX);
        let (id, gen) = self.allocate(max_active, Inbox::Stream(tx))?;
        let mut opening = Meta::new_session(id, Network::Tcp, dest.clone());
        opening.origin = origin;
        Some(MuxStream::new(self.clone(), id, gen, rx, Some(opening)))
    }
}

impl AsyncRead for MuxStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = &mut *self;
        if me.ended {
            return Poll::Ready(Ok(()));
        }
        ready!(me.poll_open(cx))?;
        loop {
            if !me.pending.is_empty() {
                let n = me.pending.len().min(buf.remaining());
                buf.put_slice(&me.pending.split_to(n));
                return Poll::Ready(Ok(()));
            }
            match ready!(me.rx.poll_recv(cx)) {
                Some(b) => me.pending = b,
                None => return Poll::Ready(Ok(())),
            }
        }
    }
}

impl AsyncWrite for MuxStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = &mut *self;
        if me.ended || me.rx.is_closed() {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "mux session ended",
            )));
        }
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        ready!(me.out.poll_reserve(cx))?;
        let n = data.len().min(MAX_STREAM_DATA);
        let meta = me.opening.take().unwrap_or_else(|| Meta::keep(me.id, None));
        me.wait.end();
        me.out.send(Self::frame(&meta, Some(&data[..n])));
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = &mut *self;
        if me.ended {
            return Poll::Ready(Ok(()));
        }
        if me.opening.is_none() {
            ready!(me.out.poll_reserve(cx))?;
            me.out.send(Self::frame(&Meta::end(me.id, false), None));
        }
        me.ended = true;
        me.link.remove(me.id, me.gen);
        Poll::Ready(Ok(()))
    }
}

impl Drop for MuxStream {
    fn drop(&mut self) {
        if !self.ended && self.opening.is_none() {
            // Ended without a shutdown: the relay failed or the peer's End came first.
            self.link
                .send_later(Self::frame(&Meta::end(self.id, true), None));
        }
        self.link.remove(self.id, self.gen);
    }
}

impl Stream for MuxStream {}
