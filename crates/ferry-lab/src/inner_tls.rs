//! Inner TLS: loadgen (the TLS client) and receiver (the TLS server) speak TLS to each other
//! through the proxy chain, as a browser and a web server would. XTLS Vision only shows what it
//! does on such traffic: it pads the inner handshake, then stops encrypting twice once it has
//! seen the inner TLS 1.3 application data. The lab protocol (header, payload, acknowledgements)
//! runs inside the TLS session unchanged; throughput counts the inner plaintext.
//!
//! The receiver needs no option: a connection whose first byte is a TLS handshake record (0x16,
//! the lab header starts with `F`) is accepted as TLS, in the version the client offers (1.2 or
//! 1.3). The client names its record size in its server name (`r<BYTES>.inner.ferry-lab.test`)
//! so the receiver writes records of the same size. The receiver's certificate is self-signed
//! (rcgen) per process; the client accepts any certificate but checks the handshake signatures.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use anyhow::{anyhow, bail, Context, Result};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, ServerConfig, SignatureScheme};
use tokio::net::TcpStream;

/// The largest TLS record plaintext (and the default record size).
pub const MAX_RECORD: usize = 16384;
/// The smallest record size accepted (rustls's lower bound on a record is 32 bytes with its
/// 5-byte header).
pub const MIN_RECORD: usize = 32;
/// rustls counts the 5-byte record header in `max_fragment_size`.
const RECORD_HEADER: usize = 5;
/// The server names end with this; the first label carries the record size.
const NAME_SUFFIX: &str = "inner.ferry-lab.test";
/// rustls reads at most one record (about 16 KiB) from its transport at a time; a buffer this
/// size under it turns those reads into one socket read per 256 KiB, as the plain lab reads.
const READ_BUF: usize = 256 * 1024;
/// Plaintext rustls encrypts ahead of the socket (its default is 64 KiB): a whole 128 KiB
/// lab write goes out in one vectored socket write.
const WRITE_BUF: usize = 256 * 1024;

/// The transport under an inner TLS session.
pub type Socket = tokio::io::BufReader<TcpStream>;
/// loadgen's end of an inner TLS session.
pub type ClientStream = tokio_rustls::client::TlsStream<Socket>;
/// The receiver's end of an inner TLS session.
pub type ServerStream = tokio_rustls::server::TlsStream<Socket>;

/// The inner TLS version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
pub enum TlsVersion {
    #[value(name = "1.3")]
    #[serde(rename = "1.3")]
    V13,
    #[value(name = "1.2")]
    #[serde(rename = "1.2")]
    V12,
}

impl TlsVersion {
    fn rustls(self) -> &'static rustls::SupportedProtocolVersion {
        match self {
            TlsVersion::V13 => &rustls::version::TLS13,
            TlsVersion::V12 => &rustls::version::TLS12,
        }
    }

    /// "1.3" / "1.2".
    pub fn label(self) -> &'static str {
        match self {
            TlsVersion::V13 => "1.3",
            TlsVersion::V12 => "1.2",
        }
    }
}

/// Names a negotiated version the way [`TlsVersion::label`] does.
fn version_label(v: Option<rustls::ProtocolVersion>) -> String {
    match v {
        Some(rustls::ProtocolVersion::TLSv1_3) => "1.3".into(),
        Some(rustls::ProtocolVersion::TLSv1_2) => "1.2".into(),
        Some(other) => format!("{other:?}"),
        None => "?".into(),
    }
}

