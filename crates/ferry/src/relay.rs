//! The one copy engine every TCP session ends in.
//!
//! When both sides peel down to raw sockets, bytes move with `splice(2)` through a kernel pipe
//! (created lazily, so an idle connection holds none). Otherwise they are copied through pooled
//! buffers that are returned to the pool whenever a direction is idle. Counters are added to as
//! each transfer completes, so statistics are live. Half-close is propagated; the idle timeout
//! switches to `uplink_only` / `downlink_only` once one direction has finished, as in Xray.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::time::Sleep;

use crate::common::sys;
use crate::transport::{BoxStream, Peel, RawParts, RawSock};

pub mod pool;

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
    /// Use splice when both sides are raw sockets.
    pub splice: bool,
}

impl Default for RelayOpts {
    fn default() -> Self {
        RelayOpts {
            conn_idle: Duration::from_secs(300),
            uplink_only: Duration::from_secs(1),
            downlink_only: Duration::from_secs(1),
            buffer: pool::Adaptive::new(pool::DEFAULT_SIZE, pool::DEFAULT_SIZE, pool::MAX_SIZE),
            splice: true,
        }
    }
}

/// Live byte counters a relay adds to: uplink is client -> server.
#[derive(Clone, Default, Debug)]
pub struct Counters {
    pub up: Vec<Arc<AtomicU64>>,
    pub down: Vec<Arc<AtomicU64>>,
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
    pub spliced: bool,
    /// `Some` when a timeout ended it.
    pub timed_out: Option<&'static str>,
}

/// The last moment any byte moved, as milliseconds since `base`.
struct Activity {
    base: Instant,
    last_ms: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Activity {
            base: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }
    #[inline]
    fn touch(&self) {
        self.last_ms
            .store(self.base.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
    fn last(&self) -> Instant {
        self.base + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }
}

/// An idle timer whose deadline is re-read from `Activity` only when it fires.
struct IdleTimer {
    sleep: Pin<Box<Sleep>>,
    timeout: Duration,
    name: &'static str,
}

impl IdleTimer {
    fn new(timeout: Duration, name: &'static str) -> Self {
        IdleTimer {
            sleep: Box::pin(tokio::time::sleep(Self::span(timeout))),
            timeout,
            name,
        }
    }
    fn span(t: Duration) -> Duration {
        // Zero idle means "no limit" for connIdle; callers pass a tiny span for "at once".
        if t.is_zero() {
            Duration::from_secs(86400 * 365)
        } else {
            t
        }
    }
    fn set(&mut self, timeout: Duration, name: &'static str, activity: &Activity) {
        self.timeout = timeout;
        self.name = name;
        let _ = activity;
        self.sleep.as_mut().reset((Instant::now() + timeout).into());
    }
    fn poll_expired(&mut self, cx: &mut Context<'_>, activity: &Activity) -> Poll<&'static str> {
        loop {
            ready!(self.sleep.as_mut().poll(cx));
            if self.timeout.is_zero() {
                return Poll::Ready(self.name);
            }
            let deadline = activity.last() + self.timeout;
            if deadline <= Instant::now() {
                return Poll::Ready(self.name);
            }
            self.sleep.as_mut().reset(deadline.into());
        }
    }
}

/// Moves bytes both ways between the client side `a` and the server side `b` until both
/// directions finish, an error occurs, or a timeout fires.
///
/// What an idle connection keeps is this future, so it is laid out to be small: the set-up
/// (peeling both sides, writing bytes held above the sockets) runs in its own boxed future
/// that is gone before the relay loop starts, and the loop's state is plain structs polled by
/// hand (no readiness futures held per direction). Written as `fn -> impl Future` because an
/// `async fn` keeps each argument twice in its state (the argument and its moved copy).
#[allow(clippy::manual_async_fn)]
pub fn run<'a>(
    a: BoxStream,
    b: BoxStream,
    opts: &'a RelayOpts,
    counters: &'a Counters,
) -> impl Future<Output = io::Result<RelayStats>> + Send + 'a {
    async move {
        let (sides, up0, down0) = Box::pin(prepare(a, b, opts, counters)).await?;
        sides.relay(opts, counters, up0, down0).await
    }
}

/// The two sides as the relay loop drives them.
enum Sides {
    Splice {
        a: RawSock,
        b: RawSock,
        up: SpliceDir,
        down: SpliceDir,
    },
    Copy {
        a: BoxStream,
        b: BoxStream,
        up: CopyDir,
        down: CopyDir,
    },
}

impl Sides {
    fn copy(a: BoxStream, b: BoxStream, opts: &RelayOpts) -> Sides {
        Sides::Copy {
            a,
            b,
            up: CopyDir::new(opts.buffer),
            down: CopyDir::new(opts.buffer),
        }
    }

