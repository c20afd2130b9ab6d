//! The gRPC server: HTTP/2 over any stream (hyper), gRPC framing and status trailers from
//! tonic, requests handed to the services as raw bytes so each method decodes its own message
//! and answers with Xray's error texts.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, BufMut, Bytes};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::Status;

use super::state::Api;
use super::Service;
use crate::transport::BoxStream;

impl Api {
    /// Answers one unary call: `method` of `service`, the request message as sent.
    async fn call(&self, service: Service, method: &str, req: Bytes) -> Result<Vec<u8>, Status> {
        let unknown = || {
            Status::unimplemented(format!(
                "unknown method {method} for service {}",
                service.grpc_name()
            ))
        };
        match service {
            Service::Handler => super::handler::call(self, method, req)
                .await
                .unwrap_or_else(|| Err(unknown())),
            Service::Stats => {
                super::stats::call(self, method, req).unwrap_or_else(|| Err(unknown()))
            }
            Service::Logger => {
                super::logger::call(self, method, req).unwrap_or_else(|| Err(unknown()))
            }
            Service::Routing => super::routing::call(self, method, req)
                .await
                .unwrap_or_else(|| Err(unknown())),
        }
    }
}

/// Serves HTTP/2 gRPC on one connection until it closes.
pub async fn serve_conn(stream: BoxStream, api: Arc<Api>) {
    let svc = hyper::service::service_fn(move |req| {
        let api = api.clone();
        async move { Ok::<_, Infallible>(route(api, req).await) }
    });
    if let Err(e) = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .serve_connection(TokioIo::new(stream), svc)
        .await
    {
        tracing::debug!("api connection: {e}");
    }
}

/// Picks the service and method from the path and runs the call.
async fn route(
    api: Arc<Api>,
    req: http::Request<hyper::body::Incoming>,
) -> http::Response<tonic::body::Body> {
    let path = req.uri().path().to_string();
    let (svc_name, method) = path
        .trim_start_matches('/')
        .split_once('/')
        .unwrap_or((path.as_str(), ""));
    let service = match Service::by_grpc_name(svc_name) {
        Some(s) if api.services.contains(&s) => s,
        _ => return Status::unimplemented(format!("unknown service {svc_name}")).into_http(),
    };
    let method = method.to_string();
    let mut grpc = tonic::server::Grpc::new(RawCodec);
    grpc.unary(
        Unary {
            api,
            service,
            method,
        },
        req,
    )
    .await
}

/// One unary call as a service tonic can drive.
struct Unary {
    api: Arc<Api>,
    service: Service,
    method: String,
}

impl tower_service::Service<tonic::Request<Bytes>> for Unary {
    type Response = tonic::Response<Vec<u8>>;
    type Error = Status;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Status>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: tonic::Request<Bytes>) -> Self::Future {
        let api = self.api.clone();
        let (service, method) = (self.service, self.method.clone());
        Box::pin(async move {
            api.call(service, &method, req.into_inner())
                .await
                .map(tonic::Response::new)
        })
    }
}

/// Messages as bytes both ways: each method decodes and encodes its own.
#[derive(Clone, Copy, Default)]
struct RawCodec;

impl Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> RawCodec {
        RawCodec
    }

    fn decoder(&mut self) -> RawCodec {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = Status;

    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        let n = src.remaining();
        Ok(Some(src.copy_to_bytes(n)))
    }
}
