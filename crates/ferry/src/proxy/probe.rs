//! How a server answers a client that is not one of its own (a prober, a replay, garbage), in
//! the ways the reference implementations do: drain what it sends until it stops or time runs
//! out, drain a set number of bytes, or reset the connection. Every inbound's bad first packet
//! ends in one of these (or in a fallback, `proxy::fallback`).

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

use crate::transport::{BoxStream, RawSocket, Stream};

/// Reads and discards until the client closes or `limit` passes (shadowsocks-rust's and the
/// Python SSR server's answer to a bad header: the connection looks like any other).
pub async fn drain<R: AsyncRead + Unpin + ?Sized>(s: &mut R, limit: Duration) {
    let mut sink = tokio::io::sink();
    let _ = tokio::time::timeout(limit, tokio::io::copy(s, &mut sink)).await;
}

/// Reads and discards until `left` more bytes were read, the client closes, or `deadline`;
/// each read takes up to `read_size` bytes however few are still wanted (Xray's buffered
/// reader, whose read size decides what a prober sees).
pub async fn drain_bytes<R: AsyncRead + Unpin + ?Sized>(
    s: &mut R,
    mut left: usize,
    read_size: usize,
    deadline: tokio::time::Instant,
) {
    if left == 0 {
        return;
    }
    let mut tmp = vec![0u8; read_size];
    let _ = tokio::time::timeout_at(deadline, async {
        while left > 0 {
            match s.read(&mut tmp).await {
                Ok(0) | Err(_) => return,
                Ok(k) => left = left.saturating_sub(k),
            }
        }
    })
    .await;
}

/// Makes the TCP socket under `s` close with an RST (SO_LINGER 0) when it is dropped.
pub fn reset_on_close(s: &dyn Stream) {
    if let Some(RawSocket::Tcp(t)) = s.socket() {
        let _ = socket2::SockRef::from(t).set_linger(Some(Duration::ZERO));
    }
}

/// Closes at once with an RST (shadowsocks-rust's answer to a bad 2022 header).
pub fn reset(stream: BoxStream) {
    reset_on_close(&*stream);
    drop(stream);
}
