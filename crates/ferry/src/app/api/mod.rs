//! Xray's gRPC management API on the wire (as Xray's `app/proxyman/command` and
//! `app/stats/command` serve it): HandlerService, StatsService, LoggerService and
//! RoutingService under Xray's package names (and the old `v2ray.core.*` ones), so panels drive
//! Ferry unmodified.
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
mod state;
mod stats;

use std::io;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::app::instance::{Core, Instance};
use crate::transport::{BoxStream, Listener};

pub use crate::config::api::{parse, ApiConfig, ApiListen, ApiOutbound, Hub, Service};

/// Starts the API: the gRPC server for connections routed to `api.tag`, and `api.listen`'s
/// listener when set. Returns the tasks to abort when the instance stops.
pub async fn start(cfg: ApiConfig, core: Arc<Core>) -> io::Result<Vec<JoinHandle<()>>> {
    let api = Arc::new(state::Api::new(core, cfg.services.clone(), cfg.tag.clone()));
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
                    Ok((s, _)) => {
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

/// Starts an instance and, when the config has an `api` object, its API over it (the instance
/// runs everything below the API; this is what `ferry run` starts).
pub async fn start_instance(mut cfg: crate::config::Config) -> io::Result<Instance> {
    let api = cfg.api.take();
    let mut inst = Instance::start(cfg).await?;
    if let Some(api) = api {
        let tasks = start(api, inst.core().clone()).await?;
        inst.add_tasks(tasks);
    }
    Ok(inst)
}