    /// Runs the loop; `up0` / `down0` bytes already moved during set-up.
    #[allow(clippy::manual_async_fn)]
    fn relay<'a>(
        mut self,
        opts: &'a RelayOpts,
        counters: &'a Counters,
        up0: u64,
        down0: u64,
    ) -> impl Future<Output = io::Result<RelayStats>> + Send + 'a {
        async move {
            let activity = Activity::new();
            let (up, down, timed_out, spliced) = match &mut self {
                Sides::Splice { a, b, up, down } => {
                    let poll_dir = |cx: &mut Context<'_>, dir: Dir| match dir {
                        Dir::Up => up.poll_splice(cx, a, b, &counters.up, &activity),
                        Dir::Down => down.poll_splice(cx, b, a, &counters.down, &activity),
                    };
                    let (u, d, t) = drive(poll_dir, opts, &activity).await?;
                    (u.unwrap_or(up.total), d.unwrap_or(down.total), t, true)
                }
                Sides::Copy { a, b, up, down } => {
                    let poll_dir = |cx: &mut Context<'_>, dir: Dir| match dir {
                        Dir::Up => up.poll_copy(
                            cx,
                            Pin::new(&mut **a),
                            Pin::new(&mut **b),
                            &counters.up,
                            &activity,
                        ),
                        Dir::Down => down.poll_copy(
                            cx,
                            Pin::new(&mut **b),
                            Pin::new(&mut **a),
                            &counters.down,
                            &activity,
                        ),
                    };
                    let (u, d, t) = drive(poll_dir, opts, &activity).await?;
                    (u.unwrap_or(up.total), d.unwrap_or(down.total), t, false)
                }
            };
            Ok(RelayStats {
                up: up0 + up,
                down: down0 + down,
                spliced,
                timed_out,
            })
        }
    }
}

/// Peels both sides (splice when both are raw sockets) and writes what was held above them.
/// Returns the sides and the bytes moved while doing so (uplink, downlink).
async fn prepare(
    a: BoxStream,
    b: BoxStream,
    opts: &RelayOpts,
    counters: &Counters,
) -> io::Result<(Sides, u64, u64)> {
    if !opts.splice {
        return Ok((Sides::copy(a, b, opts), 0, 0));
    }
    match (a.peel(), b.peel()) {
        (Peel::Raw(a), Peel::Raw(b)) => {
            // Bytes held above the sockets go first: what each side still had to write, then
            // what each side had read ahead (which belongs to the other side).
            write_raw(&a.sock, &a.write_pending).await?;
            write_raw(&b.sock, &b.write_pending).await?;
            write_raw(&b.sock, &a.read_pending).await?;
            add(&counters.up, a.read_pending.len());
            write_raw(&a.sock, &b.read_pending).await?;
            add(&counters.down, b.read_pending.len());
            let (up, down) = (a.read_pending.len() as u64, b.read_pending.len() as u64);
            let sides = Sides::Splice {
                a: a.sock,
                b: b.sock,
                up: SpliceDir::default(),
                down: SpliceDir::default(),
            };
            Ok((sides, up, down))
        }
        (a, b) => {
            let a = unpeel(a).await?;
            let b = unpeel(b).await?;
            Ok((Sides::copy(a, b, opts), 0, 0))
        }
    }
}

async fn unpeel(p: Peel) -> io::Result<BoxStream> {
    match p {
        Peel::Stream(s) => Ok(s),
        Peel::Raw(RawParts {
            sock,
            read_pending,
            write_pending,
        }) => {
            let mut s = sock.into_stream(read_pending);
            if !write_pending.is_empty() {
                s.write_all(&write_pending).await?;
            }
            Ok(s)
        }
    }
}

// ---------------------------------------------------------------- splice path

