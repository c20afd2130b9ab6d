//! One-time auth (OTA, spec §4): HMAC-SHA1 authentication of the request header and of every
//! client → server chunk, for the historic stream ciphers only. Obsolete and insecure; kept for
//! configurations that still ask for it (`"ota": true`, as old V2Ray spoke it).
//!
//! Sans-IO codec (header, chunks, UDP MAC) plus two thin stream adapters: [`OtaClient`] frames
//! what a client writes, [`OtaServer`] checks and unframes what a server reads. The
//! server → client direction is never authenticated.

use std::io;
use std::ops::Range;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use hmac::{KeyInit, Mac};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::aead::Error;
use super::conn::SsStream;
use super::stream_cipher::{OTA_FLAG, OTA_MAC_LEN};
use crate::relay::pool;
use crate::transport::{ReadAhead, Stream};

/// Largest chunk payload a client writes (the length field allows 0xFFFF).
pub const CLIENT_CHUNK: usize = 0x3FFF;
/// Length field + MAC in front of every chunk.
pub const CHUNK_HEAD: usize = 2 + OTA_MAC_LEN;
/// The largest chunk with its head: the server's read-ahead size.
const CHUNK_MAX: usize = CHUNK_HEAD + 0xFFFF;

type HmacSha1 = hmac::Hmac<sha1::Sha1>;

fn hmac2(key1: &[u8], key2: &[u8]) -> HmacSha1 {
    let mut k = Vec::with_capacity(key1.len() + key2.len());
    k.extend_from_slice(key1);
    k.extend_from_slice(key2);
    // HMAC accepts keys of any length.
    <HmacSha1 as KeyInit>::new_from_slice(&k)
        .unwrap_or_else(|_| <HmacSha1 as KeyInit>::new(&Default::default()))
}

fn mac(key1: &[u8], key2: &[u8], msg: &[u8]) -> [u8; OTA_MAC_LEN] {
    let mut m = hmac2(key1, key2);
    m.update(msg);
    let out = m.finalize().into_bytes();
    let mut o = [0u8; OTA_MAC_LEN];
    o.copy_from_slice(&out[..OTA_MAC_LEN]);
    o
}

/// Constant-time check of a truncated MAC.
fn verify(key1: &[u8], key2: &[u8], msg: &[u8], tag: &[u8]) -> bool {
    let mut m = hmac2(key1, key2);
    m.update(msg);
    tag.len() == OTA_MAC_LEN && m.verify_truncated_left(tag).is_ok()
}

/// The OTA request header: the SOCKS address with ATYP flagged, then its MAC
/// (key = IV || master key).
pub fn request_header(iv: &[u8], key: &[u8], addr: &[u8]) -> Vec<u8> {
    let mut h = addr.to_vec();
    if let Some(a) = h.first_mut() {
        *a |= OTA_FLAG;
    }
    let m = mac(iv, key, &h);
    h.extend_from_slice(&m);
    h
}

/// Checks a request header MAC; `header` is the flagged address as received.
pub fn check_header(iv: &[u8], key: &[u8], header: &[u8], tag: &[u8]) -> bool {
    verify(iv, key, header, tag)
}

/// Appends one chunk: `LEN(BE16) || MAC(IV || BE32(id), data) || data` (`data` ≤ 0xFFFF).
pub fn encode_chunk(iv: &[u8], id: u32, data: &[u8], out: &mut Vec<u8>) {
    let n = data.len().min(0xFFFF);
    out.extend_from_slice(&(n as u16).to_be_bytes());
    out.extend_from_slice(&mac(iv, &id.to_be_bytes(), &data[..n]));
    out.extend_from_slice(&data[..n]);
}

/// Checks and unframes the chunks of one connection, in order.
pub struct ChunkDecoder {
    iv: Vec<u8>,
    id: u32,
}

impl ChunkDecoder {
    pub fn new(iv: &[u8]) -> Self {
        ChunkDecoder {
            iv: iv.to_vec(),
            id: 0,
        }
    }

    /// The chunk at the start of `buf`: `Ok(None)` when more bytes are needed, else the bytes
    /// consumed and where its data is.
    pub fn decode(&mut self, buf: &[u8]) -> Result<Option<(usize, Range<usize>)>, Error> {
        let Some(head) = buf.get(..CHUNK_HEAD) else {
            return Ok(None);
        };
        let n = u16::from_be_bytes([head[0], head[1]]) as usize;
        let Some(data) = buf.get(CHUNK_HEAD..CHUNK_HEAD + n) else {
            return Ok(None);
        };
        if !verify(&self.iv, &self.id.to_be_bytes(), data, &head[2..]) {
            return Err(Error::Auth);
        }
        self.id = self.id.wrapping_add(1);
        Ok(Some((CHUNK_HEAD + n, CHUNK_HEAD..CHUNK_HEAD + n)))
    }
}

