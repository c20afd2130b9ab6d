//! The relay's tests: splicing and copying, counts, resets, idle timeouts, and a direction
//! turning direct mid-connection.

use super::*;
use crate::transport::Prefixed;
use bytes::Bytes;
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Splicing on loopback, where the tests' sockets are.
fn splicing() -> RelayOpts {
    RelayOpts {
        splice_local: true,
        ..RelayOpts::default()
    }
}

#[tokio::test]
async fn a_local_peer_is_copied_from_unless_splice_local() {
    for splice_local in [false, true] {
        let (client, a) = tcp_pair().await;
        let (b, server) = tcp_pair().await;
        let opts = RelayOpts {
            splice_local,
            ..RelayOpts::default()
        };
        assert!(a.socket().unwrap().peer_is_local());
        let relay = tokio::spawn(async move {
            ok(run(Box::new(a), Box::new(b), &opts, &Counters::default()).await)
        });
        let up = pattern(1 << 20);
        let down = pattern(300_000);
        let (got_client, got_server) = exchange(client, server, up.clone(), down.clone()).await;
        let st = relay.await.unwrap();
        assert!(
            got_server == up && got_client == down,
            "{splice_local}: bytes differ"
        );
        assert_eq!(
            (st.up_spliced, st.down_spliced),
            (splice_local, splice_local),
            "splice_local {splice_local}"
        );
    }
    let (u, _v) = tokio::net::UnixStream::pair().unwrap();
    assert!(u.socket().unwrap().peer_is_local());
}

async fn tcp_pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
    let (s, _) = l.accept().await.unwrap();
    (c, s)
}

/// The stats of a relay that must have ended without an error.
fn ok((st, r): (RelayStats, io::Result<()>)) -> RelayStats {
    r.unwrap();
    st
}

fn counters() -> Counters {
    Counters {
        up: vec![Arc::new(AtomicU64::new(0))],
        down: vec![Arc::new(AtomicU64::new(0))],
    }
}

/// One end: writes `out` then half-closes while reading everything the other end sends.
fn end(
    mut sock: impl AsyncReadExt + AsyncWriteExt + Unpin + Send + 'static,
    out: Vec<u8>,
) -> tokio::task::JoinHandle<Vec<u8>> {
    tokio::spawn(async move {
        let (mut r, mut w) = tokio::io::split(&mut sock);
        let wr = async {
            w.write_all(&out).await.unwrap();
            w.shutdown().await.unwrap();
        };
        let mut got = Vec::new();
        let rd = r.read_to_end(&mut got);
        let (_, n) = tokio::join!(wr, rd);
        n.unwrap();
        got
    })
}

/// Client writes `up` then half-closes; server side writes `down` then half-closes.
async fn exchange(
    client: impl AsyncReadExt + AsyncWriteExt + Unpin + Send + 'static,
    server: impl AsyncReadExt + AsyncWriteExt + Unpin + Send + 'static,
    up: Vec<u8>,
    down: Vec<u8>,
) -> (Vec<u8>, Vec<u8>) {
    let (c, s) = (end(client, up), end(server, down));
    (c.await.unwrap(), s.await.unwrap())
}

#[tokio::test]
async fn splice_path_moves_and_counts_including_pending_bytes() {
    let (client, a) = tcp_pair().await;
    let (b, server) = tcp_pair().await;
    // The inbound read 5 bytes past its header: they must reach the server first.
    let a: BoxStream = Box::new(Prefixed::new(Bytes::from_static(b"head:"), Box::new(a)));
    let cs = counters();
    let c2 = cs.clone();
    let relay = tokio::spawn(async move { ok(run(a, Box::new(b), &splicing(), &c2).await) });
    let up = vec![7u8; 3 << 20];
    let down = vec![9u8; 2 << 20];
    let (got_client, got_server) = exchange(client, server, up.clone(), down.clone()).await;
    let st = relay.await.unwrap();
    assert!(st.up_spliced && st.down_spliced);
    assert_eq!(&got_server[..5], b"head:");
    assert_eq!(&got_server[5..], &up[..]);
    assert_eq!(got_client, down);
    assert_eq!(st.up, up.len() as u64 + 5);
    assert_eq!(cs.up[0].load(Ordering::Relaxed), up.len() as u64 + 5);
    assert_eq!(cs.down[0].load(Ordering::Relaxed), down.len() as u64);
}

