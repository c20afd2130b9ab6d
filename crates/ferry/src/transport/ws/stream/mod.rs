//! A WebSocket connection as a byte stream: every write goes out as one binary message (as
//! Xray and v2ray send them), and the payloads of all data messages read, whatever their
//! type and fragmentation, are the stream read. Pings are answered, a close frame ends the
//! read side, and a heartbeat can ping the peer.
//!
//! Payload bytes are copied once at most: large frames are read straight into the caller's
//! buffer and unmasked there; small ones come out of a read buffer that is dropped whenever
//! the connection waits. Writes are framed into a buffer (a client must mask, so the payload
//! is copied once there) that is drained before the next frame.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll, Waker};
use std::time::Duration;

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::frame::{self, Header};
use crate::common::pool;
use crate::transport::{poll_write_all, BoxStream, ReadAhead, Stream};

/// The most payload one written frame carries.
const MAX_FRAME: usize = 256 * 1024;
/// The read buffer (headers, control frames, small frames).
const READ_BUF: usize = 16 * 1024;
/// The handshake response a client reads at most.
const MAX_RESPONSE: usize = 8192;
/// Frames at least this long are read straight into the caller's buffer.
const DIRECT: u64 = 4096;
/// Control frames (pongs, heartbeat pings) that may wait in the write buffer for a peer that
/// does not read: past the kernel's socket buffer, 16 KiB is over a hundred unanswered pings.
/// A peer that sends more pings and reads nothing is closed.
const MAX_CONTROL_BACKLOG: usize = 16 * 1024;

enum ReadState {
    Header,
    Payload {
        left: u64,
        mask: Option<[u8; 4]>,
        offset: u64,
    },
    /// A close frame came, or the peer's stream ended cleanly.
    Closed,
}

/// Builds a client's upgrade request around the early data (if it fits).
pub(super) type BuildRequest = Box<dyn FnOnce(Option<&[u8]>) -> Vec<u8> + Send>;

/// The client's handshake when it waits for the first write (early data).
pub(super) struct Pending {
    pub request: BuildRequest,
    /// The most early data the request may carry.
    pub max_early: usize,
    /// The `Sec-WebSocket-Accept` the response must carry.
    pub accept: String,
}

enum Handshake {
    Done,
    /// Client with early data: nothing sent yet.
    Waiting(Pending),
    /// The request is in the write buffer; the response is read next. `early`: how much of
    /// the first write the request carried.
    Responding {
        accept: String,
        early: usize,
    },
}

pub struct WsStream {
    inner: BoxStream,
    /// This end is the client: it masks what it writes and reads unmasked frames.
    client: bool,
    /// Bytes read and not yet consumed (frame headers, payload, the handshake response).
    rx: ReadAhead,
    state: ReadState,
    frags: frame::Fragments,
    /// Early data the server took from the upgrade request, read first.
    early: Bytes,
    wbuf: Vec<u8>,
    wpos: usize,
    /// Bytes of control frames queued since the write buffer was last empty.
    control_queued: usize,
    close_sent: bool,
    heartbeat: Option<Pin<Box<tokio::time::Interval>>>,
    handshake: Handshake,
    /// A read that waits for the client's handshake.
    read_waker: Option<Waker>,
}

impl WsStream {
    /// A connection whose handshake is done: `client` is this end's side, `rest` are bytes
    /// read past the handshake, `early` the early data a server took from the request.
    pub fn new(inner: BoxStream, client: bool, rest: Vec<u8>, early: Bytes) -> Self {
        WsStream {
            inner,
            client,
            rx: ReadAhead::with_prefill(pool::Adaptive::fixed(READ_BUF), &rest),
            state: ReadState::Header,
            frags: frame::Fragments::default(),
            early,
            wbuf: Vec::new(),
            wpos: 0,
            control_queued: 0,
            close_sent: false,
            heartbeat: None,
            handshake: Handshake::Done,
            read_waker: None,
        }
    }

    /// A client whose handshake goes out with the first write.
    pub(super) fn waiting(inner: BoxStream, pending: Pending) -> Self {
        let mut s = Self::new(inner, true, Vec::new(), Bytes::new());
        s.handshake = Handshake::Waiting(pending);
        s
    }

    /// Pings the peer every `period` (Xray's `heartbeatPeriod`).
    pub(super) fn with_heartbeat(mut self, period: Option<Duration>) -> Self {
        self.heartbeat = period.map(|p| {
            let mut i = tokio::time::interval_at(tokio::time::Instant::now() + p, p);
            i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            Box::pin(i)
        });
        self
    }

    /// Appends a whole frame to the write buffer.
    fn queue(&mut self, opcode: u8, payload: &[u8]) {
        if self.wpos == self.wbuf.len() {
            self.wbuf.clear();
            self.wpos = 0;
        }
        let mask = self.client.then(|| {
            let mut k = [0u8; 4];
            crate::common::rand::fill(&mut k);
            k
        });
        let mut h = [0u8; frame::MAX_HEADER];
        let n = frame::encode(opcode, payload.len(), mask, &mut h);
        self.wbuf.extend_from_slice(&h[..n]);
        let start = self.wbuf.len();
        self.wbuf.extend_from_slice(payload);
        if let Some(k) = mask {
            frame::apply_mask(&mut self.wbuf[start..], k, 0);
        }
    }

