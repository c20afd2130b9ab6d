//! The Shadowsocks TCP stream after the header.
//!
//! Reading: ciphertext is read in large batches into a pooled buffer (several chunks per read
//! syscall; the buffer grows from the edition's minimum to about 256 KiB while reads fill it);
//! each chunk that fits the caller's buffer is decrypted straight into it (no copy afterwards),
//! a larger one in place and copied out. Writing: each write (up to 256 KiB) is sealed, length
//! blocks and payloads together, into one pooled output buffer that leaves in one write
//! syscall (AES-GCM encrypts out of place, so the plaintext is read once). Both buffers go back
//! to the per-thread pool whenever they are empty, so an idle connection holds none.
//! The relay copies through this stream; it never peels (it always transforms bytes).
//!
//! `read.rs` holds the read side (the [`Opener`], `poll_read`), `write.rs` the write side (the
//! [`Sealer`], the output buffer, the pending request, `poll_write`).

mod read;
mod write;

use std::time::Duration;

use bytes::Bytes;

use super::aead::Error;
use crate::relay::pool;
use crate::transport::{BoxStream, ReadAhead, Stream};

pub use read::Opener;
pub use write::{OutBuf, Sealer};

/// How long a client waits for the first payload before sending its header alone (as Xray).
pub const FIRST_PAYLOAD_WAIT: Duration = Duration::from_millis(100);
/// Plaintext sealed per `poll_write` at most (the relay's largest copy buffer).
const WRITE_MAX: usize = pool::MAX_SIZE;
/// Smallest output buffer taken from the pool, so small writes share one size.
const OUT_MIN: usize = 16 * 1024;
/// Largest read-ahead buffer: a full relay buffer's worth of chunks with their framing.
const READ_MAX: usize = pool::MAX_SIZE + pool::MAX_SIZE / 16;
/// Read-ahead sizes for an edition whose chunks need `rcap` bytes: up to [`READ_MAX`].
fn read_ahead_size(rcap: usize) -> pool::Adaptive {
    pool::Adaptive::new(rcap, rcap, READ_MAX.max(rcap))
}

/// Builds the read half from the peer's salt/IV once it has arrived.
pub type KeyFromSalt = Box<dyn FnOnce(&[u8]) -> Result<Opener, Error> + Send>;

enum ReadKey {
    Ready(Opener),
    AwaitSalt(usize, KeyFromSalt),
    Failed,
}

/// A client request still to be sent; it goes out with the first payload (or alone after
/// [`FIRST_PAYLOAD_WAIT`] once the client starts reading, or at shutdown).
pub enum Request {
    Sent,
    /// Stream/AEAD editions: the SOCKS address, sent as the first plaintext bytes.
    Address(Vec<u8>),
    /// 2022: the SOCKS address, sent in the variable header with padding.
    Ss2022(Vec<u8>),
}

/// What a server handshake hands to [`SsStream::server`]: the keyed opener, ciphertext already
/// read past the header (`prefill`), plaintext already decrypted (`front`, e.g. the 2022 initial
/// payload), the sealer and the raw bytes sent before the first sealed output (`head`: our salt).
pub struct ServerParts {
    pub opener: Opener,
    pub prefill: Vec<u8>,
    pub front: Bytes,
    pub sealer: Sealer,
    pub head: Vec<u8>,
    /// Smallest read-ahead buffer (the edition's: it must hold one whole chunk).
    pub rcap: usize,
}

/// A Shadowsocks connection positioned after the request header.
pub struct SsStream {
    inner: BoxStream,
    rkey: ReadKey,
    /// Ciphertext read ahead, and plaintext of a chunk opened in place not taken yet; its
    /// size grows from the edition's minimum up to [`READ_MAX`] while reads fill it.
    ra: ReadAhead,
    front: Bytes,
    eof: bool,
    sealer: Sealer,
    head: Vec<u8>,
    out: OutBuf,
    req: Request,
    wait: crate::proxy::first_payload::FirstPayloadWait,
}

