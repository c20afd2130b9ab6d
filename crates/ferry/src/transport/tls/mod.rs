//! TLS (`streamSettings.security: "tls"`): a [`Layer`] of the acceptor and dialer chains, on
//! rustls with aws-lc-rs. The server picks its certificate by SNI among several, re-reads
//! certificate files that changed on disk (certbot renewals) for the next handshake, and can
//! refuse unknown names; the client verifies the server as Xray does (`verify`): the roots, the
//! pins, other names, or not at all (`allowInsecure`).

mod capture;
mod certs;
mod der;
mod stream;
mod suites;
mod verify;

use std::io;
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, ServerConfig, ServerConnection};

use super::{BoxStream, Layer};
use crate::common::{Address, Destination};
use crate::session::ConnInfo;

pub use super::outer_tls::OuterTls;
pub use certs::{
    generate_self_signed, CertError, CertSource, CertificateEntry, GeneratedCert, Usage,
};
pub use stream::{Handover, NotTls, TlsStream};
pub use suites::aes_hardware;
pub use verify::chain_hash;

/// The crypto provider every TLS config uses.
pub fn provider() -> Arc<CryptoProvider> {
    static P: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    P.get_or_init(|| {
        // AES-128-GCM first, as Go orders them on AES hardware: as strong in practice and a
        // third cheaper than AES-256. A server follows the client's order, so a client that
        // prefers ChaCha20 (no AES hardware) still gets it.
        let mut p = rustls::crypto::aws_lc_rs::default_provider();
        p.cipher_suites = suites::aes_first();
        Arc::new(p)
    })
    .clone()
}

/// A TLS protocol version Ferry can speak.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Version {
    Tls12,
    Tls13,
}

/// `tlsSettings`, understood.
#[derive(Clone, Debug, Default)]
pub struct TlsSettings {
    /// Client: SNI and the name verified (default: the address dialed).
    pub server_name: Option<String>,
    /// Offered (client) or accepted (server) ALPN protocols, in order of preference.
    pub alpn: Vec<String>,
    pub min_version: Option<Version>,
    pub max_version: Option<Version>,
    /// Client: `pinnedPeerCertSha256`, SHA-256 of the leaf (accepted as it is) or of a CA of
    /// the chain (then the only trust anchor).
    pub pins: Vec<[u8; 32]>,
    /// Client: `verifyPeerCertByName` / `verifyPeerCertInNames`, the names the chain is
    /// verified for instead of the name dialed.
    pub verify_names: Vec<String>,
    /// Client: `pinnedPeerCertificateChainSha256` ([`chain_hash`] of the chain sent).
    pub chain_pins: Vec<[u8; 32]>,
    /// Client: `pinnedPeerCertificatePublicKeySha256` (SHA-256 of a SubjectPublicKeyInfo of
    /// the verified chain).
    pub key_pins: Vec<[u8; 32]>,
    /// Client: skip the verification against the roots (pins still apply).
    pub allow_insecure: bool,
    /// Client: do not load the system's root certificates.
    pub disable_system_root: bool,
    /// Server: refuse a handshake whose SNI matches no certificate.
    pub reject_unknown_sni: bool,
    /// Session tickets (server) and resumption (client).
    pub session_resumption: bool,
    /// Server: certificates to serve; client: extra roots (`usage: "verify"`).
    pub certificates: Vec<Arc<CertificateEntry>>,
}