/// UDP (client → server): appends the MAC of everything in `body` (flagged address and
/// payload), key = IV || master key.
pub fn udp_seal(iv: &[u8], key: &[u8], body: &mut Vec<u8>) {
    let m = mac(iv, key, body);
    body.extend_from_slice(&m);
}

/// UDP: checks the trailing MAC of `body`; returns the length without it.
pub fn udp_open(iv: &[u8], key: &[u8], body: &[u8]) -> Result<usize, Error> {
    let n = body
        .len()
        .checked_sub(OTA_MAC_LEN)
        .ok_or(Error::Truncated)?;
    if !verify(iv, key, &body[..n], &body[n..]) {
        return Err(Error::Auth);
    }
    Ok(n)
}

/// A client stream that frames every write as OTA chunks (reads pass through).
pub struct OtaClient {
    inner: SsStream,
    iv: Vec<u8>,
    id: u32,
    pend: Vec<u8>,
    ppos: usize,
}

impl OtaClient {
    /// `inner` must carry the request made by [`request_header`]; `iv` is the client's IV.
    pub fn new(inner: SsStream, iv: Vec<u8>) -> Self {
        OtaClient {
            inner,
            iv,
            id: 0,
            pend: Vec::new(),
            ppos: 0,
        }
    }

    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(crate::transport::poll_write_all(
            &mut self.inner,
            cx,
            &self.pend,
            &mut self.ppos
        ))?;
        self.pend.clear();
        self.ppos = 0;
        Poll::Ready(Ok(()))
    }
}

impl AsyncRead for OtaClient {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for OtaClient {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        ready!(me.poll_pending(cx))?;
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let take = data.len().min(CLIENT_CHUNK);
        encode_chunk(&me.iv, me.id, &data[..take], &mut me.pend);
        me.id = me.id.wrapping_add(1);
        if let Poll::Ready(Err(e)) = me.poll_pending(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(take))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        ready!(me.poll_pending(cx))?;
        Pin::new(&mut me.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        ready!(me.poll_pending(cx))?;
        Pin::new(&mut me.inner).poll_shutdown(cx)
    }
}

impl Stream for OtaClient {}

/// A server stream that checks and unframes OTA chunks on read (writes pass through).
pub struct OtaServer {
    inner: SsStream,
    dec: ChunkDecoder,
    /// Framed bytes read ahead, and the data of a checked chunk not handed out yet.
    ra: ReadAhead,
    eof: bool,
}

impl OtaServer {
    /// `inner` is positioned after the header and its MAC; `iv` is the client's IV.
    pub fn new(inner: SsStream, iv: &[u8]) -> Self {
        OtaServer {
            inner,
            dec: ChunkDecoder::new(iv),
            ra: ReadAhead::new(pool::Adaptive::fixed(CHUNK_MAX)),
            eof: false,
        }
    }
}

impl AsyncRead for OtaServer {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        loop {
            if me.ra.has_plain() {
                me.ra.take_plain_into(out);
                return Poll::Ready(Ok(()));
            }
            if out.remaining() == 0 {
                return Poll::Ready(Ok(()));
            }
            match me.dec.decode(me.ra.pending()) {
                Ok(Some((consumed, data))) => {
                    me.ra.set_plain(data);
                    me.ra.consume(consumed);
                    continue;
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::info!("shadowsocks: one-time auth chunk failed: {e}");
                    return Poll::Ready(Err(e.into()));
                }
            }
            if me.eof {
                return Poll::Ready(if me.ra.pending_len() == 0 {
                    Ok(())
                } else {
                    Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "connection closed inside a chunk",
                    ))
                });
            }
            // Room for the largest chunk behind the pending bytes.
            // Pending: the read-ahead gave an empty buffer back.
            if ready!(me.ra.poll_fill(cx, Pin::new(&mut me.inner), CHUNK_MAX))? == 0 {
                me.eof = true;
                me.ra.release_if_empty();
            }
        }
    }
}

impl AsyncWrite for OtaServer {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, data)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl Stream for OtaServer {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::testutil::hex;

