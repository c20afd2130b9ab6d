//! Stream settings, parsed once, and the layer chains they build: inbounds accept through
//! PROXY protocol -> security (TLS) -> transport, outbounds dial tcp|unix -> security ->
//! transport. Each layer has the same two entry points, [`Layer::accept`] and
//! [`Layer::connect`], so a layer written once serves both sides.

use std::io;
use std::sync::Arc;

pub use super::layer::Layer;
use super::{tcp::SockOpts, BoxStream, ChainDialer, Dialer, SocketDialer};
use crate::session::ConnInfo;

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
    /// `xhttp` / `splithttp`.
    Xhttp(Arc<super::xhttp::XhttpSettings>),
    /// `hysteria`: QUIC, with Hysteria 2's authentication; not a layer over a stream (the
    /// `hysteria` protocol runs its own endpoint).
    Hysteria(Arc<super::quic::HysteriaSettings>),
    /// `kcp` / `mkcp`: mKCP over UDP, under the layers as TCP is (the socket below them is
    /// an mKCP connection: a listener of its own on inbounds, [`super::kcp::KcpDialer`] on
    /// outbounds).
    Kcp(Arc<super::kcp::KcpSettings>),
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
    /// `finalmask`: UDP masks and QUIC settings (QUIC transports).
    pub finalmask: Arc<super::quic::FinalMask>,
}

impl StreamSettings {
    /// The layers above the socket, in the order they wrap it. An inbound's gRPC or XHTTP is
    /// not a layer (one connection carries many calls): see [`Acceptor::server`]; an
    /// outbound's XHTTP is a dialer over these layers.
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
            Network::Xhttp(_) | Network::Hysteria(_) | Network::Kcp(_) => {}
        }
        layers
    }

    /// The TLS or REALITY server name a client sends.
    fn tls_name(&self) -> Option<String> {
        match &self.security {
            Security::Tls(t) => t.server_name().map(str::to_string),
            Security::Reality(r) => r.server_name().map(str::to_string),
            Security::None => None,
        }
    }

    /// An XHTTP leg's client over these settings' socket and layers (`via`: another outbound).
    pub fn xhttp_leg(
        &self,
        s: &Arc<super::xhttp::XhttpSettings>,
        via: Option<Arc<dyn Dialer>>,
    ) -> Arc<super::xhttp::client::LegClient> {
        use super::xhttp::client::{LegClient, Version};
        let base = via.unwrap_or_else(|| {
            Arc::new(SocketDialer {
                opts: self.sockopt.clone(),
            })
        });
        let layers = StreamSettings {
            accept_proxy_protocol: false,
            ..self.clone()
        }
        .layers();
        let below: Arc<dyn Dialer> = if layers.is_empty() {
            base
        } else {
            Arc::new(ChainDialer { base, layers })
        };
        // As Xray: REALITY is HTTP/2; TLS is HTTP/1.1 when its ALPN is exactly http/1.1,
        // else HTTP/2; no TLS is HTTP/1.1.
        let version = match &self.security {
            Security::Reality(_) => Version::H2,
            Security::Tls(t) if t.client_alpn() == [b"http/1.1".to_vec()] => Version::H1,
            Security::Tls(_) => Version::H2,
            Security::None => Version::H1,
        };
        let host = if !s.host.is_empty() {
            s.host.clone()
        } else {
            self.tls_name().unwrap_or_default()
        };
        Arc::new(LegClient::new(
            below,
            s.clone(),
            version,
            !matches!(self.security, Security::None),
            host,
        ))
    }

    /// The acceptor chain of an inbound.
    pub fn acceptor(&self) -> Acceptor {
        let mut layers = self.layers();
        let server = match &self.network {
            Network::Grpc(s) => {
                layers.pop();
                Some(ConnServer::Grpc(Arc::new(super::grpc::GrpcServer {
                    settings: s.clone(),
                    trusted_xff: self.trusted_xff.clone(),
                })))
            }
            Network::Xhttp(s) => Some(ConnServer::Xhttp(Arc::new(
                super::xhttp::server::XhttpServer::new(s.clone(), self.trusted_xff.clone()),
            ))),
            _ => None,
        };
        Acceptor { layers, server }
    }

    /// The dialer chain of an outbound: its own socket dialer, or `via` (another outbound)
    /// when it dials through one, then the layers.
    pub fn dialer(&self, via: Option<Arc<dyn Dialer>>) -> Arc<dyn Dialer> {
        if let Network::Xhttp(s) = &self.network {
            let up = self.xhttp_leg(s, via);
            let down = s
                .download
                .as_ref()
                .map(|d| ((d.0.leg)(), d.0.server.clone()));
            let mode = super::xhttp::client::XhttpDialer::resolve(
                s.mode,
                matches!(self.security, Security::Reality(_)),
                down.is_some(),
            );
            return Arc::new(super::xhttp::client::XhttpDialer { up, down, mode });
        }
        let mut base = via.unwrap_or_else(|| {
            Arc::new(SocketDialer {
                opts: self.sockopt.clone(),
            })
        });
        if let Network::Kcp(k) = &self.network {
            base = Arc::new(super::kcp::KcpDialer {
                base,
                settings: k.clone(),
                masks: self.finalmask.udp.clone(),
            });
        }
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

/// A server that takes a connection after the layers and serves many proxied connections
/// on it (each of them goes to the protocol as a connection of its own).
#[derive(Clone)]
pub enum ConnServer {
    Grpc(Arc<super::grpc::GrpcServer>),
    Xhttp(Arc<super::xhttp::server::XhttpServer>),
}

impl ConnServer {
    /// Serves `stream` until it ends, handing each proxied connection to `each`.
    pub async fn serve(
        &self,
        stream: BoxStream,
        info: &ConnInfo,
        each: &(dyn Fn(BoxStream, ConnInfo) + Send + Sync),
    ) -> io::Result<()> {
        match self {
            ConnServer::Grpc(g) => g.serve(stream, info, each).await,
            ConnServer::Xhttp(x) => x.serve(stream, info, each).await,
        }
    }

    /// The transport's name, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            ConnServer::Grpc(_) => "gRPC",
            ConnServer::Xhttp(_) => "XHTTP",
        }
    }
}