async fn write_raw(sock: &RawSock, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        sock.writable().await?;
        match sock.try_write(data) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// One direction of the splice path as a small state machine (polled, so an idle connection
/// keeps no readiness futures): bytes go socket -> pipe -> socket; the pipe is created on the
/// first byte.
#[derive(Default)]
struct SpliceDir {
    pipe: Option<sys::Pipe>,
    /// Bytes sitting in the pipe.
    left: usize,
    total: u64,
}

impl SpliceDir {
    fn poll_splice(
        &mut self,
        cx: &mut Context<'_>,
        from: &RawSock,
        to: &RawSock,
        counters: &[Arc<AtomicU64>],
        activity: &Activity,
    ) -> Poll<io::Result<u64>> {
        use std::os::fd::AsRawFd;
        loop {
            if self.left > 0 {
                let pr = match &self.pipe {
                    Some(p) => p.read.as_raw_fd(),
                    None => return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
                };
                match to.try_write_io(|| sys::splice(pr, to.fd(), self.left)) {
                    Ok(m) => {
                        self.left -= m;
                        self.total += m as u64;
                        add(counters, m);
                        activity.touch();
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        ready!(to.poll_write_ready(cx))?;
                    }
                    Err(e) => return Poll::Ready(Err(e)),
                }
                continue;
            }
            ready!(from.poll_read_ready(cx))?;
            let pw = match &self.pipe {
                Some(p) => p.write.as_raw_fd(),
                None => self
                    .pipe
                    .insert(sys::Pipe::new(pool::PIPE_SIZE)?)
                    .write
                    .as_raw_fd(),
            };
            // The pipe is empty here, so WouldBlock can only mean the socket has nothing to read.
            match from.try_read_io(|| sys::splice(from.fd(), pw, pool::PIPE_SIZE)) {
                Ok(0) => {
                    to.shutdown_write()?;
                    return Poll::Ready(Ok(self.total));
                }
                Ok(n) => self.left = n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

/// Which way a transfer goes: uplink is client -> server.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Dir {
    Up,
    Down,
}

/// How both directions of a relay ended: bytes of each finished direction, and the timer
/// that fired, if one did.
type Ended = (Option<u64>, Option<u64>, Option<&'static str>);

/// Polls both directions (through `poll_dir`) with the idle / half-close timers until both
/// finish, one fails, or a timer fires. A plain `poll_fn` (no async state machine around it):
/// this is what every relayed connection keeps while it lives.
fn drive<'a>(
    mut poll_dir: impl FnMut(&mut Context<'_>, Dir) -> Poll<io::Result<u64>> + 'a,
    opts: &'a RelayOpts,
    activity: &'a Activity,
) -> impl Future<Output = io::Result<Ended>> + 'a {
    let mut timer = IdleTimer::new(opts.conn_idle, "connIdle");
    let (mut up_n, mut down_n): (Option<u64>, Option<u64>) = (None, None);
    std::future::poll_fn(move |cx| loop {
        let mut progressed = false;
        if up_n.is_none() {
            if let Poll::Ready(r) = poll_dir(cx, Dir::Up) {
                up_n = Some(r?);
                progressed = true;
                if down_n.is_none() {
                    timer.set(opts.downlink_only, "downlinkOnly", activity);
                }
            }
        }
        if down_n.is_none() {
            if let Poll::Ready(r) = poll_dir(cx, Dir::Down) {
                down_n = Some(r?);
                progressed = true;
                if up_n.is_none() {
                    timer.set(opts.uplink_only, "uplinkOnly", activity);
                }
            }
        }
        if up_n.is_some() && down_n.is_some() {
            return Poll::Ready(Ok((up_n, down_n, None)));
        }
        if progressed {
            continue;
        }
        return match timer.poll_expired(cx, activity) {
            Poll::Ready(name) => Poll::Ready(Ok((up_n, down_n, Some(name)))),
            Poll::Pending => Poll::Pending,
        };
    })
}

// ---------------------------------------------------------------- buffered path

/// One direction of a buffered copy. The buffer goes back to the pool whenever the direction
/// waits for input with nothing left to write; its size follows the traffic (bulk transfers
/// get large buffers, so fewer and larger syscalls and segments per byte).
struct CopyDir {
    buf: Option<Box<[u8]>>,
    size: pool::Adaptive,
    pos: usize,
    cap: usize,
    read_done: bool,
    need_flush: bool,
    total: u64,
}

impl CopyDir {
    fn new(size: pool::Adaptive) -> Self {
        CopyDir {
            buf: None,
            size,
            pos: 0,
            cap: 0,
            read_done: false,
            need_flush: false,
            total: 0,
        }
    }

    fn poll_copy<R, W>(
        &mut self,
        cx: &mut Context<'_>,
        mut r: Pin<&mut R>,
        mut w: Pin<&mut W>,
        counters: &[Arc<AtomicU64>],
        activity: &Activity,
    ) -> Poll<io::Result<u64>>
    where
        R: AsyncRead + ?Sized,
        W: AsyncWrite + ?Sized,
    {
        loop {
            if self.pos == self.cap && !self.read_done {
                let want = self.size.size;
                if self.buf.as_ref().is_some_and(|b| b.len() < want) {
                    if let Some(b) = self.buf.take() {
                        pool::put(b);
                    }
                }
                let buf = self.buf.get_or_insert_with(|| pool::take(want));
                let room = buf.len();
                let mut rb = ReadBuf::new(buf);
                match r.as_mut().poll_read(cx, &mut rb) {
                    Poll::Pending => {
                        if let Some(b) = self.buf.take() {
                            pool::put(b);
                        }
                        if self.need_flush {
                            ready!(w.as_mut().poll_flush(cx))?;
                            self.need_flush = false;
                        }
                        return Poll::Pending;
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Ready(Ok(())) => {
                        let n = rb.filled().len();
                        self.size.record(n, room);
                        if n == 0 {
                            self.read_done = true;
                            if let Some(b) = self.buf.take() {
                                pool::put(b);
                            }
                        } else {
                            self.pos = 0;
                            self.cap = n;
                        }
                    }
                }
            }
            while self.pos < self.cap {
                let buf = self
                    .buf
                    .as_ref()
                    .expect("buffer held while data is pending");
                let n = ready!(w.as_mut().poll_write(cx, &buf[self.pos..self.cap]))?;
                if n == 0 {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                self.pos += n;
                self.total += n as u64;
                self.need_flush = true;
                add(counters, n);
                activity.touch();
            }
            if self.read_done {
                ready!(w.as_mut().poll_flush(cx))?;
                ready!(w.as_mut().poll_shutdown(cx))?;
                return Poll::Ready(Ok(self.total));
            }
        }
    }
}

impl Drop for CopyDir {
    fn drop(&mut self) {
        if let Some(b) = self.buf.take() {
            pool::put(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::Prefixed;
    use bytes::Bytes;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    async fn tcp_pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (s, _) = l.accept().await.unwrap();
        (c, s)
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
        let relay = tokio::spawn(async move {
            run(a, Box::new(b), &RelayOpts::default(), &c2)
                .await
                .unwrap()
        });
        let up = vec![7u8; 3 << 20];
        let down = vec![9u8; 2 << 20];
        let (got_client, got_server) = exchange(client, server, up.clone(), down.clone()).await;
        let st = relay.await.unwrap();
        assert!(st.spliced);
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
            run(Box::new(a), Box::new(b), &RelayOpts::default(), &c2)
                .await
                .unwrap()
        });
        let up: Vec<u8> = (0..1_000_000u32).map(|i| i as u8).collect();
        let down: Vec<u8> = (0..700_000u32).map(|i| (i * 7) as u8).collect();
        let (got_client, got_server) = exchange(client, server, up.clone(), down.clone()).await;
        let st = relay.await.unwrap();
        assert!(!st.spliced);
        assert_eq!(got_server, up);
        assert_eq!(got_client, down);
        assert_eq!(cs.up[0].load(Ordering::Relaxed), up.len() as u64);
        assert_eq!(cs.down[0].load(Ordering::Relaxed), down.len() as u64);
        assert_eq!(st.timed_out, None);
    }

    #[tokio::test]
    async fn idle_timeout_ends_a_silent_relay() {
        for splice in [true, false] {
            let (_client, a) = tcp_pair().await;
            let (b, _server) = tcp_pair().await;
            let opts = RelayOpts {
                conn_idle: Duration::from_millis(200),
                splice,
                ..RelayOpts::default()
            };
            let t = Instant::now();
            let st = run(Box::new(a), Box::new(b), &opts, &Counters::default())
                .await
                .unwrap();
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
            run(Box::new(a), Box::new(b), &opts, &Counters::default())
                .await
                .unwrap()
        });
        client.shutdown().await.unwrap();
        let st = tokio::time::timeout(Duration::from_secs(5), relay)
            .await
            .expect("relay ended")
            .unwrap();
        assert_eq!(st.timed_out, Some("downlinkOnly"));
    }
}
