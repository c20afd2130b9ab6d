//! XTLS Vision on a connection: a [`Stream`] over the outer TLS that pads and unpads while the
//! inner connection shakes hands, then drops the outer TLS in each direction on its own: the
//! reader when the peer's Direct block has been read, the writer after its own Direct block
//! went out. From then on the relay sees a direct stream ([`Stream::take_read_direct`],
//! [`Stream::write_direct`]) and splices that direction, counting as it goes.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use crate::proxy::first_payload::FirstPayloadWait;
use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::{Padder, ReadState, TlsFilter, Unpadder, WriteState, BUFFER};
use crate::proxy::vless::codec;
use crate::transport::{poll_write_all, BoxStream, RawSocket, Stream};

/// How long a client waits for the application's first bytes before it sends the request
/// header with an empty padded block (Xray's 500 ms).
pub const FIRST_PAYLOAD_WAIT: Duration = Duration::from_millis(500);

/// The most plaintext one TLS record carries.
const RECORD_PLAINTEXT: usize = 16 * 1024;

/// VLESS with XTLS Vision over an outer TLS connection.
pub struct VisionStream {
    inner: BoxStream,
    client: bool,
    filter: TlsFilter,
    unpadder: Unpadder,
    padder: Padder,
    /// Client: the server's response header, until it is complete.
    response: Option<Vec<u8>>,
    /// Plaintext read before this stream existed (past the request header): the first buffer.
    pre: Vec<u8>,
    /// One record's plaintext while blocks are read.
    rbuf: Vec<u8>,
    /// Unpadded content the caller has not read yet.
    ready: Vec<u8>,
    ready_pos: usize,
    /// What the outer TLS held when the reader went direct (before the socket's next bytes).
    raw_held: Vec<u8>,
    /// The relay took the read side over (it splices from the socket now).
    read_taken: bool,
    /// Bytes framed and not yet written (the head first).
    out: Vec<u8>,
    out_pos: usize,
    /// Bytes of the batch that ended padding with Direct, for the bare socket after `out`.
    raw_tail: Vec<u8>,
    raw_pos: usize,
    /// The request header (client) or response (server): leaves with the first write.
    head: Option<Vec<u8>>,
    /// The writer writes on the bare socket.
    write_raw: bool,
    /// Client: waiting for the first payload.
    first_wait: FirstPayloadWait,
    /// The outer TLS reads in bulk again (padding ended without a switch to the raw socket:
    /// nothing is left to keep undecrypted).
    bulk: bool,
}

impl VisionStream {
    /// Server side: `inner` is the outer TLS (TLS 1.3, checked by the caller), `pre` the
    /// plaintext read past the request header, `uuid` the one the client sent.
    pub fn server(inner: BoxStream, pre: Vec<u8>, uuid: [u8; 16], seeds: [u32; 4]) -> Self {
        Self::new(
            inner,
            false,
            pre,
            uuid,
            seeds,
            Some(codec::RESPONSE.to_vec()),
        )
    }

    /// Client side: `header` is the request (with the flow in its addons); it leaves with the
    /// first payload, or with an empty padded block after [`FIRST_PAYLOAD_WAIT`].
    pub fn client(inner: BoxStream, header: Vec<u8>, uuid: [u8; 16], seeds: [u32; 4]) -> Self {
        let mut s = Self::new(inner, true, Vec::new(), uuid, seeds, Some(header));
        s.response = Some(Vec::new());
        s
    }

    fn new(
        mut inner: BoxStream,
        client: bool,
        mut pre: Vec<u8>,
        uuid: [u8; 16],
        seeds: [u32; 4],
        head: Option<Vec<u8>>,
    ) -> Self {
        if let Some(tls) = inner.outer_tls() {
            tls.set_record_at_a_time(true);
            if !pre.is_empty() {
                // Xray reads the request header and the first block out of one record: what
                // the outer TLS decrypted past the header belongs to the same first buffer.
                if let Ok(more) = tls.decrypted() {
                    pre.extend_from_slice(&more);
                }
            }
        }
        VisionStream {
            inner,
            client,
            filter: TlsFilter::default(),
            unpadder: Unpadder::new(uuid),
            padder: Padder::new(uuid, seeds),
            response: None,
            pre,
            rbuf: Vec::new(),
            bulk: false,
            ready: Vec::new(),
            ready_pos: 0,
            raw_held: Vec::new(),
            read_taken: false,
            out: Vec::new(),
            out_pos: 0,
            raw_tail: Vec::new(),
            raw_pos: 0,
            head,
            write_raw: false,
            first_wait: FirstPayloadWait::new(FIRST_PAYLOAD_WAIT),
        }
    }

