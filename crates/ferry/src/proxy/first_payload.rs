//! "The header waits for the first payload": a client's request header (VLESS, Trojan,
//! Shadowsocks, ShadowsocksR, VMess, a Mux New frame, Vision's first padded block) leaves
//! with its first payload so both go in one packet, or alone once the client has waited this
//! long for one. The reading side starts the wait (a client that reads before it writes, as
//! for server-speaks-first protocols), the first write ends it. Reader and writer may be
//! different tasks, so ending the wait wakes a reader parked on it.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::time::Sleep;

/// One stream's wait for its first payload.
pub struct FirstPayloadWait {
    wait: Duration,
    state: State,
    /// The reader parked on the timer, woken when a write ends the wait.
    reader: Option<Waker>,
}

enum State {
    /// Not started: the reading side has not asked yet.
    Idle,
    Running(Pin<Box<Sleep>>),
    /// The wait is over (timed out) or was ended by a write.
    Over,
}

impl FirstPayloadWait {
    /// A wait of `wait` that starts when the reading side first polls it.
    pub fn new(wait: Duration) -> Self {
        FirstPayloadWait {
            wait,
            state: State::Idle,
            reader: None,
        }
    }

    /// A wait of `wait` that runs from now.
    pub fn started(wait: Duration) -> Self {
        FirstPayloadWait {
            wait,
            state: State::Running(Box::pin(tokio::time::sleep(wait))),
            reader: None,
        }
    }

    /// Reading side: `Ready` once the wait is over (the header goes alone now), starting it if
    /// it has not started; `Pending` until then, with the reader kept to be woken by
    /// [`FirstPayloadWait::end`].
    pub fn poll_over(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if matches!(self.state, State::Idle) {
            self.state = State::Running(Box::pin(tokio::time::sleep(self.wait)));
        }
        match &mut self.state {
            State::Running(t) => {
                if t.as_mut().poll(cx).is_ready() {
                    self.state = State::Over;
                    return Poll::Ready(());
                }
                self.reader = Some(cx.waker().clone());
                Poll::Pending
            }
            _ => Poll::Ready(()),
        }
    }

    /// The first payload came (or the header left some other way): no more waiting, and a
    /// reader parked on the wait goes on.
    pub fn end(&mut self) {
        self.state = State::Over;
        if let Some(w) = self.reader.take() {
            w.wake();
        }
    }

    /// Whether the wait is still to run out (started or not).
    pub fn waiting(&self) -> bool {
        !matches!(self.state, State::Over)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;
    use std::time::Instant;

    #[tokio::test]
    async fn the_wait_starts_with_the_reader_and_runs_out() {
        let mut w = FirstPayloadWait::new(Duration::from_millis(50));
        tokio::time::sleep(Duration::from_millis(100)).await;
        // Not started by time alone: the first poll starts it.
        let t0 = Instant::now();
        poll_fn(|cx| w.poll_over(cx)).await;
        assert!(
            t0.elapsed() >= Duration::from_millis(50),
            "{:?}",
            t0.elapsed()
        );
        assert!(!w.waiting());
        assert!(poll_fn(|cx| Poll::Ready(w.poll_over(cx))).await.is_ready());
    }

    #[tokio::test]
    async fn a_write_ends_the_wait_and_wakes_the_reader() {
        let w = std::sync::Arc::new(std::sync::Mutex::new(FirstPayloadWait::started(
            Duration::from_secs(60),
        )));
        let r = w.clone();
        let reader =
            tokio::spawn(async move { poll_fn(|cx| r.lock().unwrap().poll_over(cx)).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            !reader.is_finished(),
            "the reader waits for the first payload"
        );
        w.lock().unwrap().end();
        // Woken by the write, long before the 60 s timer.
        tokio::time::timeout(Duration::from_secs(10), reader)
            .await
            .expect("the reader was woken")
            .unwrap();
        assert!(!w.lock().unwrap().waiting());
    }
}