#[tokio::test]
async fn copy_path_moves_counts_and_half_closes() {
    let (client, a) = tokio::io::duplex(4096);
    let (b, server) = tokio::io::duplex(4096);
    let cs = counters();
    let c2 = cs.clone();
    let relay =
        tokio::spawn(
            async move { ok(run(Box::new(a), Box::new(b), &RelayOpts::default(), &c2).await) },
        );
    let up: Vec<u8> = (0..1_000_000u32).map(|i| i as u8).collect();
    let down: Vec<u8> = (0..700_000u32).map(|i| (i * 7) as u8).collect();
    let (got_client, got_server) = exchange(client, server, up.clone(), down.clone()).await;
    let st = relay.await.unwrap();
    assert!(!st.spliced());
    assert_eq!(got_server, up);
    assert_eq!(got_client, down);
    assert_eq!(cs.up[0].load(Ordering::Relaxed), up.len() as u64);
    assert_eq!(cs.down[0].load(Ordering::Relaxed), down.len() as u64);
    assert_eq!(st.timed_out, None);
}

#[tokio::test]
async fn a_reset_keeps_the_count_of_what_moved() {
    for splice in [true, false] {
        let (mut client, a) = tcp_pair().await;
        let (b, mut server) = tcp_pair().await;
        let opts = RelayOpts {
            splice,
            splice_local: splice,
            ..RelayOpts::default()
        };
        let relay = tokio::spawn(async move {
            run(Box::new(a), Box::new(b), &opts, &Counters::default()).await
        });
        let down = vec![3u8; 1 << 20];
        server.write_all(&down).await.unwrap();
        let mut got = vec![0u8; down.len()];
        client.read_exact(&mut got).await.unwrap();
        // The server resets: unread data in its buffer and linger 0.
        client.write_all(b"unread").await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        socket2::SockRef::from(&server)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
        drop(server);
        let (st, r) = tokio::time::timeout(Duration::from_secs(5), relay)
            .await
            .expect("relay ended")
            .unwrap();
        assert!(r.is_err(), "splice {splice}: the reset is reported");
        assert_eq!(st.down, down.len() as u64, "splice {splice}");
        assert_eq!(st.up, 6, "splice {splice}");
    }
}

#[tokio::test]
async fn idle_timeout_ends_a_silent_relay() {
    for splice in [true, false] {
        let (_client, a) = tcp_pair().await;
        let (b, _server) = tcp_pair().await;
        let opts = RelayOpts {
            conn_idle: Duration::from_millis(200),
            splice,
            splice_local: splice,
            ..RelayOpts::default()
        };
        let t = Instant::now();
        let st = ok(run(Box::new(a), Box::new(b), &opts, &Counters::default()).await);
        assert_eq!(st.timed_out, Some("connIdle"));
        assert!(t.elapsed() >= Duration::from_millis(200));
        assert!(t.elapsed() < Duration::from_secs(5));
    }
}

#[tokio::test]
async fn downlink_only_limits_the_wait_after_the_client_finished() {
    let (mut client, a) = tcp_pair().await;
    let (b, _server) = tcp_pair().await;
    let opts = RelayOpts {
        downlink_only: Duration::from_millis(300),
        ..RelayOpts::default()
    };
    let relay = tokio::spawn(async move {
        ok(run(Box::new(a), Box::new(b), &opts, &Counters::default()).await)
    });
    client.shutdown().await.unwrap();
    let st = tokio::time::timeout(Duration::from_secs(5), relay)
        .await
        .expect("relay ended")
        .unwrap();
    assert_eq!(st.timed_out, Some("downlinkOnly"));
}