    /// Writes out what the write buffer holds.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.wpos < self.wbuf.len() {
            ready!(poll_write_all(
                &mut *self.inner,
                cx,
                &self.wbuf,
                &mut self.wpos
            ))?;
        }
        Poll::Ready(Ok(()))
    }

    /// Drops the write buffer once drained (an idle connection keeps none).
    fn release_wbuf(&mut self) {
        if self.wpos == self.wbuf.len() && self.wbuf.capacity() > 0 {
            self.wbuf = Vec::new();
            self.wpos = 0;
        }
    }

    /// Drives the client's handshake: sends the request (with early data from `first` if it
    /// fits), then reads the response. Ready with how much of `first` the request carried.
    fn poll_handshake(&mut self, cx: &mut Context<'_>, first: &[u8]) -> Poll<io::Result<usize>> {
        loop {
            match std::mem::replace(&mut self.handshake, Handshake::Done) {
                Handshake::Done => return Poll::Ready(Ok(0)),
                Handshake::Waiting(p) => {
                    let early = (!first.is_empty() && first.len() <= p.max_early).then_some(first);
                    self.wbuf = (p.request)(early);
                    self.wpos = 0;
                    self.handshake = Handshake::Responding {
                        accept: p.accept,
                        early: early.map_or(0, <[u8]>::len),
                    };
                }
                Handshake::Responding { accept, early } => {
                    let r = self.poll_response(cx, &accept);
                    if r.is_pending() {
                        self.handshake = Handshake::Responding { accept, early };
                    }
                    ready!(r)?;
                    if let Some(w) = self.read_waker.take() {
                        w.wake();
                    }
                    return Poll::Ready(Ok(early));
                }
            }
        }
    }

    fn poll_response(&mut self, cx: &mut Context<'_>, accept: &str) -> Poll<io::Result<()>> {
        ready!(self.poll_drain(cx))?;
        loop {
            let got = self.rx.pending();
            if let Some(end) = crate::proxy::http::codec::head_len(got, 0)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?
            {
                if end > MAX_RESPONSE {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "WebSocket handshake response too long",
                    )));
                }
                super::check_response(&got[..end], accept)?;
                self.rx.consume(end);
                return Poll::Ready(Ok(()));
            }
            if got.len() >= MAX_RESPONSE {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "WebSocket handshake response too long",
                )));
            }
            let n = ready!(self
                .rx
                .poll_fill(cx, Pin::new(&mut *self.inner), MAX_RESPONSE))?;
            if n == 0 {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed before the WebSocket handshake response",
                )));
            }
        }
    }

    /// Reads more into the read buffer (called with less than a whole control frame held, so
    /// there is room); `Ok(0)` at EOF. Idle connections keep no read buffer.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        self.rx.poll_fill(
            cx,
            Pin::new(&mut *self.inner),
            frame::MAX_HEADER + frame::MAX_CONTROL,
        )
    }

    fn buffered(&self) -> &[u8] {
        self.rx.pending()
    }

    /// Sends what the heartbeat and the control frames read asked for, without waiting.
    fn flush_control(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        if let Some(hb) = &mut self.heartbeat {
            let mut due = false;
            while hb.as_mut().poll_tick(cx).is_ready() {
                due = true;
            }
            if due && !self.close_sent {
                self.queue_control(frame::PING, &[])?;
            }
        }
        match self.poll_drain(cx) {
            Poll::Ready(Err(e)) => Err(e),
            _ => Ok(()),
        }
    }

    /// Queues a control frame, unless the peer leaves too many of them unread.
    fn queue_control(&mut self, opcode: u8, payload: &[u8]) -> io::Result<()> {
        if self.wpos == self.wbuf.len() {
            self.control_queued = 0;
        }
        self.control_queued += frame::MAX_HEADER + payload.len();
        if self.control_queued > MAX_CONTROL_BACKLOG {
            return Err(io::Error::other(
                "WebSocket: the peer reads none of the control frames it asks for",
            ));
        }
        self.queue(opcode, payload);
        Ok(())
    }

    /// Handles a whole control frame at the front of the read buffer (a close frame closes
    /// the read side).
    fn control(&mut self, h: &Header) -> io::Result<()> {
        let (start, end) = (h.size, h.size + h.len as usize);
        let mut payload = [0u8; frame::MAX_CONTROL];
        let payload = &mut payload[..end - start];
        payload.copy_from_slice(&self.rx.pending()[start..end]);
        self.rx.consume(end);
        if let Some(k) = h.mask {
            frame::apply_mask(payload, k, 0);
        }
        match h.opcode {
            frame::PING if !self.close_sent => self.queue_control(frame::PONG, payload)?,
            frame::CLOSE => {
                if !self.close_sent {
                    // Echo the status code, as RFC 6455 §5.5.1 asks.
                    let code = payload.get(..2).unwrap_or(&[]).to_vec();
                    self.queue(frame::CLOSE, &code);
                    self.close_sent = true;
                }
                self.state = ReadState::Closed;
            }
            _ => {}
        }
        Ok(())
    }
}

