//! The one copy engine every TCP session ends in.
//!
//! Each direction is its own state: a buffered copy through pooled buffers ([`copy`]), or
//! `splice(2)` between the raw sockets through a kernel pipe created on the first byte
//! ([`splice`]). A direction starts in splice when its reader and writer are direct (plain
//! sockets); a copying direction asks after each transfer whether its layers have turned
//! direct (XTLS Vision does, mid-connection) and then moves, alone, to splice. Counters are
//! added to as each transfer completes, so statistics are live. Half-close is propagated; the
//! idle timeout switches to `uplink_only` / `downlink_only` once one direction has finished, as
//! in Xray ([`idle`]).
//!
//! A direction whose reader is a socket to another process on this machine (loopback TCP, a
//! unix socket) copies instead of splicing, unless `FERRY_SPLICE_LOCAL=1`: splicing out of a
//! socket keeps the sender's pages referenced until the last reader has them, so a local sender
//! (nginx or HAProxy in front, a local client) allocates fresh pages for every write. Measured on
//! loopback (BENCHMARKS.md, session 17): in three of four chains copying moved 6-22% more bytes
//! per second at 4-12% less CPU per GB for the whole machine (the fourth: 3% slower, 3% more),
//! though Ferry's own share rises.

use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::transport::{BoxStream, Stream};
use copy::{CopyDir, CopyEnd};
use idle::{drive, Activity, Dir};
use splice::SpliceDir;

mod copy;
mod idle;
/// The pooled buffers and pipes (in `common`, below every layer that holds bytes).
pub use crate::common::pool;
mod splice;

/// Timeouts and buffer size for one relay (from the user level's policy).
#[derive(Clone, Debug)]
pub struct RelayOpts {
    /// Close when no byte moved for this long (zero: never).
    pub conn_idle: Duration,
    /// After the server side finished (downlink done), how long the client may still send.
    pub uplink_only: Duration,
    /// After the client side finished (uplink done), how long the server may still send.
    pub downlink_only: Duration,
    /// Copy buffer size for the buffered path: it starts small and grows while reads fill it.
    pub buffer: pool::Adaptive,
    /// The same for a direction into a plain socket that copies because its reader is local
    /// (`splice_local` off).
    pub local_buffer: pool::Adaptive,
    /// Use splice when both sides are raw sockets.
    pub splice: bool,
    /// Splice also out of sockets whose peer is on this machine (see the module notes).
    pub splice_local: bool,
    /// Half-close the client when the server side ends (the usual). Off, the client gets no
    /// FIN then: it may still send for `uplink_only`, and the relay's end closes it, as Xray's
    /// fallback does on a client whose writer cannot close (raw TCP, REALITY).
    pub fin_to_client: bool,
}

/// `FERRY_SPLICE_LOCAL` (`1`, `true`, `on`, `yes`): splice out of local peers' sockets too.
pub fn splice_local_from_env() -> bool {
    static V: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *V.get_or_init(|| {
        std::env::var("FERRY_SPLICE_LOCAL")
            .is_ok_and(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "on" | "yes"))
    })
}

impl Default for RelayOpts {
    fn default() -> Self {
        RelayOpts {
            conn_idle: Duration::from_secs(300),
            uplink_only: Duration::from_secs(1),
            downlink_only: Duration::from_secs(1),
            buffer: pool::Adaptive::new(pool::DEFAULT_SIZE, pool::DEFAULT_SIZE, pool::MAX_SIZE),
            local_buffer: pool::Adaptive::new(
                pool::DEFAULT_SIZE,
                pool::DEFAULT_SIZE,
                pool::LOCAL_COPY_MAX_SIZE,
            ),
            splice: true,
            splice_local: splice_local_from_env(),
            fin_to_client: true,
        }
    }
}

impl RelayOpts {
    /// The relay options a user level's policy asks for.
    pub fn for_level(level: &crate::app::policy::LevelPolicy) -> RelayOpts {
        // Unset, the relay's defaults: copy buffers from 32 KiB growing to 256 KiB under bulk
        // traffic (512 KiB into a plain socket from a local reader), splice where it can.
        let d = RelayOpts::default();
        // Xray's bufferSize bounds what one connection buffers: it is the largest any of our
        // copy buffers grows to.
        let (buffer, local_buffer) = match level.buffer_size {
            Some(n) => {
                let b = pool::Adaptive::new(pool::DEFAULT_SIZE, n.min(pool::DEFAULT_SIZE), n);
                (b, b)
            }
            None => (d.buffer, d.local_buffer),
        };
        RelayOpts {
            conn_idle: level.conn_idle,
            uplink_only: level.uplink_only,
            downlink_only: level.downlink_only,
            buffer,
            local_buffer,
            ..d
        }
    }
}

/// Live byte counters a relay adds to: uplink is client -> server.
#[derive(Clone, Default, Debug)]
pub struct Counters {
    pub up: Vec<Arc<AtomicU64>>,
    pub down: Vec<Arc<AtomicU64>>,
}

/// Relays running in the process, for the metrics endpoint.
static RELAYS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Relays running now.
pub fn live_relays() -> usize {
    RELAYS.load(Ordering::Relaxed)
}

/// Counts a relay while it lives.
struct RelayGuard;