/// The crypto of both ends: aws-lc-rs, AES-128-GCM first as browsers and Go's crypto/tls
/// prefer it (rustls's own first choice is AES-256-GCM), and X25519 as the only key exchange.
/// rustls's first
/// choice, the post-quantum X25519MLKEM768, makes a ServerHello of about 1.2 KB: in records of
/// 1K it is cut in two, its supported_versions extension lands in the second record, and
/// Vision's filter (Xray's and Ferry's alike) reads the first as a complete TLS 1.2
/// ServerHello, so nothing is ever spliced. Browsers send their handshake in 16K records,
/// where this does not happen; the lab keeps the handshake small for every record size.
fn provider() -> Arc<CryptoProvider> {
    static P: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    P.get_or_init(|| {
        let mut p = rustls::crypto::aws_lc_rs::default_provider();
        p.kx_groups = vec![rustls::crypto::aws_lc_rs::kx_group::X25519];
        // A stable sort: AES-128-GCM of each version first, the rest in rustls's order.
        p.cipher_suites.sort_by_key(|s| {
            !matches!(
                s.suite(),
                rustls::CipherSuite::TLS13_AES_128_GCM_SHA256
                    | rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
            )
        });
        Arc::new(p)
    })
    .clone()
}

/// `max_fragment_size` for records of `record` plaintext bytes.
fn fragment(record: usize) -> Option<usize> {
    (record < MAX_RECORD).then_some(record + RECORD_HEADER)
}

/// Checks a record size from the command line.
pub fn check_record(record: u64) -> Result<usize> {
    if !(MIN_RECORD as u64..=MAX_RECORD as u64).contains(&record) {
        bail!("--record must be {MIN_RECORD}..={MAX_RECORD} bytes, not {record}");
    }
    Ok(record as usize)
}

/// The client side: loadgen's connections.
#[derive(Clone)]
pub struct InnerTls {
    pub version: TlsVersion,
    /// Plaintext bytes per TLS record, both directions.
    pub record: usize,
    config: Arc<ClientConfig>,
}

impl std::fmt::Debug for InnerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InnerTls")
            .field("version", &self.version)
            .field("record", &self.record)
            .finish()
    }
}

impl serde::Serialize for InnerTls {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("InnerTls", 4)?;
        st.serialize_field("version", &self.version)?;
        st.serialize_field("record", &self.record)?;
        st.serialize_field("key_exchange", "X25519")?;
        st.serialize_field("cipher", "AES-128-GCM")?;
        st.end()
    }
}

impl InnerTls {
    /// A client of `version` writing records of `record` plaintext bytes.
    pub fn new(version: TlsVersion, record: usize) -> Result<InnerTls> {
        check_record(record as u64)?;
        let mut c = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[version.rustls()])
            .context("inner TLS client config")?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCert(provider())))
            .with_no_client_auth();
        c.max_fragment_size = fragment(record);
        Ok(InnerTls {
            version,
            record,
            config: Arc::new(c),
        })
    }

    /// "inner TLS 1.3 (X25519, AES-128-GCM), 16384-byte records".
    pub fn describe(&self) -> String {
        format!(
            "inner TLS {} (X25519, AES-128-GCM), {}-byte records",
            self.version.label(),
            self.record
        )
    }

    /// The TLS handshake with the receiver over `s` (already through the chain).
    pub async fn connect(&self, s: TcpStream) -> Result<ClientStream> {
        let name = ServerName::try_from(format!("r{}.{NAME_SUFFIX}", self.record))
            .map_err(|e| anyhow!("inner TLS server name: {e}"))?;
        let t = tokio_rustls::TlsConnector::from(self.config.clone())
            .connect(name, tokio::io::BufReader::with_capacity(READ_BUF, s))
            .await
            .context("inner TLS handshake with the receiver")?;
        let mut t = t;
        t.get_mut().1.set_buffer_limit(Some(WRITE_BUF));
        let got = t.get_ref().1.protocol_version();
        if got != Some(self.version.rustls().version) {
            bail!(
                "inner TLS: negotiated {} instead of {}",
                version_label(got),
                self.version.label()
            );
        }
        Ok(t)
    }
}

