//! Stream settings, parsed once, and the layer chains they build: inbounds accept through
//! PROXY protocol -> security (TLS) -> transport, outbounds dial tcp|unix -> security ->
//! transport. Each layer has the same two entry points, [`Layer::accept`] and
//! [`Layer::connect`], so a layer written once serves both sides.

use std::io;
use std::sync::Arc;

use async_trait::async_trait;

use super::{tcp::SockOpts, BoxStream, ChainDialer, Dialer, SocketDialer};
use crate::common::Destination;
use crate::session::ConnInfo;

/// One layer of a connection (PROXY protocol, TLS, WebSocket, ...).
#[async_trait]
pub trait Layer: Send + Sync + 'static {
    /// Server side: wraps an accepted stream, recording what it learns in `info`.
    async fn accept(&self, stream: BoxStream, info: &mut ConnInfo) -> io::Result<BoxStream>;
    /// Client side: wraps a dialed stream to `server`.
    async fn connect(&self, stream: BoxStream, server: &Destination) -> io::Result<BoxStream>;
}

/// `streamSettings.network`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Network {
    /// `tcp` / `raw`.
    #[default]
    Raw,
    /// `ws` / `websocket`.
    Ws(Arc<super::ws::WsSettings>),
    /// `httpupgrade`.
    HttpUpgrade(Arc<super::upgrade::UpgradeSettings>),
    /// `grpc` / `gun`.
    Grpc(Arc<super::grpc::GrpcSettings>),
}

/// `streamSettings.security`.
#[derive(Clone, Debug, Default)]
pub enum Security {
    #[default]
    None,
    /// TLS, with the side (server for inbounds, client for outbounds) already built.
    Tls(Arc<super::tls::TlsLayer>),
    /// REALITY, likewise.
    Reality(Arc<super::reality::RealityLayer>),
}

/// What Ferry understood of an object's `streamSettings`: one typed struct for inbounds and
/// outbounds alike.
#[derive(Clone, Debug, Default)]
pub struct StreamSettings {
    pub network: Network,
    pub security: Security,
    /// Inbounds: a PROXY protocol v1/v2 header precedes the client's bytes.
    pub accept_proxy_protocol: bool,
    pub sockopt: SockOpts,
    /// Outbounds: dial through the outbound with this tag (`sockopt.dialerProxy`, or
    /// `proxySettings.tag` on the outbound).
    pub dialer_proxy: Option<String>,
    /// `sockopt.trustedXForwardedFor`: header names whose presence makes an HTTP-based
    /// transport trust `X-Forwarded-For` (empty: always, as Xray 26.3).
    pub trusted_xff: Arc<[String]>,
    /// `tcpSettings.header` `type: "http"`.
    pub http_header: Option<Arc<super::http_header::HttpHeaderLayer>>,
}

impl StreamSettings {
    /// The layers above the socket, in the order they wrap it. An inbound's gRPC is not a
    /// layer (one connection carries many calls): see [`Acceptor::grpc`].
    pub fn layers(&self) -> Vec<Arc<dyn Layer>> {
        // PROXY protocol, TLS and the transports take their places here as they arrive
        // (their settings are refused by the config reader until then).
        let mut layers: Vec<Arc<dyn Layer>> = Vec::new();
        if self.accept_proxy_protocol {
            layers.push(Arc::new(super::proxy_protocol::AcceptProxyProtocol));
        }
        let tls_name = match &self.security {
            Security::None => None,
            Security::Tls(t) => {
                layers.push(t.clone());
                t.server_name().map(str::to_string)
            }
            Security::Reality(r) => {
                layers.push(r.clone());
                r.server_name().map(str::to_string)
            }
        };
        match &self.network {
            Network::Raw => {
                if let Some(h) = &self.http_header {
                    layers.push(h.clone());
                }
            }
            Network::Ws(s) => layers.push(Arc::new(super::ws::WsLayer {
                settings: s.clone(),
                tls_name,
                trusted_xff: self.trusted_xff.clone(),
            })),
            Network::HttpUpgrade(s) => {
                layers.push(Arc::new(super::httpupgrade::HttpUpgradeLayer {
                    settings: s.clone(),
                    tls_name,
                    trusted_xff: self.trusted_xff.clone(),
                }))
            }
            Network::Grpc(s) => layers.push(Arc::new(super::grpc::GrpcLayer {
                settings: s.clone(),
                tls_name,
                tls: matches!(self.security, Security::Tls(_)),
            })),
        }
        layers
    }

    /// The acceptor chain of an inbound.
    pub fn acceptor(&self) -> Acceptor {
        let mut layers = self.layers();
        let grpc = match &self.network {
            Network::Grpc(s) => {
                layers.pop();
                Some(Arc::new(super::grpc::GrpcServer {
                    settings: s.clone(),
                    trusted_xff: self.trusted_xff.clone(),
                }))
            }
            _ => None,
        };
        Acceptor { layers, grpc }
    }

    /// The dialer chain of an outbound: its own socket dialer, or `via` (another outbound)
    /// when it dials through one, then the layers.
    pub fn dialer(&self, via: Option<Arc<dyn Dialer>>) -> Arc<dyn Dialer> {
        let base = via.unwrap_or_else(|| {
            Arc::new(SocketDialer {
                opts: self.sockopt.clone(),
            })
        });
        let mut layers: Vec<_> = StreamSettings {
            accept_proxy_protocol: false,
            ..self.clone()
        }
        .layers();
        let grpc = match &self.network {
            Network::Grpc(s) => {
                layers.pop();
                Some(super::grpc::GrpcLayer {
                    settings: s.clone(),
                    tls_name: match &self.security {
                        Security::Tls(t) => t.server_name().map(str::to_string),
                        Security::Reality(r) => r.server_name().map(str::to_string),
                        Security::None => None,
                    },
                    tls: matches!(self.security, Security::Tls(_)),
                })
            }
            _ => None,
        };
        let below: Arc<dyn Dialer> = if layers.is_empty() {
            base
        } else {
            Arc::new(ChainDialer { base, layers })
        };
        match grpc {
            Some(g) => Arc::new(super::grpc::GrpcDialer::new(below, g)),
            None => below,
        }
    }
}

/// An inbound's acceptor chain.
#[derive(Clone, Default)]
pub struct Acceptor {
    layers: Vec<Arc<dyn Layer>>,
    grpc: Option<Arc<super::grpc::GrpcServer>>,
}

impl Acceptor {
    /// Runs an accepted stream through every layer.
    pub async fn accept(&self, mut s: BoxStream, info: &mut ConnInfo) -> io::Result<BoxStream> {
        for l in &self.layers {
            s = l.accept(s, info).await?;
        }
        Ok(s)
    }

    /// No layer at all (raw TCP or unix).
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// The gRPC server that takes the connection after the layers: its calls are the
    /// connections the protocol reads.
    pub fn grpc(&self) -> Option<&Arc<super::grpc::GrpcServer>> {
        self.grpc.as_ref()
    }
}