/// An inbound's acceptor chain.
#[derive(Clone, Default)]
pub struct Acceptor {
    layers: Vec<Arc<dyn Layer>>,
    server: Option<ConnServer>,
}

impl Acceptor {
    /// Runs an accepted stream through every layer.
    pub async fn accept(&self, mut s: BoxStream, info: &mut ConnInfo) -> io::Result<BoxStream> {
        for l in &self.layers {
            s = l.accept(s, info).await?;
        }
        Ok(s)
    }

    /// [`Acceptor::accept`] within the handshake timeout `limit`, but for the layers that
    /// time themselves ([`Layer::times_itself`]); the layers after one of those get `limit`
    /// anew.
    pub async fn accept_within(
        &self,
        mut s: BoxStream,
        info: &mut ConnInfo,
        limit: std::time::Duration,
    ) -> io::Result<BoxStream> {
        let mut deadline = tokio::time::Instant::now() + limit;
        for l in &self.layers {
            if l.times_itself() {
                s = l.accept(s, info).await?;
                deadline = tokio::time::Instant::now() + limit;
                continue;
            }
            s = tokio::time::timeout_at(deadline, l.accept(s, info))
                .await
                .unwrap_or_else(|_| {
                    Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("handshake not done within {limit:?}"),
                    ))
                })?;
        }
        Ok(s)
    }

    /// No layer at all (raw TCP or unix).
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// The gRPC or XHTTP server that takes the connection after the layers: its calls are
    /// the connections the protocol reads.
    pub fn server(&self) -> Option<&ConnServer> {
        self.server.as_ref()
    }
}
