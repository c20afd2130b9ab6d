//! The run's self-signed certificate (openssl), for the TLS scenarios.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// The self-signed certificate of a run.
#[derive(Clone, Debug)]
pub(super) struct Cert {
    pub(super) cert: PathBuf,
    pub(super) key: PathBuf,
    pub(super) sha256: String,
}

pub(super) const SERVER_NAME: &str = "lab.ferry.test";
/// The REALITY scenarios' website (their `target`, nginx) serves this name with the same
/// certificate (`{{reality_sni}}`).
const REALITY_SITE: &str = "reality.test";

pub(super) fn make_cert(dir: &Path) -> Result<Cert> {
    let cert = dir.join("cert.pem");
    let key = dir.join("key.pem");
    let out = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-days", "30", "-subj"])
        .arg(format!("/CN={SERVER_NAME}"))
        .arg("-addext")
        .arg(format!(
            "subjectAltName=DNS:{SERVER_NAME},DNS:{REALITY_SITE}"
        ))
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .context("running openssl")?;
    if !out.status.success() {
        bail!(
            "openssl req failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let fp = Command::new("openssl")
        .args(["x509", "-noout", "-fingerprint", "-sha256", "-in"])
        .arg(&cert)
        .output()
        .context("running openssl")?;
    let text = String::from_utf8_lossy(&fp.stdout);
    let hex: String = text
        .split('=')
        .nth(1)
        .unwrap_or("")
        .trim()
        .replace(':', "")
        .to_ascii_lowercase();
    if hex.len() != 64 {
        bail!("could not read the certificate fingerprint from {text:?}");
    }
    Ok(Cert {
        cert,
        key,
        sha256: hex,
    })
}