impl SsStream {
    /// A server stream from the parts its handshake produced.
    pub fn server(inner: BoxStream, p: ServerParts) -> SsStream {
        let mut s = SsStream::new(
            inner,
            ReadKey::Ready(p.opener),
            p.sealer,
            p.head,
            Request::Sent,
            p.rcap,
        );
        s.front = p.front;
        s.ra = ReadAhead::with_prefill(read_ahead_size(p.rcap), &p.prefill);
        s
    }

    /// A client stream: the server's salt (`salt_len` bytes) keys the read half via `key`.
    pub fn client(
        inner: BoxStream,
        salt_len: usize,
        key: KeyFromSalt,
        sealer: Sealer,
        head: Vec<u8>,
        req: Request,
        rcap: usize,
    ) -> SsStream {
        SsStream::new(
            inner,
            ReadKey::AwaitSalt(salt_len, key),
            sealer,
            head,
            req,
            rcap,
        )
    }

    fn new(
        inner: BoxStream,
        rkey: ReadKey,
        sealer: Sealer,
        head: Vec<u8>,
        req: Request,
        rcap: usize,
    ) -> SsStream {
        SsStream {
            inner,
            rkey,
            ra: ReadAhead::new(read_ahead_size(rcap)),
            front: Bytes::new(),
            eof: false,
            sealer,
            head,
            out: OutBuf::default(),
            req,
            wait: crate::proxy::first_payload::FirstPayloadWait::new(FIRST_PAYLOAD_WAIT),
        }
    }

    /// The raw bytes this client sends before its first sealed output (its salt or IV) while
    /// they have not left yet.
    pub fn client_iv(&self) -> &[u8] {
        &self.head
    }

    /// The read-ahead size reads currently aim for (for tests).
    #[cfg(test)]
    fn read_ahead_size(&self) -> usize {
        self.ra.target_size()
    }

    /// Whether the connection currently holds pooled buffers (for tests).
    pub fn holds_buffers(&self) -> bool {
        self.ra.holds_buffer() || self.out.buf.is_some()
    }

    /// The stream under the cipher, for draining a connection that failed after its header:
    /// what was read ahead (and not decrypted) is dropped, as shadowsocks-rust does.
    pub fn into_inner(self) -> BoxStream {
        self.inner
    }

    /// Puts plaintext back in front of the stream (bytes read past a parsed address).
    pub fn unread(&mut self, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let mut v = data.to_vec();
        v.extend_from_slice(&self.front);
        self.front = v.into();
    }
}

impl Stream for SsStream {}

#[cfg(test)]
mod tests {
    use super::super::aead::{ChunkOpener, ChunkSealer, AEAD_MAX_CHUNK};
    use super::super::cipher::{AeadAlg, AeadCipher};
    use super::super::inbound::AEAD_RBUF;
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn opener(k: u8) -> ChunkOpener {
        ChunkOpener::new(
            AeadCipher::new(AeadAlg::Aes128Gcm, &[k; 16]).unwrap(),
            12,
            AEAD_MAX_CHUNK,
        )
    }

    fn sealer(k: u8) -> ChunkSealer {
        ChunkSealer::new(
            AeadCipher::new(AeadAlg::Aes128Gcm, &[k; 16]).unwrap(),
            12,
            AEAD_MAX_CHUNK,
        )
    }

    /// A client and a server stream over a duplex pipe (keys fixed, salts already exchanged).
    fn pair() -> (SsStream, SsStream) {
        let (a, b) = tokio::io::duplex(256 * 1024);
        let client = SsStream::client(
            Box::new(a),
            0,
            Box::new(|_| Ok(Opener::Aead(opener(2)))),
            Sealer::Aead(sealer(1)),
            Vec::new(),
            Request::Address(vec![1, 127, 0, 0, 1, 0, 80]),
            AEAD_RBUF,
        );
        let server = SsStream::server(
            Box::new(b),
            ServerParts {
                opener: Opener::Aead(opener(1)),
                prefill: Vec::new(),
                front: Bytes::new(),
                sealer: Sealer::Aead(sealer(2)),
                head: Vec::new(),
                rcap: AEAD_RBUF,
            },
        );
        (client, server)
    }