fn invalid(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("WebSocket: {e}"))
}

impl AsyncRead for WsStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if !matches!(me.handshake, Handshake::Done) {
            me.read_waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
        if !me.early.is_empty() {
            let n = me.early.len().min(out.remaining());
            out.put_slice(&me.early[..n]);
            me.early.advance(n);
            if me.early.is_empty() {
                me.early = Bytes::new();
            }
            return Poll::Ready(Ok(()));
        }
        me.flush_control(cx)?;
        loop {
            match &mut me.state {
                ReadState::Closed => return Poll::Ready(Ok(())),
                ReadState::Payload { left, .. } if *left == 0 => me.state = ReadState::Header,
                ReadState::Payload { left, mask, offset } => {
                    let want = (*left).min(out.remaining() as u64) as usize;
                    let held = me.rx.pending_len();
                    let start = out.filled().len();
                    let n = if held > 0 {
                        let n = want.min(held);
                        out.put_slice(&me.rx.pending()[..n]);
                        me.rx.consume(n);
                        n
                    } else if *left >= DIRECT || want == out.remaining() {
                        // Straight into the caller's buffer: ours (empty) goes back meanwhile.
                        me.rx.release_if_empty();
                        let dst = out.initialize_unfilled_to(want);
                        let mut rb = ReadBuf::new(dst);
                        ready!(Pin::new(&mut *me.inner).poll_read(cx, &mut rb))?;
                        let n = rb.filled().len();
                        if n == 0 {
                            return Poll::Ready(Err(io::Error::new(
                                io::ErrorKind::UnexpectedEof,
                                "WebSocket: connection closed inside a frame",
                            )));
                        }
                        out.advance(n);
                        n
                    } else {
                        if ready!(me.poll_fill(cx))? == 0 {
                            return Poll::Ready(Err(io::Error::new(
                                io::ErrorKind::UnexpectedEof,
                                "WebSocket: connection closed inside a frame",
                            )));
                        }
                        continue;
                    };
                    if let Some(k) = *mask {
                        frame::apply_mask(&mut out.filled_mut()[start..start + n], k, *offset);
                    }
                    *left -= n as u64;
                    *offset += n as u64;
                    return Poll::Ready(Ok(()));
                }
                ReadState::Header => {
                    let parsed = frame::parse(me.buffered(), !me.client).map_err(invalid)?;
                    let complete = parsed.filter(|h| {
                        !h.is_control() || me.buffered().len() >= h.size + h.len as usize
                    });
                    let Some(h) = complete else {
                        if ready!(me.poll_fill(cx))? == 0 {
                            if me.rx.pending_len() == 0 {
                                // The peer closed without a close frame: the end (as Xray
                                // reads it).
                                me.state = ReadState::Closed;
                                continue;
                            }
                            return Poll::Ready(Err(io::Error::new(
                                io::ErrorKind::UnexpectedEof,
                                "WebSocket: connection closed inside a frame header",
                            )));
                        }
                        continue;
                    };
                    if h.is_control() {
                        me.control(&h)?;
                        me.flush_control(cx)?;
                        continue;
                    }
                    me.frags.data(&h).map_err(invalid)?;
                    me.rx.consume(h.size);
                    me.state = ReadState::Payload {
                        left: h.len,
                        mask: h.mask,
                        offset: 0,
                    };
                }
            }
        }
    }
}

impl AsyncWrite for WsStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        let early = ready!(me.poll_handshake(cx, buf))?;
        if early > 0 {
            return Poll::Ready(Ok(early));
        }
        ready!(me.poll_drain(cx))?;
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        if me.close_sent {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        let n = buf.len().min(MAX_FRAME);
        me.queue(frame::BINARY, &buf[..n]);
        if let Poll::Ready(Err(e)) = me.poll_drain(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if matches!(me.handshake, Handshake::Responding { .. }) {
            ready!(me.poll_handshake(cx, &[]))?;
        }
        ready!(me.poll_drain(cx))?;
        me.release_wbuf();
        Pin::new(&mut *me.inner).poll_flush(cx)
    }

    /// WebSocket has no half-close: as Xray, the connection stays open until both directions
    /// are done, and the close frame goes out when it is dropped.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_flush(cx)
    }
}

impl Drop for WsStream {
    fn drop(&mut self) {
        if self.close_sent || !matches!(self.handshake, Handshake::Done) {
            return;
        }
        // Best effort, without waiting: a close frame (1000) and the end of the stream.
        self.queue(frame::CLOSE, &1000u16.to_be_bytes());
        self.close_sent = true;
        let mut cx = Context::from_waker(Waker::noop());
        if let Poll::Ready(Ok(())) = self.poll_drain(&mut cx) {
            let _ = Pin::new(&mut *self.inner).poll_flush(&mut cx);
            let _ = Pin::new(&mut *self.inner).poll_shutdown(&mut cx);
        }
    }
}

impl Stream for WsStream {}

#[cfg(test)]
mod tests;
