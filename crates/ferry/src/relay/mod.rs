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

/// REALITY's stranger handed to the target for good: both ways with the relay's own loop, each
/// direction allowed 300 s after the other ended (the transport's
/// [`crate::transport::reality::server::StrangerRelay`]).
pub fn stranger_to_target(
    client: BoxStream,
    target: BoxStream,
) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
    Box::pin(async move {
        let opts = RelayOpts {
            uplink_only: Duration::from_secs(300),
            downlink_only: Duration::from_secs(300),
            ..Default::default()
        };
        let counters = Counters::default();
        let _ = run(client, target, &opts, &counters).await;
    })
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
mod tests;