impl RelayGuard {
    fn new() -> RelayGuard {
        RELAYS.fetch_add(1, Ordering::Relaxed);
        RelayGuard
    }
}

impl Drop for RelayGuard {
    fn drop(&mut self) {
        RELAYS.fetch_sub(1, Ordering::Relaxed);
    }
}

#[inline]
fn add(counters: &[Arc<AtomicU64>], n: usize) {
    for c in counters {
        c.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// How a relay ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayStats {
    pub up: u64,
    pub down: u64,
    /// The uplink / downlink moved by splice (from the start or after a switch).
    pub up_spliced: bool,
    pub down_spliced: bool,
    /// `Some` when a timeout ended it.
    pub timed_out: Option<&'static str>,
}

impl RelayStats {
    /// Whether either direction was spliced.
    pub fn spliced(&self) -> bool {
        self.up_spliced || self.down_spliced
    }
}

/// Moves bytes both ways between the client side `a` and the server side `b` until both
/// directions finish, an error occurs, or a timeout fires. The stats count what moved in
/// every case, an error included (a reset at the end of a long transfer still moved it all).
///
/// What an idle connection keeps is this future, so it is laid out to be small: the state of
/// each direction is a plain struct polled by hand (no readiness futures held), in a
/// `poll_fn`. Written as `fn -> impl Future` because an `async fn` keeps each argument twice
/// in its state (the argument and its moved copy).
#[allow(clippy::manual_async_fn)]
pub fn run<'a>(
    mut a: BoxStream,
    mut b: BoxStream,
    opts: &'a RelayOpts,
    counters: &'a Counters,
) -> impl Future<Output = (RelayStats, io::Result<()>)> + Send + 'a {
    async move {
        let _counted = RelayGuard::new();
        let activity = Activity::new();
        let mut up = Direction::start(&mut *a, &*b, opts, true);
        let mut down = Direction::start(&mut *b, &*a, opts, opts.fin_to_client);
        let poll_dir = |cx: &mut Context<'_>, dir: Dir| match dir {
            Dir::Up => up.poll(cx, &mut *a, &mut *b, &counters.up, &activity),
            Dir::Down => down.poll(cx, &mut *b, &mut *a, &counters.down, &activity),
        };
        let (timed_out, result) = match drive(poll_dir, opts, &activity).await {
            Ok((_, _, t)) => (t, Ok(())),
            Err(e) => (None, Err(e)),
        };
        let stats = RelayStats {
            up: up.total,
            down: down.total,
            up_spliced: up.spliced,
            down_spliced: down.spliced,
            timed_out,
        };
        (stats, result)
    }
}

/// How one direction moves bytes now.
enum Way {
    Copy(CopyDir),
    Splice(SpliceDir),
    Done,
}

/// One direction of a relay: reader -> writer.
struct Direction {
    way: Way,
    total: u64,
    spliced: bool,
    /// Shut the writer down when the reader ends.
    fin: bool,
}

impl Direction {
    /// Splice from the start when both ends are direct; copy otherwise. `fin`: shut the writer
    /// down when the reader ends.
    fn start(r: &mut dyn Stream, w: &dyn Stream, opts: &RelayOpts, fin: bool) -> Direction {
        let sockets = opts.splice && r.socket().is_some() && w.socket().is_some();
        let local = sockets && !opts.splice_local && r.socket().is_some_and(|s| s.peer_is_local());
        let direct = sockets && !local && w.write_direct();
        let way = match direct.then(|| r.take_read_direct()).flatten() {
            Some(pending) => Way::Splice(SpliceDir::new(pending, fin)),
            // Into a plain socket: the larger buffer. Into a protocol stream (a client's TLS,
            // Shadowsocks...) the usual one, which bounds what a client that stops reading pins.
            None if local && w.write_direct() => {
                Way::Copy(CopyDir::new(opts.local_buffer, false, fin))
            }
            None => Way::Copy(CopyDir::new(opts.buffer, sockets && !local, fin)),
        };
        Direction {
            spliced: matches!(way, Way::Splice(_)),
            way,
            total: 0,
            fin,
        }
    }

    fn poll(
        &mut self,
        cx: &mut Context<'_>,
        r: &mut dyn Stream,
        w: &mut dyn Stream,
        counters: &[Arc<AtomicU64>],
        activity: &Activity,
    ) -> Poll<io::Result<u64>> {
        loop {
            match &mut self.way {
                Way::Copy(c) => {
                    match std::task::ready!(c.poll_copy(
                        cx,
                        r,
                        w,
                        &mut self.total,
                        counters,
                        activity
                    ))? {
                        CopyEnd::Done => self.way = Way::Done,
                        CopyEnd::Switch(pending) => {
                            self.spliced = true;
                            self.way = Way::Splice(SpliceDir::new(pending, self.fin));
                        }
                    }
                }
                Way::Splice(s) => {
                    let (Some(from), Some(to)) = (r.socket(), w.socket()) else {
                        return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
                    };
                    std::task::ready!(s.poll_splice(
                        cx,
                        from,
                        to,
                        &mut self.total,
                        counters,
                        activity
                    ))?;
                    self.way = Way::Done;
                }
                Way::Done => return Poll::Ready(Ok(self.total)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
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
        let relay = tokio::spawn(async move {
            ok(run(Box::new(a), Box::new(b), &RelayOpts::default(), &c2).await)
        });
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
}