    #[tokio::test]
    async fn bulk_both_ways_then_idle_connections_hold_no_buffers() {
        let (mut c, mut s) = pair();
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 31 / 7) as u8).collect();
        // The server reads the 7-byte address first.
        let mut addr = [0u8; 7];
        let d2 = data.clone();
        let w = tokio::spawn(async move {
            for part in d2.chunks(70_000) {
                c.write_all(part).await.unwrap();
            }
            c.flush().await.unwrap();
            c
        });
        s.read_exact(&mut addr).await.unwrap();
        assert_eq!(addr, [1, 127, 0, 0, 1, 0, 80]);
        let mut got = vec![0u8; data.len()];
        // Odd read sizes: chunks land partly in place, partly straight in the caller's buffer.
        let mut at = 0;
        for (i, step) in [100usize, 20_000, 16_383, 50_000, 7]
            .iter()
            .cycle()
            .enumerate()
        {
            if at == got.len() {
                break;
            }
            let end = (at + step + i).min(got.len());
            let n = s.read(&mut got[at..end]).await.unwrap();
            assert!(n > 0);
            at += n;
        }
        assert_eq!(got, data);
        let mut c = w.await.unwrap();
        assert!(
            !c.holds_buffers(),
            "client keeps a buffer after its writes left"
        );
        // Nothing more to read: the read is pending and the server gave its buffers back.
        let mut one = [0u8; 1];
        let r = tokio::time::timeout(Duration::from_millis(50), s.read(&mut one)).await;
        assert!(r.is_err());
        assert!(!s.holds_buffers(), "idle server stream keeps a buffer");
        // The other way, and the client's read side releases as well.
        s.write_all(&data[..40_000]).await.unwrap();
        let mut back = vec![0u8; 40_000];
        c.read_exact(&mut back).await.unwrap();
        assert_eq!(back, &data[..40_000]);
        let r = tokio::time::timeout(Duration::from_millis(50), c.read(&mut one)).await;
        assert!(r.is_err());
        assert!(!c.holds_buffers() && !s.holds_buffers());
    }

    #[tokio::test]
    async fn read_ahead_grows_under_bulk_and_keeps_partial_chunks() {
        let (mut c, mut s) = pair();
        let data: Vec<u8> = (0..3_000_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let d2 = data.clone();
        let w = tokio::spawn(async move {
            // Odd write sizes: chunk boundaries fall anywhere in the server's reads, so the
            // read-ahead often grows while part of a chunk is pending.
            let sizes = [262_144usize, 1, 99_999, 262_144, 16_384, 5, 300_000];
            let (mut at, mut k) = (0, 0);
            while at < d2.len() {
                let n = sizes[k % sizes.len()].min(d2.len() - at);
                c.write_all(&d2[at..at + n]).await.unwrap();
                at += n;
                k += 1;
            }
            c.shutdown().await.unwrap();
            c
        });
        let mut addr = [0u8; 7];
        s.read_exact(&mut addr).await.unwrap();
        let (mut got, mut buf, mut largest) = (Vec::new(), vec![0u8; pool::MAX_SIZE], 0);
        loop {
            let n = s.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
            largest = largest.max(s.read_ahead_size());
        }
        assert_eq!(got.len(), data.len());
        assert!(got == data, "plaintext differs");
        assert!(
            largest > AEAD_RBUF,
            "read-ahead stayed at {largest} bytes under bulk traffic"
        );
        assert!(largest <= READ_MAX);
        drop(w.await.unwrap());
    }
}
