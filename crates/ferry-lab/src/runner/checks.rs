//! The receiver's counts checked against what loadgen verified.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use crate::plan::{Test, HANDSHAKE_MSG};
use crate::receiver;

use super::ctx::Ctx;
use super::jobs::Job;

impl Ctx<'_> {
    /// The receiver's own counts must agree with what loadgen verified.
    pub(super) fn check_receiver(
        &self,
        reports: &receiver::Reports,
        job: &Job,
        per: u64,
    ) -> Result<()> {
        let want = job.param + 1; // plus the warm-up connection
        let t0 = Instant::now();
        let mut seen = Vec::new();
        while t0.elapsed() < Duration::from_secs(1) {
            seen.extend(reports.take());
            if seen.len() >= want {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        for r in &seen {
            if let Some(e) = &r.error {
                bail!("receiver: {e}");
            }
            // The receiver must have served the inner TLS asked for (and none when none was).
            let want_tls = self
                .o
                .inner_tls
                .as_ref()
                .map(|t| (t.version.label().to_string(), t.record));
            let got_tls = r.tls.as_ref().map(|t| (t.version.clone(), t.record));
            if want_tls != got_tls {
                bail!("receiver: inner TLS {got_tls:?}, expected {want_tls:?}");
            }
            let expect_mode = if job.test == Test::Reverse {
                crate::wire::Mode::Download
            } else {
                crate::wire::Mode::Upload
            };
            if r.mode == Some(expect_mode) && r.bytes != per && r.bytes != 1 << 20 {
                bail!(
                    "byte-count mismatch at the receiver: {} bytes on a connection that carried {per}",
                    r.bytes
                );
            }
        }
        Ok(())
    }
}

/// The receiver must have echoed every connection, exactly (its report of a connection comes
/// when the chain has passed the close on).
pub(super) fn wait_exact_echoes(reports: &receiver::Reports, want: usize) -> Result<()> {
    let mut echoed = 0;
    let t0 = Instant::now();
    while echoed < want && t0.elapsed() < Duration::from_secs(5) {
        for r in reports.take() {
            if let Some(e) = &r.error {
                bail!("receiver: {e}");
            }
            if r.mode == Some(crate::wire::Mode::Echo) {
                if r.bytes != HANDSHAKE_MSG as u64 {
                    bail!(
                        "byte-count mismatch at the receiver: an echo connection carried {} bytes, not {HANDSHAKE_MSG}",
                        r.bytes
                    );
                }
                echoed += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if echoed != want {
        bail!("the receiver echoed {echoed} connections, loadgen made {want}");
    }
    Ok(())
}

/// Takes the receiver's reports so far: how many were echo connections (an error it reported
/// fails the measurement).
pub(super) fn echoes(reports: &receiver::Reports) -> Result<usize> {
    let mut n = 0;
    for r in reports.take() {
        if let Some(e) = &r.error {
            bail!("receiver: {e}");
        }
        if r.mode == Some(crate::wire::Mode::Echo) {
            n += 1;
        }
    }
    Ok(n)
}