/// Accepts every certificate (the receiver's is self-signed per process) but verifies the
/// handshake signatures, so both ends do a real handshake's work.
#[derive(Debug)]
struct AnyCert(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

// ---------------------------------------------------------------------------------------------
// The server side: the receiver.

/// Whether a connection's first byte opens a TLS handshake record.
pub fn looks_like_tls(first: u8) -> bool {
    first == 0x16
}

/// The receiver's self-signed certificate, made once per process.
fn server_cert() -> Result<(Vec<CertificateDer<'static>>, PrivatePkcs8KeyDer<'static>)> {
    static C: OnceLock<Result<(CertificateDer<'static>, Vec<u8>), String>> = OnceLock::new();
    let made = C.get_or_init(|| {
        rcgen::generate_simple_self_signed(vec![format!("*.{NAME_SUFFIX}")])
            .map(|ck| (ck.cert.der().clone(), ck.signing_key.serialize_der()))
            .map_err(|e| e.to_string())
    });
    match made {
        Ok((c, k)) => Ok((vec![c.clone()], PrivatePkcs8KeyDer::from(k.clone()))),
        Err(e) => bail!("inner TLS certificate: {e}"),
    }
}

/// The server config writing records of `record` plaintext bytes (made once per size).
fn server_config(record: usize) -> Result<Arc<ServerConfig>> {
    static CACHE: OnceLock<Mutex<HashMap<usize, Arc<ServerConfig>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(c) = cache.lock().ok().and_then(|m| m.get(&record).cloned()) {
        return Ok(c);
    }
    let (chain, key) = server_cert()?;
    let mut c = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .context("inner TLS server config")?
        .with_no_client_auth()
        .with_single_cert(chain, PrivateKeyDer::Pkcs8(key))
        .context("inner TLS server certificate")?;
    c.max_fragment_size = fragment(record);
    let c = Arc::new(c);
    if let Ok(mut m) = cache.lock() {
        m.insert(record, c.clone());
    }
    Ok(c)
}

/// The record size a client named in its server name; the maximum when it named none.
fn record_from_name(name: Option<&str>) -> usize {
    name.and_then(|n| n.strip_suffix(NAME_SUFFIX))
        .and_then(|n| n.strip_prefix('r'))
        .and_then(|n| n.strip_suffix('.'))
        .and_then(|n| n.parse::<usize>().ok())
        .filter(|r| (MIN_RECORD..=MAX_RECORD).contains(r))
        .unwrap_or(MAX_RECORD)
}

/// What the receiver saw of a TLS connection.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Accepted {
    /// "1.3" or "1.2".
    pub version: String,
    /// Plaintext bytes per record the receiver writes.
    pub record: usize,
    /// The negotiated cipher suite.
    pub cipher: String,
}

/// Completes the server side of an inner TLS handshake on `s`.
pub async fn accept(s: TcpStream) -> Result<(ServerStream, Accepted)> {
    let s = tokio::io::BufReader::with_capacity(READ_BUF, s);
    let start = tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), s)
        .await
        .context("inner TLS: reading the ClientHello")?;
    let record = record_from_name(start.client_hello().server_name());
    let t = start
        .into_stream(server_config(record)?)
        .await
        .context("inner TLS handshake with the loadgen")?;
    let mut t = t;
    t.get_mut().1.set_buffer_limit(Some(WRITE_BUF));
    let conn = t.get_ref().1;
    let version = version_label(conn.protocol_version());
    let cipher = conn
        .negotiated_cipher_suite()
        .map(|c| format!("{:?}", c.suite()))
        .unwrap_or_default();
    Ok((
        t,
        Accepted {
            version,
            record,
            cipher,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_sizes_travel_in_the_server_name() {
        assert_eq!(record_from_name(Some("r1024.inner.ferry-lab.test")), 1024);
        assert_eq!(record_from_name(Some("r16384.inner.ferry-lab.test")), 16384);
        assert_eq!(
            record_from_name(Some("r99999.inner.ferry-lab.test")),
            MAX_RECORD
        );
        assert_eq!(record_from_name(Some("example.com")), MAX_RECORD);
        assert_eq!(record_from_name(None), MAX_RECORD);
        assert_eq!(fragment(1024), Some(1029));
        assert_eq!(fragment(MAX_RECORD), None);
        assert!(check_record(16).is_err());
        assert!(check_record(16385).is_err());
        assert_eq!(check_record(1024).unwrap(), 1024);
    }
}
