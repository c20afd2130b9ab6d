//! Xray's gRPC management API on the wire (`../shared/specs/api.md`): HandlerService,
//! StatsService, LoggerService and RoutingService under Xray's package names (and the old
//! `v2ray.core.*` ones), so panels drive Ferry unmodified.
//!
//! * `pb`: the protobuf messages (`crate::pb`, re-exported here).
//! * `grpc.rs`: the HTTP/2 server (hyper + tonic's gRPC framing), one per connection, fed by
//!   `api.listen` or by the `api.tag` outbound (the older form: an inbound routed to the tag).
//! * `handler.rs`, `stats.rs`, `logger.rs`, `routing.rs`: the services.
//! * `decode.rs`: the configs panels send (inbounds, outbounds, accounts) turned into the
//!   Xray JSON shape Ferry's config reader takes: one config model, two front ends.

mod decode;
mod grpc;
mod handler;
mod logger;
pub use crate::pb;
mod routing;
mod stats;

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::app::instance::Core;
use crate::common::Destination;
use crate::config::reader::{self, ConfigError, Obj};
use crate::transport::listener::UnixPath;
use crate::transport::{BoxStream, Dialer, Listener, PacketConn};

/// The services `api.services` can name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Service {
    Handler,
    Stats,
    Logger,
    Routing,
}

impl Service {
    /// The service's gRPC name under Xray's package.
    pub fn grpc_name(self) -> &'static str {
        match self {
            Service::Handler => "xray.app.proxyman.command.HandlerService",
            Service::Stats => "xray.app.stats.command.StatsService",
            Service::Logger => "xray.app.log.command.LoggerService",
            Service::Routing => "xray.app.router.command.RoutingService",
        }
    }

    fn by_config_name(n: &str) -> Option<Service> {
        Some(match n.to_ascii_lowercase().as_str() {
            "handlerservice" => Service::Handler,
            "statsservice" => Service::Stats,
            "loggerservice" => Service::Logger,
            "routingservice" => Service::Routing,
            _ => return None,
        })
    }

    /// The service a gRPC service name means (`xray.…` or the old `v2ray.core.…`).
    fn by_grpc_name(n: &str) -> Option<Service> {
        let n = match n.strip_prefix("v2ray.core.") {
            Some(rest) => format!("xray.{rest}"),
            None => n.to_string(),
        };
        [
            Service::Handler,
            Service::Stats,
            Service::Logger,
            Service::Routing,
        ]
        .into_iter()
        .find(|s| s.grpc_name() == n)
    }
}

/// Where `api.listen` binds.
#[derive(Clone, Debug)]
pub enum ApiListen {
    Tcp(SocketAddr),
    Unix(UnixPath),
}

/// The `api` object.
pub struct ApiConfig {
    pub tag: String,
    pub listen: Option<ApiListen>,
    pub services: Vec<Service>,
    /// Streams the `api.tag` outbound hands over.
    hub: Arc<Hub>,
}

/// Connections routed to the API's tag, on their way to the gRPC server.
#[derive(Default)]
pub struct Hub {
    tx: Mutex<Option<mpsc::UnboundedSender<BoxStream>>>,
}

/// The outbound `api.tag` names: each connection routed to it is served by the gRPC API, as
/// in Xray (panels reach the API through a dokodemo-door/tunnel inbound and a routing rule).
pub struct ApiOutbound {
    hub: Arc<Hub>,
}

#[async_trait]
impl Dialer for ApiOutbound {
    async fn dial_tcp(&self, _dest: &Destination) -> io::Result<BoxStream> {
        let (ours, theirs) = tokio::io::duplex(64 * 1024);
        let tx = self
            .hub
            .tx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        match tx {
            Some(tx) if tx.send(Box::new(ours)).is_ok() => Ok(Box::new(theirs)),
            _ => Err(io::Error::other("the API is not running")),
        }
    }

    async fn dial_udp(&self, _dest: &Destination) -> io::Result<Box<dyn PacketConn>> {
        Err(io::Error::other("the API serves TCP only"))
    }
}

/// Reads `api`: `tag` (required, as in Xray: "API tag can't be empty."), `services`
/// (case-insensitive; unknown names warn) and `listen` (`host:port`, `/path` or `@name`).
/// Returns the config and the outbound its tag names.
pub fn parse(a: &Obj<'_>) -> reader::Result<(ApiConfig, Arc<dyn Dialer>)> {
    let tag = a
        .str("tag")?
        .filter(|t| !t.is_empty())
        .ok_or_else(|| ConfigError::new(a.key_path("tag"), "API tag can't be empty."))?;
    let mut services = Vec::new();
    if let Some((path, v)) = a.get("services") {
        for (i, n) in reader::as_str_list(v, &path)?.iter().enumerate() {
            match Service::by_config_name(n) {
                Some(s) => services.push(s),
                None => a.diag().warn(
                    &format!("{path}[{i}]"),
                    format!("{n:?} is not a service Ferry has (HandlerService, StatsService, LoggerService, RoutingService); ignored"),
                ),
            }
        }
    }
    let listen = match a.str("listen")?.filter(|l| !l.is_empty()) {
        None => None,
        Some(l) => Some(match UnixPath::parse(&l) {
            Some(u) => ApiListen::Unix(u),
            None => ApiListen::Tcp(l.parse().map_err(|_| {
                ConfigError::new(
                    a.key_path("listen"),
                    format!("{l:?} is not an ip:port address or a unix socket path"),
                )
            })?),
        }),
    };
    if let Some(ApiListen::Tcp(l)) = &listen {
        if !l.ip().is_loopback() {
            a.diag().warn(
                &a.key_path("listen"),
                format!("{l} is reachable from other machines and the API has no authentication (whoever reaches it can add inbounds and users and read all traffic); listen on 127.0.0.1 or a unix socket unless a firewall keeps others out"),
            );
        }
    }
    let hub = Arc::new(Hub::default());
    let out: Arc<dyn Dialer> = Arc::new(ApiOutbound { hub: hub.clone() });
    Ok((
        ApiConfig {
            tag,
            listen,
            services,
            hub,
        },
        out,
    ))
}

/// Starts the API: the gRPC server for connections routed to `api.tag`, and `api.listen`'s
/// listener when set. Returns the tasks to abort when the instance stops.
pub async fn start(cfg: ApiConfig, core: Arc<Core>) -> io::Result<Vec<JoinHandle<()>>> {
    let api = Arc::new(grpc::Api::new(core, cfg.services.clone(), cfg.tag.clone()));
    let mut tasks = Vec::new();
    let (tx, mut rx) = mpsc::unbounded_channel::<BoxStream>();
    *cfg.hub.tx.lock().unwrap_or_else(|e| e.into_inner()) = Some(tx);
    let routed = api.clone();
    tasks.push(tokio::spawn(async move {
        while let Some(s) = rx.recv().await {
            tokio::spawn(grpc::serve_conn(s, routed.clone()));
        }
    }));
    if let Some(l) = &cfg.listen {
        let listener = match l {
            ApiListen::Tcp(a) => Listener::tcp(*a, Default::default()),
            ApiListen::Unix(p) => Listener::unix(p),
        }
        .map_err(|e| io::Error::new(e.kind(), format!("api.listen: {e}")))?;
        tracing::info!("API listening on {}", listener.local()?);
        let api = api.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                match listener.accept().await {
                    Ok((s, _, _)) => {
                        tokio::spawn(grpc::serve_conn(s, api.clone()));
                    }
                    Err(e) => {
                        tracing::warn!("api accept: {e}");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    }
                }
            }
        }));
    }
    Ok(tasks)
}
