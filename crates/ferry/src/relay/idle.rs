//! Idle and half-close timers, and the loop that polls both directions of a relay under them.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use tokio::time::Sleep;

use super::RelayOpts;

/// The last moment any byte moved, as milliseconds since `base`.
pub(super) struct Activity {
    base: Instant,
    last_ms: AtomicU64,
}

impl Activity {
    pub(super) fn new() -> Self {
        Activity {
            base: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }
    #[inline]
    pub(super) fn touch(&self) {
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

/// Which way a transfer goes: uplink is client -> server.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Dir {
    Up,
    Down,
}

/// How both directions of a relay ended: bytes of each finished direction, and the timer
/// that fired, if one did.
pub(super) type Ended = (Option<u64>, Option<u64>, Option<&'static str>);

/// Polls both directions (through `poll_dir`) with the idle / half-close timers until both
/// finish, one fails, or a timer fires. A plain `poll_fn` (no async state machine around it):
/// this is what every relayed connection keeps while it lives.
pub(super) fn drive<'a>(
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
