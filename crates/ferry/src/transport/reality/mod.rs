//! REALITY (`streamSettings.security: "reality"`): TLS 1.3 that, to anyone but its users, is a
//! real website. The server mirrors a client's ClientHello to the `target`; a client that proves
//! it knows the server's X25519 key (the authenticated session id) gets a handshake built on the
//! target's own ServerHello and record sizes, with a certificate signed by HMAC; anybody else is
//! spliced to the target and sees it byte for byte. The client sends a browser's ClientHello.
//! Reference: Xray's `transport/internet/reality` and the XTLS/REALITY server it wraps.
//!
//! rustls can build neither side (the client's session id depends on the ClientHello it is
//! part of; the server answers on top of another server's ServerHello), so this folder holds a
//! small TLS 1.3 engine for exactly one handshake shape (no HelloRetryRequest, no PSK, no
//! client certificates, no 0-RTT) on aws-lc-rs primitives, with its own record layer:
//! - [`hello`]: the ClientHello parser (server) and builder from browser templates (client),
//! - [`fingerprint`]: the browser templates, as data,
//! - [`keys`]: the TLS 1.3 key schedule and the REALITY auth key,
//! - [`cert`]: the temporary certificate and its HMAC signature,
//! - [`client`] / [`server`]: the two handshakes,
//!
//! and after the handshake the connection is Ferry's own TLS 1.3 record layer
//! ([`super::tls13`]), as every TLS 1.3 connection is.

pub mod cert;
pub mod client;
pub mod fingerprint;
pub mod hello;
pub mod keys;
pub mod server;

pub use super::tls13::record;
pub use super::tls13::stream;

use std::io;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::{BoxStream, Layer};
use crate::common::Destination;
use crate::session::ConnInfo;

pub use fingerprint::Fingerprint;

/// Xray's version as a REALITY client claims it in the session id (the release whose
/// fingerprint Ferry mirrors): servers since v26.7.11 refuse anything below 26.3.27 by default.
pub const CLIENT_VERSION: [u8; 3] = [26, 7, 28];

/// A token bucket on what the server forwards for a connection that is not REALITY's
/// (`limitFallbackUpload` / `limitFallbackDownload`). All zero: no limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RateLimit {
    /// Bytes let through unlimited first.
    pub after_bytes: u64,
    /// Steady rate; 0 = no limit.
    pub bytes_per_sec: u64,
    /// Bucket size (defaults to `bytes_per_sec` when 0).
    pub burst_bytes_per_sec: u64,
}

/// `realitySettings` of an inbound.
#[derive(Clone, Debug)]
pub struct ServerSettings {
    /// `target` (`dest`): where probes go and whose handshake is imitated.
    pub target: Destination,
    /// PROXY protocol version written to the target first (0: none).
    pub xver: u8,
    /// SNIs accepted, exact and case-sensitive (`""` accepts a ClientHello without SNI).
    pub server_names: Vec<String>,
    /// The X25519 private key.
    pub private_key: [u8; 32],
    /// Accepted short ids, zero-padded to 8 bytes.
    pub short_ids: Vec<[u8; 8]>,
    /// Client version window (`x.y.z`), inclusive.
    pub min_client_ver: Option<[u8; 3]>,
    pub max_client_ver: Option<[u8; 3]>,
    /// Largest accepted difference between the client's clock and ours (`maxTimeDiff`, ms; 0
    /// or absent: no check).
    pub max_time_diff: Option<Duration>,
    pub limit_upload: RateLimit,
    pub limit_download: RateLimit,
    /// `mldsa65Seed`: the certificate also carries an ML-DSA-65 signature over the hellos.
    pub mldsa65_seed: Option<[u8; 32]>,
}

/// `realitySettings` of an outbound.
#[derive(Clone, Debug)]
pub struct ClientSettings {
    /// SNI (default: the address dialed; an IP sends no SNI).
    pub server_name: Option<String>,
    pub fingerprint: Fingerprint,
    /// The server's X25519 public key (`password` / `publicKey`).
    pub public_key: [u8; 32],
    /// Zero-padded to 8 bytes.
    pub short_id: [u8; 8],
    /// `spiderX` (the path Xray's client crawls on a real certificate; Ferry closes instead).
    pub spider_x: String,
    /// `mldsa65Verify`: the server's ML-DSA-65 public key (1952 bytes), checked as well.
    pub mldsa65_verify: Option<Vec<u8>>,
}

/// The REALITY layer of a chain: the server side for inbounds, the client side for outbounds.
pub struct RealityLayer {
    server: Option<Arc<server::Server>>,
    client: Option<Arc<client::Client>>,
}

impl std::fmt::Debug for RealityLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RealityLayer")
            .field("server", &self.server.is_some())
            .field("client", &self.client.is_some())
            .finish()
    }
}

impl RealityLayer {
    /// The server side of `s`.
    pub fn server(s: ServerSettings) -> Result<RealityLayer, String> {
        Ok(RealityLayer {
            server: Some(Arc::new(server::Server::new(s)?)),
            client: None,
        })
    }

    /// The client side of `s`.
    pub fn client(s: ClientSettings) -> Result<RealityLayer, String> {
        Ok(RealityLayer {
            server: None,
            client: Some(Arc::new(client::Client::new(s)?)),
        })
    }

    /// Server side: how a stranger is carried to the target once REALITY lets it go (the relay,
    /// handed in by the layer above that has it; without one, a plain copy in both directions).
    pub fn relay_strangers_with(&self, relay: server::StrangerRelay) {
        if let Some(s) = &self.server {
            s.relay_strangers_with(relay);
        }
    }

    /// A client's configured `serverName`.
    pub fn server_name(&self) -> Option<&str> {
        self.client.as_ref()?.settings.server_name.as_deref()
    }
}

#[async_trait]
impl Layer for RealityLayer {
    async fn accept(&self, stream: BoxStream, info: &mut ConnInfo) -> io::Result<BoxStream> {
        let s = self
            .server
            .as_ref()
            .ok_or_else(|| io::Error::other("REALITY layer has no server side"))?;
        // No handshake timeout: the target ends what it would end (server.rs); this only
        // bounds a target that never does.
        let conn = tokio::time::timeout(server::ACCEPT_CAP, s.clone().accept(stream, info))
            .await
            .map_err(|_| {
                io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "REALITY: neither the client nor the target ended the handshake within {:?}",
                        server::ACCEPT_CAP
                    ),
                )
            })??;
        Ok(Box::new(conn))
    }

    fn times_itself(&self) -> bool {
        self.server.is_some()
    }

    async fn connect(&self, stream: BoxStream, server: &Destination) -> io::Result<BoxStream> {
        let c = self
            .client
            .as_ref()
            .ok_or_else(|| io::Error::other("REALITY layer has no client side"))?;
        Ok(Box::new(c.connect(stream, server).await?))
    }
}

/// A fresh X25519 key pair: (private, public), as `xray x25519` makes them.
pub fn generate_x25519() -> ([u8; 32], [u8; 32]) {
    let mut private = [0u8; 32];
    crate::common::rand::fill(&mut private);
    let public = keys::x25519_public(&private);
    (private, public)
}
