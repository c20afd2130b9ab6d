//! Certificates: loading (files or inline PEM), choosing one by SNI, picking up renewed files,
//! the system roots, and self-signed pairs for `ferry tls cert`.

use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::SystemTime;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// Where a certificate and its key come from.
#[derive(Clone, Debug)]
pub enum CertSource {
    /// `certificateFile` / `keyFile` (the key may be absent for `usage: "verify"`).
    Files { cert: PathBuf, key: Option<PathBuf> },
    /// `certificate` / `key` as PEM text.
    Inline { cert: String, key: Option<String> },
}

/// `certificates[].usage`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Usage {
    /// Served to clients (the default).
    Encipherment,
    /// A CA the client verifies servers with.
    Verify,
}

/// Which part of a certificate entry is at fault (so the config reader can name the field).
#[derive(Debug)]
pub enum CertError {
    Cert(String),
    Key(String),
}

impl fmt::Display for CertError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CertError::Cert(m) | CertError::Key(m) => f.write_str(m),
        }
    }
}

/// The modification stamp of a file pair, to notice renewals.
type Stamp = Option<(SystemTime, u64)>;

fn stamp(p: &std::path::Path) -> Stamp {
    let m = std::fs::metadata(p).ok()?;
    Some((m.modified().ok()?, m.len()))
}

/// One `certificates[]` entry, loaded.
pub struct CertificateEntry {
    pub source: CertSource,
    pub usage: Usage,
    /// `oneTimeLoading`: never re-read the files.
    pub one_time: bool,
    current: RwLock<Option<Arc<CertifiedKey>>>,
    chain: Vec<CertificateDer<'static>>,
    stamps: Mutex<(Stamp, Stamp)>,
}

impl fmt::Debug for CertificateEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertificateEntry")
            .field("source", &self.source)
            .field("usage", &self.usage)
            .finish()
    }
}

fn read(p: &std::path::Path) -> Result<Vec<u8>, String> {
    std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()))
}

fn parse_chain(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let chain: Vec<_> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("not a PEM certificate: {e}"))?;
    if chain.is_empty() {
        return Err("no PEM certificate found".into());
    }
    Ok(chain)
}

fn load_pair(
    cert_pem: &[u8],
    key_pem: &[u8],
) -> Result<(Arc<CertifiedKey>, Vec<CertificateDer<'static>>), CertError> {
    let chain = parse_chain(cert_pem).map_err(CertError::Cert)?;
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| CertError::Key(format!("not a PEM private key: {e}")))?;
    let signer = super::provider()
        .key_provider
        .load_private_key(key)
        .map_err(|e| CertError::Key(format!("unusable private key: {e}")))?;
    let ck = CertifiedKey::new(chain.clone(), signer);
    ck.keys_match()
        .map_err(|e| CertError::Key(format!("the key does not match the certificate: {e}")))?;
    Ok((Arc::new(ck), chain))
}

impl CertificateEntry {
    /// Loads an entry; errors say whether the certificate or the key is at fault.
    pub fn load(source: CertSource, usage: Usage, one_time: bool) -> Result<Self, CertError> {
        let (current, chain, stamps) = match &source {
            CertSource::Files { cert, key } => {
                let stamps = (stamp(cert), key.as_deref().and_then(stamp));
                let cert_pem = read(cert).map_err(CertError::Cert)?;
                match key {
                    Some(k) => {
                        let key_pem = read(k).map_err(CertError::Key)?;
                        let (ck, chain) = load_pair(&cert_pem, &key_pem)?;
                        (Some(ck), chain, stamps)
                    }
                    None => (
                        None,
                        parse_chain(&cert_pem).map_err(CertError::Cert)?,
                        stamps,
                    ),
                }
            }
            CertSource::Inline { cert, key } => match key {
                Some(k) => {
                    let (ck, chain) = load_pair(cert.as_bytes(), k.as_bytes())?;
                    (Some(ck), chain, (None, None))
                }
                None => (
                    None,
                    parse_chain(cert.as_bytes()).map_err(CertError::Cert)?,
                    (None, None),
                ),
            },
        };
        if usage == Usage::Encipherment && current.is_none() {
            return Err(CertError::Key("a served certificate needs its key".into()));
        }
        Ok(CertificateEntry {
            source,
            usage,
            one_time,
            current: RwLock::new(current),
            chain,
            stamps: Mutex::new(stamps),
        })
    }

    /// The certificate chain as loaded.
    pub fn chain(&self) -> &[CertificateDer<'static>] {
        &self.chain
    }

