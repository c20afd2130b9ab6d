//! Where the binaries come from: the peers' folder, and ferry built from this workspace.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Context, Result};

/// The folder scripts/peers.sh installs into.
pub fn peers_dir() -> PathBuf {
    if let Ok(p) = std::env::var("FERRY_PEERS") {
        return PathBuf::from(p);
    }
    let cache = std::env::var("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into())).join(".cache")
        });
    cache.join("ferry/peers/bin")
}

/// The workspace root (two levels above this crate).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Builds ferry in release mode and returns the binary path.
pub fn build_ferry() -> Result<PathBuf> {
    let root = workspace_root();
    eprintln!("building ferry: cargo build --release -p ferry");
    let st = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "--release", "-p", "ferry"])
        .current_dir(&root)
        .status()
        .context("running cargo")?;
    if !st.success() {
        bail!("cargo build --release -p ferry failed");
    }
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root.join("target"));
    Ok(target.join("release/ferry"))
}
