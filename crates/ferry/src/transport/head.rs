//! Reading a protocol header off a stream: a bounded buffer that keeps whatever was read past
//! the header and hands it on in front of the stream.

use std::io;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::transport::{BoxStream, Prefixed};

/// The most the first read of an empty reader takes, whatever the limit: Xray's first read of
/// a connection (one 8 KiB buffer). What a bad header leaves unread in the kernel decides
/// whether its close is a FIN or an RST, which a prober sees; bytes read past the header go
/// on in front of the stream as any others.
const FIRST_READ: usize = 8192;

/// A stream and the bytes read from it that nobody consumed yet.
pub struct HeadReader {
    pub stream: BoxStream,
    pub buf: BytesMut,
    limit: usize,
}

impl HeadReader {
    /// `limit`: the most bytes a header may take before reading more is an error.
    pub fn new(stream: BoxStream, limit: usize) -> Self {
        HeadReader {
            stream,
            buf: BytesMut::with_capacity(512),
            limit,
        }
    }

    /// Starts with bytes already read (e.g. a protocol-detection byte).
    pub fn with_prefix(stream: BoxStream, prefix: &[u8], limit: usize) -> Self {
        let mut r = Self::new(stream, limit);
        r.buf.extend_from_slice(prefix);
        r
    }

    /// Reads more bytes. EOF and a full buffer are errors (the header is incomplete).
    pub async fn fill(&mut self) -> io::Result<()> {
        if self.buf.len() >= self.limit {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("header longer than {} bytes", self.limit),
            ));
        }
        let mut room = (self.limit - self.buf.len()).min(16 * 1024);
        if self.buf.is_empty() {
            room = room.max(FIRST_READ);
        }
        self.buf.reserve(room);
        let n = (&mut self.stream)
            .take(room as u64)
            .read_buf(&mut self.buf)
            .await?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed in the middle of the header",
            ));
        }
        Ok(())
    }

    /// Reads until `parse` finds a whole message in the buffer (`Ok(Some(v))`; `Ok(None)` asks
    /// for more bytes). A malformed message comes back as `Ok(Err(e))`, for the caller to answer
    /// as its protocol says; read errors, EOF and the size limit as `Err`.
    pub async fn read_until<T, E>(
        &mut self,
        mut parse: impl FnMut(&[u8]) -> Result<Option<T>, E>,
    ) -> io::Result<Result<T, E>> {
        loop {
            match parse(&self.buf) {
                Ok(Some(v)) => return Ok(Ok(v)),
                Ok(None) => self.fill().await?,
                Err(e) => return Ok(Err(e)),
            }
        }
    }

    /// Drops `n` parsed bytes from the front.
    pub fn consume(&mut self, n: usize) {
        self.buf.advance(n.min(self.buf.len()));
    }

    pub async fn write_all(&mut self, data: &[u8]) -> io::Result<()> {
        self.stream.write_all(data).await
    }

    /// The stream, with any bytes read past the header in front.
    pub fn into_stream(self) -> BoxStream {
        if self.buf.is_empty() {
            self.stream
        } else {
            Box::new(Prefixed::new(self.buf.freeze(), self.stream))
        }
    }
}