    /// The key pair to serve, re-read first if its files changed on disk. A renewal that
    /// fails to load is logged and the previous pair kept.
    fn certified(&self) -> Option<Arc<CertifiedKey>> {
        if let (
            false,
            CertSource::Files {
                cert,
                key: Some(key),
            },
        ) = (self.one_time, &self.source)
        {
            let now = (stamp(cert), stamp(key));
            let mut seen = self.stamps.lock().unwrap_or_else(|e| e.into_inner());
            if now != *seen {
                *seen = now;
                match read(cert)
                    .and_then(|c| read(key).map(|k| (c, k)))
                    .and_then(|(c, k)| load_pair(&c, &k).map_err(|e| e.to_string()))
                {
                    Ok((ck, _)) => {
                        tracing::info!("TLS certificate {} reloaded", cert.display());
                        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Some(ck);
                    }
                    Err(e) => tracing::warn!(
                        "TLS certificate {} changed but cannot be used ({e}); keeping the previous one",
                        cert.display()
                    ),
                }
            }
        }
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Whether this certificate is valid for `name` (exact or wildcard, as browsers match).
    fn serves(&self, name: &str) -> bool {
        // The pair as it is now: only the chosen entry is checked for renewal (`certified`).
        let current = self
            .current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let (Ok(sn), Some(leaf)) = (ServerName::try_from(name), current) else {
            return false;
        };
        let Some(der) = leaf.cert.first() else {
            return false;
        };
        match webpki::EndEntityCert::try_from(der) {
            Ok(ee) => ee.verify_is_valid_for_subject_name(&sn).is_ok(),
            Err(_) => false,
        }
    }
}

/// Chooses the certificate for a ClientHello: the first whose names cover the SNI, else the
/// first of all (or none under `rejectUnknownSni`).
#[derive(Debug)]
pub(super) struct Resolver {
    certs: Vec<Arc<CertificateEntry>>,
    reject_unknown: bool,
}

impl Resolver {
    pub(super) fn new(certs: Vec<Arc<CertificateEntry>>, reject_unknown: bool) -> Self {
        Resolver {
            certs,
            reject_unknown,
        }
    }
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        if self.certs.len() == 1 && !self.reject_unknown {
            return self.certs[0].certified();
        }
        if let Some(sni) = hello.server_name() {
            if let Some(c) = self.certs.iter().find(|c| c.serves(sni)) {
                return c.certified();
            }
        }
        if self.reject_unknown {
            tracing::info!(
                "TLS handshake refused: SNI {:?} matches no certificate (rejectUnknownSni)",
                hello.server_name().unwrap_or("")
            );
            return None;
        }
        self.certs.first().and_then(|c| c.certified())
    }
}

/// SHA-256 of a DER certificate.
pub fn sha256(der: &[u8]) -> [u8; 32] {
    let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, der);
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

/// The system's root certificates, loaded once.
pub(super) fn system_roots() -> &'static [CertificateDer<'static>] {
    static ROOTS: OnceLock<Vec<CertificateDer<'static>>> = OnceLock::new();
    ROOTS.get_or_init(|| {
        let r = rustls_native_certs::load_native_certs();
        for e in r.errors.iter().take(3) {
            tracing::warn!("system root certificates: {e}");
        }
        r.certs
    })
}

/// A self-signed certificate and key (`ferry tls cert`).
pub struct GeneratedCert {
    pub cert_pem: String,
    pub key_pem: String,
    /// SHA-256 of the certificate, for `pinnedPeerCertSha256`.
    pub pin: [u8; 32],
}

/// Generates a self-signed ECDSA P-256 certificate for `names` (DNS names or IPs).
pub fn generate_self_signed(names: &[String], days: u32) -> Result<GeneratedCert, String> {
    let mut params = rcgen::CertificateParams::new(names.to_vec()).map_err(|e| e.to_string())?;
    let mut dn = rcgen::DistinguishedName::new();
    dn.push(
        rcgen::DnType::CommonName,
        names.first().cloned().unwrap_or_default(),
    );
    params.distinguished_name = dn;
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_err(|e| e.to_string())?
        .as_secs() as i64;
    params.not_before = rcgen::date_time_ymd(1970, 1, 1) + time_secs(now - 3600);
    params.not_after = rcgen::date_time_ymd(1970, 1, 1) + time_secs(now + days as i64 * 86400);
    let key = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
    let cert = params.self_signed(&key).map_err(|e| e.to_string())?;
    Ok(GeneratedCert {
        pin: sha256(cert.der()),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

fn time_secs(s: i64) -> std::time::Duration {
    std::time::Duration::from_secs(s.max(0) as u64)
}
