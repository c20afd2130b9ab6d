//! A tokio runtime whose threads live in one network namespace.

use std::fs::File;
use std::future::Future;
use std::io::Write;
use std::sync::Arc;

use anyhow::{anyhow, Context, Result};

use crate::sys;

/// A multi-threaded tokio runtime whose workers (and blocking threads) live in one namespace.
pub struct NsRuntime {
    rt: tokio::runtime::Runtime,
    ns: Arc<File>,
}

impl NsRuntime {
    pub fn new(ns: &str) -> Result<NsRuntime> {
        let f = Arc::new(
            File::open(format!("/var/run/netns/{ns}"))
                .with_context(|| format!("opening namespace {ns}"))?,
        );
        // Prove entering works before handing it to threads that cannot report failure.
        let probe = f.clone();
        std::thread::spawn(move || sys::enter_netns(&probe))
            .join()
            .map_err(|_| anyhow!("namespace probe thread panicked"))?
            .with_context(|| format!("entering namespace {ns}"))?;
        let g = f.clone();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .on_thread_start(move || {
                if let Err(e) = sys::enter_netns(&g) {
                    // Checked above; a failure now would put sockets in the wrong namespace.
                    let _ = writeln!(std::io::stderr(), "entering the namespace: {e}");
                    std::process::abort();
                }
            })
            .build()?;
        Ok(NsRuntime { rt, ns: f })
    }

    /// Runs `fut` to completion on a thread inside the namespace.
    pub fn block_on<F>(&self, fut: F) -> F::Output
    where
        F: Future + Send,
        F::Output: Send,
    {
        std::thread::scope(|s| {
            s.spawn(|| {
                if let Err(e) = sys::enter_netns(&self.ns) {
                    let _ = writeln!(std::io::stderr(), "entering the namespace: {e}");
                    std::process::abort();
                }
                self.rt.block_on(fut)
            })
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
        })
    }

    pub fn handle(&self) -> &tokio::runtime::Handle {
        self.rt.handle()
    }
}