    /// The inner connection's TLS as far as Vision saw it.
    pub fn filter(&self) -> &TlsFilter {
        &self.filter
    }

    /// The reader reads the bare socket now.
    pub fn read_is_direct(&self) -> bool {
        self.unpadder.state() == ReadState::Direct
    }

    /// The writer writes on the bare socket now.
    pub fn write_is_direct(&self) -> bool {
        self.write_raw
    }

    /// Writes out what was framed, then (on the bare socket) what followed the Direct block.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_drain_out(cx))?;
        if !self.raw_tail.is_empty() {
            ready!(self.poll_go_direct(cx))?;
            ready!(poll_write_all(
                &mut self.inner,
                cx,
                &self.raw_tail,
                &mut self.raw_pos
            ))?;
            self.raw_tail = Vec::new();
            self.raw_pos = 0;
        }
        Poll::Ready(Ok(()))
    }

    /// Writes out what was framed.
    fn poll_drain_out(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(poll_write_all(
            &mut self.inner,
            cx,
            &self.out,
            &mut self.out_pos
        ))?;
        // A large framing buffer is not kept once written, nor any once padding is over (the
        // writer frames nothing more): idle connections hold little.
        if self.out.capacity() > 16 << 10 || self.padder.state() != WriteState::Padding {
            self.out = Vec::new();
        } else {
            self.out.clear();
        }
        self.out_pos = 0;
        Poll::Ready(Ok(()))
    }

    /// After a Direct block went out: flush the outer TLS, then write on the bare socket.
    fn poll_go_direct(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.padder.state() == WriteState::DirectNext {
            ready!(self.poll_drain_out(cx))?;
            ready!(Pin::new(&mut self.inner).poll_flush(cx))?;
            if let Some(tls) = self.inner.outer_tls() {
                tls.write_raw();
            }
            self.padder.direct_done();
            self.write_raw = true;
            tracing::debug!("vision: writing on the bare socket");
        }
        Poll::Ready(Ok(()))
    }

    /// Client: the header goes with an empty padded block once the first-payload wait is
    /// over. `Pending` while waiting.
    fn poll_first_flight(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.client || self.head.is_none() {
            return Poll::Ready(Ok(()));
        }
        ready!(self.first_wait.poll_over(cx));
        self.send_empty_first();
        self.poll_drain(cx)
    }

    fn send_empty_first(&mut self) {
        if let Some(h) = self.head.take() {
            self.out.extend_from_slice(&h);
            self.padder.write_empty(&mut self.out);
        }
    }

    /// Reads one buffer of plaintext from the outer TLS (one record at most); empty at EOF.
    fn poll_record(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Vec<u8>>> {
        if !self.pre.is_empty() {
            return Poll::Ready(Ok(std::mem::take(&mut self.pre)));
        }
        let mut b = std::mem::take(&mut self.rbuf);
        b.resize(RECORD_PLAINTEXT, 0);
        let mut rb = ReadBuf::new(&mut b);
        let r = Pin::new(&mut self.inner).poll_read(cx, &mut rb);
        let n = rb.filled().len();
        match r {
            Poll::Ready(Ok(())) => {
                b.truncate(n);
                Poll::Ready(Ok(b))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                // Hold no buffer while the peer is quiet (an idle connection's memory).
                drop(b);
                Poll::Pending
            }
        }
    }

    /// Unpads one read's worth (in Xray's buffer pieces) into `ready`, runs the filter on the
    /// content, and goes direct when the peer's Direct block ended it.
    fn unpad(&mut self, data: &[u8]) -> io::Result<()> {
        self.ready.clear();
        self.ready_pos = 0;
        let mut pieces = Vec::new();
        for chunk in data.chunks(BUFFER) {
            let start = self.ready.len();
            self.unpadder.unpad(chunk, &mut self.ready);
            if self.ready.len() > start {
                pieces.push(start..self.ready.len());
            }
        }
        let state = self.unpadder.end_batch();
        if self.filter.active() {
            let ready = &self.ready;
            self.filter.inspect(pieces.into_iter().map(|r| &ready[r]));
        }
        if state == ReadState::Direct {
            // Nothing past the record that ended the blocks was decrypted: what the outer
            // TLS holds now is plaintext the peer sent before its switch, then raw bytes.
            let Some(tls) = self.inner.outer_tls() else {
                return Err(io::Error::other("vision: no outer TLS to leave"));
            };
            self.raw_held = tls.read_raw()?;
            self.rbuf = Vec::new();
            tracing::debug!(
                "vision: reading the bare socket ({} bytes held)",
                self.raw_held.len()
            );
        }
        Ok(())
    }
}