impl TlsSettings {
    fn versions(&self) -> Vec<&'static rustls::SupportedProtocolVersion> {
        let lo = self.min_version.unwrap_or(Version::Tls12);
        let hi = self.max_version.unwrap_or(Version::Tls13);
        let mut v = Vec::new();
        if lo <= Version::Tls13 && hi >= Version::Tls13 {
            v.push(&rustls::version::TLS13);
        }
        if lo <= Version::Tls12 && hi >= Version::Tls12 {
            v.push(&rustls::version::TLS12);
        }
        v
    }

    fn alpn_bytes(&self) -> Vec<Vec<u8>> {
        self.alpn.iter().map(|a| a.as_bytes().to_vec()).collect()
    }

    /// The rustls server config (certificates must be present), with Go's cipher order for
    /// this machine and a client that prefers AES-GCM.
    pub fn server_config(&self) -> Result<ServerConfig, String> {
        self.server_config_for(suites::aes_hardware())
    }

    /// The server's certificates, picked by SNI.
    fn resolver(&self) -> Result<certs::Resolver, String> {
        let serving: Vec<_> = self
            .certificates
            .iter()
            .filter(|c| c.usage == Usage::Encipherment)
            .cloned()
            .collect();
        if serving.is_empty() {
            return Err("a TLS inbound needs a certificate (certificates[])".into());
        }
        Ok(certs::Resolver::new(serving, self.reject_unknown_sni))
    }

    /// The rustls server config answering with Go's cipher order when AES-GCM comes first
    /// (`aes`: AES hardware here and a client preferring it) or ChaCha20 does.
    fn server_config_for(&self, aes: bool) -> Result<ServerConfig, String> {
        let resolver = self.resolver()?;
        let mut c = ServerConfig::builder_with_provider(suites::server_provider(aes))
            .with_protocol_versions(&self.versions())
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(resolver));
        // As Go: the server's order, not the client's.
        c.ignore_client_order = true;
        c.alpn_protocols = self.alpn_bytes();
        // TLS 1.3 connections go on in Ferry's own record layer after the handshake.
        c.key_log = Arc::new(capture::TrafficSecretLog);
        c.enable_secret_extraction = true;
        if self.session_resumption {
            c.ticketer = rustls::crypto::aws_lc_rs::Ticketer::new().map_err(|e| e.to_string())?;
        } else {
            // As Xray: no session tickets unless enableSessionResumption.
            c.send_tls13_tickets = 0;
            c.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        }
        Ok(c)
    }

    /// The rustls server config for QUIC: TLS 1.3 only, ALPN as configured (`h3` when none
    /// is), no session tickets (Xray's QUIC servers take no 0-RTT).
    pub fn quic_server_config(&self) -> Result<ServerConfig, String> {
        let resolver = self.resolver()?;
        let mut c = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(resolver));
        c.alpn_protocols = match self.alpn.is_empty() {
            true => vec![b"h3".to_vec()],
            false => self.alpn_bytes(),
        };
        c.send_tls13_tickets = 0;
        c.max_early_data_size = 0;
        Ok(c)
    }

    /// The rustls client config for QUIC: TLS 1.3, ALPN `h3` (as quic-go's HTTP/3 client
    /// sends whatever it is given), the server verified as over TCP.
    pub fn quic_client_config(&self) -> Result<ClientConfig, String> {
        let verifier = verify::Verifier::new(self)?;
        let mut c = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| e.to_string())?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
            .with_no_client_auth();
        c.alpn_protocols = vec![b"h3".to_vec()];
        Ok(c)
    }

    /// The rustls client config.
    pub fn client_config(&self) -> Result<ClientConfig, String> {
        let b = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&self.versions())
            .map_err(|e| e.to_string())?;
        let verifier = verify::Verifier::new(self)?;
        let mut c = b
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
            .with_no_client_auth();
        c.alpn_protocols = self.alpn_bytes();
        if !self.session_resumption {
            c.resumption = rustls::client::Resumption::disabled();
            // TLS 1.3 connections go on in Ferry's own record layer after the handshake (with
            // resumption on they stay with rustls, which keeps the tickets the server sends).
            c.key_log = Arc::new(capture::TrafficSecretLog);
            c.enable_secret_extraction = true;
        }
        Ok(c)
    }
}

/// The TLS layer of a chain: a server config for inbounds, a client config for outbounds.
pub struct TlsLayer {
    server: Option<Arc<ServerConfig>>,
    /// With AES hardware: the config for a client that does not prefer AES-GCM.
    server_chacha: Option<Arc<ServerConfig>>,
    client: Option<Arc<ClientConfig>>,
    server_name: Option<String>,
    /// What it was built from (QUIC builds its own configs from it).
    settings: Arc<TlsSettings>,
}

impl std::fmt::Debug for TlsLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsLayer")
            .field("server", &self.server.is_some())
            .field("server_name", &self.server_name)
            .finish()
    }
}

impl TlsLayer {
    /// The settings it was built from.
    pub fn settings(&self) -> &TlsSettings {
        &self.settings
    }

