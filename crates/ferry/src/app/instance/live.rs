//! Live-connection counting: what a stop waits on to drain.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use crate::stats::CONNECTIONS;

/// Counts live connections so a stop can wait for them.
#[derive(Default)]
pub struct Live {
    n: AtomicUsize,
    zero: Notify,
}

pub(crate) struct LiveGuard(Arc<Live>);
impl Drop for LiveGuard {
    fn drop(&mut self) {
        CONNECTIONS.fetch_sub(1, Ordering::Relaxed);
        if self.0.n.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.zero.notify_waiters();
        }
    }
}

impl Live {
    pub(super) fn enter(self: &Arc<Self>) -> LiveGuard {
        CONNECTIONS.fetch_add(1, Ordering::Relaxed);
        self.n.fetch_add(1, Ordering::AcqRel);
        LiveGuard(self.clone())
    }
    pub fn count(&self) -> usize {
        self.n.load(Ordering::Acquire)
    }
    /// Waits until no connection is live, or `grace` passes. Returns the number still live.
    pub async fn drain(&self, grace: Duration) -> usize {
        let _ = tokio::time::timeout(grace, async {
            loop {
                let notified = self.zero.notified();
                if self.count() == 0 {
                    return;
                }
                notified.await;
            }
        })
        .await;
        self.count()
    }
}