impl AsyncRead for VisionStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        ready!(me.poll_first_flight(cx))?;
        loop {
            if me.ready_pos < me.ready.len() {
                let n = (me.ready.len() - me.ready_pos).min(buf.remaining());
                buf.put_slice(&me.ready[me.ready_pos..me.ready_pos + n]);
                me.ready_pos += n;
                if me.ready_pos == me.ready.len() {
                    me.ready = Vec::new();
                    me.ready_pos = 0;
                }
                return Poll::Ready(Ok(()));
            }
            let state = me.unpadder.state();
            if state == ReadState::Direct {
                if !me.raw_held.is_empty() {
                    me.ready = std::mem::take(&mut me.raw_held);
                    continue;
                }
                me.rbuf = Vec::new();
                return Pin::new(&mut me.inner).poll_read(cx, buf);
            }
            if state == ReadState::Plain && !me.filter.active() && me.response.is_none() {
                me.rbuf = Vec::new();
                if !me.bulk {
                    me.bulk = true;
                    if let Some(tls) = me.inner.outer_tls() {
                        tls.set_record_at_a_time(false);
                    }
                }
                return Pin::new(&mut me.inner).poll_read(cx, buf);
            }
            let mut data = ready!(me.poll_record(cx))?;
            if data.is_empty() {
                return Poll::Ready(Ok(()));
            }
            if let Some(resp) = &mut me.response {
                resp.extend_from_slice(&data);
                match codec::decode_response(resp) {
                    Ok(None) => continue,
                    Ok(Some(n)) => {
                        data = resp.split_off(n);
                        me.response = None;
                        if data.is_empty() {
                            continue;
                        }
                    }
                    Err(e) => {
                        return Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("vless: bad response: {e}"),
                        )))
                    }
                }
            }
            if me.unpadder.state() == ReadState::Plain && !me.filter.active() {
                // The response ended and padding was already over: plain bytes.
                me.ready = data;
                continue;
            }
            me.unpad(&data)?;
            me.rbuf = data;
        }
    }
}

impl AsyncWrite for VisionStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        me.first_wait.end();
        ready!(me.poll_drain(cx))?;
        ready!(me.poll_go_direct(cx))?;
        match me.padder.state() {
            WriteState::Padding => {
                if let Some(h) = me.head.take() {
                    me.out.extend_from_slice(&h);
                }
                let raw = me.padder.write(data, &mut me.filter, &mut me.out);
                me.raw_tail.extend_from_slice(&data[raw..]);
                // Accepted: what the socket does not take now goes with the next write or
                // flush.
                if let Poll::Ready(Err(e)) = me.poll_drain(cx) {
                    return Poll::Ready(Err(e));
                }
                Poll::Ready(Ok(data.len()))
            }
            _ => {
                let n = ready!(Pin::new(&mut me.inner).poll_write(cx, data))?;
                // Xray's writer keeps counting buffers for the filter after padding ended.
                if me.filter.active() {
                    me.filter.inspect(data[..n].chunks(BUFFER));
                }
                Poll::Ready(Ok(n))
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        ready!(me.poll_drain(cx))?;
        ready!(me.poll_go_direct(cx))?;
        Pin::new(&mut me.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if me.client {
            // Nothing was ever sent: the server still learns where to.
            me.send_empty_first();
        }
        ready!(me.poll_drain(cx))?;
        ready!(me.poll_go_direct(cx))?;
        Pin::new(&mut me.inner).poll_shutdown(cx)
    }
}

impl Stream for VisionStream {
    fn socket(&self) -> Option<RawSocket<'_>> {
        self.inner.socket()
    }

    fn take_read_direct(&mut self) -> Option<Bytes> {
        if self.unpadder.state() != ReadState::Direct || self.read_taken {
            return None;
        }
        self.read_taken = true;
        let mut held = self.ready.split_off(self.ready_pos);
        self.ready.clear();
        self.ready_pos = 0;
        held.append(&mut self.raw_held);
        Some(held.into())
    }

    fn write_direct(&self) -> bool {
        self.write_raw && self.out_pos >= self.out.len() && self.raw_tail.is_empty()
    }
}
