//! When an accept loop logs its failures, and how long it backs off after one.

use std::time::Duration;

/// How long the accept loop waits after a failed accept.
pub(super) const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);
/// At most one log line per listener per this interval about failed accepts.
pub(super) const ACCEPT_LOG_EVERY: Duration = Duration::from_secs(5);

/// When an accept loop logs its failures (EMFILE, ENFILE, ENOBUFS): at most one failure line per
/// `ACCEPT_LOG_EVERY`, with the count of the silent ones since the last line, and one line when
/// accepts succeed again after a logged failure. A listener that flaps (one accept fails, the next
/// succeeds and its dial fails for want of descriptors, ...) thus logs at most two lines per
/// interval, not two every back-off.
#[derive(Default)]
pub(super) struct AcceptLog {
    /// When the last failure line was logged.
    last_line: Option<std::time::Instant>,
    /// Failures since that line, not logged.
    silent: u64,
    /// Failures since the last successful accept that was logged as a recovery.
    all: u64,
    /// A failure line was logged and no recovery line since.
    announced: bool,
}

impl AcceptLog {
    /// One failed accept at `now`: `Some(silent failures since the last line)` when it is to be
    /// logged, `None` when it is only counted.
    pub(super) fn failed(&mut self, now: std::time::Instant) -> Option<u64> {
        self.all += 1;
        match self.last_line {
            Some(at) if now.duration_since(at) < ACCEPT_LOG_EVERY => {
                self.silent += 1;
                None
            }
            _ => {
                let n = std::mem::take(&mut self.silent);
                self.last_line = Some(now);
                self.announced = true;
                Some(n)
            }
        }
    }

    /// One successful accept: `Some(failures in all)` when a recovery line is due.
    pub(super) fn accepted(&mut self) -> Option<u64> {
        if !std::mem::take(&mut self.announced) {
            return None;
        }
        Some(std::mem::take(&mut self.all))
    }
}

#[cfg(test)]
mod tests {
    use super::{AcceptLog, ACCEPT_BACKOFF, ACCEPT_LOG_EVERY};
    use std::time::Instant;

    /// A listener that flaps every back-off for 12 s logs two lines per 5 s interval at most,
    /// and the counts it logs add up to every failure.
    #[test]
    fn a_flapping_listener_logs_twice_per_interval() {
        let mut log = AcceptLog::default();
        let t0 = Instant::now();
        let (mut lines, mut failures, mut counted) = (0, 0u64, 0u64);
        let mut t = t0;
        while t.duration_since(t0).as_secs() < 12 {
            failures += 1;
            if let Some(n) = log.failed(t) {
                lines += 1;
                counted += n + 1;
            }
            if let Some(all) = log.accepted() {
                lines += 1;
                assert!(all >= 1);
            }
            t += ACCEPT_BACKOFF;
        }
        let intervals = 1 + 12 / ACCEPT_LOG_EVERY.as_secs();
        assert_eq!(lines, 2 * intervals, "{lines} lines");
        // The silent failures of the last interval are reported with the next line.
        assert!(counted <= failures && failures - counted < 5_000 / 50 + 1);
    }

    /// Failing without a success in between: one line per interval, the recovery line carries
    /// every failure since the last recovery.
    #[test]
    fn a_long_failure_is_logged_once_per_interval_then_recovery() {
        let mut log = AcceptLog::default();
        let t0 = Instant::now();
        assert_eq!(log.accepted(), None, "no recovery line without a failure");
        assert_eq!(log.failed(t0), Some(0));
        assert_eq!(log.failed(t0 + ACCEPT_BACKOFF), None);
        assert_eq!(log.failed(t0 + ACCEPT_LOG_EVERY), Some(1));
        assert_eq!(log.accepted(), Some(3));
        assert_eq!(log.accepted(), None);
    }
}
