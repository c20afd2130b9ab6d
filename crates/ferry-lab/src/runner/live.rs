//! The live line of the cell being measured: on a terminal, `label ... 12.3 s, 1.84 GB,
//! 152.0 MB/s now`, rewritten twice a second from the loadgen's confirmed bytes; nothing when
//! stderr is not a terminal or `CI` is set, so logs and CI output keep one line per cell.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::loadgen::progress;

/// A running live line; [`Live::finish`] (or drop) clears it and leaves `label ... ` for the
/// cell's summary.
pub(super) struct LiveLine {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    label: String,
}

/// Whether the live line shows: stderr is a terminal and this is not CI.
fn shown() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("CI").is_none()
}

impl LiveLine {
    /// Prints `label ... ` and, on a terminal, starts rewriting it with the cell's progress.
    pub(super) fn start(label: &str) -> LiveLine {
        LiveLine::start_shown(label, shown())
    }

    fn start_shown(label: &str, show: bool) -> LiveLine {
        eprint!("{label} ... ");
        let stop = Arc::new(AtomicBool::new(false));
        let thread = show.then(|| {
            let (stop, label) = (stop.clone(), label.to_string());
            std::thread::spawn(move || tick(&label, &stop))
        });
        LiveLine {
            stop,
            thread,
            label: label.to_string(),
        }
    }

    /// Stops the updates and leaves `label ... ` on the line.
    pub(super) fn finish(mut self) {
        self.end();
    }

    fn end(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
            eprint!("\r\x1b[K{} ... ", self.label);
        }
    }
}

impl Drop for LiveLine {
    fn drop(&mut self) {
        self.end();
    }
}

fn tick(label: &str, stop: &AtomicBool) {
    let t0 = Instant::now();
    let base = progress::moved();
    let (mut last_t, mut last_b) = (t0, base);
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
        if last_t.elapsed() < Duration::from_millis(500) {
            continue;
        }
        let (now, b) = (Instant::now(), progress::moved());
        let rate = (b - last_b) as f64 / now.duration_since(last_t).as_secs_f64() / 1e6;
        eprint!(
            "\r\x1b[K{label} ... {:.1} s, {}, {rate:.1} MB/s now",
            t0.elapsed().as_secs_f64(),
            bytes(b - base)
        );
        let _ = std::io::stderr().flush();
        (last_t, last_b) = (now, b);
    }
}

/// `n` bytes for a person: `512 B`, `3.4 MB`, `1.84 GB`.
fn bytes(n: u64) -> String {
    match n {
        n if n >= 1_000_000_000 => format!("{:.2} GB", n as f64 / 1e9),
        n if n >= 1_000_000 => format!("{:.1} MB", n as f64 / 1e6),
        n if n >= 1_000 => format!("{:.1} kB", n as f64 / 1e3),
        n => format!("{n} B"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_read_for_people() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(3_400_000), "3.4 MB");
        assert_eq!(bytes(1_840_000_000), "1.84 GB");
    }

    #[test]
    fn the_line_counts_what_the_loadgen_confirms_and_stops() {
        let quiet = LiveLine::start_shown("cell", false);
        assert!(quiet.thread.is_none());
        quiet.finish();
        let l = LiveLine::start_shown("cell", true);
        progress::add(1234);
        std::thread::sleep(Duration::from_millis(650));
        assert!(progress::moved() >= 1234);
        let t = Instant::now();
        l.finish();
        assert!(
            t.elapsed() < Duration::from_millis(500),
            "the ticker did not stop"
        );
    }
}