    /// A client's configured `serverName`.
    pub fn server_name(&self) -> Option<&str> {
        self.server_name.as_deref()
    }

    /// The ALPN protocols a client offers.
    pub fn client_alpn(&self) -> Vec<Vec<u8>> {
        self.client
            .as_ref()
            .map(|c| c.alpn_protocols.clone())
            .unwrap_or_default()
    }

    /// The server side of `s`.
    pub fn server(s: &TlsSettings) -> Result<TlsLayer, String> {
        let aes = suites::aes_hardware();
        Ok(TlsLayer {
            server: Some(Arc::new(s.server_config_for(aes)?)),
            server_chacha: match aes {
                true => Some(Arc::new(s.server_config_for(false)?)),
                false => None,
            },
            client: None,
            server_name: None,
            settings: Arc::new(s.clone()),
        })
    }

    /// The client side of `s`.
    pub fn client(s: &TlsSettings) -> Result<TlsLayer, String> {
        Ok(TlsLayer {
            server: None,
            server_chacha: None,
            client: Some(Arc::new(s.client_config()?)),
            server_name: s.server_name.clone().filter(|n| !n.is_empty()),
            settings: Arc::new(s.clone()),
        })
    }

    /// Server handshake over `stream`.
    pub async fn accept_tls(&self, stream: BoxStream) -> io::Result<TlsStream<ServerConnection>> {
        let cfg = self
            .server
            .clone()
            .ok_or_else(|| io::Error::other("TLS layer has no server side"))?;
        let conn = ServerConnection::new(cfg).map_err(io::Error::other)?;
        let mut s = TlsStream::new(stream, conn, true);
        if let Some(alt) = self.server_chacha.clone() {
            s.set_alternative(Box::new(move |hello: &[u8]| {
                match suites::prefers_aes(hello)? {
                    true => Some(None),
                    false => Some(ServerConnection::new(alt.clone()).ok()),
                }
            }));
        }
        s.handshake().await?;
        Ok(s)
    }

    /// Client handshake over `stream` to `server`.
    pub async fn connect_tls(
        &self,
        stream: BoxStream,
        server: &Destination,
    ) -> io::Result<TlsStream<ClientConnection>> {
        let cfg = self
            .client
            .clone()
            .ok_or_else(|| io::Error::other("TLS layer has no client side"))?;
        let name = match (&self.server_name, &server.addr) {
            (Some(n), _) => ServerName::try_from(n.clone()),
            (None, Address::Ip(ip)) => Ok(ServerName::IpAddress((*ip).into())),
            (None, Address::Domain(d)) => ServerName::try_from(d.clone()),
        }
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let conn = ClientConnection::new(cfg, name).map_err(io::Error::other)?;
        let mut s = TlsStream::new(stream, conn, false);
        s.handshake().await?;
        Ok(s)
    }
}

#[async_trait]
impl Layer for TlsLayer {
    async fn accept(&self, stream: BoxStream, info: &mut ConnInfo) -> io::Result<BoxStream> {
        let s = self.accept_tls(stream).await?;
        let c = s.connection();
        info.sni = c.server_name().map(Arc::from);
        info.alpn = c
            .alpn_protocol()
            .map(|a| Arc::from(String::from_utf8_lossy(a).as_ref()));
        own_records(s)
    }

    async fn connect(&self, stream: BoxStream, server: &Destination) -> io::Result<BoxStream> {
        own_records(self.connect_tls(stream, server).await?)
    }
}

/// A TLS 1.3 connection goes on in Ferry's own record layer; others stay with rustls.
fn own_records<C, D>(s: TlsStream<C>) -> io::Result<BoxStream>
where
    C: Handover
        + std::ops::DerefMut
        + std::ops::Deref<Target = rustls::ConnectionCommon<D>>
        + Send
        + Unpin
        + 'static,
    D: rustls::SideData + 'static,
{
    Ok(match s.into_tls13()? {
        Ok(own) => Box::new(own),
        Err(s) => Box::new(stream::Closing(s)),
    })
}

/// Parses a `pinnedPeerCertSha256` entry: 64 hex digits, colons allowed.
pub fn parse_pin(s: &str) -> Option<[u8; 32]> {
    let hex: String = s.chars().filter(|c| *c != ':').collect();
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// Lower-case hex.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