    // Known answers computed independently with Python's `hmac`/`hashlib` (HMAC-SHA1, first
    // 10 bytes) for IV = 00..0f and key = EVP_BytesToKey("password", 16).
    const IV: [u8; 16] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];

    fn key() -> Vec<u8> {
        hex("5f4dcc3b5aa765d61d8327deb882cf99")
    }

    #[test]
    fn mac_is_hmac_sha1_prefix() {
        // RFC 2202 test case 2: key "Jefe", data "what do ya want for nothing?".
        assert_eq!(
            mac(b"Je", b"fe", b"what do ya want for nothing?").to_vec(),
            hex("effcdf6ae5eb2fa2d27416d5f184df9c259a7c79")[..10]
        );
    }

    #[test]
    fn header_vector() {
        let h = request_header(&IV, &key(), &[0x01, 127, 0, 0, 1, 0x1f, 0x90]);
        assert_eq!(h[..7], [0x11, 127, 0, 0, 1, 0x1f, 0x90]);
        assert_eq!(h[7..], hex("474642b84eba2ee7d6e1")[..]);
        assert!(check_header(&IV, &key(), &h[..7], &h[7..]));
        assert!(!check_header(&IV, &key(), &h[..7], &h[8..]));
        let mut bad = h.clone();
        bad[3] ^= 1;
        assert!(!check_header(&IV, &key(), &bad[..7], &bad[7..]));
    }

    #[test]
    fn chunk_vectors_and_order() {
        let mut wire = Vec::new();
        encode_chunk(&IV, 0, b"hello", &mut wire);
        encode_chunk(&IV, 1, b"world", &mut wire);
        assert_eq!(wire[..2], [0, 5]);
        assert_eq!(wire[2..12], hex("718653e7e97b8c0aea55")[..]);
        assert_eq!(wire[17 + 2..17 + 12], hex("464f9aed20764e3ba78b")[..]);
        let mut d = ChunkDecoder::new(&IV);
        assert_eq!(d.decode(&wire[..16]).unwrap(), None);
        let (c, r) = d.decode(&wire).unwrap().unwrap();
        assert_eq!(&wire[r], b"hello");
        let (c2, r2) = d.decode(&wire[c..]).unwrap().unwrap();
        assert_eq!(&wire[c + r2.start..c + r2.end], b"world");
        assert_eq!(c + c2, wire.len());
        // Out of order (chunk 1 first) or tampered: rejected.
        assert_eq!(ChunkDecoder::new(&IV).decode(&wire[c..]), Err(Error::Auth));
        let mut bad = wire.clone();
        bad[14] ^= 1;
        assert_eq!(ChunkDecoder::new(&IV).decode(&bad), Err(Error::Auth));
    }

    /// Chunks arriving in odd pieces come out whole and in order; a waiting server holds no
    /// buffer.
    #[tokio::test]
    async fn server_unframes_chunks_and_idles_without_a_buffer() {
        use super::super::conn::{Opener, Sealer, ServerParts};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let data: Vec<u8> = (0..200_000u32).map(|i| (i * 13 + i / 509) as u8).collect();
        let mut wire = Vec::new();
        for (id, c) in data.chunks(0xFFFF).enumerate() {
            encode_chunk(&IV, id as u32, c, &mut wire);
        }
        let (mut a, b) = tokio::io::duplex(64 * 1024);
        let inner = SsStream::server(
            Box::new(b),
            ServerParts {
                opener: Opener::Plain,
                prefill: wire[..100].to_vec(),
                front: bytes::Bytes::new(),
                sealer: Sealer::Plain,
                head: Vec::new(),
                rcap: 64 * 1024,
            },
        );
        let mut s = OtaServer::new(inner, &IV);
        let rest = wire[100..].to_vec();
        let w = tokio::spawn(async move {
            for part in rest.chunks(7_001) {
                a.write_all(part).await.unwrap();
            }
            a
        });
        let mut got = vec![0u8; data.len()];
        s.read_exact(&mut got).await.unwrap();
        assert!(got == data);
        let _a = w.await.unwrap();
        let mut one = [0u8; 1];
        let r = tokio::time::timeout(std::time::Duration::from_millis(50), s.read(&mut one)).await;
        assert!(r.is_err());
        assert!(!s.ra.holds_buffer() && !s.inner.holds_buffers());
    }

    #[test]
    fn udp_vector() {
        let mut body = vec![0x11, 127, 0, 0, 1, 0, 53];
        body.extend_from_slice(b"query");
        udp_seal(&IV, &key(), &mut body);
        assert_eq!(body[12..], hex("404c5315521d65f1daee")[..]);
        assert_eq!(udp_open(&IV, &key(), &body), Ok(12));
        body[12] ^= 1;
        assert_eq!(udp_open(&IV, &key(), &body), Err(Error::Auth));
        assert_eq!(udp_open(&IV, &key(), &[1, 2]), Err(Error::Truncated));
    }
}