/// A layer over a socket that transforms (XORs) the first `left` bytes it reads, reading
/// ahead in 1000-byte gulps, and then turns direct, handing over what it read ahead.
/// Writes go straight through (but never direct, so the other direction keeps copying).
struct TurnsRaw {
    inner: TcpStream,
    left: usize,
    held: Vec<u8>,
}

impl tokio::io::AsyncRead for TurnsRaw {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = &mut *self;
        if me.held.is_empty() {
            let mut tmp = [0u8; 1000];
            let mut rb = tokio::io::ReadBuf::new(&mut tmp);
            std::task::ready!(std::pin::Pin::new(&mut me.inner).poll_read(cx, &mut rb))?;
            me.held.extend_from_slice(rb.filled());
            if me.held.is_empty() {
                return Poll::Ready(Ok(()));
            }
        }
        let n = me.held.len().min(me.left).min(buf.remaining());
        let out: Vec<u8> = me.held.drain(..n).map(|b| b ^ 0x5a).collect();
        buf.put_slice(&out);
        me.left -= n;
        Poll::Ready(Ok(()))
    }
}

impl tokio::io::AsyncWrite for TurnsRaw {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl Stream for TurnsRaw {
    fn socket(&self) -> Option<crate::transport::RawSocket<'_>> {
        Some(crate::transport::RawSocket::Tcp(&self.inner))
    }
    fn take_read_direct(&mut self) -> Option<Bytes> {
        (self.left == 0).then(|| Bytes::from(std::mem::take(&mut self.held)))
    }
}

#[tokio::test]
async fn a_direction_switches_to_splice_mid_connection_with_held_bytes_first() {
    let (client, a) = tcp_pair().await;
    let (b, server) = tcp_pair().await;
    // The first 5000 bytes the client sends are "encoded"; the layer turns raw after them,
    // holding up to 999 bytes it read ahead.
    let n_coded = 5000;
    let a = TurnsRaw {
        inner: a,
        left: n_coded,
        held: Vec::new(),
    };
    let cs = counters();
    let c2 = cs.clone();
    let relay =
        tokio::spawn(async move { ok(run(Box::new(a), Box::new(b), &splicing(), &c2).await) });
    let up = pattern(3 << 20);
    let mut wire = up.clone();
    for x in &mut wire[..n_coded] {
        *x ^= 0x5a;
    }
    let down: Vec<u8> = (0..2_000_000u32).map(|i| (i * 13) as u8).collect();
    let (got_client, got_server) = exchange(client, server, wire, down.clone()).await;
    let st = relay.await.unwrap();
    assert!(got_server == up, "uplink bytes differ");
    assert!(got_client == down, "downlink bytes differ");
    assert!(st.up_spliced, "the uplink went direct");
    assert!(!st.down_spliced, "the downlink kept copying");
    assert_eq!(st.up, up.len() as u64);
    assert_eq!(st.down, down.len() as u64);
    assert_eq!(cs.up[0].load(Ordering::Relaxed), up.len() as u64);
    assert_eq!(cs.down[0].load(Ordering::Relaxed), down.len() as u64);
}

#[tokio::test]
async fn a_layer_that_never_turns_direct_keeps_both_directions_copying() {
    let (client, a) = tcp_pair().await;
    let (b, server) = tcp_pair().await;
    let a = TurnsRaw {
        inner: a,
        left: usize::MAX,
        held: Vec::new(),
    };
    let relay = tokio::spawn(async move {
        ok(run(Box::new(a), Box::new(b), &splicing(), &Counters::default()).await)
    });
    let up = pattern(100_000);
    let wire: Vec<u8> = up.iter().map(|b| b ^ 0x5a).collect();
    let (_, got_server) = exchange(client, server, wire, b"x".to_vec()).await;
    let st = relay.await.unwrap();
    assert!(got_server == up);
    assert!(!st.spliced());
}

fn pattern(len: usize) -> Vec<u8> {
    let mut x = 0x9e3779b97f4a7c15u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
